package journal

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/v1rpc"
)

// TestGateRenewalWaitsWhileItsDeadlineAllows: with every slot taken, an
// enrollment is refused after the gate's wait; a renewal whose deadline
// leaves time waits on (up to its deadline less renewalServeMargin, at
// most maxRenewalWait) and gets a slot freed meanwhile; a renewal without
// a deadline, or with a short one, waits as an enrollment does.
func TestGateRenewalWaitsWhileItsDeadlineAllows(t *testing.T) {
	start := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none
		renewal  bool
		// waited is how long the caller has waited when the slot is
		// freed; wantSlot whether it is still waiting then (and so gets
		// the slot) or was refused.
		waited   time.Duration
		wantSlot bool
	}{
		{"enrollment refused after the gate's wait", 15 * time.Second, false, 2 * time.Second, false},
		{"enrollment served within the gate's wait", 15 * time.Second, false, 2*time.Second - time.Millisecond, true},
		{"renewal with a 15 s deadline waits 12 s", 15 * time.Second, true, 12*time.Second - time.Millisecond, true},
		{"renewal refused once its deadline leaves no time to serve it", 15 * time.Second, true, 12 * time.Second, false},
		{"renewal with no deadline waits as an enrollment", 0, true, 2 * time.Second, false},
		{"renewal with a short deadline waits the gate's wait", 3 * time.Second, true, 2*time.Second - time.Millisecond, true},
		{"renewal with a long deadline waits at most maxRenewalWait", time.Hour, true, maxRenewalWait, false},
		{"renewal with a long deadline, served within maxRenewalWait", time.Hour, true, maxRenewalWait - time.Millisecond, true},
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
			acquire := g.acquire
			if tc.renewal {
				acquire = g.acquireRenewal
			}
			got := make(chan error, 1)
			go func() {
				release, err := acquire(ctx)
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
