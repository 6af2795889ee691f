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

// A Raft snapshot and a snapshot file of a quorum at level 1 are written
// in format 2 (which the release before feature levels reads), and both
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
	if err != nil || h.GetFormatVersion() != 2 || !bytes.Equal(got, state) {
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

// Every rule a state must keep, through both entry points that read one:
// a journal's Restore and snapfile.CheckState (the operator CLI's check of
// a snapshot file), in both formats. Each refuses with the rule's message,
// the same from both, or accepts with as many nodes. The two share
// snapfile.ReadState; the table fails if Restore stops going through it.
func TestStateRules(t *testing.T) {
	active := func(id string, hw *pactv1.HardwareIdentity) *pactv1.Node {
		return node(id, pactv1.NodeState_NODE_STATE_ACTIVE, hw, cert("c-"+id, "spki-"+id))
	}
	revoked := func(id string, hw *pactv1.HardwareIdentity) *pactv1.Node {
		return node(id, pactv1.NodeState_NODE_STATE_REVOKED, hw, nil)
	}
	spiffe := func(n *pactv1.Node, id string) *pactv1.Node { n.SpiffeId = id; return n }
	token := func(node, sum string) *pactv1.JoinToken {
		return &pactv1.JoinToken{NodeId: node, Sha256: sum, ExpiresAtUnixNano: (t0 + day) * 1e9}
	}
	seen := func(ids ...string) []*pactv1.LastSeen {
		var out []*pactv1.LastSeen
		for _, id := range ids {
			out = append(out, &pactv1.LastSeen{NodeId: id, AtUnixNano: t0 * 1e9})
		}
		return out
	}
	const gives = "raftfsm: snapshot gives "
	const badToken = "raftfsm: snapshot has a malformed or repeated join token for node "
	quorum := &pactv1.QuorumIdentity{QuorumId: "q-1"}
	jca := func(journalID, serial string, mod func(*pactv1.JournalCA)) *pactv1.JournalCA {
		jc := raftfsmtest.JournalCA(journalID, serial, t0+365*day)
		if mod != nil {
			mod(jc)
		}
		return jc
	}
	under := func(journalID, serial, issuer string) *pactv1.Intermediate {
		in := raftfsmtest.Intermediate(journalID, serial, t0+day)
		in.IssuerSerial = issuer
		return in
	}
	const noCA = "raftfsm: snapshot has a journal CA without a serial, certificate or journal"
	tests := []struct {
		name  string
		state *pactv1.Snapshot
		want  string // the refusal, "" to accept
	}{
		{"empty", &pactv1.Snapshot{}, ""},
		{"every kind of record", raftfsm.StateWithoutAuditIndex(richRegistry(t)), ""},
		{"a quorum", &pactv1.Snapshot{Quorum: quorum}, ""},
		{"a node twice", &pactv1.Snapshot{Nodes: []*pactv1.Node{active("node-1", hw1()), active("node-1", hw2())}},
			"raftfsm: snapshot has node node-1 twice"},
		{"a node twice, once revoked", &pactv1.Snapshot{Nodes: []*pactv1.Node{revoked("node-1", hw1()), active("node-1", hw1())}},
			"raftfsm: snapshot has node node-1 twice"},
		{"a node without an id", &pactv1.Snapshot{Nodes: []*pactv1.Node{active("", hw1())}},
			"raftfsm: snapshot has a node without an id"},
		{"live nodes share a MAC", &pactv1.Snapshot{Nodes: []*pactv1.Node{
			active("node-1", hw1()), node("node-2", pactv1.NodeState_NODE_STATE_INACTIVE, raftfsmtest.Hardware("S2", mac2), nil),
		}}, gives + "MAC " + mac2 + " to both node-1 and node-2"},
		{"live nodes share a BMC serial", &pactv1.Snapshot{Nodes: []*pactv1.Node{
			active("node-1", hw1()), node("node-2", pactv1.NodeState_NODE_STATE_REGISTERED, raftfsmtest.Hardware("S1", mac9), nil),
		}}, gives + "BMC serial S1 to both node-1 and node-2"},
		{"live nodes share a TPM EK", &pactv1.Snapshot{Nodes: []*pactv1.Node{
			active("node-2", hw2()), active("node-9", withEK(raftfsmtest.Hardware("S9", mac9), ekA)),
		}}, gives + "TPM EK hash to both node-2 and node-9"},
		{"live nodes share a SPIFFE ID", &pactv1.Snapshot{Nodes: []*pactv1.Node{
			spiffe(active("node-1", hw1()), custom1), spiffe(active("node-2", hw2()), custom1),
		}}, gives + "SPIFFE ID " + custom1 + " to both node-1 and node-2"},
		{"two conflicts, the first named", &pactv1.Snapshot{Nodes: []*pactv1.Node{
			active("node-1", hw1()), active("node-2", hw2()), active("node-3", withEK(raftfsmtest.Hardware("S1", mac3), ekA)),
		}}, gives + "MAC " + mac3 + " to both node-2 and node-3"},
		{"a node's MAC before its other identifiers", &pactv1.Snapshot{Nodes: []*pactv1.Node{
			active("node-1", hw1()), spiffe(active("node-2", hw2()), custom1), spiffe(active("node-3", withEK(raftfsmtest.Hardware("S1", mac9, mac3), ekA)), custom1),
		}}, gives + "MAC " + mac3 + " to both node-2 and node-3"},
		{"revoked nodes share hardware with a live one", &pactv1.Snapshot{Nodes: []*pactv1.Node{
			revoked("node-1", hw1()), spiffe(revoked("node-2", hw1()), custom1), spiffe(active("node-3", hw1()), custom1),
		}}, ""},
		{"a node lists a MAC twice", &pactv1.Snapshot{Nodes: []*pactv1.Node{active("node-1", raftfsmtest.Hardware("S1", mac1, mac1))}}, ""},
		{"liveness of an unknown node", &pactv1.Snapshot{Nodes: []*pactv1.Node{active("node-1", hw1())}, LastSeen: seen("node-1", "node-9")},
			"raftfsm: snapshot has liveness for unknown node node-9"},
		{"liveness of two unknown nodes, the first named", &pactv1.Snapshot{LastSeen: seen("node-8", "node-9", "node-7")},
			"raftfsm: snapshot has liveness for unknown node node-8"},
		{"a conflict before unknown liveness", &pactv1.Snapshot{
			Nodes: []*pactv1.Node{active("node-1", hw1()), active("node-2", hw1())}, LastSeen: seen("node-9"),
		}, gives + "MAC " + mac1 + " to both node-1 and node-2"},
		{"a bad record before a conflict", &pactv1.Snapshot{
			Nodes: []*pactv1.Node{active("node-1", hw1()), active("node-2", hw1())}, JoinTokens: []*pactv1.JoinToken{token("node-1", "not-hex")},
		}, badToken + "node-1"},
		{"a join token twice", &pactv1.Snapshot{JoinTokens: []*pactv1.JoinToken{
			token("node-1", strings.Repeat("ab", 32)), token("node-2", strings.Repeat("ab", 32)),
		}}, badToken + "node-2"},
		{"a join token in upper case", &pactv1.Snapshot{JoinTokens: []*pactv1.JoinToken{token("node-1", strings.Repeat("AB", 32))}},
			badToken + "node-1"},
		{"a short join token", &pactv1.Snapshot{JoinTokens: []*pactv1.JoinToken{token("node-1", "ab")}}, badToken + "node-1"},
		{"an operator without a serial", &pactv1.Snapshot{Operators: []*pactv1.Operator{{Name: "alice"}}},
			"raftfsm: snapshot has an operator credential without a serial"},
		{"journal CAs, one revoked, and their intermediates", &pactv1.Snapshot{
			Intermediates: []*pactv1.Intermediate{under("j1", "i-1", "ca-1"), under("j2", "i-2", "ca-2"), under("j2", "i-3", ""), under("j1", "i-4", "ca-1")},
			JournalCas:    []*pactv1.JournalCA{jca("j1", "ca-1", nil), jca("j2", "ca-2", func(c *pactv1.JournalCA) { c.RevokedAtUnixNano, c.RevokedBy = t0*1e9, "admin/alice" })},
		}, ""},
		{"a journal CA no intermediate names", &pactv1.Snapshot{JournalCas: []*pactv1.JournalCA{jca("j1", "ca-1", nil)}}, ""},
		{"a journal CA without a serial", &pactv1.Snapshot{JournalCas: []*pactv1.JournalCA{jca("j1", "", nil)}}, noCA},
		{"a journal CA without a certificate", &pactv1.Snapshot{JournalCas: []*pactv1.JournalCA{jca("j1", "ca-1", func(c *pactv1.JournalCA) { c.Der = nil })}}, noCA},
		{"a journal CA without a journal", &pactv1.Snapshot{JournalCas: []*pactv1.JournalCA{jca("", "ca-1", nil)}}, noCA},
		{"a journal CA twice", &pactv1.Snapshot{JournalCas: []*pactv1.JournalCA{jca("j1", "ca-1", nil), jca("j2", "ca-1", nil)}},
			"raftfsm: snapshot has journal CA ca-1 twice"},
		{"an intermediate of a journal CA not held", &pactv1.Snapshot{
			Intermediates: []*pactv1.Intermediate{under("j1", "i-1", "ca-1"), under("j1", "i-2", "ca-9"), under("j1", "i-3", "ca-8")},
			JournalCas:    []*pactv1.JournalCA{jca("j1", "ca-1", nil)},
		}, "raftfsm: snapshot has intermediate i-2 signed by journal CA ca-9, which it does not hold"},
		{"an intermediate of another journal's journal CA", &pactv1.Snapshot{
			Intermediates: []*pactv1.Intermediate{under("j2", "i-1", "ca-1")},
			JournalCas:    []*pactv1.JournalCA{jca("j1", "ca-1", nil)},
		}, "raftfsm: snapshot has intermediate i-1 of journal j2 signed by journal CA ca-1 of journal j1"},
		{"liveness of an unknown node before an unheld journal CA", &pactv1.Snapshot{
			LastSeen: seen("node-9"), Intermediates: []*pactv1.Intermediate{under("j1", "i-1", "ca-1")},
		}, "raftfsm: snapshot has liveness for unknown node node-9"},
	}
	type encoded struct {
		name, want string
		nodes      int
		data       []byte
	}
	var cases []encoded
	for _, tt := range tests {
		b, err := raftfsm.EncodeSnapshot(tt.state)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases,
			encoded{tt.name, tt.want, len(tt.state.GetNodes()), b},
			encoded{tt.name + " (format 1)", tt.want, len(tt.state.GetNodes()), mustMarshal(t, tt.state)})
	}
	// Records no Snapshot message makes: a second quorum identity, a
	// sizes record after another, a record of a kind this version does not
	// know. A state in format 2 ends in a zero byte.
	withQ, _ := raftfsm.EncodeSnapshot(&pactv1.Snapshot{Quorum: quorum})
	empty, _ := raftfsm.EncodeSnapshot(&pactv1.Snapshot{})
	qRec := withQ[len(empty)-1 : len(withQ)-1]
	const magic = "\x00pact-snapshot-records\n"
	sizesRec := empty[len(magic) : len(empty)-1]
	rec := protowire.AppendBytes(protowire.AppendTag(nil, 50, protowire.BytesType), []byte("x"))
	unknown := append(protowire.AppendVarint([]byte(magic), uint64(len(rec))), rec...)
	cases = append(cases,
		encoded{"two quorum identities", "raftfsm: snapshot has two quorum identities", 0, append(append(bytes.Clone(withQ[:len(withQ)-1]), qRec...), 0)},
		encoded{"a sizes record after another record", "raftfsm: snapshot has a sizes record after other records", 0, append(append(bytes.Clone(withQ[:len(withQ)-1]), sizesRec...), 0)},
		encoded{"a record of an unknown kind", "raftfsm: decode snapshot: a record of a kind this version does not know", 0, append(unknown, 0)})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := raftfsm.New()
			restoreErr := raftfsmtest.RestoreBytes(f, c.data)
			n, checkErr := snapfile.CheckState(bytes.NewReader(c.data))
			for _, got := range []struct {
				entry string
				err   error
				nodes int
			}{{"Restore", restoreErr, len(f.Nodes(raftfsm.Filter{}))}, {"snapfile.CheckState", checkErr, n}} {
				switch {
				case c.want == "" && got.err != nil:
					t.Errorf("%s refused it: %v", got.entry, got.err)
				case c.want == "" && got.nodes != c.nodes:
					t.Errorf("%s accepted %d nodes, want %d", got.entry, got.nodes, c.nodes)
				case c.want != "" && got.err == nil:
					t.Errorf("%s accepted it, want %q", got.entry, c.want)
				case c.want != "" && got.err.Error() != c.want:
					t.Errorf("%s refused it with %q, want %q", got.entry, got.err, c.want)
				}
			}
		})
	}
}
