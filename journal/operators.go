package journal

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/suggest"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/ca"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Operator credentials and intermediates: everything that authenticates can
// be revoked in Raft (docs/security.md).

// IssueOperator signs an operator credential for the caller's CSR with
// this journal's current intermediate (the domain root in the legacy
// layout) and returns it only once its record has committed, so no
// credential exists that pact admin list does not show. The credential
// ends with the intermediate at the latest: a shorter life than asked is
// logged, and the record answered carries the real not_after.
func (s *adminServer) IssueOperator(ctx context.Context, req *pactv1.IssueOperatorRequest) (*pactv1.IssueOperatorResponse, error) {
	j := s.j
	p := principalFrom(ctx)
	name, role := req.GetName(), req.GetRole()
	if name == "" {
		name = p.ID.Name
	}
	if role == "" && name == p.ID.Name {
		role = p.Role
	}
	if !auth.PlatformAdmin(p.Role) && (name != p.ID.Name || role != p.Role) {
		return nil, fmt.Errorf("%w: role %s may only renew its own credential (%s, role %s); a platform-admin issues others", ErrPermission, p.Role, p.ID.Name, p.Role)
	}
	lifetime := time.Duration(req.GetLifetimeSeconds()) * time.Second
	switch {
	case req.GetLifetimeSeconds() == 0:
		lifetime = j.cfg.OperatorLifetime
	case req.GetLifetimeSeconds() < 0 || lifetime > j.cfg.MaxOperatorLifetime:
		return nil, fmt.Errorf("%w: lifetime %ds: at most %v (--max-operator-lifetime)", ErrInvalidArgument, req.GetLifetimeSeconds(), j.cfg.MaxOperatorLifetime)
	}
	csr, err := ca.ParseCSR(req.GetCsrDer())
	if err != nil {
		return nil, err
	}
	if err := j.checkSigning(); err != nil {
		return nil, err
	}
	// Signed by a published intermediate that is not retiring, as an
	// agent's certificate is: a credential renewed right after its
	// journal's intermediate was retired (a root rollover's step 4) lands
	// on the new one, not on the one that goes at the end of the grace.
	if err := j.awaitLiveIntermediate(ctx); err != nil {
		return nil, err
	}
	asked := j.cfg.Clock.Now().Add(lifetime)
	cert, by, err := j.ca.SignOperator(csr, name, role, lifetime)
	if err != nil {
		return nil, err
	}
	rec := auth.OperatorRecord(cert, name, role, p.Actor())
	rec.IssuerSerial, rec.JournalCaSerial, rec.RootSigned = by.IntermediateSerial, by.JournalCASerial, by.Root
	if _, err := j.propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_RecordOperator{RecordOperator: &pactv1.RecordOperatorOp{Operator: rec}}}); err != nil {
		// The certificate never leaves: its record did not commit.
		return nil, err
	}
	if got, ok := j.fsm.Operator(rec.GetSerial()); ok {
		rec = got
	}
	j.log.Info("operator credential issued", logkey.Actor, p.ID.Name, logkey.Operator, name, logkey.Role, role, logkey.Serial, rec.GetSerial(),
		logkey.NotAfter, cert.NotAfter.UTC().Format(time.RFC3339))
	if cert.NotAfter.Before(asked.Add(-time.Minute)) {
		j.log.Info("the operator credential ends with the journal intermediate that signed it, before the lifetime asked",
			logkey.Operator, name, logkey.Serial, rec.GetSerial(), logkey.NotAfter, cert.NotAfter.UTC().Format(time.RFC3339),
			logkey.IssuerSerial, by.IntermediateSerial)
	}
	return &pactv1.IssueOperatorResponse{CertDer: cert.Raw, Operator: rec}, nil
}

func (s *adminServer) ListOperators(_ context.Context, req *pactv1.ListOperatorsRequest) (*pactv1.ListOperatorsResponse, error) {
	ops, names := s.j.fsm.Operators()
	now := s.j.cfg.Clock.Now().Unix()
	out := &pactv1.ListOperatorsResponse{RevokedNames: names}
	for _, o := range ops {
		if !req.GetAll() && (o.GetRevokedAtUnixNano() != 0 || o.GetNotAfterUnix() < now) {
			continue
		}
		out.Operators = append(out.Operators, o)
	}
	return out, nil
}

// serialRE is a certificate serial as pact prints it (lower-case hex).
var serialRE = regexp.MustCompile(`^[0-9a-f]{16,40}$`)

// RevokeOperator revokes by serial (one credential) or by name (every
// credential of the name issued so far, recorded or not).
func (s *adminServer) RevokeOperator(ctx context.Context, req *pactv1.RevokeOperatorRequest) (*pactv1.RevokeOperatorResponse, error) {
	j := s.j
	p := principalFrom(ctx)
	target := req.GetNameOrSerial()
	op := &pactv1.RevokeOperatorOp{}
	if _, known := j.fsm.Operator(target); known || serialRE.MatchString(target) {
		op.Serial = target
	} else {
		if err := pki.ValidateName("operator name", target); err != nil {
			return nil, fmt.Errorf("%w: %q is neither an operator name nor a credential serial (see pact admin list)", ErrInvalidArgument, target)
		}
		op.Name = target
	}
	if op.Serial != "" || !req.GetUnrecorded() {
		// Whether the serial (or the name) is recorded decides the
		// answer: ask the leader's state.
		if err := j.readBarrier(ctx); err != nil {
			return nil, err
		}
	}
	if op.Name != "" && !req.GetUnrecorded() {
		if err := j.knownOperatorName(op.Name); err != nil {
			return nil, err
		}
	}
	if _, err := j.propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_RevokeOperator{RevokeOperator: op}}); err != nil {
		return nil, err
	}
	ops, names := j.fsm.Operators()
	out := &pactv1.RevokeOperatorResponse{}
	for _, o := range ops {
		if o.GetRevokedAtUnixNano() != 0 && (o.GetSerial() == op.GetSerial() || (op.GetName() != "" && o.GetName() == op.GetName())) {
			out.Revoked = append(out.Revoked, o)
		}
	}
	for _, n := range names {
		if op.GetName() != "" && n.GetName() == op.GetName() {
			out.Name = n
		}
	}
	j.log.Warn("operator credential revoked", logkey.Actor, p.ID.Name, logkey.Name, op.GetName(), logkey.Serial, op.GetSerial(), logkey.Records, len(out.Revoked))
	return out, nil
}

// knownOperatorName refuses a name that no recorded credential carries and
// that was never revoked: most likely a typo, which revoking would turn
// into a silent no-op. The refusal names the recorded names nearest to it.
// (A credential signed offline and never used is not recorded: the
// operator revokes its name with --unrecorded.)
func (j *Journal) knownOperatorName(name string) error {
	ops, revoked := j.fsm.Operators()
	var names []string
	for _, o := range ops {
		if o.GetName() == name {
			return nil
		}
		if !slices.Contains(names, o.GetName()) {
			names = append(names, o.GetName())
		}
	}
	for _, n := range revoked {
		if n.GetName() == name {
			return nil
		}
	}
	hint := "pact admin list --all shows the recorded names"
	if near := suggest.Closest(name, names); len(near) > 0 {
		hint = "did you mean " + strings.Join(near, " or ") + "? " + hint
	}
	return fmt.Errorf("%w: no recorded operator credential has the name %q; %s. To revoke a name whose credentials were signed offline and never used, run again with --unrecorded", ErrOperatorNotFound, name, hint)
}

// RetireIntermediate retires intermediates named by serial or by journal.
func (s *adminServer) RetireIntermediate(ctx context.Context, req *pactv1.RetireIntermediateRequest) (*pactv1.RetireIntermediateResponse, error) {
	j := s.j
	if len(req.GetTargets()) == 0 {
		return nil, fmt.Errorf("%w: name an intermediate serial or a journal id (see pact journal intermediates)", ErrInvalidArgument)
	}
	if req.GetGraceSeconds() < 0 || (req.GetNow() && req.GetGraceSeconds() > 0) {
		return nil, fmt.Errorf("%w: give either --grace (positive) or --now", ErrInvalidArgument)
	}
	if err := j.readBarrier(ctx); err != nil {
		return nil, err
	}
	var serials []string
	for _, t := range req.GetTargets() {
		found := j.intermediatesOf(t)
		if len(found) == 0 {
			return nil, fmt.Errorf("%w: no intermediate %q: give a serial or a journal id from pact journal intermediates", ErrNotFound, t)
		}
		for _, s := range found {
			if !slices.Contains(serials, s) {
				serials = append(serials, s)
			}
		}
	}
	// Revoked at once, the intermediate of the caller's own credential
	// cuts her off: refused unless the request says so (owncredential.go).
	// With a grace the answer says when it stops working.
	p := principalFrom(ctx)
	cut := func(in *pactv1.Intermediate) bool { return slices.Contains(serials, in.GetSerial()) }
	own := j.callerIntermediate(p)
	if own != nil && !cut(own) {
		own = nil
	}
	if own != nil && req.GetNow() && !req.GetRevokeOwnCredential() && !raftfsm.IntermediateRevoked(own, j.cfg.Clock.Now().UnixNano()) {
		return nil, j.ownCredentialRefusal(p, own, "this retirement revokes at once (--now)", cut)
	}
	retired, unchanged, err := j.retire(ctx, serials, req.GetGraceSeconds(), req.GetNow(), req.GetReason())
	if err != nil {
		return nil, err
	}
	resp := &pactv1.RetireIntermediateResponse{Retired: retired, Unchanged: unchanged}
	resp.OwnCredential = j.ownCredentialAfter(p, own)
	return resp, nil
}

// ownCredentialAfter describes the caller's credential signed by own (nil:
// none) as the registry has its intermediate after a retirement.
func (j *Journal) ownCredentialAfter(p *principal, own *pactv1.Intermediate) *pactv1.OwnCredential {
	if own == nil {
		return nil
	}
	if in, ok := j.fsm.Intermediate(own.GetSerial()); ok {
		own = in
	}
	j.log.Warn("the operator retired the intermediate of her own credential", logkey.Actor, p.ID.Name, logkey.Serial, p.Serial, logkey.IssuerSerial, own.GetSerial(),
		logkey.RevokeAt, time.Unix(0, own.GetRevokeAtUnixNano()).UTC().Format(time.RFC3339))
	return ownCredential(p, own, own.GetRevokeAtUnixNano())
}

// intermediatesOf resolves a serial or a journal id to intermediate serials.
func (j *Journal) intermediatesOf(target string) []string {
	if _, ok := j.fsm.Intermediate(target); ok {
		return []string{target}
	}
	var out []string
	for _, in := range j.fsm.AllIntermediates() {
		if in.GetJournalId() == target {
			out = append(out, in.GetSerial())
		}
	}
	return out
}

// retire commits the retirement of serials and returns their records, and
// the serials it left as they were: retiring already with an earlier (or
// the same) revoke time, or revoked (the state machine's rule, read before
// the command from the leader-confirmed registry).
func (j *Journal) retire(ctx context.Context, serials []string, graceSeconds int64, now bool, reason string) ([]*pactv1.Intermediate, []string, error) {
	p := principalFrom(ctx)
	grace := j.cfg.RetireGrace
	switch {
	case now:
		grace = 0
	case graceSeconds > 0:
		grace = time.Duration(graceSeconds) * time.Second
	}
	if reason == "" {
		reason = "retired by " + p.ID.Name
	}
	revokeAt := j.cfg.Clock.Now().Add(grace).UnixNano()
	var unchanged []string
	for _, s := range serials {
		in, ok := j.fsm.Intermediate(s)
		if !ok {
			continue
		}
		if at := in.GetRevokeAtUnixNano(); (at != 0 && at <= revokeAt) || j.fsm.IsRevoked(s) {
			unchanged = append(unchanged, s)
			continue
		}
		if jc, ok := j.fsm.JournalCA(in.GetIssuerSerial()); ok && jc.GetRevokedAtUnixNano() != 0 {
			// Out of the bundle with its journal CA already.
			unchanged = append(unchanged, s)
		}
	}
	if _, err := j.propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_RetireIntermediate{RetireIntermediate: &pactv1.RetireIntermediateOp{
		Serials: serials, RevokeAtUnixNano: revokeAt, Reason: reason,
	}}}); err != nil {
		return nil, nil, err
	}
	out := make([]*pactv1.Intermediate, 0, len(serials))
	for _, s := range serials {
		if in, ok := j.fsm.Intermediate(s); ok {
			out = append(out, intermediateView(in))
		}
	}
	j.log.Warn("intermediates retired", logkey.Actor, p.ID.Name, logkey.Serials, serials, logkey.RevokeAt, time.Unix(0, revokeAt).UTC().Format(time.RFC3339), logkey.Reason, reason,
		logkey.Count, len(serials)-len(unchanged))
	return out, unchanged, nil
}

// intermediateView drops the DER: operators see serials and dates.
func intermediateView(in *pactv1.Intermediate) *pactv1.Intermediate {
	return &pactv1.Intermediate{
		JournalId: in.GetJournalId(), Serial: in.GetSerial(), NotAfterUnix: in.GetNotAfterUnix(),
		RetiredAtUnixNano: in.GetRetiredAtUnixNano(), RevokeAtUnixNano: in.GetRevokeAtUnixNano(),
		RetiredBy: in.GetRetiredBy(), RetireReason: in.GetRetireReason(), IssuerSerial: in.GetIssuerSerial(),
	}
}

func (s *adminServer) ListIntermediates(context.Context, *pactv1.ListIntermediatesRequest) (*pactv1.ListIntermediatesResponse, error) {
	all := s.j.fsm.AllIntermediates()
	now := s.j.cfg.Clock.Now()
	out := &pactv1.ListIntermediatesResponse{ServerTimeUnixNano: now.UnixNano(), NodeCertificates: s.j.fsm.NodeCertIssuers(now.Unix())}
	for _, in := range all {
		out.Intermediates = append(out.Intermediates, intermediateView(in))
	}
	for _, in := range currentIntermediates(all, s.j.fsm.Journal) {
		out.CurrentIntermediates = append(out.CurrentIntermediates, in.GetSerial())
	}
	slices.Sort(out.CurrentIntermediates)
	for _, jc := range s.j.fsm.AllJournalCAs() {
		out.JournalCas = append(out.JournalCas, journalCAView(jc))
	}
	return out, nil
}
