package integration

// Process-level tests of a quorum's day 2 (issue 12): membership changes
// that cannot take the quorum down by mistake, a removed journal that
// stops, status exit codes for monitoring. Real pact-journal processes,
// Raft over mutual TLS on loopback, the pact CLI as an operator runs it.

import (
	"encoding/json"
	"fmt"
	"github.com/pact-hpc/pact/internal/polltest"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// statusJSON is the part of "pact journal status -o json" the tests read.
type statusJSON struct {
	LeaderID string `json:"leader_id"`
	QuorumID string `json:"quorum_id"`
	Members  []struct {
		JournalID     string `json:"journal_id"`
		Voter         bool   `json:"voter"`
		Reachable     bool   `json:"reachable"`
		State         string `json:"state"`
		Version       string `json:"version"`
		Halted        string `json:"halted"`
		Lag           uint64 `json:"lag"`
		AppliedIndex  uint64 `json:"applied_index"`
		NonvoterSince string `json:"nonvoter_since"`
	} `json:"members"`
}

// status runs pact journal status -o json against addrs and returns it
// with the exit code.
func (q *quorum) status(addrs ...string) (statusJSON, int, string) {
	q.t.Helper()
	stdout, stderr, code := runPact(q.t, q.env(addrs...), "journal", "status", "-o", "json")
	var st statusJSON
	if err := json.Unmarshal([]byte(stdout), &st); err != nil && code != 7 {
		q.t.Fatalf("pact journal status -o json: exit %d, not JSON: %v\n%s%s", code, err, stdout, stderr)
	}
	return st, code, stderr
}

// waitStatus polls pact journal status (bounded) until ok accepts it.
func (q *quorum) waitStatus(what string, ok func(statusJSON, int) bool, addrs ...string) statusJSON {
	q.t.Helper()
	var st statusJSON
	var last polltest.Last
	polltest.Until(q.t, 30*time.Second, 200*time.Millisecond, func() bool {
		var code int
		var stderr string
		st, code, stderr = q.status(addrs...)
		last.Value = fmt.Sprintf("exit %d: %+v\n%s", code, st, stderr)
		return ok(st, code)
	}, "waiting for %s: last status %v", what, &last)
	return st
}

// addJoiner prepares a journal that starts empty with --join and starts
// it; it serves once added.
func (q *quorum) addJoiner(id string) int {
	q.t.Helper()
	a := freeAddrs(q.t, 3)
	m := &member{id: id, grpc: a[0], raft: a[1], metrics: a[2]}
	pkiArgs, err := q.pq.PKIArgs(id)
	if err != nil {
		q.t.Fatal(err)
	}
	i := q.add(m, append([]string{
		"--node-id", m.id, "--data-dir", filepath.Join(q.dir, m.id), "--join",
		"--listen", m.grpc, "--raft-listen", m.raft, "--metrics-listen", m.metrics,
	}, pkiArgs...))
	q.launch(i)
	// Its Raft port is open once it says it waits.
	var out polltest.Last
	polltest.Until(q.t, 30*time.Second, 50*time.Millisecond, func() bool {
		select {
		case <-q.exited(i):
			q.t.Fatalf("%s exited before waiting to be added:\n%s", id, q.output(i))
		default:
		}
		out.Value = q.output(i)
		return strings.Contains(q.output(i), "waiting to be added to a quorum")
	}, "%s did not start waiting within 30s:\n%v", id, &out)
	return i
}

func (q *quorum) index(id string) int {
	for i, m := range q.members {
		if m.id == id {
			return i
		}
	}
	q.t.Fatalf("no member %s", id)
	return -1
}

// kill SIGKILLs member i and waits for it to be gone.
func (q *quorum) kill(i int) {
	q.t.Helper()
	q.signal(i, syscall.SIGKILL)
	select {
	case <-q.exited(i):
	case <-time.After(30 * time.Second):
		q.t.Fatalf("%s did not die on SIGKILL", q.members[i].id)
	}
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// --raft-listen without --initial-cluster or --join would silently start a
// second one-journal quorum under the same root: it is a usage error that
// names both flags, and nothing is bootstrapped.
func TestRaftListenNeedsClusterOrJoin(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	if out, err := exec.Command(filepath.Join(binDir, "pact-journal"), "init", "--dir", dir, "--domain", "pact.local").CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	a := freeAddrs(t, 2)
	p := start(t, nil, "pact-journal", "--node-id", "j1", "--data-dir", filepath.Join(dir, "j1"),
		"--listen", a[0], "--raft-listen", a[1], "--root-cert", filepath.Join(dir, "ca.pem"), "--root-key", filepath.Join(dir, "ca-key.pem"))
	if code := p.wait(t); code != 2 {
		t.Fatalf("exit %d, want 2 (usage)\n%s", code, p.output())
	}
	wantContains(t, "the error", p.output(), "--initial-cluster", "--join", "neither")
}

// The dev journal (no --raft-listen) refuses to grow: the mistyped add that
// once cost a data directory is refused, and the journal keeps serving.
func TestDevJournalRefusesAdd(t *testing.T) {
	skipShort(t)
	j := startJournal(t, t.TempDir(), "127.0.0.1:0")
	out, code := j.pact(t, "journal", "add", "j2", "127.0.0.1:7599")
	if code != 6 {
		t.Fatalf("pact journal add on a dev journal: exit %d, want 6\n%s", code, out)
	}
	wantContains(t, "the refusal", out, "without --raft-listen", "--initial-cluster", "MEMBERSHIP_REFUSED")
	if out, code := j.pact(t, "node", "enroll", "n1", "--mac", "52:54:00:00:00:01"); code != 0 {
		t.Fatalf("the dev journal no longer serves writes after the refused add: exit %d\n%s", code, out)
	}
}

// Membership changes on a quorum of real processes: a journal that does not
// answer (or answers as another id) is not added; a new journal joins as a
// non-voter and is promoted; a remove that would leave no majority of
// reachable voters is refused with the arithmetic; a removed journal stops
// serving, exits 3 and will not start again from its data directory; the
// status exit codes follow the quorum's health.
func TestMembershipSafety(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	env := q.env(q.addrs()...)
	q.registerBatch(inventory("memb", 5))

	st, code, stderr := q.status(q.addrs()...)
	if code != 0 || st.LeaderID == "" || len(st.Members) != 3 {
		t.Fatalf("healthy quorum: status exit %d %+v\n%s", code, st, stderr)
	}
	for _, m := range st.Members {
		if m.Version == "" {
			t.Errorf("member %s reports no version", m.JournalID)
		}
	}

	// Nobody at the address: refused before it becomes a member.
	dead := freeAddrs(t, 1)[0]
	stdout, stderr, code := runPact(t, env, "journal", "add", "j4", dead)
	if code != 6 {
		t.Fatalf("add of a journal that does not answer: exit %d, want 6\n%s%s", code, stdout, stderr)
	}
	wantContains(t, "the refusal", stderr, "does not answer at Raft address "+dead, "--join")

	j4 := q.addJoiner("j4")
	// The right address under the wrong id: refused.
	stdout, stderr, code = runPact(t, env, "journal", "add", "j5", q.members[j4].raft)
	if code != 6 {
		t.Fatalf("add under the wrong id: exit %d, want 6\n%s%s", code, stdout, stderr)
	}
	wantContains(t, "the refusal", stderr, "is j4, not j5")

	stdout, stderr, code = runPact(t, env, "journal", "add", "j4", q.members[j4].raft)
	if code != 0 {
		t.Fatalf("pact journal add j4: exit %d\n%s%s", code, stdout, stderr)
	}
	wantContains(t, "the add's answer", stdout, "added journal j4")
	q.waitServing(j4)
	q.waitStatus("j4 promoted to voter", func(st statusJSON, code int) bool {
		for _, m := range st.Members {
			if m.JournalID == "j4" {
				return m.Voter && m.Reachable && code == 0
			}
		}
		return false
	}, q.addrs()...)
	logs := ""
	for i := range q.members {
		logs += q.output(i)
	}
	wantContains(t, "the leader's log", logs, "added to the quorum as a non-voter", "caught up and promoted to voter")

	// j3 dies: 4 voters, 3 reachable. Status says degraded (11).
	j3 := q.index("j3")
	q.kill(j3)
	live := []string{q.members[0].grpc, q.members[1].grpc, q.members[j4].grpc}
	// (j3 may have led: wait for the others to elect a new leader.)
	q.waitStatus("status exit 11 with j3 down", func(st statusJSON, code int) bool {
		return code == 11 && st.LeaderID != "" && st.LeaderID != "j3"
	}, live...)
	_, stderr, _ = runPact(t, q.env(live...), "journal", "status")
	wantContains(t, "status stderr", stderr, "voter j3 is unreachable")

	// The safe case first: remove the dead j3.
	stdout, stderr, code = runPact(t, q.env(live...), "journal", "remove", "j3")
	if code != 0 {
		t.Fatalf("remove of the dead j3: exit %d\n%s%s", code, stdout, stderr)
	}
	q.waitStatus("healthy again without j3", func(st statusJSON, code int) bool { return code == 0 && len(st.Members) == 3 }, live...)

	// Now a follower X dies: voters L, X, Y with two up. Removing the
	// reachable follower Y would leave L and X with one up: refused, with
	// the arithmetic.
	leader := q.leader(0, 1, j4)
	var others []int
	for _, i := range []int{0, 1, j4} {
		if i != leader {
			others = append(others, i)
		}
	}
	x, y := others[0], others[1]
	q.kill(x)
	live = []string{q.members[leader].grpc, q.members[y].grpc}
	stdout, stderr, code = runPact(t, q.env(live...), "journal", "remove", q.members[y].id)
	if code != 6 {
		t.Fatalf("unsafe remove: exit %d, want 6\n%s%s", code, stdout, stderr)
	}
	wantContains(t, "the refusal", stderr, "would have 2 voters", "2 of them must be up", "only 1 of them answer", q.members[x].id+" unreachable", "--force")

	// Remove the dead X (safe), then Y (reachable; leaves the leader alone,
	// one voter and one up: safe): Y notices and exits 3.
	if stdout, stderr, code = runPact(t, q.env(live...), "journal", "remove", q.members[x].id); code != 0 {
		t.Fatalf("remove of the dead %s: exit %d\n%s%s", q.members[x].id, code, stdout, stderr)
	}
	if stdout, stderr, code = runPact(t, q.env(live...), "journal", "remove", q.members[y].id); code != 0 {
		t.Fatalf("remove %s: exit %d\n%s%s", q.members[y].id, code, stdout, stderr)
	}
	if code := q.wait(y); code != 3 {
		t.Fatalf("the removed %s exited %d, want 3\n%s", q.members[y].id, code, q.output(y))
	}
	wantContains(t, "the removed journal's log", q.output(y), "REMOVED FROM THE QUORUM", "--join")
	// Started again as if nothing happened: it refuses at once.
	q.launch(y)
	if code := q.wait(y); code != 3 {
		t.Fatalf("restarting the removed %s: exit %d, want 3\n%s", q.members[y].id, code, q.output(y))
	}
	wantContains(t, "the restarted journal's log", q.output(y), "was removed from the quorum", "empty this directory")

	// The last voter cannot be removed, even with --force.
	stdout, stderr, code = runPact(t, q.env(q.members[leader].grpc), "journal", "remove", q.members[leader].id, "--force")
	if code != 6 || !strings.Contains(stderr, "last voter") {
		t.Fatalf("removing the last voter: exit %d\n%s%s", code, stdout, stderr)
	}
	if st, code, _ := q.status(q.members[leader].grpc); code != 0 || len(st.Members) != 1 {
		t.Fatalf("a quorum of one: status exit %d, %+v", code, st)
	}
}

// A quorum that lost its majority: pact journal status exits 10 (no
// leader).
func TestStatusNoLeader(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	// The admin credential has never been used: its first-use record
	// (issue 14b) cannot be written without a leader, and the status call
	// must still say what is wrong (exit 10), not NO_LEADER (exit 7).
	q.kill(1)
	q.kill(2)
	st := q.waitStatus("no leader", func(st statusJSON, code int) bool { return code == 10 }, q.members[0].grpc)
	if st.LeaderID != "" {
		t.Fatalf("status exit 10 with leader %q", st.LeaderID)
	}
	_, stderr, _ := runPact(t, q.env(q.members[0].grpc), "journal", "status")
	wantContains(t, "status stderr", stderr, "no leader", "voter j2 is unreachable")
}

var _ = fmt.Sprint

// --force overrides the arithmetic, and the consequence the refusal
// spelled out follows: with a follower dead, removing the other one leaves
// the leader and the dead one, and the quorum has no leader.
func TestForcedRemoveStopsTheQuorum(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	leader := q.leader()
	x, y := (leader+1)%3, (leader+2)%3
	q.kill(x)
	live := []string{q.members[leader].grpc, q.members[y].grpc}
	stdout, stderr, code := runPact(t, q.env(live...), "journal", "remove", q.members[y].id)
	if code != 6 || !strings.Contains(stderr, "--force") {
		t.Fatalf("unsafe remove without --force: exit %d\n%s%s", code, stdout, stderr)
	}
	// The change itself must be committed by the new configuration (the
	// leader and the dead one), so the leader may lose its leadership
	// before it learns the outcome: exit 0 or 7.
	stdout, stderr, code = runPact(t, q.env(live...), "journal", "remove", q.members[y].id, "--force")
	if code != 0 && code != 7 {
		t.Fatalf("remove --force: exit %d\n%s%s", code, stdout, stderr)
	}
	wantContains(t, "the leader's log", q.output(leader), "(--force)")
	q.waitStatus("no leader after the forced remove", func(_ statusJSON, code int) bool { return code == 10 }, q.members[leader].grpc)
}

// The case of the issue: a journal removed while it was down, then started
// again as if nothing happened (make cluster used to). It never received
// the entry that removed it; it learns it from the other members, refuses
// to serve and exits 3, and keeps refusing.
func TestRemovedWhileDownThenRestarted(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	q.registerBatch(inventory("rwd", 3))
	victim := (q.leader() + 1) % 3
	q.kill(victim)
	var live []string
	for i, m := range q.members {
		if i != victim {
			live = append(live, m.grpc)
		}
	}
	if stdout, stderr, code := runPact(t, q.env(live...), "journal", "remove", q.members[victim].id); code != 0 {
		t.Fatalf("remove the stopped %s: exit %d\n%s%s", q.members[victim].id, code, stdout, stderr)
	}
	q.launch(victim)
	if code := q.wait(victim); code != 3 {
		t.Fatalf("the removed journal started again: exit %d, want 3\n%s", code, q.output(victim))
	}
	wantContains(t, "its log", q.output(victim), "REMOVED FROM THE QUORUM (journal")
	if strings.Contains(q.output(victim), "journal serving") {
		t.Errorf("the removed journal served before it noticed:\n%s", q.output(victim))
	}
	q.launch(victim)
	if code := q.wait(victim); code != 3 {
		t.Fatalf("second restart: exit %d, want 3\n%s", code, q.output(victim))
	}
}
