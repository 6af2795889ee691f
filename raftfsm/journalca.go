package raftfsm

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

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
		if old.GetRevokedAtUnixNano() != 0 {
			return fmt.Errorf("%w: journal CA %s of journal %s was revoked (%s); this journal needs a new journal CA from the ceremony (docs/ceremony.md)", ErrInvalidCommand, issuer, old.GetJournalId(), old.GetRevokeReason())
		}
		return nil
	}
	if jc == nil {
		return fmt.Errorf("%w: intermediate %s names journal CA %s, which is not recorded and was not given", ErrInvalidCommand, in.GetSerial(), issuer)
	}
	if jc.GetSerial() != issuer || len(jc.GetDer()) == 0 || jc.GetJournalId() != in.GetJournalId() || jc.GetNotAfterUnix() == 0 {
		return fmt.Errorf("%w: journal CA record does not match intermediate %s (serial, certificate, journal or expiry)", ErrInvalidCommand, in.GetSerial())
	}
	if jc.GetRevokedAtUnixNano() != 0 || jc.GetRevokedBy() != "" {
		return fmt.Errorf("%w: a journal cannot publish a revoked journal CA", ErrInvalidCommand)
	}
	next := proto.Clone(jc).(*pactv1.JournalCA)
	next.RecordedAtUnixNano = a.at()
	a.s.journalCAs[issuer] = next
	a.record("journal-ca-recorded", "", issuer, "journal "+jc.GetJournalId())
	return nil
}

// journalCARevoked reports whether the journal CA with serial is revoked.
// Callers hold the lock.
func (s *state) journalCARevoked(serial string) bool {
	jc, ok := s.journalCAs[serial]
	return ok && jc.GetRevokedAtUnixNano() != 0
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
