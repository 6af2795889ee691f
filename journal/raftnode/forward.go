package raftnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// forwardTimeout bounds a call to the leader, so a journal cut off from it
// answers Unavailable quickly instead of hanging.
const forwardTimeout = 3 * time.Second

// MaxMessageBytes is the largest gRPC message a journal's server takes
// (grpc.MaxRecvMsgSize): agents and the CLI send nothing near it, and a
// client that has proven nothing cannot make the journal buffer more.
const MaxMessageBytes = 64 << 10

// MaxForwardBytes bounds an encoded command a follower forwards to the
// leader, inside MaxMessageBytes with room for the ProposeRequest around
// it. Proposers keep under it: the batcher closes a batch before it, and a
// journal splits its liveness digest. The leader's server would refuse a
// larger message after it was sent, and the follower would log a size,
// not the command that had no chance.
const MaxForwardBytes = MaxMessageBytes - 1<<10

// ErrCommandTooLarge is a command no follower can forward (MaxForwardBytes):
// nothing was written.
var ErrCommandTooLarge = errors.New("journal: command too large to forward to the leader")

// forward sends an encoded command to the leader and waits until this
// journal has applied it too, so a read that follows sees it.
func (n *Node) forward(ctx context.Context, data []byte) (*raftfsm.Result, error) {
	if len(data) > MaxForwardBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded, at most %d", ErrCommandTooLarge, len(data), MaxForwardBytes)
	}
	leader, addr, err := n.leaderAddr()
	if err != nil {
		return nil, err
	}
	// Only a failure before the request could leave is "not written"; so
	// wait for a connected channel first, and treat any transport failure
	// after that as an unknown outcome.
	conn, ok := n.peers.ready(ctx, addr, time.Second)
	if !ok {
		return nil, fmt.Errorf("%w: cannot connect to leader %s at %s", ErrNoLeader, leader, addr)
	}
	fctx, cancel := context.WithTimeout(ctx, min(forwardTimeout, n.cfg.ApplyTimeout))
	defer cancel()
	resp, err := pactv1.NewJournalPeerServiceClient(conn).Propose(fctx, &pactv1.ProposeRequest{Command: data})
	if err != nil {
		pe := apierr.FromError(err)
		switch {
		case pe.Reason == apierr.NoLeader:
			// A leader that stepped down refuses before taking the entry.
			return nil, fmt.Errorf("%w: %s", ErrNoLeader, pe.Message)
		case pe.Reason == apierr.OutcomeUnknown:
			return nil, fmt.Errorf("%w: %s", ErrOutcomeUnknown, pe.Message)
		case pe.Code == codes.PermissionDenied || pe.Code == codes.Unauthenticated:
			// The leader refused this journal as a peer (removed, another
			// quorum): nothing was written, and the caller's answer is
			// elsewhere, not a refusal of its own.
			return nil, fmt.Errorf("%w: leader %s refuses this journal as a peer: %s; try another journal", ErrNoLeader, leader, pe.Message)
		case pe.Reason != "":
			// Any other answer of the leader stands as it is.
			return nil, err
		case pe.Code == codes.Unavailable, pe.Code == codes.DeadlineExceeded, pe.Code == codes.Canceled:
			// The request may have reached the leader and committed.
			return nil, fmt.Errorf("%w: forwarded to leader %s, no answer: %s", ErrOutcomeUnknown, leader, pe.Message)
		}
		return nil, fmt.Errorf("journal: forwarding to leader %s: %w", leader, err)
	}
	res := resultOf(resp)
	for _, r := range resp.GetBatch() {
		res.Batch = append(res.Batch, resultOf(r))
	}
	if !n.waitApplied(ctx, resp.GetIndex()) {
		// Committed, but this journal cannot show it yet: answering now
		// would break propose's promise that the caller sees the new state.
		return nil, fmt.Errorf("%w: leader %s committed the write (Raft index %d), but this journal (%s) lags the leader and has not applied it yet, so it cannot show the result; check with a read before retrying", ErrOutcomeUnknown, leader, resp.GetIndex(), n.cfg.NodeID)
	}
	return res, res.Err
}

// resultOf reads the leader's answer to one command.
func resultOf(resp *pactv1.ProposeResponse) *raftfsm.Result {
	res := &raftfsm.Result{Node: resp.GetNode(), Idempotent: resp.GetIdempotent()}
	if code := resp.GetErrorCode(); code != "" {
		res.Err = ruleErrorOf(resp)
		if res.Err == nil {
			res.Err = fmt.Errorf("journal: leader answered unknown error %s: %s", code, resp.GetErrorMessage())
		}
	}
	return res
}

// ruleErrorOf rebuilds the leader's rule error from its codes: the exact
// code (a refinement's own), else the code of the error it refines (a
// newer release's refinement this journal does not know). A leader of
// release 0.1.0 sends no exact code: raftfsm.ErrorFromPreviousRelease.
func ruleErrorOf(resp *pactv1.ProposeResponse) error {
	msg := resp.GetErrorMessage()
	exact := resp.GetExactErrorCode()
	if exact == "" {
		return raftfsm.ErrorFromPreviousRelease(resp.GetErrorCode(), msg)
	}
	if err := raftfsm.ErrorFromCode(exact, msg); err != nil {
		return err
	}
	return raftfsm.ErrorFromCode(resp.GetErrorCode(), msg)
}

// proposeResponse is the answer to a forwarded command applied at index.
func proposeResponse(index uint64, res *raftfsm.Result) *pactv1.ProposeResponse {
	out := &pactv1.ProposeResponse{Index: index, Node: res.Node, Idempotent: res.Idempotent}
	if res.Err != nil {
		// A journal of the previous release reads error_code alone: for a
		// refinement, the code of the error it refines, which it knows.
		out.ExactErrorCode = raftfsm.ErrorCode(res.Err)
		out.ErrorCode = raftfsm.BaseCode(out.ExactErrorCode)
		out.ErrorMessage = res.Err.Error()
	}
	for _, r := range res.Batch {
		out.Batch = append(out.Batch, proposeResponse(index, r))
	}
	return out
}
