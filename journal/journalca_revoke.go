package journal

import (
	"errors"
	"fmt"
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
