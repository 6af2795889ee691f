package raftfsm_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/snapfile"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// richRegistry is the fuzz fixture plus a join token, operators, a
// revoked operator name and a liveness digest: a state with every kind of
// record. testdata/snapshot-format1.pactsnap was written from exactly this
// state by pact-journal v0.2 (format 1).
func richRegistry(t *testing.T) *raftfsm.FSM {
	t.Helper()
	f := fixtureFSM(t)
	a := &raftfsmtest.Applier{FSM: f, Index: 20}
	mustApply(t, a, journal.CreateJoinToken("node-3", strings.Repeat("ab", 32), (t0+day)*1e9))
	mustApply(t, a, admin.RecordOperator(&pactv1.Operator{Name: "alice", Role: "viewer", Serial: "a1", NotBeforeUnix: t0, NotAfterUnix: t0 + day, IssuedBy: "admin/root"}))
	mustApply(t, a, admin.RecordOperator(&pactv1.Operator{Name: "bob", Role: "viewer", Serial: "b1", NotBeforeUnix: t0, NotAfterUnix: t0 + day, IssuedBy: "admin/root"}))
	mustApply(t, a, admin.RevokeOperator("bob", ""))
	mustApply(t, a, journal.LivenessDigest("journal-1", "node-2"))
	return f
}

// A snapshot file and a Raft snapshot of the previous format (one Snapshot
// message) are still read, and give the state they were written from.
func TestSnapshotFormat1StillRestores(t *testing.T) {
	want := snapshotBytes(t, richRegistry(t))
	file, err := os.ReadFile("testdata/snapshot-format1.pactsnap")
	if err != nil {
		t.Fatal(err)
	}
	h, state, nodes, err := snapfile.Read(bytes.NewReader(file))
	if err != nil {
		t.Fatalf("read a format-1 snapshot file: %v", err)
	}
	if h.GetFormatVersion() != 1 || nodes != 7 {
		t.Fatalf("format %d, %d nodes; want format 1, 7 nodes", h.GetFormatVersion(), nodes)
	}
	// What pact journal restore puts in the Raft snapshot store, and what
	// a journal of the previous release has there or sends a new member.
	f := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(f, state); err != nil {
		t.Fatalf("restore a format-1 Raft snapshot: %v", err)
	}
	if got := snapshotBytes(t, f); !bytes.Equal(got, want) {
		t.Fatal("a format-1 snapshot restored to another state than it was written from")
	}
	c, err := snapfile.Count(state)
	if err != nil || c.Nodes["NODE_STATE_ACTIVE"] != 1 || c.Revoked != 2 || c.Intermediates != 1 || len(c.Journals) != 0 {
		t.Errorf("counts of a format-1 state: %+v, %v", c, err)
	}
	if c2, err := snapfile.Count(want); err != nil || c2.Audit != c.Audit || c2.Revoked != c.Revoked {
		t.Errorf("counts of the same state in format 2: %+v (format 1: %+v), %v", c2, c, err)
	}
}

// A Raft snapshot and a snapshot file are written in format 2, and both
// read back to the same state.
func TestSnapshotFormat2(t *testing.T) {
	f := richRegistry(t)
	data := snapshotBytes(t, f)
	state, _, _, err := f.Consistent()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(state, data) {
		t.Error("Consistent and Persist wrote different bytes for one state")
	}
	var file bytes.Buffer
	if err := snapfile.Write(&file, &pactv1.SnapshotHeader{Domain: "site.example"}, state); err != nil {
		t.Fatal(err)
	}
	h, got, _, err := snapfile.Read(bytes.NewReader(file.Bytes()))
	if err != nil || h.GetFormatVersion() != snapfile.Format || !bytes.Equal(got, state) {
		t.Fatalf("snapshot file: format %d, %v", h.GetFormatVersion(), err)
	}
	decoded, err := raftfsm.DecodeSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	// Format 1 of the same state restores to the same state.
	old, err := proto.MarshalOptions{Deterministic: true}.Marshal(decoded)
	if err != nil {
		t.Fatal(err)
	}
	g := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(g, old); err != nil || !bytes.Equal(snapshotBytes(t, g), data) {
		t.Fatalf("the same state in format 1 restores differently (%v)", err)
	}
}

// A format-2 stream cut anywhere, or with anything after its end, or with
// a record of a kind this version does not know, is refused and leaves the
// state alone.
func TestSnapshotFormat2Damaged(t *testing.T) {
	data := snapshotBytes(t, richRegistry(t))
	fixture := fuzzFixture()
	check := func(name string, bad []byte) {
		t.Helper()
		f := fixtureFSM(t)
		if err := raftfsmtest.RestoreBytes(f, bad); err == nil {
			t.Errorf("%s: restored", name)
		}
		if !bytes.Equal(snapshotBytes(t, f), fixture) {
			t.Errorf("%s: a refused restore changed the state", name)
		}
	}
	// Cut inside the magic, at a spread of places, and just before the end.
	for n := 1; n < len(data); n += 1 + n/4 {
		check("cut", data[:n])
	}
	check("cut before the end record", data[:len(data)-1])
	check("trailing bytes", append(bytes.Clone(data), 0))
	magic := data[:bytes.IndexByte(data, '\n')+1]
	rec := protowire.AppendBytes(protowire.AppendTag(nil, 50, protowire.BytesType), []byte("x"))
	unknown := append(bytes.Clone(magic), protowire.AppendVarint(nil, uint64(len(rec)))...)
	unknown = append(append(unknown, rec...), 0)
	check("unknown record", unknown)
	f := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(f, append(bytes.Clone(magic), 0)); err != nil {
		t.Errorf("an empty format-2 state: %v", err)
	}
	// A file whose header names the other format is corrupt.
	var file bytes.Buffer
	if err := snapfile.Write(&file, &pactv1.SnapshotHeader{Domain: "site.example"}, data); err != nil {
		t.Fatal(err)
	}
	b := file.Bytes()
	b[13] = 1 // the format version, the header's first field
	if _, _, _, err := snapfile.Read(bytes.NewReader(b)); err == nil {
		t.Error("a format-2 state under a format-1 header was accepted")
	}
}
