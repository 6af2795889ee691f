package v1rpc

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/snapfile"
	"github.com/pact-hpc/pact/internal/version"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/raftnode"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Snapshotter reads a consistent copy of the whole replicated state
// (raftfsm.FSM): the encoded state, the index it is at, and its nodes.
type Snapshotter interface {
	Consistent() ([]byte, uint64, int, error)
}

// snapshotChunk is the size of each streamed piece of a snapshot.
const snapshotChunk = 256 << 10

// SaveSnapshot streams a consistent copy of the whole replicated state.
// Only the leader answers (a follower answers NO_LEADER, and the CLI moves
// to the next address): after a barrier, its registry reflects every write
// committed before the call, and VerifyLeader confirms it still leads.
func (q *Quorum) SaveSnapshot(_ *pactv1.SaveSnapshotRequest, stream pactv1.AdminService_SaveSnapshotServer) error {
	if !q.cfg.Raft.IsLeader() {
		return q.notLeaderFor("snapshots")
	}
	var state []byte
	var index uint64
	var nodes int
	if err := q.cfg.Raft.LeaderRead("the snapshot", func() (err error) {
		state, index, nodes, err = q.cfg.Snapshots.Consistent()
		return err
	}); err != nil {
		return err
	}
	rootSum := sha256.Sum256(q.cfg.Authority.Root().Raw)
	// The members: the state keeps the addresses of journals removed
	// since, and an operator reading the file wants the quorum it was.
	servers, _, err := q.cfg.Raft.Servers()
	if err != nil {
		return fmt.Errorf("%w: the Raft configuration: %w", raftnode.ErrNoLeader, err)
	}
	members := make([]string, 0, len(servers))
	for _, srv := range servers {
		members = append(members, string(srv.ID))
	}
	slices.Sort(members)
	h := &pactv1.SnapshotHeader{
		Domain:          q.cfg.Domain,
		RootSha256:      rootSum[:],
		Index:           index,
		Term:            q.cfg.Raft.TermOf(index),
		TakenAtUnixNano: q.cfg.Clock.Now().UnixNano(),
		TakenBy:         q.cfg.JournalID,
		Version:         version.Get().String(),
		Nodes:           uint64(nodes),
		QuorumId:        q.cfg.Raft.QuorumID(),
		Members:         members,
	}
	var buf bytes.Buffer
	buf.Grow(len(state) + 512)
	if err := snapfile.Write(&buf, h, state); err != nil {
		return err
	}
	data := buf.Bytes()
	for len(data) > 0 {
		n := min(len(data), snapshotChunk)
		if err := stream.Send(&pactv1.SaveSnapshotResponse{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	q.cfg.Logger.Info("snapshot saved by an operator", logkey.Actor, auth.FromContext(stream.Context()).ID.Name, logkey.Index, index, logkey.Nodes, nodes, logkey.Bytes, buf.Len())
	return nil
}

func (q *Quorum) notLeaderFor(what string) error {
	id := q.cfg.Raft.Leader()
	if id == "" {
		return fmt.Errorf("%w: no leader; a majority of the quorum must be up to take a consistent snapshot", raftnode.ErrNoLeader)
	}
	addr := ""
	if ji, ok := q.cfg.Records.Journal(id); ok {
		addr = " at " + ji.GetGrpcAddr()
	}
	return fmt.Errorf("%w: %s are taken on the leader, %s%s", raftnode.ErrNoLeader, what, id, addr)
}
