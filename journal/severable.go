package journal

import (
	"errors"
	"io"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// errSevered is every outgoing Raft call of a severed transport.
var errSevered = errors.New("journal: raft transport severed")

// severableTransport is the Raft network transport with a switch that
// fails every outgoing call. A test (export_test.go, KillRaft) throws it
// before it stops Raft, so the journal goes silent as a crashed one does:
// hashicorp/raft's own shutdown first tells each follower, one last time,
// what it has committed, which a crash never does.
type severableTransport struct {
	*raft.NetworkTransport
	severed *atomic.Bool
}

func (t *severableTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if t.severed.Load() {
		return nil, errSevered
	}
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return &severablePipeline{AppendPipeline: p, severed: t.severed}, nil
}

func (t *severableTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.severed.Load() {
		return errSevered
	}
	return t.NetworkTransport.AppendEntries(id, target, args, resp)
}

func (t *severableTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if t.severed.Load() {
		return errSevered
	}
	return t.NetworkTransport.RequestVote(id, target, args, resp)
}

func (t *severableTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if t.severed.Load() {
		return errSevered
	}
	return t.NetworkTransport.RequestPreVote(id, target, args, resp)
}

func (t *severableTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if t.severed.Load() {
		return errSevered
	}
	return t.NetworkTransport.InstallSnapshot(id, target, args, resp, data)
}

func (t *severableTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	if t.severed.Load() {
		return errSevered
	}
	return t.NetworkTransport.TimeoutNow(id, target, args, resp)
}

// severablePipeline fails the pipelined AppendEntries of a severed
// transport.
type severablePipeline struct {
	raft.AppendPipeline
	severed *atomic.Bool
}

func (p *severablePipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if p.severed.Load() {
		return nil, errSevered
	}
	return p.AppendPipeline.AppendEntries(args, resp)
}
