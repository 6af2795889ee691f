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

// snapfile.CheckState, the check of the CLI's inspect, refuses what
// Restore refuses, with the same message, and accepts what it accepts,
// counting as many nodes: every rule of decodeState, in both formats.
func TestCheckStateAgreesWithRestore(t *testing.T) {
	active := func(id string, hw *pactv1.HardwareIdentity) *pactv1.Node {
		return node(id, pactv1.NodeState_NODE_STATE_ACTIVE, hw, cert("c-"+id, "spki-"+id))
	}
	spiffe := func(n *pactv1.Node, id string) *pactv1.Node { n.SpiffeId = id; return n }
	token := func(node, sum string) *pactv1.JoinToken {
		return &pactv1.JoinToken{NodeId: node, Sha256: sum, ExpiresAtUnixNano: (t0 + day) * 1e9}
	}
	quorum := &pactv1.QuorumIdentity{QuorumId: "q-1"}
	states := map[string]*pactv1.Snapshot{
		"empty":        {},
		"rich":         raftfsm.StateWithoutAuditIndex(richRegistry(t)),
		"a node twice": {Nodes: []*pactv1.Node{active("node-1", hw1()), active("node-1", hw2())}},
		"no id":        {Nodes: []*pactv1.Node{active("", hw1())}},
		"shared MAC":   {Nodes: []*pactv1.Node{active("node-1", hw1()), active("node-2", raftfsmtest.Hardware("S2", mac2))}},
		"shared BMC":   {Nodes: []*pactv1.Node{active("node-1", hw1()), active("node-2", raftfsmtest.Hardware("S1", mac9))}},
		"shared EK":    {Nodes: []*pactv1.Node{active("node-2", hw2()), active("node-9", withEK(raftfsmtest.Hardware("S9", mac9), ekA))}},
		"shared SPIFFE ID": {Nodes: []*pactv1.Node{
			spiffe(active("node-1", hw1()), custom1), spiffe(active("node-2", hw2()), custom1),
		}},
		"two conflicts, the first named": {Nodes: []*pactv1.Node{
			active("node-1", hw1()), active("node-2", hw2()), active("node-3", withEK(raftfsmtest.Hardware("S1", mac3), ekA)),
		}},
		"a conflict and a bad token": {
			Nodes:      []*pactv1.Node{active("node-1", hw1()), active("node-2", hw1())},
			JoinTokens: []*pactv1.JoinToken{token("node-1", "not-hex")},
		},
		"a conflict and unknown liveness": {
			Nodes:    []*pactv1.Node{active("node-1", hw1()), active("node-2", hw1())},
			LastSeen: []*pactv1.LastSeen{{NodeId: "node-9", AtUnixNano: t0 * 1e9}},
		},
		"revoked nodes share hardware": {Nodes: []*pactv1.Node{
			node("node-1", pactv1.NodeState_NODE_STATE_REVOKED, hw1(), nil),
			spiffe(node("node-2", pactv1.NodeState_NODE_STATE_REVOKED, hw1(), nil), custom1),
			spiffe(active("node-3", hw1()), custom1),
		}},
		"a node lists a MAC twice": {Nodes: []*pactv1.Node{active("node-1", raftfsmtest.Hardware("S1", mac1, mac1))}},
		"unknown liveness": {
			Nodes:    []*pactv1.Node{active("node-1", hw1())},
			LastSeen: []*pactv1.LastSeen{{NodeId: "node-9", AtUnixNano: t0 * 1e9}},
		},
		"a token twice":         {JoinTokens: []*pactv1.JoinToken{token("node-1", strings.Repeat("ab", 32)), token("node-2", strings.Repeat("ab", 32))}},
		"a malformed token":     {JoinTokens: []*pactv1.JoinToken{token("node-1", strings.Repeat("AB", 32))}},
		"an operator no serial": {Operators: []*pactv1.Operator{{Name: "alice"}}},
		"a quorum":              {Quorum: quorum},
	}
	datas := map[string][]byte{}
	for name, s := range states {
		datas[name+" (format 1)"] = mustMarshal(t, s)
		b, err := raftfsm.EncodeSnapshot(s)
		if err != nil {
			t.Fatal(err)
		}
		datas[name] = b
	}
	// Records no Snapshot message makes: a second quorum identity, and a
	// sizes record after another. A state in format 2 ends in a zero byte.
	withQ, _ := raftfsm.EncodeSnapshot(&pactv1.Snapshot{Quorum: quorum})
	empty, _ := raftfsm.EncodeSnapshot(&pactv1.Snapshot{})
	qRec := withQ[len(empty)-1 : len(withQ)-1]
	const magic = "\x00pact-snapshot-records\n"
	sizesRec := empty[len(magic) : len(empty)-1]
	datas["two quorums"] = append(append(bytes.Clone(withQ[:len(withQ)-1]), qRec...), 0)
	datas["sizes after a record"] = append(append(bytes.Clone(withQ[:len(withQ)-1]), sizesRec...), 0)
	refused := 0
	for name, data := range datas {
		t.Run(name, func(t *testing.T) {
			f := raftfsm.New()
			err := raftfsmtest.RestoreBytes(f, data)
			if err != nil {
				refused++
			}
			checkAgrees(t, data, err, len(f.Nodes(raftfsm.Filter{})))
		})
	}
	if refused < 2*12 {
		t.Errorf("Restore refused %d of the states; the table lost its teeth", refused)
	}
}
