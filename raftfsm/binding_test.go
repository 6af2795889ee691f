package raftfsm_test

import (
	"testing"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// A journal id is bound to one journal CA, and the binding moves only at
// a first publish, to a re-issue with the same key, or on an operator's
// word: a journal CA that merely names the journal (another quorum's, a
// replaced host's) binds nothing.
func TestJournalCABinding(t *testing.T) {
	admin := func(sec int64) raftfsmtest.Proposer {
		return raftfsmtest.Proposer{Actor: "admin/alice", AtUnixNano: sec * 1e9}
	}
	inter := func(serial string) *pactv1.Intermediate {
		return raftfsmtest.Intermediate("j2", serial, t0+30*day)
	}
	ca1 := raftfsmtest.JournalCA("j2", "ca-1", t0+365*day)
	// A re-issue of ca-1 (same key): the yearly renewal, a rollover.
	ca2 := raftfsmtest.JournalCA("j2", "ca-2", t0+730*day)
	// Another key naming j2: a second quorum's j2, a replaced host's.
	other := raftfsmtest.JournalCAWithNewKey("j2", "ca-other", t0+365*day)
	fresh := raftfsmtest.JournalCAWithNewKey("j2", "ca-fresh", t0+365*day)

	type step struct {
		name  string
		cmd   *pactv1.Command
		want  error  // nil: applies
		bound string // the serial j2 is bound to afterwards
	}
	steps := []step{
		{"a publish under a journal CA of a journal with none binds it", at(t0).PublishIntermediateUnder(inter("i-1"), ca1, "ca-1"), nil, "ca-1"},
		{"another key naming the same journal is refused", at(t0+1).PublishIntermediateUnder(inter("i-x"), other, "ca-other"), raftfsm.ErrJournalCANotBound, "ca-1"},
		{"a legacy intermediate of a bound journal is refused", at(t0 + 2).PublishIntermediate(inter("i-legacy")), raftfsm.ErrJournalCANotBound, "ca-1"},
		{"a re-issue with the same key moves the binding", at(t0+3).PublishIntermediateUnder(inter("i-2"), ca2, "ca-2"), nil, "ca-2"},
		{"the superseded journal CA signs no new intermediate", at(t0+4).PublishIntermediateUnder(inter("i-3"), nil, "ca-1"), raftfsm.ErrJournalCANotBound, "ca-2"},
		{"the bound one still does", at(t0+5).PublishIntermediateUnder(inter("i-4"), nil, "ca-2"), nil, "ca-2"},
		{"revoked, the bound journal CA stays bound", admin(t0+6).RevokeJournalCA("host stolen", "ca-2"), nil, "ca-2"},
		{"nor does a same-key re-issue after its revocation bind", at(t0+7).PublishIntermediateUnder(inter("i-5"), raftfsmtest.JournalCA("j2", "ca-3", t0+365*day), "ca-3"), raftfsm.ErrJournalCANotBound, "ca-2"},
		{"an operator binds a new key", admin(t0 + 8).RecordJournalCA(fresh), nil, "ca-fresh"},
		{"recording it again changes nothing", admin(t0 + 9).RecordJournalCA(fresh), nil, "ca-fresh"},
		{"the journal publishes under it", at(t0+10).PublishIntermediateUnder(inter("i-6"), nil, "ca-fresh"), nil, "ca-fresh"},
		{"an operator cannot bind a revoked journal CA", admin(t0 + 11).RecordJournalCA(ca2), raftfsm.ErrJournalCARevoked, "ca-fresh"},
		{"nor one recorded for another journal", admin(t0 + 12).RecordJournalCA(&pactv1.JournalCA{JournalId: "j3", Serial: "ca-fresh", Der: fresh.GetDer(), NotAfterUnix: fresh.GetNotAfterUnix()}), raftfsm.ErrInvalidCommand, "ca-fresh"},
		{"nor a certificate that is not that journal's journal CA", admin(t0 + 13).RecordJournalCA(&pactv1.JournalCA{JournalId: "j3", Serial: "ca-j3", Der: fresh.GetDer(), NotAfterUnix: fresh.GetNotAfterUnix()}), raftfsm.ErrInvalidCommand, "ca-fresh"},
	}
	build := func() (*raftfsm.FSM, []*raftfsm.Result) {
		f, a := raftfsmtest.AtFeatureLevel()
		var out []*raftfsm.Result
		for _, s := range steps {
			if s.want == nil {
				out = append(out, mustApply(t, a, s.cmd))
			} else {
				out = append(out, applyFails(t, a, s.cmd, s.want))
			}
			got, _ := f.BoundJournalCA("j2")
			if got.GetSerial() != s.bound {
				t.Errorf("%s: j2 bound to %q, want %q", s.name, got.GetSerial(), s.bound)
			}
		}
		return f, out
	}
	f, _ := build()
	if _, ok := f.Intermediate("i-x"); ok {
		t.Error("an intermediate under another key naming j2 was published")
	}
	// Replicas agree.
	if g, _ := build(); !sameSnapshot(t, f, g) {
		t.Error("two replicas of one log differ")
	}
}

func sameSnapshot(t *testing.T, a, b *raftfsm.FSM) bool {
	t.Helper()
	return string(snapshotBytes(t, a)) == string(snapshotBytes(t, b))
}
