package raftnode

import (
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
)

// The watchdog's rule: only a leader is cut off, only once its oldest
// write has been outstanding for the bound, and the fence comes down only
// once the write is done and Raft no longer makes this journal lead (or it
// is alone, so no one else could).
func TestWatchdogDecide(t *testing.T) {
	const bound = 5 * time.Second
	tests := []struct {
		name                  string
		fenced, leader, alone bool
		stuck                 time.Duration
		want                  watchdogAction
	}{
		{name: "leader, no write", leader: true, want: watchdogKeep},
		{name: "leader, write just under the bound", leader: true, stuck: bound - time.Nanosecond, want: watchdogKeep},
		{name: "leader, write at the bound", leader: true, stuck: bound, want: watchdogFence},
		{name: "leader, write long stuck", leader: true, stuck: time.Hour, want: watchdogFence},
		{name: "follower, write stuck", stuck: time.Hour, want: watchdogKeep},
		{name: "alone, write stuck", leader: true, alone: true, stuck: bound, want: watchdogFence},
		{name: "fenced, write still stuck, stepped down", fenced: true, stuck: time.Hour, want: watchdogKeep},
		{name: "fenced, write still stuck, still leader", fenced: true, leader: true, stuck: time.Hour, want: watchdogKeep},
		{name: "fenced, write done, still leader", fenced: true, leader: true, want: watchdogKeep},
		{name: "fenced, write done, stepped down", fenced: true, want: watchdogLift},
		{name: "fenced, writes under the bound again, stepped down", fenced: true, stuck: time.Millisecond, want: watchdogLift},
		{name: "fenced alone, write done", fenced: true, leader: true, alone: true, want: watchdogLift},
		{name: "fenced alone, write still stuck", fenced: true, leader: true, alone: true, stuck: bound, want: watchdogKeep},
	}
	for _, tt := range tests {
		if got := watchdogDecide(tt.fenced, tt.leader, tt.alone, tt.stuck, bound); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
}

// writeWatch reports the age of the oldest write in flight on its clock,
// and forgets a write once it ends.
func TestWriteWatchOldest(t *testing.T) {
	fc := fakeclock.New(time.Unix(1000, 0))
	w := newWriteWatch(fc, &Hooks{})
	if age, n := w.oldest(fc.Now()); age != 0 || n != 0 {
		t.Fatalf("idle: %v, %d", age, n)
	}
	first := w.track()
	fc.Advance(3 * time.Second)
	second := w.track()
	fc.Advance(time.Second)
	if age, n := w.oldest(fc.Now()); age != 4*time.Second || n != 2 {
		t.Fatalf("two in flight: oldest %v, %d, want 4s, 2", age, n)
	}
	w.done(first)
	if age, n := w.oldest(fc.Now()); age != time.Second || n != 1 {
		t.Fatalf("after the first ended: oldest %v, %d, want 1s, 1", age, n)
	}
	w.done(second)
	if age, n := w.oldest(fc.Now()); age != 0 || n != 0 {
		t.Fatalf("all ended: %v, %d", age, n)
	}
}
