package raftfsm

import (
	"fmt"
	"io"

	"github.com/pact-hpc/pact/internal/snapfile"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The state's encodings, in a Raft snapshot and in a snapshot file alike,
// are internal/snapfile's: format 1, one pactv1.Snapshot message, and
// format 2, a stream of records. snapfile.ReadState also holds every rule a
// state must keep (the same rules the operator CLI checks a snapshot file
// with); here the records it accepts become a registry.

// decodeState reads a state in either format and checks the registry's
// rules on it.
func decodeState(r io.Reader, auditCap int) (*state, error) {
	b := &stateBuilder{st: newState(auditCap), auditCap: auditCap}
	if err := snapfile.ReadState(r, b); err != nil {
		return nil, err
	}
	return b.st, nil
}

// stateBuilder builds a state one accepted record at a time: the
// snapfile.Registry of a restore.
type stateBuilder struct {
	st       *state
	auditCap int
}

func (b *stateBuilder) Add(rec *pactv1.SnapshotRecord) {
	st := b.st
	switch r := rec.GetRecord().(type) {
	case *pactv1.SnapshotRecord_Sizes:
		// Always the first record: nothing is lost with the empty state.
		nodes, seen := snapfile.SizeHint(r.Sizes)
		b.st = newStateSized(b.auditCap, nodes, seen)
		// A quorum level record comes before the sizes (format 3).
		b.st.quorumLevel = st.quorumLevel
	case *pactv1.SnapshotRecord_Node:
		st.putNew(r.Node)
	case *pactv1.SnapshotRecord_Revoked:
		st.revoked[r.Revoked.GetSerial()] = r.Revoked.GetNotAfterUnix()
	case *pactv1.SnapshotRecord_Intermediate:
		st.intermediates[r.Intermediate.GetSerial()] = r.Intermediate
	case *pactv1.SnapshotRecord_LastSeen:
		st.lastSeen[r.LastSeen.GetNodeId()] = r.LastSeen.GetAtUnixNano()
	case *pactv1.SnapshotRecord_Audit:
		st.audit.add(r.Audit)
	case *pactv1.SnapshotRecord_Journal:
		st.journals[r.Journal.GetJournalId()] = r.Journal
	case *pactv1.SnapshotRecord_JoinToken:
		st.joinTokens[r.JoinToken.GetSha256()] = r.JoinToken
	case *pactv1.SnapshotRecord_Operator:
		st.operators[r.Operator.GetSerial()] = r.Operator
	case *pactv1.SnapshotRecord_RevokedOperatorName:
		st.revokedNames[r.RevokedOperatorName.GetName()] = r.RevokedOperatorName
	case *pactv1.SnapshotRecord_Quorum:
		st.quorum = r.Quorum
	case *pactv1.SnapshotRecord_JournalCa:
		st.journalCAs[r.JournalCa.GetSerial()] = r.JournalCa
	case *pactv1.SnapshotRecord_QuorumLevel:
		st.quorumLevel = r.QuorumLevel
	case *pactv1.SnapshotRecord_FederatedDomain:
		st.federated[r.FederatedDomain.GetName()] = r.FederatedDomain
	case *pactv1.SnapshotRecord_BootPolicy:
		st.bootPolicies[r.BootPolicy.GetVcluster()] = r.BootPolicy
	default:
		// snapfile's rules know a kind of record this switch does not:
		// restoring without it would diverge from the journals that have it.
		panic(fmt.Sprintf("raftfsm: restore does not build snapshot record %T", r))
	}
}

func (b *stateBuilder) HasNode(id string) bool {
	_, ok := b.st.nodes[id]
	return ok
}

func (b *stateBuilder) HasJoinToken(sum string) bool {
	_, ok := b.st.joinTokens[sum]
	return ok
}

// LiveIdentifiers counts the keys of the indexes putNew fills for live
// nodes: they are the registry's own, so the conflict check costs restore
// no index of its own.
func (b *stateBuilder) LiveIdentifiers() snapfile.IdentifierCounts {
	st := b.st
	return snapfile.IdentifierCounts{MACs: len(st.byMAC), BMCSerials: len(st.byBMC), EKHashes: len(st.byEK), SPIFFEIDs: len(st.bySPIFFE)}
}
