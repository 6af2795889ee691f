package journal

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/v1rpc"
)

// TestGateWaitsWhileTheCallsDeadlineAllows: with every slot taken, a call
// (an enrollment, a renewal or a standby: every one reaches the gate
// through acquire) whose deadline leaves time waits on, up to its deadline
// less serveMargin and at most maxCallWait, and gets a slot freed
// meanwhile; a call without a deadline, or with a short one, waits the
// gate's own wait and is then refused.
func TestGateWaitsWhileTheCallsDeadlineAllows(t *testing.T) {
	start := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none
		// waited is how long the caller has waited when the slot is
		// freed; wantSlot whether it is still waiting then (and so gets
		// the slot) or was refused.
		waited   time.Duration
		wantSlot bool
	}{
		{"a 15 s call waits 12 s", 15 * time.Second, 12*time.Second - time.Millisecond, true},
		{"a 15 s call is refused once its deadline leaves no time to serve it", 15 * time.Second, 12 * time.Second, false},
		{"no deadline: the gate's wait", 0, 2*time.Second - time.Millisecond, true},
		{"no deadline: refused after the gate's wait", 0, 2 * time.Second, false},
		{"a short deadline still waits the gate's wait", 3 * time.Second, 2*time.Second - time.Millisecond, true},
		{"a short deadline is refused after the gate's wait", 3 * time.Second, 2 * time.Second, false},
		{"a long deadline waits at most maxCallWait", time.Hour, maxCallWait, false},
		{"a long deadline, served within maxCallWait", time.Hour, maxCallWait - time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := fakeclock.New(start)
			g := newGate(1, 2*time.Second, clk)
			held, err := g.acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var ctx context.Context = context.Background()
			if tc.deadline > 0 {
				ctx = deadlineOnly{Context: ctx, deadline: start.Add(tc.deadline)}
			}
			got := make(chan error, 1)
			go func() {
				release, err := g.acquire(ctx)
				if err == nil {
					release()
				}
				got <- err
			}()
			if !clk.WaitForTimers(1, 5*time.Second) {
				t.Fatal("the caller never waited for a slot")
			}
			clk.Advance(tc.waited)
			if !tc.wantSlot {
				// Its wait is over and the slot still held: refused.
				if err := <-got; !errors.Is(err, v1rpc.ErrOverloaded) {
					t.Fatalf("after %v: got %v, want %v", tc.waited, err, v1rpc.ErrOverloaded)
				}
				held()
				return
			}
			// Its wait is not over: only the slot can end it.
			held()
			if err := <-got; err != nil {
				t.Fatalf("slot freed after %v: got %v, want the slot", tc.waited, err)
			}
		})
	}
}

// deadlineOnly is a context that has a deadline and is never done: the
// gate reads the deadline against its own (fake) clock.
type deadlineOnly struct {
	context.Context
	deadline time.Time
}

func (d deadlineOnly) Deadline() (time.Time, bool) { return d.deadline, true }

// TestEnrollmentsQueueAtTheGateWithoutTheBudget: enrollments from fresh
// sources (a boot storm: one address per node) that find every gate slot
// taken wait for one without holding a reservation of the failure budget,
// so the calls queued behind the gate outnumber the budget and none of
// them is refused for it; each takes its reservation with its slot. In a
// guessing flood (the budget spent), a call given a slot frees it again
// and waits for the budget without it.
func TestEnrollmentsQueueAtTheGateWithoutTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		adm, lim, fc := newTestAdmission(t, 2) // two fresh failures may be evaluated at once
		g := newGate(1, 2*time.Second, fc)
		held, ok := g.tryAcquire()
		if !ok {
			t.Fatal("no free slot in a new gate")
		}
		ctx := deadlineOnly{Context: t.Context(), deadline: fc.Now().Add(15 * time.Second)}
		type result struct {
			admitted, release func()
			err               error
		}
		got := make(chan result, 4)
		sources := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}
		for _, src := range sources {
			go func() {
				admitted, release, err := admitEnrollment(ctx, adm, g, src)
				got <- result{admitted, release, err}
			}()
		}
		waiting(t, fc, len(sources), "every call waits for the slot")
		if n := adm.reserved[true]; n != 0 {
			t.Fatalf("%d reservations held by calls queued at the gate, want 0", n)
		}
		// Past the budget's own wait (10 s here), nobody was refused: the
		// queue is the gate's, and its wait runs to the deadline less 3 s.
		fc.Advance(11 * time.Second)
		synctest.Wait()
		select {
		case r := <-got:
			t.Fatalf("a call ended while queued at the gate: %v", r.err)
		default:
		}
		held()
		for range sources {
			r := <-got
			if r.err != nil {
				t.Fatalf("queued enrollment: %v", r.err)
			}
			if n := adm.reserved[true]; n != 1 {
				t.Fatalf("%d reservations with one slot taken, want 1", n)
			}
			r.admitted()
			r.release()
		}

		// A flood: a call queued at the gate while the budget lasted finds
		// it spent when its slot comes (twenty guesses failed meanwhile,
		// more than the budget regains within the admission's wait); it
		// frees the slot and waits for the budget; the slot is free
		// meanwhile.
		held, _ = g.tryAcquire()
		go func() {
			admitted, release, err := admitEnrollment(ctx, adm, g, "10.0.0.10")
			got <- result{admitted, release, err}
		}()
		waiting(t, fc, 1, "the call waits for the slot")
		for i := range 20 {
			lim.RecordFailure(fmt.Sprintf("10.0.1.%d", i), "", fc.Now())
		}
		held()
		synctest.Wait()
		if g.inFlight() != 0 {
			t.Fatalf("%d slots held while the only caller waits for the budget, want 0", g.inFlight())
		}
		fc.Advance(10 * time.Second)
		if r := <-got; r.err == nil || limitOf(r.err) != apierr.LimitJournal {
			t.Fatalf("flood: got %v, want RATE_LIMITED for the journal", r.err)
		}
	})
}
