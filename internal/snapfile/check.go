package snapfile

import (
	"errors"
	"fmt"
	"io"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The registry's rules on a state live here, once: a journal's restore
// (raftfsm) builds its registry through ReadState, and CheckState, the
// check of a snapshot file the operator CLI reads, goes through ReadState
// into sets. Whatever one refuses the other refuses, with the same message.

// A Registry is what ReadState builds from a state's records and asks of
// the records it has passed so far. It only builds: every refusal is
// ReadState's.
type Registry interface {
	// Add takes the next record the rules accept.
	Add(*pactv1.SnapshotRecord)
	// HasNode reports whether a node with this id was added.
	HasNode(id string) bool
	// HasJoinToken reports whether a join token with this SHA-256 was added.
	HasJoinToken(sha256 string) bool
	// LiveIdentifiers counts the distinct identifiers the live (not
	// revoked) nodes added hold: an identifier two of them share counts
	// once, which is how ReadState notices a conflict without a lookup
	// per identifier.
	LiveIdentifiers() IdentifierCounts
}

// IdentifierCounts counts node identifiers by kind.
type IdentifierCounts struct {
	MACs, BMCSerials, EKHashes, SPIFFEIDs int
}

// maxSizeHint bounds how far a reader presizes on a sizes record's word:
// a corrupt or hostile hint cannot make it allocate much before a single
// node is read. Larger registries grow past it.
const maxSizeHint = 1 << 18

// SizeHint is how many nodes and liveness records a sizes record
// announces, bounded so that a reader may presize for them.
func SizeHint(s *pactv1.SnapshotSizes) (nodes, lastSeen int) {
	return int(min(s.GetNodes(), maxSizeHint)), int(min(s.GetLastSeen(), maxSizeHint))
}

// ReadState reads a state in either format into reg, refusing it at the
// first record that breaks a rule of the registry, or once every record is
// read if two live nodes share an identifier or a liveness record names
// no node. reg may hold part of the state when ReadState fails.
func ReadState(r io.Reader, reg Registry) error {
	c := &rules{reg: reg}
	if err := Walk(r, c.add); err != nil {
		return err
	}
	return c.finish()
}

// CheckState reads a state in either format and checks the registry's
// rules on it without building a registry. It returns the number of nodes.
func CheckState(r io.Reader) (int, error) {
	s := newStateSets()
	if err := ReadState(r, s); err != nil {
		return 0, err
	}
	return len(s.nodes), nil
}

// rules checks records one at a time for ReadState.
type rules struct {
	reg             Registry
	started, quorum bool
	// level: the state opened with a quorum level record (format 3).
	level bool
	// The live nodes in the order read, and how many identifiers of each
	// kind they list: a conflict shows as a registry count smaller than
	// this, and only then does finish look for it node by node.
	live     []liveNode
	listed   IdentifierCounts
	lastSeen []string // node ids, checked once every node is read
	// The journal CAs read, by serial (their journal), and the
	// intermediates that name one, checked once every record is read: the
	// journal CAs come after the intermediates.
	journalCAs map[string]string
	signed     []*pactv1.Intermediate
	// federated: the federated domains read, by name.
	federated map[string]bool
	// bootPolicies: the boot policies read, by vCluster.
	bootPolicies map[string]bool
}

// liveNode is what the conflict check needs of a live node, without
// keeping the rest of it (certificates and all) alive.
type liveNode struct {
	id, spiffeID string
	hw           *pactv1.HardwareIdentity
}

func (c *rules) add(rec *pactv1.SnapshotRecord) error {
	if err := c.check(rec); err != nil {
		return err
	}
	c.reg.Add(rec)
	return nil
}

func (c *rules) check(rec *pactv1.SnapshotRecord) error {
	if ql, ok := rec.GetRecord().(*pactv1.SnapshotRecord_QuorumLevel); ok {
		if c.started || c.level {
			return errors.New("raftfsm: snapshot has a quorum level record after other records")
		}
		if ql.QuorumLevel.GetLevel() < 2 {
			return fmt.Errorf("raftfsm: snapshot has a quorum level record of level %d (level 1 is written as no record)", ql.QuorumLevel.GetLevel())
		}
		c.level = true
		return nil
	}
	first := !c.started
	c.started = true
	switch r := rec.GetRecord().(type) {
	case *pactv1.SnapshotRecord_Sizes:
		if !first {
			return errors.New("raftfsm: snapshot has a sizes record after other records")
		}
		nodes, seen := SizeHint(r.Sizes)
		c.live, c.lastSeen = make([]liveNode, 0, nodes), make([]string, 0, seen)
	case *pactv1.SnapshotRecord_Node:
		n := r.Node
		if n.GetNodeId() == "" {
			return errors.New("raftfsm: snapshot has a node without an id")
		}
		if c.reg.HasNode(n.GetNodeId()) {
			return fmt.Errorf("raftfsm: snapshot has node %s twice", n.GetNodeId())
		}
		if n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED {
			h := n.GetHardware()
			c.live = append(c.live, liveNode{id: n.GetNodeId(), spiffeID: n.GetSpiffeId(), hw: h})
			c.listed.MACs += len(h.GetMacs())
			c.listed.BMCSerials += count(h.GetBmcSerial())
			c.listed.EKHashes += count(h.GetTpmEkHash())
			c.listed.SPIFFEIDs += count(n.GetSpiffeId())
		}
	case *pactv1.SnapshotRecord_Intermediate:
		if r.Intermediate.GetIssuerSerial() != "" {
			c.signed = append(c.signed, r.Intermediate)
		}
	case *pactv1.SnapshotRecord_JournalCa:
		jc := r.JournalCa
		if jc.GetSerial() == "" || len(jc.GetDer()) == 0 || jc.GetJournalId() == "" {
			return errors.New("raftfsm: snapshot has a journal CA without a serial, certificate or journal")
		}
		if _, dup := c.journalCAs[jc.GetSerial()]; dup {
			return fmt.Errorf("raftfsm: snapshot has journal CA %s twice", jc.GetSerial())
		}
		if c.journalCAs == nil {
			c.journalCAs = map[string]string{}
		}
		c.journalCAs[jc.GetSerial()] = jc.GetJournalId()
	case *pactv1.SnapshotRecord_Revoked,
		*pactv1.SnapshotRecord_Audit, *pactv1.SnapshotRecord_Journal,
		*pactv1.SnapshotRecord_RevokedOperatorName:
	case *pactv1.SnapshotRecord_LastSeen:
		// Records may come in any order: the node may be further on.
		c.lastSeen = append(c.lastSeen, r.LastSeen.GetNodeId())
	case *pactv1.SnapshotRecord_JoinToken:
		t := r.JoinToken
		if !isHexSHA256(t.GetSha256()) || c.reg.HasJoinToken(t.GetSha256()) {
			return fmt.Errorf("raftfsm: snapshot has a malformed or repeated join token for node %s", t.GetNodeId())
		}
	case *pactv1.SnapshotRecord_Operator:
		if r.Operator.GetSerial() == "" {
			return errors.New("raftfsm: snapshot has an operator credential without a serial")
		}
	case *pactv1.SnapshotRecord_FederatedDomain:
		fd := r.FederatedDomain
		if fd.GetName() == "" || len(fd.GetX509Authorities()) == 0 {
			return errors.New("raftfsm: snapshot has a federated domain without a name or a bundle")
		}
		if c.federated[fd.GetName()] {
			return fmt.Errorf("raftfsm: snapshot has federated domain %s twice", fd.GetName())
		}
		if c.federated == nil {
			c.federated = map[string]bool{}
		}
		c.federated[fd.GetName()] = true
	case *pactv1.SnapshotRecord_BootPolicy:
		vc := r.BootPolicy.GetVcluster()
		if c.bootPolicies[vc] {
			return fmt.Errorf("raftfsm: snapshot has two boot policies for vCluster %q", vc)
		}
		if c.bootPolicies == nil {
			c.bootPolicies = map[string]bool{}
		}
		c.bootPolicies[vc] = true
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

func count(s string) int {
	if s == "" {
		return 0
	}
	return 1
}

// finish checks what only the whole state shows: a conflict first, then
// liveness of a node no record holds, then an intermediate naming a
// journal CA the state does not hold or another journal's (the first such
// record named).
func (c *rules) finish() error {
	if c.reg.LiveIdentifiers() != c.listed {
		// Also when one node lists an identifier twice, which is no
		// conflict: firstConflict finds none then.
		if err := firstConflict(c.live); err != nil {
			return err
		}
	}
	for _, id := range c.lastSeen {
		if !c.reg.HasNode(id) {
			return fmt.Errorf("raftfsm: snapshot has liveness for unknown node %s", id)
		}
	}
	for _, in := range c.signed {
		owner, ok := c.journalCAs[in.GetIssuerSerial()]
		if !ok {
			return fmt.Errorf("raftfsm: snapshot has intermediate %s signed by journal CA %s, which it does not hold", in.GetSerial(), in.GetIssuerSerial())
		}
		if owner != in.GetJournalId() {
			return fmt.Errorf("raftfsm: snapshot has intermediate %s of journal %s signed by journal CA %s of journal %s", in.GetSerial(), in.GetJournalId(), in.GetIssuerSerial(), owner)
		}
	}
	return nil
}

// firstConflict names the first identifier the live nodes, in the order
// read, give to two of them: the first node holding one an earlier node
// holds, its MACs looked at first, then its BMC serial, its TPM EK hash and
// its SPIFFE ID. nil if there is none (a node may list one of its own
// twice).
func firstConflict(live []liveNode) error {
	byMAC, byBMC, byEK, bySPIFFE := map[string]string{}, map[string]string{}, map[string]string{}, map[string]string{}
	for _, n := range live {
		h := n.hw
		for _, m := range h.GetMacs() {
			if o, ok := byMAC[m]; ok {
				return conflict("MAC "+m, o, n.id)
			}
		}
		if b := h.GetBmcSerial(); b != "" {
			if o, ok := byBMC[b]; ok {
				return conflict("BMC serial "+b, o, n.id)
			}
		}
		if e := h.GetTpmEkHash(); e != "" {
			if o, ok := byEK[e]; ok {
				return conflict("TPM EK hash", o, n.id)
			}
		}
		if sid := n.spiffeID; sid != "" {
			if o, ok := bySPIFFE[sid]; ok {
				return conflict("SPIFFE ID "+sid, o, n.id)
			}
			bySPIFFE[sid] = n.id
		}
		for _, m := range h.GetMacs() {
			byMAC[m] = n.id
		}
		if b := h.GetBmcSerial(); b != "" {
			byBMC[b] = n.id
		}
		if e := h.GetTpmEkHash(); e != "" {
			byEK[e] = n.id
		}
	}
	return nil
}

func conflict(what, owner, id string) error {
	return fmt.Errorf("raftfsm: snapshot gives %s to both %s and %s", what, owner, id)
}

// stateSets is CheckState's registry: the ids and identifiers the rules
// ask about, nothing else.
type stateSets struct {
	nodes, tokens              map[string]struct{}
	macs, bmcs, eks, spiffeIDs map[string]struct{}
}

func newStateSets() *stateSets {
	return &stateSets{
		nodes: map[string]struct{}{}, tokens: map[string]struct{}{},
		macs: map[string]struct{}{}, bmcs: map[string]struct{}{}, eks: map[string]struct{}{}, spiffeIDs: map[string]struct{}{},
	}
}

func (s *stateSets) Add(rec *pactv1.SnapshotRecord) {
	switch r := rec.GetRecord().(type) {
	case *pactv1.SnapshotRecord_Node:
		n := r.Node
		s.nodes[n.GetNodeId()] = struct{}{}
		if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
			return
		}
		h := n.GetHardware()
		for _, m := range h.GetMacs() {
			s.macs[m] = struct{}{}
		}
		addNonEmpty(s.bmcs, h.GetBmcSerial())
		addNonEmpty(s.eks, h.GetTpmEkHash())
		addNonEmpty(s.spiffeIDs, n.GetSpiffeId())
	case *pactv1.SnapshotRecord_JoinToken:
		s.tokens[r.JoinToken.GetSha256()] = struct{}{}
	}
}

func addNonEmpty(set map[string]struct{}, k string) {
	if k != "" {
		set[k] = struct{}{}
	}
}

func (s *stateSets) HasNode(id string) bool {
	_, ok := s.nodes[id]
	return ok
}

func (s *stateSets) HasJoinToken(sum string) bool {
	_, ok := s.tokens[sum]
	return ok
}

func (s *stateSets) LiveIdentifiers() IdentifierCounts {
	return IdentifierCounts{MACs: len(s.macs), BMCSerials: len(s.bmcs), EKHashes: len(s.eks), SPIFFEIDs: len(s.spiffeIDs)}
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
