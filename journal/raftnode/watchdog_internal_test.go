package raftnode

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/polltest"
)

// The watchdog's rule: only a leader is cut off, only once its oldest
// write has been outstanding for the bound and the disk has not answered a
// probe meanwhile while the journal was not starved (or for three times
// the bound whatever the disk says),
// and the fence comes down only once the write is done and Raft no longer
// makes this journal lead (or it is alone, so no one else could).
func TestWatchdogDecide(t *testing.T) {
	const bound = 5 * time.Second
	tests := []struct {
		name                  string
		fenced, leader, alone bool
		stuck                 time.Duration
		diskAnswers, starved  bool
		want                  watchdogAction
	}{
		{name: "leader, no write", leader: true, want: watchdogKeep},
		{name: "leader, write just under the bound", leader: true, stuck: bound - time.Nanosecond, want: watchdogKeep},
		{name: "leader, write at the bound", leader: true, stuck: bound, want: watchdogFence},
		{name: "leader, write long stuck", leader: true, stuck: time.Hour, want: watchdogFence},
		{name: "follower, write stuck", stuck: time.Hour, want: watchdogKeep},
		{name: "leader, slow write, the disk answers", leader: true, stuck: bound, diskAnswers: true, want: watchdogSlow},
		{name: "leader, slow write just under three bounds, the disk answers", leader: true, stuck: 3*bound - time.Nanosecond, diskAnswers: true, want: watchdogSlow},
		{name: "leader, write outstanding three bounds, the disk answers", leader: true, stuck: 3 * bound, diskAnswers: true, want: watchdogFence},
		{name: "leader, write under the bound, the disk answers", leader: true, stuck: bound - time.Nanosecond, diskAnswers: true, want: watchdogKeep},
		{name: "follower, slow write, the disk answers", stuck: bound, diskAnswers: true, want: watchdogKeep},
		{name: "fenced, write done, stepped down, the disk answers", fenced: true, diskAnswers: true, want: watchdogLift},
		{name: "fenced, write still stuck, stepped down, the disk answers", fenced: true, stuck: bound, diskAnswers: true, want: watchdogKeep},
		{name: "leader, slow write, the probe unanswered, the journal starved", leader: true, stuck: bound, starved: true, want: watchdogSlow},
		{name: "leader, slow write just under three bounds, the journal starved", leader: true, stuck: 3*bound - time.Nanosecond, starved: true, want: watchdogSlow},
		{name: "leader, write outstanding three bounds, the journal starved", leader: true, stuck: 3 * bound, starved: true, want: watchdogFence},
		{name: "leader, write under the bound, the journal starved", leader: true, stuck: bound - time.Nanosecond, starved: true, want: watchdogKeep},
		{name: "follower, write stuck, the journal starved", stuck: time.Hour, starved: true, want: watchdogKeep},
		{name: "fenced, write done, stepped down, the journal starved", fenced: true, starved: true, want: watchdogLift},
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
		if got := watchdogDecide(tt.fenced, tt.leader, tt.alone, tt.stuck, bound, tt.diskAnswers, tt.starved); got != tt.want {
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

// The watchdog's disk probe writes and syncs a page beside raft.db, in a
// file it removes; a probe that finished answers from its start on. One held by the disk (a
// test's stuck disk: the hold of the Raft writes) answers nothing until it
// finishes, and no second probe starts beside it.
func TestDiskProbe(t *testing.T) {
	fc := fakeclock.New(time.Unix(1000, 0))
	hooks := &Hooks{}
	p := &diskProbe{path: filepath.Join(t.TempDir(), probeFile), clock: fc, hooks: hooks}
	if p.answeredSince(time.Time{}) {
		t.Fatal("answered before any probe")
	}
	p.start()
	polltest.Until(t, 30*time.Second, time.Millisecond, func() bool { return p.answeredSince(fc.Now()) },
		"the probe of a working disk never answered")
	if _, err := os.Stat(p.path); !os.IsNotExist(err) {
		t.Fatalf("the probe's file is left behind: %v", err)
	}
	fc.Advance(time.Second)
	if p.answeredSince(fc.Now()) {
		t.Fatal("a probe started a second ago answers for a probe started now")
	}
	// A probe that fails (here: no such directory; a full disk's ENOSPC)
	// answers nothing.
	failing := &diskProbe{path: filepath.Join(t.TempDir(), "gone", probeFile), clock: fc, hooks: hooks}
	failing.start()
	polltest.Until(t, 30*time.Second, time.Millisecond, func() bool {
		failing.mu.Lock()
		defer failing.mu.Unlock()
		return !failing.inFlight
	}, "the failing probe never ended")
	if failing.answeredSince(time.Time{}) {
		t.Fatal("a probe that failed answered")
	}

	if !HooksBuilt {
		return // the stuck disk below is a test hook (-tags testhooks)
	}
	disk := make(chan struct{})
	var probes atomic.Int32
	hold := func() {
		probes.Add(1)
		<-disk
	}
	hooks.HoldWrites.Store(&hold)
	started := fc.Now()
	p.start()
	polltest.Until(t, 30*time.Second, time.Millisecond, func() bool { return probes.Load() == 1 }, "the probe never reached the disk")
	p.start() // one in flight already: no second probe
	fc.Advance(time.Second)
	if p.answeredSince(started) {
		t.Fatal("a probe held by the disk answered")
	}
	close(disk)
	polltest.Until(t, 30*time.Second, time.Millisecond, func() bool { return p.answeredSince(started) },
		"the probe never answered once the disk did")
	if n := probes.Load(); n != 1 {
		t.Fatalf("%d probes reached the disk, want 1: a second started beside the one in flight", n)
	}
}
