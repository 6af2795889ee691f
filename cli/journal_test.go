package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

const (
	j1GRPC = "10.0.0.1:7443"
	j1Raft = "10.0.0.1:7500"
)

var interNotAfter = fakeNow.Add(24 * time.Hour)

// seedQuorum makes f journal self of a healthy three-journal quorum led by
// j1, as seen at now: term 3, commit index 120.
func seedQuorum(f *fakeJournal, self string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.self, f.appliedIndex = self, 120
	member := func(id, state string, applied uint64, contact time.Time) *pactv1.JournalMember {
		n := id[1:]
		return &pactv1.JournalMember{
			JournalId: id, RaftAddr: "10.0.0." + n + ":7500", GrpcAddr: "10.0.0." + n + ":7443",
			Voter: true, Leader: id == "j1", Reachable: true, RaftState: state,
			Term: 3, CommitIndex: 120, AppliedIndex: applied, LastContactUnixNano: contact.UnixNano(),
			IntermediateSerial:       "5e" + strings.Repeat(n, 30),
			IntermediateNotAfterUnix: interNotAfter.Unix(),
			Version:                  "v0.3." + n + " (commit 0123abc, go1.26.0, linux/amd64)",
			FeatureLevel:             2, Release: "v0.3." + n,
		}
	}
	f.quorum = fakeQuorum{
		leader: "j1", leaderAddr: j1GRPC, term: 3, commit: 120, level: 2,
		members: []*pactv1.JournalMember{
			member("j3", "Follower", 118, now.Add(-2500*time.Millisecond)),
			member("j1", "Leader", 120, now),
			member("j2", "Follower", 120, now.Add(-120*time.Millisecond)),
		},
	}
}

// downJ3 makes j3 unreachable, as the serving journal saw it.
func downJ3(f *fakeJournal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.quorum.members {
		if m.GetJournalId() == "j3" {
			*m = pactv1.JournalMember{JournalId: "j3", RaftAddr: m.GetRaftAddr(), GrpcAddr: m.GetGrpcAddr(), Voter: true,
				Error: "connection error: dial tcp 10.0.0.3:7443: connect: connection refused"}
		}
	}
}

func (f *fakeJournal) member(id string) *pactv1.JournalMember {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.quorum.members {
		if m.GetJournalId() == id {
			return m
		}
	}
	return nil
}

var tableCols = regexp.MustCompile(`\s{2,}`)

// tableRows splits table lines into cells.
func tableRows(lines []string) [][]string {
	out := make([][]string, len(lines))
	for i, l := range lines {
		out[i] = tableCols.Split(strings.TrimSpace(l), -1)
	}
	return out
}

func TestJournalStatusTable(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	now := time.Now() // the credentials are valid around the real time

	t.Run("one journal unreachable", func(t *testing.T) {
		fake := newFakeJournal()
		seedQuorum(fake, "j2", now)
		downJ3(fake)
		addr := startJournal(t, p, fake)
		code, stdout, stderr := runEnv(t, p, runOpts{now: func() time.Time { return now }}, append([]string{"journal", "status"}, p.flags(addr)...)...)
		if code != ExitQuorumDegraded {
			t.Fatalf("exit %d, want %d with a voter down; stderr:\n%s", code, ExitQuorumDegraded, stderr)
		}
		lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
		if len(lines) != 5 {
			t.Fatalf("want headline, header and 3 rows, got:\n%s", stdout)
		}
		if want := "leader j1, term 3, commit index 120, feature level 2 (served by j2)"; lines[0] != want {
			t.Errorf("headline %q, want %q", lines[0], want)
		}
		rows := tableRows(lines[1:])
		want := [][]string{
			{"ID", "STATE", "VOTER", "RAFT ADDR", "GRPC ADDR", "APPLIED", "LAG", "LAST CONTACT", "INTERMEDIATE", "EXPIRES", "VERSION", "LEVEL", "ERROR"},
			{"j1", "leader", "yes", j1Raft, j1GRPC, "120", "0", "-", "5e111111111…", "2026-03-05T05:06:07Z", "v0.3.1", "2", "-"},
			{"j2", "follower", "yes", "10.0.0.2:7500", "10.0.0.2:7443", "120", "0", "120ms ago", "5e222222222…", "2026-03-05T05:06:07Z", "v0.3.2", "2", "-"},
			{"j3", "unreachable", "yes", "10.0.0.3:7500", "10.0.0.3:7443", "-", "-", "-", "-", "-", "-", "-", "connection error: dial tcp 10.0.0.3:7443: connect: connection refused"},
		}
		for i := range want {
			if fmt.Sprint(rows[i]) != fmt.Sprint(want[i]) {
				t.Errorf("line %d = %q\n          want %q", i+1, rows[i], want[i])
			}
		}
		col := strings.Index(lines[1], "STATE")
		for _, l := range lines[2:] {
			if l[col-1] != ' ' || l[col] == ' ' {
				t.Errorf("row not aligned with header:\n%s\n%s", lines[1], l)
			}
		}
		for _, w := range []string{"warning: 1 of 3 journals unreachable from j2: j3", "2 of 3 voters answered, a majority is 2", "check pact-journal is running"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
		if strings.Contains(stderr, "refuses writes") || strings.Count(stderr, "\n") != 2 || !strings.Contains(stderr, "voter j3 is unreachable") {
			t.Errorf("want one warning line and the exit reason, got:\n%s", stderr)
		}
	})

	t.Run("all up: no ERROR column, no warning", func(t *testing.T) {
		fake := newFakeJournal()
		seedQuorum(fake, "j1", now)
		addr := startJournal(t, p, fake)
		code, stdout, stderr := runEnv(t, p, runOpts{now: func() time.Time { return now }}, append([]string{"journal", "status"}, p.flags(addr)...)...)
		if code != ExitOK || stderr != "" {
			t.Fatalf("exit %d stderr %q", code, stderr)
		}
		lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
		if lines[0] != "leader j1, term 3, commit index 120, feature level 2 (served by j1)" || strings.Contains(lines[1], "ERROR") {
			t.Errorf("stdout:\n%s", stdout)
		}
		if got := tableRows(lines[4:])[0]; fmt.Sprint(got[:8]) != fmt.Sprint([]string{"j3", "follower", "yes", "10.0.0.3:7500", "10.0.0.3:7443", "118", "0", "2s ago"}) {
			t.Errorf("j3 row %q", got)
		}
	})

	// During an upgrade: the serving journal speaks level 2, j3 still
	// runs a release before levels (no level in its answer: level 1), and
	// stderr names it; served by the old release instead, no journal's
	// level is known.
	t.Run("mixed releases", func(t *testing.T) {
		fake := newFakeJournal()
		seedQuorum(fake, "j1", now)
		fake.quorum.level = 1
		for _, m := range fake.quorum.members {
			if m.GetJournalId() == "j3" {
				m.FeatureLevel, m.Release = 0, ""
			}
		}
		fake.below = []string{"j3 (release v0.3.3, level 1)"}
		addr := startJournal(t, p, fake)
		code, stdout, stderr := runEnv(t, p, runOpts{now: func() time.Time { return now }}, append([]string{"journal", "status"}, p.flags(addr)...)...)
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
		if want := "leader j1, term 3, commit index 120, feature level 1 (upgrade under way: 2 once every journal speaks it) (served by j1)"; lines[0] != want {
			t.Errorf("headline %q, want %q", lines[0], want)
		}
		levels := map[string]string{}
		for _, r := range tableRows(lines[2:]) {
			levels[r[0]] = r[11]
		}
		if fmt.Sprint(levels) != "map[j1:2 j2:2 j3:1]" {
			t.Errorf("LEVEL column %v", levels)
		}
		fake.quorum.level = 0
		for _, m := range fake.quorum.members {
			m.FeatureLevel, m.Release = 0, ""
		}
		code, stdout, stderr = runEnv(t, p, runOpts{now: func() time.Time { return now }}, append([]string{"journal", "status"}, p.flags(addr)...)...)
		if code != ExitOK || !strings.Contains(stderr, "journal j1 runs a release before feature levels") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		for _, r := range tableRows(strings.Split(strings.TrimRight(stdout, "\n"), "\n")[2:]) {
			if r[11] != "?" {
				t.Errorf("served by a release before levels: %s LEVEL %q, want ?", r[0], r[11])
			}
		}
	})

	t.Run("no majority, no leader", func(t *testing.T) {
		fake := newFakeJournal()
		seedQuorum(fake, "j2", now)
		downJ3(fake)
		fake.quorum.leader = ""
		for _, m := range fake.quorum.members {
			if m.GetJournalId() == "j1" {
				*m = pactv1.JournalMember{JournalId: "j1", RaftAddr: j1Raft, GrpcAddr: j1GRPC, Voter: true, Error: "context deadline exceeded"}
			}
			if m.GetJournalId() == "j2" {
				m.RaftState = "Candidate"
			}
		}
		addr := startJournal(t, p, fake)
		code, stdout, stderr := runEnv(t, p, runOpts{now: func() time.Time { return now }}, append([]string{"journal", "status"}, p.flags(addr)...)...)
		if code != ExitQuorumNoLeader {
			t.Fatalf("exit %d, want %d: %s", code, ExitQuorumNoLeader, stderr)
		}
		if !strings.HasPrefix(stdout, "no leader, term 3, commit index 120, feature level 2 (served by j2)\n") || !strings.Contains(stdout, "candidate") {
			t.Errorf("stdout:\n%s", stdout)
		}
		for _, w := range []string{"2 of 3 journals unreachable from j2: j1, j3", "1 of 3 voters answered, a majority is 2: without a majority the quorum refuses writes", "warning: no leader from j2"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
	})
}

func TestJournalStatusJSON(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	now := time.Now()
	fake := newFakeJournal()
	seedQuorum(fake, "j2", now)
	downJ3(fake)
	addr := startJournal(t, p, fake)
	code, stdout, stderr := runEnv(t, p, runOpts{now: func() time.Time { return now }}, append([]string{"journal", "status", "-o", "json"}, p.flags(addr)...)...)
	if code != ExitQuorumDegraded {
		t.Fatalf("exit %d, want %d: %s", code, ExitQuorumDegraded, stderr)
	}
	if !strings.Contains(stderr, "j3") {
		t.Errorf("the warning about j3 belongs on stderr in JSON mode too: %q", stderr)
	}
	var v QuorumView
	if err := json.Unmarshal([]byte(stdout), &v); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	if v.LeaderID != "j1" || v.Term != 3 || v.CommitIndex != 120 || v.AppliedIndex != 120 || v.ServedBy != "j2" || len(v.Members) != 3 {
		t.Fatalf("%+v", v)
	}
	j2 := v.Members[1]
	if j2.JournalID != "j2" || j2.State != "follower" || j2.RaftState != "Follower" || !j2.Voter || j2.Leader || !j2.Reachable ||
		j2.Version != "v0.3.2 (commit 0123abc, go1.26.0, linux/amd64)" ||
		j2.IntermediateSerial != "5e"+strings.Repeat("2", 30) || j2.IntermediateNotAfter != "2026-03-05T05:06:07Z" ||
		j2.LastContact != now.Add(-120*time.Millisecond).UTC().Format(time.RFC3339Nano) {
		t.Errorf("j2 %+v", j2)
	}
	if j3 := v.Members[2]; j3.State != "unreachable" || j3.Reachable || !strings.Contains(j3.Error, "connection refused") || j3.LastContact != "" || j3.IntermediateNotAfter != "" {
		t.Errorf("j3 %+v", j3)
	}
	// Field names are a contract with scripts.
	var raw struct {
		Top     map[string]json.RawMessage
		Members []map[string]json.RawMessage `json:"members"`
	}
	if err := json.Unmarshal([]byte(stdout), &raw.Top); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"leader_id": true, "term": true, "commit_index": true, "applied_index": true, "served_by": true, "members": true, "quorum_id": true,
		"quorum_feature_level": true, "feature_level": true, "below_feature_level": true}
	if len(raw.Top) != len(want) {
		t.Errorf("top-level fields %v", keys(raw.Top))
	}
	for k := range want {
		if _, ok := raw.Top[k]; !ok {
			t.Errorf("no %q", k)
		}
	}
	wantMember := []string{"journal_id", "state", "voter", "leader", "reachable", "error", "raft_addr", "grpc_addr", "raft_state", "term", "commit_index", "applied_index", "last_contact", "intermediate_serial", "intermediate_not_after", "version", "halted", "lag", "nonvoter_since", "quorum_id", "journal_ca_serial", "journal_ca_not_after", "journal_ca_state", "journal_ca_file_refused", "feature_level", "release"}
	if len(raw.Members[0]) != len(wantMember) {
		t.Errorf("member fields %v", keys(raw.Members[0]))
	}
	for _, k := range wantMember {
		if _, ok := raw.Members[0][k]; !ok {
			t.Errorf("member has no %q", k)
		}
	}
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestJournalStatusUnreachable(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)

	dead := deadAddr(t)
	code, stdout, stderr := runCLI(t, p, append([]string{"journal", "status"}, p.flags(dead)...)...)
	if code != ExitUnavailable || stdout != "" || !strings.Contains(stderr, "cannot reach any journal at "+dead) {
		t.Errorf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}

	fake := newFakeJournal()
	seedQuorum(fake, "j2", time.Now())
	code, stdout, stderr = runCLI(t, p, append([]string{"journal", "status"}, p.flags(deadAddr(t), startJournal(t, p, fake))...)...)
	if code != ExitOK || stderr != "" || !strings.Contains(stdout, "(served by j2)") {
		t.Errorf("failover: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
}

// journalCase is one journal command against freshly seeded fakes: a
// leader j1, and, when follower is set, a follower j2 whose address comes
// first.
type journalCase struct {
	name       string
	args       []string
	cred       *credFiles
	follower   bool
	noLeader   bool // the leader is not among the addresses
	setup      func(leader *fakeJournal)
	wantCode   int
	wantStdout []string // substrings
	wantErr    []string // substrings of stderr
	noStderr   bool
	check      func(t *testing.T, leader, follower *fakeJournal, stdout string)
}

func runJournalCases(t *testing.T, p *testPKI, tests []journalCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Now()
			leader, follower := newFakeJournal(), newFakeJournal()
			seedQuorum(leader, "j1", now)
			seedQuorum(follower, "j2", now)
			if tt.setup != nil {
				tt.setup(leader)
			}
			var addrs []string
			if tt.follower || tt.noLeader {
				addrs = append(addrs, startJournal(t, p, follower))
			}
			if !tt.noLeader {
				addrs = append(addrs, startJournal(t, p, leader))
			}
			cred := p.admin
			if tt.cred != nil {
				cred = *tt.cred
			}
			args := append(append([]string{}, tt.args...), p.flagsFor(cred, addrs...)...)
			code, stdout, stderr := runEnv(t, p, runOpts{now: func() time.Time { return now }}, args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, stderr)
			}
			if tt.wantCode != ExitOK && stdout != "" {
				t.Errorf("stdout %q on failure, want nothing", stdout)
			}
			if tt.noStderr && stderr != "" {
				t.Errorf("stderr %q", stderr)
			}
			for _, w := range tt.wantStdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if tt.check != nil {
				tt.check(t, leader, follower, stdout)
			}
		})
	}
}

func TestJournalAdd(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	added := func(t *testing.T, leader, _ *fakeJournal, _ string) {
		m := leader.member("j4")
		if m == nil || m.GetRaftAddr() != "10.0.0.4:7500" || !m.GetVoter() {
			t.Errorf("j4 on the leader: %v", m)
		}
	}
	notSent := func(t *testing.T, leader, follower *fakeJournal, _ string) {
		if n := leader.callsOf("AddJournal") + follower.callsOf("AddJournal"); n != 0 {
			t.Errorf("AddJournal sent %d times", n)
		}
	}
	runJournalCases(t, p, []journalCase{
		{
			name: "to the leader", args: []string{"journal", "add", "j4", "10.0.0.4:7500"}, wantCode: ExitOK,
			wantStdout: []string{
				"added journal j4 (raft 10.0.0.4:7500) to the quorum; it caught up and votes: 4 voters, a majority is 3: it serves with up to 1 down\n",
				"ID  ", "j4  ", "unreachable",
			},
			wantErr: []string{"journal j4 has not answered yet (its address is not published yet): it joins once pact-journal runs on its host with --node-id j4 --join --raft-listen 10.0.0.4:7500", "pact journal status"},
			check:   added,
		},
		{
			name: "a follower first: it answers NO_LEADER and the leader takes it", follower: true,
			args: []string{"journal", "add", "j4", "10.0.0.4:7500"}, wantCode: ExitOK,
			wantStdout: []string{"added journal j4"},
			check: func(t *testing.T, leader, follower *fakeJournal, stdout string) {
				added(t, leader, follower, stdout)
				if follower.callsOf("AddJournal") != 1 || leader.callsOf("AddJournal") != 1 || follower.member("j4") != nil {
					t.Errorf("AddJournal calls: follower %d, leader %d", follower.callsOf("AddJournal"), leader.callsOf("AddJournal"))
				}
			},
		},
		{
			name: "json", args: []string{"journal", "add", "j4", "10.0.0.4:7500", "-o", "json"}, wantCode: ExitOK,
			check: func(t *testing.T, _, _ *fakeJournal, stdout string) {
				var v MembershipView
				if err := json.Unmarshal([]byte(stdout), &v); err != nil || v.JournalID != "j4" || v.RaftAddr != "10.0.0.4:7500" || len(v.Members) != 4 ||
					v.Members[3].JournalID != "j4" || v.Members[3].State != "unreachable" {
					t.Errorf("err %v view %+v\n%s", err, v, stdout)
				}
			},
		},
		{
			name: "again, same address: nothing changes", args: []string{"journal", "add", "j3", "10.0.0.3:7500"}, wantCode: ExitOK,
			wantStdout: []string{"journal j3 was already a voting member at 10.0.0.3:7500; nothing changed. 3 voters"},
			noStderr:   true,
		},
		{
			name: "only a follower reachable: name the leader's address", noLeader: true,
			args: []string{"journal", "add", "j4", "10.0.0.4:7500"}, wantCode: ExitUnavailable,
			wantErr: []string{
				"membership changes go to the leader, journal j1 at " + j1GRPC + ", and no --journal address reached it:",
				"NO_LEADER: membership changes go to the leader, j1 at " + j1GRPC,
				"re-run with the leader's address: --journal " + j1GRPC,
			},
		},
		{
			name: "ID already a member elsewhere", args: []string{"journal", "add", "j3", "10.0.0.9:7500"}, wantCode: ExitConflict,
			wantErr: []string{"journal j3 is already a member, at Raft address 10.0.0.3:7500", "pact journal remove j3"},
			check:   notSent,
		},
		{
			name: "address of another member", args: []string{"journal", "add", "j4", "10.0.0.3:7500"}, wantCode: ExitConflict,
			wantErr: []string{"Raft address 10.0.0.3:7500 belongs to journal j3"},
			check:   notSent,
		},
		{
			name: "a gRPC address of a member", args: []string{"journal", "add", "j4", "10.0.0.2:7443"}, wantCode: ExitUsage,
			wantErr: []string{"RAFT_ADDR 10.0.0.2:7443 is the gRPC address of journal j2", "--raft-listen", "see: pact journal add --help"},
			check:   notSent,
		},
		{
			name: "bad arguments", args: []string{"journal", "add", "j 4", "10.0.0.4"}, wantCode: ExitUsage,
			wantErr: []string{"2 problems", `journal "j 4" must be`, `RAFT_ADDR "10.0.0.4": want host:port`},
			check: func(t *testing.T, leader, _ *fakeJournal, _ string) {
				if leader.callCount() != 0 {
					t.Error("the journal was called")
				}
			},
		},
		{
			name: "missing RAFT_ADDR", args: []string{"journal", "add", "j4"}, wantCode: ExitUsage,
			wantErr: []string{"missing RAFT_ADDR", "pact journal add j4 10.0.0.4:7500"},
		},
	})

	t.Run("RAFT_ADDR is a --journal address", func(t *testing.T) {
		fake := newFakeJournal()
		seedQuorum(fake, "j1", time.Now())
		addr := startJournal(t, p, fake)
		code, _, stderr := runCLI(t, p, append([]string{"journal", "add", "j4", addr}, p.flags(addr)...)...)
		if code != ExitUsage || !strings.Contains(stderr, "is in --journal, so it is a journal's gRPC address") || fake.callCount() != 0 {
			t.Errorf("exit %d calls %d stderr %s", code, fake.callCount(), stderr)
		}
	})
}

func TestJournalRemove(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	runJournalCases(t, p, []journalCase{
		{
			name: "a member", args: []string{"journal", "remove", "j3"}, wantCode: ExitOK,
			wantStdout: []string{"removed journal j3 from the quorum: 2 voters, a majority is 2: it serves with up to 0 down\n", "j1  ", "j2  "},
			wantErr:    []string{"pact-journal on j3's host notices it was removed, stops serving and exits with code 3"},
			check: func(t *testing.T, leader, _ *fakeJournal, stdout string) {
				if leader.member("j3") != nil || strings.Contains(stdout, "j3  ") {
					t.Errorf("j3 still listed:\n%s", stdout)
				}
			},
		},
		{
			name: "via a follower", follower: true, args: []string{"journal", "remove", "j3"}, wantCode: ExitOK,
			check: func(t *testing.T, leader, follower *fakeJournal, _ string) {
				if leader.member("j3") != nil || follower.callsOf("RemoveJournal") != 1 {
					t.Error("not removed on the leader")
				}
			},
		},
		{
			name: "json", args: []string{"journal", "remove", "j3", "-o", "json"}, wantCode: ExitOK, noStderr: true,
			check: func(t *testing.T, _, _ *fakeJournal, stdout string) {
				var v MembershipView
				if err := json.Unmarshal([]byte(stdout), &v); err != nil || v.JournalID != "j3" || len(v.Members) != 2 || strings.Contains(stdout, "raft_addr\": \"\"") {
					t.Errorf("err %v view %+v", err, v)
				}
			},
		},
		{
			name: "no leader anywhere", args: []string{"journal", "remove", "j3"}, wantCode: ExitUnavailable,
			setup:   func(f *fakeJournal) { f.quorum.leader = "" },
			wantErr: []string{"cannot reach any journal", "majority of the quorum"},
		},
		{
			name: "two at once", args: []string{"journal", "remove", "j2", "j3"}, wantCode: ExitUsage,
			wantErr: []string{"takes one ID, got 2 arguments", "one journal at a time"},
		},
	})
}

// TestJournalWriteTimeout: a membership change that timed out on a
// connected journal may have been made; the message says how to check.
func TestJournalWriteTimeout(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	var out, errb bytes.Buffer
	a := &app{env: Env{Stdout: &out, Stderr: &errb}.withDefaults()}
	a.newClient = func(Config, *credential) (pactv1.AdminServiceClient, io.Closer, error) {
		return journalTimeoutClient{}, nil, nil
	}
	code := a.run(context.Background(), append([]string{"journal", "remove", "j3", "--timeout", "3s"}, p.flags("127.0.0.1:1")...))
	if code != ExitUnavailable || out.Len() != 0 {
		t.Errorf("exit %d stdout %q", code, out.String())
	}
	for _, w := range []string{"journal 127.0.0.1:1 did not answer within 3s", "may or may not have been made: check with pact journal status before retrying", "re-running reports it is not a member"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr lacks %q: %s", w, errb.String())
		}
	}
}

type journalTimeoutClient struct{ pactv1.AdminServiceClient }

func (journalTimeoutClient) RemoveJournal(context.Context, *pactv1.RemoveJournalRequest, ...grpc.CallOption) (*pactv1.RemoveJournalResponse, error) {
	return nil, &JournalError{Addr: "127.0.0.1:1", Err: &apierr.Error{Code: codes.DeadlineExceeded, Message: "context deadline exceeded"}}
}

func TestJournalStatusArgs(t *testing.T) {
	clearEnv(t)
	code, stdout, stderr := runCLI(t, nil, "journal", "status", "j1", "--journal", "h:1", "--ca", "a", "--cert", "b", "--key", "c")
	if code != ExitUsage || stdout != "" || !strings.Contains(stderr, "pact --journal HOST:PORT journal status") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, nil, "journal", "stat")
	if code != ExitUsage || !strings.Contains(stderr, "did you mean status?") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
}

func TestListServedBy(t *testing.T) {
	clearEnv(t)
	l, _ := seededJournal(t)
	alice := l.alice(t)
	applied := func() uint64 {
		st, err := l.client(t, alice).JournalStatus(context.Background(), &pactv1.JournalStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st.GetAppliedIndex()
	}
	before := applied()
	code, stdout, stderr := runLive(t, l, alice, runOpts{}, "node", "list")
	after := applied()
	m := regexp.MustCompile(`^served by j1 at index (\d+)\n$`).FindStringSubmatch(stderr)
	if code != ExitOK || m == nil || strings.Contains(stdout, "served") {
		t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	// The index the journal read at: its applied index at the time.
	if n, _ := strconv.ParseUint(m[1], 10, 64); n < before || n > after || n == 0 {
		t.Errorf("served at index %d, the journal's applied index was %d, then %d", n, before, after)
	}
	code, stdout, stderr = runLive(t, l, alice, runOpts{}, "node", "list", "-o", "json")
	var views []NodeView
	if err := json.Unmarshal([]byte(stdout), &views); code != ExitOK || err != nil || len(views) != 3 || stderr != "" {
		t.Errorf("json: exit %d err %v stderr %q", code, err, stderr)
	}
}

func TestContactAgo(t *testing.T) {
	now := fakeNow
	for _, tt := range []struct {
		t      time.Time
		leader bool
		want   string
	}{
		{now, true, "-"},
		{time.Time{}, false, "never"},
		{now.Add(5 * time.Millisecond), false, "just now"},
		{now, false, "0ms ago"},
		{now.Add(-120 * time.Millisecond), false, "120ms ago"},
		{now.Add(-2500 * time.Millisecond), false, "2s ago"},
		{now.Add(-3 * time.Minute), false, "3m ago"},
	} {
		if got := contactAgo(now, tt.t, tt.leader); got != tt.want {
			t.Errorf("contactAgo(%v, leader %v) = %q, want %q", now.Sub(tt.t), tt.leader, got, tt.want)
		}
	}
}

func TestJournalHelp(t *testing.T) {
	clearEnv(t)
	code, stdout, _ := runCLI(t, nil, "journal", "add", "--help")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, w := range []string{"pact journal add j4 10.0.0.4:7500", "pact-journal --node-id j4 --join --raft-listen 10.0.0.4:7500", "platform-admin", "--journal"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("journal add --help lacks %q", w)
		}
	}
	code, stdout, _ = runCLI(t, nil, "journal")
	if code != ExitOK || !strings.Contains(stdout, "status") || !strings.Contains(stdout, "remove") {
		t.Errorf("exit %d:\n%s", code, stdout)
	}
}

// A registry larger than one page is listed page by page: every node
// once, in order, and the note says which indexes the pages were read at.
func TestListPagesThroughALargeRegistry(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	fake := newFakeJournal()
	for i := range 12000 {
		fake.put(&pactv1.Node{NodeId: fmt.Sprintf("node-%05d", i), State: pactv1.NodeState_NODE_STATE_REGISTERED,
			Hardware: &pactv1.HardwareIdentity{Macs: []string{fmt.Sprintf("52:54:00:00:%02x:%02x", i>>8, i&0xff)}}})
	}
	seedQuorum(fake, "j2", time.Now())
	addr := startJournal(t, p, fake)

	code, stdout, stderr := runCLI(t, p, append([]string{"node", "list"}, p.flags(addr)...)...)
	if code != ExitOK || stderr != "served by j2 at indexes 120-122, in 3 pages\n" {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); len(lines) != 12001 || !strings.HasPrefix(lines[1], "node-00000 ") || !strings.HasPrefix(lines[12000], "node-11999 ") {
		t.Fatalf("%d lines, want a header and 12000 nodes in order", len(lines))
	}
	if got := fake.lastList.GetPageSize(); got != listPageSize {
		t.Errorf("page size asked %d, want %d", got, listPageSize)
	}
	code, stdout, _ = runCLI(t, p, append([]string{"node", "list", "-o", "json"}, p.flags(addr)...)...)
	var views []NodeView
	if err := json.Unmarshal([]byte(stdout), &views); code != ExitOK || err != nil || len(views) != 12000 {
		t.Fatalf("json: exit %d, %d nodes, %v", code, len(views), err)
	}
	seen := map[string]bool{}
	for _, v := range views {
		if seen[v.NodeID] {
			t.Fatalf("%s listed twice", v.NodeID)
		}
		seen[v.NodeID] = true
	}
}

// A journal that hands back a page token already used would list forever:
// pact stops and says it is a journal fault.
func TestListStopsOnAPageTokenLoop(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	fake := newFakeJournal()
	seedRegistry(fake)
	fake.stuckToken = true
	addr := startJournal(t, p, fake)
	code, stdout, stderr := runCLI(t, p, append([]string{"node", "list"}, p.flags(addr)...)...)
	if code != ExitInternal || stdout != "" || !strings.Contains(stderr, "token of a page already read") || !strings.Contains(stderr, "journal fault") {
		t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if fake.listPages != 2 {
		t.Errorf("%d pages asked for, want 2", fake.listPages)
	}
}

// gRPC's message size limit is a ResourceExhausted with no pact reason:
// not a rate limit, and no use waiting.
func TestListAnswerTooLargeIsNotARateLimit(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	fake := newFakeJournal()
	fake.setFail(status.Error(codes.ResourceExhausted, "grpc: received message larger than max (7799738 vs. 4194304)"))
	addr := startJournal(t, p, fake)
	code, _, stderr := runCLI(t, p, append([]string{"node", "list"}, p.flags(addr)...)...)
	if code != ExitInternal || strings.Contains(stderr, "rate limiting") || !strings.Contains(stderr, "larger than one message may be") || !strings.Contains(stderr, "upgrade") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
}

// What a real journal refuses of a membership change: a viewer's, and the
// removal of a journal that is no member.
func TestJournalMembershipRefusals(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	viewer := l.operator(t, "bob", pki.RoleViewer)
	rec := &recorder{}
	code, stdout, stderr := runLive(t, l, viewer, runOpts{rec: rec}, "journal", "add", "j4", "10.0.0.4:7500")
	if code != ExitDenied || stdout != "" || !strings.Contains(stderr, "your credential (admin bob, role viewer) may not add journals to the quorum") || !strings.Contains(stderr, "needs a credential with role platform-admin") {
		t.Errorf("viewer add: exit %d stdout %q stderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = runLive(t, l, viewer, runOpts{rec: rec}, "journal", "remove", "j1")
	if code != ExitDenied || stdout != "" || !strings.Contains(stderr, "your credential (admin bob, role viewer) may not remove journals from the quorum") {
		t.Errorf("viewer remove: exit %d stdout %q stderr %s", code, stdout, stderr)
	}
	code, _, stderr = runLive(t, l, l.alice(t), runOpts{}, "journal", "remove", "j9")
	if code != ExitNotFound || !strings.Contains(stderr, "no journal \"j9\" in the quorum") || !strings.Contains(stderr, "NOT_FOUND") || !strings.Contains(stderr, "pact journal status") {
		t.Errorf("remove j9: exit %d stderr %s", code, stderr)
	}
	if st, err := l.h.AdminClient(t).JournalStatus(context.Background(), &pactv1.JournalStatusRequest{}); err != nil || len(st.GetMembers()) != 1 {
		t.Errorf("the quorum changed: %v %v", st, err)
	}
}
