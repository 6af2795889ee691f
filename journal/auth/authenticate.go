package auth

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// UnaryInterceptor refuses a call the journal does not serve, authenticates
// and authorises the caller of every other (counting and logging a
// refusal), and hands the handler a context that carries the Principal.
// Errors are returned as they are: the journal's interceptor before this
// one maps them to statuses.
func (a *Authenticator) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.cfg.Serving(info.FullMethod); err != nil {
		return nil, err
	}
	p, err := a.authenticate(ctx, info.FullMethod)
	if err != nil {
		a.refused(ctx, info.FullMethod, err)
		return nil, err
	}
	if p != nil {
		ctx = NewContext(ctx, p)
	}
	return handler(ctx, req)
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authedStream) Context() context.Context { return s.ctx }

// StreamInterceptor is UnaryInterceptor for streams.
func (a *Authenticator) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	if err := a.cfg.Serving(info.FullMethod); err != nil {
		return err
	}
	p, err := a.authenticate(ctx, info.FullMethod)
	if err != nil {
		a.refused(ctx, info.FullMethod, err)
		return err
	}
	if p == nil {
		return handler(srv, ss)
	}
	return handler(srv, &authedStream{ServerStream: ss, ctx: NewContext(ctx, p)})
}

// authenticate identifies the caller of method and checks it may call it.
// The TLS handshake has already checked the chain's signatures reach a
// domain root; verifyClient checks the rest.
func (a *Authenticator) authenticate(ctx context.Context, method string) (*Principal, error) {
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
	sent := tlsInfo.State.PeerCertificates
	leaf := sent[0]
	id, err := pki.IdentityOf(leaf)
	domain := a.cfg.Domain
	pactID := err == nil && id.Domain == domain
	// Made only for a call refused with it: formatting it costs every
	// accepted call an allocation and a Sprintf.
	noIdentity := func() error {
		return fmt.Errorf("%w: client certificate names no identity in domain %s", ErrUnauthenticated, domain)
	}
	if pol.peer {
		if !pactID {
			return nil, noIdentity()
		}
		unpublished, err := a.checkPeerCert(sent, id.Name, method)
		if err != nil {
			if method == pactv1.JournalPeerService_MemberStatus_FullMethodName {
				// A journal cut off and removed learns it here.
				err = a.cfg.Peers.RemovedPeer(ctx, id.Name, err)
			}
			return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
		}
		// The caller's quorum and membership, on every call: removal ends
		// a journal's peer rights the moment it commits. MemberStatus, a
		// read of this journal's own view, answers any journal of this
		// quorum: a removed journal restarted with its old state learns
		// from it that it was removed (removalLoop).
		member := method != pactv1.JournalPeerService_MemberStatus_FullMethodName
		if err := a.cfg.Peers.CheckPeerCall(ctx, id.Name, member); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPermission, err)
		}
		return &Principal{ID: id, Leaf: leaf, Chain: sent, Unpublished: unpublished}, nil
	}
	var verr error
	// chain is the verified chain of a pact certificate (leaf first, a
	// root last).
	var chain []*x509.Certificate
	if pactID {
		// An intermediate (or journal CA) published while this journal
		// was cut off (a journal added, or one re-keyed, through the
		// leader) is not in its bundle yet: the chain counts as unknown
		// only once the leader has confirmed this journal holds what it
		// committed, and cut off from the leader the answer is NO_LEADER,
		// to retry, never an UNAUTHENTICATED that sends a current node to
		// enroll again (or an operator for a new credential).
		// Confirmed only on that refusal: the accepted call's path stays
		// one verification, with no closure built for it.
		if chain, verr = a.verifyClientChain(leaf, id, verdict); unknownIssuer(verr) {
			var again []*x509.Certificate
			verr = a.cfg.Quorum.Confirm(ctx, func() (err error) {
				again, err = a.verifyClientChain(leaf, id, verdict)
				return err
			}, unknownIssuer)
			chain = again
		}
	} else if sid, err := x509svid.IDFromCert(leaf); err == nil && sid.TrustDomain().Name() != domain && a.spire == nil {
		verr = fmt.Errorf("%w: %w: SPIFFE ID %s is of trust domain %s; this journal accepts domain %s only and trusts no SPIRE bundle (--spire-bundle or --spire-socket)",
			ErrUnauthenticated, ErrForeignTrustDomain, sid, sid.TrustDomain().Name(), domain)
	} else {
		verr = noIdentity()
	}
	if verr != nil {
		if a.spire == nil {
			return nil, verr
		}
		// Not a journal-signed certificate (nor an operator's): perhaps a
		// SPIRE SVID.
		kind := ""
		if pactID {
			kind = id.Kind
		}
		return a.authenticateSVID(ctx, pol, method, sent, kind, verr)
	}
	p := &Principal{ID: id, Serial: pki.SerialHex(leaf.SerialNumber), SPKI: pki.SPKIFingerprint(leaf), Leaf: leaf}
	switch {
	case pol.agent:
		if id.Kind != pki.KindAgent {
			return nil, fmt.Errorf("%w: %s is for node agents; a %s credential cannot call it", ErrPermission, method, id.Kind)
		}
		// This journal's copy may lag a renewal or enrollment committed
		// through another journal: a refusal stands only once the leader
		// has confirmed it; cut off from the leader, say so rather than
		// call a current certificate stale.
		if err := a.cfg.Quorum.ConfirmFinal(ctx, func() error { return a.CheckBinding(p) }); err != nil {
			if !pol.replaced || !errors.Is(err, raftfsm.ErrStaleCertificate) {
				return nil, err
			}
			// Confirmed stale with the leader: the handler decides
			// whether this is the retry of the renewal that replaced it.
			p.Replaced = true
		}
	case pol.admin != nil:
		if id.Kind != pki.KindAdmin {
			return nil, fmt.Errorf("%w: %s needs an operator credential", ErrPermission, method)
		}
		if len(leaf.Subject.OrganizationalUnit) == 1 {
			p.Role = leaf.Subject.OrganizationalUnit[0]
		}
		if !pol.admin(p.Role) {
			return nil, fmt.Errorf("%w: role %q may not call %s", ErrPermission, p.Role, shortMethod(method))
		}
		// After the role: a call refused for its role writes nothing,
		// not even the first-use record.
		if err := a.checkOperator(ctx, p, method, a.signedByARoot(chain)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// unknownIssuer reports whether err refuses a chain for an issuer missing
// from this journal's trust bundle: one that may yet be published in it.
func unknownIssuer(err error) bool {
	return errors.Is(err, ErrUnknownIssuer) || errors.Is(err, ErrUnknownOperatorIssuer)
}

// authenticateSVID authenticates a chain that is no journal-signed
// certificate as a SPIRE SVID, and authorises it: an SVID is an agent
// credential only. pactKind is the kind of pact identity the leaf names in
// this domain ("" for none) and verr why it failed as a pact certificate;
// that is the answer when the chain is no SVID of the trust domain either.
func (a *Authenticator) authenticateSVID(ctx context.Context, pol policy, method string, chain []*x509.Certificate, pactKind string, verr error) (*Principal, error) {
	p, err := a.svidPrincipal(ctx, chain)
	pactID := pactKind != ""
	// When the SPIRE trust domain is the pact domain, agent certificates and
	// SVIDs share the ID form; the subject tells one the journal signed.
	journalSigned := hasPactSubject(chain[0])
	switch {
	case errors.Is(err, ErrForeignTrustDomain) && !pactID:
		return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	case errors.Is(err, ErrNotSVID) && !pactID:
		return nil, fmt.Errorf("%w: client certificate names no identity in domain %s nor in SPIRE trust domain %s", ErrUnauthenticated, a.cfg.Domain, a.spire.td.Name())
	case errors.Is(err, ErrNotSVID), errors.Is(err, ErrForeignTrustDomain):
		return nil, verr
	case pactKind != "" && pactKind != pki.KindAgent && errors.Is(err, ErrSVIDUntrusted):
		return nil, verr // an operator's or a journal's certificate
	case pactID && journalSigned && errors.Is(err, ErrNoSPIREBundle):
		return nil, fmt.Errorf("%w: client certificate does not chain to a live journal intermediate of domain %s, and no SPIRE trust bundle for %s is loaded yet (is this journal's SPIRE agent up?)", ErrUnauthenticated, a.cfg.Domain, a.spire.td.Name())
	case pactID && journalSigned && errors.Is(err, ErrSVIDUntrusted):
		return nil, fmt.Errorf("%w: client certificate chains neither to a live journal intermediate of domain %s nor to the SPIRE trust bundle of %s (expired, revoked or foreign); re-enroll", ErrUnauthenticated, a.cfg.Domain, a.spire.td.Name())
	case pactID && errors.Is(err, ErrSVIDUntrusted):
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

// verifyClientChain verifies a client chain at the journal's clock, against the
// roots and the trust bundle's live journal CAs and intermediates only
// (whatever intermediates the client sent are ignored, so a retired or
// revoked intermediate or journal CA verifies nothing), and then the
// verified chain's shape (ChainShape): an agent certificate is signed by a
// journal intermediate, an operator credential by the root itself or by a
// journal intermediate under its journal CA; a journal CA signs neither.
// It returns the chain that verified (leaf first, a root last).
func (a *Authenticator) verifyClientChain(leaf *x509.Certificate, id pki.Identity, verdict *chainVerdict) ([]*x509.Certificate, error) {
	now := a.cfg.Clock.Now()
	bundle := a.cfg.Bundle.LiveIntermediates()
	if chain := verdict.verified(bundle.Version, now); chain != nil {
		return chain, nil
	}
	// The plain case, with the chain above the leaf's intermediate
	// verified once per bundle version (upperchain.go); anything else, and
	// every refusal, below.
	if chain := a.fastVerify(leaf, id.Kind, bundle, now); chain != nil {
		verdict.remember(bundle.Version, chain)
		return chain, nil
	}
	opts := x509.VerifyOptions{Roots: a.roots, Intermediates: bundle.Pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	chain, err := a.verifyShaped(leaf, id.Kind, opts)
	if err == nil {
		verdict.remember(bundle.Version, chain)
		return chain, nil
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
		if ahead <= 0 || ahead > a.cfg.ClockSkewTolerance || !inv.Cert.NotBefore.After(opts.CurrentTime) {
			break
		}
		opts.CurrentTime = inv.Cert.NotBefore
		chain, err = a.verifyShaped(leaf, id.Kind, opts)
	}
	if err != nil {
		var inv x509.CertificateInvalidError
		switch {
		case errors.Is(err, ErrChainShape):
			return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
		case errors.As(err, &inv) && inv.Reason == x509.Expired && now.After(leaf.NotAfter):
			return nil, fmt.Errorf("%w: client certificate %s expired at %s", ErrUnauthenticated, pki.SerialHex(leaf.SerialNumber), leaf.NotAfter.UTC().Format(time.RFC3339))
		case errors.As(err, &inv) && inv.Reason == x509.Expired:
			return nil, fmt.Errorf("%w: %w: client certificate not valid before %s, the journal's clock reads %s (check the clocks)", ErrUnauthenticated, ErrNotYetValid, leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		case errors.As(err, &inv) && misissued(inv.Reason):
			// A CA signed beyond what it may: a name outside its
			// constraints, a CA below a journal intermediate. Not a bundle
			// that lags: no confirmation helps.
			return nil, fmt.Errorf("%w: client certificate %s breaks its CAs' rules (%s): it was misissued, with a CA key misused or by hand; find out which key signed it, and re-enroll the node or issue a new credential", ErrUnauthenticated, pki.SerialHex(leaf.SerialNumber), strings.TrimPrefix(inv.Error(), "x509: "))
		case id.Kind == pki.KindAgent:
			return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, ErrUnknownIssuer)
		case id.Kind == pki.KindAdmin:
			return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, ErrUnknownOperatorIssuer)
		default:
			return nil, fmt.Errorf("%w: client certificate is not signed by this domain's root, nor by a live journal intermediate", ErrUnauthenticated)
		}
	}
	return chain, nil
}

// signedByARoot reports whether a verified chain is a leaf signed by one
// of the configured roots itself: two certificates, the second one of
// cfg.Roots (byte for byte). Decided from the chain x509 verified, never
// from names.
func (a *Authenticator) signedByARoot(chain []*x509.Certificate) bool {
	if len(chain) != 2 {
		return false
	}
	for _, r := range a.cfg.Roots {
		if bytes.Equal(chain[1].Raw, r.Raw) {
			return true
		}
	}
	return false
}

// misissued reports whether a chain verification failed on a rule a CA
// broke in signing (as opposed to a missing, expired or unknown CA).
func misissued(r x509.InvalidReason) bool {
	switch r {
	case x509.CANotAuthorizedForThisName, x509.TooManyIntermediates, x509.NotAuthorizedToSign, x509.CANotAuthorizedForExtKeyUsage, x509.TooManyConstraints:
		return true
	}
	return false
}

// verifyShaped verifies leaf with opts and returns the first verified chain
// of a shape kind may have; a chain that verifies only in another shape is
// ErrChainShape.
func (a *Authenticator) verifyShaped(leaf *x509.Certificate, kind string, opts x509.VerifyOptions) ([]*x509.Certificate, error) {
	chains, err := leaf.Verify(opts)
	if err != nil {
		return nil, err
	}
	for _, c := range chains {
		if err = ChainShape(kind, c, a.cfg.Domain); err == nil {
			return c, nil
		}
	}
	return nil, err
}

// ChainShape checks that a verified chain (leaf first, a root last) is one
// this domain issues to a certificate of kind: caprofile.CheckChainShape,
// whose errors are ErrChainShape.
func ChainShape(kind string, chain []*x509.Certificate, domain string) error {
	return caprofile.CheckChainShape(kind, chain, domain)
}

// CheckBinding ties an agent call to the exact certificate the registry
// holds for the node: same serial, same key, not revoked, node not Revoked.
// It runs on every RPC and on every stream wake-up.
func (a *Authenticator) CheckBinding(p *Principal) error {
	if p.SVID {
		return a.checkSVIDBinding(p)
	}
	reg := a.cfg.Registry
	n, ok := reg.Node(p.ID.Name)
	if !ok {
		return fmt.Errorf("%w: node %s is not in the registry", ErrPermission, p.ID.Name)
	}
	if n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED && n.GetFence() != nil {
		return FencedError(p.ID.Name)
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED || reg.IsRevoked(p.Serial) {
		return fmt.Errorf("%w: node %s was decommissioned", raftfsm.ErrNodeRevoked, p.ID.Name)
	}
	if cur := n.GetCert(); cur.GetSerial() == p.Serial && cur.GetSpkiSha256() == p.SPKI {
		return nil
	}
	if sb := n.GetStandbyCert(); sb.GetSerial() == p.Serial && sb.GetSpkiSha256() == p.SPKI {
		// The standby a SPIRE node holds for when SPIRE stops serving it;
		// its first stream makes it current (Subscribe).
		return nil
	}
	return StaleError(p)
}

// StaleError is the refusal of a certificate the registry no longer holds
// for its node.
func StaleError(p *Principal) error {
	return fmt.Errorf("%w: certificate %s is not the current certificate of node %s (it was replaced); the agent must use its newer certificate or enroll again", raftfsm.ErrStaleCertificate, p.Serial, p.ID.Name)
}

// FencedError is the refusal of a fenced node. The operator's reason stays
// in the audit: the node itself may be the suspect.
func FencedError(nodeID string) error {
	return fmt.Errorf("%w: node %s is fenced by an operator; it may not enroll or renew until pact node unfence %s", raftfsm.ErrNodeFenced, nodeID, nodeID)
}

// hasPactSubject reports whether cert carries the subject a journal gives
// the certificates it signs (pact-service-agent/{node}@{domain}), which
// SPIRE's SVIDs do not. It trusts nothing: it only tells the two ID forms
// apart in an error message and its reason.
func hasPactSubject(cert *x509.Certificate) bool {
	id, err := pki.IdentityOf(cert)
	return err == nil && cert.Subject.CommonName == id.CommonName()
}

// checkOperator admits an operator credential only as Raft records it, on
// every call (DESIGN.md §8, "Authority is what Raft recorded"; see
// docs/security.md, "Operator credentials"):
//
//   - A revoked credential (its serial, or its name since it was made) is
//     refused OPERATOR_REVOKED. A revocation is final wherever it is seen,
//     so refusing from this journal's copy is safe; a copy that lags a
//     revocation committed a moment ago admits the credential for that
//     moment, as it would a node's.
//   - A credential signed by a journal intermediate authenticates only if
//     pact admin issue or renew recorded it when it was signed (checkIssued):
//     a journal intermediate's key is in a running journal's memory, and
//     a credential made with it by anyone else (one who read that memory,
//     or who holds the key of a journal since removed) has no record. It
//     is refused UNAUTHENTICATED (OPERATOR_NOT_ISSUED), and nothing is
//     written: it is never recorded at its first use.
//   - A credential signed by a domain root itself (the chain verified is
//     the leaf and a root: the ceremony's first platform-admin, pact-journal
//     admin issue, a --dev bootstrap credential) is authenticated by the
//     root's signature, and recorded now, at its first use, if it is not
//     yet; the FSM refuses it there if its name was revoked after it was
//     made.
func (a *Authenticator) checkOperator(ctx context.Context, p *Principal, method string, rootSigned bool) error {
	if !rootSigned {
		// This journal's copy may lag the record of a credential issued a
		// moment ago through another journal: a refusal stands only once
		// the leader has confirmed it (a read, never a write); cut off from
		// the leader the answer is NO_LEADER, to retry. A credential this
		// copy holds is answered from it, with a leader or without.
		return a.cfg.Quorum.Confirm(ctx, func() error { return a.checkIssued(p) }, notIssued)
	}
	st, why := a.cfg.Registry.CheckOperator(p.ID.Name, p.Serial, p.Leaf.NotBefore.Unix())
	switch st {
	case raftfsm.OperatorRevoked:
		return revokedError(why)
	case raftfsm.OperatorRecorded:
		return nil
	}
	rec := OperatorRecord(p.Leaf, p.ID.Name, p.Role, raftfsm.IssuedAtFirstUse)
	rec.RootSigned = true // decided from the verified chain (rootSigned)
	err := a.cfg.Quorum.RecordOperator(ctx, p.Actor(), rec)
	if err != nil && errors.Is(err, a.cfg.NoLeader) && method == pactv1.AdminService_JournalStatus_FullMethodName {
		// Status is how an operator (or a monitoring probe) diagnoses a
		// quorum that lost its leader: refusing it then, because the
		// first-use record needs a leader, would hide the outage behind
		// NO_LEADER. The credential is the root's own (a journal
		// intermediate's never comes here) and passed every local check
		// (its serial and name are not revoked here); the record is
		// written at its next call with a leader.
		a.log.Warn("operator credential not recorded (no leader); serving the status call", logkey.Actor, p.ID.Name, logkey.Serial, p.Serial)
		return nil
	}
	if err != nil && !errors.Is(err, raftfsm.ErrOperatorRevoked) {
		return fmt.Errorf("journal: recording operator credential %s of %s at its first use: %w", p.Serial, p.ID.Name, err)
	}
	if err == nil {
		a.log.Info("operator credential recorded at first use", logkey.Actor, p.ID.Name, logkey.Serial, p.Serial, logkey.Role, p.Role)
	}
	return err
}

// checkIssued admits a credential signed by a journal intermediate from
// this journal's copy of the registry: it must be recorded, as issued
// (pact admin issue or renew: issued_by admin/NAME, never a first-use
// record, which only a release before this rule made for such a
// credential), for this very certificate: its name, role, key and expiry.
// A record of its serial for another key is another credential: a serial
// is no secret (pact admin list shows it), the key is.
func (a *Authenticator) checkIssued(p *Principal) error {
	st, why := a.cfg.Registry.CheckOperator(p.ID.Name, p.Serial, p.Leaf.NotBefore.Unix())
	switch st {
	case raftfsm.OperatorRevoked:
		return revokedError(why)
	case raftfsm.OperatorRecorded:
		o, ok := a.cfg.Registry.Operator(p.Serial)
		if ok && o.GetIssuedBy() != raftfsm.IssuedAtFirstUse && o.GetName() == p.ID.Name && o.GetRole() == p.Role &&
			o.GetSpkiSha256() == p.SPKI && o.GetNotAfterUnix() == p.Leaf.NotAfter.Unix() {
			return nil
		}
	}
	return NotIssuedError(p.Serial, p.ID.Name)
}

// NotIssuedError is the refusal of an operator credential signed by a
// journal intermediate that the registry holds no issue record of.
func NotIssuedError(serial, name string) error {
	return fmt.Errorf("%w: %w: credential %s of %s was not issued by this quorum (no record in the registry): ask a platform-admin for one with pact admin issue",
		ErrUnauthenticated, ErrOperatorNotIssued, serial, name)
}

func notIssued(err error) bool { return errors.Is(err, ErrOperatorNotIssued) }

func revokedError(why string) error {
	return fmt.Errorf("%w: %s; ask a platform-admin for a new credential (pact admin issue)", raftfsm.ErrOperatorRevoked, why)
}
