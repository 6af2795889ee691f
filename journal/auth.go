package journal

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
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
	pactv1.EnrollmentService_Enroll_FullMethodName:      {public: true},
	pactv1.EnrollmentService_RenewCert_FullMethodName:   {agent: true},
	pactv1.EnrollmentService_Subscribe_FullMethodName:   {agent: true},
	pactv1.EnrollmentService_Ping_FullMethodName:        {agent: true},
	pactv1.AdminService_RegisterNode_FullMethodName:     {admin: platformAdmin},
	pactv1.AdminService_RegisterNodes_FullMethodName:    {admin: platformAdmin},
	pactv1.AdminService_DecommissionNode_FullMethodName: {admin: platformAdmin},
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
	pactv1.JournalPeerService_Propose_FullMethodName:      {peer: true},
	pactv1.JournalPeerService_ReadIndex_FullMethodName:    {peer: true},
	pactv1.JournalPeerService_MemberStatus_FullMethodName: {peer: true},
}

func (j *Journal) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx = withCorrelation(ctx)
	p, err := j.authenticate(ctx, info.FullMethod)
	if err != nil {
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

func (j *Journal) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := withCorrelation(ss.Context())
	p, err := j.authenticate(ctx, info.FullMethod)
	if err != nil {
		return toStatus(err)
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
	tlsInfo, ok := pr.AuthInfo.(credentials.TLSInfo)
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
		if err := j.checkJournalCert(chain); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
		}
		return &principal{id: id, leaf: leaf}, nil
	}
	verr := noIdentity
	if pactID {
		verr = j.verifyClient(leaf, id)
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
		if err := j.checkBinding(p); err != nil {
			if errors.Is(err, errNodeRevoked) || j.IsLeader() {
				return nil, err
			}
			// This journal's copy may lag a renewal or enrollment committed
			// through another journal: catch up before refusing the caller's
			// certificate as stale. Cut off from the leader, say so rather
			// than call a current certificate stale.
			if rerr := j.linearizableRead(ctx); rerr != nil {
				return nil, rerr
			}
			if err := j.checkBinding(p); err != nil {
				return nil, err
			}
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
	switch {
	case errors.Is(err, errNotSVID) && !pactID:
		return nil, fmt.Errorf("%w: client certificate names no identity in domain %s nor in SPIRE trust domain %s", ErrUnauthenticated, j.ca.Domain(), j.spire.td.Name())
	case errors.Is(err, errNotSVID):
		return nil, verr
	case pactKind != "" && pactKind != pki.KindAgent && errors.Is(err, errSVIDUntrusted):
		return nil, verr // an operator's or a journal's certificate
	case pactID && errors.Is(err, errNoSPIREBundle):
		return nil, fmt.Errorf("%w: client certificate does not chain to a live journal intermediate of domain %s, and no SPIRE trust bundle for %s is loaded yet (is this journal's SPIRE agent up?)", ErrUnauthenticated, j.ca.Domain(), j.spire.td.Name())
	case pactID && errors.Is(err, errSVIDUntrusted):
		// When the SPIRE trust domain is the pact domain, agent
		// certificates and SVIDs share the ID form: say both failed.
		return nil, fmt.Errorf("%w: client certificate chains neither to a live journal intermediate of domain %s nor to the SPIRE trust bundle of %s (expired, revoked or foreign); re-enroll", ErrUnauthenticated, j.ca.Domain(), j.spire.td.Name())
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
func (j *Journal) verifyClient(leaf *x509.Certificate, id pki.Identity) error {
	now := j.cfg.Clock.Now()
	opts := x509.VerifyOptions{Roots: j.roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if id.Kind == pki.KindAgent {
		opts.Intermediates = j.bundle.get().intermediates
	}
	if _, err := leaf.Verify(opts); err != nil {
		var inv x509.CertificateInvalidError
		switch {
		case errors.As(err, &inv) && inv.Reason == x509.Expired && now.After(leaf.NotAfter):
			return fmt.Errorf("%w: client certificate %s expired at %s", ErrUnauthenticated, pki.SerialHex(leaf.SerialNumber), leaf.NotAfter.UTC().Format(time.RFC3339))
		case errors.As(err, &inv) && inv.Reason == x509.Expired:
			return fmt.Errorf("%w: client certificate not valid before %s (check the clocks)", ErrUnauthenticated, leaf.NotBefore.UTC().Format(time.RFC3339))
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
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED || j.fsm.IsRevoked(p.serial) {
		return fmt.Errorf("%w: node %s was decommissioned", errNodeRevoked, p.id.Name)
	}
	if n.GetCert().GetSerial() != p.serial || n.GetCert().GetSpkiSha256() != p.spki {
		return fmt.Errorf("%w: certificate %s is not the current certificate of node %s", errStale, p.serial, p.id.Name)
	}
	return nil
}

func shortMethod(full string) string {
	if i := strings.LastIndex(full, "/"); i >= 0 {
		return full[i+1:]
	}
	return full
}
