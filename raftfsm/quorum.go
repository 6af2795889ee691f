package raftfsm

import (
	"fmt"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// MaxQuorumIDLen bounds a quorum id (journal/quorum.go mints 26 characters).
const MaxQuorumIDLen = 64

// setQuorumID records the quorum's identity. The journals decide when it
// changes (bootstrap, upgrade, recover, restore); Apply only keeps the
// newest and audits the change, so every replica holds the same one.
func (a *applier) setQuorumID(op *pactv1.SetQuorumIdOp) *Result {
	id := op.GetQuorumId()
	if id == "" || len(id) > MaxQuorumIDLen {
		return fail(fmt.Errorf("%w: a quorum id must be 1 to %d characters", ErrInvalidCommand, MaxQuorumIDLen))
	}
	prev := a.s.quorum.GetQuorumId()
	if prev == id {
		return &Result{Idempotent: true}
	}
	if prev != op.GetExpectQuorumId() {
		return fail(fmt.Errorf("%w: the quorum id is %q, not the %q this change expects", ErrInvalidCommand, prev, op.GetExpectQuorumId()))
	}
	a.s.quorum = &pactv1.QuorumIdentity{QuorumId: id, SetAtIndex: a.index, Reason: op.GetReason()}
	detail := "quorum id " + id + " (" + op.GetReason() + ")"
	if prev != "" {
		detail += ", was " + prev
	}
	a.record("quorum-id", "", "", detail)
	a.ev.QuorumChanged = true
	return &Result{}
}

// Quorum returns the quorum identity the state holds (nil if none yet).
func (f *FSM) Quorum() *pactv1.QuorumIdentity {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.quorum
}
