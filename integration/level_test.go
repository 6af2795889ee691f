package integration

// Process-level tests of the quorum's feature level (docs/upgrade.md)
// that need no other release: a registry above the binary's level.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/snapfile"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// A journal whose registry records a quorum feature level above what its
// binary speaks (a downgrade, or an old binary installed on new data)
// refuses to start: exit 6, naming the release it needs, and the unit does
// not restart it. The registry here comes from a backup of a real quorum
// whose level was raised past this binary's, restored as a site restores.
func TestJournalRefusesARegistryAboveItsLevel(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 1)
	q.registerBatch(inventory("lv", 2))
	file := filepath.Join(t.TempDir(), "pact.snap")
	if stdout, stderr, code := runPact(t, q.env(q.addrs()...), "journal", "snapshot", "save", file); code != 0 {
		t.Fatalf("pact journal snapshot save: exit %d\n%s%s", code, stdout, stderr)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	h, state, _, err := snapfile.Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if h.GetFormatVersion() != 3 {
		t.Fatalf("a quorum of this release saved format %d, want 3 (its level is %d)", h.GetFormatVersion(), raftfsm.FeatureLevel)
	}
	// The same registry, as a quorum of a future release would hold it.
	snap := &pactv1.Snapshot{}
	if err := snapfile.Walk(bytes.NewReader(state), func(rec *pactv1.SnapshotRecord) error {
		switch r := rec.GetRecord().(type) {
		case *pactv1.SnapshotRecord_Node:
			snap.Nodes = append(snap.Nodes, r.Node)
		case *pactv1.SnapshotRecord_Intermediate:
			snap.Intermediates = append(snap.Intermediates, r.Intermediate)
		case *pactv1.SnapshotRecord_JournalCa:
			snap.JournalCas = append(snap.JournalCas, r.JournalCa)
		case *pactv1.SnapshotRecord_Journal:
			snap.Journals = append(snap.Journals, r.Journal)
		case *pactv1.SnapshotRecord_Operator:
			snap.Operators = append(snap.Operators, r.Operator)
		case *pactv1.SnapshotRecord_Quorum:
			snap.Quorum = r.Quorum
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	snap.QuorumLevel = &pactv1.QuorumLevel{Level: raftfsm.FeatureLevel + 1, Release: "9.9.0"}
	var future bytes.Buffer
	if err := snapfile.WriteState(&future, snap); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := snapfile.Write(&out, h, future.Bytes()); err != nil {
		t.Fatal(err)
	}
	futureFile := filepath.Join(t.TempDir(), "future.snap")
	if err := os.WriteFile(futureFile, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	m := q.members[0]
	dataDir := filepath.Join(t.TempDir(), m.id)
	addrs := freeAddrs(t, 3)
	got, code := restoreJournal(t, "--snapshot", futureFile, "--data-dir", dataDir, "--node-id", m.id,
		"--initial-cluster", m.id+"="+addrs[1], "--root-cert", filepath.Join(q.dir, "ca.pem"))
	if code != 0 {
		t.Fatalf("restore: exit %d\n%s", code, got)
	}
	pkiArgs, err := q.pq.PKIArgs(m.id)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "pact-journal"), append([]string{
		"--node-id", m.id, "--data-dir", dataDir, "--listen", addrs[0], "--raft-listen", addrs[1], "--metrics-listen", addrs[2],
	}, pkiArgs...)...)
	output, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("pact-journal started on a registry above its level (killed after 60 s):\n%s", output)
	}
	if code := cmd.ProcessState.ExitCode(); code != 6 {
		t.Fatalf("pact-journal on a registry at level %d: exit %d (%v), want 6\n%s", raftfsm.FeatureLevel+1, code, err, output)
	}
	wantContains(t, "the refusal", string(output), fmt.Sprintf("quorum feature level %d and its binary speaks up to %d", raftfsm.FeatureLevel+1, raftfsm.FeatureLevel), "install release 9.9.0 or newer")
	if strings.Contains(string(output), "journal serving") {
		t.Errorf("it served before it refused:\n%s", output)
	}
}
