package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pact-hpc/pact/internal/logkey"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Journal CAs in the registry (raftfsm/journalca.go): an operator revokes
// one with pact journal revoke-ca; it and the intermediates it signed
// leave the trust bundle at once, and the journal it belonged to signs
// nothing until it has a new one from the ceremony (docs/ceremony.md).

// ErrJournalCARevoked: this journal's own journal CA was revoked; it signs
// nothing (enrollments, renewals, standby and operator credentials) until
// it has a new journal CA. Callers are answered UNAVAILABLE
// (JOURNAL_CA_REVOKED): another journal may serve them.
var ErrJournalCARevoked = errors.New("journal: this journal's journal CA was revoked")

// RevokeJournalCA revokes journal CAs named by serial, or every journal CA
// the registry holds for a journal id.
func (s *adminServer) RevokeJournalCA(ctx context.Context, req *pactv1.RevokeJournalCARequest) (*pactv1.RevokeJournalCAResponse, error) {
	j := s.j
	p := principalFrom(ctx)
	if len(req.GetTargets()) == 0 {
		return nil, fmt.Errorf("%w: name a journal CA serial or a journal id (see pact journal intermediates)", ErrInvalidArgument)
	}
	// Which serials a target names is the leader's state's to say.
	if err := j.readBarrier(ctx); err != nil {
		return nil, err
	}
	var serials []string
	for _, t := range req.GetTargets() {
		found := j.journalCAsOf(t)
		if len(found) == 0 {
			return nil, fmt.Errorf("%w: no journal CA %q in the registry: give a serial or a journal id from pact journal intermediates (a journal CA is recorded when its journal first publishes an intermediate under it)", ErrNotFound, t)
		}
		for _, s := range found {
			if !slices.Contains(serials, s) {
				serials = append(serials, s)
			}
		}
	}
	// The caller's own credential goes with a journal CA above it: refused
	// unless the request says so (owncredential.go).
	cut := func(in *pactv1.Intermediate) bool { return slices.Contains(serials, in.GetIssuerSerial()) }
	own := j.callerIntermediate(p)
	if own != nil && cut(own) && !req.GetRevokeOwnCredential() {
		if jc, _ := j.fsm.JournalCA(own.GetIssuerSerial()); jc.GetRevokedAtUnixNano() == 0 {
			return nil, j.ownCredentialRefusal(p, own, "this revocation takes out of the trust bundle at once", cut)
		}
	}
	// The other operators cut off: their valid credentials whose recorded
	// chain goes with it, of names left with no other valid credential (a
	// credential renewed onto another chain keeps its name in).
	var cutOff []*pactv1.Operator
	kept := map[string]bool{}
	ops, _ := j.fsm.Operators()
	for _, o := range ops {
		if o.GetRevokedAtUnixNano() != 0 || o.GetNotAfterUnix() < j.cfg.Clock.Now().Unix() {
			continue
		}
		jc, ok := j.fsm.JournalCA(o.GetJournalCaSerial())
		switch {
		case !ok || !slices.Contains(serials, o.GetJournalCaSerial()) || jc.GetRevokedAtUnixNano() != 0:
			kept[o.GetName()] = true
		case o.GetSerial() != p.Serial: // the caller's is own_credential
			cutOff = append(cutOff, o)
		}
	}
	others := slices.DeleteFunc(cutOff, func(o *pactv1.Operator) bool { return kept[o.GetName()] })
	reason := req.GetReason()
	if reason == "" {
		reason = "revoked by " + p.ID.Name
	}
	if _, err := j.propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_RevokeJournalCa{RevokeJournalCa: &pactv1.RevokeJournalCAOp{
		Serials: serials, Reason: reason,
	}}}); err != nil {
		return nil, err
	}
	out := &pactv1.RevokeJournalCAResponse{Operators: others}
	var journals []string
	for _, s := range serials {
		if jc, ok := j.fsm.JournalCA(s); ok {
			out.Revoked = append(out.Revoked, journalCAView(jc))
			if !slices.Contains(journals, jc.GetJournalId()) {
				journals = append(journals, jc.GetJournalId())
			}
		}
	}
	// What each journal concerned signs under now: the journal CA it is
	// bound to, revoked (it signs nothing) or a live re-issue.
	for _, id := range journals {
		if jc, ok := j.fsm.BoundJournalCA(id); ok {
			out.Bound = append(out.Bound, journalCAView(jc))
		}
	}
	for _, in := range j.fsm.AllIntermediates() {
		if slices.Contains(serials, in.GetIssuerSerial()) {
			out.Intermediates = append(out.Intermediates, intermediateView(in))
		}
	}
	if own != nil && cut(own) {
		out.OwnCredential = ownCredential(p, own, j.cfg.Clock.Now().UnixNano())
		if jc, ok := j.fsm.JournalCA(own.GetIssuerSerial()); ok && jc.GetRevokedAtUnixNano() != 0 {
			out.OwnCredential.StopsAtUnixNano = jc.GetRevokedAtUnixNano()
		}
		j.log.Warn("the operator revoked the journal CA above her own credential (--yes-including-my-credential)", logkey.Actor, p.ID.Name, logkey.Serial, p.Serial, logkey.IssuerSerial, own.GetSerial())
	}
	j.log.Warn("journal CAs revoked", logkey.Actor, p.ID.Name, logkey.Serials, serials, logkey.Records, len(out.GetIntermediates()), logkey.Reason, reason)
	return out, nil
}

// journalCAsOf resolves a serial or a journal id to journal CA serials.
func (j *Journal) journalCAsOf(target string) []string {
	if _, ok := j.fsm.JournalCA(target); ok {
		return []string{target}
	}
	var out []string
	for _, jc := range j.fsm.AllJournalCAs() {
		if jc.GetJournalId() == target {
			out = append(out, jc.GetSerial())
		}
	}
	return out
}

// journalCAView drops the DER: operators see serials, dates and who
// revoked.
func journalCAView(jc *pactv1.JournalCA) *pactv1.JournalCA {
	return &pactv1.JournalCA{
		JournalId: jc.GetJournalId(), Serial: jc.GetSerial(), NotAfterUnix: jc.GetNotAfterUnix(),
		RecordedAtUnixNano: jc.GetRecordedAtUnixNano(), RevokedAtUnixNano: jc.GetRevokedAtUnixNano(),
		RevokedBy: jc.GetRevokedBy(), RevokeReason: jc.GetRevokeReason(),
	}
}

// revokedJournalCA returns this journal's journal CA if the registry holds
// it revoked, else nil (a live one, or an intermediate the root signed).
func (j *Journal) revokedJournalCA() *pactv1.JournalCA {
	return revokedJournalCAOf(j.fsm, j.cfg.NodeID, j.ca.IntermediateSerial())
}

// revokedJournalCAOf is revokedJournalCA for the journal journalID signing
// with the intermediate of serial own. While own is not in the registry (a
// re-key not yet published, or one the registry refused because its
// journal CA was revoked) the journal counts as revoked if every journal
// CA the registry holds for it is: a new one is recorded only with the
// first intermediate published under it.
func revokedJournalCAOf(fsm *raftfsm.FSM, journalID, own string) *pactv1.JournalCA {
	if in, ok := fsm.Intermediate(own); ok {
		if jc, ok := fsm.JournalCA(in.GetIssuerSerial()); ok && jc.GetRevokedAtUnixNano() != 0 {
			return jc
		}
		return nil
	}
	var last *pactv1.JournalCA
	for _, jc := range fsm.AllJournalCAs() {
		if jc.GetJournalId() != journalID {
			continue
		}
		if jc.GetRevokedAtUnixNano() == 0 {
			return nil
		}
		if last == nil || jc.GetRevokedAtUnixNano() > last.GetRevokedAtUnixNano() {
			last = jc
		}
	}
	return last
}

// checkSigning refuses to sign while this journal's journal CA is revoked:
// a certificate from it would verify nowhere.
func (j *Journal) checkSigning() error {
	jc := j.revokedJournalCA()
	if jc == nil {
		return nil
	}
	return fmt.Errorf("%w (serial %s): journal %s signs nothing until it has a new journal CA; another journal can serve this call", ErrJournalCARevoked, jc.GetSerial(), j.cfg.NodeID)
}

// noteJournalCA logs, on a change of the trust bundle, that this journal's
// own journal CA is revoked and what the operator must do. It runs on
// Raft's apply goroutine (onApply).
func (j *Journal) noteJournalCA() {
	jc := j.revokedJournalCA()
	if jc == nil {
		return
	}
	j.log.Error("this journal's journal CA was revoked: it signs nothing (enrollments, renewals, operator credentials) until it has a new one; run the journal CA ceremony for this journal (pact-journal ca-request, pact ca sign-journal: docs/ceremony.md) and give it the new certificate (--journal-ca-cert)",
		logkey.Serial, jc.GetSerial(), logkey.Actor, jc.GetRevokedBy(), logkey.Reason, jc.GetRevokeReason(),
		logkey.RevokeAt, time.Unix(0, jc.GetRevokedAtUnixNano()).UTC().Format(time.RFC3339))
}
