package raftfsm

import (
	"errors"
	"fmt"
	"io"

	"github.com/pact-hpc/pact/internal/snapfile"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The state's encodings, in a Raft snapshot and in a snapshot file alike,
// are internal/snapfile's: format 1, one pactv1.Snapshot message, and
// format 2, a stream of records. Here the records become a registry.
//
// snapfile.CheckState checks a state by the same rules without building a
// registry (the operator CLI's inspect): a rule added here goes there too,
// and TestRestoreRejects and FuzzRestore hold the two to each other.

// maxSizeHint bounds how far a reader presizes its indexes on a sizes
// record's word: a corrupt or hostile hint cannot make it allocate much
// before a single node is read. Larger registries grow past it.
const maxSizeHint = 1 << 18

// decodeState reads a state in either format and checks the registry's
// rules on it.
func decodeState(r io.Reader, auditCap int) (*state, error) {
	b := &stateBuilder{st: newState(auditCap), auditCap: auditCap}
	if err := snapfile.Walk(r, b.add); err != nil {
		return nil, err
	}
	return b.finish()
}

// stateBuilder builds a state one record at a time.
type stateBuilder struct {
	st       *state
	auditCap int
	started  bool
	// Live nodes in the order read, and how many identifiers of each kind
	// they hold: a conflict (one identifier given to two live nodes) shows
	// as an index smaller than its count, and only then are the nodes
	// checked one by one to name it (checkNodes). A registry without one
	// costs no lookup per identifier.
	live                  []*pactv1.Node
	macs, bmcs, eks, sids int
}

func (b *stateBuilder) add(rec *pactv1.SnapshotRecord) error {
	first := !b.started
	b.started = true
	st := b.st
	switch r := rec.GetRecord().(type) {
	case *pactv1.SnapshotRecord_Sizes:
		if !first {
			return errors.New("raftfsm: snapshot has a sizes record after other records")
		}
		b.st = newStateSized(b.auditCap, int(min(r.Sizes.GetNodes(), maxSizeHint)), int(min(r.Sizes.GetLastSeen(), maxSizeHint)))
	case *pactv1.SnapshotRecord_Node:
		n := r.Node
		if n.GetNodeId() == "" {
			return errors.New("raftfsm: snapshot has a node without an id")
		}
		if _, dup := st.nodes[n.GetNodeId()]; dup {
			return fmt.Errorf("raftfsm: snapshot has node %s twice", n.GetNodeId())
		}
		if n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED {
			h := n.GetHardware()
			b.live = append(b.live, n)
			b.macs += len(h.GetMacs())
			b.bmcs += count(h.GetBmcSerial())
			b.eks += count(h.GetTpmEkHash())
			b.sids += count(n.GetSpiffeId())
		}
		st.putNew(n)
	case *pactv1.SnapshotRecord_Revoked:
		st.revoked[r.Revoked.GetSerial()] = r.Revoked.GetNotAfterUnix()
	case *pactv1.SnapshotRecord_Intermediate:
		st.intermediates[r.Intermediate.GetSerial()] = r.Intermediate
	case *pactv1.SnapshotRecord_LastSeen:
		// Checked against the nodes in finish: records may come in any order.
		st.lastSeen[r.LastSeen.GetNodeId()] = r.LastSeen.GetAtUnixNano()
	case *pactv1.SnapshotRecord_Audit:
		st.audit.add(r.Audit)
	case *pactv1.SnapshotRecord_Journal:
		st.journals[r.Journal.GetJournalId()] = r.Journal
	case *pactv1.SnapshotRecord_JoinToken:
		t := r.JoinToken
		if _, dup := st.joinTokens[t.GetSha256()]; dup || !isHexSHA256(t.GetSha256()) {
			return fmt.Errorf("raftfsm: snapshot has a malformed or repeated join token for node %s", t.GetNodeId())
		}
		st.joinTokens[t.GetSha256()] = t
	case *pactv1.SnapshotRecord_Operator:
		if r.Operator.GetSerial() == "" {
			return errors.New("raftfsm: snapshot has an operator credential without a serial")
		}
		st.operators[r.Operator.GetSerial()] = r.Operator
	case *pactv1.SnapshotRecord_RevokedOperatorName:
		st.revokedNames[r.RevokedOperatorName.GetName()] = r.RevokedOperatorName
	case *pactv1.SnapshotRecord_Quorum:
		if st.quorum != nil {
			return errors.New("raftfsm: snapshot has two quorum identities")
		}
		st.quorum = r.Quorum
	default:
		return fmt.Errorf("raftfsm: snapshot record %T this version does not know", r)
	}
	return nil
}

func count(s string) int {
	if s == "" {
		return 0
	}
	return 1
}

// checkNodes names the first identifier the live nodes, in the order
// read, give to two of them; nil if none does (an index can also be
// smaller than its count when one node lists an identifier twice).
func checkNodes(live []*pactv1.Node, auditCap int) error {
	st := newState(auditCap)
	for _, n := range live {
		if owner, what := st.owner(identityOf(n.GetHardware())); owner != "" {
			return fmt.Errorf("raftfsm: snapshot gives %s to both %s and %s", what, owner, n.GetNodeId())
		}
		if owner, ok := st.bySPIFFE[n.GetSpiffeId()]; ok && n.GetSpiffeId() != "" {
			return fmt.Errorf("raftfsm: snapshot gives SPIFFE ID %s to both %s and %s", n.GetSpiffeId(), owner, n.GetNodeId())
		}
		st.putNew(n)
	}
	return nil
}

func (b *stateBuilder) finish() (*state, error) {
	if st := b.st; len(st.byMAC) != b.macs || len(st.byBMC) != b.bmcs || len(st.byEK) != b.eks || len(st.bySPIFFE) != b.sids {
		if err := checkNodes(b.live, b.auditCap); err != nil {
			return nil, err
		}
	}
	for id := range b.st.lastSeen {
		if _, ok := b.st.nodes[id]; !ok {
			return nil, fmt.Errorf("raftfsm: snapshot has liveness for unknown node %s", id)
		}
	}
	return b.st, nil
}
