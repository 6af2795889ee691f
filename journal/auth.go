package journal

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// principal is an authenticated caller.
type principal struct {
	id     pki.Identity
	role   string // operators only
	serial string
	spki   string
	leaf   *x509.Certificate
	// svid is set when an agent authenticated with a SPIRE X.509-SVID
	// rather than a journal-signed certificate; spiffeID is the SVID's ID.
	svid     bool
	spiffeID string
}

// identitySource names where an agent's identity came from (Ping).
func (p *principal) identitySource() string {
	if p.svid {
		return spireIdentitySource
	}
	return "journal"
}

type principalKey struct{}

func principalFrom(ctx context.Context) *principal {
	p, _ := ctx.Value(principalKey{}).(*principal)
	return p
}

// policy says who may call a method. Methods not listed are refused.
type policy struct {
	public bool                   // no client certificate needed (Enroll)
	peer   bool                   // another journal of the quorum
	agent  bool                   // an agent bound to its current certificate
	admin  func(role string) bool // an operator whose role passes
}

func anyRole(string) bool { return true }

func platformAdmin(role string) bool { return role == pki.RolePlatformAdmin }

func assigner(role string) bool { return platformAdmin(role) || opsVCluster(role) != "" }

// opsVCluster is the vCluster of a pact-ops-{vcluster} role, or "".
func opsVCluster(role string) string {
	if strings.HasPrefix(role, pki.RoleOpsPrefix) && len(role) > len(pki.RoleOpsPrefix) {
		return role[len(pki.RoleOpsPrefix):]
	}
	return ""
}

var policies = map[string]policy{
	pactv1.EnrollmentService_Enroll_FullMethodName:       {public: true},
	pactv1.EnrollmentService_RenewCert_FullMethodName:    {agent: true},
	pactv1.EnrollmentService_Subscribe_FullMethodName:    {agent: true},
	pactv1.EnrollmentService_Ping_FullMethodName:         {agent: true},
	pactv1.EnrollmentService_IssueStandby_FullMethodName: {agent: true},
	pactv1.EnrollmentService_Release_FullMethodName:      {agent: true},
	pactv1.AdminService_RegisterNode_FullMethodName:      {admin: platformAdmin},
	pactv1.AdminService_RegisterNodes_FullMethodName:     {admin: platformAdmin},
	pactv1.AdminService_DecommissionNode_FullMethodName:  {admin: platformAdmin},
	pactv1.AdminService_UpdateNode_FullMethodName:        {admin: platformAdmin},
	// The vCluster rules for pact-ops roles are checked in the handlers,
	// against the node's current assignment.
	pactv1.AdminService_AssignNode_FullMethodName:         {admin: assigner},
	pactv1.AdminService_UnassignNode_FullMethodName:       {admin: assigner},
	pactv1.AdminService_MoveNode_FullMethodName:           {admin: assigner},
	pactv1.AdminService_ListNodes_FullMethodName:          {admin: anyRole},
	pactv1.AdminService_InspectNode_FullMethodName:        {admin: anyRole},
	pactv1.AdminService_ListAudit_FullMethodName:          {admin: anyRole},
	pactv1.AdminService_JournalStatus_FullMethodName:      {admin: anyRole},
	pactv1.AdminService_AddJournal_FullMethodName:         {admin: platformAdmin},
	pactv1.AdminService_RemoveJournal_FullMethodName:      {admin: platformAdmin},
	pactv1.AdminService_CreateJoinToken_FullMethodName:    {admin: platformAdmin},
	pactv1.AdminService_ListJoinTokens_FullMethodName:     {admin: anyRole},
	pactv1.AdminService_RevokeJoinTokens_FullMethodName:   {admin: platformAdmin},
	pactv1.AdminService_FenceNode_FullMethodName:          {admin: platformAdmin},
	pactv1.AdminService_UnfenceNode_FullMethodName:        {admin: platformAdmin},
	pactv1.AdminService_SaveSnapshot_FullMethodName:       {admin: platformAdmin},
	pactv1.JournalPeerService_Propose_FullMethodName:      {peer: true},
	pactv1.JournalPeerService_ReadIndex_FullMethodName:    {peer: true},
	pactv1.JournalPeerService_MemberStatus_FullMethodName: {peer: true},

	// Any operator may renew its own credential; the handler checks that
	// only a platform-admin issues for another name or role.
	pactv1.AdminService_IssueOperator_FullMethodName:      {admin: anyRole},
	pactv1.AdminService_ListOperators_FullMethodName:      {admin: anyRole},
	pactv1.AdminService_RevokeOperator_FullMethodName:     {admin: platformAdmin},
	pactv1.AdminService_RetireIntermediate_FullMethodName: {admin: platformAdmin},
	pactv1.AdminService_ListIntermediates_FullMethodName:  {admin: anyRole},
}

func (j *Journal) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx = withCorrelation(ctx)
	if err := j.serving(info.FullMethod); err != nil {
		return nil, toStatus(err)
	}
	p, err := j.authenticate(ctx, info.FullMethod)
	if err != nil {
		j.authRefused(ctx, info.FullMethod, err)
		return nil, toStatus(err)
	}
	if p != nil {
		ctx = context.WithValue(ctx, principalKey{}, p)
	}
	resp, err := handler(ctx, req)
	return resp, toStatus(err)
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authedStream) Context() context.Context { return s.ctx }

// RecvMsg answers a request that does not decode with INVALID_ARGUMENT
// (decode.go).
func (s *authedStream) RecvMsg(m any) error { return decoded(s.ServerStream.RecvMsg(m), m) }

func (j *Journal) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := withCorrelation(ss.Context())
	if err := j.serving(info.FullMethod); err != nil {
		return toStatus(err)
	}
	p, err := j.authenticate(ctx, info.FullMethod)
	if err != nil {
		j.authRefused(ctx, info.FullMethod, err)
		return toStatus(err)
	}
	if p != nil && p.id.Kind != pki.KindJournal {
		// Bound the streams per certificate before the handler spends a
		// goroutine's lifetime, a timer and a registry subscription on it.
		// Journals of the quorum are exempt: they are few, trusted, and a
		// peer protocol may well multiplex many streams.
		serial := pki.SerialHex(p.leaf.SerialNumber)
		release, err := j.streams.acquire(serial+"|"+pki.SPKIFingerprint(p.leaf), p.id.Kind+" certificate "+serial)
		if err != nil {
			j.metrics.streamsRefused.Inc()
			return toStatus(err)
		}
		defer release()
	}
	if p != nil {
		ctx = context.WithValue(ctx, principalKey{}, p)
	}
	return toStatus(handler(srv, &authedStream{ServerStream: ss, ctx: ctx}))
}

// authenticate identifies the caller of method and checks it may call it.
// The TLS handshake has already verified the chain to the domain root.
func (j *Journal) authenticate(ctx context.Context, method string) (*principal, error) {
	pol, ok := policies[method]
	if !ok {
		return nil, fmt.Errorf("%w: %s is not an allowed method", ErrPermission, method)
	}
	if pol.public {
		return nil, nil
	}
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("%w: no peer", ErrUnauthenticated)
	}
	tlsInfo, verdict, ok := tlsInfoOf(pr.AuthInfo)
	if !ok || len(tlsInfo.State.PeerCertificates) == 0 {
		return nil, fmt.Errorf("%w: this call needs a client certificate issued for this domain", ErrUnauthenticated)
	}
	chain := tlsInfo.State.PeerCertificates
	leaf := chain[0]
	id, err := pki.IdentityOf(leaf)
	pactID := err == nil && id.Domain == j.ca.Domain()
	noIdentity := fmt.Errorf("%w: client certificate names no identity in domain %s", ErrUnauthenticated, j.ca.Domain())
	if pol.peer {
		if !pactID {
			return nil, noIdentity
		}
		if err := j.raft.CheckJournalCert(chain); err != nil {
			var r *peerRefusal
			if errors.As(err, &r) {
				j.raft.CountPeerRefusal("peer service", id.Name, err)
			}
			return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
		}
		// The caller's quorum and membership, on every call: removal ends
		// a journal's peer rights the moment it commits. MemberStatus, a
		// read of this journal's own view, answers any journal of this
		// quorum: a removed journal restarted with its old state learns
		// from it that it was removed (removalLoop).
		member := method != pactv1.JournalPeerService_MemberStatus_FullMethodName
		if err := j.raft.CheckPeerCall(ctx, id.Name, member); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPermission, err)
		}
		return &principal{id: id, leaf: leaf}, nil
	}
	verr := noIdentity
	if pactID {
		verr = j.verifyClient(leaf, id, verdict)
	} else if sid, err := x509svid.IDFromCert(leaf); err == nil && sid.TrustDomain().Name() != j.ca.Domain() && j.spire == nil {
		verr = fmt.Errorf("%w: %w: SPIFFE ID %s is of trust domain %s; this journal accepts domain %s only and trusts no SPIRE bundle (--spire-bundle or --spire-socket)",
			ErrUnauthenticated, errForeignTrustDomain, sid, sid.TrustDomain().Name(), j.ca.Domain())
	}
	if verr != nil {
		if j.spire == nil {
			return nil, verr
		}
		// Not a journal-signed certificate (nor an operator's): perhaps a
		// SPIRE SVID.
		kind := ""
		if pactID {
			kind = id.Kind
		}
		return j.authenticateSVID(ctx, pol, method, chain, kind, verr)
	}
	p := &principal{id: id, serial: pki.SerialHex(leaf.SerialNumber), spki: pki.SPKIFingerprint(leaf), leaf: leaf}
	switch {
	case pol.agent:
		if id.Kind != pki.KindAgent {
			return nil, fmt.Errorf("%w: %s is for node agents; a %s credential cannot call it", ErrPermission, method, id.Kind)
		}
		// This journal's copy may lag a renewal or enrollment committed
		// through another journal: a refusal stands only once the leader
		// has confirmed it; cut off from the leader, say so rather than
		// call a current certificate stale.
		if err := j.confirm(ctx, func() error { return j.checkBinding(p) }, isFinal); err != nil {
			return nil, err
		}
	case pol.admin != nil:
		if id.Kind != pki.KindAdmin {
			return nil, fmt.Errorf("%w: %s needs an operator credential", ErrPermission, method)
		}
		if len(leaf.Subject.OrganizationalUnit) == 1 {
			p.role = leaf.Subject.OrganizationalUnit[0]
		}
		if !pol.admin(p.role) {
			return nil, fmt.Errorf("%w: role %q may not call %s", ErrPermission, p.role, shortMethod(method))
		}
		// After the role: a call refused for its role writes nothing,
		// not even the first-use record.
		if err := j.checkOperator(ctx, p, method); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// authenticateSVID authenticates a chain that is no journal-signed
// certificate as a SPIRE SVID, and authorises it: an SVID is an agent
// credential only. pactKind is the kind of pact identity the leaf names in
// this domain ("" for none) and verr why it failed as a pact certificate;
// that is the answer when the chain is no SVID of the trust domain either.
func (j *Journal) authenticateSVID(ctx context.Context, pol policy, method string, chain []*x509.Certificate, pactKind string, verr error) (*principal, error) {
	p, err := j.svidPrincipal(ctx, chain)
	pactID := pactKind != ""
	// When the SPIRE trust domain is the pact domain, agent certificates and
	// SVIDs share the ID form; the subject tells one the journal signed.
	journalSigned := hasPactSubject(chain[0])
	switch {
	case errors.Is(err, errForeignTrustDomain) && !pactID:
		return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	case errors.Is(err, errNotSVID) && !pactID:
		return nil, fmt.Errorf("%w: client certificate names no identity in domain %s nor in SPIRE trust domain %s", ErrUnauthenticated, j.ca.Domain(), j.spire.td.Name())
	case errors.Is(err, errNotSVID), errors.Is(err, errForeignTrustDomain):
		return nil, verr
	case pactKind != "" && pactKind != pki.KindAgent && errors.Is(err, errSVIDUntrusted):
		return nil, verr // an operator's or a journal's certificate
	case pactID && journalSigned && errors.Is(err, errNoSPIREBundle):
		return nil, fmt.Errorf("%w: client certificate does not chain to a live journal intermediate of domain %s, and no SPIRE trust bundle for %s is loaded yet (is this journal's SPIRE agent up?)", ErrUnauthenticated, j.ca.Domain(), j.spire.td.Name())
	case pactID && journalSigned && errors.Is(err, errSVIDUntrusted):
		return nil, fmt.Errorf("%w: client certificate chains neither to a live journal intermediate of domain %s nor to the SPIRE trust bundle of %s (expired, revoked or foreign); re-enroll", ErrUnauthenticated, j.ca.Domain(), j.spire.td.Name())
	case pactID && errors.Is(err, errSVIDUntrusted):
		// An SVID in the pact ID form that neither the journal nor the
		// SPIRE bundle signed: name the SPIRE side.
		return nil, err
	case err != nil && pactID && errors.Is(verr, ErrUnauthenticated) && errors.Is(err, ErrUnauthenticated):
		return nil, verr // both say expired (or not yet valid)
	case err != nil:
		return nil, err
	}
	switch {
	case pol.agent:
		return p, nil
	case pol.admin != nil:
		return nil, fmt.Errorf("%w: %s needs an operator credential; a SPIRE SVID authenticates node agents only", ErrPermission, shortMethod(method))
	}
	return nil, fmt.Errorf("%w: a SPIRE SVID cannot call %s", ErrPermission, shortMethod(method))
}

// verifyClient verifies a client chain at the journal's clock. Agent
// certificates must chain through a live intermediate of the trust bundle
// (whatever intermediates the client sent are ignored); operator
// certificates must be signed by the root itself, so no journal
// intermediate can mint one.
func (j *Journal) verifyClient(leaf *x509.Certificate, id pki.Identity, verdict *chainVerdict) error {
	now := j.cfg.Clock.Now()
	opts := x509.VerifyOptions{Roots: j.roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	bundle := j.bundle.get()
	if verdict.valid(bundle.version, now) {
		return nil
	}
	if id.Kind == pki.KindAgent {
		opts.Intermediates = bundle.intermediates
	}
	chains, err := leaf.Verify(opts)
	if err == nil {
		verdict.remember(bundle.version, chains[0])
		return nil
	}
	// A certificate (the leaf, or its journal's intermediate) not valid yet
	// by less than the tolerance was made by a journal whose clock runs
	// ahead of this one's (or this one's runs behind): the chain is checked
	// again at that certificate's not_before. Checking later, never
	// earlier, accepts nothing that has expired.
	for range 3 {
		var inv x509.CertificateInvalidError
		if err == nil || !errors.As(err, &inv) || inv.Reason != x509.Expired || inv.Cert == nil {
			break
		}
		ahead := inv.Cert.NotBefore.Sub(now)
		if ahead <= 0 || ahead > j.cfg.ClockSkewTolerance || !inv.Cert.NotBefore.After(opts.CurrentTime) {
			break
		}
		opts.CurrentTime = inv.Cert.NotBefore
		_, err = leaf.Verify(opts)
	}
	if err != nil {
		var inv x509.CertificateInvalidError
		switch {
		case errors.As(err, &inv) && inv.Reason == x509.Expired && now.After(leaf.NotAfter):
			return fmt.Errorf("%w: client certificate %s expired at %s", ErrUnauthenticated, pki.SerialHex(leaf.SerialNumber), leaf.NotAfter.UTC().Format(time.RFC3339))
		case errors.As(err, &inv) && inv.Reason == x509.Expired:
			return fmt.Errorf("%w: %w: client certificate not valid before %s, the journal's clock reads %s (check the clocks)", ErrUnauthenticated, errNotYetValid, leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		case id.Kind == pki.KindAgent:
			return fmt.Errorf("%w: client certificate does not chain to a trusted journal intermediate of this domain (expired, revoked or foreign); re-enroll", ErrUnauthenticated)
		default:
			return fmt.Errorf("%w: client certificate is not signed by this domain's root", ErrUnauthenticated)
		}
	}
	return nil
}

// checkBinding ties an agent call to the exact certificate the registry
// holds for the node: same serial, same key, not revoked, node not Revoked.
// It runs on every RPC and on every stream wake-up.
func (j *Journal) checkBinding(p *principal) error {
	if p.svid {
		return j.checkSVIDBinding(p)
	}
	n, ok := j.fsm.Node(p.id.Name)
	if !ok {
		return fmt.Errorf("%w: node %s is not in the registry", ErrPermission, p.id.Name)
	}
	if n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED && n.GetFence() != nil {
		return fencedError(p.id.Name)
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED || j.fsm.IsRevoked(p.serial) {
		return fmt.Errorf("%w: node %s was decommissioned", errNodeRevoked, p.id.Name)
	}
	if cur := n.GetCert(); cur.GetSerial() == p.serial && cur.GetSpkiSha256() == p.spki {
		return nil
	}
	if sb := n.GetStandbyCert(); sb.GetSerial() == p.serial && sb.GetSpkiSha256() == p.spki {
		// The standby a SPIRE node holds for when SPIRE stops serving it;
		// its first stream makes it current (Subscribe).
		return nil
	}
	return fmt.Errorf("%w: certificate %s is not the current certificate of node %s (it was replaced); the agent must use its newer certificate or enroll again", errStale, p.serial, p.id.Name)
}

// errNotYetValid: a client certificate whose not_before is ahead of the
// journal's clock; one of the two clocks is wrong. It comes with
// ErrUnauthenticated.
var errNotYetValid = errors.New("journal: certificate not valid yet")

// hasPactSubject reports whether cert carries the subject a journal gives
// the certificates it signs (pact-service-agent/{node}@{domain}), which
// SPIRE's SVIDs do not. It trusts nothing: it only tells the two ID forms
// apart in an error message and its reason.
func hasPactSubject(cert *x509.Certificate) bool {
	id, err := pki.IdentityOf(cert)
	return err == nil && cert.Subject.CommonName == id.CommonName()
}

// checkOperator refuses a revoked operator credential, on every call. A
// credential the registry does not know yet (signed offline with the root:
// pact-journal admin issue, or a --dev bootstrap credential from before
// operators were recorded) is recorded now, at its first use; the FSM
// refuses it there if its name was revoked after it was made.
//
// A revocation is final wherever it is seen, so refusing from this
// journal's copy is safe; a copy that lags a revocation committed a moment
// ago admits the credential for that moment, as it would a node's.
func (j *Journal) checkOperator(ctx context.Context, p *principal, method string) error {
	st, why := j.fsm.CheckOperator(p.id.Name, p.serial, p.leaf.NotBefore.Unix())
	switch st {
	case raftfsm.OperatorRevoked:
		return fmt.Errorf("%w: %s; ask a platform-admin for a new credential (pact admin issue)", raftfsm.ErrOperatorRevoked, why)
	case raftfsm.OperatorRecorded:
		return nil
	}
	_, err := j.propose(ctx, &pactv1.Command{Actor: p.actor(), Op: &pactv1.Command_RecordOperator{RecordOperator: &pactv1.RecordOperatorOp{
		Operator: operatorRecord(p.leaf, p.id.Name, p.role, raftfsm.IssuedAtFirstUse),
	}}})
	if err != nil && errors.Is(err, ErrNoLeader) && method == pactv1.AdminService_JournalStatus_FullMethodName {
		// Status is how an operator (or a monitoring probe) diagnoses a
		// quorum that lost its leader: refusing it then, because the
		// first-use record needs a leader, would hide the outage behind
		// NO_LEADER. The credential passed every local check (its serial
		// and name are not revoked here); the record is written at its
		// next call with a leader.
		j.log.Warn("operator credential not recorded (no leader); serving the status call", logkey.Actor, p.id.Name, logkey.Serial, p.serial)
		return nil
	}
	if err != nil && !errors.Is(err, raftfsm.ErrOperatorRevoked) {
		return fmt.Errorf("journal: recording operator credential %s of %s at its first use: %w", p.serial, p.id.Name, err)
	}
	if err == nil {
		j.log.Info("operator credential recorded at first use", logkey.Actor, p.id.Name, logkey.Serial, p.serial, logkey.Role, p.role)
	}
	return err
}

// operatorRecord is what the registry keeps of an operator certificate.
func operatorRecord(cert *x509.Certificate, name, role, issuedBy string) *pactv1.Operator {
	return &pactv1.Operator{
		Name:          name,
		Role:          role,
		Serial:        pki.SerialHex(cert.SerialNumber),
		NotBeforeUnix: cert.NotBefore.Unix(),
		NotAfterUnix:  cert.NotAfter.Unix(),
		IssuedBy:      issuedBy,
		SpkiSha256:    pki.SPKIFingerprint(cert),
	}
}

func shortMethod(full string) string {
	if i := strings.LastIndex(full, "/"); i >= 0 {
		return full[i+1:]
	}
	return full
}
