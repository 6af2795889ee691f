package raftnode

import (
	"io"
	"sync"
	"sync/atomic"

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
	// beforeApply, when set (Hooks.BeforeApply), runs before each entry
	// is applied and may hold it back.
	beforeApply *atomic.Pointer[func()]
	// restored runs after a snapshot was restored (at start, or one the
	// leader sent): a restore raises no apply event.
	restored func()
}

func (f *signalingFSM) Apply(l *raft.Log) any {
	if h := f.beforeApply.Load(); h != nil {
		(*h)()
	}
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
