package raftnode

import (
	"testing"

	"github.com/hashicorp/raft"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// logScan reads only what was appended since its last call, and reads the
// log again from the start when the entry it stopped at was replaced (a
// new leader truncated the log) or is gone: it finds exactly what a scan of
// the whole window would.
func TestLogScanIncremental(t *testing.T) {
	store := raft.NewInmemStore()
	put := func(index, term uint64, journalID, grpcAddr string) {
		t.Helper()
		cmd := &pactv1.Command{Op: &pactv1.Command_Release{Release: &pactv1.ReleaseOp{NodeId: "n1"}}}
		if journalID != "" {
			cmd = &pactv1.Command{Op: &pactv1.Command_PublishIntermediate{PublishIntermediate: &pactv1.PublishIntermediateOp{
				Journal: &pactv1.JournalInfo{JournalId: journalID, GrpcAddr: grpcAddr},
			}}}
		}
		data, err := raftfsm.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.StoreLog(&raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	addrOf := func(s *logScan, id string) string {
		return s.found[id].info.GetGrpcAddr()
	}
	reads := 0
	counting := countingLogs{LogStore: store, reads: &reads}

	var s logScan
	put(1, 1, "j1", "a1")
	put(2, 1, "", "")
	put(3, 1, "j2", "b1")
	s.update(counting, 1, 3)
	if addrOf(&s, "j1") != "a1" || addrOf(&s, "j2") != "b1" || reads != 3 {
		t.Fatalf("first scan: j1 %q, j2 %q, %d reads", addrOf(&s, "j1"), addrOf(&s, "j2"), reads)
	}

	reads = 0
	put(4, 1, "j1", "a2")
	s.update(counting, 1, 4)
	if addrOf(&s, "j1") != "a2" || reads != 2 { // the entry it stopped at, then the new one
		t.Fatalf("appended: j1 %q, %d reads, want a2 and 2", addrOf(&s, "j1"), reads)
	}

	// A new leader replaced entries 3 and 4 with entries of its term.
	reads = 0
	if err := store.DeleteRange(3, 4); err != nil {
		t.Fatal(err)
	}
	put(3, 2, "", "")
	put(4, 2, "j3", "c1")
	s.update(counting, 1, 4)
	if _, ok := s.found["j2"]; ok || addrOf(&s, "j1") != "a1" || addrOf(&s, "j3") != "c1" || reads != 5 {
		t.Fatalf("after truncation: %v, %d reads; want j1 at a1, j3 at c1, no j2, 5 reads", s.found, reads)
	}

	// The log ends before where the scan stopped: read again.
	if err := store.DeleteRange(4, 4); err != nil {
		t.Fatal(err)
	}
	s.update(counting, 1, 3)
	if _, ok := s.found["j3"]; ok {
		t.Fatal("an entry the log no longer holds is still found")
	}
}

type countingLogs struct {
	raft.LogStore
	reads *int
}

func (c countingLogs) GetLog(index uint64, l *raft.Log) error {
	*c.reads++
	return c.LogStore.GetLog(index, l)
}
