package raftfsm_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/snapfile"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// journalCARegistry: journal-1 publishes i-1 and i-2 under its journal CA
// ca-1, journal-3 publishes i-3 under ca-3 (which expires first), and
// journal-2 still has a root-signed intermediate, i-0.
func journalCARegistry(t *testing.T) (*raftfsm.FSM, *raftfsmtest.Applier) {
	t.Helper()
	f, a := raftfsmtest.AtFeatureLevel()
	mustApply(t, a, at(t0).PublishIntermediate(raftfsmtest.Intermediate("journal-2", "i-0", t0+day)))
	mustApply(t, a, at(t0).PublishIntermediateUnder(raftfsmtest.Intermediate("journal-1", "i-1", t0+day), raftfsmtest.JournalCA("journal-1", "ca-1", t0+365*day), "ca-1"))
	mustApply(t, a, at(t0+1).PublishIntermediateUnder(raftfsmtest.Intermediate("journal-1", "i-2", t0+2*day), nil, "ca-1"))
	mustApply(t, a, at(t0+2).PublishIntermediateUnder(raftfsmtest.Intermediate("journal-3", "i-3", t0+30*day), raftfsmtest.JournalCA("journal-3", "ca-3", t0+10*day), "ca-3"))
	return f, a
}

// revoked reports whether f holds the journal CA with serial, revoked.
func revoked(f *raftfsm.FSM, serial string) bool {
	jc, ok := f.JournalCA(serial)
	return ok && jc.GetRevokedAtUnixNano() != 0
}

func caSerials(cas []*pactv1.JournalCA) []string {
	out := make([]string, len(cas))
	for i, jc := range cas {
		out[i] = jc.GetSerial()
	}
	return out
}

// A journal CA is recorded at its first use, with the command's time,
// and only from a record that matches the intermediate.
func TestPublishUnderJournalCA(t *testing.T) {
	f, a := journalCARegistry(t)
	if got := caSerials(f.JournalCAsAt(t0 * 1e9)); !slices.Equal(got, []string{"ca-1", "ca-3"}) {
		t.Fatalf("JournalCAsAt = %v, want ca-1 ca-3", got)
	}
	if jc, ok := f.JournalCA("ca-1"); !ok || jc.GetRecordedAtUnixNano() != t0*1e9 {
		t.Errorf("ca-1 recorded at %d, want the command's time %d", jc.GetRecordedAtUnixNano(), t0*1e9)
	}
	if got := serials(f.IntermediatesAt(t0 * 1e9)); !slices.Equal(got, []string{"i-0", "i-1", "i-2", "i-3"}) {
		t.Errorf("IntermediatesAt = %v", got)
	}
	jc := func(mod func(*pactv1.JournalCA)) *pactv1.JournalCA {
		c := raftfsmtest.JournalCA("journal-4", "ca-4", t0+365*day)
		if mod != nil {
			mod(c)
		}
		return c
	}
	in := func(journalID string) *pactv1.Intermediate { return raftfsmtest.Intermediate(journalID, "i-4", t0+day) }
	for _, tt := range []struct {
		name   string
		cmd    *pactv1.Command
		want   error
		reason string // in the message
	}{
		{"a journal CA for a root-signed intermediate", at(t0).PublishIntermediateUnder(in("journal-4"), jc(nil), ""), raftfsm.ErrInvalidCommand, "names no issuer"},
		{"an unknown issuer without its record", at(t0).PublishIntermediateUnder(in("journal-4"), nil, "ca-4"), raftfsm.ErrInvalidCommand, "not recorded"},
		{"a record of another serial", at(t0).PublishIntermediateUnder(in("journal-4"), jc(nil), "ca-5"), raftfsm.ErrInvalidCommand, "does not match"},
		{"a record of another journal", at(t0).PublishIntermediateUnder(in("journal-5"), jc(nil), "ca-4"), raftfsm.ErrInvalidCommand, "does not match"},
		{"a record without a certificate", at(t0).PublishIntermediateUnder(in("journal-4"), jc(func(c *pactv1.JournalCA) { c.Der = nil }), "ca-4"), raftfsm.ErrInvalidCommand, "does not match"},
		{"a record without an expiry", at(t0).PublishIntermediateUnder(in("journal-4"), jc(func(c *pactv1.JournalCA) { c.NotAfterUnix = 0 }), "ca-4"), raftfsm.ErrInvalidCommand, "does not match"},
		{"a revoked record", at(t0).PublishIntermediateUnder(in("journal-4"), jc(func(c *pactv1.JournalCA) { c.RevokedBy = "x" }), "ca-4"), raftfsm.ErrInvalidCommand, "revoked journal CA"},
		{"an expired journal CA", at(t0+366*day).PublishIntermediateUnder(in("journal-4"), jc(nil), "ca-4"), raftfsm.ErrInvalidCommand, "expired"},
		{"another journal's journal CA", at(t0).PublishIntermediateUnder(in("journal-4"), nil, "ca-1"), raftfsm.ErrInvalidCommand, "journal journal-1's"},
		{"a recorded intermediate under another issuer", at(t0).PublishIntermediateUnder(raftfsmtest.Intermediate("journal-1", "i-1", t0+day), nil, ""), raftfsm.ErrInvalidCommand, "another issuer"},
		{"a recorded intermediate under a new journal CA", at(t0).PublishIntermediateUnder(raftfsmtest.Intermediate("journal-1", "i-1", t0+day), raftfsmtest.JournalCA("journal-1", "ca-5", t0+day), "ca-5"), raftfsm.ErrInvalidCommand, "another issuer"},
		{"a recorded intermediate of another journal", at(t0).PublishIntermediate(raftfsmtest.Intermediate("journal-4", "i-0", t0+day)), raftfsm.ErrInvalidCommand, "another issuer or journal"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := applyFails(t, a, tt.cmd, tt.want)
			if errors.Is(res.Err, raftfsm.ErrJournalCARevoked) || !strings.Contains(res.Err.Error(), tt.reason) {
				t.Errorf("err = %v, want one saying %q", res.Err, tt.reason)
			}
		})
	}
	// Publishing again under a recorded journal CA keeps its first record.
	mustApply(t, a, at(t0+50).PublishIntermediateUnder(raftfsmtest.Intermediate("journal-1", "i-1", t0+day), raftfsmtest.JournalCA("journal-1", "ca-1", t0+365*day), "ca-1"))
	if jc, _ := f.JournalCA("ca-1"); jc.GetRecordedAtUnixNano() != t0*1e9 {
		t.Error("publishing again re-recorded the journal CA")
	}
}

// RevokeJournalCA: all or nothing, idempotent, audited with its reason,
// and every intermediate the journal CA signed leaves the bundle with it.
func TestRevokeJournalCA(t *testing.T) {
	f, a := journalCARegistry(t)
	var events []raftfsm.Event
	f.SetObserver(func(ev raftfsm.Event) { events = append(events, ev) })
	admin := raftfsmtest.Proposer{Actor: "admin/alice", AtUnixNano: (t0 + 100) * 1e9}

	applyFails(t, a, admin.RevokeJournalCA("lost"), raftfsm.ErrInvalidCommand)
	applyFails(t, a, admin.RevokeJournalCA("lost", "ca-3", "ca-9"), raftfsm.ErrNotFound)
	applyFails(t, a, admin.RevokeJournalCA("lost", "i-1"), raftfsm.ErrNotFound) // an intermediate is no journal CA
	if len(events) != 0 {
		t.Fatalf("refusals sent events: %+v", events)
	}

	res := mustApply(t, a, admin.RevokeJournalCA("host stolen", "ca-1"))
	if res.Idempotent {
		t.Error("the first revocation is marked idempotent")
	}
	if len(events) != 1 || !events[0].BundleChanged || len(events[0].Audit) != 1 {
		t.Fatalf("events = %+v, want one bundle change with one audit entry", events)
	}
	e := events[0].Audit[0]
	if e.GetAction() != "journal-ca-revoke" || e.GetSerial() != "ca-1" || e.GetActor() != "admin/alice" || e.GetAtUnixNano() != (t0+100)*1e9 ||
		!strings.Contains(e.GetDetail(), "host stolen") || !strings.Contains(e.GetDetail(), "journal journal-1") || !strings.Contains(e.GetDetail(), "2 intermediates") {
		t.Errorf("audit entry = %v", e)
	}
	jc, _ := f.JournalCA("ca-1")
	if jc.GetRevokedAtUnixNano() != (t0+100)*1e9 || jc.GetRevokedBy() != "admin/alice" || jc.GetRevokeReason() != "host stolen" ||
		!revoked(f, "ca-1") {
		t.Errorf("ca-1 after revocation = %v", jc)
	}
	if revoked(f, "ca-3") || revoked(f, "ca-9") {
		t.Error("JournalCARevoked of a live or unknown journal CA")
	}
	for _, now := range []int64{t0 + 100, t0 + 101} {
		if got := caSerials(f.JournalCAsAt(now * 1e9)); !slices.Equal(got, []string{"ca-3"}) {
			t.Errorf("JournalCAsAt(t0+%d) = %v, want ca-3", now-t0, got)
		}
		if got := serials(f.IntermediatesAt(now * 1e9)); !slices.Equal(got, []string{"i-0", "i-3"}) {
			t.Errorf("IntermediatesAt(t0+%d) = %v, want i-0 i-3", now-t0, got)
		}
	}
	for _, s := range []string{"i-1", "i-2"} {
		in, _ := f.Intermediate(s)
		if raftfsm.IntermediateState(in, (t0+100)*1e9) != "revoked" || in.GetRetiredBy() != "admin/alice" || !strings.Contains(in.GetRetireReason(), "journal CA ca-1 revoked: host stolen") {
			t.Errorf("%s after its journal CA's revocation = %v", s, in)
		}
	}
	if got := caSerials(f.AllJournalCAs()); !slices.Equal(got, []string{"ca-1", "ca-3"}) {
		t.Errorf("AllJournalCAs = %v", got)
	}

	// Again, alone or with one already revoked: the first reason stays.
	if res := applyUnchanged(t, a, admin.RevokeJournalCA("again", "ca-1")); res.Err != nil || !res.Idempotent {
		t.Errorf("revoking again = %v, idempotent %v", res.Err, res.Idempotent)
	}
	mustApply(t, a, admin.RevokeJournalCA("audit", "ca-1", "ca-3"))
	if jc, _ := f.JournalCA("ca-1"); jc.GetRevokeReason() != "host stolen" {
		t.Errorf("ca-1's reason became %q", jc.GetRevokeReason())
	}
	if got := caSerials(f.JournalCAsAt((t0 + 200) * 1e9)); len(got) != 0 {
		t.Errorf("JournalCAsAt after both = %v", got)
	}

	// The journal cannot publish under it any more, with or without its
	// record, and the error keeps its type across the wire.
	for _, jc := range []*pactv1.JournalCA{nil, raftfsmtest.JournalCA("journal-1", "ca-1", t0+365*day)} {
		res := applyFails(t, a, at(t0+300).PublishIntermediateUnder(raftfsmtest.Intermediate("journal-1", "i-5", t0+day), jc, "ca-1"), raftfsm.ErrJournalCARevoked)
		if !strings.Contains(res.Err.Error(), "docs/ceremony.md") {
			t.Errorf("the refusal does not say what to do: %v", res.Err)
		}
		code := raftfsm.ErrorCode(res.Err)
		if code != "JOURNAL_CA_REVOKED" || raftfsm.BaseCode(code) != "INVALID_ARGUMENT" {
			t.Errorf("code = %q, base code %q", code, raftfsm.BaseCode(code))
		}
		back := raftfsm.ErrorFromCode(code, res.Err.Error())
		if !errors.Is(back, raftfsm.ErrJournalCARevoked) || !errors.Is(back, raftfsm.ErrInvalidCommand) || back.Error() != res.Err.Error() {
			t.Errorf("forwarded error = %v, want %v", back, res.Err)
		}
	}
	if back := raftfsm.ErrorFromCode("INVALID_ARGUMENT", "raftfsm: invalid command: no journal CA"); errors.Is(back, raftfsm.ErrJournalCARevoked) {
		t.Error("another invalid command came back as a journal CA revocation")
	}

	// A journal CA expires out of the registry, and the intermediates it
	// signed with it, unless it is the one its journal is bound to: that
	// record stays, expired or revoked, so the journal id is never free
	// for another journal CA's first publish.
	mustApply(t, a, at(t0+11*day).PublishIntermediate(raftfsmtest.Intermediate("journal-2", "i-6", t0+20*day)))
	if got := caSerials(f.AllJournalCAs()); !slices.Equal(got, []string{"ca-1", "ca-3"}) {
		t.Errorf("after ca-3 expired: AllJournalCAs = %v, want the bound ca-1 and ca-3", got)
	}
	if _, ok := f.Intermediate("i-3"); ok {
		t.Error("i-3 outlived its journal CA")
	}
	if got := caSerials(f.JournalCAsAt((t0 + 11*day) * 1e9)); len(got) != 0 {
		t.Errorf("JournalCAsAt after ca-3 expired = %v: an expired or revoked journal CA is in no bundle", got)
	}
	mustApply(t, a, at(t0+366*day).PublishIntermediate(raftfsmtest.Intermediate("journal-2", "i-7", t0+400*day)))
	if got := caSerials(f.AllJournalCAs()); !slices.Equal(got, []string{"ca-1", "ca-3"}) {
		t.Errorf("after every journal CA expired: %v, want the bound ones", got)
	}
	// A superseded one is pruned at its expiry.
	mustApply(t, a, (raftfsmtest.Proposer{Actor: "admin/alice", AtUnixNano: (t0 + 367*day) * 1e9}).RecordJournalCA(raftfsmtest.JournalCAWithNewKey("journal-3", "ca-3b", t0+800*day)))
	mustApply(t, a, at(t0+368*day).PublishIntermediate(raftfsmtest.Intermediate("journal-2", "i-8", t0+400*day)))
	if got := caSerials(f.AllJournalCAs()); !slices.Equal(got, []string{"ca-1", "ca-3b"}) {
		t.Errorf("after journal-3 was bound to ca-3b: %v, want ca-1 and ca-3b", got)
	}
}

// A registry with journal CAs, live and revoked, restores from its
// snapshot in both formats to the same state, and replicas that applied
// the same commands write the same bytes.
func TestJournalCASnapshot(t *testing.T) {
	build := func() *raftfsm.FSM {
		f, a := journalCARegistry(t)
		mustApply(t, a, raftfsmtest.Proposer{Actor: "admin/alice", AtUnixNano: (t0 + 100) * 1e9}.RevokeJournalCA("host stolen", "ca-1"))
		return f
	}
	f := build()
	data := snapshotBytes(t, f)
	if !bytes.Equal(data, snapshotBytes(t, build())) {
		t.Fatal("two replicas of one log wrote different snapshots")
	}
	decoded, err := raftfsm.DecodeSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := caSerials(decoded.GetJournalCas()); !slices.Equal(got, []string{"ca-1", "ca-3"}) {
		t.Fatalf("the snapshot holds journal CAs %v", got)
	}
	if c, err := snapfile.Count(data); err != nil || c.JournalCAs != 2 || c.Intermediates != 4 {
		t.Errorf("snapfile.Count = %+v, %v; want 2 journal CAs, 4 intermediates", c, err)
	}
	format1, err := proto.MarshalOptions{Deterministic: true}.Marshal(decoded)
	if err != nil {
		t.Fatal(err)
	}
	for name, state := range map[string][]byte{"format 2": data, "format 1": format1} {
		g := raftfsm.New()
		if err := raftfsmtest.RestoreBytes(g, state); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(snapshotBytes(t, g), data) {
			t.Errorf("%s restored to another state", name)
		}
		now := int64(t0+200) * 1e9
		if got := caSerials(g.JournalCAsAt(now)); !slices.Equal(got, []string{"ca-3"}) {
			t.Errorf("%s: restored JournalCAsAt = %v", name, got)
		}
		if got := serials(g.IntermediatesAt(now)); !slices.Equal(got, []string{"i-0", "i-3"}) {
			t.Errorf("%s: restored IntermediatesAt = %v", name, got)
		}
		if !revoked(g, "ca-1") {
			t.Errorf("%s: the restored replica forgot the revocation", name)
		}
	}
}
