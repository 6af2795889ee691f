package raftnode

import (
	"context"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/raftfsm"
)

// appliedSignal is a broadcast: wait returns a channel that is closed at
// the next notify.
type appliedSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *appliedSignal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *appliedSignal) notify() {
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}

// signalingFSM is the registry as Raft sees it: every applied entry and
// every restored snapshot wakes the callers waiting in waitApplied, so a
// forwarded write is answered as soon as this journal has applied it.
type signalingFSM struct {
	*raftfsm.FSM
	signal *appliedSignal
	// hooks.beforeApply (Hooks.BeforeApply, in a testhooks build) runs
	// before each entry is applied and may hold it back.
	hooks *Hooks
	// restored runs after a snapshot was restored (at start, or one the
	// leader sent): a restore raises no apply event.
	restored func()
}

func (f *signalingFSM) Apply(l *raft.Log) any {
	f.hooks.beforeApply()
	res := f.FSM.Apply(l)
	f.signal.notify()
	return res
}

func (f *signalingFSM) Restore(rc io.ReadCloser) error {
	err := f.FSM.Restore(rc)
	f.signal.notify()
	if err == nil && f.restored != nil {
		f.restored()
	}
	return err
}

// appliedWait bounds how long a journal waits to apply an entry the
// leader has committed (waitApplied) before it gives up on showing it.
const appliedWait = 2 * time.Second

// waitApplied waits (bounded by appliedWait and ctx) until this journal's
// FSM reflects index, and reports whether it does. The FSM wakes it on
// every entry it applies; entries Raft applies without the FSM (no-ops,
// barriers) are caught by a short poll.
func (n *Node) waitApplied(ctx context.Context, index uint64) bool {
	if n.applied(index) {
		return true
	}
	n.hooks.waitingApplied()
	wait := appliedWait
	if d := n.hooks.applyWait(); d > 0 {
		wait = d
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for {
		woken := n.appliedSignal.wait()
		if n.applied(index) {
			return true
		}
		select {
		case <-woken:
		case <-poll.C:
		case <-deadline.C:
			return n.applied(index)
		case <-ctx.Done():
			return n.applied(index)
		}
	}
}

// applied reports whether the FSM reflects every entry through index.
// Raft hands entries to the FSM asynchronously and never hands it no-op or
// barrier entries, so the FSM's own index can stay below the commit index:
// the FSM is current once Raft has dispatched through index and the FSM
// has applied the last command among them (or they lie in a snapshot it
// restored).
func (n *Node) applied(index uint64) bool {
	if n.raft.AppliedIndex() < index {
		return false
	}
	fsmIndex := n.fsm.AppliedIndex()
	for i := index; i > fsmIndex; i-- {
		var l raft.Log
		if err := n.logs.GetLog(i, &l); err != nil {
			return true // compacted into a snapshot the FSM has restored
		}
		if l.Type == raft.LogCommand {
			// Entries up to a restored snapshot are in the FSM although
			// its own index restarted from zero.
			return i <= n.restoredThrough()
		}
	}
	return true
}

// restoredThrough is the index of the newest snapshot the FSM may have
// restored. Raft's Stats goes through its main loop, so it is asked only
// after the FSM has restored a snapshot it has not asked about yet.
func (n *Node) restoredThrough() uint64 {
	n.snapMu.Lock()
	defer n.snapMu.Unlock()
	if r := n.fsm.Restores(); r != n.snapRestores {
		if idx, err := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64); err == nil {
			n.snapIndex, n.snapRestores = idx, r
		}
	}
	return n.snapIndex
}
