package raftfsm

import (
	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// DeclaredOps exposes the oneof cases of Command to the tests.
var DeclaredOps = declaredOps

// StateWithoutAuditIndex is f's whole state with every audit entry's log
// index cleared: commands applied in one batch entry and the same commands
// in entries of their own leave the same state but for those indexes.
func StateWithoutAuditIndex(f *FSM) *pactv1.Snapshot {
	f.mu.RLock()
	s := f.snapshotLocked().snap
	f.mu.RUnlock()
	sortSnapshot(s)
	for i, e := range s.Audit {
		e = proto.CloneOf(e)
		e.Index = 0
		s.Audit[i] = e
	}
	return s
}
