package raftfsm

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"sort"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/caprofile"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Journal CAs (docs/security.md): each journal host's CA, signed by the
// domain root in a ceremony, signs only that journal's intermediates. The
// registry records one when a journal first publishes an intermediate
// under it, and an operator may revoke it: it and every intermediate it
// signed leave the trust bundle at once.

// A journal id is bound to one journal CA: the newest one recorded for
// it (recorded_at, then serial). Being the bound journal CA is what makes
// a chain through it a peer of this quorum; a chain that merely reaches
// the domain root through another journal CA naming the same journal (a
// second quorum's, a replaced host's) is none. The binding moves only:
//
//   - at the journal's first publish under a journal CA, when nothing is
//     recorded for its id yet (a quorum's founding members);
//   - to a re-issue of the bound journal CA with the same key (the yearly
//     renewal, a root rollover), at the journal's publish under it: only
//     the holder of the bound key can make one;
//   - on an operator's word (RecordJournalCAOp: pact journal add, pact
//     journal record-ca), for a new key.
//
// A bound journal CA that is revoked stays bound: its journal is no peer
// until an operator records a new one.

// boundJournalCA returns the journal CA journalID is bound to. Callers
// hold the lock (or own the state).
func (s *state) boundJournalCA(journalID string) (*pactv1.JournalCA, bool) {
	var best *pactv1.JournalCA
	for _, jc := range s.journalCAs {
		if jc.GetJournalId() != journalID {
			continue
		}
		if best == nil || newerJournalCA(jc, best) {
			best = jc
		}
	}
	return best, best != nil
}

func newerJournalCA(a, b *pactv1.JournalCA) bool {
	if a.GetRecordedAtUnixNano() != b.GetRecordedAtUnixNano() {
		return a.GetRecordedAtUnixNano() > b.GetRecordedAtUnixNano()
	}
	return a.GetSerial() > b.GetSerial()
}

// sameJournalCAKey reports whether two journal CA certificates (DER)
// carry the same public key. Parsing is deterministic: every replica
// answers alike.
func sameJournalCAKey(a, b []byte) bool {
	ca, err := x509.ParseCertificate(a)
	if err != nil {
		return false
	}
	cb, err := x509.ParseCertificate(b)
	if err != nil {
		return false
	}
	return bytes.Equal(ca.RawSubjectPublicKeyInfo, cb.RawSubjectPublicKeyInfo)
}

// recordJournalCA checks the journal CA that signed in against the one its
// journal is bound to, and records it where the binding rules allow (see
// above). An intermediate the domain root signed (no issuer serial) is a
// legacy journal's, which no journal bound to a journal CA is any more.
func (a *applier) recordJournalCA(in *pactv1.Intermediate, jc *pactv1.JournalCA) error {
	if !a.atLeast(2) {
		return a.recordJournalCALevel1(in, jc)
	}
	issuer := in.GetIssuerSerial()
	bound, isBound := a.s.boundJournalCA(in.GetJournalId())
	if issuer == "" {
		if jc != nil {
			return fmt.Errorf("%w: a journal CA given for an intermediate that names no issuer", ErrInvalidCommand)
		}
		if isBound {
			return fmt.Errorf("%w: journal %s is bound to journal CA %s; an intermediate the domain root signed is no longer its (start it with --journal-ca-cert)", ErrJournalCANotBound, in.GetJournalId(), bound.GetSerial())
		}
		return nil
	}
	old, known := a.s.journalCAs[issuer]
	if known {
		if old.GetJournalId() != in.GetJournalId() {
			return fmt.Errorf("%w: intermediate %s of journal %s names journal CA %s, which is journal %s's", ErrInvalidCommand, in.GetSerial(), in.GetJournalId(), issuer, old.GetJournalId())
		}
		if old.GetRevokedAtUnixNano() != 0 {
			return fmt.Errorf("%w: journal CA %s of journal %s was revoked (%s); this journal needs a new journal CA from the ceremony, recorded with pact journal record-ca (docs/ceremony.md)", ErrJournalCARevoked, issuer, old.GetJournalId(), old.GetRevokeReason())
		}
		if bound.GetSerial() != issuer {
			return fmt.Errorf("%w: journal CA %s of journal %s was superseded by journal CA %s; this journal must use that one", ErrJournalCANotBound, issuer, in.GetJournalId(), bound.GetSerial())
		}
		return nil
	}
	if jc == nil {
		return fmt.Errorf("%w: intermediate %s names journal CA %s, which is not recorded and was not given", ErrInvalidCommand, in.GetSerial(), issuer)
	}
	if jc.GetSerial() != issuer || jc.GetJournalId() != in.GetJournalId() {
		return fmt.Errorf("%w: journal CA record does not match intermediate %s (serial or journal)", ErrInvalidCommand, in.GetSerial())
	}
	if isBound {
		switch {
		case bound.GetRevokedAtUnixNano() != 0:
			return fmt.Errorf("%w: journal %s is bound to journal CA %s, which was revoked (%s): a platform-admin records its new journal CA %s with pact journal record-ca %s FILE", ErrJournalCANotBound, in.GetJournalId(), bound.GetSerial(), bound.GetRevokeReason(), issuer, in.GetJournalId())
		case !sameJournalCAKey(bound.GetDer(), jc.GetDer()):
			return fmt.Errorf("%w: journal CA %s has another key than journal %s's bound journal CA %s: a platform-admin records a journal CA with a new key with pact journal record-ca %s FILE (or pact journal add, for a replaced host)", ErrJournalCANotBound, issuer, in.GetJournalId(), bound.GetSerial(), in.GetJournalId())
		}
	}
	reason := "first publish"
	if isBound {
		reason = "re-issue of journal CA " + bound.GetSerial() + " with the same key"
	}
	return a.putJournalCA(jc, reason)
}

// recordJournalCALevel1 is recordJournalCA at feature level 1, exactly as
// release 0.1.0 applies it (its checks, its audit text), so that a quorum
// mixing both releases during an upgrade keeps one registry: a journal CA
// is recorded at its first use, with no binding to the journal id.
func (a *applier) recordJournalCALevel1(in *pactv1.Intermediate, jc *pactv1.JournalCA) error {
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
		return fmt.Errorf("%w: journal CA %s of journal %s has expired; this journal needs a new journal CA from the ceremony (docs/ceremony.md)", ErrInvalidCommand, issuer, jc.GetJournalId())
	}
	next := proto.Clone(jc).(*pactv1.JournalCA)
	next.RecordedAtUnixNano = a.at()
	a.s.journalCAs[issuer] = next
	a.record("journal-ca-recorded", "", issuer, "journal "+jc.GetJournalId())
	return nil
}

// putJournalCA checks a journal CA record and records it as its journal's
// bound one.
func (a *applier) putJournalCA(jc *pactv1.JournalCA, reason string) error {
	if jc.GetSerial() == "" || len(jc.GetDer()) == 0 || jc.GetJournalId() == "" || jc.GetNotAfterUnix() == 0 {
		return fmt.Errorf("%w: journal CA record does not match a journal CA (no serial, certificate, journal or expiry)", ErrInvalidCommand)
	}
	if jc.GetRevokedAtUnixNano() != 0 || jc.GetRevokedBy() != "" || jc.GetRevokeReason() != "" {
		return fmt.Errorf("%w: a revoked journal CA cannot be recorded", ErrInvalidCommand)
	}
	if jc.GetNotAfterUnix() < a.at()/1e9 {
		// It would be pruned at once.
		return fmt.Errorf("%w: journal CA %s of journal %s has expired; this journal needs a new journal CA from the ceremony (docs/ceremony.md)", ErrInvalidCommand, jc.GetSerial(), jc.GetJournalId())
	}
	cert, err := x509.ParseCertificate(jc.GetDer())
	if err != nil || cert.NotAfter.Unix() != jc.GetNotAfterUnix() {
		return fmt.Errorf("%w: journal CA record of journal %s does not match its certificate", ErrInvalidCommand, jc.GetJournalId())
	}
	if id, _, ok := caprofile.JournalOf(cert); !ok || id != jc.GetJournalId() {
		return fmt.Errorf("%w: certificate %s is not a journal CA of journal %s", ErrInvalidCommand, jc.GetSerial(), jc.GetJournalId())
	}
	next := proto.Clone(jc).(*pactv1.JournalCA)
	next.RecordedAtUnixNano = a.at()
	a.s.journalCAs[jc.GetSerial()] = next
	a.record("journal-ca-recorded", "", jc.GetSerial(), "journal "+jc.GetJournalId()+" bound to it ("+reason+")")
	return nil
}

// recordJournalCAOp binds a journal id to a journal CA on an operator's
// word. Recording the bound one again changes nothing; a revoked one is
// refused; one recorded for another journal is refused.
func (a *applier) recordJournalCAOp(op *pactv1.RecordJournalCAOp) *Result {
	if !a.atLeast(2) {
		// A journal of level 1 does not know this command: the journal
		// refuses it before proposing; this refuses it deterministically
		// should one be proposed as the level was read.
		return fail(&QuorumVersionError{Feature: "recording a journal CA (pact journal record-ca, pact journal add --journal-ca)", Need: 2, Have: a.s.level()})
	}
	jc := op.GetJournalCa()
	if old, ok := a.s.journalCAs[jc.GetSerial()]; ok {
		switch {
		case old.GetJournalId() != jc.GetJournalId():
			return fail(fmt.Errorf("%w: journal CA %s is recorded for journal %s", ErrInvalidCommand, jc.GetSerial(), old.GetJournalId()))
		case old.GetRevokedAtUnixNano() != 0:
			return fail(fmt.Errorf("%w: journal CA %s of journal %s was revoked (%s); the ceremony must sign a new one", ErrJournalCARevoked, jc.GetSerial(), old.GetJournalId(), old.GetRevokeReason()))
		}
		if bound, _ := a.s.boundJournalCA(jc.GetJournalId()); bound.GetSerial() == jc.GetSerial() {
			return &Result{Idempotent: true}
		}
	}
	reason := op.GetReason()
	if reason == "" {
		reason = "recorded by " + a.cmd.GetActor()
	}
	if err := a.putJournalCA(jc, reason); err != nil {
		return fail(err)
	}
	a.ev.BundleChanged = true
	return &Result{}
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
		if jc.GetNotAfterUnix() >= nowUnix {
			continue
		}
		// The bound one stays, expired or not: without it the journal id
		// would be free for any journal CA's first publish. (Level 1, as
		// release 0.1.0, drops it.)
		if bound, _ := s.boundJournalCA(jc.GetJournalId()); s.level() >= 2 && bound.GetSerial() == k {
			continue
		}
		delete(s.journalCAs, k)
	}
	for k, in := range s.intermediates {
		if is := in.GetIssuerSerial(); is != "" {
			if jc, ok := s.journalCAs[is]; !ok || jc.GetNotAfterUnix() < nowUnix {
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

// BoundJournalCA returns the journal CA journalID is bound to (revoked
// or not), and whether there is one.
func (f *FSM) BoundJournalCA(journalID string) (*pactv1.JournalCA, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.boundJournalCA(journalID)
}

// HasJournalCAs reports whether any journal CA is recorded: the quorum
// has left the layout in which the root signs intermediates.
func (f *FSM) HasJournalCAs() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.st.journalCAs) > 0
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
