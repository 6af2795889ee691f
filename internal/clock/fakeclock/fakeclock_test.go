package fakeclock

import (
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock"
)

func fired(t clock.Timer) bool {
	select {
	case <-t.C():
		return true
	default:
		return false
	}
}

// A timer fires on the Advance that reaches it, not before; one armed for
// a moment already past fires at once and is not pending, as a time.Timer
// does.
func TestTimers(t *testing.T) {
	c := New(time.Unix(1000, 0))
	later := c.NewTimer(time.Minute)
	if c.Timers() != 1 {
		t.Fatalf("%d timers pending, want 1", c.Timers())
	}
	c.Advance(59 * time.Second)
	if fired(later) {
		t.Fatal("fired before its time")
	}
	c.Advance(time.Second)
	if !fired(later) || c.Timers() != 0 {
		t.Fatalf("did not fire at its time (%d pending)", c.Timers())
	}
	for _, d := range []time.Duration{0, -time.Hour} {
		now := c.NewTimer(d)
		if !fired(now) || c.Timers() != 0 {
			t.Errorf("a timer for %v did not fire at once (%d pending)", d, c.Timers())
		}
	}
	stopped := c.NewTimer(time.Second)
	if !stopped.Stop() || c.Timers() != 0 {
		t.Fatal("Stop left the timer pending")
	}
	c.Advance(time.Hour)
	select {
	case <-stopped.C():
		t.Fatal("a stopped timer fired")
	default:
	}
}
