package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// commandCase is one run of a command against a freshly seeded fake.
type commandCase struct {
	name       string
	args       []string
	cred       *credFiles
	setup      func(f *fakeAdmin)
	wantCode   int
	wantStdout string   // exact, when set
	wantErr    []string // substrings of stderr
	notErr     []string // must not appear in stderr
	check      func(t *testing.T, f *fakeAdmin, stdout string)
}

func runCommandCases(t *testing.T, p *testPKI, prefix []string, tests []commandCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFakeAdmin()
			seedRegistry(fake)
			if tt.setup != nil {
				tt.setup(fake)
			}
			addr := startJournal(t, p, fake)
			cred := p.admin
			if tt.cred != nil {
				cred = *tt.cred
			}
			args := append(append(append([]string{}, prefix...), tt.args...), p.flagsFor(cred, addr)...)
			code, stdout, stderr := runCLI(t, p, args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, stderr)
			}
			if tt.wantStdout != "" && stdout != tt.wantStdout {
				t.Errorf("stdout %q, want %q", stdout, tt.wantStdout)
			}
			if tt.wantCode != ExitOK && stdout != "" {
				t.Errorf("stdout %q on failure, want nothing", stdout)
			}
			if tt.wantCode == ExitOK && stderr != "" {
				t.Errorf("stderr %q on success", stderr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			for _, w := range tt.notErr {
				if strings.Contains(stderr, w) {
					t.Errorf("stderr has %q:\n%s", w, stderr)
				}
			}
			if tt.check != nil {
				tt.check(t, fake, stdout)
			}
		})
	}
}

func TestDecommission(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	viewer := p.issueAdmin("viewer", "bob", pki.RoleViewer, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	runCommandCases(t, p, []string{"node", "decommission"}, []commandCase{
		{
			name: "active node: its certificate is revoked", args: []string{"node-b"},
			wantCode: ExitOK, wantStdout: "decommissioned node-b (certificate 0123456789abcdef0123456789abcdef revoked)\n",
			check: func(t *testing.T, f *fakeAdmin, _ string) {
				if n := f.node("node-b"); n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED || n.GetRevokedBy() != "admin/alice" || f.lastForce {
					t.Errorf("node %v, force %v", n, f.lastForce)
				}
			},
		},
		{
			name: "never enrolled: no certificate", args: []string{"node-a"},
			wantCode: ExitOK, wantStdout: "decommissioned node-a (it held no certificate)\n",
		},
		{
			name: "running node is refused without --force", args: []string{"node-b"},
			setup:    func(f *fakeAdmin) { f.streaming["node-b"] = true },
			wantCode: ExitPrecondition,
			wantErr:  []string{"node node-b has an open stream to a journal (it is running); decommissioning cuts it off. Re-run with --force to proceed: pact node decommission node-b --force"},
			check: func(t *testing.T, f *fakeAdmin, _ string) {
				if f.node("node-b").GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
					t.Error("node was decommissioned")
				}
			},
		},
		{
			name: "running node with --force", args: []string{"node-b", "--force"},
			setup:    func(f *fakeAdmin) { f.streaming["node-b"] = true },
			wantCode: ExitOK, wantStdout: "decommissioned node-b (certificate 0123456789abcdef0123456789abcdef revoked)\n",
			check: func(t *testing.T, f *fakeAdmin, _ string) {
				if !f.lastForce {
					t.Error("journal did not see force")
				}
			},
		},
		{
			name: "json", args: []string{"node-b", "-o", "json"}, wantCode: ExitOK,
			check: func(t *testing.T, _ *fakeAdmin, stdout string) {
				var v NodeView
				if err := json.Unmarshal([]byte(stdout), &v); err != nil || v.State != "revoked" || v.RevokedBy != "admin/alice" || v.RevokedAt != "2026-03-04T05:06:07Z" {
					t.Errorf("err %v view %+v", err, v)
				}
			},
		},
		{
			name: "already decommissioned", args: []string{"node-c"}, wantCode: ExitDenied,
			wantErr: []string{"node node-c is already decommissioned", "NODE_REVOKED", "nothing to do", "pact node enroll"},
		},
		{
			name: "unknown node", args: []string{"node-zz"}, wantCode: ExitNotFound,
			wantErr: []string{"no node node-zz in the registry", "pact node list"},
		},
		{
			name: "viewer may not", args: []string{"node-b"}, cred: &viewer, wantCode: ExitDenied,
			wantErr: []string{"your credential (admin bob, role viewer) may not decommission nodes", "needs a credential with role platform-admin"},
		},
		{
			name: "journal without a leader", args: []string{"node-b"}, wantCode: ExitUnavailable,
			setup:   func(f *fakeAdmin) { f.setFail(apierr.Status(apierr.NoLeader, 0, "election").Err()) },
			wantErr: []string{"cannot reach any journal", "majority of the quorum"},
		},
		{
			name: "bad name, caught locally", args: []string{"-x"}, wantCode: ExitUsage,
			wantErr: []string{"unknown shorthand flag"},
		},
		{
			name: "no NODE", args: nil, wantCode: ExitUsage,
			wantErr: []string{"missing NODE", "see: pact node decommission --help"},
		},
	})
}

func TestAssignment(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	opsML := p.issueAdmin("ops-ml", "olga", pki.RoleOpsPrefix+"ml", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	viewer := p.issueAdmin("viewer", "bob", pki.RoleViewer, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	vclusterOf := func(node, want string) func(*testing.T, *fakeAdmin, string) {
		return func(t *testing.T, f *fakeAdmin, _ string) {
			if got := f.node(node).GetVcluster(); got != want {
				t.Errorf("%s is in %q, want %q", node, got, want)
			}
		}
	}
	runCommandCases(t, p, []string{"node"}, []commandCase{
		{
			name: "assign", args: []string{"assign", "node-a", "--vcluster", "ml"},
			wantCode: ExitOK, wantStdout: "node-a: maintenance -> ml\n", check: vclusterOf("node-a", "ml"),
		},
		{
			name: "assign by pact-ops of that vCluster", args: []string{"assign", "node-a", "--vcluster", "ml"}, cred: &opsML,
			wantCode: ExitOK, wantStdout: "node-a: maintenance -> ml\n",
		},
		{
			name: "assign by pact-ops of another vCluster", args: []string{"assign", "node-a", "--vcluster", "hpc"}, cred: &opsML,
			wantCode: ExitDenied,
			wantErr: []string{"your credential (admin olga, role pact-ops-ml) may not assign nodes to hpc",
				"a pact-ops-ml credential may only move nodes into and out of ml", "platform-admin"},
			check: vclusterOf("node-a", ""),
		},
		{
			name: "assign a node that is in a vCluster", args: []string{"assign", "node-b", "--vcluster", "hpc"},
			wantCode: ExitPrecondition,
			wantErr:  []string{"VCLUSTER_CHANGED", "node-b is already in ml", "pact node inspect node-b", "pact node move node-b --to-vcluster hpc"},
		},
		{
			name: "assign json", args: []string{"assign", "node-a", "--vcluster", "ml", "-o", "json"}, wantCode: ExitOK,
			check: func(t *testing.T, _ *fakeAdmin, stdout string) {
				var v NodeView
				if err := json.Unmarshal([]byte(stdout), &v); err != nil || v.VCluster != "ml" || v.NodeID != "node-a" {
					t.Errorf("err %v view %+v", err, v)
				}
			},
		},
		{
			name: "assign needs --vcluster", args: []string{"assign", "node-a"}, wantCode: ExitUsage,
			wantErr: []string{"missing --vcluster", "pact node unassign"},
		},
		{
			name: "assign checks names locally", args: []string{"assign", "bad!", "--vcluster", "no/pe"}, wantCode: ExitUsage,
			wantErr: []string{"2 problems", `node "bad!"`, `--vcluster: invalid name: vcluster "no/pe"`},
		},
		{
			name: "assign a decommissioned node", args: []string{"assign", "node-c", "--vcluster", "ml"}, wantCode: ExitDenied,
			wantErr: []string{"node node-c is revoked"},
		},
		{
			name: "unassign", args: []string{"unassign", "node-b"},
			wantCode: ExitOK, wantStdout: "node-b: ml -> maintenance\n", check: vclusterOf("node-b", ""),
		},
		{
			name: "unassign by pact-ops of that vCluster", args: []string{"unassign", "node-b"}, cred: &opsML,
			wantCode: ExitOK, wantStdout: "node-b: ml -> maintenance\n",
		},
		{
			name: "unassign a node in maintenance", args: []string{"unassign", "node-a"},
			wantCode: ExitOK, wantStdout: "node-a: already in maintenance\n",
		},
		{
			name: "unassign by a viewer", args: []string{"unassign", "node-b"}, cred: &viewer, wantCode: ExitDenied,
			wantErr: []string{"role viewer may only read", "platform-admin", "pact-ops-VCLUSTER of the node's vCluster"},
		},
		{
			// The advice names only roles that could make this change.
			name: "assign by a viewer", args: []string{"assign", "node-a", "--vcluster", "ml"}, cred: &viewer, wantCode: ExitDenied,
			wantErr: []string{"role viewer may only read; use a platform-admin credential, or pact-ops-ml"},
		},
		{
			name: "move by a viewer", args: []string{"move", "node-b", "--to-vcluster", "hpc"}, cred: &viewer, wantCode: ExitDenied,
			wantErr: []string{"role viewer may only read; use a platform-admin credential"}, notErr: []string{"pact-ops"},
		},
		{
			name: "move", args: []string{"move", "node-b", "--to-vcluster", "hpc"},
			wantCode: ExitOK, wantStdout: "node-b: ml -> hpc\n", check: vclusterOf("node-b", "hpc"),
		},
		{
			name: "move to where it is", args: []string{"move", "node-b", "--to-vcluster", "ml"},
			wantCode: ExitOK, wantStdout: "node-b: already in ml\n",
		},
		{
			name: "move out of its own vCluster into another, by pact-ops", args: []string{"move", "node-b", "--to-vcluster", "hpc"}, cred: &opsML,
			wantCode: ExitDenied,
			wantErr:  []string{"a pact-ops-ml credential may only move nodes into and out of ml", "node-b touches hpc"},
			check:    vclusterOf("node-b", "ml"),
		},
		{
			name: "move a node in maintenance", args: []string{"move", "node-a", "--to-vcluster", "ml"}, wantCode: ExitPrecondition,
			wantErr: []string{"node-a is in maintenance", "pact node assign node-a --vcluster ml"},
		},
		{
			name: "move needs --to-vcluster", args: []string{"move", "node-b"}, wantCode: ExitUsage,
			wantErr: []string{"missing --to-vcluster"},
		},
		{
			name: "move an unknown node", args: []string{"move", "node-zz", "--to-vcluster", "ml"}, wantCode: ExitNotFound,
			wantErr: []string{"no node node-zz"},
		},
	})
}

func TestListFilters(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	fake := newFakeAdmin()
	seedRegistry(fake)
	addr := startJournal(t, p, fake)

	tests := []struct {
		name      string
		args      []string
		wantCode  int
		wantNodes []string
		wantReq   *pactv1.ListNodesRequest
		wantErr   string
	}{
		{"by vCluster", []string{"--vcluster", "ml"}, ExitOK, []string{"node-b"}, &pactv1.ListNodesRequest{Vcluster: "ml"}, ""},
		{"unassigned", []string{"--unassigned"}, ExitOK, []string{"node-a"}, &pactv1.ListNodesRequest{Unassigned: true}, ""},
		{"state and vCluster", []string{"--state", "revoked", "--vcluster", "hpc"}, ExitOK, []string{"node-c"},
			&pactv1.ListNodesRequest{State: pactv1.NodeState_NODE_STATE_REVOKED, Vcluster: "hpc"}, ""},
		{"both exclude each other", []string{"--vcluster", "ml", "--unassigned"}, ExitUsage, nil, nil, "--vcluster and --unassigned exclude each other"},
		{"bad vCluster name", []string{"--vcluster", "a b"}, ExitUsage, nil, nil, `vcluster "a b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake.lastList = nil
			code, stdout, stderr := runCLI(t, p, append(append([]string{"node", "list", "-o", "json"}, tt.args...), p.flags(addr)...)...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantErr) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", code, tt.wantCode, stderr, tt.wantErr)
			}
			if tt.wantReq == nil {
				if fake.lastList != nil {
					t.Error("journal called despite a usage error")
				}
				return
			}
			var got []NodeView
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, v := range got {
				ids = append(ids, v.NodeID)
			}
			if fmt.Sprint(ids) != fmt.Sprint(tt.wantNodes) {
				t.Errorf("nodes %v, want %v", ids, tt.wantNodes)
			}
			r := fake.lastList
			if r.GetState() != tt.wantReq.GetState() || r.GetVcluster() != tt.wantReq.GetVcluster() || r.GetUnassigned() != tt.wantReq.GetUnassigned() {
				t.Errorf("journal asked %v, want %v", r, tt.wantReq)
			}
		})
	}

	code, stdout, stderr := runCLI(t, p, append([]string{"node", "list", "--vcluster", "nope", "--state", "active"}, p.flags(addr)...)...)
	if code != ExitOK || stdout != "" || stderr != "no nodes in state active, in vCluster nope\n" {
		t.Errorf("empty filtered list: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
}

func TestInspectLiveness(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	fake := newFakeAdmin()
	seedRegistry(fake)
	now := time.Now()
	fake.nodes["node-b"].LastSeenUnixNano = now.Add(-5 * time.Minute).UnixNano()
	addr := startJournal(t, p, fake)
	for node, want := range map[string][]string{
		"node-b": {`(?m)^last seen: +\S+Z \(5m ago\)$`, `(?m)^revoked at: +-$`},
		"node-c": {`(?m)^last seen: +-$`, `(?m)^revoked at: +2026-03-04T07:06:07Z$`, `(?m)^revoked by: +admin/alice$`},
	} {
		code, stdout, stderr := runEnv(t, p, runOpts{now: func() time.Time { return now }}, append([]string{"node", "inspect", node}, p.flags(addr)...)...)
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, re := range want {
			if !regexp.MustCompile(re).MatchString(stdout) {
				t.Errorf("%s: output does not match %s:\n%s", node, re, stdout)
			}
		}
	}
}

func TestAgo(t *testing.T) {
	now := fakeNow
	for _, tt := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "-"},
		{now.Add(time.Second), "just now"},
		{now.Add(-400 * time.Millisecond), "just now"},
		{now.Add(-12 * time.Second), "12s ago"},
		{now.Add(-90 * time.Second), "1m ago"},
		{now.Add(-3 * time.Hour), "3h ago"},
		{now.Add(-47 * time.Hour), "47h ago"},
		{now.Add(-72 * time.Hour), "3d ago"},
	} {
		if got := ago(now, tt.t); got != tt.want {
			t.Errorf("ago(%v) = %q, want %q", now.Sub(tt.t), got, tt.want)
		}
	}
}

func seedAudit(f *fakeAdmin) {
	at := func(d time.Duration) int64 { return fakeNow.Add(d).UnixNano() }
	f.audit = []*pactv1.AuditEntry{
		{Index: 10, AtUnixNano: at(0), Actor: "admin/alice", Source: "10.0.0.5:51234", Action: "register", NodeId: "node-a", CorrelationId: "c-1", Detail: "macs 52:54:00:00:00:01"},
		{Index: 11, AtUnixNano: at(time.Minute), Actor: "agent/node-a", Source: "10.1.0.7:40000", Action: "enroll", NodeId: "node-a", Serial: "0123456789abcdef0123456789abcdef", CorrelationId: "c-2"},
		{Index: 12, AtUnixNano: at(2 * time.Hour), Actor: "admin/alice", Source: "10.0.0.5:51300", Action: "assign", NodeId: "node-a", CorrelationId: "c-3", Detail: "maintenance -> ml"},
		{Index: 13, AtUnixNano: at(3 * time.Hour), Actor: "journal/j1", Action: "inactive", NodeId: "node-b", Detail: "\x1b[2Jcleared"},
	}
}

func TestAudit(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	fake := newFakeAdmin()
	seedAudit(fake)
	addr := startJournal(t, p, fake)
	now := time.Now()
	run := func(args ...string) (int, string, string) {
		return runEnv(t, p, runOpts{now: func() time.Time { return now }}, append(append([]string{"audit"}, args...), p.flags(addr)...)...)
	}

	t.Run("table", func(t *testing.T) {
		code, stdout, stderr := run()
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
		cols := regexp.MustCompile(`\s{2,}`)
		if h := cols.Split(lines[0], -1); fmt.Sprint(h) != fmt.Sprint([]string{"TIME", "ACTION", "NODE", "ACTOR", "SOURCE", "SERIAL", "DETAIL"}) {
			t.Errorf("header %q", h)
		}
		if len(lines) != 5 {
			t.Fatalf("want 4 rows:\n%s", stdout)
		}
		want := []string{"2026-03-04T05:07:07Z", "enroll", "node-a", "agent/node-a", "10.1.0.7:40000", "0123456789a…", "-"}
		if got := cols.Split(strings.TrimSpace(lines[2]), -1); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("row %q, want %q", got, want)
		}
		if strings.Contains(stdout, "\x1b") {
			t.Error("an escape sequence from the trail reached the terminal")
		}
	})

	t.Run("json lines", func(t *testing.T) {
		code, stdout, stderr := run("-o", "json")
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		sc := bufio.NewScanner(strings.NewReader(stdout))
		var got []map[string]any
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
			}
			got = append(got, m)
		}
		if len(got) != 4 {
			t.Fatalf("%d lines, want 4:\n%s", len(got), stdout)
		}
		var keys []string
		for k := range got[1] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if want := []string{"action", "actor", "correlation_id", "detail", "index", "node_id", "serial", "source", "time", "via"}; fmt.Sprint(keys) != fmt.Sprint(want) {
			t.Errorf("keys %v, want %v", keys, want)
		}
		if !strings.Contains(stdout, `"detail":"maintenance -> ml"`) {
			t.Errorf("JSON lines escape HTML characters:\n%s", stdout)
		}
		if got[1]["correlation_id"] != "c-2" || got[1]["time"] != "2026-03-04T05:07:07Z" || got[1]["index"] != float64(11) || got[1]["serial"] != "0123456789abcdef0123456789abcdef" {
			t.Errorf("entry %v", got[1])
		}
	})

	t.Run("filters reach the journal", func(t *testing.T) {
		code, _, stderr := run("--node", "node-a", "--since", "1h", "--limit", "2")
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		r := fake.lastAudit
		if r.GetNodeId() != "node-a" || r.GetLimit() != 2 || r.GetSinceUnixNano() != now.Add(-time.Hour).UnixNano() {
			t.Errorf("journal asked %v", r)
		}
		code, _, stderr = run("--since", "2026-03-04T07:00:00Z")
		if code != ExitOK || fake.lastAudit.GetSinceUnixNano() != time.Date(2026, 3, 4, 7, 0, 0, 0, time.UTC).UnixNano() {
			t.Errorf("exit %d, since %d: %s", code, fake.lastAudit.GetSinceUnixNano(), stderr)
		}
		code, _, _ = run("--since", "2d")
		if code != ExitOK || fake.lastAudit.GetSinceUnixNano() != now.Add(-48*time.Hour).UnixNano() {
			t.Errorf("--since 2d: exit %d since %d", code, fake.lastAudit.GetSinceUnixNano())
		}
	})

	t.Run("nothing found", func(t *testing.T) {
		code, stdout, stderr := run("--node", "node-zz")
		if code != ExitOK || stdout != "" || !strings.Contains(stderr, "no audit entries about node node-zz") {
			t.Errorf("exit %d stdout %q stderr %q", code, stdout, stderr)
		}
	})

	t.Run("usage errors, all at once", func(t *testing.T) {
		calls := fake.callCount()
		code, _, stderr := run("--since", "yesterday", "--node", "a b", "--limit", "20000")
		for _, w := range []string{"3 problems", `bad --since "yesterday"`, "RFC 3339", "1h", `node "a b"`, "--limit 20000: at most 10000"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
		if code != ExitUsage || fake.callCount() != calls {
			t.Errorf("exit %d, journal called", code)
		}
		for _, bad := range []string{"-1h", "0s", "1x"} {
			if code, _, _ := run("--since", bad); code != ExitUsage {
				t.Errorf("--since %s: exit %d", bad, code)
			}
		}
	})

	t.Run("denied", func(t *testing.T) {
		fake.setFail(apierr.Status(apierr.PermissionDenied, 0, "no").Err())
		defer fake.setFail(nil)
		code, _, stderr := run()
		if code != ExitDenied || !strings.Contains(stderr, "may not read the audit trail") {
			t.Errorf("exit %d stderr %s", code, stderr)
		}
	})
}

func TestParseSince(t *testing.T) {
	now := fakeNow
	for _, tt := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"1h", now.Add(-time.Hour), true},
		{"90m", now.Add(-90 * time.Minute), true},
		{"1h30m", now.Add(-90 * time.Minute), true},
		{"7d", now.Add(-7 * 24 * time.Hour), true},
		{"2026-03-01T00:00:00Z", time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), true},
		{"2026-03-01T01:00:00.5+01:00", time.Date(2026, 3, 1, 0, 0, 0, 5e8, time.UTC), true},
		{"2026-03-01", time.Time{}, false},
		{"-1h", time.Time{}, false},
		{"0", time.Time{}, false},
		{"d", time.Time{}, false},
		{"99999999d", time.Time{}, false},
	} {
		got, err := parseSince(tt.in, now)
		if (err == nil) != tt.ok || (tt.ok && !got.Equal(tt.want)) {
			t.Errorf("parseSince(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
