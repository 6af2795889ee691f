package raftnode

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/logkey"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Activation batching (docs/architecture.md, "Batched activation").
//
// In a boot storm every enrollment ends in one Activate command, and in a
// renewal storm every renewal in one Renew command. Each
// command of its own costs a Raft entry on every journal (a future, a log
// record, an FSM call) and, on a follower, a gRPC call to the leader. The
// batcher groups the activations and renewals a journal holds at one
// moment into one BatchOp entry, which the FSM applies in order with a
// result each, exactly as if each had an entry of its own.
//
// When to send is a group commit, not a timer: an activation that finds
// no batch of this journal in flight goes at once, alone, so a quiet
// journal adds no latency at all; activations arriving while a batch is in
// flight wait for it and go together as the next batch, so the batch grows
// with the load and with the time a commit takes, by itself. A fixed
// window would add its whole length to every lone enrollment and still
// guess the commit time wrong on a loaded machine. Two bounds keep the
// wait short: a batch holds at most ActivationBatchMax commands (the rest
// wait for the next), and an activation never waits longer than
// ActivationBatchWindow behind a slow batch: then the waiting ones go
// beside it.
//
// Each caller gets its own result only once the batch entry is applied on
// this journal (propose, forward), so no certificate leaves before its
// activation has committed.

// batchCall is one activation waiting for its result.
type batchCall struct {
	cmd  *pactv1.Command // stamped by the proposer
	size int             // cmd's encoded size, with its place in a batch
	done chan batchOutcome
}

// maxBatchBytes bounds a batch's commands, encoded: a follower forwards
// the batch to the leader in one message (MaxForwardBytes), and the
// batch's own envelope (time, actor) takes a little of that. An
// activation with its certificate is about 800 bytes, so this, not
// ActivationBatchMax, is what bounds a follower's batches above about 80.
const maxBatchBytes = MaxForwardBytes - 1<<10

// fitting is how many of the calls at the head of queue, at most max, go
// into one batch within maxBatchBytes; always at least one.
func fitting(queue []*batchCall, max int) int {
	n, size := 0, 0
	for n < len(queue) && n < max {
		size += queue[n].size
		if n > 0 && size > maxBatchBytes {
			break
		}
		n++
	}
	return n
}

type batchOutcome struct {
	res *raftfsm.Result
	err error
}

// batcher groups activations. Its loop owns the queue; send runs each batch
// on a goroutine of its own.
type batcher struct {
	max    int
	window time.Duration
	clock  clock.Clock
	send   func([]*batchCall)
	in     chan *batchCall
	sent   chan struct{}
	stop   <-chan struct{}

	// hooks are a test's (Hooks.BatchQueued, Hooks.BatchBeforeSend, in a
	// testhooks build): queued is told the queue's length each time it
	// changes; beforeSend runs before a batch is proposed.
	hooks *Hooks
}

func newBatcher(max int, window time.Duration, clk clock.Clock, stop <-chan struct{}, send func([]*batchCall), hooks *Hooks) *batcher {
	return &batcher{max: max, window: window, clock: clk, send: send, in: make(chan *batchCall), sent: make(chan struct{}), stop: stop, hooks: hooks}
}

// submit queues c and waits for its outcome.
func (b *batcher) submit(ctx context.Context, c *batchCall) (*raftfsm.Result, error) {
	select {
	case b.in <- c:
	case <-ctx.Done():
		// Not queued: nothing was written.
		return nil, ctx.Err()
	case <-b.stop:
		return nil, fmt.Errorf("%w: journal shutting down", ErrNoLeader)
	}
	select {
	case out := <-c.done:
		return out.res, out.err
	case <-ctx.Done():
		// It may still commit; its certificate never leaves.
		return nil, fmt.Errorf("%w: the caller went away before its activation or renewal was known committed: %w", ErrOutcomeUnknown, ctx.Err())
	}
}

func (b *batcher) run() {
	var (
		queue    []*batchCall
		inFlight int
		timer    clock.Timer
		expired  <-chan time.Time
	)
	// flush sends the n calls at the head of the queue (fitting's count).
	flush := func(n int) {
		batch := queue[:n:n]
		queue = queue[n:]
		inFlight++
		before := b.hooks.batchBeforeSend()
		go func() {
			if before != nil {
				before(len(batch))
			}
			b.send(batch)
			select {
			case b.sent <- struct{}{}:
			case <-b.stop:
			}
		}()
	}
	for {
		before := len(queue)
		select {
		case c := <-b.in:
			queue = append(queue, c)
		case <-b.sent:
			inFlight--
		case <-expired:
			// The oldest waiting activation has waited a whole window
			// behind a slow batch: send what waits beside it.
			expired, timer = nil, nil
			if len(queue) > 0 {
				flush(fitting(queue, b.max))
			}
		case <-b.stop:
			if timer != nil {
				timer.Stop()
			}
			for _, c := range queue {
				c.done <- batchOutcome{err: fmt.Errorf("%w: journal shutting down", ErrNoLeader)}
			}
			return
		}
		for len(queue) > 0 {
			// Send when nothing is in flight, or when a whole batch waits:
			// ActivationBatchMax commands, or more than maxBatchBytes holds.
			n := fitting(queue, b.max)
			if inFlight > 0 && n < b.max && n == len(queue) {
				break
			}
			flush(n)
		}
		switch {
		case len(queue) == 0 && timer != nil:
			timer.Stop()
			timer, expired = nil, nil
		case len(queue) > 0 && timer == nil:
			timer = b.clock.NewTimer(b.window)
			expired = timer.C()
		}
		if len(queue) != before {
			b.hooks.batchQueued(len(queue))
		}
	}
}

// ProposeBatched stamps a command (an enrollment's Activate, a renewal's
// Renew) as Propose does, when it is submitted, and commits it in a batch
// with others when ActivationBatchMax allows. It returns like Propose:
// only after the entry is applied here, with the command's own result.
func (n *Node) ProposeBatched(ctx context.Context, cmd *pactv1.Command) (*raftfsm.Result, error) {
	n.stamp(cmd)
	if n.batcher == nil {
		return n.propose(ctx, cmd)
	}
	// A command in a batch is a repeated field's element: its tag and a
	// length of up to three bytes.
	size := proto.Size(cmd) + 4
	res, err := n.batcher.submit(ctx, &batchCall{cmd: cmd, size: size, done: make(chan batchOutcome, 1)})
	if err == nil && res != nil {
		err = res.Err
	}
	return res, err
}

// sendBatch proposes one batch and gives every caller its own outcome. A
// batch of one goes as the plain command it is.
func (n *Node) sendBatch(calls []*batchCall) {
	n.metrics.ObserveBatch(len(calls))
	ctx := context.Background()
	if len(calls) == 1 {
		res, err := n.propose(ctx, calls[0].cmd)
		calls[0].done <- batchOutcome{res: res, err: err}
		return
	}
	cmds := make([]*pactv1.Command, len(calls))
	for i, c := range calls {
		cmds[i] = c.cmd
	}
	env := &pactv1.Command{
		Actor: "journal/" + n.cfg.NodeID,
		Op:    &pactv1.Command_Batch{Batch: &pactv1.BatchOp{Commands: cmds}},
	}
	res, err := n.Propose(ctx, env) // stamps the envelope; its commands keep their own stamps
	if err == nil && len(res.Batch) != len(calls) {
		err = fmt.Errorf("journal: a batch of %d commands came back with %d results", len(calls), len(res.Batch))
	}
	if err != nil && olderLeader(err) {
		// A leader of the previous release (a rolling upgrade) refuses
		// the batch before writing it: send each activation alone.
		n.log.Info("the leader does not take batched activations (an older pact-journal?); sending them one by one", logkey.Err, err)
		n.sendEach(calls)
		return
	}
	for i, c := range calls {
		if err != nil {
			c.done <- batchOutcome{err: err}
			continue
		}
		c.done <- batchOutcome{res: res.Batch[i], err: res.Batch[i].Err}
	}
}

func (n *Node) sendEach(calls []*batchCall) {
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := n.propose(context.Background(), c.cmd)
			c.done <- batchOutcome{res: res, err: err}
		}()
	}
	wg.Wait()
}

// olderLeader reports whether err is the leader's refusal of a command it
// does not know: an INVALID_ARGUMENT answer to a forwarded batch, given
// before anything was written (peerServer.Propose).
func olderLeader(err error) bool {
	return apierr.FromError(err).Reason == apierr.InvalidArgument
}
