package integration

// Process-level tests of backup and restore (issue 12): pact journal
// snapshot save against a running quorum, inspect offline, pact-journal
// restore into a new quorum, and what happens to the agents.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

type snapshotJSON struct {
	Domain        string         `json:"domain"`
	Index         uint64         `json:"index"`
	Term          uint64         `json:"term"`
	TakenBy       string         `json:"taken_by"`
	Version       string         `json:"version"`
	SHA256        string         `json:"sha256"`
	Nodes         int            `json:"nodes"`
	NodesByState  map[string]int `json:"nodes_by_state"`
	Revoked       int            `json:"revoked_serials"`
	Intermediates int            `json:"intermediates"`
	Audit         int            `json:"audit_entries"`
	Journals      []string       `json:"journals"`
}

// restoreJournal runs pact-journal restore and returns its output and code.
func restoreJournal(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "pact-journal"), append([]string{"restore"}, args...)...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// subscribe opens a Subscribe stream at addr with the certificate an
// enrollment returned and reads its first message.
func subscribe(t *testing.T, caFile, addr string, a ack) error {
	t.Helper()
	e := newEnroller(t, caFile, []string{addr})
	cert := tls.Certificate{Certificate: a.resp.GetCertChainDer(), PrivateKey: a.key.key}
	conn := dialJournal(t, e.roots, addr, &cert)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := pactv1.NewEnrollmentServiceClient(conn).Subscribe(ctx, &pactv1.SubscribeRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	return err
}

// A snapshot of a running quorum restores into a new quorum with the same
// registry; agents that enrolled before it keep streaming with their
// certificates, and one that enrolled after it enrolls again on its own
// terms. Bad files are refused before anything is written.
func TestSnapshotSaveRestore(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	env := q.env(q.addrs()...)
	nodes := inventory("bk", 12)
	q.registerBatch(nodes)
	enr := newEnroller(t, filepath.Join(q.dir, "ca.pem"), q.addrs())
	var before []ack
	for _, n := range nodes[:6] {
		a := enr.enroll(context.Background(), n)
		if a.err != nil {
			t.Fatalf("enroll %s: %v", n.id, a.err)
		}
		before = append(before, a)
	}
	if stdout, stderr, code := runPact(t, env, "node", "decommission", nodes[5].id, "--force"); code != 0 {
		t.Fatalf("decommission: exit %d\n%s%s", code, stdout, stderr)
	}

	// A real agent enrolled and streaming before the snapshot.
	ca := filepath.Join(q.dir, "ca.pem")
	realAgent := func(n testNode) (*proc, string, string) {
		sock := filepath.Join(t.TempDir(), "agent.sock")
		p := start(t, nil, "pact-agent", "--journal", strings.Join(q.addrs(), ","), "--ca", ca, "--mac", n.mac, "--bmc-serial", n.bmc, "--status-socket", sock)
		serial := p.waitLine(t, enrolledRE)[1]
		p.waitLine(t, streamOpenRE)
		return p, sock, serial
	}
	agentBefore, sockBefore, serialBefore := realAgent(nodes[7])

	file := filepath.Join(t.TempDir(), "pact.snap")
	stdout, stderr, code := runPact(t, env, "journal", "snapshot", "save", file, "-o", "json")
	if code != 0 {
		t.Fatalf("pact journal snapshot save: exit %d\n%s%s", code, stdout, stderr)
	}
	var saved snapshotJSON
	if err := json.Unmarshal([]byte(stdout), &saved); err != nil {
		t.Fatalf("save -o json: %v\n%s", err, stdout)
	}
	if saved.Domain != "pact.local" || saved.Nodes != 12 || saved.NodesByState["active"] != 6 || saved.NodesByState["revoked"] != 1 ||
		saved.Revoked != 1 || saved.Intermediates < 3 || saved.Audit == 0 || len(saved.Journals) != 3 || saved.Index == 0 || saved.Term == 0 || saved.Version == "" {
		t.Fatalf("snapshot header and contents: %+v", saved)
	}
	// The save is linearizable: what the CLI just read from the leader holds
	// every node, including the decommission acknowledged before it.
	if _, _, code := runPact(t, env, "journal", "snapshot", "save", file); code != 2 {
		t.Errorf("saving over an existing file: exit %d, want 2", code)
	}
	stdout, stderr, code = runPact(t, nil, "journal", "snapshot", "inspect", file)
	if code != 0 {
		t.Fatalf("inspect without a journal: exit %d\n%s%s", code, stdout, stderr)
	}
	wantContains(t, "inspect", stdout, "domain:", "pact.local", "nodes:", "12 (active 6, registered 5, revoked 1)", saved.SHA256)

	// The registry as saved, and an enrollment after the snapshot.
	oldList, _ := q.nodeList(0, nodes[0].id)
	late := enr.enroll(context.Background(), nodes[6])
	if late.err != nil {
		t.Fatal(late.err)
	}
	// A real agent that enrolls after it.
	agentAfter, sockAfter, serialAfter := realAgent(nodes[8])

	// Bad files: refused by inspect (exit 2) and by restore (exit 1), and
	// restore writes nothing.
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if out, err := exec.Command(filepath.Join(binDir, "pact-journal"), "init", "--dir", other, "--domain", "other.example").CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	bad := map[string][]byte{
		"truncated": good[:len(good)-100],
		"corrupt":   append(bytes.Clone(good[:len(good)-1]), good[len(good)-1]^0xff),
		"newer":     append(append(bytes.Clone(good[:13]), 9), good[14:]...),
	}
	restoreArgs := func(snap, dataDir, root string) []string {
		return []string{"--snapshot", snap, "--data-dir", dataDir, "--node-id", "r1", "--initial-cluster", "r1=127.0.0.1:1", "--root-cert", root}
	}
	for name, data := range bad {
		f := filepath.Join(t.TempDir(), name+".snap")
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, stderr, code := runPact(t, nil, "journal", "snapshot", "inspect", f); code != 2 || !strings.Contains(stderr, name) {
			t.Errorf("inspect of a %s file: exit %d\n%s", name, code, stderr)
		}
		dd := filepath.Join(t.TempDir(), "data")
		out, code := restoreJournal(t, restoreArgs(f, dd, filepath.Join(q.dir, "ca.pem"))...)
		if code != 1 || !strings.Contains(out, name) || !strings.Contains(out, "nothing was written") {
			t.Errorf("restore of a %s file: exit %d\n%s", name, code, out)
		}
		if _, err := os.Stat(dd); !os.IsNotExist(err) {
			t.Errorf("restore of a %s file created %s", name, dd)
		}
	}
	dd := filepath.Join(t.TempDir(), "data")
	out, code := restoreJournal(t, restoreArgs(file, dd, filepath.Join(other, "ca.pem"))...)
	if code != 1 || !strings.Contains(out, "domain pact.local") || !strings.Contains(out, "other.example") {
		t.Errorf("restore into another domain: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(dd); !os.IsNotExist(err) {
		t.Errorf("restore into another domain created %s", dd)
	}

	// Restore into a new quorum of three, on new addresses, and stop the
	// old one.
	for i := range q.members {
		q.kill(i)
	}
	// The new quorum takes the old one's names and addresses (new hosts
	// behind the same names, as a site restores), so the running agents
	// find it.
	r := &quorum{t: t, dir: q.dir, pq: q.pq}
	var peers []string
	for _, old := range q.members {
		m := &member{id: old.id, grpc: old.grpc, raft: old.raft, metrics: old.metrics}
		r.members = append(r.members, m)
		peers = append(peers, m.id+"="+m.raft)
	}
	for i, m := range r.members {
		dataDir := filepath.Join(t.TempDir(), m.id)
		out, code := restoreJournal(t, "--snapshot", file, "--data-dir", dataDir, "--node-id", m.id,
			"--initial-cluster", strings.Join(peers, ","), "--root-cert", filepath.Join(q.dir, "ca.pem"))
		if code != 0 {
			t.Fatalf("restore %s: exit %d\n%s", m.id, code, out)
		}
		wantContains(t, "restore's answer", out, "restored 12 nodes of domain pact.local")
		pkiArgs, err := q.pq.PKIArgs(m.id)
		if err != nil {
			t.Fatal(err)
		}
		r.pq.SetArgs(i, append([]string{
			"--node-id", m.id, "--data-dir", dataDir,
			"--listen", m.grpc, "--raft-listen", m.raft, "--metrics-listen", m.metrics,
		}, pkiArgs...))
	}
	for i := range r.members {
		r.launch(i)
	}
	for i := range r.members {
		r.waitServing(i)
	}
	for i := range r.members {
		newList, _ := r.nodeList(i, nodes[0].id)
		if len(newList) != len(oldList) {
			t.Fatalf("restored %s lists %d nodes, the old quorum %d", r.members[i].id, len(newList), len(oldList))
		}
		for k := range oldList {
			o, n := oldList[k], newList[k]
			if o.NodeID == nodes[6].id || o.NodeID == nodes[8].id {
				continue // enrolled after the snapshot: checked below
			}
			if o.NodeID != n.NodeID || o.State != n.State || o.CertSerial != n.CertSerial || o.CertIssuerSerial != n.CertIssuerSerial {
				t.Errorf("restored %s: %+v, before: %+v", r.members[i].id, n, o)
			}
		}
	}
	// Agents from before the snapshot keep working: their certificates
	// chain to intermediates the snapshot carries, and the registry holds
	// their serials.
	for _, a := range before[:5] {
		if err := subscribe(t, filepath.Join(q.dir, "ca.pem"), r.members[0].grpc, a); err != nil {
			t.Errorf("%s (enrolled before the snapshot) cannot stream on the restored quorum: %v", a.node.id, err)
		}
	}
	// The one that enrolled after it is unknown to the restored registry:
	// refused as stale, and its agent enrolls again (here with a new key,
	// as pact-agent does after dropping a refused identity).
	err = subscribe(t, filepath.Join(q.dir, "ca.pem"), r.members[1].grpc, late)
	if pe := apierr.FromError(err); pe.Code != codes.PermissionDenied && pe.Code != codes.Unauthenticated && pe.Code != codes.NotFound {
		t.Errorf("a certificate newer than the snapshot: %v, want a refusal", err)
	}
	again := newEnroller(t, filepath.Join(q.dir, "ca.pem"), r.addrs()).enroll(context.Background(), nodes[6])
	if again.err != nil {
		t.Fatalf("re-enrolling %s after the restore: %v", nodes[6].id, again.err)
	}
	// A decommissioned node stays decommissioned.
	if stdout, stderr, code := runPact(t, r.env(r.addrs()...), "node", "inspect", nodes[5].id, "-o", "json"); code != 0 || !strings.Contains(stdout, `"revoked"`) {
		t.Errorf("decommissioned node after restore: exit %d\n%s%s", code, stdout, stderr)
	}
	// The real agents carry on without an operator: the one from before
	// the snapshot keeps its certificate; the one from after it is refused
	// and enrolls again by itself.
	waitAgentStatus(t, sockBefore, 0, 90*time.Second)
	waitAgentStatus(t, sockAfter, 0, 90*time.Second)
	if n := r.inspect(t, nodes[7].id); n.State != "active" || n.CertSerial != serialBefore {
		t.Errorf("agent from before the snapshot: registry %+v, its serial %s\n%s", n, serialBefore, agentBefore.output())
	}
	if n := r.inspect(t, nodes[8].id); n.State != "active" || n.CertSerial == serialAfter || n.CertSerial == "" {
		t.Errorf("agent from after the snapshot: registry %+v, its first serial %s (want a new enrollment)\n%s", n, serialAfter, agentAfter.output())
	}

	// Restoring over a data directory in use is refused.
	out, code = restoreJournal(t, "--snapshot", file, "--data-dir", r.pq.Args(0)[3], "--node-id", r.members[0].id,
		"--initial-cluster", strings.Join(peers, ","), "--root-cert", filepath.Join(q.dir, "ca.pem"))
	if code != 1 || !strings.Contains(out, "already holds Raft state") {
		t.Errorf("restore into a used data directory: exit %d\n%s", code, out)
	}
}

// rootFingerprint is the SHA-256 fingerprint of the root in a ca.pem.
func rootFingerprint(t *testing.T, caFile string) string {
	t.Helper()
	_, certs, err := pki.LoadCertPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	return pki.CertFingerprint(certs[0])
}

// A snapshot restores only under the root it was taken under. Another
// root named like it (init --domain pact.local again: every --dev root is
// pact.local too) is refused, saying which fingerprint was expected and
// which found, and nothing is written; the snapshot's own root restores
// it, matched by the fingerprint the header records.
func TestRestoreRefusesAnotherRootOfTheSameName(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 1)
	q.registerBatch(inventory("rr", 3))
	file := filepath.Join(t.TempDir(), "pact.snap")
	if stdout, stderr, code := runPact(t, q.env(q.addrs()...), "journal", "snapshot", "save", file); code != 0 {
		t.Fatalf("pact journal snapshot save: exit %d\n%s%s", code, stdout, stderr)
	}
	ours := rootFingerprint(t, filepath.Join(q.dir, "ca.pem"))
	stdout, stderr, code := runPact(t, nil, "journal", "snapshot", "inspect", file)
	if code != 0 {
		t.Fatalf("inspect: exit %d\n%s%s", code, stdout, stderr)
	}
	wantContains(t, "inspect", stdout, "domain:", "pact.local", "root sha256:", ours)

	other := t.TempDir()
	out, err := exec.Command(filepath.Join(binDir, "pact-journal"), "init", "--dir", other, "--domain", "pact.local").CombinedOutput()
	if err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	theirs := rootFingerprint(t, filepath.Join(other, "ca.pem"))
	wantContains(t, "init", string(out), "created domain pact.local", "root SHA-256 fingerprint "+theirs)
	if theirs == ours {
		t.Fatal("two roots made apart have one fingerprint")
	}
	dd := filepath.Join(t.TempDir(), "data")
	args := func(root string) []string {
		return []string{"--snapshot", file, "--data-dir", dd, "--node-id", "r1", "--initial-cluster", "r1=127.0.0.1:1", "--root-cert", root}
	}
	got, code := restoreJournal(t, args(filepath.Join(other, "ca.pem"))...)
	if code != 1 {
		t.Errorf("restore under another root of the same name: exit %d, want 1\n%s", code, got)
	}
	wantContains(t, "the refusal", got, "snapshot of another root", "was taken under the root with SHA-256 fingerprint "+ours,
		"has fingerprint "+theirs, "both of domain pact.local", "give --root-cert the ca.pem of the quorum the snapshot was taken from", "nothing was written to "+dd)
	if _, err := os.Stat(dd); !os.IsNotExist(err) {
		t.Errorf("a refused restore created %s", dd)
	}

	got, code = restoreJournal(t, args(filepath.Join(q.dir, "ca.pem"))...)
	if code != 0 {
		t.Fatalf("restore under the snapshot's root: exit %d\n%s", code, got)
	}
	wantContains(t, "restore", got, "restored 3 nodes of domain pact.local", "root SHA-256 fingerprint "+ours+", matched by the fingerprint in the snapshot's header")
}

// inspect reads one node through the quorum (linearizable).
func (q *quorum) inspect(t *testing.T, id string) nodeJSON {
	t.Helper()
	stdout, stderr, code := runPact(t, q.env(q.addrs()...), "node", "inspect", id, "-o", "json")
	if code != 0 {
		t.Fatalf("pact node inspect %s: exit %d\n%s%s", id, code, stdout, stderr)
	}
	var n nodeJSON
	mustJSON(t, stdout, &n)
	return n
}
