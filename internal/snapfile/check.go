package snapfile

import (
	"errors"
	"fmt"
	"io"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// CheckState reads a state in either format and checks the rules a
// registry keeps, without building one: what a journal's restore of it
// (raftfsm's decodeState) would refuse, CheckState refuses, with the same
// message. It returns the number of nodes. raftfsm's TestRestoreRejects and
// FuzzRestore hold the two to each other.
func CheckState(r io.Reader) (int, error) {
	c := &checker{
		nodes:    map[string]struct{}{},
		byMAC:    map[string]string{},
		byBMC:    map[string]string{},
		byEK:     map[string]string{},
		bySPIFFE: map[string]string{},
		tokens:   map[string]struct{}{},
		lastSeen: map[string]struct{}{},
	}
	if err := Walk(r, c.add); err != nil {
		return 0, err
	}
	if err := c.finish(); err != nil {
		return 0, err
	}
	return len(c.nodes), nil
}

// checker follows raftfsm's stateBuilder rule for rule.
type checker struct {
	started bool
	nodes   map[string]struct{}
	// Identifiers of the live nodes read so far, and the first one two of
	// them share (reported once every record is read, as raftfsm does).
	byMAC, byBMC, byEK, bySPIFFE map[string]string
	conflict                     error
	tokens                       map[string]struct{}
	lastSeen                     map[string]struct{}
	quorum                       bool
}

func (c *checker) add(rec *pactv1.SnapshotRecord) error {
	first := !c.started
	c.started = true
	switch r := rec.GetRecord().(type) {
	case *pactv1.SnapshotRecord_Sizes:
		if !first {
			return errors.New("raftfsm: snapshot has a sizes record after other records")
		}
	case *pactv1.SnapshotRecord_Node:
		n := r.Node
		if n.GetNodeId() == "" {
			return errors.New("raftfsm: snapshot has a node without an id")
		}
		if _, dup := c.nodes[n.GetNodeId()]; dup {
			return fmt.Errorf("raftfsm: snapshot has node %s twice", n.GetNodeId())
		}
		c.nodes[n.GetNodeId()] = struct{}{}
		if n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED && c.conflict == nil {
			c.conflict = c.live(n)
		}
	case *pactv1.SnapshotRecord_Revoked, *pactv1.SnapshotRecord_Intermediate,
		*pactv1.SnapshotRecord_Audit, *pactv1.SnapshotRecord_Journal,
		*pactv1.SnapshotRecord_RevokedOperatorName:
	case *pactv1.SnapshotRecord_LastSeen:
		c.lastSeen[r.LastSeen.GetNodeId()] = struct{}{}
	case *pactv1.SnapshotRecord_JoinToken:
		t := r.JoinToken
		if _, dup := c.tokens[t.GetSha256()]; dup || !isHexSHA256(t.GetSha256()) {
			return fmt.Errorf("raftfsm: snapshot has a malformed or repeated join token for node %s", t.GetNodeId())
		}
		c.tokens[t.GetSha256()] = struct{}{}
	case *pactv1.SnapshotRecord_Operator:
		if r.Operator.GetSerial() == "" {
			return errors.New("raftfsm: snapshot has an operator credential without a serial")
		}
	case *pactv1.SnapshotRecord_Quorum:
		if c.quorum {
			return errors.New("raftfsm: snapshot has two quorum identities")
		}
		c.quorum = true
	default:
		return fmt.Errorf("raftfsm: snapshot record %T this version does not know", r)
	}
	return nil
}

// live indexes a live node's identifiers, naming the first one an earlier
// live node holds: its MACs, then its BMC serial, its TPM EK hash and its
// SPIFFE ID (a node may list one of its own twice).
func (c *checker) live(n *pactv1.Node) error {
	h, id := n.GetHardware(), n.GetNodeId()
	for _, m := range h.GetMacs() {
		if o, ok := c.byMAC[m]; ok {
			return conflict("MAC "+m, o, id)
		}
	}
	if b := h.GetBmcSerial(); b != "" {
		if o, ok := c.byBMC[b]; ok {
			return conflict("BMC serial "+b, o, id)
		}
	}
	if e := h.GetTpmEkHash(); e != "" {
		if o, ok := c.byEK[e]; ok {
			return conflict("TPM EK hash", o, id)
		}
	}
	if sid := n.GetSpiffeId(); sid != "" {
		if o, ok := c.bySPIFFE[sid]; ok {
			return fmt.Errorf("raftfsm: snapshot gives SPIFFE ID %s to both %s and %s", sid, o, id)
		}
		c.bySPIFFE[sid] = id
	}
	for _, m := range h.GetMacs() {
		c.byMAC[m] = id
	}
	if b := h.GetBmcSerial(); b != "" {
		c.byBMC[b] = id
	}
	if e := h.GetTpmEkHash(); e != "" {
		c.byEK[e] = id
	}
	return nil
}

func conflict(what, owner, id string) error {
	return fmt.Errorf("raftfsm: snapshot gives %s to both %s and %s", what, owner, id)
}

func (c *checker) finish() error {
	if c.conflict != nil {
		return c.conflict
	}
	for id := range c.lastSeen {
		if _, ok := c.nodes[id]; !ok {
			return fmt.Errorf("raftfsm: snapshot has liveness for unknown node %s", id)
		}
	}
	return nil
}

// isHexSHA256 reports whether s is a SHA-256 in lower-case hex, as a join
// token's record names it.
func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
