package raftfsm

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// decommission revokes a node: its serial joins the revocation set until the
// certificate would have expired, and its hardware is released (a lookup
// answers NODE_REVOKED until it is registered again).
func (a *applier) decommission(op *pactv1.DecommissionOp) *Result {
	s := a.s
	n, ok := s.nodes[op.GetNodeId()]
	if !ok {
		return fail(fmt.Errorf("%w: no node %q in the registry", ErrNodeNotEnrolled, op.GetNodeId()))
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		return &Result{Node: n, Err: fmt.Errorf("%w: %s is already decommissioned", ErrNodeRevoked, n.GetNodeId())}
	}
	next := proto.Clone(n).(*pactv1.Node)
	next.State = pactv1.NodeState_NODE_STATE_REVOKED
	next.RevokedAtUnixNano = a.at()
	next.RevokedBy = a.cmd.GetActor()
	next.UpdatedAtUnixNano = a.at()
	if c := n.GetCert(); c.GetSerial() != "" {
		s.revoked[c.GetSerial()] = c.GetNotAfterUnix()
	}
	if c := n.GetStandbyCert(); c.GetSerial() != "" {
		s.revoked[c.GetSerial()] = c.GetNotAfterUnix()
	}
	s.put(next)
	delete(s.lastSeen, next.GetNodeId())
	a.changed(next.GetNodeId())
	a.record("decommission", next.GetNodeId(), n.GetCert().GetSerial(), "was "+StateName(n.GetState()))
	return &Result{Node: next}
}

// assign sets the vCluster, only if the node is still where the proposer
// saw it (and authorised the change).
func (a *applier) assign(op *pactv1.AssignOp) *Result {
	s := a.s
	if v := op.GetVcluster(); v != "" {
		if err := pki.ValidateName("vcluster", v); err != nil {
			return fail(fmt.Errorf("%w: %w", ErrInvalidCommand, err))
		}
	}
	n, ok := s.nodes[op.GetNodeId()]
	if !ok {
		return fail(fmt.Errorf("%w: no node %q in the registry", ErrNodeNotEnrolled, op.GetNodeId()))
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		return fail(fmt.Errorf("%w: %s was decommissioned", ErrNodeRevoked, n.GetNodeId()))
	}
	if n.GetVcluster() != op.GetExpectVcluster() {
		return &Result{Node: n, Err: fmt.Errorf("%w: %s is in %s, not %s", ErrVClusterChanged, n.GetNodeId(), vclusterName(n.GetVcluster()), vclusterName(op.GetExpectVcluster()))}
	}
	if n.GetVcluster() == op.GetVcluster() {
		return &Result{Node: n, Idempotent: true}
	}
	next := proto.Clone(n).(*pactv1.Node)
	next.Vcluster = op.GetVcluster()
	next.UpdatedAtUnixNano = a.at()
	s.put(next)
	a.changed(next.GetNodeId())
	action := "move"
	switch {
	case n.GetVcluster() == "":
		action = "assign"
	case op.GetVcluster() == "":
		action = "unassign"
	}
	a.record(action, next.GetNodeId(), "", vclusterName(n.GetVcluster())+" -> "+vclusterName(op.GetVcluster()))
	return &Result{Node: next}
}

func vclusterName(v string) string {
	if v == "" {
		return "maintenance"
	}
	return v
}

// livenessDigest records that a journal held these nodes' streams. An
// Inactive node that is streaming again becomes Active.
func (a *applier) livenessDigest(op *pactv1.LivenessDigestOp) *Result {
	s := a.s
	for _, id := range op.GetNodeIds() {
		n, ok := s.nodes[id]
		if !ok || n.GetFence() != nil {
			// A digest in flight when the fence applied may still name
			// the node: its stream is closing, it is not back.
			continue
		}
		switch n.GetState() {
		case pactv1.NodeState_NODE_STATE_ACTIVE:
			s.lastSeen[id] = max(s.lastSeen[id], a.at())
		case pactv1.NodeState_NODE_STATE_INACTIVE:
			s.lastSeen[id] = max(s.lastSeen[id], a.at())
			next := proto.Clone(n).(*pactv1.Node)
			next.State = pactv1.NodeState_NODE_STATE_ACTIVE
			next.UpdatedAtUnixNano = a.at()
			s.put(next)
			a.changed(id)
			a.record("active", id, n.GetCert().GetSerial(), "stream seen by journal "+op.GetJournalId())
		}
	}
	return &Result{}
}

// markInactive moves Active nodes whose last sighting is older than the
// cutoff to Inactive. The proposer picks the candidates; the FSM re-checks
// each against its own last_seen, so a late digest wins.
func (a *applier) markInactive(op *pactv1.MarkInactiveOp) *Result {
	s := a.s
	for _, id := range op.GetNodeIds() {
		n, ok := s.nodes[id]
		if !ok || n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || s.lastSeen[id] >= op.GetCutoffUnixNano() || op.GetCutoffUnixNano() > a.at() {
			continue
		}
		next := proto.Clone(n).(*pactv1.Node)
		next.State = pactv1.NodeState_NODE_STATE_INACTIVE
		next.UpdatedAtUnixNano = a.at()
		s.put(next)
		a.changed(id)
		a.record("inactive", id, n.GetCert().GetSerial(), "no stream seen by any journal")
	}
	return &Result{}
}

// auditRing keeps the newest entries; the capacity is the same on every
// replica, so what is kept is deterministic.
type auditRing struct {
	buf  []*pactv1.AuditEntry
	next int // where the next entry goes once full
	cap  int
}

func newAuditRing(n int) *auditRing { return &auditRing{cap: n} }

func (r *auditRing) add(e *pactv1.AuditEntry) {
	if len(r.buf) < r.cap {
		r.buf = append(r.buf, e)
		return
	}
	r.buf[r.next] = e
	r.next = (r.next + 1) % r.cap
}

// entries returns the entries oldest first.
func (r *auditRing) entries() []*pactv1.AuditEntry {
	out := make([]*pactv1.AuditEntry, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// Released reports whether n's agent released it (ReleaseOp) while holding
// its current certificate: its hardware may enroll with a new key at once.
func Released(n *pactv1.Node) bool {
	return n.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && n.GetReleasedSerial() != "" &&
		n.GetReleasedSerial() == n.GetCert().GetSerial()
}

// release records that an Active node's agent stopped on purpose with the
// certificate op.Serial. Anything else (another serial: renewed or taken
// over since; not Active) changes nothing, so a late or repeated release
// is harmless.
func (a *applier) release(op *pactv1.ReleaseOp) *Result {
	s := a.s
	n, ok := s.nodes[op.GetNodeId()]
	if !ok || n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || op.GetSerial() == "" ||
		n.GetCert().GetSerial() != op.GetSerial() || n.GetReleasedSerial() == op.GetSerial() {
		return &Result{Node: n, Idempotent: true}
	}
	next := proto.Clone(n).(*pactv1.Node)
	next.ReleasedSerial = op.GetSerial()
	next.UpdatedAtUnixNano = a.at()
	s.put(next)
	a.changed(next.GetNodeId())
	a.record("release", next.GetNodeId(), op.GetSerial(), "agent stopped cleanly; the node may enroll again at once")
	return &Result{Node: next}
}

// updateNode replaces a node's hardware identity (a NIC or BMC swap). The
// node keeps its state and certificate; its next enrollment is matched
// against the new identity. Identifiers held by another node are refused,
// as at registration; the same identity again changes nothing.
func (a *applier) updateNode(op *pactv1.UpdateNodeOp) *Result {
	s := a.s
	n, ok := s.nodes[op.GetNodeId()]
	if !ok {
		return fail(fmt.Errorf("%w: %s", ErrNodeNotEnrolled, op.GetNodeId()))
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		return fail(fmt.Errorf("%w: %s was decommissioned; register it anew", ErrNodeRevoked, op.GetNodeId()))
	}
	if err := normalized(op.GetHardware()); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrInvalidCommand, err))
	}
	if proto.Equal(n.GetHardware(), op.GetHardware()) {
		return &Result{Node: n, Idempotent: true}
	}
	id := identityOf(op.GetHardware())
	for _, m := range id.MACs {
		if o, ok := s.byMAC[m]; ok && o != n.GetNodeId() {
			return fail(fmt.Errorf("%w: MAC %s is registered to node %s", ErrHardwareIdentityConflict, m, o))
		}
	}
	if b := id.BMCSerial; b != "" {
		if o, ok := s.byBMC[b]; ok && o != n.GetNodeId() {
			return fail(fmt.Errorf("%w: BMC serial %s is registered to node %s", ErrHardwareIdentityConflict, b, o))
		}
	}
	if e := id.EKHash; e != "" {
		if o, ok := s.byEK[e]; ok && o != n.GetNodeId() {
			return fail(fmt.Errorf("%w: TPM EK hash is registered to node %s", ErrHardwareIdentityConflict, o))
		}
	}
	next := proto.Clone(n).(*pactv1.Node)
	next.Hardware = proto.Clone(op.GetHardware()).(*pactv1.HardwareIdentity)
	next.UpdatedAtUnixNano = a.at()
	s.put(next)
	a.changed(next.GetNodeId())
	a.record("update", next.GetNodeId(), "", hardwareChange(n.GetHardware(), next.GetHardware()))
	return &Result{Node: next}
}

// hardwareChange is the audit detail of an update: what changed, old -> new.
func hardwareChange(before, after *pactv1.HardwareIdentity) string {
	var parts []string
	if a, b := strings.Join(before.GetMacs(), ","), strings.Join(after.GetMacs(), ","); a != b {
		parts = append(parts, "macs "+a+" -> "+b)
	}
	if a, b := before.GetBmcSerial(), after.GetBmcSerial(); a != b {
		parts = append(parts, fmt.Sprintf("bmc serial %q -> %q", a, b))
	}
	if before.GetTpmEkHash() != after.GetTpmEkHash() {
		parts = append(parts, "tpm ek hash changed")
	}
	return strings.Join(parts, "; ")
}
