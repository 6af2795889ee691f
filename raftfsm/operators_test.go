package raftfsm_test

import (
	"slices"
	"testing"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

func operator(name, role, serial string, notBefore, notAfter int64, by string) *pactv1.Operator {
	return &pactv1.Operator{Name: name, Role: role, Serial: serial, NotBeforeUnix: notBefore, NotAfterUnix: notAfter, IssuedBy: by}
}

func TestOperatorRecordAndRevoke(t *testing.T) {
	f := raftfsm.New()
	a := &raftfsmtest.Applier{FSM: f}
	mustApply(t, a, at(t0).RecordOperator(operator("alice", "platform-admin", "a1", t0, t0+7*day, "admin/root")))
	mustApply(t, a, at(t0).RecordOperator(operator("bob", "viewer", "b1", t0, t0+7*day, "admin/alice")))
	if st, _ := f.CheckOperator("alice", "a1", t0); st != raftfsm.OperatorRecorded {
		t.Fatalf("alice a1 = %v, want recorded", st)
	}
	if st, _ := f.CheckOperator("carol", "c1", t0); st != raftfsm.OperatorUnrecorded {
		t.Fatalf("carol c1 = %v, want unrecorded", st)
	}
	// Recording again is idempotent and changes nothing.
	if res := applyUnchanged(t, a, at(t0+5).RecordOperator(operator("alice", "platform-admin", "a1", t0, t0+7*day, "admin/root"))); res.Err != nil || !res.Idempotent {
		t.Errorf("re-record = %v idempotent %v", res.Err, res.Idempotent)
	}
	// Refusals change nothing.
	applyFails(t, a, at(t0).RecordOperator(operator("bad name!", "viewer", "x", t0, t0+day, "")), raftfsm.ErrInvalidCommand)
	applyFails(t, a, at(t0).RecordOperator(operator("dave", "", "x", t0, t0+day, "")), raftfsm.ErrInvalidCommand)
	applyFails(t, a, at(t0).RevokeOperator("", "nope"), raftfsm.ErrNotFound)
	applyFails(t, a, at(t0).RevokeOperator("alice", "a1"), raftfsm.ErrInvalidCommand)
	applyFails(t, a, at(t0).RevokeOperator("", ""), raftfsm.ErrInvalidCommand)

	// By serial: that credential only.
	mustApply(t, a, at(t0+10).RevokeOperator("", "b1"))
	if st, why := f.CheckOperator("bob", "b1", t0); st != raftfsm.OperatorRevoked || why == "" {
		t.Errorf("bob b1 = %v %q, want revoked with a reason", st, why)
	}
	if res := applyUnchanged(t, a, at(t0+11).RevokeOperator("", "b1")); res.Err != nil || !res.Idempotent {
		t.Errorf("revoking twice = %v idempotent %v", res.Err, res.Idempotent)
	}
	// A revoked serial cannot be recorded again.
	applyFails(t, a, at(t0+12).RecordOperator(operator("bob", "viewer", "b1", t0, t0+7*day, "admin/root")), raftfsm.ErrOperatorRevoked)

	// By name: every credential of the name issued until now, recorded or
	// not (one signed offline, dated by its NotBefore).
	mustApply(t, a, at(t0+20).RecordOperator(operator("alice", "platform-admin", "a2", t0+20, t0+7*day, raftfsm.IssuedAtFirstUse)))
	mustApply(t, a, at(t0+30).RevokeOperator("alice", ""))
	for _, serial := range []string{"a1", "a2", "a-offline"} {
		if st, _ := f.CheckOperator("alice", serial, t0+25); st != raftfsm.OperatorRevoked {
			t.Errorf("alice %s after name revocation = %v, want revoked", serial, st)
		}
	}
	applyFails(t, a, at(t0+40).RecordOperator(operator("alice", "viewer", "a-old", t0+29, t0+7*day, raftfsm.IssuedAtFirstUse)), raftfsm.ErrOperatorRevoked)
	// A credential issued after the revocation is good.
	mustApply(t, a, at(t0+40).RecordOperator(operator("alice", "platform-admin", "a3", t0-60+40, t0+7*day, "admin/root")))
	if st, _ := f.CheckOperator("alice", "a3", t0); st != raftfsm.OperatorRecorded {
		t.Errorf("alice a3 issued after the revocation = %v, want recorded", st)
	}
	if st, _ := f.CheckOperator("alice", "a-new", t0+31); st != raftfsm.OperatorUnrecorded {
		t.Errorf("an offline credential dated after the revocation = %v, want unrecorded (accepted)", st)
	}
	ops, names := f.Operators()
	var got []string
	for _, o := range ops {
		got = append(got, o.GetSerial())
	}
	if want := []string{"a1", "a2", "a3", "b1"}; !slices.Equal(got, want) {
		t.Errorf("Operators() = %v, want %v", got, want)
	}
	if len(names) != 1 || names[0].GetName() != "alice" || names[0].GetRevokedAtUnixNano() != (t0+30)*1e9 {
		t.Errorf("name revocations = %v", names)
	}

	// Snapshot round trip keeps records and name revocations.
	g := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(g, snapshotBytes(t, f)); err != nil {
		t.Fatal(err)
	}
	if st, _ := g.CheckOperator("alice", "a-offline", t0+25); st != raftfsm.OperatorRevoked {
		t.Error("restored replica forgot the name revocation")
	}
	if st, _ := g.CheckOperator("alice", "a3", t0); st != raftfsm.OperatorRecorded {
		t.Error("restored replica forgot a record")
	}

	// Expired records are pruned by a later command's time.
	mustApply(t, a, at(t0+8*day).RecordOperator(operator("erin", "viewer", "e1", t0+8*day, t0+9*day, "admin/root")))
	if ops, _ := f.Operators(); len(ops) != 1 || ops[0].GetSerial() != "e1" {
		t.Errorf("after expiry: %d records, want only e1", len(ops))
	}
}

func TestRetireIntermediate(t *testing.T) {
	f := raftfsm.New()
	a := &raftfsmtest.Applier{FSM: f}
	mustApply(t, a, at(t0).PublishIntermediate(raftfsmtest.Intermediate("journal-1", "i-1", t0+day)))
	mustApply(t, a, at(t0).PublishIntermediate(raftfsmtest.Intermediate("journal-3", "i-3", t0+day)))

	// Unknown serial: nothing changes, not even the known one.
	applyFails(t, a, at(t0).RetireIntermediate((t0+600)*1e9, "i-3", "i-9"), raftfsm.ErrNotFound)
	applyFails(t, a, at(t0).RetireIntermediate((t0+600)*1e9), raftfsm.ErrInvalidCommand)

	mustApply(t, a, at(t0+10).RetireIntermediate((t0+600)*1e9, "i-3"))
	in, _ := f.Intermediate("i-3")
	for _, tc := range []struct {
		now  int64
		want string
		live []string
	}{
		{t0 + 10, "retiring", []string{"i-1", "i-3"}},
		{t0 + 599, "retiring", []string{"i-1", "i-3"}},
		{t0 + 600, "revoked", []string{"i-1"}},
	} {
		if got := raftfsm.IntermediateState(in, tc.now*1e9); got != tc.want {
			t.Errorf("state at t0+%d = %s, want %s", tc.now-t0, got, tc.want)
		}
		if got := serials(f.IntermediatesAt(tc.now * 1e9)); !slices.Equal(got, tc.live) {
			t.Errorf("live at t0+%d = %v, want %v", tc.now-t0, got, tc.live)
		}
	}
	// A later deadline never extends an earlier one; an earlier one shortens it.
	applyUnchanged(t, a, at(t0+20).RetireIntermediate((t0+900)*1e9, "i-3"))
	mustApply(t, a, at(t0+30).RetireIntermediate(0, "i-3")) // now
	if got := serials(f.IntermediatesAt((t0 + 30) * 1e9)); !slices.Equal(got, []string{"i-1"}) {
		t.Errorf("after immediate revocation: live = %v", got)
	}
	// The journal publishing the same intermediate again does not undo it,
	// and nobody may publish one already retired.
	mustApply(t, a, at(t0+40).PublishIntermediate(raftfsmtest.Intermediate("journal-3", "i-3", t0+day)))
	if in, _ := f.Intermediate("i-3"); !raftfsm.IntermediateRevoked(in, (t0+40)*1e9) {
		t.Error("re-publishing un-revoked the intermediate")
	}
	retired := raftfsmtest.Intermediate("journal-3", "i-4", t0+day)
	retired.RevokeAtUnixNano = (t0 + 1) * 1e9
	applyFails(t, a, at(t0+40).PublishIntermediate(retired), raftfsm.ErrInvalidCommand)

	// Replicas restored from a snapshot agree.
	g := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(g, snapshotBytes(t, f)); err != nil {
		t.Fatal(err)
	}
	if got := serials(g.IntermediatesAt((t0 + 40) * 1e9)); !slices.Equal(got, []string{"i-1"}) {
		t.Errorf("restored live = %v", got)
	}
}
