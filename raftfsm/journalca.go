package raftfsm

import (
	"fmt"
	"sort"
	"strconv"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Journal CAs (docs/security.md): each journal host's CA, signed by the
// domain root in a ceremony, signs only that journal's intermediates. The
// registry records one when a journal first publishes an intermediate
// under it, and an operator may revoke it: it and every intermediate it
// signed leave the trust bundle at once.

// recordJournalCA records the journal CA that signed in, at its first use.
// An intermediate the domain root signed (no issuer serial) needs none. A
// revoked journal CA stays revoked: a journal cannot bring it back by
// publishing under it.
func (a *applier) recordJournalCA(in *pactv1.Intermediate, jc *pactv1.JournalCA) error {
	issuer := in.GetIssuerSerial()
	if issuer == "" {
		if jc != nil {
			return fmt.Errorf("%w: a journal CA given for an intermediate that names no issuer", ErrInvalidCommand)
		}
		return nil
	}
	old, known := a.s.journalCAs[issuer]
	if known {
		if old.GetJournalId() != in.GetJournalId() {
			return fmt.Errorf("%w: intermediate %s of journal %s names journal CA %s, which is journal %s's", ErrInvalidCommand, in.GetSerial(), in.GetJournalId(), issuer, old.GetJournalId())
		}
		if old.GetRevokedAtUnixNano() != 0 {
			return fmt.Errorf("%w: journal CA %s of journal %s was revoked (%s); this journal needs a new journal CA from the ceremony (docs/ceremony.md)", ErrJournalCARevoked, issuer, old.GetJournalId(), old.GetRevokeReason())
		}
		return nil
	}
	if jc == nil {
		return fmt.Errorf("%w: intermediate %s names journal CA %s, which is not recorded and was not given", ErrInvalidCommand, in.GetSerial(), issuer)
	}
	if jc.GetSerial() != issuer || len(jc.GetDer()) == 0 || jc.GetJournalId() != in.GetJournalId() || jc.GetNotAfterUnix() == 0 {
		return fmt.Errorf("%w: journal CA record does not match intermediate %s (serial, certificate, journal or expiry)", ErrInvalidCommand, in.GetSerial())
	}
	if jc.GetRevokedAtUnixNano() != 0 || jc.GetRevokedBy() != "" || jc.GetRevokeReason() != "" {
		return fmt.Errorf("%w: a journal cannot publish a revoked journal CA", ErrInvalidCommand)
	}
	if jc.GetNotAfterUnix() < a.at()/1e9 {
		// It would be pruned with the intermediate at once.
		return fmt.Errorf("%w: journal CA %s of journal %s has expired; this journal needs a new journal CA from the ceremony (docs/ceremony.md)", ErrInvalidCommand, issuer, jc.GetJournalId())
	}
	next := proto.Clone(jc).(*pactv1.JournalCA)
	next.RecordedAtUnixNano = a.at()
	a.s.journalCAs[issuer] = next
	a.record("journal-ca-recorded", "", issuer, "journal "+jc.GetJournalId())
	return nil
}

// revokeJournalCA revokes journal CAs at the command's time, all or
// nothing: one unknown serial changes nothing. Every intermediate a
// revoked journal CA signed is revoked with it. Revoking one already
// revoked changes nothing (its first reason stays).
func (a *applier) revokeJournalCA(op *pactv1.RevokeJournalCAOp) *Result {
	s := a.s
	if len(op.GetSerials()) == 0 {
		return fail(fmt.Errorf("%w: no journal CA to revoke", ErrInvalidCommand))
	}
	for _, serial := range op.GetSerials() {
		if _, ok := s.journalCAs[serial]; !ok {
			return fail(fmt.Errorf("%w: no journal CA with serial %s in the registry", ErrNotFound, serial))
		}
	}
	changed := false
	for _, serial := range op.GetSerials() {
		jc := s.journalCAs[serial]
		if jc.GetRevokedAtUnixNano() != 0 {
			continue
		}
		changed = true
		next := proto.Clone(jc).(*pactv1.JournalCA)
		next.RevokedAtUnixNano, next.RevokedBy, next.RevokeReason = a.at(), a.cmd.GetActor(), op.GetReason()
		s.journalCAs[serial] = next
		n := s.revokeIntermediatesOf(serial, a.at(), a.cmd.GetActor(), "journal CA "+serial+" revoked: "+op.GetReason())
		a.record("journal-ca-revoke", "", serial, "journal "+jc.GetJournalId()+"; "+strconv.Itoa(n)+" intermediates revoked with it; "+op.GetReason())
	}
	if !changed {
		return &Result{Idempotent: true}
	}
	a.ev.BundleChanged = true
	return &Result{}
}

// revokeIntermediatesOf revokes at now the intermediates the journal CA
// with serial signed that are not revoked by then, and returns how many.
// Records are replaced, never changed (copy-on-write).
func (s *state) revokeIntermediatesOf(serial string, now int64, by, reason string) int {
	n := 0
	for k, in := range s.intermediates {
		if in.GetIssuerSerial() != serial || IntermediateRevoked(in, now) {
			continue
		}
		next := proto.Clone(in).(*pactv1.Intermediate)
		if next.GetRetiredAtUnixNano() == 0 {
			next.RetiredAtUnixNano = now
		}
		next.RevokeAtUnixNano, next.RetiredBy, next.RetireReason = now, by, reason
		s.intermediates[k] = next
		n++
	}
	return n
}

// pruneJournalCAs drops journal CAs past their expiry, and the
// intermediates that named a journal CA no longer recorded: no chain
// through an expired CA verifies, and a state keeps no intermediate whose
// issuer it does not hold (snapfile's rules).
func (s *state) pruneJournalCAs(nowUnix int64) {
	for k, jc := range s.journalCAs {
		if jc.GetNotAfterUnix() < nowUnix {
			delete(s.journalCAs, k)
		}
	}
	for k, in := range s.intermediates {
		if is := in.GetIssuerSerial(); is != "" {
			if _, ok := s.journalCAs[is]; !ok {
				delete(s.intermediates, k)
			}
		}
	}
}

// journalCARevoked reports whether the journal CA with serial is revoked.
// Callers hold the lock.
func (s *state) journalCARevoked(serial string) bool {
	jc, ok := s.journalCAs[serial]
	return ok && jc.GetRevokedAtUnixNano() != 0
}

// JournalCA returns the journal CA with serial, whatever its state.
func (f *FSM) JournalCA(serial string) (*pactv1.JournalCA, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	jc, ok := f.st.journalCAs[serial]
	return jc, ok
}

// JournalCAsAt returns the journal CAs live at now (Unix nanoseconds): not
// expired and not revoked, sorted by journal then serial.
func (f *FSM) JournalCAsAt(nowUnixNano int64) []*pactv1.JournalCA {
	nowUnix := nowUnixNano / 1e9
	f.mu.RLock()
	out := make([]*pactv1.JournalCA, 0, len(f.st.journalCAs))
	for _, jc := range f.st.journalCAs {
		if jc.GetRevokedAtUnixNano() != 0 || jc.GetNotAfterUnix() < nowUnix {
			continue
		}
		out = append(out, jc)
	}
	f.mu.RUnlock()
	sortJournalCAs(out)
	return out
}

// AllJournalCAs returns every journal CA in Raft, revoked ones too, sorted
// by journal then serial.
func (f *FSM) AllJournalCAs() []*pactv1.JournalCA {
	f.mu.RLock()
	out := make([]*pactv1.JournalCA, 0, len(f.st.journalCAs))
	for _, jc := range f.st.journalCAs {
		out = append(out, jc)
	}
	f.mu.RUnlock()
	sortJournalCAs(out)
	return out
}

func sortJournalCAs(out []*pactv1.JournalCA) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].GetJournalId() != out[j].GetJournalId() {
			return out[i].GetJournalId() < out[j].GetJournalId()
		}
		return out[i].GetSerial() < out[j].GetSerial()
	})
}
