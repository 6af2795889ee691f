package raftnode

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/pact-hpc/pact/internal/apierr"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// termReadyWait bounds how long a read waits for a new leader to commit
// an entry of its term before it is refused (retryably, NO_LEADER).
const termReadyWait = 2 * time.Second

// leaderReads serves the Raft read index on the leader: the commit index a
// read must wait for to reflect every write acknowledged before it started.
//
// A leader's commit index is only that once the leader has committed an
// entry of its own term. Until then (hashicorp/raft moves a new leader's
// commit index only when an entry of its term commits) it is the index it
// learned as a follower, which can be below writes the previous leader
// already acknowledged. So, as Consul and etcd do, the read index is served
// only after this leader has committed a barrier in its current term; a
// read arriving before that waits for the barrier, within a bound.
type leaderReads struct {
	r    *raft.Raft
	wait time.Duration // bound on waiting for this term's barrier

	mu      sync.Mutex
	ready   uint64        // the term in which this journal, leading, committed a barrier
	pending *termBarrier  // the barrier under way, if any
	closed  chan struct{} // a closed channel, for a term already ready
}

// termBarrier is one barrier run to make a term ready for reads.
type termBarrier struct {
	term uint64
	done chan struct{}
	err  error // set before done closes
}

func newLeaderReads(r *raft.Raft, wait time.Duration) *leaderReads {
	closed := make(chan struct{})
	close(closed)
	return &leaderReads{r: r, wait: wait, closed: closed}
}

// watch starts this term's barrier as soon as the journal gains the
// leadership, so the first read of the term rarely waits. Reads start it
// themselves when they find the term not ready (LeaderCh keeps only the
// latest transition), so a missed signal costs a read a round trip, never
// a stale answer.
func (g *leaderReads) watch(stop <-chan struct{}) {
	ch := g.r.LeaderCh()
	for {
		select {
		case leader := <-ch:
			if leader {
				g.start()
			}
		case <-stop:
			return
		}
	}
}

// start makes sure a barrier for the current term has run or is under way,
// and returns a channel closed when it has ended (at once if the term is
// ready) and the barrier whose end it signals (nil if ready).
func (g *leaderReads) start() (<-chan struct{}, *termBarrier) {
	g.mu.Lock()
	defer g.mu.Unlock()
	term := g.r.CurrentTerm()
	if g.ready == term {
		return g.closed, nil
	}
	if b := g.pending; b != nil && b.term == term {
		return b.done, b
	}
	b := &termBarrier{term: term, done: make(chan struct{})}
	g.pending = b
	go g.run(b)
	return b.done, b
}

// run commits a barrier and, if it committed in the term it was started
// for, marks that term ready. Raft answers the barrier once it is applied,
// or fails it when the leadership is lost or Raft shuts down.
func (g *leaderReads) run(b *termBarrier) {
	err := g.r.Barrier(g.wait).Error()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending == b {
		g.pending = nil
	}
	switch {
	case err != nil:
		b.err = err
	case g.r.CurrentTerm() != b.term:
		// Terms only grow: the barrier was appended in a later term than
		// b's, which must run its own.
		b.err = fmt.Errorf("a new term began during the barrier of term %d", b.term)
	default:
		// Appended in b.term (after the term was read, before it was read
		// again), by this journal as leader, and committed.
		g.ready = max(g.ready, b.term)
	}
	close(b.done)
}

// readIndex returns the read index if this journal leads and has committed
// an entry of its current term, after confirming with a quorum that it
// still leads. Otherwise it answers ErrNoLeader (retryable): it has lost
// the leadership, or, newly elected, it could not commit an entry of its
// term within the bound.
func (g *leaderReads) readIndex(ctx context.Context) (uint64, error) {
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	for {
		if g.r.State() != raft.Leader {
			return 0, fmt.Errorf("%w: this journal no longer leads", ErrNoLeader)
		}
		term := g.r.CurrentTerm()
		done, b := g.start()
		if b == nil {
			if err := g.r.VerifyLeader().Error(); err != nil {
				return 0, fmt.Errorf("%w: %w", ErrNoLeader, err)
			}
			idx := g.r.CommitIndex()
			if g.r.CurrentTerm() == term {
				// Leader through term (VerifyLeader confirmed it after the
				// read began) and ready in it: idx covers every write
				// acknowledged before.
				return idx, nil
			}
			continue // lost and won again meanwhile: the new term's barrier first
		}
		select {
		case <-done:
			if b.err != nil && g.r.State() == raft.Leader && g.r.CurrentTerm() == b.term {
				return 0, fmt.Errorf("%w: leader, newly elected in term %d, could not commit an entry of its term (%v); it cannot vouch for the previous leader's writes until it does; retry", ErrNoLeader, b.term, b.err)
			}
		case <-timer.C:
			return 0, fmt.Errorf("%w: leader, newly elected in term %d, has not committed an entry of its term within %s; it cannot vouch for the previous leader's writes until it does; retry", ErrNoLeader, term, g.wait)
		case <-ctx.Done():
			// %v: a read that ran out of time is unanswered, not a write
			// of unknown outcome (toStatus).
			return 0, fmt.Errorf("%w: waiting for the new leader to commit an entry of its term %d: %v", ErrNoLeader, term, ctx.Err())
		}
	}
}

// ReadBarrier makes the next local read reflect every write committed
// before it started (the Raft read-index protocol). It is the one way a
// journal confirms its copy with the leader; the index comes from
// leaderReads, here or at the leader through ReadIndex. It fails with
// ErrNoLeader (retryable) when the leader cannot vouch for the state.
func (n *Node) ReadBarrier(ctx context.Context) error {
	var idx uint64
	if n.raft.State() == raft.Leader {
		var err error
		if idx, err = n.reads.readIndex(ctx); err != nil {
			return err
		}
	} else {
		c, leader, err := n.leaderClient()
		if err != nil {
			return err
		}
		fctx, cancel := context.WithTimeout(ctx, forwardTimeout)
		defer cancel()
		// Wait for the channel (it may be reconnecting after a heal) within
		// the bound rather than fail at once.
		resp, err := c.ReadIndex(fctx, &pactv1.ReadIndexRequest{}, grpc.WaitForReady(true))
		if err != nil {
			return fmt.Errorf("%w: read index from leader %s: %s", ErrNoLeader, leader, apierr.FromError(err).Message)
		}
		idx = resp.GetCommitIndex()
	}
	if !n.waitApplied(ctx, idx) {
		return fmt.Errorf("%w: this journal is behind the leader", ErrNoLeader)
	}
	return nil
}

// ReadIndex is this leader's read index, for a follower's ReadBarrier
// (leaderReads: only once it has committed an entry of its term).
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	return n.reads.readIndex(ctx)
}
