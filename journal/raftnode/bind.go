package raftnode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/auth"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// ProbeJournalChain asks the journal at addr (its Raft port) for its
// certificate chain, as pact journal add does before the journal becomes a
// member: the chain must reach a domain root in a journal's shape and name
// journal id. Raft's records are not consulted: the add is what records
// the chain's journal CA for id (a replaced host's new one supersedes the
// old host's). It returns the chain the journal presented, leaf first.
func (n *Node) ProbeJournalChain(ctx context.Context, id, addr string) ([]*x509.Certificate, error) {
	var chain []*x509.Certificate
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return n.cfg.Credentials.ServerCertificate(), nil
		},
		InsecureSkipVerify: true, // identified by SPIFFE ID below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			certs, err := auth.ParsePeerChain(raw)
			if err != nil {
				return err
			}
			if err := n.cfg.PeerAuth.VerifyChain(certs); err != nil {
				return err
			}
			chain = certs
			return nil
		},
		NextProtos: []string{alpnRaft},
		Time:       n.cfg.Clock.Now,
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: journal %s does not answer at Raft address %s as a journal of domain %s (%v); start it first with --node-id %s --join --raft-listen %s and this domain's root, then re-run the add", ErrMembership, id, addr, n.cfg.Credentials.Domain(), err, id, addr)
	}
	defer c.Close()
	// Say what this is, so the other side answers and closes rather than
	// wait out its handshake timeout.
	var reply *pactv1.QuorumHelloReply
	if tc, ok := c.(*tls.Conn); ok && tc.ConnectionState().NegotiatedProtocol == alpnRaft {
		_ = tc.SetDeadline(time.Now().Add(2 * time.Second))
		reply, _ = n.dialHello(tc, pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_PROBE)
	}
	got, err := pki.IdentityOf(chain[0])
	if err != nil {
		return nil, err
	}
	if got.Name != id {
		return nil, fmt.Errorf("%w: the journal at %s is %s, not %s; check the id and the address (pact journal add ID RAFT_ADDR)", ErrMembership, addr, got.Name, id)
	}
	// A journal whose binary speaks less than the quorum (or less than
	// every member already does: the leader is about to raise the level)
	// could not apply the log: it would stop at the first entry it does
	// not speak. A journal of a release before levels answers no level.
	theirs := raftfsm.EffectiveLevel(reply.GetFeatureLevel())
	need := n.QuorumLevel()
	if m := n.MembersLevel(); m > need {
		need = m
	}
	if theirs < need {
		return nil, fmt.Errorf("%w: journal %s at %s runs release %s, which speaks quorum feature level %d, and every member of this quorum speaks level %d: install release %s or newer on it, then re-run the add (docs/upgrade.md)",
			ErrMembership, id, addr, orUnknownRelease(reply.GetRelease()), theirs, need, raftfsm.ReleaseOfLevel(need))
	}
	return chain, nil
}
