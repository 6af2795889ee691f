package raftfsm

import (
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// SPIREIssuer is the issuer_serial recorded for a certificate that is a
// SPIRE X.509-SVID: the journal did not sign it, SPIRE did.
const SPIREIssuer = "spire"

// agentPathPrefix is the path of a node's default SPIFFE ID,
// spiffe://{trust-domain}/pact-agent/{node_id}.
const agentPathPrefix = "/" + pki.KindAgent + "/"

// maxSPIFFEIDLength is the longest SPIFFE ID a node may register (the
// SPIFFE standard's bound on the URI).
const maxSPIFFEIDLength = 2048

// ValidateSPIFFEID checks a SPIFFE ID registered for nodeID (its override):
// a well-formed spiffe:// URI in canonical form, naming a workload (a path,
// not only a trust domain), and not the default ID of another node, which
// would let one registration capture another node's SVIDs.
func ValidateSPIFFEID(nodeID, id string) error {
	if len(id) > maxSPIFFEIDLength {
		return fmt.Errorf("spiffe_id is %d bytes long (at most %d)", len(id), maxSPIFFEIDLength)
	}
	sid, err := spiffeid.FromString(id)
	if err != nil {
		return fmt.Errorf("spiffe_id %q is not a SPIFFE ID (spiffe://trust-domain/path): %w", id, err)
	}
	if sid.String() != id {
		return fmt.Errorf("spiffe_id %q is not in canonical form (%s)", id, sid)
	}
	if sid.Path() == "" {
		return fmt.Errorf("spiffe_id %q names a trust domain, not a workload: give a path", id)
	}
	if other, ok := strings.CutPrefix(sid.Path(), agentPathPrefix); ok && other != nodeID {
		return fmt.Errorf("spiffe_id %q is the default SPIFFE ID of node %s, not of %s", id, other, nodeID)
	}
	return nil
}

// spiffeNode returns the node a SPIFFE ID maps to:
//  1. the live node that registered it as its override;
//  2. else the revoked node that held it as its override (of several, the
//     one decommissioned last), so its SVIDs are answered NODE_REVOKED;
//  3. else the node whose default ID it is (path /pact-agent/{node_id}, in
//     any trust domain: the journal checks the trust domain), unless that
//     node registered an override, which replaces the default.
//
// The choice depends on the records alone, so every replica makes it.
func (s *state) spiffeNode(id string) (*pactv1.Node, bool) {
	if id == "" {
		return nil, false
	}
	if o, ok := s.bySPIFFE[id]; ok {
		return s.nodes[o], true
	}
	if best := s.latestRevoked(s.revokedBySPIFFE[id]); best != nil {
		return best, true
	}
	sid, err := spiffeid.FromString(id)
	if err != nil {
		return nil, false
	}
	nodeID, ok := strings.CutPrefix(sid.Path(), agentPathPrefix)
	if !ok || nodeID == "" || strings.Contains(nodeID, "/") {
		return nil, false
	}
	n, ok := s.nodes[nodeID]
	if !ok || (n.GetSpiffeId() != "" && n.GetSpiffeId() != id) {
		return nil, false
	}
	return n, true
}

// latestRevoked returns the node of set decommissioned last (then the
// least node id), or nil for an empty set.
func (s *state) latestRevoked(set nodeSet) *pactv1.Node {
	var best *pactv1.Node
	for id := range set {
		best = laterRevoked(best, s.nodes[id])
	}
	return best
}

// laterRevoked picks of two revoked nodes the one decommissioned last,
// then the least node id; either may be nil.
func laterRevoked(a, b *pactv1.Node) *pactv1.Node {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case b.GetRevokedAtUnixNano() > a.GetRevokedAtUnixNano(),
		b.GetRevokedAtUnixNano() == a.GetRevokedAtUnixNano() && b.GetNodeId() < a.GetNodeId():
		return b
	}
	return a
}

// NodeBySPIFFEID returns the node a SPIFFE ID maps to, with the rule
// SVIDSeen applies: a live override first, then a revoked node's override,
// then the default /pact-agent/{node_id} path of a node without an
// override. The caller checks the trust domain and the node's state.
func (f *FSM) NodeBySPIFFEID(id string) (*pactv1.Node, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.spiffeNode(id)
}

// svidSeen records that a node authenticated with a SPIRE X.509-SVID. The
// journal verified the SVID against the SPIRE trust bundle and mapped its
// SPIFFE ID; the FSM re-checks the mapping and the state:
//   - Registered or Inactive: the node becomes Active with the SVID as its
//     certificate (audit "enroll");
//   - Active with another serial: SPIRE rotated the SVID (or replaced a
//     journal-signed certificate); the record follows (audit "renew"),
//     unless the SVID expires before the one recorded (an older SVID still
//     in use during a rotation), which changes nothing;
//   - Active with the same serial: nothing to do (Idempotent).
//
// A journal certificate the SVID replaces becomes the node's standby.
func (a *applier) svidSeen(op *pactv1.SVIDSeenOp) *Result {
	s := a.s
	if op.GetSerial() == "" || op.GetSpiffeId() == "" || op.GetNotAfterUnix() == 0 {
		return fail(fmt.Errorf("%w: SVID sighting without a serial, SPIFFE ID or expiry", ErrInvalidCommand))
	}
	n, ok := s.nodes[op.GetNodeId()]
	if !ok {
		return fail(fmt.Errorf("%w: no node %q in the registry", ErrNodeNotEnrolled, op.GetNodeId()))
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		return fail(fmt.Errorf("%w: %s was decommissioned", ErrNodeRevoked, n.GetNodeId()))
	}
	if n.GetFence() != nil {
		return fail(fenced(n))
	}
	if _, revoked := s.revoked[op.GetSerial()]; revoked {
		return fail(fmt.Errorf("%w: SVID serial %s was revoked", ErrNodeRevoked, op.GetSerial()))
	}
	if m, ok := s.spiffeNode(op.GetSpiffeId()); !ok || m.GetNodeId() != n.GetNodeId() {
		return fail(fmt.Errorf("%w: SPIFFE ID %s does not map to node %s", ErrStaleCertificate, op.GetSpiffeId(), n.GetNodeId()))
	}
	cur := n.GetCert()
	action, detail := "enroll", "SPIRE SVID"
	if n.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE {
		switch {
		case cur.GetSerial() == op.GetSerial():
			return &Result{Node: n, Idempotent: true}
		case cur.GetIssuerSerial() == SPIREIssuer && op.GetNotAfterUnix() < cur.GetNotAfterUnix():
			// An SVID older than the one recorded: keep the newer.
			return &Result{Node: n, Idempotent: true}
		case cur.GetIssuerSerial() == SPIREIssuer:
			action, detail = "renew", "SPIRE rotation"
		default:
			action, detail = "renew", "SPIRE SVID replaces journal certificate "+cur.GetSerial()+" (kept as standby)"
		}
	}
	next := proto.Clone(n).(*pactv1.Node)
	if n.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && cur.GetIssuerSerial() != SPIREIssuer && cur.GetSerial() != "" {
		// The journal certificate the SVID replaces is the agent's own key:
		// it becomes the standby, so the agent can fall back to it at once
		// when SPIRE stops serving again.
		next.StandbyCert = proto.Clone(cur).(*pactv1.CertificateInfo)
	}
	next.State = pactv1.NodeState_NODE_STATE_ACTIVE
	next.Cert = &pactv1.CertificateInfo{
		Serial:       op.GetSerial(),
		NotAfterUnix: op.GetNotAfterUnix(),
		IssuerSerial: SPIREIssuer,
	}
	if action == "enroll" {
		next.ActivatedAtUnixNano = a.at()
	}
	next.UpdatedAtUnixNano = a.at()
	s.put(next)
	s.lastSeen[next.GetNodeId()] = max(s.lastSeen[next.GetNodeId()], a.at())
	a.changed(next.GetNodeId())
	a.record(action, next.GetNodeId(), op.GetSerial(), detail)
	return &Result{Node: next}
}
