package raftfsm

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Operator credentials and intermediate retirement: everything that
// authenticates can be revoked in Raft (DESIGN.md §6).

// issuedAt is when an operator credential was issued, for name
// revocations: the commit time of one an operator had the journal issue
// (issued_by admin/NAME: it was signed just before), the certificate's
// NotBefore for any other (signed offline, or the bootstrap credential,
// recorded later).
func issuedAt(o *pactv1.Operator) int64 {
	if strings.HasPrefix(o.GetIssuedBy(), "admin/") {
		return o.GetRecordedAtUnixNano()
	}
	return o.GetNotBeforeUnix() * 1e9
}

// IssuedAtFirstUse is the issued_by of an operator credential that was
// signed offline (pact-journal admin issue) and recorded at its first call.
const IssuedAtFirstUse = "first-use"

func (a *applier) recordOperator(op *pactv1.RecordOperatorOp) *Result {
	in := op.GetOperator()
	if err := pki.ValidateName("operator name", in.GetName()); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrInvalidCommand, err))
	}
	if in.GetRole() == "" || in.GetSerial() == "" || in.GetNotAfterUnix() == 0 {
		return fail(fmt.Errorf("%w: operator credential without role, serial or expiry", ErrInvalidCommand))
	}
	s := a.s
	if old, ok := s.operators[in.GetSerial()]; ok {
		if old.GetRevokedAtUnixNano() != 0 {
			return fail(fmt.Errorf("%w: credential %s of %s was revoked by %s", ErrOperatorRevoked, old.GetSerial(), old.GetName(), old.GetRevokedBy()))
		}
		return &Result{Idempotent: true}
	}
	rec := proto.Clone(in).(*pactv1.Operator)
	rec.RecordedAtUnixNano = a.at()
	rec.RevokedAtUnixNano, rec.RevokedBy = 0, ""
	if nr, ok := s.revokedNames[rec.GetName()]; ok && issuedAt(rec) <= nr.GetRevokedAtUnixNano() {
		return fail(fmt.Errorf("%w: every credential of %s issued before its revocation by %s is revoked; issue a new one", ErrOperatorRevoked, rec.GetName(), nr.GetRevokedBy()))
	}
	// Only a command that changes the state prunes: a refused or repeated
	// one must leave it alone.
	s.pruneOperators(a.at() / 1e9)
	s.operators[rec.GetSerial()] = rec
	a.record("operator-record", "", rec.GetSerial(), "operator "+rec.GetName()+" role "+rec.GetRole()+" issued by "+rec.GetIssuedBy())
	return &Result{}
}

func (a *applier) revokeOperator(op *pactv1.RevokeOperatorOp) *Result {
	s := a.s
	name, serial := op.GetName(), op.GetSerial()
	if (name == "") == (serial == "") {
		return fail(fmt.Errorf("%w: revoke an operator by name or by serial, not both or neither", ErrInvalidCommand))
	}
	if serial != "" {
		o, ok := s.operators[serial]
		if !ok {
			return fail(fmt.Errorf("%w: no operator credential with serial %s is recorded (revoke by name to cover credentials never used)", ErrNotFound, serial))
		}
		if o.GetRevokedAtUnixNano() != 0 {
			return &Result{Idempotent: true}
		}
		s.revokeOperatorRecord(o, a.at(), a.cmd.GetActor())
		a.record("operator-revoke", "", serial, "operator "+o.GetName())
		return &Result{}
	}
	if err := pki.ValidateName("operator name", name); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrInvalidCommand, err))
	}
	s.revokedNames[name] = &pactv1.OperatorNameRevocation{Name: name, RevokedAtUnixNano: a.at(), RevokedBy: a.cmd.GetActor()}
	for _, o := range s.operators {
		if o.GetName() == name && o.GetRevokedAtUnixNano() == 0 {
			s.revokeOperatorRecord(o, a.at(), a.cmd.GetActor())
		}
	}
	a.record("operator-revoke", "", "", "every credential of operator "+name)
	return &Result{}
}

// revokeOperatorRecord replaces o (records are copy-on-write).
func (s *state) revokeOperatorRecord(o *pactv1.Operator, at int64, by string) {
	next := proto.Clone(o).(*pactv1.Operator)
	next.RevokedAtUnixNano, next.RevokedBy = at, by
	s.operators[o.GetSerial()] = next
}

// pruneOperators drops credentials past their expiry. Name revocations stay:
// a credential signed offline may outlive any record.
func (s *state) pruneOperators(nowUnix int64) {
	for k, o := range s.operators {
		if o.GetNotAfterUnix() < nowUnix {
			delete(s.operators, k)
		}
	}
}

func (a *applier) retireIntermediate(op *pactv1.RetireIntermediateOp) *Result {
	s := a.s
	if len(op.GetSerials()) == 0 {
		return fail(fmt.Errorf("%w: no intermediate to retire", ErrInvalidCommand))
	}
	// All or nothing: one unknown serial changes nothing.
	for _, serial := range op.GetSerials() {
		if _, ok := s.intermediates[serial]; !ok {
			return fail(fmt.Errorf("%w: no intermediate with serial %s in the trust bundle", ErrNotFound, serial))
		}
	}
	revokeAt := max(op.GetRevokeAtUnixNano(), 0)
	if revokeAt < a.at() {
		revokeAt = a.at()
	}
	changed := false
	for _, serial := range op.GetSerials() {
		in := s.intermediates[serial]
		if at := in.GetRevokeAtUnixNano(); at != 0 && at <= revokeAt {
			continue // already retiring with an earlier (or the same) deadline
		}
		changed = true
		next := proto.Clone(in).(*pactv1.Intermediate)
		if next.GetRetiredAtUnixNano() == 0 {
			next.RetiredAtUnixNano = a.at()
		}
		next.RevokeAtUnixNano, next.RetiredBy, next.RetireReason = revokeAt, a.cmd.GetActor(), op.GetReason()
		s.intermediates[serial] = next
		action := "intermediate-retire"
		if revokeAt == a.at() {
			action = "intermediate-revoke"
		}
		a.record(action, "", serial, "journal "+in.GetJournalId()+"; "+op.GetReason())
	}
	if !changed {
		return &Result{Idempotent: true}
	}
	a.ev.BundleChanged = true
	return &Result{}
}

// IntermediateRevoked reports whether an intermediate is revoked at now
// (Unix nanoseconds).
func IntermediateRevoked(in *pactv1.Intermediate, nowUnixNano int64) bool {
	at := in.GetRevokeAtUnixNano()
	return at != 0 && at <= nowUnixNano
}

// IntermediateState names an intermediate's state at now: active,
// retiring, revoked.
func IntermediateState(in *pactv1.Intermediate, nowUnixNano int64) string {
	switch {
	case in.GetRevokeAtUnixNano() == 0:
		return "active"
	case IntermediateRevoked(in, nowUnixNano):
		return "revoked"
	}
	return "retiring"
}

// Intermediate returns the intermediate with serial, whatever its state.
func (f *FSM) Intermediate(serial string) (*pactv1.Intermediate, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	in, ok := f.st.intermediates[serial]
	return in, ok
}

// AllIntermediates returns every intermediate in Raft, revoked ones too,
// sorted by journal then serial.
func (f *FSM) AllIntermediates() []*pactv1.Intermediate {
	f.mu.RLock()
	out := make([]*pactv1.Intermediate, 0, len(f.st.intermediates))
	for _, in := range f.st.intermediates {
		out = append(out, in)
	}
	f.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].GetJournalId() != out[j].GetJournalId() {
			return out[i].GetJournalId() < out[j].GetJournalId()
		}
		return out[i].GetSerial() < out[j].GetSerial()
	})
	return out
}

// OperatorStatus is what the registry says about an operator credential.
type OperatorStatus int

// Operator credential states.
const (
	OperatorUnrecorded OperatorStatus = iota // valid by signature, not yet recorded
	OperatorRecorded                         // recorded and not revoked
	OperatorRevoked                          // revoked by serial or by name
)

// CheckOperator says whether the credential with serial, of name, dated
// notBeforeUnix, is recorded, revoked, or neither.
func (f *FSM) CheckOperator(name, serial string, notBeforeUnix int64) (OperatorStatus, string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	o, recorded := f.st.operators[serial]
	if recorded && o.GetRevokedAtUnixNano() != 0 {
		return OperatorRevoked, "credential " + serial + " of " + name + " was revoked by " + o.GetRevokedBy()
	}
	issued := notBeforeUnix * 1e9
	if recorded {
		issued = issuedAt(o)
	}
	if nr, ok := f.st.revokedNames[name]; ok && issued <= nr.GetRevokedAtUnixNano() {
		return OperatorRevoked, "every credential of " + name + " issued before its revocation by " + nr.GetRevokedBy() + " is revoked"
	}
	if recorded {
		return OperatorRecorded, ""
	}
	return OperatorUnrecorded, ""
}

// Operators returns the recorded operator credentials sorted by name then
// expiry, and the name revocations sorted by name.
func (f *FSM) Operators() ([]*pactv1.Operator, []*pactv1.OperatorNameRevocation) {
	f.mu.RLock()
	ops := make([]*pactv1.Operator, 0, len(f.st.operators))
	for _, o := range f.st.operators {
		ops = append(ops, o)
	}
	names := make([]*pactv1.OperatorNameRevocation, 0, len(f.st.revokedNames))
	for _, n := range f.st.revokedNames {
		names = append(names, n)
	}
	f.mu.RUnlock()
	sort.Slice(ops, func(i, j int) bool {
		if ops[i].GetName() != ops[j].GetName() {
			return ops[i].GetName() < ops[j].GetName()
		}
		if ops[i].GetNotAfterUnix() != ops[j].GetNotAfterUnix() {
			return ops[i].GetNotAfterUnix() < ops[j].GetNotAfterUnix()
		}
		return ops[i].GetSerial() < ops[j].GetSerial()
	})
	sort.Slice(names, func(i, j int) bool { return names[i].GetName() < names[j].GetName() })
	return ops, names
}

// Operator returns the record of one operator credential.
func (f *FSM) Operator(serial string) (*pactv1.Operator, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	o, ok := f.st.operators[serial]
	return o, ok
}
