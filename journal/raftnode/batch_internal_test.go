package raftnode

import (
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// A batch still committing holds back what arrives behind it for the
// window and no longer: the timer armed for those waiting is exactly the
// window (nothing goes beside the batch a millisecond before it runs
// out), and once it has run out they go together beside the slow batch.
// (What waits behind a batch that commits in time goes with the next one:
// TestBatcherGroupsActivationsWhileOneIsInFlight.)
func TestBatcherWaitsTheWindowBehindASlowBatch(t *testing.T) {
	clk := fakeclock.New(time.Unix(1_800_000_000, 0))
	window := DefaultSettings().ActivationBatchWindow
	sent := make(chan int, 8)
	commit := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	b := newBatcher(256, window, clk, stop, func(calls []*batchCall) {
		sent <- len(calls)
		<-commit
		for _, c := range calls {
			c.done <- batchOutcome{res: &raftfsm.Result{}}
		}
	}, &Hooks{})
	go b.run()
	// queue hands c to the batcher's loop directly: once the send returns
	// the loop has it, and it takes the next one only after it has queued
	// this one (and armed the window's timer for it).
	queue := func() *batchCall {
		c := &batchCall{cmd: &pactv1.Command{}, size: 10, done: make(chan batchOutcome, 1)}
		b.in <- c
		return c
	}
	nextBatch := func() int {
		t.Helper()
		select {
		case n := <-sent:
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("no batch was sent")
			return 0
		}
	}

	first := queue()
	if n := nextBatch(); n != 1 {
		t.Fatalf("a lone activation went in a batch of %d, want 1 at once", n)
	}
	// Two arrive while it commits: they wait behind it.
	second, third := queue(), queue()
	if !clk.WaitForTimers(1, 10*time.Second) {
		t.Fatal("no window armed for the activations waiting behind a batch in flight")
	}
	clk.Advance(window - time.Millisecond)
	if clk.Timers() != 1 {
		t.Fatalf("the window ran out before %v", window)
	}
	select {
	case n := <-sent:
		t.Fatalf("a batch of %d went beside the one in flight before the window ran out", n)
	default:
	}
	clk.Advance(time.Millisecond)
	if n := nextBatch(); n != 2 {
		t.Fatalf("the activations that waited the window went in a batch of %d, want 2 beside the slow one", n)
	}
	close(commit)
	for _, c := range []*batchCall{first, second, third} {
		select {
		case out := <-c.done:
			if out.err != nil {
				t.Fatal(out.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an activation got no outcome")
		}
	}
}
