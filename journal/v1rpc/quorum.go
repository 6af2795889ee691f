package v1rpc

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/suggest"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/raftnode"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// The AdminService's calls about the quorum's authorities: operator
// credentials, intermediates, journal CAs, and the journals themselves.

// ErrOperatorNotFound: pact admin revoke NAME of a name no recorded
// operator credential carries (a typo, most likely). It is an
// ErrNotFound.
var ErrOperatorNotFound = fmt.Errorf("%w: no such operator", ErrNotFound)

// AuthorityRecords is the registry's record of who may act: operator
// credentials, intermediates, journal CAs and journals (raftfsm.FSM).
type AuthorityRecords interface {
	Operator(serial string) (*pactv1.Operator, bool)
	Operators() ([]*pactv1.Operator, []*pactv1.OperatorNameRevocation)
	Intermediate(serial string) (*pactv1.Intermediate, bool)
	AllIntermediates() []*pactv1.Intermediate
	IsRevoked(serial string) bool
	JournalCA(serial string) (*pactv1.JournalCA, bool)
	AllJournalCAs() []*pactv1.JournalCA
	BoundJournalCA(journalID string) (*pactv1.JournalCA, bool)
	HasJournalCAs() bool
	Journal(id string) (*pactv1.JournalInfo, bool)
	NodeCertIssuers(nowUnix int64) map[string]uint32
}

// QuorumRaft is the Raft node as the quorum's calls use it (raftnode.Node):
// the peer service's reads and the membership changes.
type QuorumRaft interface {
	RaftPeer
	NotLeaderError() error
	Servers() ([]raft.Server, uint64, error)
	AddNonvoter(id, addr string) error
	IsVoter(id string) bool
	RemoveServer(id string) error
	RefusingVoters(ctx context.Context, members []*pactv1.JournalMember) []string
	// LeaderRead runs read while this journal provably leads (after a
	// barrier); TermOf is the term of the entry at index.
	LeaderRead(what string, read func() error) error
	TermOf(index uint64) uint64
	// ProbeJournalChain dials a journal about to join and returns the
	// chain it presents.
	ProbeJournalChain(ctx context.Context, id, addr string) ([]*x509.Certificate, error)
}

// Authority is this journal's CA as the quorum's calls use it.
type Authority interface {
	Root() *x509.Certificate
	Roots() []*x509.Certificate
	IntermediateSerial() string
	// SignOperator signs an operator credential with the live
	// intermediate (the caller has checked CheckSigning and waited for
	// AwaitLiveIntermediate).
	SignOperator(csr *ca.CSR, name, role string, lifetime time.Duration) (*x509.Certificate, ca.OperatorIssuer, error)
	// CheckSigning refuses while this journal's journal CA is revoked;
	// RevokedJournalCA is that journal CA, or nil.
	CheckSigning() error
	RevokedJournalCA() *pactv1.JournalCA
	AwaitLiveIntermediate(ctx context.Context) error
}

// QuorumConfig is what the quorum's calls depend on beside Config's.
type QuorumConfig struct {
	Config
	Raft        QuorumRaft
	Records     AuthorityRecords
	Authority   Authority
	Federations FederationRecords
	Federation  FederationWaker
	Snapshots   Snapshotter
	// Domain is the pact domain; GRPCAddr this journal's address as the
	// other journals and operators reach it; RaftListen its Raft address
	// ("" for a journal alone, without a Raft network).
	Domain, GRPCAddr, RaftListen string
	// RetireGrace is how long a retired intermediate stays valid unless
	// the request says; OperatorLifetime the default lifetime of an
	// operator credential, MaxOperatorLifetime the longest.
	RetireGrace, OperatorLifetime, MaxOperatorLifetime time.Duration
}

// Validate says which dependency is missing.
func (c QuorumConfig) Validate() error {
	var errs []error
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Raft == nil || c.Records == nil || c.Authority == nil || c.Federations == nil || c.Federation == nil || c.Snapshots == nil {
		errs = append(errs, errors.New("v1rpc: the quorum's calls need Raft, Records, Authority, Federations, Federation and Snapshots"))
	}
	if c.Domain == "" {
		errs = append(errs, errors.New("v1rpc: Domain is required"))
	}
	if c.OperatorLifetime <= 0 || c.MaxOperatorLifetime < c.OperatorLifetime || c.RetireGrace < 0 {
		errs = append(errs, errors.New("v1rpc: operator lifetimes must be positive, the default at most the longest; the retire grace not negative"))
	}
	return errors.Join(errs...)
}

// Quorum is the AdminService's calls about the quorum itself. It embeds
// no UnimplementedAdminServiceServer: the journal's AdminService server
// embeds it beside NodeAdmin, which does.
type Quorum struct {
	cfg QuorumConfig
	// removals are the journals this one removed while leading, when.
	removals removals
}

// NewQuorum returns the quorum calls' handlers over cfg's dependencies.
func NewQuorum(cfg QuorumConfig) (*Quorum, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Quorum{cfg: cfg}, nil
}

// membersBelow names the members whose binaries speak less than level.
func (q *Quorum) membersBelow(ctx context.Context, level uint32) []string {
	members, err := q.cfg.Raft.Members(ctx)
	if err != nil {
		return nil
	}
	return raftnode.MembersBelow(members, level)
}

// JournalCARecord is the journal CA as a publish carries it for Raft to
// record at its first use (raftfsm recordJournalCA); nil in the legacy
// layout.
func JournalCARecord(journalID string, jc *x509.Certificate) *pactv1.JournalCA {
	if jc == nil {
		return nil
	}
	return &pactv1.JournalCA{JournalId: journalID, Serial: pki.SerialHex(jc.SerialNumber), Der: jc.Raw, NotAfterUnix: jc.NotAfter.Unix()}
}

// Operator credentials and intermediates: everything that authenticates can
// be revoked in Raft (docs/security.md).

// IssueOperator signs an operator credential for the caller's CSR with
// this journal's current intermediate (the domain root in the legacy
// layout) and returns it only once its record has committed, so no
// credential exists that pact admin list does not show. The credential
// ends with the intermediate at the latest: a shorter life than asked is
// logged, and the record answered carries the real not_after.
func (q *Quorum) IssueOperator(ctx context.Context, req *pactv1.IssueOperatorRequest) (*pactv1.IssueOperatorResponse, error) {
	p := auth.FromContext(ctx)
	name, role := req.GetName(), req.GetRole()
	if name == "" {
		name = p.ID.Name
	}
	if role == "" && name == p.ID.Name {
		role = p.Role
	}
	if !auth.PlatformAdmin(p.Role) && (name != p.ID.Name || role != p.Role) {
		return nil, fmt.Errorf("%w: role %s may only renew its own credential (%s, role %s); a platform-admin issues others", auth.ErrPermission, p.Role, p.ID.Name, p.Role)
	}
	lifetime := time.Duration(req.GetLifetimeSeconds()) * time.Second
	switch {
	case req.GetLifetimeSeconds() == 0:
		lifetime = q.cfg.OperatorLifetime
	case req.GetLifetimeSeconds() < 0 || lifetime > q.cfg.MaxOperatorLifetime:
		return nil, fmt.Errorf("%w: lifetime %ds: at most %v (--max-operator-lifetime)", ErrInvalidArgument, req.GetLifetimeSeconds(), q.cfg.MaxOperatorLifetime)
	}
	csr, err := ca.ParseCSR(req.GetCsrDer())
	if err != nil {
		return nil, err
	}
	if err := q.cfg.Authority.CheckSigning(); err != nil {
		return nil, err
	}
	// Signed by a published intermediate that is not retiring, as an
	// agent's certificate is: a credential renewed right after its
	// journal's intermediate was retired (a root rollover's step 4) lands
	// on the new one, not on the one that goes at the end of the grace.
	if err := q.cfg.Authority.AwaitLiveIntermediate(ctx); err != nil {
		return nil, err
	}
	asked := q.cfg.Clock.Now().Add(lifetime)
	cert, by, err := q.cfg.Authority.SignOperator(csr, name, role, lifetime)
	if err != nil {
		return nil, err
	}
	rec := auth.OperatorRecord(cert, name, role, p.Actor())
	rec.IssuerSerial, rec.JournalCaSerial, rec.RootSigned = by.IntermediateSerial, by.JournalCASerial, by.Root
	if _, err := q.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_RecordOperator{RecordOperator: &pactv1.RecordOperatorOp{Operator: rec}}}); err != nil {
		// The certificate never leaves: its record did not commit.
		return nil, err
	}
	if got, ok := q.cfg.Records.Operator(rec.GetSerial()); ok {
		rec = got
	}
	q.cfg.Logger.Info("operator credential issued", logkey.Actor, p.ID.Name, logkey.Operator, name, logkey.Role, role, logkey.Serial, rec.GetSerial(),
		logkey.NotAfter, cert.NotAfter.UTC().Format(time.RFC3339))
	if cert.NotAfter.Before(asked.Add(-time.Minute)) {
		q.cfg.Logger.Info("the operator credential ends with the journal intermediate that signed it, before the lifetime asked",
			logkey.Operator, name, logkey.Serial, rec.GetSerial(), logkey.NotAfter, cert.NotAfter.UTC().Format(time.RFC3339),
			logkey.IssuerSerial, by.IntermediateSerial)
	}
	return &pactv1.IssueOperatorResponse{CertDer: cert.Raw, Operator: rec}, nil
}

func (q *Quorum) ListOperators(_ context.Context, req *pactv1.ListOperatorsRequest) (*pactv1.ListOperatorsResponse, error) {
	ops, names := q.cfg.Records.Operators()
	now := q.cfg.Clock.Now().Unix()
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
func (q *Quorum) RevokeOperator(ctx context.Context, req *pactv1.RevokeOperatorRequest) (*pactv1.RevokeOperatorResponse, error) {
	p := auth.FromContext(ctx)
	target := req.GetNameOrSerial()
	op := &pactv1.RevokeOperatorOp{}
	if _, known := q.cfg.Records.Operator(target); known || serialRE.MatchString(target) {
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
		if err := q.cfg.Confirmer.ReadBarrier(ctx); err != nil {
			return nil, err
		}
	}
	if op.Name != "" && !req.GetUnrecorded() {
		if err := q.knownOperatorName(op.Name); err != nil {
			return nil, err
		}
	}
	if _, err := q.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_RevokeOperator{RevokeOperator: op}}); err != nil {
		return nil, err
	}
	ops, names := q.cfg.Records.Operators()
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
	q.cfg.Logger.Warn("operator credential revoked", logkey.Actor, p.ID.Name, logkey.Name, op.GetName(), logkey.Serial, op.GetSerial(), logkey.Records, len(out.Revoked))
	return out, nil
}

// knownOperatorName refuses a name that no recorded credential carries and
// that was never revoked: most likely a typo, which revoking would turn
// into a silent no-op. The refusal names the recorded names nearest to it.
// (A credential signed offline and never used is not recorded: the
// operator revokes its name with --unrecorded.)
func (q *Quorum) knownOperatorName(name string) error {
	ops, revoked := q.cfg.Records.Operators()
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
func (q *Quorum) RetireIntermediate(ctx context.Context, req *pactv1.RetireIntermediateRequest) (*pactv1.RetireIntermediateResponse, error) {
	if len(req.GetTargets()) == 0 {
		return nil, fmt.Errorf("%w: name an intermediate serial or a journal id (see pact journal intermediates)", ErrInvalidArgument)
	}
	if req.GetGraceSeconds() < 0 || (req.GetNow() && req.GetGraceSeconds() > 0) {
		return nil, fmt.Errorf("%w: give either --grace (positive) or --now", ErrInvalidArgument)
	}
	if err := q.cfg.Confirmer.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	var serials []string
	for _, t := range req.GetTargets() {
		found := q.intermediatesOf(t)
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
	// cuts her off: refused unless the request says so (ownCredentialRefusal).
	// With a grace the answer says when it stops working.
	p := auth.FromContext(ctx)
	cut := func(in *pactv1.Intermediate) bool { return slices.Contains(serials, in.GetSerial()) }
	own := q.callerIntermediate(p)
	if own != nil && !cut(own) {
		own = nil
	}
	if own != nil && req.GetNow() && !req.GetRevokeOwnCredential() && !raftfsm.IntermediateRevoked(own, q.cfg.Clock.Now().UnixNano()) {
		return nil, q.ownCredentialRefusal(p, own, "this retirement revokes at once (--now)", cut)
	}
	retired, unchanged, err := q.retire(ctx, serials, req.GetGraceSeconds(), req.GetNow(), req.GetReason())
	if err != nil {
		return nil, err
	}
	resp := &pactv1.RetireIntermediateResponse{Retired: retired, Unchanged: unchanged}
	resp.OwnCredential = q.ownCredentialAfter(p, own)
	return resp, nil
}

// ownCredentialAfter describes the caller's credential signed by own (nil:
// none) as the registry has its intermediate after a retirement.
func (q *Quorum) ownCredentialAfter(p *auth.Principal, own *pactv1.Intermediate) *pactv1.OwnCredential {
	if own == nil {
		return nil
	}
	if in, ok := q.cfg.Records.Intermediate(own.GetSerial()); ok {
		own = in
	}
	q.cfg.Logger.Warn("the operator retired the intermediate of her own credential", logkey.Actor, p.ID.Name, logkey.Serial, p.Serial, logkey.IssuerSerial, own.GetSerial(),
		logkey.RevokeAt, time.Unix(0, own.GetRevokeAtUnixNano()).UTC().Format(time.RFC3339))
	return ownCredential(p, own, own.GetRevokeAtUnixNano())
}

// intermediatesOf resolves a serial or a journal id to intermediate serials.
func (q *Quorum) intermediatesOf(target string) []string {
	if _, ok := q.cfg.Records.Intermediate(target); ok {
		return []string{target}
	}
	var out []string
	for _, in := range q.cfg.Records.AllIntermediates() {
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
func (q *Quorum) retire(ctx context.Context, serials []string, graceSeconds int64, now bool, reason string) ([]*pactv1.Intermediate, []string, error) {
	p := auth.FromContext(ctx)
	grace := q.cfg.RetireGrace
	switch {
	case now:
		grace = 0
	case graceSeconds > 0:
		grace = time.Duration(graceSeconds) * time.Second
	}
	if reason == "" {
		reason = "retired by " + p.ID.Name
	}
	revokeAt := q.cfg.Clock.Now().Add(grace).UnixNano()
	var unchanged []string
	for _, s := range serials {
		in, ok := q.cfg.Records.Intermediate(s)
		if !ok {
			continue
		}
		if at := in.GetRevokeAtUnixNano(); (at != 0 && at <= revokeAt) || q.cfg.Records.IsRevoked(s) {
			unchanged = append(unchanged, s)
			continue
		}
		if jc, ok := q.cfg.Records.JournalCA(in.GetIssuerSerial()); ok && jc.GetRevokedAtUnixNano() != 0 {
			// Out of the bundle with its journal CA already.
			unchanged = append(unchanged, s)
		}
	}
	if _, err := q.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_RetireIntermediate{RetireIntermediate: &pactv1.RetireIntermediateOp{
		Serials: serials, RevokeAtUnixNano: revokeAt, Reason: reason,
	}}}); err != nil {
		return nil, nil, err
	}
	out := make([]*pactv1.Intermediate, 0, len(serials))
	for _, s := range serials {
		if in, ok := q.cfg.Records.Intermediate(s); ok {
			out = append(out, intermediateView(in))
		}
	}
	q.cfg.Logger.Warn("intermediates retired", logkey.Actor, p.ID.Name, logkey.Serials, serials, logkey.RevokeAt, time.Unix(0, revokeAt).UTC().Format(time.RFC3339), logkey.Reason, reason,
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

func (q *Quorum) ListIntermediates(context.Context, *pactv1.ListIntermediatesRequest) (*pactv1.ListIntermediatesResponse, error) {
	all := q.cfg.Records.AllIntermediates()
	now := q.cfg.Clock.Now()
	out := &pactv1.ListIntermediatesResponse{ServerTimeUnixNano: now.UnixNano(), NodeCertificates: q.cfg.Records.NodeCertIssuers(now.Unix())}
	for _, in := range all {
		out.Intermediates = append(out.Intermediates, intermediateView(in))
	}
	for _, in := range currentIntermediates(all, q.cfg.Records.Journal) {
		out.CurrentIntermediates = append(out.CurrentIntermediates, in.GetSerial())
	}
	slices.Sort(out.CurrentIntermediates)
	for _, jc := range q.cfg.Records.AllJournalCAs() {
		out.JournalCas = append(out.JournalCas, journalCAView(jc))
	}
	return out, nil
}

// An operator who revokes the journal CA, or retires at once the
// intermediate, that signed her own credential cuts herself off: the call
// is answered, and her next one fails its TLS handshake. The journal,
// which knows her chain, refuses such a change unless the request says it
// includes her credential (pact ... --yes-including-my-credential), and
// says what to run first: pact admin renew, through a journal that signs
// under a chain the change leaves.

// ErrRevokesOwnCredential: the change would cut off the caller's own
// operator credential and the request did not say so (FailedPrecondition,
// REVOKES_OWN_CREDENTIAL).
var ErrRevokesOwnCredential = errors.New("journal: the change revokes the caller's own credential")

// ownCredentialFlag is the CLI flag that confirms such a change.
const ownCredentialFlag = "--yes-including-my-credential"

// callerIntermediate returns the journal intermediate that signed the
// caller's operator credential, as the registry records it: from the
// credential's record (issuer_serial) when it holds one, else the
// registry's intermediate whose key signed the certificate. nil for a
// credential a domain root signed itself, and for any other caller.
func (q *Quorum) callerIntermediate(p *auth.Principal) *pactv1.Intermediate {
	if p == nil || p.Leaf == nil {
		return nil
	}
	if o, ok := q.cfg.Records.Operator(p.Serial); ok {
		if o.GetRootSigned() {
			return nil
		}
		if in, ok := q.cfg.Records.Intermediate(o.GetIssuerSerial()); ok {
			return in
		}
	}
	// A record made before pact kept the issuer: the signature says.
	for _, in := range q.cfg.Records.AllIntermediates() {
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
func ownCredential(p *auth.Principal, in *pactv1.Intermediate, stopsAt int64) *pactv1.OwnCredential {
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
func (q *Quorum) ownCredentialRefusal(p *auth.Principal, in *pactv1.Intermediate, what string, cut func(*pactv1.Intermediate) bool) error {
	return fmt.Errorf("%w: nothing was changed: your own credential %s (%s) was signed by %s, which %s: from then on it would be refused (its next call fails the TLS handshake with bad certificate). To cut it off anyway, add %s (then only another platform-admin's credential, or one the ceremony signs with pact ca issue-admin, gets you back in). %s",
		ErrRevokesOwnCredential, p.Serial, p.ID.Name, chainOf(in), what, ownCredentialFlag, q.renewAdvice(cut))
}

// renewAdvice says where the caller renews her credential onto a chain a
// change leaves: a journal whose current intermediate is live and not cut,
// this one first.
func (q *Quorum) renewAdvice(cut func(*pactv1.Intermediate) bool) string {
	now := q.cfg.Clock.Now().UnixNano()
	usable := func(in *pactv1.Intermediate) bool {
		if in == nil || cut(in) || in.GetRevokeAtUnixNano() != 0 || in.GetNotAfterUnix() < now/1e9 || q.cfg.Records.IsRevoked(in.GetSerial()) {
			return false
		}
		jc, ok := q.cfg.Records.JournalCA(in.GetIssuerSerial())
		return !ok || jc.GetRevokedAtUnixNano() == 0
	}
	if own, ok := q.cfg.Records.Intermediate(q.cfg.Authority.IntermediateSerial()); ok && usable(own) && q.cfg.Authority.CheckSigning() == nil {
		return fmt.Sprintf("Else renew it first through this journal, %s (%s), then run this again with the new credential: pact admin renew --journal %s", q.cfg.JournalID, signsUnder(own), q.cfg.GRPCAddr)
	}
	cur := currentIntermediates(q.cfg.Records.AllIntermediates(), q.cfg.Records.Journal)
	ids := make([]string, 0, len(cur))
	for id := range cur {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		in := cur[id]
		ji, ok := q.cfg.Records.Journal(id)
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

// RevokeJournalCA revokes journal CAs named by serial, or every journal CA
// the registry holds for a journal id.
func (q *Quorum) RevokeJournalCA(ctx context.Context, req *pactv1.RevokeJournalCARequest) (*pactv1.RevokeJournalCAResponse, error) {
	p := auth.FromContext(ctx)
	if len(req.GetTargets()) == 0 {
		return nil, fmt.Errorf("%w: name a journal CA serial or a journal id (see pact journal intermediates)", ErrInvalidArgument)
	}
	// Which serials a target names is the leader's state's to say.
	if err := q.cfg.Confirmer.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	var serials []string
	for _, t := range req.GetTargets() {
		found := q.journalCAsOf(t)
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
	// unless the request says so (ownCredentialRefusal).
	cut := func(in *pactv1.Intermediate) bool { return slices.Contains(serials, in.GetIssuerSerial()) }
	own := q.callerIntermediate(p)
	if own != nil && cut(own) && !req.GetRevokeOwnCredential() {
		if jc, _ := q.cfg.Records.JournalCA(own.GetIssuerSerial()); jc.GetRevokedAtUnixNano() == 0 {
			return nil, q.ownCredentialRefusal(p, own, "this revocation takes out of the trust bundle at once", cut)
		}
	}
	// The other operators cut off: their valid credentials whose recorded
	// chain goes with it, of names left with no other valid credential (a
	// credential renewed onto another chain keeps its name in).
	var cutOff []*pactv1.Operator
	kept := map[string]bool{}
	ops, _ := q.cfg.Records.Operators()
	for _, o := range ops {
		if o.GetRevokedAtUnixNano() != 0 || o.GetNotAfterUnix() < q.cfg.Clock.Now().Unix() {
			continue
		}
		jc, ok := q.cfg.Records.JournalCA(o.GetJournalCaSerial())
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
	if _, err := q.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_RevokeJournalCa{RevokeJournalCa: &pactv1.RevokeJournalCAOp{
		Serials: serials, Reason: reason,
	}}}); err != nil {
		return nil, err
	}
	out := &pactv1.RevokeJournalCAResponse{Operators: others}
	var journals []string
	for _, s := range serials {
		if jc, ok := q.cfg.Records.JournalCA(s); ok {
			out.Revoked = append(out.Revoked, journalCAView(jc))
			if !slices.Contains(journals, jc.GetJournalId()) {
				journals = append(journals, jc.GetJournalId())
			}
		}
	}
	// What each journal concerned signs under now: the journal CA it is
	// bound to, revoked (it signs nothing) or a live re-issue.
	for _, id := range journals {
		if jc, ok := q.cfg.Records.BoundJournalCA(id); ok {
			out.Bound = append(out.Bound, journalCAView(jc))
		}
	}
	for _, in := range q.cfg.Records.AllIntermediates() {
		if slices.Contains(serials, in.GetIssuerSerial()) {
			out.Intermediates = append(out.Intermediates, intermediateView(in))
		}
	}
	if own != nil && cut(own) {
		out.OwnCredential = ownCredential(p, own, q.cfg.Clock.Now().UnixNano())
		if jc, ok := q.cfg.Records.JournalCA(own.GetIssuerSerial()); ok && jc.GetRevokedAtUnixNano() != 0 {
			out.OwnCredential.StopsAtUnixNano = jc.GetRevokedAtUnixNano()
		}
		q.cfg.Logger.Warn("the operator revoked the journal CA above her own credential (--yes-including-my-credential)", logkey.Actor, p.ID.Name, logkey.Serial, p.Serial, logkey.IssuerSerial, own.GetSerial())
	}
	q.cfg.Logger.Warn("journal CAs revoked", logkey.Actor, p.ID.Name, logkey.Serials, serials, logkey.Records, len(out.GetIntermediates()), logkey.Reason, reason)
	return out, nil
}

// journalCAsOf resolves a serial or a journal id to journal CA serials.
func (q *Quorum) journalCAsOf(target string) []string {
	if _, ok := q.cfg.Records.JournalCA(target); ok {
		return []string{target}
	}
	var out []string
	for _, jc := range q.cfg.Records.AllJournalCAs() {
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

// Peers are what Raft records (docs/security.md, "Peers are what Raft
// records"): a journal id is bound to one journal CA, and only a chain
// through it is that journal. The binding moves at a journal's first
// publish, to a re-issue with the same key (raftfsm), and on an
// operator's word: here, when pact journal add binds a new journal (or a
// replaced host) to the journal CA it presents, and when pact journal
// record-ca binds one the ceremony made with a new key.

// bindJoiningJournal binds journal id, about to be added at addr, to the
// journal CA it presents there (expect, if given, must be that
// certificate), before it becomes a member: a journal id re-used by a
// replaced host supersedes the old host's journal CA the moment this
// commits. It returns the record (nil for a journal in the layout before
// journal CAs, in a quorum still in that layout).
func (q *Quorum) bindJoiningJournal(ctx context.Context, id, addr string, expect []byte) (*pactv1.JournalCA, error) {
	chain, err := q.cfg.Raft.ProbeJournalChain(ctx, id, addr)
	if err != nil {
		return nil, err
	}
	var jc *x509.Certificate
	for _, c := range chain[1:] {
		if _, _, ok := caprofile.JournalOf(c); ok {
			jc = c
		}
	}
	if jc == nil {
		if len(expect) > 0 || q.cfg.Records.HasJournalCAs() {
			return nil, fmt.Errorf("%w: journal %s at %s presents no journal CA (the domain root signed its intermediate), and this quorum's journals have journal CAs: give it one from the ceremony (docs/ceremony.md) and start it with --journal-ca-cert", raftnode.ErrMembership, id, addr)
		}
		return nil, nil
	}
	if len(expect) > 0 && !bytes.Equal(expect, jc.Raw) {
		return nil, fmt.Errorf("%w: journal %s at %s presents journal CA %s, not the one given with --journal-ca: check the address, and which host answers there", raftnode.ErrMembership, id, addr, pki.SerialHex(jc.SerialNumber))
	}
	if q.cfg.Raft.QuorumLevel() < raftfsm.LevelJournalBinding {
		// A quorum still at level 1 (an upgrade from 0.1.0 under way)
		// cannot record a binding: its journals of the previous release
		// would stop at the command. A new journal id is bound at its
		// first publish, as that release does; an id bound to another
		// journal CA (a replaced host) could never be a peer of this
		// release's journals without the binding, so it waits for the
		// level.
		if bound, ok := q.cfg.Records.BoundJournalCA(id); ok && bound.GetSerial() != pki.SerialHex(jc.SerialNumber) {
			return nil, &raftfsm.QuorumVersionError{Feature: "adding journal " + id + " with a journal CA other than the one it is bound to (" + bound.GetSerial() + ", a replaced host)",
				Need: raftfsm.LevelJournalBinding, Have: q.cfg.Raft.QuorumLevel(), Below: q.membersBelow(ctx, raftfsm.LevelJournalBinding)}
		}
		q.cfg.Logger.Warn("journal added without binding its journal CA: the quorum runs at feature level 1 until every journal is upgraded; its first publish records the journal CA", logkey.Journal, id, logkey.Serial, pki.SerialHex(jc.SerialNumber))
		return nil, nil
	}
	return q.bindJournalCA(ctx, id, jc, "pact journal add "+id+" "+addr)
}

// bindJournalCA records jc as the journal CA journal id is bound to, on
// the calling operator's word, after checking it is one the ceremony
// makes for that journal under a root this journal trusts.
func (q *Quorum) bindJournalCA(ctx context.Context, id string, jc *x509.Certificate, reason string) (*pactv1.JournalCA, error) {
	if err := caprofile.CheckJournalCAProfile(jc, q.cfg.Domain); err != nil {
		return nil, fmt.Errorf("%w: journal %s's journal CA %s: %w", ErrInvalidArgument, id, pki.SerialHex(jc.SerialNumber), err)
	}
	if of, _, _ := caprofile.JournalOf(jc); of != id {
		return nil, fmt.Errorf("%w: the journal CA is journal %s's, not %s's", ErrInvalidArgument, of, id)
	}
	if !pki.SignedByARoot(jc, q.cfg.Authority.Roots()) {
		return nil, fmt.Errorf("%w: journal CA %s is not signed by a domain root this journal trusts (--root-cert)", ErrInvalidArgument, pki.SerialHex(jc.SerialNumber))
	}
	if now := q.cfg.Clock.Now(); now.Before(jc.NotBefore) || now.After(jc.NotAfter) {
		return nil, fmt.Errorf("%w: journal CA %s is valid from %s to %s only", ErrInvalidArgument, pki.SerialHex(jc.SerialNumber), jc.NotBefore.UTC(), jc.NotAfter.UTC())
	}
	rec := JournalCARecord(id, jc)
	if bound, ok := q.cfg.Records.BoundJournalCA(id); ok && bound.GetSerial() == rec.GetSerial() && bytes.Equal(bound.GetDer(), rec.GetDer()) {
		return bound, nil
	}
	actor := "journal/" + q.cfg.JournalID
	if p := auth.FromContext(ctx); p != nil {
		actor = p.Actor()
	}
	if _, err := q.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: actor, Op: &pactv1.Command_RecordJournalCa{RecordJournalCa: &pactv1.RecordJournalCAOp{JournalCa: rec, Reason: reason}}}); err != nil {
		return nil, err
	}
	q.cfg.Logger.Warn("journal id bound to a journal CA", logkey.Journal, id, logkey.Serial, rec.GetSerial(), logkey.Actor, actor, logkey.Reason, reason)
	bound, _ := q.cfg.Records.BoundJournalCA(id)
	return bound, nil
}

// RecordJournalCA binds a journal id to a journal CA the ceremony signed
// with a new key: a host replaced in place, or a journal CA re-issued
// after its revocation. The journal takes it within seconds (it re-reads
// --journal-ca-cert while the quorum refuses its old one).
func (q *Quorum) RecordJournalCA(ctx context.Context, req *pactv1.RecordJournalCARequest) (*pactv1.RecordJournalCAResponse, error) {
	id := req.GetJournalId()
	if err := pki.ValidateName("journal id", id); err != nil {
		return nil, err
	}
	jc, err := x509.ParseCertificate(req.GetDer())
	if err != nil {
		return nil, fmt.Errorf("%w: the journal CA certificate does not parse: %v", ErrInvalidArgument, err)
	}
	// The journal CAs it supersedes are the leader's state's to say.
	if err := q.cfg.Confirmer.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	if err := q.cfg.Levels.RequireLevel(ctx, raftfsm.LevelJournalBinding, "pact journal record-ca"); err != nil {
		return nil, err
	}
	before, hadOne := q.cfg.Records.BoundJournalCA(id)
	reason := req.GetReason()
	if reason == "" {
		reason = "pact journal record-ca"
	}
	rec, err := q.bindJournalCA(ctx, id, jc, reason)
	if err != nil {
		return nil, err
	}
	out := &pactv1.RecordJournalCAResponse{JournalCa: journalCAView(rec)}
	if hadOne && before.GetSerial() != rec.GetSerial() {
		out.Superseded = append(out.Superseded, journalCAView(before))
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// Adding and removing journals (pact journal add, remove): checked here,
// carried out by the Raft node.

func downList(down []string) string {
	if len(down) == 0 {
		return "none unreachable"
	}
	return strings.Join(down, ", ") + " unreachable"
}

func (q *Quorum) AddJournal(ctx context.Context, req *pactv1.AddJournalRequest) (*pactv1.AddJournalResponse, error) {
	id, addr := req.GetJournalId(), req.GetRaftAddr()
	if err := pki.ValidateName("journal id", id); err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("%w: raft address %q: want host:port", ErrInvalidArgument, addr)
	}
	if q.cfg.RaftListen == "" {
		return nil, fmt.Errorf("%w: journal %s runs alone without --raft-listen (a development journal): it has no Raft network, so journal %s could never reach it, and a second voter it cannot reach would leave it without a majority for good. To run a quorum, start every journal with --raft-listen and --initial-cluster (docs/quorum.md)", raftnode.ErrMembership, q.cfg.JournalID, id)
	}
	if !q.cfg.Raft.IsLeader() {
		return nil, q.cfg.Raft.NotLeaderError()
	}
	servers, _, err := q.cfg.Raft.Servers()
	if err != nil {
		return nil, err
	}
	for _, srv := range servers {
		switch {
		case string(srv.ID) == id && string(srv.Address) != addr:
			return nil, fmt.Errorf("%w: journal %s is already a member at %s; remove it first to move it", raftnode.ErrMembership, id, srv.Address)
		case string(srv.ID) != id && string(srv.Address) == addr:
			return nil, fmt.Errorf("%w: raft address %s belongs to journal %s", raftnode.ErrMembership, addr, srv.ID)
		case string(srv.ID) == id:
			// Already a member: re-running add is safe; a non-voter is
			// promoted by the leader once caught up.
			members, err := q.cfg.Raft.Members(ctx)
			return &pactv1.AddJournalResponse{Members: members}, err
		}
	}
	if err := q.removals.awaitQuiet(ctx, id, addr, time.Now()); err != nil {
		return nil, err
	}
	// Probed, and bound to the journal CA it presents, before it is a
	// member: from here on only a chain through that journal CA is id.
	bound, err := q.bindJoiningJournal(ctx, id, addr, req.GetExpectJournalCaDer())
	if err != nil {
		return nil, err
	}
	members, err := q.cfg.Raft.Members(ctx)
	if err != nil {
		return nil, err
	}
	voters, reachable, down := raftnode.QuorumArithmetic(members)
	if need := raftnode.Majority(voters + 1); reachable+1 < need {
		if !req.GetForce() {
			return nil, fmt.Errorf("%w: with %s the quorum would have %d voters, and %d of them must be up to elect a leader; %d of the %d voters answer now (%s), so with %s there would be %d: one more failure or restart and the quorum could not elect a leader. Bring the unreachable journals back, or remove the dead ones first (pact journal remove ID); --force adds anyway, and then the quorum stops accepting writes whenever fewer than %d journals are up", raftnode.ErrMembership, id, voters+1, need, reachable, voters, downList(down), id, reachable+1, need)
		}
		q.cfg.Logger.Warn("adding a journal although the reachable voters are not a safe majority (--force)", logkey.Journal, id, logkey.VotersAfter, voters+1, logkey.ReachableAfter, reachable+1)
	}
	// A non-voter first: it copies the registry without counting towards
	// the majority, so a slow or wrong new journal cannot stall commits.
	// The leader's promote loop makes it a voter once it has caught up.
	if err := q.cfg.Raft.AddNonvoter(id, addr); err != nil {
		return nil, err
	}
	q.cfg.Logger.Info("journal added to the quorum as a non-voter; it becomes a voter once caught up", logkey.Journal, id, logkey.RaftAddr, addr, logkey.Actor, auth.FromContext(ctx).ID.Name, logkey.Forced, req.GetForce())
	// Wait briefly for the promotion, so a small registry is answered
	// with the new voter in place.
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for wait.Err() == nil && !q.cfg.Raft.IsVoter(id) {
		select {
		case <-wait.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	members, err = q.cfg.Raft.Members(ctx)
	resp := &pactv1.AddJournalResponse{Members: members}
	if bound != nil {
		resp.JournalCa = journalCAView(bound)
	}
	return resp, err
}

func (q *Quorum) RemoveJournal(ctx context.Context, req *pactv1.RemoveJournalRequest) (*pactv1.RemoveJournalResponse, error) {
	id := req.GetJournalId()
	if !q.cfg.Raft.IsLeader() {
		return nil, q.cfg.Raft.NotLeaderError()
	}
	if jc := q.cfg.Authority.RevokedJournalCA(); id == q.cfg.JournalID && jc != nil {
		// The journal to take out leads, but its journal CA was revoked:
		// the other journals drop its Raft connections, so it could not
		// commit its own removal (the change would end as OUTCOME_UNKNOWN)
		// and it loses the leadership within seconds. The leader they
		// elect removes it (UNAVAILABLE: the CLI moves on).
		return nil, fmt.Errorf("%w: journal %s leads, but its journal CA %s was revoked: the other journals no longer take it as a peer, so it cannot commit its own removal, and it steps down within seconds. Run the remove again against the other journals once they have elected a leader (pact journal status)", raftnode.ErrNoLeader, id, jc.GetSerial())
	}
	members, err := q.cfg.Raft.Members(ctx)
	if err != nil {
		return nil, err
	}
	var target *pactv1.JournalMember
	for _, m := range members {
		if m.GetJournalId() == id {
			target = m
		}
	}
	if target == nil {
		return nil, fmt.Errorf("%w: no journal %q in the quorum; see pact journal status", ErrNotFound, id)
	}
	voters, reachable, down := raftnode.QuorumArithmetic(members)
	if target.GetVoter() {
		voters--
		if target.GetReachable() {
			reachable--
		} else {
			down = slices.DeleteFunc(down, func(d string) bool { return d == id })
		}
		if voters == 0 {
			return nil, fmt.Errorf("%w: %s is the last voter; a quorum needs at least one", raftnode.ErrMembership, id)
		}
		if need := raftnode.Majority(voters); reachable < need && id == q.cfg.JournalID {
			// This journal removes itself, and the others may not answer
			// because they refuse it as a peer (its intermediate withdrawn,
			// its journal id bound to another journal CA): then they drop
			// its Raft connections too, it could not commit the change, and
			// it loses the leadership within seconds. The leader they elect
			// removes it.
			if refusing := q.cfg.Raft.RefusingVoters(ctx, members); len(refusing) > 0 {
				return nil, fmt.Errorf("%w: journal %s leads, but %s refuse it as a peer: it cannot commit its own removal, and it steps down within seconds. Run the remove again against the other journals once they have elected a leader (pact journal status)", raftnode.ErrNoLeader, id, strings.Join(refusing, ", "))
			}
		}
		if need := raftnode.Majority(voters); reachable < need {
			if !req.GetForce() {
				return nil, fmt.Errorf("%w: without %s the quorum would have %d voters, and %d of them must be up to elect a leader; only %d of them answer now (%s). Removing %s now would leave the quorum unable to elect a leader: bring the unreachable journals back first; --force removes anyway, and then no write or enrollment is accepted until %d of the remaining voters are up", raftnode.ErrMembership, id, voters, need, reachable, downList(down), id, need)
			}
			q.cfg.Logger.Warn("removing a journal although the remaining reachable voters are not a majority (--force)", logkey.Journal, id, logkey.VotersAfter, voters, logkey.ReachableAfter, reachable)
		}
	}
	if req.GetGraceSeconds() < 0 || (req.GetGraceSeconds() > 0 && !req.GetRevokeIntermediate()) {
		return nil, fmt.Errorf("%w: --grace goes with --revoke-intermediate and must be positive", ErrInvalidArgument)
	}
	resp := &pactv1.RemoveJournalResponse{}
	if req.GetRevokeIntermediate() {
		// Retire first: should the removal fail, the intermediates are on
		// their way out anyway, and the leader may be removing itself (it
		// could not commit anything afterwards).
		if serials := q.intermediatesOf(id); len(serials) > 0 {
			// The caller's own credential from the journal removed would
			// be cut off at the end of the grace, with its journal gone:
			// refused unless the request says so (ownCredentialRefusal).
			p := auth.FromContext(ctx)
			cut := func(in *pactv1.Intermediate) bool {
				return in.GetJournalId() == id && slices.Contains(serials, in.GetSerial())
			}
			own := q.callerIntermediate(p)
			if own != nil && !cut(own) {
				own = nil
			}
			if own != nil && !req.GetRevokeOwnCredential() && !raftfsm.IntermediateRevoked(own, q.cfg.Clock.Now().UnixNano()) {
				return nil, q.ownCredentialRefusal(p, own, "this removal retires with the journal's other intermediates (revoked at the end of the grace)", cut)
			}
			retired, _, err := q.retire(ctx, serials, req.GetGraceSeconds(), false, "journal "+id+" removed")
			if err != nil {
				return nil, err
			}
			resp.Retired = retired
			resp.OwnCredential = q.ownCredentialAfter(p, own)
		}
	}
	if err := q.cfg.Raft.RemoveServer(id); err != nil {
		return nil, err
	}
	q.removals.noteRemoved(id, target.GetRaftAddr(), time.Now())
	q.cfg.Logger.Info("journal removed from the quorum", logkey.Journal, id, logkey.Actor, auth.FromContext(ctx).ID.Name, logkey.Forced, req.GetForce(), logkey.IntermediatesRetired, len(resp.Retired))
	members, err = q.cfg.Raft.Members(ctx)
	resp.Members = members
	return resp, err
}

// staleReplicationQuiet is how long after this leader removed a journal it
// waits before adding a journal of the same id at the same Raft address
// again. hashicorp/raft's replication to the removed journal does not
// watch its stop signal while it backs off from failures (10 ms doubling
// to 10.24 s) and makes one last attempt with its old position after it:
// sent to a new journal at that address, that stale attempt installs an
// old snapshot (one whose configuration predates the new journal) or
// entries the new journal cannot place. A leader elected since the removal
// never replicated to the old journal, and a journal at another address is
// out of the stale attempt's reach. It is timed by the wall clock, not the
// domain's: hashicorp/raft's backoff is.
const staleReplicationQuiet = 12 * time.Second

// removals remembers when this leader removed each journal, and from
// which Raft address.
type removals struct {
	mu sync.Mutex
	at map[string]removal
}

type removal struct {
	addr string
	at   time.Time
}

func (r *removals) noteRemoved(id, addr string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[string]removal{}
	}
	for k, rm := range r.at {
		if now.Sub(rm.at) > staleReplicationQuiet {
			delete(r.at, k)
		}
	}
	r.at[id] = removal{addr: addr, at: now}
}

// awaitQuiet waits until journal id's removal from addr by this leader is
// staleReplicationQuiet old, or refuses if ctx ends first.
func (r *removals) awaitQuiet(ctx context.Context, id, addr string, now time.Time) error {
	r.mu.Lock()
	rm, ok := r.at[id]
	r.mu.Unlock()
	if !ok || rm.addr != addr {
		return nil
	}
	wait := staleReplicationQuiet - now.Sub(rm.at)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: journal %s was removed from %s %s ago, and the leader's replication to the journal it was may still make one last attempt there for %s: add it again after that (it is safe to re-run)", raftnode.ErrMembership, id, addr, now.Sub(rm.at).Round(time.Second), wait.Round(time.Second))
	}
}
