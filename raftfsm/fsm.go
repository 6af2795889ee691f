// Package raftfsm is pact's replicated state machine: the enrollment
// registry, the revocation set and the published intermediates.
//
// Apply is deterministic. It reads no clock (the proposer stamps every
// command), draws no randomness, signs nothing and does no I/O; two replicas
// that apply the same log reach byte-identical snapshots. A command that
// cannot be decoded panics, because skipping it would let replicas diverge;
// a command that breaks a registry rule returns a typed error in its Result.
//
// Records are copy-on-write: Apply never mutates a stored *pactv1.Node, it
// replaces it. Readers may therefore share the returned pointers without a
// copy, and must not modify them.
package raftfsm

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/snapfile"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Result is what Apply returns for every command.
type Result struct {
	// Node is the record after the command (nil if none applies).
	Node *pactv1.Node
	// Idempotent is set when the command repeated one already applied (an
	// Enroll or RenewCert retried with the same key): Node holds the
	// certificate committed the first time.
	Idempotent bool
	// Err is a rule error (errors.Is against the package sentinels).
	Err error
	// Batch holds, for a batch entry (BatchOp), one result per command of
	// the batch in order; the fields above are then empty.
	Batch []*Result
}

// Event tells an observer what an applied command changed.
type Event struct {
	Index uint64
	// NodeIDs are the nodes whose record (state, vCluster, certificate)
	// changed; liveness timestamps alone do not count.
	NodeIDs       []string
	BundleChanged bool
	// Audit holds the audit entries the command recorded.
	Audit []*pactv1.AuditEntry
	// QuorumChanged: the quorum id (Quorum) changed.
	QuorumChanged bool
	// FederationChanged: a federated domain was added, removed, or its
	// bundle or policy changed.
	FederationChanged bool
}

func (e Event) empty() bool {
	return len(e.NodeIDs) == 0 && !e.BundleChanged && len(e.Audit) == 0 && !e.QuorumChanged && !e.FederationChanged
}

// DefaultAuditCapacity is how many audit entries the registry keeps.
const DefaultAuditCapacity = 10000

// FSM implements raft.FSM.
type FSM struct {
	applied atomic.Uint64
	// halted holds why the FSM stopped applying the log (nil while it
	// applies); release lets a halted Apply return when the journal stops.
	halted   atomic.Pointer[string]
	release  chan struct{}
	relOnce  sync.Once
	onHalt   func(index uint64, reason string)
	restores atomic.Uint64
	mu       sync.RWMutex
	st       *state
	observer func(Event)
	auditCap int
}

type state struct {
	nodes map[string]*pactv1.Node
	// Live identifiers (non-revoked nodes), each owned by one node, and
	// those of revoked nodes, so a decommissioned node's hardware is
	// answered NODE_REVOKED. Several revoked nodes may have held the same
	// identifier: the revoked indexes keep them all, so that they depend
	// on the records alone and not on the order of history (a replica
	// restored from a snapshot must answer like one that applied the log).
	byMAC, byBMC, byEK                      map[string]string
	revokedByMAC, revokedByBMC, revokedByEK map[string]nodeSet
	// SPIFFE ID overrides (Node.spiffe_id) indexed the same way: a live
	// node owns its override alone; revoked nodes keep theirs in
	// revokedBySPIFFE, so an SVID of a decommissioned node is answered
	// NODE_REVOKED. Default IDs (/pact-agent/{node_id}) need no index.
	bySPIFFE        map[string]string
	revokedBySPIFFE map[string]nodeSet
	revoked         map[string]int64 // serial -> not_after (unix seconds)
	intermediates   map[string]*pactv1.Intermediate
	// journalCAs holds the journal CAs by serial, recorded when a journal
	// first publishes an intermediate under one; revoked ones stay until
	// they expire.
	journalCAs map[string]*pactv1.JournalCA
	lastSeen   map[string]int64 // node -> unix nano
	audit      *auditRing
	journals   map[string]*pactv1.JournalInfo
	// Current certificate key fingerprints of non-revoked nodes (one key,
	// one node), and join tokens by hex SHA-256.
	bySPKI       holders
	joinTokens   map[string]*pactv1.JoinToken
	operators    map[string]*pactv1.Operator               // serial -> record
	revokedNames map[string]*pactv1.OperatorNameRevocation // operator name -> revocation
	// quorum is the quorum's identity (nil until a leader records one).
	quorum *pactv1.QuorumIdentity
	// quorumLevel is the quorum's feature level (nil: level 1; level.go).
	quorumLevel *pactv1.QuorumLevel
	// federated holds the federated domains by name (federation.go).
	federated map[string]*pactv1.FederatedDomain
	// bootPolicies holds the boot policies by vCluster (bootpolicy.go).
	bootPolicies map[string]*pactv1.BootPolicy
}

func newState(auditCap int) *state { return newStateSized(auditCap, 0, 0) }

// newStateSized presizes the maps a snapshot of nodes nodes (liveness for
// seen of them) fills, so a restore does not rehash them as they grow.
func newStateSized(auditCap, nodes, seen int) *state {
	return &state{
		nodes:           make(map[string]*pactv1.Node, nodes),
		byMAC:           make(map[string]string, nodes),
		byBMC:           make(map[string]string, nodes),
		byEK:            map[string]string{},
		revokedByMAC:    map[string]nodeSet{},
		revokedByBMC:    map[string]nodeSet{},
		revokedByEK:     map[string]nodeSet{},
		bySPIFFE:        map[string]string{},
		revokedBySPIFFE: map[string]nodeSet{},
		revoked:         map[string]int64{},
		intermediates:   map[string]*pactv1.Intermediate{},
		journalCAs:      map[string]*pactv1.JournalCA{},
		lastSeen:        make(map[string]int64, seen),
		audit:           newAuditRing(auditCap),
		journals:        map[string]*pactv1.JournalInfo{},
		bySPKI:          newHolders(nodes),
		joinTokens:      map[string]*pactv1.JoinToken{},
		operators:       map[string]*pactv1.Operator{},
		revokedNames:    map[string]*pactv1.OperatorNameRevocation{},
		federated:       map[string]*pactv1.FederatedDomain{},
		bootPolicies:    map[string]*pactv1.BootPolicy{},
	}
}

// New returns an empty FSM keeping DefaultAuditCapacity audit entries.
func New() *FSM { return NewWithAuditCapacity(DefaultAuditCapacity) }

// NewWithAuditCapacity returns an empty FSM keeping n audit entries. Every
// replica of a cluster must use the same n.
func NewWithAuditCapacity(n int) *FSM {
	if n < 1 {
		n = 1
	}
	return &FSM{st: newState(n), auditCap: n, release: make(chan struct{})}
}

// SetHaltHandler registers a function called once, on Raft's apply
// goroutine, when the FSM meets a command it does not know and may not
// skip. It must not block.
func (f *FSM) SetHaltHandler(fn func(index uint64, reason string)) {
	f.mu.Lock()
	f.onHalt = fn
	f.mu.Unlock()
}

// Halted is why the FSM stopped applying the log, or "".
func (f *FSM) Halted() string {
	if r := f.halted.Load(); r != nil {
		return *r
	}
	return ""
}

// Release unblocks a halted Apply so Raft can shut down. Call it only when
// the journal stops: entries after the halt are never applied.
func (f *FSM) Release() { f.relOnce.Do(func() { close(f.release) }) }

// SetObserver registers a function called after every applied command that
// changed something. It runs on Raft's apply goroutine: it must not block.
func (f *FSM) SetObserver(fn func(Event)) {
	f.mu.Lock()
	f.observer = fn
	f.mu.Unlock()
}

// Encode marshals a command for raft.Apply.
func Encode(cmd *pactv1.Command) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(cmd)
}

// Decode unmarshals a command.
func Decode(data []byte) (*pactv1.Command, error) {
	cmd := &pactv1.Command{}
	if err := proto.Unmarshal(data, cmd); err != nil {
		return nil, fmt.Errorf("raftfsm: decode command: %w", err)
	}
	return cmd, nil
}

// Apply applies one committed log entry.
//
// An entry whose operation this version does not know (a newer journal
// proposed it during a rolling upgrade) is skipped if it is marked
// ignorable. Otherwise the FSM halts: it calls the halt handler and blocks
// Raft's apply goroutine, so no later entry is applied and no snapshot is
// taken on top of the gap, until Release. Skipping it would diverge.
func (f *FSM) Apply(l *raft.Log) interface{} {
	if f.halted.Load() != nil {
		return &Result{Err: ErrHalted}
	}
	if l.Type != raft.LogCommand {
		f.applied.Store(l.Index)
		return &Result{}
	}
	cmd, err := Decode(l.Data)
	if err != nil {
		panic(fmt.Sprintf("raftfsm: log entry %d: %v", l.Index, err))
	}
	if cmd.GetOp() == nil && cmd.GetIgnorable() {
		f.applied.Store(l.Index)
		return &Result{}
	}
	// Checked for the whole entry before any of it is applied: a batch
	// stops at its entry, never half applied.
	reason := levelAboveBinary(cmd, l.Index)
	if unknown := unknownIn(cmd); unknown != nil {
		reason = unknownOp(unknown, l.Index)
	}
	if reason != "" {
		f.halted.Store(&reason)
		f.mu.RLock()
		h := f.onHalt
		f.mu.RUnlock()
		if h != nil {
			h(l.Index, reason)
		}
		<-f.release
		return &Result{Err: ErrHalted}
	}
	f.mu.Lock()
	res, ev := f.applyLocked(cmd, l.Index)
	// Under the lock, so Consistent reads an index that matches the state.
	f.applied.Store(l.Index)
	obs := f.observer
	f.mu.Unlock()
	if obs != nil && !ev.empty() {
		ev.Index = l.Index
		obs(ev)
	}
	return res
}

// unknownIn returns the command of an entry whose operation this version
// does not know and may not skip: the entry itself, or a command of its
// batch. Nil if there is none.
func unknownIn(cmd *pactv1.Command) *pactv1.Command {
	if cmd.GetOp() == nil {
		if cmd.GetIgnorable() {
			return nil
		}
		return cmd
	}
	for _, sub := range cmd.GetBatch().GetCommands() {
		if sub.GetOp() == nil && !sub.GetIgnorable() {
			return sub
		}
	}
	return nil
}

// applyLocked applies one entry: a command, or each command of a batch in
// order. A batch's commands are applied exactly as if each had an entry of
// its own at this index (same rules, results and audit entries), so a
// refusal refuses that command alone, and a later command of the batch
// sees what the earlier ones changed.
func (f *FSM) applyLocked(cmd *pactv1.Command, index uint64) (*Result, Event) {
	b, ok := cmd.GetOp().(*pactv1.Command_Batch)
	if !ok {
		return f.applyOne(cmd, index)
	}
	out := &Result{Batch: make([]*Result, len(b.Batch.GetCommands()))}
	var ev Event
	for i, sub := range b.Batch.GetCommands() {
		// The journal a batch came through is the envelope's (set by the
		// leader), whatever a command inside says.
		sub.Via = cmd.GetVia()
		res, sev := f.applyOne(sub, index)
		out.Batch[i] = res
		ev.NodeIDs = append(ev.NodeIDs, sev.NodeIDs...)
		ev.BundleChanged = ev.BundleChanged || sev.BundleChanged
		ev.Audit = append(ev.Audit, sev.Audit...)
		ev.QuorumChanged = ev.QuorumChanged || sev.QuorumChanged
		ev.FederationChanged = ev.FederationChanged || sev.FederationChanged
	}
	return out, ev
}

// applyOne is the one switch over every command.
func (f *FSM) applyOne(cmd *pactv1.Command, index uint64) (*Result, Event) {
	a := &applier{s: f.st, cmd: cmd, index: index}
	var res *Result
	switch op := cmd.GetOp().(type) {
	case nil:
		// An ignorable command of a newer version inside a batch
		// (unknownIn let it through): skipped, as its own entry would be.
		res = &Result{}
	case *pactv1.Command_Batch:
		res = fail(fmt.Errorf("%w: a batch inside a batch", ErrInvalidCommand))
	case *pactv1.Command_RegisterNode:
		res = a.registerNode(op.RegisterNode)
	case *pactv1.Command_Activate:
		res = a.activate(op.Activate)
	case *pactv1.Command_Renew:
		res = a.renew(op.Renew)
	case *pactv1.Command_PublishIntermediate:
		res = a.publishIntermediate(op.PublishIntermediate)
	case *pactv1.Command_Decommission:
		res = a.decommission(op.Decommission)
	case *pactv1.Command_Assign:
		res = a.assign(op.Assign)
	case *pactv1.Command_LivenessDigest:
		res = a.livenessDigest(op.LivenessDigest)
	case *pactv1.Command_MarkInactive:
		res = a.markInactive(op.MarkInactive)
	case *pactv1.Command_SvidSeen:
		res = a.svidSeen(op.SvidSeen)
	case *pactv1.Command_CreateJoinToken:
		res = a.createJoinToken(op.CreateJoinToken)
	case *pactv1.Command_RevokeJoinTokens:
		res = a.revokeJoinTokens(op.RevokeJoinTokens)
	case *pactv1.Command_Fence:
		res = a.fence(op.Fence)
	case *pactv1.Command_RecordOperator:
		res = a.recordOperator(op.RecordOperator)
	case *pactv1.Command_RevokeOperator:
		res = a.revokeOperator(op.RevokeOperator)
	case *pactv1.Command_RetireIntermediate:
		res = a.retireIntermediate(op.RetireIntermediate)
	case *pactv1.Command_RevokeJournalCa:
		res = a.revokeJournalCA(op.RevokeJournalCa)
	case *pactv1.Command_RecordJournalCa:
		res = a.recordJournalCAOp(op.RecordJournalCa)
	case *pactv1.Command_Release:
		res = a.release(op.Release)
	case *pactv1.Command_UpdateNode:
		res = a.updateNode(op.UpdateNode)
	case *pactv1.Command_StandbyIssued:
		res = a.standbyIssued(op.StandbyIssued)
	case *pactv1.Command_StandbyActivated:
		res = a.standbyActivated(op.StandbyActivated)
	case *pactv1.Command_SetQuorumId:
		res = a.setQuorumID(op.SetQuorumId)
	case *pactv1.Command_SetQuorumLevel:
		res = a.setQuorumLevel(op.SetQuorumLevel)
	case *pactv1.Command_FederateDomain:
		res = a.federateDomain(op.FederateDomain)
	case *pactv1.Command_RemoveFederatedDomain:
		res = a.removeFederatedDomain(op.RemoveFederatedDomain)
	case *pactv1.Command_UpdateFederatedBundle:
		res = a.updateFederatedBundle(op.UpdateFederatedBundle)
	case *pactv1.Command_SetBootPolicy:
		res = a.setBootPolicy(op.SetBootPolicy)
	case *pactv1.Command_RemoveBootPolicy:
		res = a.removeBootPolicy(op.RemoveBootPolicy)
	default:
		panic(fmt.Sprintf("raftfsm: unknown command %T", op))
	}
	return res, a.ev
}

// applier carries one command through Apply and collects its Event.
type applier struct {
	s     *state
	cmd   *pactv1.Command
	index uint64
	ev    Event
}

func (a *applier) at() int64 { return a.cmd.GetAtUnixNano() }

func (a *applier) changed(nodeID string) { a.ev.NodeIDs = append(a.ev.NodeIDs, nodeID) }

// record appends an audit entry stamped with the command's own time,
// actor, source and correlation id.
func (a *applier) record(action, nodeID, serial, detail string) {
	e := &pactv1.AuditEntry{
		Index:         a.index,
		AtUnixNano:    a.at(),
		Actor:         a.cmd.GetActor(),
		Source:        a.cmd.GetSource(),
		Action:        action,
		NodeId:        nodeID,
		Serial:        serial,
		CorrelationId: a.cmd.GetCorrelationId(),
		Detail:        detail,
		Via:           a.cmd.GetVia(),
	}
	a.s.audit.add(e)
	a.ev.Audit = append(a.ev.Audit, e)
}

func fail(err error) *Result { return &Result{Err: err} }

func identityOf(h *pactv1.HardwareIdentity) hwid.Identity {
	return hwid.Identity{MACs: h.GetMacs(), BMCSerial: h.GetBmcSerial(), EKHash: h.GetTpmEkHash()}
}

// normalized reports whether h is exactly its own normal form, so the FSM
// never indexes a value a proposer forgot to normalise.
func normalized(h *pactv1.HardwareIdentity) error {
	id, err := hwid.Normalize(h.GetMacs(), h.GetBmcSerial(), h.GetTpmEkHash())
	if err != nil {
		return err
	}
	if len(id.MACs) != len(h.GetMacs()) || id.BMCSerial != h.GetBmcSerial() || id.EKHash != h.GetTpmEkHash() {
		return errors.New("hardware identity is not in normal form")
	}
	for i := range id.MACs {
		if id.MACs[i] != h.GetMacs()[i] {
			return errors.New("hardware identity is not in normal form")
		}
	}
	return nil
}

func (a *applier) registerNode(op *pactv1.RegisterNodeOp) *Result {
	s := a.s
	if err := pki.ValidateName("node id", op.GetNodeId()); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrInvalidCommand, err))
	}
	if v := op.GetVcluster(); v != "" {
		if err := pki.ValidateName("vcluster", v); err != nil {
			return fail(fmt.Errorf("%w: %w", ErrInvalidCommand, err))
		}
	}
	if err := normalized(op.GetHardware()); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrInvalidCommand, err))
	}
	if old, ok := s.nodes[op.GetNodeId()]; ok && old.GetState() != pactv1.NodeState_NODE_STATE_REVOKED {
		return &Result{Node: old, Err: fmt.Errorf("%w: %s is %s", ErrNodeAlreadyEnrolled, op.GetNodeId(), StateName(old.GetState()))}
	}
	if sid := op.GetSpiffeId(); sid != "" {
		if err := ValidateSPIFFEID(op.GetNodeId(), sid); err != nil {
			return fail(fmt.Errorf("%w: %w", ErrInvalidCommand, err))
		}
	}
	if owner, what := s.owner(identityOf(op.GetHardware())); owner != "" && owner != op.GetNodeId() {
		return fail(fmt.Errorf("%w: %s is registered to node %s", ErrHardwareIdentityConflict, what, owner))
	}
	if owner, ok := s.bySPIFFE[op.GetSpiffeId()]; ok && owner != op.GetNodeId() {
		return fail(fmt.Errorf("%w: SPIFFE ID %s is registered to node %s", ErrHardwareIdentityConflict, op.GetSpiffeId(), owner))
	}
	n := &pactv1.Node{
		NodeId:               op.GetNodeId(),
		Hardware:             proto.Clone(op.GetHardware()).(*pactv1.HardwareIdentity),
		State:                pactv1.NodeState_NODE_STATE_REGISTERED,
		Vcluster:             op.GetVcluster(),
		RegisteredAtUnixNano: a.at(),
		RegisteredBy:         a.cmd.GetActor(),
		UpdatedAtUnixNano:    a.at(),
		SpiffeId:             op.GetSpiffeId(),
	}
	if c := op.GetCredentials(); c != nil && !proto.Equal(c, &pactv1.CredentialPolicy{}) {
		n.Credentials = proto.Clone(c).(*pactv1.CredentialPolicy)
	}
	delete(s.lastSeen, n.GetNodeId())
	s.put(n)
	a.changed(n.GetNodeId())
	detail := "macs " + strings.Join(n.GetHardware().GetMacs(), ",")
	if sid := n.GetSpiffeId(); sid != "" {
		detail += "; spiffe_id " + sid
	}
	if RequiresJoinToken(n) {
		detail += "; requires join token"
	}
	a.record("register", n.GetNodeId(), "", detail)
	return &Result{Node: n}
}

// owner returns the first node (and which identifier) that already holds any
// identifier of id.
func (s *state) owner(id hwid.Identity) (node, what string) {
	for _, m := range id.MACs {
		if o, ok := s.byMAC[m]; ok {
			return o, "MAC " + m
		}
	}
	if id.BMCSerial != "" {
		if o, ok := s.byBMC[id.BMCSerial]; ok {
			return o, "BMC serial " + id.BMCSerial
		}
	}
	if id.EKHash != "" {
		if o, ok := s.byEK[id.EKHash]; ok {
			return o, "TPM EK hash"
		}
	}
	return "", ""
}

// nodeSet is a set of node ids.
type nodeSet map[string]struct{}

func addHolder(idx map[string]nodeSet, key, id string) {
	if idx[key] == nil {
		idx[key] = nodeSet{}
	}
	idx[key][id] = struct{}{}
}

// holders indexes keys to the set of nodes holding each, like a
// map[string]nodeSet. Nearly every key has one holder, kept as a plain
// string; only a key held by several gets a set, so indexing a registry
// (a restore) costs no map per key.
type holders struct {
	one  map[string]string
	many map[string]nodeSet
}

func newHolders(n int) holders {
	return holders{one: make(map[string]string, n), many: map[string]nodeSet{}}
}

func (h holders) add(key, id string) {
	if set, ok := h.many[key]; ok {
		set[id] = struct{}{}
		return
	}
	if o, ok := h.one[key]; ok && o != id {
		h.many[key] = nodeSet{o: {}, id: {}}
		delete(h.one, key)
		return
	}
	h.one[key] = id
}

func (h holders) remove(key, id string) {
	if set, ok := h.many[key]; ok {
		delete(set, id)
		if len(set) == 1 {
			for o := range set {
				h.one[key] = o
			}
			delete(h.many, key)
		}
		return
	}
	if h.one[key] == id {
		delete(h.one, key)
	}
}

// each calls fn for every holder of key, in no particular order.
func (h holders) each(key string, fn func(id string)) {
	if o, ok := h.one[key]; ok {
		fn(o)
		return
	}
	for id := range h.many[key] {
		fn(id)
	}
}

func removeHolder(idx map[string]nodeSet, key, id string) {
	delete(idx[key], id)
	if len(idx[key]) == 0 {
		delete(idx, key)
	}
}

// put stores n and indexes its hardware, replacing any previous record.
// Revoked records keep their history but release their identifiers to the
// revoked indexes, where only a lookup that finds no live node sees them.
func (s *state) put(n *pactv1.Node) {
	if old, ok := s.nodes[n.GetNodeId()]; ok {
		s.unindex(old)
	}
	s.putNew(n)
}

// putNew is put for a node not in s yet.
func (s *state) putNew(n *pactv1.Node) {
	id := n.GetNodeId()
	s.nodes[id] = n
	h := n.GetHardware()
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		for _, m := range h.GetMacs() {
			addHolder(s.revokedByMAC, m, id)
		}
		if b := h.GetBmcSerial(); b != "" {
			addHolder(s.revokedByBMC, b, id)
		}
		if e := h.GetTpmEkHash(); e != "" {
			addHolder(s.revokedByEK, e, id)
		}
		if sid := n.GetSpiffeId(); sid != "" {
			addHolder(s.revokedBySPIFFE, sid, id)
		}
		return
	}
	if k := n.GetCert().GetSpkiSha256(); k != "" {
		s.bySPKI.add(k, id)
	}
	if k := n.GetStandbyCert().GetSpkiSha256(); k != "" {
		s.bySPKI.add(k, id)
	}
	if sid := n.GetSpiffeId(); sid != "" {
		s.bySPIFFE[sid] = id
	}
	for _, m := range h.GetMacs() {
		s.byMAC[m] = id
	}
	if b := h.GetBmcSerial(); b != "" {
		s.byBMC[b] = id
	}
	if e := h.GetTpmEkHash(); e != "" {
		s.byEK[e] = id
	}
}

func (s *state) unindex(n *pactv1.Node) {
	id := n.GetNodeId()
	h := n.GetHardware()
	if k := n.GetCert().GetSpkiSha256(); k != "" {
		s.bySPKI.remove(k, id)
	}
	if k := n.GetStandbyCert().GetSpkiSha256(); k != "" {
		s.bySPKI.remove(k, id)
	}
	for _, m := range h.GetMacs() {
		if s.byMAC[m] == id {
			delete(s.byMAC, m)
		}
		removeHolder(s.revokedByMAC, m, id)
	}
	if b := h.GetBmcSerial(); b != "" {
		if s.byBMC[b] == id {
			delete(s.byBMC, b)
		}
		removeHolder(s.revokedByBMC, b, id)
	}
	if e := h.GetTpmEkHash(); e != "" {
		if s.byEK[e] == id {
			delete(s.byEK, e)
		}
		removeHolder(s.revokedByEK, e, id)
	}
	if sid := n.GetSpiffeId(); sid != "" {
		if s.bySPIFFE[sid] == id {
			delete(s.bySPIFFE, sid)
		}
		removeHolder(s.revokedBySPIFFE, sid, id)
	}
}

// Resolution is the outcome of matching a reported hardware identity.
type Resolution struct {
	Node     *pactv1.Node
	Mismatch hwid.Mismatch // why it failed, for the journal's own log
	Err      error
}

// revokedOwner returns the revoked node that held a reported identifier:
// of several, the one decommissioned last (then the least node id), a
// choice made from the records alone so every replica makes it.
func (s *state) revokedOwner(rep hwid.Identity) string {
	var best *pactv1.Node
	consider := func(set nodeSet) { best = laterRevoked(best, s.latestRevoked(set)) }
	for _, m := range rep.MACs {
		consider(s.revokedByMAC[m])
	}
	if rep.BMCSerial != "" {
		consider(s.revokedByBMC[rep.BMCSerial])
	}
	if rep.EKHash != "" {
		consider(s.revokedByEK[rep.EKHash])
	}
	return best.GetNodeId()
}

// resolve finds the one node a reported identity belongs to (docs/registry.md).
func (s *state) resolve(rep hwid.Identity) Resolution {
	var candidate string
	many := false
	consider := func(id string) {
		switch {
		case candidate == "":
			candidate = id
		case candidate != id:
			many = true
		}
	}
	for _, m := range rep.MACs {
		if o, ok := s.byMAC[m]; ok {
			consider(o)
		}
	}
	if rep.BMCSerial != "" {
		if o, ok := s.byBMC[rep.BMCSerial]; ok {
			consider(o)
		}
	}
	if rep.EKHash != "" {
		if o, ok := s.byEK[rep.EKHash]; ok {
			consider(o)
		}
	}
	if candidate == "" {
		if id := s.revokedOwner(rep); id != "" {
			return Resolution{Node: s.nodes[id], Err: fmt.Errorf("%w: node %s was decommissioned; an operator must register it again", ErrNodeRevoked, id)}
		}
		return Resolution{Mismatch: hwid.MismatchNoCandidate, Err: fmt.Errorf("%w: no registered node matches this hardware identity", ErrNodeNotEnrolled)}
	}
	if many {
		return Resolution{Mismatch: hwid.MismatchForeignMAC, Err: fmt.Errorf("%w: the reported identifiers belong to more than one registered node", ErrHardwareIdentityConflict)}
	}
	n := s.nodes[candidate]
	if m := hwid.Match(identityOf(n.GetHardware()), rep); m != hwid.MatchOK {
		return Resolution{Node: n, Mismatch: m, Err: fmt.Errorf("%w: no registered node matches this hardware identity", ErrNodeNotEnrolled)}
	}
	return Resolution{Node: n}
}

func (a *applier) activate(op *pactv1.ActivateOp) *Result {
	s := a.s
	if op.GetCert().GetSerial() == "" || op.GetCert().GetSpkiSha256() == "" || len(op.GetCert().GetDer()) == 0 {
		return fail(fmt.Errorf("%w: activation without a certificate", ErrInvalidCommand))
	}
	if err := normalized(op.GetReported()); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrInvalidCommand, err))
	}
	r := s.resolve(identityOf(op.GetReported()))
	if r.Err != nil {
		return fail(r.Err)
	}
	n := r.Node
	if n.GetNodeId() != op.GetNodeId() {
		// The proposer resolved against an older registry; refuse rather
		// than activate a node nobody signed for.
		return fail(fmt.Errorf("%w: hardware now resolves to another node", ErrHardwareIdentityConflict))
	}
	if n.GetFence() != nil {
		return fail(fenced(n))
	}
	action, detail := "enroll", ""
	if n.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && n.GetCert().GetSpkiSha256() == op.GetCert().GetSpkiSha256() {
		return &Result{Node: n, Idempotent: true}
	}
	if owner := s.keyOwner(op.GetCert().GetSpkiSha256(), n.GetNodeId()); owner != "" {
		return fail(fmt.Errorf("%w: the CSR's public key is the current key of another node", ErrKeyInUse))
	}
	consume, note, err := a.checkCredentials(n, op.GetCredentials())
	if err != nil {
		return fail(err)
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE {
		if Released(n) {
			// Its agent stopped on purpose with the current certificate:
			// the restart enrolls at once.
			action, detail = "enroll", "after release of serial "+n.GetCert().GetSerial()
		} else if why := s.certWithdrawn(n.GetCert(), a.at()); why != "" && a.atLeast(2) {
			// The registry's own records already refuse its certificate
			// everywhere: no agent can be holding the node with it, so
			// there is no stream to protect and no window to wait for.
			action, detail = "takeover", "replaces serial "+n.GetCert().GetSerial()+": "+why
		} else {
			cutoff := op.GetTakeoverCutoffUnixNano()
			if cutoff == 0 || cutoff > a.at() || s.lastSeen[n.GetNodeId()] >= cutoff {
				return fail(fmt.Errorf("%w: %s already holds a certificate for another key", ErrAlreadyActive, n.GetNodeId()))
			}
			// No journal has seen the node's stream since the cutoff: it
			// rebooted and lost its key. Its old certificate stops binding.
			action, detail = "takeover", "replaces serial "+n.GetCert().GetSerial()
		}
	}
	consume()
	if note != "" {
		detail = strings.TrimPrefix(detail+"; "+note, "; ")
	}
	// The federated domains' claims the journal decided on (federation's
	// level: a journal below it has no field to keep them in).
	claims := ""
	if a.atLeast(federationLevel) {
		claims = truncate(op.GetClaimsChecked(), maxClaimsChecked)
	}
	if claims != "" {
		detail = strings.TrimPrefix(detail+"; claims "+claims, "; ")
	}
	next := proto.Clone(n).(*pactv1.Node)
	next.State = pactv1.NodeState_NODE_STATE_ACTIVE
	next.Cert = proto.Clone(op.GetCert()).(*pactv1.CertificateInfo)
	next.ClaimsChecked = claims
	next.ReleasedSerial = ""
	next.StandbyCert = nil // a new key from the hardware path: the old standby stops binding
	next.ActivatedAtUnixNano = a.at()
	next.UpdatedAtUnixNano = a.at()
	s.put(next)
	s.lastSeen[next.GetNodeId()] = a.at()
	a.changed(next.GetNodeId())
	a.record(action, next.GetNodeId(), next.GetCert().GetSerial(), detail)
	return &Result{Node: next}
}

// certWithdrawn says why the registry's own records make certificate c
// unusable at now (Unix nanoseconds), or "" if they do not: its serial is
// in the revocation set, the intermediate that signed it is revoked (at
// once, or retired past its revoke time, or its serial in the revocation
// set), or the journal CA that signed that intermediate is revoked. Such a
// certificate authenticates nowhere, so the node's hardware may enroll
// with a new key at once, as after a release: the takeover window guards
// an agent that may still hold the node, and none can. Only records count:
// an issuer the registry does not hold (pruned, or another layout) proves
// nothing. It reads nothing but the state and now, so Apply, passing the
// command's time, decides the same on every replica.
func (s *state) certWithdrawn(c *pactv1.CertificateInfo, now int64) string {
	if c.GetSerial() == "" {
		return ""
	}
	if _, ok := s.revoked[c.GetSerial()]; ok {
		return "that serial is revoked"
	}
	in, ok := s.intermediates[c.GetIssuerSerial()]
	if !ok {
		return ""
	}
	if jc, ok := s.journalCAs[in.GetIssuerSerial()]; ok && jc.GetRevokedAtUnixNano() != 0 && jc.GetRevokedAtUnixNano() <= now {
		return "its issuer " + in.GetSerial() + " was revoked with journal " + jc.GetJournalId() + "'s journal CA " + jc.GetSerial()
	}
	if _, ok := s.revoked[in.GetSerial()]; ok || IntermediateRevoked(in, now) {
		return "its issuer " + in.GetSerial() + " (journal " + in.GetJournalId() + "'s intermediate) was revoked"
	}
	return ""
}

// CertWithdrawn says why the registry's records make c unusable at
// atUnixNano, or "" (certWithdrawn): a journal asks before it refuses a
// new key for an Active node, with the time it will propose.
func (f *FSM) CertWithdrawn(c *pactv1.CertificateInfo, atUnixNano int64) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.certWithdrawn(c, atUnixNano)
}

func (a *applier) renew(op *pactv1.RenewOp) *Result {
	s := a.s
	n, ok := s.nodes[op.GetNodeId()]
	if !ok {
		return fail(fmt.Errorf("%w: %s", ErrNodeNotEnrolled, op.GetNodeId()))
	}
	if op.GetCert().GetSerial() == "" || op.GetCert().GetSpkiSha256() == "" || len(op.GetCert().GetDer()) == 0 {
		return fail(fmt.Errorf("%w: renewal without a certificate", ErrInvalidCommand))
	}
	switch n.GetState() {
	case pactv1.NodeState_NODE_STATE_REVOKED:
		return fail(fmt.Errorf("%w: %s", ErrNodeRevoked, n.GetNodeId()))
	case pactv1.NodeState_NODE_STATE_REGISTERED:
		return fail(fmt.Errorf("%w: %s has never enrolled", ErrStaleCertificate, n.GetNodeId()))
	}
	if n.GetFence() != nil {
		return fail(fenced(n))
	}
	if n.GetCert().GetSpkiSha256() == op.GetCert().GetSpkiSha256() {
		return &Result{Node: n, Idempotent: true}
	}
	if owner := s.keyOwner(op.GetCert().GetSpkiSha256(), n.GetNodeId()); owner != "" {
		return fail(fmt.Errorf("%w: the CSR's public key is the current key of another node", ErrKeyInUse))
	}
	if _, revoked := s.revoked[op.GetPreviousSerial()]; revoked || n.GetCert().GetSerial() != op.GetPreviousSerial() {
		return fail(fmt.Errorf("%w: serial %s", ErrStaleCertificate, op.GetPreviousSerial()))
	}
	next := proto.Clone(n).(*pactv1.Node)
	next.State = pactv1.NodeState_NODE_STATE_ACTIVE
	next.Cert = proto.Clone(op.GetCert()).(*pactv1.CertificateInfo)
	next.StandbyCert = nil
	next.UpdatedAtUnixNano = a.at()
	s.put(next)
	s.lastSeen[next.GetNodeId()] = a.at()
	a.changed(next.GetNodeId())
	a.record("renew", next.GetNodeId(), next.GetCert().GetSerial(), "replaces serial "+op.GetPreviousSerial())
	return &Result{Node: next}
}

func (a *applier) publishIntermediate(op *pactv1.PublishIntermediateOp) *Result {
	in := op.GetIntermediate()
	if in.GetSerial() == "" || len(in.GetDer()) == 0 || in.GetJournalId() == "" {
		return fail(fmt.Errorf("%w: intermediate without serial, certificate or journal", ErrInvalidCommand))
	}
	if old, ok := a.s.intermediates[in.GetSerial()]; ok && (old.GetIssuerSerial() != in.GetIssuerSerial() || old.GetJournalId() != in.GetJournalId()) {
		// A retry publishes the same intermediate: its issuer and journal
		// are its own for good.
		return fail(fmt.Errorf("%w: intermediate %s is recorded with another issuer or journal", ErrInvalidCommand, in.GetSerial()))
	}
	if err := a.recordJournalCA(in, op.GetJournalCa()); err != nil {
		return fail(err)
	}
	next := proto.Clone(in).(*pactv1.Intermediate)
	if old, ok := a.s.intermediates[in.GetSerial()]; ok {
		// Publishing again (a retry) never undoes a retirement.
		next.RetiredAtUnixNano, next.RevokeAtUnixNano = old.GetRetiredAtUnixNano(), old.GetRevokeAtUnixNano()
		next.RetiredBy, next.RetireReason = old.GetRetiredBy(), old.GetRetireReason()
	} else if next.GetRevokeAtUnixNano() != 0 || next.GetRetiredAtUnixNano() != 0 || next.GetRetiredBy() != "" {
		return fail(fmt.Errorf("%w: a journal cannot publish a retired intermediate", ErrInvalidCommand))
	}
	a.s.intermediates[in.GetSerial()] = next
	if ji := op.GetJournal(); ji.GetJournalId() != "" {
		a.s.journals[ji.GetJournalId()] = proto.Clone(ji).(*pactv1.JournalInfo)
	}
	a.s.prune(a.at() / 1e9)
	a.s.pruneJoinTokens(a.at())
	a.ev.BundleChanged = true
	return &Result{}
}

// prune drops intermediates and revoked serials past their expiry. It runs
// at the command's own timestamp, so every replica prunes the same entries.
func (s *state) prune(nowUnix int64) {
	for k, in := range s.intermediates {
		if in.GetNotAfterUnix() < nowUnix {
			delete(s.intermediates, k)
		}
	}
	for k, na := range s.revoked {
		if na < nowUnix {
			delete(s.revoked, k)
		}
	}
	s.pruneJournalCAs(nowUnix)
}

// Snapshot captures the state. Because records are copy-on-write, copying
// the maps is enough; marshalling happens outside the lock in Persist.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if r := f.Halted(); r != "" {
		// The state lacks an entry Raft counts as applied.
		return nil, fmt.Errorf("%w: %s", ErrHalted, r)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.snapshotLocked(), nil
}

func (f *FSM) snapshotLocked() *fsmSnapshot {
	snap := &pactv1.Snapshot{
		Nodes:         make([]*pactv1.Node, 0, len(f.st.nodes)),
		Revoked:       make([]*pactv1.RevokedSerial, 0, len(f.st.revoked)),
		Intermediates: make([]*pactv1.Intermediate, 0, len(f.st.intermediates)),
		LastSeen:      make([]*pactv1.LastSeen, 0, len(f.st.lastSeen)),
		Audit:         f.st.audit.entries(),
		Journals:      make([]*pactv1.JournalInfo, 0, len(f.st.journals)),
		JoinTokens:    make([]*pactv1.JoinToken, 0, len(f.st.joinTokens)),
		Quorum:        f.st.quorum,
		QuorumLevel:   f.st.quorumLevel,
		JournalCas:    make([]*pactv1.JournalCA, 0, len(f.st.journalCAs)),
	}
	for _, jc := range f.st.journalCAs {
		snap.JournalCas = append(snap.JournalCas, jc)
	}
	for _, fd := range f.st.federated {
		snap.FederatedDomains = append(snap.FederatedDomains, fd)
	}
	for _, bp := range f.st.bootPolicies {
		snap.BootPolicies = append(snap.BootPolicies, bp)
	}
	for _, t := range f.st.joinTokens {
		snap.JoinTokens = append(snap.JoinTokens, t)
	}
	for _, o := range f.st.operators {
		snap.Operators = append(snap.Operators, o)
	}
	for _, n := range f.st.revokedNames {
		snap.RevokedOperatorNames = append(snap.RevokedOperatorNames, n)
	}
	for _, ji := range f.st.journals {
		snap.Journals = append(snap.Journals, ji)
	}
	for id, at := range f.st.lastSeen {
		snap.LastSeen = append(snap.LastSeen, &pactv1.LastSeen{NodeId: id, AtUnixNano: at})
	}
	for _, n := range f.st.nodes {
		snap.Nodes = append(snap.Nodes, n)
	}
	for s, na := range f.st.revoked {
		snap.Revoked = append(snap.Revoked, &pactv1.RevokedSerial{Serial: s, NotAfterUnix: na})
	}
	for _, in := range f.st.intermediates {
		snap.Intermediates = append(snap.Intermediates, in)
	}
	return &fsmSnapshot{snap: snap}
}

type fsmSnapshot struct{ snap *pactv1.Snapshot }

// Persist streams the state in format 2 (internal/snapfile), one record at a
// time, without building its whole encoding first.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	sortSnapshot(s.snap)
	if err := snapfile.WriteState(sink, s.snap); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("raftfsm: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

func sortSnapshot(s *pactv1.Snapshot) {
	sort.Slice(s.Nodes, func(i, j int) bool { return s.Nodes[i].GetNodeId() < s.Nodes[j].GetNodeId() })
	sort.Slice(s.Revoked, func(i, j int) bool { return s.Revoked[i].GetSerial() < s.Revoked[j].GetSerial() })
	sort.Slice(s.Intermediates, func(i, j int) bool { return s.Intermediates[i].GetSerial() < s.Intermediates[j].GetSerial() })
	sort.Slice(s.LastSeen, func(i, j int) bool { return s.LastSeen[i].GetNodeId() < s.LastSeen[j].GetNodeId() })
	sort.Slice(s.Journals, func(i, j int) bool { return s.Journals[i].GetJournalId() < s.Journals[j].GetJournalId() })
	sort.Slice(s.JoinTokens, func(i, j int) bool { return s.JoinTokens[i].GetSha256() < s.JoinTokens[j].GetSha256() })
	sort.Slice(s.Operators, func(i, j int) bool { return s.Operators[i].GetSerial() < s.Operators[j].GetSerial() })
	sort.Slice(s.RevokedOperatorNames, func(i, j int) bool {
		return s.RevokedOperatorNames[i].GetName() < s.RevokedOperatorNames[j].GetName()
	})
	sort.Slice(s.JournalCas, func(i, j int) bool { return s.JournalCas[i].GetSerial() < s.JournalCas[j].GetSerial() })
	sort.Slice(s.FederatedDomains, func(i, j int) bool { return s.FederatedDomains[i].GetName() < s.FederatedDomains[j].GetName() })
	sort.Slice(s.BootPolicies, func(i, j int) bool { return s.BootPolicies[i].GetVcluster() < s.BootPolicies[j].GetVcluster() })
}

// Restore replaces the state with a snapshot, in either format
// (internal/snapfile; snaprecords.go builds the registry). It builds the new state first and swaps it in whole, so
// a bad snapshot leaves the old state untouched.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := decodeState(rc, f.auditCap)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.st = st
	f.restores.Add(1)
	obs := f.observer
	f.mu.Unlock()
	if obs != nil {
		obs(Event{BundleChanged: true})
	}
	return nil
}
