package raftfsm_test

import (
	"bytes"
	"testing"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

func setQuorum(id, expect, reason string) *pactv1.Command {
	return &pactv1.Command{AtUnixNano: t0 * 1e9, Actor: "journal/j1", Ignorable: true,
		Op: &pactv1.Command_SetQuorumId{SetQuorumId: &pactv1.SetQuorumIdOp{QuorumId: id, ExpectQuorumId: expect, Reason: reason}}}
}

// The quorum id is a compare-and-set: a leader records its own only over
// the one it read, so two leaders of an upgraded quorum cannot each record
// one, and a recover or restore replaces exactly the old one.
func TestSetQuorumID(t *testing.T) {
	f := raftfsm.New()
	a := &raftfsmtest.Applier{FSM: f}
	mustApply(t, a, setQuorum("q1", "", "bootstrap"))
	if got := f.Quorum(); got.GetQuorumId() != "q1" || got.GetSetAtIndex() != 1 || got.GetReason() != "bootstrap" {
		t.Fatalf("quorum %v", got)
	}
	if res := applyUnchanged(t, a, setQuorum("q1", "", "bootstrap")); res.Err != nil || !res.Idempotent {
		t.Errorf("the same id again: %+v, want idempotent", res)
	}
	applyFails(t, a, setQuorum("q2", "", "upgrade"), raftfsm.ErrInvalidCommand)
	applyFails(t, a, setQuorum("q2", "q0", "recover or restore"), raftfsm.ErrInvalidCommand)
	applyFails(t, a, setQuorum("", "q1", "recover or restore"), raftfsm.ErrInvalidCommand)
	applyFails(t, a, setQuorum(string(bytes.Repeat([]byte("x"), raftfsm.MaxQuorumIDLen+1)), "q1", "x"), raftfsm.ErrInvalidCommand)
	mustApply(t, a, setQuorum("q2", "q1", "recover or restore"))
	if got := f.Quorum().GetQuorumId(); got != "q2" {
		t.Fatalf("quorum id %q after the recover, want q2", got)
	}
	entries := f.Audit("", 0, 10)
	if n := len(entries); n != 2 || entries[1].GetAction() != "quorum-id" || entries[1].GetDetail() != "quorum id q2 (recover or restore), was q1" {
		t.Errorf("audit %v, want two quorum-id entries, the second saying what it replaced", entries)
	}

	// The id survives a snapshot and restore.
	g := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(g, snapshotBytes(t, f)); err != nil {
		t.Fatal(err)
	}
	if got := g.Quorum(); got.GetQuorumId() != "q2" || got.GetSetAtIndex() != f.Quorum().GetSetAtIndex() {
		t.Errorf("restored quorum %v, want %v", got, f.Quorum())
	}
	// A state without an id writes no quorum record (a journal of the
	// version before ids reads it).
	if s, err := raftfsm.DecodeSnapshot(snapshotBytes(t, raftfsm.New())); err != nil || s.GetQuorum() != nil {
		t.Errorf("an empty state's snapshot: %v, quorum %v", err, s.GetQuorum())
	}
}
