package raftnode

import (
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// PeerClient is the peer service of another journal of the configuration.
type PeerClient struct {
	ID     string
	Client pactv1.JournalPeerServiceClient
}

// PeerClients returns the peer service of every other journal of the Raft
// configuration whose address is published (pact boot-policy capture
// asks them for a node's quote).
func (n *Node) PeerClients() ([]PeerClient, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []PeerClient
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == n.cfg.NodeID {
			continue
		}
		ji, ok := n.fsm.Journal(string(srv.ID))
		if !ok || ji.GetGrpcAddr() == "" {
			continue
		}
		c, err := n.peers.get(ji.GetGrpcAddr())
		if err != nil {
			continue
		}
		out = append(out, PeerClient{ID: string(srv.ID), Client: c})
	}
	return out, nil
}
