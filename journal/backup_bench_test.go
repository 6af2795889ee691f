package journal_test

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/snapfile"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// BenchmarkBackup100kActive times the two halves of an operator's backup
// of a registry of 100,000 Active nodes (certificates of real size): the
// leader's snapshot file (consistent copy, header, SHA-256, written and
// fsynced) and pact-journal restore of it (read, checksum, full
// validation, the Raft snapshot of the new data directory written).
// make bench-scale reports the same with the journal's FSM restore added.
func BenchmarkBackup100kActive(b *testing.B) {
	const n = 100000
	fsm := raftfsm.New()
	der := make([]byte, 640)
	_, _ = rand.Read(der)
	at := time.Now()
	var index uint64
	apply := func(cmd *pactv1.Command) {
		index++
		cmd.AtUnixNano = at.UnixNano()
		data, err := raftfsm.Encode(cmd)
		if err != nil {
			b.Fatal(err)
		}
		if res := fsm.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(*raftfsm.Result); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	for i := range n {
		hw := &pactv1.HardwareIdentity{Macs: []string{mac(i)}}
		id := fmt.Sprintf("n%06d", i)
		apply(&pactv1.Command{Actor: "admin/bench", Op: &pactv1.Command_RegisterNode{RegisterNode: &pactv1.RegisterNodeOp{NodeId: id, Hardware: hw}}})
		apply(&pactv1.Command{Actor: "agent/" + id, Op: &pactv1.Command_Activate{Activate: &pactv1.ActivateOp{NodeId: id, Reported: hw,
			Cert: &pactv1.CertificateInfo{Serial: fmt.Sprintf("%032x", i+1), SpkiSha256: fmt.Sprintf("%064x", i+1), NotBeforeUnix: at.Unix(), NotAfterUnix: at.Add(72 * time.Hour).Unix(), IssuerSerial: "0123456789abcdef0123456789abcdef", Der: der}}}})
	}
	dir := b.TempDir()
	if _, err := ca.InitDev(dir, "pact.local", at); err != nil {
		b.Fatal(err)
	}
	_, roots, err := pki.LoadCertPool(filepath.Join(dir, ca.RootCertFile))
	if err != nil {
		b.Fatal(err)
	}
	rootSum := sha256.Sum256(roots[0].Raw)
	b.ResetTimer()
	for i := range b.N {
		file := filepath.Join(dir, fmt.Sprintf("s%d.snap", i))
		began := time.Now()
		state, idx, nodes, err := fsm.Consistent()
		if err != nil {
			b.Fatal(err)
		}
		f, err := os.Create(file)
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		if err := snapfile.Write(w, &pactv1.SnapshotHeader{Domain: "pact.local", RootSha256: rootSum[:], Index: idx, Term: 1, Nodes: uint64(nodes)}, state); err != nil {
			b.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		save := time.Since(began)
		began = time.Now()
		res, err := journal.Restore(journal.RestoreConfig{Snapshot: file, DataDir: filepath.Join(dir, fmt.Sprintf("r%d", i)), NodeID: "r1",
			InitialCluster: []journal.Peer{{ID: "r1", RaftAddr: "127.0.0.1:1"}}, RootCertFile: filepath.Join(dir, ca.RootCertFile)})
		if err != nil || res.Nodes != n {
			b.Fatalf("restore: %d nodes, %v", res.Nodes, err)
		}
		restore := time.Since(began)
		b.ReportMetric(save.Seconds(), "save-s")
		b.ReportMetric(restore.Seconds(), "restore-s")
		b.ReportMetric(float64(len(state))/(1<<20), "MiB")
	}
}
