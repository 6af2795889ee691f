package raftfsm_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/snapfile"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// The quorum's level starts at 1, rises only by SetQuorumLevel, is never
// lowered, and is audited when it rises.
func TestQuorumLevelRisesAndNeverFalls(t *testing.T) {
	f := raftfsm.New()
	a := &raftfsmtest.Applier{FSM: f}
	if l, rel := f.QuorumLevel(); l != 1 || rel != "0.1.0" {
		t.Fatalf("a new registry at level %d (%q), want 1 (0.1.0)", l, rel)
	}
	if res := mustApply(t, a, at(t0).SetQuorumLevel(1)); !res.Idempotent {
		t.Error("raising to level 1 changed something")
	}
	mustApply(t, a, at(t0+1).SetQuorumLevel(2))
	if l, rel := f.QuorumLevel(); l != 2 || rel != raftfsm.ReleaseOfLevel(2) {
		t.Fatalf("level %d (%q) after raising to 2", l, rel)
	}
	if res := mustApply(t, a, at(t0+2).SetQuorumLevel(1)); !res.Idempotent {
		t.Error("a lower level changed something")
	}
	if l, _ := f.QuorumLevel(); l != 2 {
		t.Fatalf("level %d after a command naming 1: lowered", l)
	}
	applyFails(t, a, at(t0+3).SetQuorumLevel(0), raftfsm.ErrInvalidCommand)
	var audited int
	for _, e := range f.Audit("", 0, 100) {
		if e.GetAction() == "quorum-level" {
			audited++
			if !strings.Contains(e.GetDetail(), "feature level 2 (was 1") {
				t.Errorf("audit detail %q", e.GetDetail())
			}
		}
	}
	if audited != 1 {
		t.Errorf("%d quorum-level audit entries, want 1 (the one rise)", audited)
	}
}

// A snapshot of a quorum at level 1 is format 2, which the release before
// feature levels reads (no record of a kind it does not know); above level
// 1 it is format 3, opening with the level, and restores with it.
func TestQuorumLevelInSnapshots(t *testing.T) {
	f := raftfsm.New()
	a := &raftfsmtest.Applier{FSM: f}
	mustApply(t, a, admin.RegisterNode("node-1", "vc-a", hw1()))
	level1 := snapshotBytes(t, f)
	if got := snapfile.StateFormat(level1); got != 2 {
		t.Fatalf("a level-1 state in format %d, want 2", got)
	}
	if err := snapfile.Walk(bytes.NewReader(level1), func(rec *pactv1.SnapshotRecord) error {
		if rec.GetQuorumLevel() != nil {
			t.Error("a level-1 state carries a quorum level record")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	mustApply(t, a, at(t0).SetQuorumLevel(2))
	level2 := snapshotBytes(t, f)
	if got := snapfile.StateFormat(level2); got != 3 {
		t.Fatalf("a level-2 state in format %d, want 3", got)
	}
	first := true
	if err := snapfile.Walk(bytes.NewReader(level2), func(rec *pactv1.SnapshotRecord) error {
		if first && rec.GetQuorumLevel().GetLevel() != 2 {
			t.Errorf("first record %v, want the quorum level", rec)
		}
		first = false
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	g := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(g, level2); err != nil {
		t.Fatal(err)
	}
	if l, _ := g.QuorumLevel(); l != 2 {
		t.Fatalf("restored at level %d, want 2", l)
	}
	if !bytes.Equal(snapshotBytes(t, g), level2) {
		t.Error("a restored level-2 state writes other bytes")
	}
	// A snapshot file carries the format in its header: a release that
	// reads up to format 2 refuses it by the header, naming the writer's
	// release.
	var file bytes.Buffer
	if err := snapfile.Write(&file, &pactv1.SnapshotHeader{Domain: "site.example", Version: "v0.2.0"}, level2); err != nil {
		t.Fatal(err)
	}
	h, _, _, err := snapfile.Read(bytes.NewReader(file.Bytes()))
	if err != nil || h.GetFormatVersion() != 3 {
		t.Fatalf("file header format %d, %v", h.GetFormatVersion(), err)
	}
	// A level record anywhere but first is refused.
	misplaced := append([]byte{}, level1...)
	if err := restoreWithTrailingLevel(misplaced); err == nil {
		t.Error("a quorum level record after other records was restored")
	}
}

// restoreWithTrailingLevel builds a state whose level record comes after
// a node record and restores it.
func restoreWithTrailingLevel(_ []byte) error {
	var b bytes.Buffer
	snap := &pactv1.Snapshot{Nodes: []*pactv1.Node{{NodeId: "node-1", State: pactv1.NodeState_NODE_STATE_REGISTERED}}}
	if err := snapfile.WriteState(&b, snap); err != nil {
		return err
	}
	_, err := snapfile.CheckState(bytes.NewReader(append(bytes.TrimSuffix(b.Bytes(), []byte{0}), levelRecord(2)...)))
	return err
}

// levelRecord is one record of format 2/3 holding a quorum level, followed
// by the end record.
func levelRecord(level uint32) []byte {
	var b bytes.Buffer
	_ = snapfile.WriteState(&b, &pactv1.Snapshot{QuorumLevel: &pactv1.QuorumLevel{Level: level}})
	// The state is magic | level record | sizes record | end; keep the
	// level record and the end.
	st := b.Bytes()[len("\x00pact-snapshot-records\n"):]
	n := int(st[0]) + 1
	return append(append([]byte{}, st[:n]...), 0)
}

// A journal whose binary speaks less than the level a log entry raises
// the quorum to stops applying the log at that entry (as at a command it
// does not know), and says which release it needs; alone or in a batch.
func TestLevelAboveTheBinaryHalts(t *testing.T) {
	for _, batched := range []bool{false, true} {
		f := raftfsm.New()
		a := &raftfsmtest.Applier{FSM: f}
		var halted string
		f.SetHaltHandler(func(_ uint64, reason string) { halted = reason })
		release := make(chan struct{})
		cmd := at(t0).SetQuorumLevel(raftfsm.FeatureLevel + 1)
		cmd.GetSetQuorumLevel().Release = "9.9.0"
		if batched {
			cmd = at(t0).Batch(admin.RegisterNode("node-1", "vc-a", hw1()), cmd)
		}
		data, err := raftfsm.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan any)
		go func() { done <- f.Apply(&raft.Log{Index: a.Index + 1, Term: 1, Type: raft.LogCommand, Data: data}) }()
		for f.Halted() == "" {
			select {
			case <-done:
				t.Fatal("Apply returned without halting")
			default:
			}
		}
		f.Release()
		close(release)
		res := (<-done).(*raftfsm.Result)
		if !errors.Is(res.Err, raftfsm.ErrHalted) {
			t.Errorf("batched=%v: %v, want ErrHalted", batched, res.Err)
		}
		if !strings.Contains(f.Halted(), "install release 9.9.0 or newer") || halted != f.Halted() {
			t.Errorf("batched=%v: halted %q (handler %q)", batched, f.Halted(), halted)
		}
		if _, ok := f.Node("node-1"); ok {
			t.Errorf("batched=%v: part of the entry was applied", batched)
		}
		if l, _ := f.QuorumLevel(); l != 1 {
			t.Errorf("batched=%v: level %d", batched, l)
		}
	}
}

// A journal restarted with a registry above its binary's level refuses to
// start, naming the release it needs.
func TestCheckStartRefusesAStateAboveTheBinary(t *testing.T) {
	f := raftfsm.New()
	if err := f.CheckStart(); err != nil {
		t.Fatalf("a new registry: %v", err)
	}
	var b bytes.Buffer
	if err := snapfile.WriteState(&b, &pactv1.Snapshot{QuorumLevel: &pactv1.QuorumLevel{Level: raftfsm.FeatureLevel + 1, Release: "9.9.0"}}); err != nil {
		t.Fatal(err)
	}
	if err := raftfsmtest.RestoreBytes(f, b.Bytes()); err != nil {
		t.Fatal(err)
	}
	err := f.CheckStart()
	if !errors.Is(err, raftfsm.ErrQuorumVersion) || !strings.Contains(err.Error(), "install release 9.9.0 or newer") {
		t.Fatalf("CheckStart = %v", err)
	}
}

// Recording a journal CA is new at level 2: at level 1 it is refused
// QUORUM_VERSION by every replica alike, and changes nothing.
func TestRecordJournalCANeedsLevel2(t *testing.T) {
	f := raftfsm.New()
	a := &raftfsmtest.Applier{FSM: f}
	before := snapshotBytes(t, f)
	jc := raftfsmtest.JournalCA("j2", "ca-fresh", t0+365*day)
	res := applyFails(t, a, admin.RecordJournalCA(jc), raftfsm.ErrQuorumVersion)
	var qv *raftfsm.QuorumVersionError
	if !errors.As(res.Err, &qv) || qv.Need != 2 || qv.Have != 1 {
		t.Errorf("error %v", res.Err)
	}
	if code := raftfsm.ErrorCode(res.Err); code != "QUORUM_VERSION" {
		t.Errorf("wire code %q", code)
	}
	if !errors.Is(raftfsm.ErrorFromCode("QUORUM_VERSION", res.Err.Error()), raftfsm.ErrQuorumVersion) {
		t.Error("a forwarded QUORUM_VERSION is not ErrQuorumVersion")
	}
	if !bytes.Equal(before, snapshotBytes(t, f)) {
		t.Error("a refused RecordJournalCA changed the state")
	}
}

// At level 1 Apply decides the commands whose rules changed in level 2 as
// the release before levels does, so a quorum mixing both releases keeps
// one registry; at level 2, by the new rules. (integration's rolling
// upgrade test compares the registries of real 0.1.0 and current journals.)
func TestRulesFollowTheLevel(t *testing.T) {
	other := raftfsmtest.JournalCAWithNewKey("j2", "ca-other", t0+365*day)
	inter := func(serial string) *pactv1.Intermediate {
		return raftfsmtest.Intermediate("j2", serial, t0+30*day)
	}
	steps := func(a *raftfsmtest.Applier) []*raftfsm.Result {
		return []*raftfsm.Result{
			a.Apply(at(t0).PublishIntermediateUnder(inter("i-1"), raftfsmtest.JournalCA("j2", "ca-1", t0+365*day), "ca-1")),
			// Another key naming the same journal.
			a.Apply(at(t0+1).PublishIntermediateUnder(inter("i-x"), other, "ca-other")),
			// A root-signed intermediate of a journal that has a journal CA.
			a.Apply(at(t0 + 2).PublishIntermediate(inter("i-legacy"))),
		}
	}
	f1 := raftfsm.New()
	for i, res := range steps(&raftfsmtest.Applier{FSM: f1}) {
		if res.Err != nil {
			t.Errorf("level 1, step %d: %v (the release before levels accepts it)", i, res.Err)
		}
	}
	for _, e := range f1.Audit("", 0, 100) {
		if e.GetAction() == "journal-ca-recorded" && strings.Contains(e.GetDetail(), "bound") {
			t.Errorf("level 1 audits %q, not the previous release's text", e.GetDetail())
		}
	}
	f2, a2 := raftfsmtest.AtFeatureLevel()
	res := steps(a2)
	if res[0].Err != nil || !errors.Is(res[1].Err, raftfsm.ErrJournalCANotBound) || !errors.Is(res[2].Err, raftfsm.ErrJournalCANotBound) {
		t.Errorf("level 2: %v, %v, %v; want ok, not bound, not bound", res[0].Err, res[1].Err, res[2].Err)
	}
	if bound, _ := f2.BoundJournalCA("j2"); bound.GetSerial() != "ca-1" {
		t.Errorf("level 2: j2 bound to %q", bound.GetSerial())
	}

	// A bound journal CA past its expiry: level 1 prunes it (and the id
	// is free again, as in the previous release); level 2 keeps it.
	expire := func(a *raftfsmtest.Applier) {
		a.Apply(at(t0).PublishIntermediateUnder(raftfsmtest.Intermediate("j3", "i-3", t0+day), raftfsmtest.JournalCA("j3", "ca-3", t0+10*day), "ca-3"))
		a.Apply(at(t0 + 20*day).PublishIntermediate(raftfsmtest.Intermediate("j1", "i-9", t0+40*day)))
	}
	g1 := raftfsm.New()
	expire(&raftfsmtest.Applier{FSM: g1})
	if _, ok := g1.BoundJournalCA("j3"); ok {
		t.Error("level 1 kept an expired journal CA")
	}
	g2, b2 := raftfsmtest.AtFeatureLevel()
	expire(b2)
	if _, ok := g2.BoundJournalCA("j3"); !ok {
		t.Error("level 2 dropped the bound journal CA at its expiry")
	}
}
