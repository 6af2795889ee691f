package raftfsm

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Restore builds every kind of record the snapshot format declares: a kind
// snapfile's rules accept and stateBuilder left out would be lost from a
// restored replica (Add panics on it rather than drop it).
func TestRestoreBuildsEveryRecordKind(t *testing.T) {
	kinds := (&pactv1.SnapshotRecord{}).ProtoReflect().Descriptor().Oneofs().ByName("record").Fields()
	if kinds.Len() < 11 {
		t.Fatalf("SnapshotRecord declares %d kinds of record; the test lost its way", kinds.Len())
	}
	for i := range kinds.Len() {
		kind := kinds.Get(i)
		t.Run(string(kind.Name()), func(t *testing.T) {
			rec := &pactv1.SnapshotRecord{}
			m := rec.ProtoReflect()
			m.Set(kind, protoreflect.ValueOfMessage(m.NewField(kind).Message()))
			defer func() {
				if v := recover(); v != nil {
					t.Errorf("Add(%s): %v", kind.Name(), v)
				}
			}()
			b := &stateBuilder{st: newState(1), auditCap: 1}
			b.Add(rec)
		})
	}
}
