package raftfsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// A node whose current certificate is a SPIRE SVID keeps a journal-signed
// standby (Node.standby_cert) for a key its agent holds, so that when SPIRE
// stops serving it the agent can open a channel with the standby at once,
// without enrolling again: no hardware re-check, no takeover window. The
// standby authenticates like the current certificate (the journal's
// binding accepts either); the first stream opened with it makes it
// current (standbyActivated). Any other way of getting a journal
// certificate (Enroll, RenewCert) clears it, and a decommission revokes it
// with the current one.

// standbyIssued records the standby signed for a node on the strength of
// its SVID. The node must be Active on an SVID whose SPIFFE ID maps to it;
// the same key again is a retry (Idempotent), another key replaces the
// previous standby, which stops authenticating.
func (a *applier) standbyIssued(op *pactv1.StandbyIssuedOp) *Result {
	s := a.s
	c := op.GetCert()
	if c.GetSerial() == "" || c.GetSpkiSha256() == "" || len(c.GetDer()) == 0 || c.GetIssuerSerial() == "" || c.GetIssuerSerial() == SPIREIssuer {
		return fail(fmt.Errorf("%w: standby without a journal-signed certificate", ErrInvalidCommand))
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
	if _, revoked := s.revoked[c.GetSerial()]; revoked {
		return fail(fmt.Errorf("%w: serial %s was revoked", ErrNodeRevoked, c.GetSerial()))
	}
	if owner := s.keyOwner(c.GetSpkiSha256(), n.GetNodeId()); owner != "" {
		return fail(fmt.Errorf("%w: the CSR's public key is the current key of another node", ErrKeyInUse))
	}
	if m, ok := s.spiffeNode(op.GetSpiffeId()); !ok || m.GetNodeId() != n.GetNodeId() {
		return fail(fmt.Errorf("%w: SPIFFE ID %s does not map to node %s", ErrStaleCertificate, op.GetSpiffeId(), n.GetNodeId()))
	}
	if n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || n.GetCert().GetIssuerSerial() != SPIREIssuer {
		return fail(fmt.Errorf("%w: %s is not active on a SPIRE SVID; open the SVID stream before asking for a standby", ErrStaleCertificate, n.GetNodeId()))
	}
	if n.GetStandbyCert().GetSpkiSha256() == c.GetSpkiSha256() {
		return &Result{Node: n, Idempotent: true}
	}
	next := proto.Clone(n).(*pactv1.Node)
	next.StandbyCert = proto.Clone(c).(*pactv1.CertificateInfo)
	next.UpdatedAtUnixNano = a.at()
	s.put(next)
	a.changed(next.GetNodeId())
	detail := "journal standby for SPIRE SVID " + n.GetCert().GetSerial()
	if prev := n.GetStandbyCert().GetSerial(); prev != "" {
		detail += "; replaces standby " + prev
	}
	a.record("standby", next.GetNodeId(), c.GetSerial(), detail)
	return &Result{Node: next}
}

// standbyActivated makes the standby current: the agent opened a stream
// with it because SPIRE stopped serving the node.
func (a *applier) standbyActivated(op *pactv1.StandbyActivatedOp) *Result {
	s := a.s
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
	if op.GetSerial() != "" && n.GetCert().GetSerial() == op.GetSerial() {
		return &Result{Node: n, Idempotent: true}
	}
	sb := n.GetStandbyCert()
	if op.GetSerial() == "" || sb.GetSerial() != op.GetSerial() {
		return fail(fmt.Errorf("%w: serial %s is neither the current nor the standby certificate of %s", ErrStaleCertificate, op.GetSerial(), n.GetNodeId()))
	}
	if _, revoked := s.revoked[sb.GetSerial()]; revoked {
		return fail(fmt.Errorf("%w: serial %s was revoked", ErrNodeRevoked, sb.GetSerial()))
	}
	prev := n.GetCert().GetSerial()
	next := proto.Clone(n).(*pactv1.Node)
	next.State = pactv1.NodeState_NODE_STATE_ACTIVE
	next.Cert = next.StandbyCert
	next.StandbyCert = nil
	next.UpdatedAtUnixNano = a.at()
	s.put(next)
	s.lastSeen[next.GetNodeId()] = max(s.lastSeen[next.GetNodeId()], a.at())
	a.changed(next.GetNodeId())
	a.record("renew", next.GetNodeId(), sb.GetSerial(), "journal standby replaces "+describeCert(n.GetCert(), prev))
	return &Result{Node: next}
}

func describeCert(c *pactv1.CertificateInfo, serial string) string {
	if c.GetIssuerSerial() == SPIREIssuer {
		return "SPIRE SVID " + serial
	}
	if serial == "" {
		return "no certificate"
	}
	return "certificate " + serial
}
