package raftfsm

import (
	"bytes"
	"sort"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pact-hpc/pact/internal/snapfile"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// DefaultSPIFFEPath is the path of nodeID's default SPIFFE ID.
func DefaultSPIFFEPath(nodeID string) string { return agentPathPrefix + nodeID }

// SPIFFEIDOf is the SPIFFE ID n's SVIDs must carry in trustDomain: its
// registered override, or spiffe://{trustDomain}/pact-agent/{node_id}.
func SPIFFEIDOf(n *pactv1.Node, trustDomain string) string {
	if sid := n.GetSpiffeId(); sid != "" {
		return sid
	}
	return "spiffe://" + trustDomain + DefaultSPIFFEPath(n.GetNodeId())
}

// KnownOps lists the operations this version applies, sorted.
func KnownOps() []string {
	var out []string
	for n := range ops {
		out = append(out, string(n))
	}
	sort.Strings(out)
	return out
}

// DeclaredOps is the set of oneof cases of Command, for the test that
// keeps the table complete.
func DeclaredOps() []protoreflect.Name {
	var out []protoreflect.Name
	fields := (&pactv1.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("op").Fields()
	for i := range fields.Len() {
		out = append(out, fields.Get(i).Name())
	}
	return out
}

// StateWithoutAuditIndex is f's whole state with every audit entry's log
// index cleared: commands applied in one batch entry and the same commands
// in entries of their own leave the same state but for those indexes.
func StateWithoutAuditIndex(f *FSM) *pactv1.Snapshot {
	f.mu.RLock()
	s := f.snapshotLocked().snap
	f.mu.RUnlock()
	sortSnapshot(s)
	for i, e := range s.Audit {
		e = proto.CloneOf(e)
		e.Index = 0
		s.Audit[i] = e
	}
	return s
}

// DecodeSnapshot reads state bytes of either format into one Snapshot
// message, as stored (no registry rule is checked): for tests that look
// inside a snapshot.
func DecodeSnapshot(state []byte) (*pactv1.Snapshot, error) {
	s := &pactv1.Snapshot{}
	err := snapfile.Walk(bytes.NewReader(state), func(rec *pactv1.SnapshotRecord) error {
		switch r := rec.GetRecord().(type) {
		case *pactv1.SnapshotRecord_Node:
			s.Nodes = append(s.Nodes, r.Node)
		case *pactv1.SnapshotRecord_Revoked:
			s.Revoked = append(s.Revoked, r.Revoked)
		case *pactv1.SnapshotRecord_Intermediate:
			s.Intermediates = append(s.Intermediates, r.Intermediate)
		case *pactv1.SnapshotRecord_LastSeen:
			s.LastSeen = append(s.LastSeen, r.LastSeen)
		case *pactv1.SnapshotRecord_Audit:
			s.Audit = append(s.Audit, r.Audit)
		case *pactv1.SnapshotRecord_Journal:
			s.Journals = append(s.Journals, r.Journal)
		case *pactv1.SnapshotRecord_JoinToken:
			s.JoinTokens = append(s.JoinTokens, r.JoinToken)
		case *pactv1.SnapshotRecord_Operator:
			s.Operators = append(s.Operators, r.Operator)
		case *pactv1.SnapshotRecord_RevokedOperatorName:
			s.RevokedOperatorNames = append(s.RevokedOperatorNames, r.RevokedOperatorName)
		case *pactv1.SnapshotRecord_Quorum:
			s.Quorum = r.Quorum
		case *pactv1.SnapshotRecord_JournalCa:
			s.JournalCas = append(s.JournalCas, r.JournalCa)
		case *pactv1.SnapshotRecord_QuorumLevel:
			s.QuorumLevel = r.QuorumLevel
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// EncodeSnapshot writes s in format 2 as it is (unsorted): for tests that
// build a state by hand.
func EncodeSnapshot(s *pactv1.Snapshot) ([]byte, error) {
	var buf bytes.Buffer
	err := snapfile.WriteState(&buf, s)
	return buf.Bytes(), err
}
