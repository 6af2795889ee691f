package raftnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/logkey"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Propose stamps cmd (stamp), commits it through Raft (here if this
// journal leads, through the leader otherwise) and returns its typed
// result. It returns only after the entry is applied here, so whatever the
// caller does next sees the new state (a journal that cannot apply it in
// time answers ErrOutcomeUnknown instead). A rule failure comes back as
// the error (from Result.Err); the Result is still returned.
func (n *Node) Propose(ctx context.Context, cmd *pactv1.Command) (*raftfsm.Result, error) {
	return n.propose(ctx, n.stamp(cmd))
}

// stamp fills in what every proposed command owes the log, and is the one
// place that does: this journal's clock (the time Apply decides by) and
// the ignorable marker from raftfsm's table of operations. Propose and
// ProposeBatched stamp; the journal adds who asked (its source and
// correlation id), never the time.
func (n *Node) stamp(cmd *pactv1.Command) *pactv1.Command {
	cmd.AtUnixNano = n.cfg.Clock.Now().UnixNano()
	cmd.Ignorable = raftfsm.Ignorable(cmd)
	return cmd
}

// propose commits a command already stamped: Propose's work, and a
// batched command's, which was stamped when it was submitted.
func (n *Node) propose(ctx context.Context, cmd *pactv1.Command) (*raftfsm.Result, error) {
	data, err := raftfsm.Encode(cmd)
	if err != nil {
		return nil, fmt.Errorf("journal: encode command: %w", err)
	}
	if n.raft.State() == raft.Leader {
		res, _, err := n.applyLocal(ctx, data, raftfsm.OpLabel(cmd))
		if !errors.Is(err, ErrNoLeader) {
			return res, err
		}
		// Lost the leadership just now: the new leader takes it.
	}
	return n.forward(ctx, data)
}

// ApplyForwarded commits a command another journal forwarded (checked
// and stamped by the peer service) on this journal, which must lead, and
// answers with its result and index.
func (n *Node) ApplyForwarded(ctx context.Context, data []byte) (*pactv1.ProposeResponse, error) {
	res, index, err := n.applyLocal(ctx, data, "forwarded")
	if err != nil && res == nil {
		return nil, err
	}
	return proposeResponse(index, res), nil
}

// applyLocal commits data on this journal, which must lead. It returns the
// typed result, the entry's index, and the rule error (or a Raft error).
func (n *Node) applyLocal(ctx context.Context, data []byte, op string) (*raftfsm.Result, uint64, error) {
	timeout := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < timeout {
			timeout = d
		}
	}
	if timeout <= 0 {
		return nil, 0, context.DeadlineExceeded
	}
	start := time.Now()
	f := n.raft.Apply(data, timeout)
	err := f.Error()
	n.metrics.ObserveApply(op, time.Since(start))
	if err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrEnqueueTimeout):
			// Never entered the log: nothing was written.
			return nil, 0, fmt.Errorf("%w: %w", ErrNoLeader, err)
		case errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown):
			// In the log but not known committed: a later leader may still
			// commit it, so the caller must not be told it was not written.
			return nil, 0, fmt.Errorf("%w: leadership lost before the entry was known committed: %w", ErrOutcomeUnknown, err)
		}
		// Anything else failed before the entry was in this journal's log:
		// above all, the log could not be written (a full or failing disk;
		// Raft passes the storage error on as text and steps down), so no
		// follower can have it either. Nothing was written: the caller may
		// retry, here once the disk is fixed, or at another journal.
		n.log.Error("raft could not take the entry; this journal steps down", logkey.Err, err)
		return nil, 0, fmt.Errorf("%w: this journal could not write its Raft log (is its disk full or failing?): %w", ErrNoLeader, err)
	}
	res, ok := f.Response().(*raftfsm.Result)
	if !ok {
		return nil, 0, fmt.Errorf("journal: unexpected apply response %T", f.Response())
	}
	return res, f.Index(), res.Err
}
