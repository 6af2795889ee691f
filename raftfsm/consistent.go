package raftfsm

import (
	"bytes"
	"fmt"

	"github.com/pact-hpc/pact/internal/snapfile"
)

// Consistent returns the whole state as the state bytes a snapshot file
// carries (internal/snapfile), and the index of the last command it
// reflects, read under one lock so the two agree.
func (f *FSM) Consistent() ([]byte, uint64, int, error) {
	if r := f.Halted(); r != "" {
		return nil, 0, 0, fmt.Errorf("%w: %s", ErrHalted, r)
	}
	f.mu.RLock()
	s := f.snapshotLocked().snap
	index := f.applied.Load()
	f.mu.RUnlock()
	sortSnapshot(s)
	var buf bytes.Buffer
	err := snapfile.WriteState(&buf, s)
	return buf.Bytes(), index, len(s.GetNodes()), err
}
