package cli_test

// The rough edges a new operator hits (issue 26), each against a real
// journal (journaltest: Raft on bbolt, TLS and gRPC on loopback) through
// cli.Run, as the operator ran them.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/cli"
	"github.com/pact-hpc/pact/internal/snapfile"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// released enrolls node (registered with mac) and has its agent release
// the node as pact-agent does on SIGTERM.
func (r *realJournal) released(t *testing.T, node, mac string) {
	t.Helper()
	key := journaltest.NewKey(t)
	resp, err := r.h.Enroll(t, key, "", mac)
	if err != nil || resp.GetNodeId() != node {
		t.Fatalf("enroll %s: %v %v", node, resp, err)
	}
	cert := key.TLSCert(resp.GetCertChainDer())
	rel, err := pactv1.NewEnrollmentServiceClient(r.h.Dial(t, &cert)).Release(context.Background(), &pactv1.ReleaseRequest{})
	if err != nil || !rel.GetReleased() {
		t.Fatalf("release %s: %v %v", node, rel, err)
	}
}

func (r *realJournal) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := r.run(t, args...)
	if code != cli.ExitOK {
		t.Fatalf("pact %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

// listed is the NODE column of pact node list's table, and each node's
// STATE.
func listed(t *testing.T, table string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i, line := range strings.Split(strings.TrimSpace(table), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 2 {
			continue
		}
		out[f[0]] = f[1]
	}
	return out
}

// Every state the STATE column shows is a --state filter: "fenced" and
// "released" alone, and as the column prints them with a state.
func TestListEveryStateTheTableShows(t *testing.T) {
	r := startRealJournal(t)
	r.mustRun(t, "node", "enroll", "reg", "--mac", "52:54:00:00:00:01")
	r.mustRun(t, "node", "enroll", "fen", "--mac", "52:54:00:00:00:02")
	r.mustRun(t, "node", "fence", "fen", "--reason", "INC-1")
	r.mustRun(t, "node", "enroll", "act", "--mac", "52:54:00:00:00:03")
	if _, err := r.h.Enroll(t, journaltest.NewKey(t), "", "52:54:00:00:00:03"); err != nil {
		t.Fatal(err)
	}
	r.mustRun(t, "node", "enroll", "rel", "--mac", "52:54:00:00:00:04")
	r.released(t, "rel", "52:54:00:00:00:04")

	all := listed(t, r.mustRun(t, "node", "list"))
	want := map[string]string{"reg": "registered", "fen": "registered,fenced", "act": "active", "rel": "active,released"}
	for n, st := range want {
		if all[n] != st {
			t.Errorf("STATE of %s = %q, want %q (table %v)", n, all[n], st, all)
		}
	}
	for _, tt := range []struct {
		state string
		want  string // the nodes listed, sorted
	}{
		{"fenced", "fen"},
		{"FENCED", "fen"},
		{"registered,fenced", "fen"},
		{"fenced,registered", "fen"},
		{"released", "rel"},
		{"active,released", "rel"},
		{"active", "act rel"},
		{"registered", "fen reg"},
	} {
		got := listed(t, r.mustRun(t, "node", "list", "--state", tt.state))
		var names []string
		for n := range got {
			names = append(names, n)
		}
		if strings.Join(slices.Sorted(slices.Values(names)), " ") != tt.want {
			t.Errorf("--state %s listed %v, want %s", tt.state, got, tt.want)
		}
		// Every node listed shows every part of the filter in its STATE.
		for n, st := range got {
			for _, part := range strings.Split(strings.ToLower(tt.state), ",") {
				if !strings.Contains(","+st+",", ","+part+",") {
					t.Errorf("--state %s listed %s as %q", tt.state, n, st)
				}
			}
		}
	}
	// Nothing matches: said on stderr, in the column's words, exit 0.
	code, stdout, stderr := r.run(t, "node", "list", "--state", "inactive,fenced")
	if code != cli.ExitOK || stdout != "" || !strings.Contains(stderr, "no nodes in state inactive,fenced") {
		t.Errorf("--state inactive,fenced: %d %q %q", code, stdout, stderr)
	}
	for _, bad := range []struct{ state, says string }{
		{"fencd", `unknown state "fencd"`},
		{"active,inactive", "names two states"},
		{"inactive,released", "only an active node can be released"},
	} {
		code, _, stderr := r.run(t, "node", "list", "--state", bad.state)
		if code != cli.ExitUsage || !strings.Contains(stderr, bad.says) {
			t.Errorf("--state %s: exit %d, %q; want 2 and %q", bad.state, code, stderr, bad.says)
		}
	}
	// The release shows in inspect and -o json; a fresh enrollment (the
	// restarted agent, new key) ends it.
	out := r.mustRun(t, "node", "inspect", "rel")
	if !strings.Contains(out, "released:") || !strings.Contains(out, "may enroll again at once") {
		t.Errorf("inspect of a released node:\n%s", out)
	}
	var v cli.NodeView
	if err := json.Unmarshal([]byte(r.mustRun(t, "node", "inspect", "rel", "-o", "json")), &v); err != nil || !v.Released || v.State != "active" {
		t.Errorf("inspect -o json: %+v %v", v, err)
	}
	if _, err := r.h.Enroll(t, journaltest.NewKey(t), "", "52:54:00:00:00:04"); err != nil {
		t.Fatalf("the restarted agent's enrollment: %v", err)
	}
	if st := listed(t, r.mustRun(t, "node", "list"))["rel"]; st != "active" {
		t.Errorf("after the agent enrolled again: STATE %q, want active", st)
	}
}

// Unfencing a node that is not fenced (and fencing a fenced one) says
// nothing changed, exits 0 and writes nothing, as enroll does for a node
// registered exactly so; -o json says "unchanged".
func TestFenceAndUnfenceSayWhenNothingChanged(t *testing.T) {
	r := startRealJournal(t)
	r.mustRun(t, "node", "enroll", "n1", "--mac", "52:54:00:00:00:01")
	index := func() string {
		_, _, stderr := r.run(t, "node", "list")
		return stderr // "served by j1 at index N"
	}
	before := index()
	if out := r.mustRun(t, "node", "unfence", "n1"); out != "n1 is not fenced; nothing changed\n" {
		t.Errorf("unfence of a node that is not fenced: %q", out)
	}
	var res cli.NodeResultView
	if err := json.Unmarshal([]byte(r.mustRun(t, "node", "unfence", "n1", "-o", "json")), &res); err != nil || res.Result != "unchanged" || res.NodeID != "n1" || res.Fenced {
		t.Errorf("unfence -o json: %+v %v", res, err)
	}
	if after := index(); after != before {
		t.Errorf("a no-op unfence was written: %q, then %q", before, after)
	}
	if out := r.mustRun(t, "node", "fence", "n1", "--reason", "INC-7"); !strings.HasPrefix(out, "fenced n1") {
		t.Errorf("fence: %q", out)
	}
	before = index()
	if out := r.mustRun(t, "node", "fence", "n1", "--reason", "again"); !strings.Contains(out, "n1 is already fenced") || !strings.Contains(out, "INC-7") || !strings.HasSuffix(out, "nothing changed\n") {
		t.Errorf("fence of a fenced node: %q", out)
	}
	if after := index(); after != before {
		t.Errorf("a no-op fence was written: %q, then %q", before, after)
	}
	if err := json.Unmarshal([]byte(r.mustRun(t, "node", "unfence", "n1", "-o", "json")), &res); err != nil || res.Result != "ok" || res.Fenced {
		t.Errorf("unfence -o json of a fenced node: %+v %v", res, err)
	}
	// enroll -o json says the same of its no-op.
	r.mustRun(t, "node", "enroll", "n2", "--mac", "52:54:00:00:00:02", "-o", "json")
	if err := json.Unmarshal([]byte(r.mustRun(t, "node", "enroll", "n2", "--mac", "52:54:00:00:00:02", "-o", "json")), &res); err != nil || res.Result != "exists" {
		t.Errorf("enroll again -o json: %+v %v", res, err)
	}
}

// A misspelt operator name is refused (exit 3, OPERATOR_NOT_FOUND) with
// the recorded name it probably meant, not "revoked every credential of
// nobody (0 recorded)".
func TestRevokeAnUnknownOperatorName(t *testing.T) {
	r := startRealJournal(t)
	r.mustRun(t, "node", "list") // the bootstrap credential "admin" is recorded at its first use
	code, stdout, stderr := r.run(t, "admin", "revoke", "admn")
	if code != cli.ExitNotFound || stdout != "" || !strings.Contains(stderr, "did you mean admin?") || !strings.Contains(stderr, "OPERATOR_NOT_FOUND") {
		t.Errorf("revoke admn: exit %d\n%s%s", code, stdout, stderr)
	}
	code, _, stderr = r.run(t, "admin", "revoke", "nobody")
	if code != cli.ExitNotFound || !strings.Contains(stderr, "no recorded operator credential has the name nobody") || !strings.Contains(stderr, "--unrecorded") {
		t.Errorf("revoke nobody: exit %d\n%s", code, stderr)
	}
	// On purpose: the name of a credential signed offline, never used.
	if out := r.mustRun(t, "admin", "revoke", "nobody", "--unrecorded"); !strings.Contains(out, "revoked every credential of nobody") {
		t.Errorf("revoke nobody --unrecorded: %q", out)
	}
}

// The CLI and the daemons read one duration syntax: days too.
func TestDurationsTakeDays(t *testing.T) {
	r := startRealJournal(t)
	r.mustRun(t, "node", "enroll", "n1", "--mac", "52:54:00:00:00:01", "--require-token")
	out := filepath.Join(t.TempDir(), "n1.token")
	var tok cli.JoinTokenView
	if err := json.Unmarshal([]byte(r.mustRun(t, "node", "token", "create", "n1", "--ttl", "1d12h", "--out", out, "-o", "json", "--timeout", "1m")), &tok); err != nil {
		t.Fatal(err)
	}
	exp, err := time.Parse(time.RFC3339, tok.ExpiresAt)
	if err != nil || time.Until(exp) < 35*time.Hour || time.Until(exp) > 37*time.Hour {
		t.Errorf("--ttl 1d12h: expires %s (%v)", tok.ExpiresAt, err)
	}
	if code, _, stderr := r.run(t, "node", "token", "create", "n1", "--ttl", "3 days"); code != cli.ExitUsage || !strings.Contains(stderr, "write it like 90s, 30m, 36h, 7d or 1d12h") {
		t.Errorf("--ttl '3 days': exit %d %s", code, stderr)
	}
	dir := t.TempDir()
	r.mustRun(t, "admin", "issue", "bob", "--role", "viewer", "--lifetime", "1.5d", "--cert-out", filepath.Join(dir, "b.pem"), "--key-out", filepath.Join(dir, "b-key.pem"))
	var ops cli.OperatorsView
	if err := json.Unmarshal([]byte(r.mustRun(t, "admin", "list", "-o", "json")), &ops); err != nil {
		t.Fatal(err)
	}
	for _, o := range ops.Operators {
		if o.Name != "bob" {
			continue
		}
		na, err := time.Parse(time.RFC3339, o.NotAfter)
		if err != nil || time.Until(na) < 35*time.Hour || time.Until(na) > 37*time.Hour {
			t.Errorf("--lifetime 1.5d: not after %s (%v)", o.NotAfter, err)
		}
		return
	}
	t.Errorf("bob is not listed: %+v", ops)
}

// snapshot inspect lists the quorum's members, and the journals removed
// before the snapshot (whose addresses the state keeps) apart.
func TestSnapshotInspectListsMembers(t *testing.T) {
	f := raftfsm.New()
	if err := raftfsmtest.Restore(f, &pactv1.Snapshot{Journals: []*pactv1.JournalInfo{
		{JournalId: "j1"}, {JournalId: "j2"}, {JournalId: "j3"}, {JournalId: "j4"},
	}}); err != nil {
		t.Fatal(err)
	}
	state, err := raftfsmtest.SnapshotBytes(f)
	if err != nil {
		t.Fatal(err)
	}
	write := func(members ...string) string {
		var b bytes.Buffer
		if err := snapfile.Write(&b, &pactv1.SnapshotHeader{Domain: "pact.local", Index: 9, Term: 2, Members: members}, state); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "s.snap")
		if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inspect := func(file string, args ...string) string {
		var out, errb bytes.Buffer
		if code := cli.Run(context.Background(), append([]string{"journal", "snapshot", "inspect", file}, args...), cli.Env{Stdout: &out, Stderr: &errb}); code != cli.ExitOK {
			t.Fatalf("inspect: exit %d %s", code, errb.String())
		}
		return out.String()
	}
	file := write("j3", "j1", "j2")
	text := inspect(file)
	if !strings.Contains(text, "journals:          j1, j2, j3\n") || !strings.Contains(text, "removed journals:  j4 (removed before the snapshot") {
		t.Errorf("inspect of a snapshot taken after j4 was removed:\n%s", text)
	}
	var v cli.SnapshotView
	if err := json.Unmarshal([]byte(inspect(file, "-o", "json")), &v); err != nil || strings.Join(v.Journals, ",") != "j1,j2,j3" || strings.Join(v.RemovedJournals, ",") != "j4" || v.MembersUnknown {
		t.Errorf("-o json: %+v %v", v, err)
	}
	// A file from before the members were recorded: every journal, said so.
	old := write()
	if text := inspect(old); !strings.Contains(text, "j1, j2, j3, j4 (every journal the state names") || strings.Contains(text, "removed journals") {
		t.Errorf("inspect of a file without members:\n%s", text)
	}
}
