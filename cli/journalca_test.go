package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// seedJournalCAs gives a fake journal the intermediates and journal CAs
// of a quorum moving to journal CAs: j1 has a root-signed intermediate
// and one under its journal CA 0a01, j2 a retiring one under 0a02, and
// j3's journal CA 0a03 was revoked.
func seedJournalCAs(f *fakeJournal) {
	day := int64(24 * 3600)
	now := fakeNow.Unix()
	f.intermediates = []*pactv1.Intermediate{
		{JournalId: "j1", Serial: "0b00", NotAfterUnix: now + day},
		{JournalId: "j1", Serial: "0b01", NotAfterUnix: now + day, IssuerSerial: "0a01"},
		{JournalId: "j2", Serial: "0b02", NotAfterUnix: now + day, IssuerSerial: "0a02", RetiredAtUnixNano: fakeNow.UnixNano(), RevokeAtUnixNano: fakeNow.Add(time.Hour).UnixNano(), RetireReason: "drill"},
		{JournalId: "j2", Serial: "0b12", NotAfterUnix: now - day, IssuerSerial: "0a02"},
		{JournalId: "j3", Serial: "0b03", NotAfterUnix: now + day, IssuerSerial: "0a03", RevokeAtUnixNano: fakeNow.UnixNano() - 1},
	}
	f.journalCAs = []*pactv1.JournalCA{
		{JournalId: "j1", Serial: "0a01", NotAfterUnix: now + 365*day, RecordedAtUnixNano: fakeNow.UnixNano()},
		{JournalId: "j2", Serial: "0a02", NotAfterUnix: now + 20*day, RecordedAtUnixNano: fakeNow.UnixNano()},
		{JournalId: "j3", Serial: "0a03", NotAfterUnix: now + 20*day, RevokedAtUnixNano: fakeNow.UnixNano() - 1, RevokedBy: "admin/bob", RevokeReason: "host stolen"},
	}
}

// pact journal intermediates lists the journal CAs too, and pact journal
// revoke-ca revokes them, confirmed, with a reason.
func TestJournalCACommands(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	caRows := func(t *testing.T, stdout string) map[string][]string {
		t.Helper()
		rows := map[string][]string{}
		lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
		start := -1
		for i, l := range lines {
			if strings.HasPrefix(l, "JOURNAL ") && strings.Contains(l, "JOURNAL CA") {
				start = i + 1
			}
		}
		if start < 0 {
			t.Fatalf("no journal CA table:\n%s", stdout)
		}
		for _, r := range tableRows(lines[start:]) {
			rows[r[1]] = r
		}
		return rows
	}
	notRevoked := func(t *testing.T, leader, _ *fakeJournal, _ string) {
		if n := leader.callsOf("RevokeJournalCA"); n != 0 {
			t.Errorf("%d RevokeJournalCA calls, want none", n)
		}
	}
	runJournalCases(t, p, []journalCase{
		{
			name: "both tables", args: []string{"journal", "intermediates"}, wantCode: ExitOK, noStderr: true, setup: seedJournalCAs,
			wantStdout: []string{"ISSUER", "root", "LIVE INTERMEDIATES"},
			check: func(t *testing.T, _, _ *fakeJournal, stdout string) {
				rows := caRows(t, stdout)
				for serial, want := range map[string][]string{
					"0a01": {"j1", "0a01", "active", "2027-03-04T05:06:07Z", "1", "0", "-", "-"},
					"0a02": {"j2", "0a02", "active", "2026-03-24T05:06:07Z", "1", "0", "-", "-"},
					"0a03": {"j3", "0a03", "revoked", "2026-03-24T05:06:07Z", "0", "0", "2026-03-04T05:06:06Z", "host", "stolen"},
				} {
					if fmt.Sprint(rows[serial]) != fmt.Sprint(want) {
						t.Errorf("row of %s = %q, want %q", serial, rows[serial], want)
					}
				}
			},
		},
		{
			name: "a quorum without journal CAs", args: []string{"journal", "intermediates"}, wantCode: ExitOK, noStderr: true,
			setup: func(f *fakeJournal) {
				f.intermediates = []*pactv1.Intermediate{{JournalId: "j1", Serial: "0b00", NotAfterUnix: fakeNow.Unix() + 60}}
			},
			check: func(t *testing.T, _, _ *fakeJournal, stdout string) {
				if strings.Contains(stdout, "JOURNAL CA") || strings.Count(stdout, "\n") != 2 {
					t.Errorf("the intermediates alone, want one table of one row:\n%s", stdout)
				}
			},
		},
		{
			name: "journal CAs only", args: []string{"journal", "intermediates", "--journal-cas"}, wantCode: ExitOK, noStderr: true, setup: seedJournalCAs,
			check: func(t *testing.T, _, _ *fakeJournal, stdout string) {
				if strings.Contains(stdout, "ISSUER") || len(caRows(t, stdout)) != 3 {
					t.Errorf("want the journal CA table alone:\n%s", stdout)
				}
			},
		},
		{
			name: "intermediates json", args: []string{"journal", "intermediates", "-o", "json"}, wantCode: ExitOK, noStderr: true, setup: seedJournalCAs,
			check: func(t *testing.T, _, _ *fakeJournal, stdout string) {
				var vs []IntermediateView
				if err := json.Unmarshal([]byte(stdout), &vs); err != nil || len(vs) != 5 || vs[0].IssuerSerial != "" || vs[1].IssuerSerial != "0a01" || vs[2].State != "retiring" {
					t.Errorf("err %v views %+v", err, vs)
				}
			},
		},
		{
			name: "journal CAs json", args: []string{"journal", "intermediates", "--journal-cas", "-o", "json"}, wantCode: ExitOK, noStderr: true, setup: seedJournalCAs,
			check: func(t *testing.T, _, _ *fakeJournal, stdout string) {
				var vs []JournalCAView
				if err := json.Unmarshal([]byte(stdout), &vs); err != nil || len(vs) != 3 {
					t.Fatalf("err %v views %+v", err, vs)
				}
				want := JournalCAView{JournalID: "j3", Serial: "0a03", State: "revoked", NotAfter: "2026-03-24T05:06:07Z", RevokedAt: "2026-03-04T05:06:06Z", RevokedBy: "admin/bob", Reason: "host stolen"}
				if vs[2] != want || vs[0].State != "active" || vs[0].LiveIntermediates != 1 || vs[0].RecordedAt != "2026-03-04T05:06:07Z" {
					t.Errorf("views %+v", vs)
				}
			},
		},
		{
			name: "no journal CAs json", args: []string{"journal", "intermediates", "--journal-cas", "-o", "json"}, wantCode: ExitOK, noStderr: true,
			wantStdout: []string{"[]"},
		},
		{
			name: "status", args: []string{"journal", "status"}, wantCode: ExitOK, setup: seedJournalCAs,
			check: func(t *testing.T, _, _ *fakeJournal, stdout string) {
				lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
				if !strings.HasSuffix(lines[1], "JOURNAL CA EXPIRES") {
					t.Fatalf("no journal CA column:\n%s", stdout)
				}
				for i, want := range []string{"2027-03-04T05:06:07Z", "2026-03-24T05:06:07Z", "revoked"} {
					if row := tableRows(lines[2+i : 3+i])[0]; row[len(row)-1] != want {
						t.Errorf("row %v, want its journal CA %s", row, want)
					}
				}
			},
		},
		{
			name: "status json", args: []string{"journal", "status", "-o", "json"}, wantCode: ExitOK, noStderr: true,
			setup: func(f *fakeJournal) {
				seedJournalCAs(f)
				// j1's current intermediate names the journal CA that
				// expires first.
				f.quorum.members[1].IntermediateSerial = "0b01"
				f.journalCAs = append(f.journalCAs, &pactv1.JournalCA{JournalId: "j1", Serial: "0a04", NotAfterUnix: fakeNow.Unix() + 3000*24*3600})
			},
			check: func(t *testing.T, _, _ *fakeJournal, stdout string) {
				var v QuorumView
				if err := json.Unmarshal([]byte(stdout), &v); err != nil || len(v.Members) != 3 {
					t.Fatalf("err %v view %+v", err, v)
				}
				for i, want := range [][3]string{{"0a01", "2027-03-04T05:06:07Z", "active"}, {"0a02", "2026-03-24T05:06:07Z", "active"}, {"0a03", "2026-03-24T05:06:07Z", "revoked"}} {
					m := v.Members[i]
					if got := [3]string{m.JournalCASerial, m.JournalCANotAfter, m.JournalCAState}; got != want {
						t.Errorf("%s: journal CA %v, want %v", m.JournalID, got, want)
					}
				}
			},
		},
		{
			name: "revoke by journal", args: []string{"journal", "revoke-ca", "j1", "--reason", "host stolen (INC-42)", "--yes"}, wantCode: ExitOK, noStderr: true, setup: seedJournalCAs,
			wantStdout: []string{"journal CA 0a01 of journal j1 is revoked (host stolen (INC-42), by admin/alice); 1 intermediate it signed left the trust bundle with it\n",
				"journal j1 signs nothing until it has a new journal CA: the ceremony signs one, and pact journal record-ca j1 FILE binds it (docs/ceremony.md)\n"},
			check: func(t *testing.T, leader, _ *fakeJournal, _ string) {
				if r := leader.revokeCA; fmt.Sprint(r.GetTargets()) != "[j1]" || r.GetReason() != "host stolen (INC-42)" {
					t.Errorf("request %v", r)
				}
			},
		},
		{
			// A root rollover's step 5: j1 is bound to its re-issue under
			// the new root, so the old journal CA goes and j1 signs on.
			name: "revoke an old journal CA of a re-issued journal", args: []string{"journal", "revoke-ca", "0a01", "--reason", "root rollover", "--yes"}, wantCode: ExitOK, noStderr: true,
			setup: func(f *fakeJournal) {
				seedJournalCAs(f)
				f.journalCAs = append(f.journalCAs, &pactv1.JournalCA{JournalId: "j1", Serial: "0a11", NotAfterUnix: fakeNow.Unix() + 365*24*3600, RecordedAtUnixNano: fakeNow.UnixNano() + 1})
				f.intermediates = append(f.intermediates, &pactv1.Intermediate{JournalId: "j1", Serial: "0b11", NotAfterUnix: fakeNow.Unix() + 24*3600, IssuerSerial: "0a11"})
			},
			wantStdout: []string{"journal CA 0a01 of journal j1 is revoked (root rollover, by admin/alice); 1 intermediate it signed left the trust bundle with it\n",
				"journal j1 goes on signing under its journal CA 0a11 (valid until 2027-03-04T05:06:07Z)\n"},
			check: func(t *testing.T, _, _ *fakeJournal, stdout string) {
				if strings.Contains(stdout, "signs nothing") {
					t.Errorf("says j1 signs nothing, though it is bound to a live journal CA:\n%s", stdout)
				}
			},
		},
		{
			// Each journal's current intermediate is active, the others of
			// the journal superseded; NODES counts the nodes under each.
			name: "superseded intermediates and nodes", args: []string{"journal", "intermediates"}, wantCode: ExitOK, noStderr: true,
			setup: func(f *fakeJournal) {
				seedJournalCAs(f)
				f.current = []string{"0b01", "0b02", "0b03"}
				f.nodeCerts = map[string]uint32{"0b00": 2, "0b01": 5, "0b02": 1}
			},
			check: func(t *testing.T, _, _ *fakeJournal, stdout string) {
				lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
				rows := map[string][]string{}
				for _, r := range tableRows(lines) {
					if len(r) > 1 {
						rows[r[1]] = r
					}
				}
				for serial, want := range map[string][2]string{
					"0b00": {"superseded", "2"}, "0b01": {"active", "5"}, "0b02": {"retiring", "1"}, "0b03": {"revoked", "0"},
				} {
					if r := rows[serial]; len(r) < 6 || r[2] != want[0] || r[5] != want[1] {
						t.Errorf("row of %s = %q, want state %s and %s nodes", serial, r, want[0], want[1])
					}
				}
				ca := caRows(t, stdout)
				if r := ca["0a01"]; len(r) < 6 || r[5] != "5" {
					t.Errorf("journal CA 0a01 row %q, want the 5 nodes of its intermediate", r)
				}
			},
		},
		{
			name: "revoke json", args: []string{"journal", "revoke-ca", "0a02", "0a03", "--reason", "audit", "--yes", "-o", "json"}, wantCode: ExitOK, noStderr: true, setup: seedJournalCAs,
			check: func(t *testing.T, _, _ *fakeJournal, stdout string) {
				var v RevokedJournalCAs
				if err := json.Unmarshal([]byte(stdout), &v); err != nil || len(v.Revoked) != 2 || len(v.Intermediates) != 3 {
					t.Fatalf("err %v view %+v", err, v)
				}
				// One revoked before keeps its reason.
				if v.Revoked[0].Serial != "0a02" || v.Revoked[0].State != "revoked" || v.Revoked[0].Reason != "audit" || v.Revoked[1].Reason != "host stolen" || v.Intermediates[0].State != "revoked" {
					t.Errorf("view %+v", v)
				}
			},
		},
		{
			name: "unknown", args: []string{"journal", "revoke-ca", "j9", "--reason", "x", "--yes"}, wantCode: ExitNotFound, setup: seedJournalCAs,
			wantErr: []string{"pact journal intermediates --journal-cas"},
		},
		{
			name: "unconfirmed", args: []string{"journal", "revoke-ca", "j1", "--reason", "x"}, wantCode: ExitUsage, setup: seedJournalCAs,
			wantErr: []string{"nothing revoked", "re-run with --yes"}, check: notRevoked,
		},
		{
			name: "no reason, no target", args: []string{"journal", "revoke-ca", "--yes"}, wantCode: ExitUsage, setup: seedJournalCAs,
			wantErr: []string{"--reason is required", "name at least one journal CA serial or journal id"}, check: notRevoked,
		},
	})
}

// Against a live journal (its intermediate signed by the root, so no
// journal CA is recorded): only a platform-admin may revoke, and a journal
// without a journal CA is not found.
func TestJournalCACommandsLive(t *testing.T) {
	l := sharedJournal(t)
	viewer := l.operator(t, "ca-viewer", pki.RoleViewer)
	if code, _, stderr := runLive(t, l, viewer, runOpts{}, "journal", "revoke-ca", "j1", "--reason", "x", "--yes"); code != ExitDenied {
		t.Errorf("a viewer revoking: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runLive(t, l, viewer, runOpts{}, "journal", "intermediates", "--journal-cas", "-o", "json")
	var cas []JournalCAView
	if code != ExitOK || json.Unmarshal([]byte(stdout), &cas) != nil || len(cas) != 1 || cas[0].JournalID != l.h.Cfg.NodeID || cas[0].State != "active" {
		t.Fatalf("a viewer listing journal CAs: exit %d: %s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runLive(t, l, viewer, runOpts{}, "journal", "intermediates", "-o", "json")
	var ins []IntermediateView
	if code != ExitOK || json.Unmarshal([]byte(stdout), &ins) != nil || len(ins) == 0 || ins[0].IssuerSerial != cas[0].Serial {
		t.Errorf("intermediates: exit %d: %s%s", code, stdout, stderr)
	}
	// The shared journal's own journal CA is not revoked here (every
	// other live test needs it): an unknown serial is refused, nothing
	// written.
	code, _, stderr = runLive(t, l, l.alice(t), runOpts{}, "journal", "revoke-ca", "0badc0de0badc0de0badc0de", "--reason", "x", "--yes")
	if code != ExitNotFound || !strings.Contains(stderr, "pact journal intermediates --journal-cas") {
		t.Errorf("revoking an unknown journal CA: exit %d: %s", code, stderr)
	}
}
