package journal

import (
	"crypto/x509"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// An operator who revokes the journal CA, or retires at once the
// intermediate, that signed her own credential cuts herself off: the call
// is answered, and her next one fails its TLS handshake. The journal,
// which knows her chain, refuses such a change unless the request says it
// includes her credential (pact ... --yes-including-my-credential), and
// says what to run first: pact admin renew, through a journal that signs
// under a chain the change leaves.

// errRevokesOwnCredential: the change would cut off the caller's own
// operator credential and the request did not say so (FailedPrecondition,
// REVOKES_OWN_CREDENTIAL).
var errRevokesOwnCredential = errors.New("journal: the change revokes the caller's own credential")

// ownCredentialFlag is the CLI flag that confirms such a change.
const ownCredentialFlag = "--yes-including-my-credential"

// callerIntermediate returns the journal intermediate that signed the
// caller's operator credential, as the registry records it: from the
// credential's record (issuer_serial) when it holds one, else the
// registry's intermediate whose key signed the certificate. nil for a
// credential a domain root signed itself, and for any other caller.
func (j *Journal) callerIntermediate(p *principal) *pactv1.Intermediate {
	if p == nil || p.Leaf == nil {
		return nil
	}
	if o, ok := j.fsm.Operator(p.Serial); ok {
		if o.GetRootSigned() {
			return nil
		}
		if in, ok := j.fsm.Intermediate(o.GetIssuerSerial()); ok {
			return in
		}
	}
	// A record made before pact kept the issuer: the signature says.
	for _, in := range j.fsm.AllIntermediates() {
		c, err := x509.ParseCertificate(in.GetDer())
		if err != nil {
			continue
		}
		if len(p.Leaf.AuthorityKeyId) > 0 && len(c.SubjectKeyId) > 0 && string(p.Leaf.AuthorityKeyId) != string(c.SubjectKeyId) {
			continue
		}
		if p.Leaf.CheckSignatureFrom(c) == nil {
			return in
		}
	}
	return nil
}

// ownCredential describes the caller's credential signed by in, as it
// stops being accepted at stopsAt.
func ownCredential(p *principal, in *pactv1.Intermediate, stopsAt int64) *pactv1.OwnCredential {
	return &pactv1.OwnCredential{
		Serial: p.Serial, Name: p.ID.Name,
		IntermediateSerial: in.GetSerial(), JournalId: in.GetJournalId(), JournalCaSerial: in.GetIssuerSerial(),
		StopsAtUnixNano: stopsAt,
	}
}

// chainOf names an intermediate and the journal CA above it.
func chainOf(in *pactv1.Intermediate) string {
	s := fmt.Sprintf("intermediate %s of journal %s", in.GetSerial(), in.GetJournalId())
	if is := in.GetIssuerSerial(); is != "" {
		s += ", under journal CA " + is
	}
	return s
}

// ownCredentialRefusal is the refusal of a change that would cut off the
// caller's credential, signed by in: what names its chain (the change's
// words), and where to renew first, from the journals whose current
// intermediate the change leaves (cut says which it does not).
func (j *Journal) ownCredentialRefusal(p *principal, in *pactv1.Intermediate, what string, cut func(*pactv1.Intermediate) bool) error {
	return fmt.Errorf("%w: nothing was changed: your own credential %s (%s) was signed by %s, which %s: from then on it would be refused (its next call fails the TLS handshake with bad certificate). To cut it off anyway, add %s (then only another platform-admin's credential, or one the ceremony signs with pact ca issue-admin, gets you back in). %s",
		errRevokesOwnCredential, p.Serial, p.ID.Name, chainOf(in), what, ownCredentialFlag, j.renewAdvice(cut))
}

// renewAdvice says where the caller renews her credential onto a chain a
// change leaves: a journal whose current intermediate is live and not cut,
// this one first.
func (j *Journal) renewAdvice(cut func(*pactv1.Intermediate) bool) string {
	now := j.cfg.Clock.Now().UnixNano()
	usable := func(in *pactv1.Intermediate) bool {
		if in == nil || cut(in) || in.GetRevokeAtUnixNano() != 0 || in.GetNotAfterUnix() < now/1e9 || j.fsm.IsRevoked(in.GetSerial()) {
			return false
		}
		jc, ok := j.fsm.JournalCA(in.GetIssuerSerial())
		return !ok || jc.GetRevokedAtUnixNano() == 0
	}
	if own, ok := j.fsm.Intermediate(j.ca.IntermediateSerial()); ok && usable(own) && j.checkSigning() == nil {
		return fmt.Sprintf("Else renew it first through this journal, %s (%s), then run this again with the new credential: pact admin renew --journal %s", j.cfg.NodeID, signsUnder(own), j.grpcAddr)
	}
	cur := currentIntermediates(j.fsm.AllIntermediates(), j.fsm.Journal)
	ids := make([]string, 0, len(cur))
	for id := range cur {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		in := cur[id]
		ji, ok := j.fsm.Journal(id)
		if !ok || ji.GetGrpcAddr() == "" || !usable(in) {
			continue
		}
		return fmt.Sprintf("Else renew it first through journal %s (%s), then run this again with the new credential: pact admin renew --journal %s", id, signsUnder(in), ji.GetGrpcAddr())
	}
	return "No journal signs under a chain this change leaves yet: first re-key the journals under their new journal CAs (pact journal retire-intermediate, docs/rollover.md step 3), then renew it (pact admin renew) and run this again with the new credential"
}

func signsUnder(in *pactv1.Intermediate) string {
	if is := in.GetIssuerSerial(); is != "" {
		return "it signs under journal CA " + is
	}
	return "it signs under intermediate " + in.GetSerial()
}

// currentIntermediates picks, from the records alone, each journal's
// current intermediate: the one it published last, as its journal record
// says (JournalInfo.intermediate_serial), else (a journal of a release that
// did not say) the one it made last (the latest not_before of those it
// published, then the greatest serial). Every other one of the journal is
// superseded: it signs nothing new.
func currentIntermediates(all []*pactv1.Intermediate, journal func(id string) (*pactv1.JournalInfo, bool)) map[string]*pactv1.Intermediate {
	out := map[string]*pactv1.Intermediate{}
	made := map[string]time.Time{}
	said := map[string]bool{}
	for _, in := range all {
		id := in.GetJournalId()
		if said[id] {
			continue
		}
		if ji, ok := journal(id); ok && ji.GetIntermediateSerial() == in.GetSerial() {
			out[id], said[id] = in, true
			continue
		}
		var nb time.Time
		if c, err := x509.ParseCertificate(in.GetDer()); err == nil {
			nb = c.NotBefore
		}
		best, ok := out[id]
		if !ok || nb.After(made[id]) || (nb.Equal(made[id]) && strings.Compare(in.GetSerial(), best.GetSerial()) > 0) {
			out[id], made[id] = in, nb
		}
	}
	return out
}

// rootSignedRecord marks an operator record as that of a credential a
// domain root signed itself.
func rootSignedRecord(o *pactv1.Operator) *pactv1.Operator {
	o.RootSigned = true
	return o
}
