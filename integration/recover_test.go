package integration

// Process-level test of recovery from a lost majority (issue 12): three
// journals with enrollments going on, two of them killed for good, the
// survivor turned into a new quorum with pact-journal recover, two new
// journals added; running pact-agent processes carry on by themselves.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pact-hpc/pact/integration/launch"
	"github.com/pact-hpc/pact/internal/polltest"
)

// agentStatus runs pact-agent status against socket and returns its code.
func agentStatus(t *testing.T, socket string) (int, string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "pact-agent"), "status", "--status-socket", socket).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// waitAgentStatus polls pact-agent status (bounded) until it exits want.
func waitAgentStatus(t *testing.T, socket string, want int, within time.Duration) {
	t.Helper()
	var last polltest.Last
	polltest.Until(t, within, 250*time.Millisecond, func() bool {
		code, out := agentStatus(t, socket)
		last.Value = fmt.Sprintf("exit %d\n%s", code, out)
		return code == want
	}, "pact-agent status on %s: want exit %d within %s, last %v", socket, want, within, &last)
}

func TestRecoverLostMajority(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	nodes := inventory("rec", 120)
	q.registerBatch(nodes)
	ca := filepath.Join(q.dir, "ca.pem")
	before, _, _ := q.status(q.members[0].grpc)
	if before.QuorumID == "" {
		t.Fatal("pact journal status shows no quorum id")
	}

	// Two real agents, streaming.
	var sockets []string
	for i, n := range nodes[:2] {
		sock := filepath.Join(t.TempDir(), "agent.sock")
		sockets = append(sockets, sock)
		a := start(t, nil, "pact-agent", "--journal", strings.Join(q.addrs(), ","), "--ca", ca,
			"--mac", n.mac, "--bmc-serial", n.bmc, "--status-socket", sock)
		a.waitLine(t, streamOpenRE)
		_ = i
	}
	for _, s := range sockets {
		waitAgentStatus(t, s, 0, 30*time.Second)
	}
	// The agents' enrollments are on j1 (a linearizable read there).
	q.syncRead(0, nodes[1].id)

	// Enrollments going on through all three journals; j2 and j3 die for
	// good in the middle.
	enr := newEnroller(t, ca, q.addrs())
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var acks []ack
	var wg sync.WaitGroup
	next := make(chan testNode)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range next {
				a := enr.enroll(ctx, n)
				mu.Lock()
				acks = append(acks, a)
				mu.Unlock()
			}
		}()
	}
	killed := false
	for _, n := range nodes[2:] {
		next <- n
		mu.Lock()
		done := len(acks)
		mu.Unlock()
		if done >= 40 && !killed {
			q.kill(1)
			q.kill(2)
			killed = true
			// Let the in-flight attempts run into the lost majority, then stop.
			time.AfterFunc(2*time.Second, cancel)
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	cancel()
	if !killed {
		t.Fatal("the enrollments finished before the kill")
	}

	// What the survivor had, read from its own copy (no leader now).
	had, _ := func() ([]nodeJSON, []byte) {
		stdout, stderr, code := runPact(t, q.env(q.members[0].grpc), "node", "list", "-o", "json")
		if code != 0 {
			t.Fatalf("pact node list on the survivor: exit %d\n%s%s", code, stdout, stderr)
		}
		var ns []nodeJSON
		mustJSON(t, stdout, &ns)
		return ns, nil
	}()
	q.waitStatus("the survivor without a leader (exit 10)", func(_ statusJSON, code int) bool { return code == 10 }, q.members[0].grpc)

	// Stop the survivor, recover it into a quorum of one, start it again.
	j1 := q.members[0]
	q.signal(0, syscall.SIGTERM)
	<-q.exited(0)
	// With every journal down the agents are not ready: pact-agent status
	// says so with its exit code.
	for _, s := range sockets {
		waitAgentStatus(t, s, 9, 60*time.Second)
	}
	// With the journal's own settings (its flags here): recover asks j2
	// and j3 first, and neither answers.
	out, err := exec.Command(filepath.Join(binDir, "pact-journal"), append(append([]string{"recover"}, q.pq.Args(0)...), "--members", "j1="+j1.raft)...).CombinedOutput()
	if err != nil {
		t.Fatalf("pact-journal recover: %v\n%s", err, out)
	}
	wantContains(t, "recover's answer", string(out), "new quorum of 1")
	q.launch(0)
	q.waitServing(0)

	// Every write the survivor had is there, unchanged.
	after, _ := q.nodeList(0, nodes[0].id)
	byID := map[string]nodeJSON{}
	for _, n := range after {
		byID[n.NodeID] = n
	}
	// Every write the survivor had applied is there. Entries it held in
	// its log but had not yet learnt were committed are kept too
	// (RecoverCluster keeps the whole log), so a node it listed as
	// registered may be active now; nothing moves backwards.
	for _, n := range had {
		a, ok := byID[n.NodeID]
		switch {
		case !ok:
			t.Errorf("the survivor had %+v; after the recovery it is gone", n)
		case n.CertSerial != "" && (a.State != n.State || a.CertSerial != n.CertSerial):
			t.Errorf("the survivor had %+v; after the recovery: %+v", n, a)
		case n.CertSerial == "" && a.State != n.State && a.State != "active":
			t.Errorf("the survivor had %+v; after the recovery: %+v", n, a)
		}
	}
	// Every acknowledged enrollment that reached the survivor (it answered
	// it, so it had applied it) is kept.
	kept := 0
	for _, a := range acks {
		if a.err != nil || a.unknown || a.addr != j1.grpc {
			continue
		}
		kept++
		if n := byID[a.node.id]; n.State != "active" || n.CertSerial != a.serial {
			t.Errorf("%s was acknowledged by the survivor with serial %s; after the recovery: %+v", a.node.id, a.serial, n)
		}
	}
	t.Logf("%d acks in all, %d answered by the survivor; the survivor listed %d nodes before the recovery", len(acks), kept, len(had))
	if kept == 0 {
		t.Fatal("no acknowledged enrollment was answered by the survivor: the check above checked nothing")
	}

	// The recovered quorum is a new quorum: a new quorum id, printed by
	// recover and shown by pact journal status.
	recovered := q.waitStatus("the recovered quorum serving with its new quorum id", func(st statusJSON, code int) bool {
		return code == 0 && st.QuorumID != ""
	}, j1.grpc)
	if recovered.QuorumID == before.QuorumID {
		t.Errorf("the recovered quorum kept quorum id %s", before.QuorumID)
	}
	wantContains(t, "recover's answer", string(out), "new quorum id "+recovered.QuorumID, "was "+before.QuorumID)

	// Mistake 1: a lost journal comes back with its old disk and flags
	// while the survivor runs the recovered quorum. It belongs to the old
	// quorum: the survivor refuses it, and it never serves.
	q.launch(1)
	var tail polltest.Last
	polltest.Until(t, 30*time.Second, 100*time.Millisecond, func() bool {
		tail.Value = launch.Tail(q.output(1), 30)
		return peerRefused(t, j1.metrics, "quorum_mismatch") > 0
	}, "the survivor never refused the old quorum's journal j2:\n%v", &tail)
	q.waitStatus("the survivor alone, leading, undisturbed", func(st statusJSON, code int) bool {
		return code == 0 && st.LeaderID == "j1" && len(st.Members) == 1 && st.QuorumID == recovered.QuorumID
	}, j1.grpc)
	if strings.Contains(q.output(1), "journal serving") || strings.Contains(q.output(1), "entering leader state") {
		t.Errorf("j2 of the old quorum serves or leads:\n%s", launch.Tail(q.output(1), 20))
	}
	q.kill(1)

	// Mistake 2: the two lost journals, their disks wiped, started again
	// with the flags they had (make cluster, or a re-imaged host whose
	// journal.yaml still holds initial-cluster). An empty journal asks
	// the journals it lists before it bootstraps: j1 belongs to a quorum,
	// so each refuses to start a second one (exit 4) and says what to do.
	for _, i := range []int{1, 2} {
		if err := os.RemoveAll(filepath.Join(q.dir, q.members[i].id)); err != nil {
			t.Fatal(err)
		}
		q.launch(i)
	}
	for _, i := range []int{1, 2} {
		if code := q.wait(i); code != 4 {
			t.Errorf("%s, wiped and started with --initial-cluster: exit %d, want 4\n%s", q.members[i].id, code, launch.Tail(q.output(i), 20))
		}
		wantContains(t, q.members[i].id+"'s refusal", q.output(i), "already belongs to a quorum", "--join", "pact journal add "+q.members[i].id)
	}
	// The survivor keeps its registry, and a write through it lands there.
	if stdout, stderr, code := runPact(t, q.env(j1.grpc), "node", "enroll", "rec-after-mistakes", "--mac", "02:aa:00:00:00:01", "--bmc-serial", "SN-AFTER"); code != 0 {
		t.Fatalf("pact node enroll through the survivor: exit %d\n%s%s", code, stdout, stderr)
	}
	if got, _ := q.nodeList(0, "rec-after-mistakes"); len(got) != len(after)+1 {
		t.Errorf("the survivor lists %d nodes after the mistakes, want %d", len(got), len(after)+1)
	}
	after, _ = q.nodeList(0, nodes[0].id)

	// Two new journals join the recovered quorum.
	for _, id := range []string{"j4", "j5"} {
		i := q.addJoiner(id)
		if stdout, stderr, code := runPact(t, q.env(j1.grpc), "journal", "add", id, q.members[i].raft); code != 0 {
			t.Fatalf("pact journal add %s: exit %d\n%s%s", id, code, stdout, stderr)
		}
		q.waitServing(i)
	}
	live := []string{j1.grpc, q.members[q.index("j4")].grpc, q.members[q.index("j5")].grpc}
	q.waitStatus("three voters, healthy", func(st statusJSON, code int) bool {
		voters := 0
		for _, m := range st.Members {
			if m.Voter && m.Reachable {
				voters++
			}
		}
		return code == 0 && voters == 3 && len(st.Members) == 3
	}, live...)
	for _, id := range []string{"j4", "j5"} {
		got, _ := q.nodeList(q.index(id), nodes[0].id)
		if len(got) != len(after) {
			t.Errorf("%s lists %d nodes, the survivor %d", id, len(got), len(after))
		}
	}
	// The running agents are back without an operator: streaming again.
	for _, s := range sockets {
		waitAgentStatus(t, s, 0, 90*time.Second)
	}
}

// A journal stopped for a moment while the other two run is no survivor
// of a lost majority: pact-journal recover asks the others first, refuses
// (exit 5, naming them, nothing changed) and says to start it again; so
// started, it rejoins its quorum, and a node registered through it is on
// the others. Before, recover exited 0 and the journal, started again,
// served a registry of its own.
func TestRecoverRefusedWhileTheQuorumAnswers(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	before, _, _ := q.status(q.members[0].grpc)
	j1 := q.members[0]
	if err := q.signal(0, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-q.exited(0)
	cmd := exec.Command(filepath.Join(binDir, "pact-journal"), append(append([]string{"recover"}, q.pq.Args(0)...), "--members", "j1="+j1.raft)...)
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 5 {
		t.Fatalf("pact-journal recover with j2 and j3 up: %v, want exit 5\n%s", err, out)
	}
	wantContains(t, "recover's refusal", string(out), "the quorum is not lost", "j2 at "+q.members[1].raft, "j3 at "+q.members[2].raft,
		"answers as a member of this journal's quorum "+before.QuorumID, "start pact-journal on this host again", "--even-if-quorum-answers")

	q.launch(0)
	q.waitServing(0)
	if stdout, stderr, code := runPact(t, q.env(j1.grpc), "node", "enroll", "rec-refused", "--mac", "02:aa:00:00:00:02", "--bmc-serial", "SN-REFUSED"); code != 0 {
		t.Fatalf("pact node enroll through j1: exit %d\n%s%s", code, stdout, stderr)
	}
	for i := range q.members {
		got, _ := q.nodeList(i, "rec-refused")
		if !slices.ContainsFunc(got, func(n nodeJSON) bool { return n.NodeID == "rec-refused" }) {
			t.Errorf("%s does not list the node registered through j1", q.members[i].id)
		}
	}
	if st, _, _ := q.status(j1.grpc); st.QuorumID != before.QuorumID {
		t.Errorf("j1 started again serves quorum %s, was %s", st.QuorumID, before.QuorumID)
	}
}

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
}

// peerRefused reads a journal's pact_journal_peer_refused_total{reason}
// (0 if it does not answer).
func peerRefused(t *testing.T, metrics, reason string) int {
	t.Helper()
	return counter(t, metrics, `pact_journal_peer_refused_total{reason="`+reason+`"}`)
}

// The lost-majority runbook followed as root, as most operators do, on a
// journal whose data directory belongs to the journal's user (pact under
// the packages; uid 65534 here): pact-journal recover leaves every file
// it makes there to that user, so the journal, started as that user, can
// open them. So does pact-journal restore into a new directory under a
// directory of that user's. Before, they were left owned by root.
func TestRecoverAndRestoreAsRootKeepTheDirectoryOwner(t *testing.T) {
	skipShort(t)
	if os.Geteuid() != 0 {
		t.Skip("runs pact-journal recover and restore as root on a directory of another user: needs root (the tests run as root in CI)")
	}
	const owner = 65534
	q := startQuorum(t, 3)
	q.registerBatch(inventory("own", 3))
	snap := filepath.Join(t.TempDir(), "pact.snap")
	if stdout, stderr, code := runPact(t, q.env(q.addrs()...), "journal", "snapshot", "save", snap); code != 0 {
		t.Fatalf("pact journal snapshot save: exit %d\n%s%s", code, stdout, stderr)
	}
	q.kill(1)
	q.kill(2)
	if err := q.signal(0, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-q.exited(0)
	data := q.pq.DataDir(0)
	chownTree(t, data, owner)

	out, err := exec.Command(filepath.Join(binDir, "pact-journal"), append(append([]string{"recover"}, q.pq.Args(0)...), "--members", "j1="+q.members[0].raft)...).CombinedOutput()
	if err != nil {
		t.Fatalf("pact-journal recover: %v\n%s", err, out)
	}
	wantContains(t, "recover's answer", string(out), "new quorum of 1", "are now owned by", "(uid 65534), who owns the directory")
	wantOwned(t, data, owner)

	parent := t.TempDir()
	chownTree(t, parent, owner)
	restored := filepath.Join(parent, "var", "j1")
	out2, code := restoreJournal(t, "--snapshot", snap, "--data-dir", restored, "--node-id", "j1",
		"--initial-cluster", "j1="+q.members[0].raft, "--root-cert", filepath.Join(q.dir, "ca.pem"))
	if code != 0 {
		t.Fatalf("pact-journal restore: exit %d\n%s", code, out2)
	}
	wantContains(t, "restore's answer", out2, "are now owned by", "(uid 65534), who owns the directory")
	wantOwned(t, parent, owner)
}

// chownTree gives dir and everything under it to uid (and gid) uid.
func chownTree(t *testing.T, dir string, uid int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// wantOwned checks that dir and everything under it belongs to uid.
func wantOwned(t *testing.T, dir string, uid int) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		files++
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != uid {
			t.Errorf("%s: owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, uid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d files and directories under %s, all owned by uid %d", files, dir, uid)
}
