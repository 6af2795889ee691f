package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// commandCase is one run of a command against seedLive's registry, made
// afresh for the case on a live journal. In args, wantStdout, wantErr and
// notErr, node-a, node-b and node-c stand for the case's own nodes, and
// SERIAL for node-b's certificate serial.
type commandCase struct {
	name       string
	args       []string
	cred       *credFiles
	setup      func(t *testing.T, l *liveJournal, r registry)
	wantCode   int
	wantStdout string   // exact, when set
	wantErr    []string // substrings of stderr
	notErr     []string // must not appear in stderr
	check      func(t *testing.T, l *liveJournal, r registry, rec *recorder, stdout string)
}

func runCommandCases(t *testing.T, l *liveJournal, prefix []string, tests []commandCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			suffix, mac := l.fresh()
			r := seedLive(t, l, suffix, mac)
			if tt.setup != nil {
				tt.setup(t, l, r)
			}
			names := strings.NewReplacer("node-a", r.a, "node-b", r.b, "node-c", r.c, "SERIAL", l.node(t, r.b).GetCert().GetSerial())
			cred := l.alice(t)
			if tt.cred != nil {
				cred = *tt.cred
			}
			args := append([]string{}, prefix...)
			for _, a := range tt.args {
				args = append(args, names.Replace(a))
			}
			rec := &recorder{}
			code, stdout, stderr := runLive(t, l, cred, runOpts{rec: rec}, args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, stderr)
			}
			if want := names.Replace(tt.wantStdout); want != "" && stdout != want {
				t.Errorf("stdout %q, want %q", stdout, want)
			}
			if tt.wantCode != ExitOK && stdout != "" {
				t.Errorf("stdout %q on failure, want nothing", stdout)
			}
			if tt.wantCode == ExitOK && stderr != "" {
				t.Errorf("stderr %q on success", stderr)
			}
			for _, w := range tt.wantErr {
				if w := names.Replace(w); !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			for _, w := range tt.notErr {
				if w := names.Replace(w); strings.Contains(stderr, w) {
					t.Errorf("stderr has %q:\n%s", w, stderr)
				}
			}
			if tt.check != nil {
				tt.check(t, l, r, rec, stdout)
			}
		})
	}
}

// TestDecommission runs on a journal of its own whose clock the test
// moves: a node the journal heard from within two digest intervals (its
// enrollment too) counts as running.
func TestDecommission(t *testing.T) {
	clearEnv(t)
	clk := fakeclock.New(time.Now())
	l := startLiveJournal(t, func(c *journal.Config) { c.Clock = clk })
	viewer := l.operator(t, "bob", pki.RoleViewer)
	// An active node the journal last heard from at its enrollment, long
	// enough ago that it is not running.
	quiet := func(t *testing.T, l *liveJournal, _ registry) { clk.Advance(2*l.h.Cfg.DigestInterval + time.Second) }
	running := func(t *testing.T, l *liveJournal, r registry) { l.stream(t, r.agentB) }
	runCommandCases(t, l, []string{"node", "decommission"}, []commandCase{
		{
			name: "active node: its certificate is revoked", args: []string{"node-b"}, setup: quiet,
			wantCode: ExitOK, wantStdout: "decommissioned node-b (certificate SERIAL revoked)\n",
			check: func(t *testing.T, l *liveJournal, r registry, rec *recorder, _ string) {
				if n := l.node(t, r.b); n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED || n.GetRevokedBy() != "admin/alice" || last[*pactv1.DecommissionNodeRequest](rec).GetForce() {
					t.Errorf("node %v, request %v", n, last[*pactv1.DecommissionNodeRequest](rec))
				}
			},
		},
		{
			name: "active node just enrolled: it counts as running", args: []string{"node-b"},
			wantCode: ExitPrecondition,
			wantErr:  []string{"node node-b has an open stream to a journal (it is running)", "pact node decommission node-b --force"},
		},
		{
			name: "never enrolled: no certificate", args: []string{"node-a"},
			wantCode: ExitOK, wantStdout: "decommissioned node-a (it held no certificate)\n",
		},
		{
			name: "running node is refused without --force", args: []string{"node-b"}, setup: running,
			wantCode: ExitPrecondition,
			wantErr:  []string{"node node-b has an open stream to a journal (it is running); decommissioning cuts it off. Re-run with --force to proceed: pact node decommission node-b --force"},
			check: func(t *testing.T, l *liveJournal, r registry, _ *recorder, _ string) {
				if l.node(t, r.b).GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
					t.Error("node was decommissioned")
				}
			},
		},
		{
			name: "running node with --force", args: []string{"node-b", "--force"}, setup: running,
			wantCode: ExitOK, wantStdout: "decommissioned node-b (certificate SERIAL revoked)\n",
			check: func(t *testing.T, l *liveJournal, r registry, rec *recorder, _ string) {
				if !last[*pactv1.DecommissionNodeRequest](rec).GetForce() || l.node(t, r.b).GetState() != pactv1.NodeState_NODE_STATE_REVOKED {
					t.Error("journal did not see force")
				}
			},
		},
		{
			name: "json", args: []string{"node-b", "-o", "json"}, setup: quiet, wantCode: ExitOK,
			check: func(t *testing.T, l *liveJournal, r registry, _ *recorder, stdout string) {
				var v NodeView
				at := time.Unix(0, l.node(t, r.b).GetRevokedAtUnixNano()).UTC().Format(time.RFC3339)
				if err := json.Unmarshal([]byte(stdout), &v); err != nil || v.State != "revoked" || v.RevokedBy != "admin/alice" || v.RevokedAt != at {
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
			name: "bad name, caught locally", args: []string{"-x"}, wantCode: ExitUsage,
			wantErr: []string{"unknown shorthand flag"},
		},
		{
			name: "no NODE", args: nil, wantCode: ExitUsage,
			wantErr: []string{"missing NODE", "see: pact node decommission --help"},
		},
	})
}

// A journal without a leader (injected) is an outage, not a refusal.
func TestDecommissionWithoutALeader(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	fake := newFakeJournal()
	fake.setFail(apierr.Status(apierr.NoLeader, 0, "election").Err())
	code, _, stderr := runCLI(t, p, append([]string{"node", "decommission", "node-b"}, p.flags(startJournal(t, p, fake))...)...)
	if code != ExitUnavailable || !strings.Contains(stderr, "cannot reach any journal") || !strings.Contains(stderr, "majority of the quorum") {
		t.Errorf("exit %d stderr %s", code, stderr)
	}
}

func TestAssignment(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	opsML := l.operator(t, "olga", pki.RoleOpsPrefix+"ml")
	viewer := l.operator(t, "bob", pki.RoleViewer)
	vclusterOf := func(node, want string) func(*testing.T, *liveJournal, registry, *recorder, string) {
		return func(t *testing.T, l *liveJournal, r registry, _ *recorder, _ string) {
			id := map[string]string{"node-a": r.a, "node-b": r.b}[node]
			if got := l.node(t, id).GetVcluster(); got != want {
				t.Errorf("%s is in %q, want %q", id, got, want)
			}
		}
	}
	runCommandCases(t, l, []string{"node"}, []commandCase{
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
			check: func(t *testing.T, _ *liveJournal, r registry, _ *recorder, stdout string) {
				var v NodeView
				if err := json.Unmarshal([]byte(stdout), &v); err != nil || v.VCluster != "ml" || v.NodeID != r.a {
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
			// The real journal sees node-c is in hpc before it sees it was
			// decommissioned: assign answers VCLUSTER_CHANGED, and the
			// advice to move it is refused in turn (NODE_REVOKED).
			name: "assign a decommissioned node", args: []string{"assign", "node-c", "--vcluster", "ml"}, wantCode: ExitPrecondition,
			wantErr: []string{"VCLUSTER_CHANGED", "node-c is already in hpc"},
		},
		{
			name: "move a decommissioned node", args: []string{"move", "node-c", "--to-vcluster", "ml"}, wantCode: ExitDenied,
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
	l := startLiveJournal(t)
	seedLive(t, l, "", 0)
	alice := l.alice(t)

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
			rec := &recorder{}
			code, stdout, stderr := runLive(t, l, alice, runOpts{rec: rec}, append([]string{"node", "list", "-o", "json"}, tt.args...)...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantErr) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", code, tt.wantCode, stderr, tt.wantErr)
			}
			if tt.wantReq == nil {
				if rec.callCount() != 0 {
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
			r := last[*pactv1.ListNodesRequest](rec)
			if r.GetState() != tt.wantReq.GetState() || r.GetVcluster() != tt.wantReq.GetVcluster() || r.GetUnassigned() != tt.wantReq.GetUnassigned() {
				t.Errorf("journal asked %v, want %v", r, tt.wantReq)
			}
		})
	}

	code, stdout, stderr := runLive(t, l, alice, runOpts{}, "node", "list", "--vcluster", "nope", "--state", "active")
	// The real journal names itself: the served-by note follows.
	if code != ExitOK || stdout != "" || !strings.HasPrefix(stderr, "no nodes in state active, in vCluster nope\nserved by j1 at index ") {
		t.Errorf("empty filtered list: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
}

func TestInspectLiveness(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	suffix, mac := l.fresh()
	r := seedLive(t, l, suffix, mac)
	// The clock pact reads is five minutes past node-b's last sighting.
	seen := time.Unix(0, l.node(t, r.b).GetLastSeenUnixNano())
	now := seen.Add(5 * time.Minute)
	revoked := time.Unix(0, l.node(t, r.c).GetRevokedAtUnixNano()).UTC().Format(time.RFC3339)
	for node, want := range map[string][]string{
		r.b: {`(?m)^last seen: +\S+Z \(5m ago\)$`, `(?m)^revoked at: +-$`},
		r.c: {`(?m)^last seen: +-$`, `(?m)^revoked at: +` + revoked + `$`, `(?m)^revoked by: +admin/alice$`},
	} {
		code, stdout, stderr := runLive(t, l, l.alice(t), runOpts{now: func() time.Time { return now }}, "node", "inspect", node)
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

func TestAudit(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	alice := l.alice(t)
	suffix, mac := l.fresh()
	node := "node-a" + suffix
	// register, enroll (as the agent), assign: three entries about node.
	l.register(t, alice, &pactv1.RegisterNodeRequest{NodeId: node, Hardware: &pactv1.HardwareIdentity{Macs: []string{liveMAC(mac + 1)}}})
	l.activate(t, "", liveMAC(mac+1))
	if _, err := l.client(t, alice).AssignNode(context.Background(), &pactv1.AssignNodeRequest{NodeId: node, Vcluster: "ml"}); err != nil {
		t.Fatal(err)
	}
	cert := l.node(t, node).GetCert().GetSerial()
	now := time.Now()
	run := func(rec *recorder, args ...string) (int, string, string) {
		return runLive(t, l, alice, runOpts{now: func() time.Time { return now }, rec: rec}, append([]string{"audit"}, args...)...)
	}

	t.Run("table", func(t *testing.T) {
		code, stdout, stderr := run(nil, "--node", node)
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
		cols := regexp.MustCompile(`\s{2,}`)
		if h := cols.Split(lines[0], -1); fmt.Sprint(h) != fmt.Sprint([]string{"TIME", "ACTION", "NODE", "ACTOR", "SOURCE", "SERIAL", "DETAIL"}) {
			t.Errorf("header %q", h)
		}
		if len(lines) != 4 {
			t.Fatalf("want 3 rows:\n%s", stdout)
		}
		got := cols.Split(strings.TrimSpace(lines[2]), -1)
		if len(got) < 6 || got[1] != "enroll" || got[2] != node || got[3] != "agent/"+node || !strings.HasPrefix(got[4], "127.0.0.1:") || got[5] != cert[:11]+"…" {
			t.Errorf("enroll row %q", got)
		}
	})

	t.Run("json lines", func(t *testing.T) {
		code, stdout, stderr := run(nil, "--node", node, "-o", "json")
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
		if len(got) != 3 {
			t.Fatalf("%d lines, want 3:\n%s", len(got), stdout)
		}
		var keys []string
		for k := range got[1] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if want := []string{"action", "actor", "correlation_id", "detail", "index", "node_id", "serial", "source", "time", "via"}; fmt.Sprint(keys) != fmt.Sprint(want) {
			t.Errorf("keys %v, want %v", keys, want)
		}
		if strings.Contains(stdout, `\u003e`) {
			t.Errorf("JSON lines escape HTML characters:\n%s", stdout)
		}
		if got[1]["action"] != "enroll" || got[1]["serial"] != cert || got[2]["action"] != "assign" || got[1]["correlation_id"] == "" {
			t.Errorf("entries %v", got)
		}
	})

	t.Run("filters reach the journal", func(t *testing.T) {
		rec := &recorder{}
		code, _, stderr := run(rec, "--node", node, "--since", "1h", "--limit", "2")
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		r := last[*pactv1.ListAuditRequest](rec)
		if r.GetNodeId() != node || r.GetLimit() != 2 || r.GetSinceUnixNano() != now.Add(-time.Hour).UnixNano() {
			t.Errorf("journal asked %v", r)
		}
		code, _, stderr = run(rec, "--since", "2026-03-04T07:00:00Z")
		if since := last[*pactv1.ListAuditRequest](rec).GetSinceUnixNano(); code != ExitOK || since != time.Date(2026, 3, 4, 7, 0, 0, 0, time.UTC).UnixNano() {
			t.Errorf("exit %d, since %d: %s", code, since, stderr)
		}
		code, _, _ = run(rec, "--since", "2d")
		if since := last[*pactv1.ListAuditRequest](rec).GetSinceUnixNano(); code != ExitOK || since != now.Add(-48*time.Hour).UnixNano() {
			t.Errorf("--since 2d: exit %d since %d", code, since)
		}
	})

	t.Run("nothing found", func(t *testing.T) {
		code, stdout, stderr := run(nil, "--node", "node-zz"+suffix)
		if code != ExitOK || stdout != "" || !strings.Contains(stderr, "no audit entries about node node-zz"+suffix) {
			t.Errorf("exit %d stdout %q stderr %q", code, stdout, stderr)
		}
	})

	t.Run("usage errors, all at once", func(t *testing.T) {
		rec := &recorder{}
		code, _, stderr := run(rec, "--since", "yesterday", "--node", "a b", "--limit", "20000")
		for _, w := range []string{"3 problems", `bad --since "yesterday"`, "RFC 3339", "1h", `node "a b"`, "--limit 20000: at most 10000"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
		if code != ExitUsage || rec.callCount() != 0 {
			t.Errorf("exit %d, journal called", code)
		}
		for _, bad := range []string{"-1h", "0s", "1x"} {
			if code, _, _ := run(nil, "--since", bad); code != ExitUsage {
				t.Errorf("--since %s: exit %d", bad, code)
			}
		}
	})
}

// The trail is shown as text a terminal cannot act on: an escape sequence
// in an entry never reaches it. (A real journal refuses one in every
// field an operator sets; this is the CLI's own guard.)
func TestAuditTableIsSanitised(t *testing.T) {
	var out bytes.Buffer
	entries := []AuditView{AuditViewOf(&pactv1.AuditEntry{Index: 13, AtUnixNano: fakeNow.UnixNano(), Actor: "journal/j1", Action: "inactive", NodeId: "node-b", Detail: "\x1b[2Jcleared"})}
	if err := writeAuditTable(&out, entries); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "\x1b") || !strings.Contains(out.String(), "cleared") {
		t.Errorf("table %q", out.String())
	}
}

// A journal that refuses the trail (injected: every role may read it).
func TestAuditDenied(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	fake := newFakeJournal()
	fake.setFail(apierr.Status(apierr.PermissionDenied, 0, "no").Err())
	code, _, stderr := runCLI(t, p, append([]string{"audit"}, p.flags(startJournal(t, p, fake))...)...)
	if code != ExitDenied || !strings.Contains(stderr, "may not read the audit trail") {
		t.Errorf("exit %d stderr %s", code, stderr)
	}
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
