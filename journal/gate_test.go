package journal

import (
	"context"
	"errors"
	"testing"
	"time"

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
