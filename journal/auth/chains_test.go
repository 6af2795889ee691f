package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Which chains a call's authentication accepts (docs/security.md, "Which
// chains pact accepts"), on the real path: authenticate, verifyClient
// against the roots and the trust bundle, the shape check, and the
// leader's confirmation of an unknown issuer. The registry, Raft and the
// peers are fakes that accept whatever the chain check lets through.

// chainRegistry binds every node to whatever certificate calls for it and
// knows every operator credential.
type chainRegistry struct{ leaf *x509.Certificate }

func (r *chainRegistry) Node(id string) (*pactv1.Node, bool) {
	if r.leaf == nil {
		return nil, false
	}
	return &pactv1.Node{NodeId: id, Cert: &pactv1.CertificateInfo{Serial: pki.SerialHex(r.leaf.SerialNumber), SpkiSha256: pki.SPKIFingerprint(r.leaf)}}, true
}
func (*chainRegistry) NodeBySPIFFEID(string) (*pactv1.Node, bool) { return nil, false }
func (*chainRegistry) IsRevoked(string) bool                      { return false }
func (*chainRegistry) CheckOperator(string, string, int64) (raftfsm.OperatorStatus, string) {
	return raftfsm.OperatorRecorded, ""
}

// Operator is the issue record of the operator credential that calls.
func (r *chainRegistry) Operator(serial string) (*pactv1.Operator, bool) {
	if r.leaf == nil || pki.SerialHex(r.leaf.SerialNumber) != serial {
		return nil, false
	}
	id, err := pki.IdentityOf(r.leaf)
	if err != nil || len(r.leaf.Subject.OrganizationalUnit) != 1 {
		return nil, false
	}
	return OperatorRecord(r.leaf, id.Name, r.leaf.Subject.OrganizationalUnit[0], "admin/issuer"), true
}

// chainQuorum decides at once, as a leader would, and counts the refusals
// sent for confirmation.
type chainQuorum struct{ confirmed atomic.Int32 }

func (*chainQuorum) IsLeader() bool                         { return true }
func (*chainQuorum) LinearizableRead(context.Context) error { return nil }
func (*chainQuorum) ConfirmFinal(_ context.Context, decide func() error) error {
	return decide()
}
func (q *chainQuorum) Confirm(_ context.Context, decide func() error, needs func(error) bool) error {
	err := decide()
	if err != nil && needs(err) {
		q.confirmed.Add(1)
		return decide()
	}
	return err
}
func (*chainQuorum) RecordOperator(context.Context, string, *pactv1.Operator) error { return nil }

type chainPeers struct{}

func (chainPeers) RefusedPeer(string, error)                                {}
func (chainPeers) CheckPeerCall(context.Context, string, bool) error        { return nil }
func (chainPeers) RemovedPeer(_ context.Context, _ string, err error) error { return err }
func noReason(error) string                                                 { return "" }
func serving(string) error                                                  { return nil }

// chainPeerVerifier is the peer journals' verifier of roots, with nothing
// recorded.
func chainPeerVerifier(t testing.TB, roots []*x509.Certificate) *PeerVerifier {
	t.Helper()
	v, err := NewPeerVerifier(PeerConfig{Domain: testDomain, Roots: roots, Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func newChainAuth(t testing.TB, bundle Bundle, roots ...*x509.Certificate) (*Authenticator, *chainRegistry, *chainQuorum) {
	t.Helper()
	reg, q := &chainRegistry{}, &chainQuorum{}
	cfg := DefaultConfig()
	cfg.Domain, cfg.Roots, cfg.Clock = testDomain, roots, clock.Real{}
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Registry, cfg.Bundle, cfg.Quorum, cfg.Peers = reg, bundle, q, chainPeers{}
	cfg.PeerVerifier = chainPeerVerifier(t, roots)
	cfg.Serving, cfg.Reason, cfg.Refused, cfg.NoLeader = serving, noReason, func(string) {}, errors.New("no leader")
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, reg, q
}

// call authenticates method for a client that sent chain.
func call(a *Authenticator, method string, chain []*x509.Certificate) (*Principal, error) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: chain}}})
	return a.authenticate(ctx, method)
}

// The chains' CAs: two roots of the domain (a rollover), each with a
// journal CA and its intermediate; a legacy intermediate the first root
// signed; a journal CA (and its intermediate) revoked, so out of the
// bundle; an intermediate retired, out of the bundle under a live journal
// CA.
type chainSet struct {
	root, root2              *chaintest.CA
	jca, inter               *chaintest.CA
	jca2, inter2             *chaintest.CA
	legacy                   *chaintest.CA
	revokedJCA, underRevoked *chaintest.CA
	retired                  *chaintest.CA
	foreignJCA, foreignInter *chaintest.CA
	bundle                   *testBundle
}

func newChainSet() *chainSet {
	names := chaintest.Names{DNS: []string{"j1.pact.local"}}
	s := &chainSet{root: chaintest.NewRoot(testDomain), root2: chaintest.NewRoot(testDomain)}
	s.jca = s.root.JournalCA("j1", names)
	s.inter = s.jca.Intermediate("j1", names)
	s.retired = s.jca.Intermediate("j1", names)
	s.jca2 = s.root2.JournalCA("j2", chaintest.Names{})
	s.inter2 = s.jca2.Intermediate("j2", chaintest.Names{})
	s.legacy = s.root.Intermediate("j0", chaintest.Names{})
	s.revokedJCA = s.root.JournalCA("j3", chaintest.Names{})
	s.underRevoked = s.revokedJCA.Intermediate("j3", chaintest.Names{})
	// A journal CA the root signed for another trust domain; its
	// intermediate signs for this one.
	s.foreignJCA = s.root.In("other.example").JournalCA("j9", chaintest.Names{})
	s.foreignInter = s.foreignJCA.UnconstrainedIntermediate("j9").In(testDomain)
	s.bundle = bundleOf(s.jca.Cert, s.inter.Cert, s.jca2.Cert, s.inter2.Cert, s.legacy.Cert, s.foreignJCA.Cert, s.foreignInter.Cert)
	return s
}

// agentNamingAlso signs with ca an agent certificate with a second SPIFFE
// ID, in trust domain other: the pact identity is read from the first, the
// name constraints of the CAs above apply to both.
func agentNamingAlso(ca *chaintest.CA, other string) *chaintest.Leaf {
	id := pki.Identity{Kind: pki.KindAgent, Name: "n1", Domain: testDomain}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: id.CommonName()},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{id.SPIFFEID(), {Scheme: "spiffe", Host: other, Path: "/pact-agent/n1"}},
	}
	return ca.Issue(tmpl)
}

func TestAuthenticateChainShapes(t *testing.T) {
	s := newChainSet()
	a, reg, q := newChainAuth(t, s.bundle, s.root.Cert, s.root2.Cert)
	// A compromised journal's intermediate without constraints of its
	// own, under its journal CA: the journal CA's constraints still hold.
	loose := s.jca.UnconstrainedIntermediate("j1")
	// An intermediate signed by an intermediate: path length 0 forbids it.
	deep := s.inter.UnconstrainedIntermediate("j1")
	s.bundle.set(append(s.bundle.LiveIntermediates().Certs, loose.Cert, deep.Cert)...)

	agent := pactv1.EnrollmentService_Ping_FullMethodName
	admin := pactv1.AdminService_JournalStatus_FullMethodName
	leafOnly := func(l *chaintest.Leaf) []*x509.Certificate { return l.Chain[:1] }
	sent := func(l *chaintest.Leaf) []*x509.Certificate { return l.Chain }
	for _, tc := range []struct {
		name    string
		method  string
		leaf    *chaintest.Leaf
		chain   func(*chaintest.Leaf) []*x509.Certificate
		want    error // nil: accepted
		confirm bool  // refused only after the leader's confirmation
	}{
		// Agents.
		{"agent: intermediate, journal CA, root", agent, s.inter.Agent("n1"), sent, nil, false},
		{"agent: under the second root", agent, s.inter2.Agent("n1"), sent, nil, false},
		{"agent: leaf alone, CAs from the bundle", agent, s.inter.Agent("n1"), leafOnly, nil, false},
		{"agent: legacy intermediate, root", agent, s.legacy.Agent("n1"), sent, nil, false},
		{"agent: signed by a journal CA", agent, s.jca.Agent("n1"), sent, ErrChainShape, false},
		{"agent: signed by the root", agent, s.root.Agent("n1"), sent, ErrChainShape, false},
		{"agent: under a revoked journal CA (sent, not in the bundle)", agent, s.underRevoked.Agent("n1"), sent, ErrUnknownIssuer, true},
		{"agent: under a retired intermediate", agent, s.retired.Agent("n1"), sent, ErrUnknownIssuer, true},
		{"agent: under a journal CA of another domain", agent, s.foreignInter.Agent("n1"), sent, ErrUnauthenticated, false},
		{"agent: second SPIFFE ID in another trust domain", agent, agentNamingAlso(loose, "evil.example"), sent, ErrUnauthenticated, false},
		{"agent: second SPIFFE ID in a subdomain", agent, agentNamingAlso(loose, "sub."+testDomain), sent, ErrUnauthenticated, false},
		{"agent: SPIFFE ID in another trust domain", agent, loose.In("evil.example").Agent("n1"), sent, ErrUnauthenticated, false},
		{"agent: intermediate under an intermediate", agent, deep.Agent("n1"), sent, ErrUnauthenticated, false},
		// Operators.
		{"operator: root", admin, s.root.Operator("alice", "viewer"), sent, nil, false},
		{"operator: second root", admin, s.root2.Operator("alice", "viewer"), sent, nil, false},
		{"operator: intermediate, journal CA, root", admin, s.inter.Operator("bob", "viewer"), sent, nil, false},
		{"operator: intermediate, journal CA, second root", admin, s.inter2.Operator("bob", "viewer"), sent, nil, false},
		{"operator: leaf alone, CAs from the bundle", admin, s.inter.Operator("bob", "viewer"), leafOnly, nil, false},
		{"operator: signed by a journal CA", admin, s.jca.Operator("eve", "platform-admin"), sent, ErrChainShape, false},
		{"operator: legacy intermediate", admin, s.legacy.Operator("eve", "platform-admin"), sent, ErrChainShape, false},
		{"operator: under a revoked journal CA", admin, s.underRevoked.Operator("bob", "viewer"), sent, ErrUnknownOperatorIssuer, true},
		{"operator: under a retired intermediate", admin, s.retired.Operator("bob", "viewer"), sent, ErrUnknownOperatorIssuer, true},
		{"operator: under a journal CA of another domain", admin, s.foreignInter.Operator("bob", "viewer"), sent, ErrUnauthenticated, false},
		// Kinds in the wrong place.
		{"agent certificate on an operator method", admin, s.inter.Agent("n1"), sent, ErrPermission, false},
		{"operator credential on an agent method", agent, s.root.Operator("alice", "viewer"), sent, ErrPermission, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg.leaf = tc.leaf.Cert
			before := q.confirmed.Load()
			p, err := call(a, tc.method, tc.chain(tc.leaf))
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == nil && p == nil:
				t.Fatal("accepted with no principal")
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if tc.want != nil && tc.want != ErrPermission && !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("%v does not come with ErrUnauthenticated", err)
			}
			if got := q.confirmed.Load() - before; (got > 0) != tc.confirm {
				t.Errorf("confirmed with the leader %d times, want confirmation %v", got, tc.confirm)
			}
		})
	}
}

// A journal CA revoked while a connection's verdict is remembered: the
// bundle's version changes and the next call verifies again, and is
// refused.
func TestRevokedJournalCAEndsTheRememberedVerdict(t *testing.T) {
	s := newChainSet()
	a, reg, _ := newChainAuth(t, s.bundle, s.root.Cert)
	leaf := s.inter.Agent("n1")
	reg.leaf = leaf.Cert
	verdict := &chainVerdict{}
	id, _ := pki.IdentityOf(leaf.Cert)
	if err := a.verifyClient(leaf.Cert, id, verdict); err != nil {
		t.Fatal(err)
	}
	// IntermediatesAt drops an intermediate whose journal CA is revoked,
	// and the bundle the journal CA.
	s.bundle.set(s.jca2.Cert, s.inter2.Cert, s.legacy.Cert)
	if err := a.verifyClient(leaf.Cert, id, verdict); !errors.Is(err, ErrUnknownIssuer) {
		t.Fatalf("after the revocation: %v, want %v", err, ErrUnknownIssuer)
	}
	// The intermediate alone still in the bundle is not enough.
	s.bundle.set(s.inter.Cert)
	if err := a.verifyClient(leaf.Cert, id, verdict); !errors.Is(err, ErrUnknownIssuer) {
		t.Fatalf("intermediate in the bundle, its journal CA not: %v, want %v", err, ErrUnknownIssuer)
	}
}

// The refusal of a misshapen chain names the shape and says what to do.
func TestChainShapeMessage(t *testing.T) {
	s := newChainSet()
	a, reg, _ := newChainAuth(t, s.bundle, s.root.Cert)
	op := s.jca.Operator("eve", "platform-admin")
	reg.leaf = op.Cert
	_, err := call(a, pactv1.AdminService_JournalStatus_FullMethodName, op.Chain)
	for _, want := range []string{"operator", "journal CA j1", "root", "pact admin issue"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: does not say %q", err, want)
		}
	}
}

// ChainShape on its own, for each kind: the table of docs/security.md.
func TestChainShape(t *testing.T) {
	s := newChainSet()
	r, j, i, l := s.root.Cert, s.jca.Cert, s.inter.Cert, s.legacy.Cert
	leaf := s.inter.Agent("n1").Cert
	fj := s.foreignJCA.Cert
	for _, tc := range []struct {
		name  string
		kind  string
		chain []*x509.Certificate
		ok    bool
	}{
		{"agent [leaf, intermediate, journal CA, root]", pki.KindAgent, []*x509.Certificate{leaf, i, j, r}, true},
		{"agent [leaf, legacy intermediate, root]", pki.KindAgent, []*x509.Certificate{leaf, l, r}, true},
		{"agent [leaf, journal CA, root]", pki.KindAgent, []*x509.Certificate{leaf, j, r}, false},
		{"agent [leaf, root]", pki.KindAgent, []*x509.Certificate{leaf, r}, false},
		{"agent [leaf, intermediate, journal CA of another domain, root]", pki.KindAgent, []*x509.Certificate{leaf, i, fj, r}, false},
		{"agent [leaf, intermediate, intermediate, root]", pki.KindAgent, []*x509.Certificate{leaf, i, l, r}, false},
		{"journal [server, intermediate, journal CA, root]", pki.KindJournal, []*x509.Certificate{leaf, i, j, r}, true},
		{"journal [server, legacy intermediate, root]", pki.KindJournal, []*x509.Certificate{leaf, l, r}, true},
		{"journal [server, journal CA, root]", pki.KindJournal, []*x509.Certificate{leaf, j, r}, false},
		{"journal [server, root]", pki.KindJournal, []*x509.Certificate{leaf, r}, false},
		{"operator [op, root]", pki.KindAdmin, []*x509.Certificate{leaf, r}, true},
		{"operator [op, intermediate, journal CA, root]", pki.KindAdmin, []*x509.Certificate{leaf, i, j, r}, true},
		{"operator [op, journal CA, root]", pki.KindAdmin, []*x509.Certificate{leaf, j, r}, false},
		{"operator [op, legacy intermediate, root]", pki.KindAdmin, []*x509.Certificate{leaf, l, r}, false},
		{"operator [op, journal CA, journal CA, root]", pki.KindAdmin, []*x509.Certificate{leaf, j, j, r}, false},
		{"no pact kind", "", []*x509.Certificate{leaf, i, j, r}, false},
	} {
		err := ChainShape(tc.kind, tc.chain, testDomain)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrChainShape) {
			t.Errorf("%s: %v is not ErrChainShape", tc.name, err)
		}
	}
}

// Config takes one or two roots, of its domain only.
func TestConfigRoots(t *testing.T) {
	base := func() Config {
		cfg := DefaultConfig()
		cfg.Domain = testDomain
		cfg.Registry, cfg.Bundle, cfg.Quorum, cfg.Peers = &chainRegistry{}, bundleOf(), &chainQuorum{}, chainPeers{}
		cfg.PeerVerifier = &PeerVerifier{} // only checked for presence here
		cfg.Serving, cfg.Reason, cfg.Refused, cfg.NoLeader = serving, noReason, func(string) {}, errors.New("no leader")
		return cfg
	}
	r1, r2, foreign := chaintest.NewRoot(testDomain).Cert, chaintest.NewRoot(testDomain).Cert, chaintest.NewRoot("other.example").Cert
	for _, tc := range []struct {
		name  string
		roots []*x509.Certificate
		want  string // "" valid
	}{
		{"one root", []*x509.Certificate{r1}, ""},
		{"two roots", []*x509.Certificate{r1, r2}, ""},
		{"none", nil, "Roots is required"},
		{"a nil root", []*x509.Certificate{r1, nil}, "root 1 is missing"},
		{"a root of another domain", []*x509.Certificate{r1, foreign}, "trust domain other.example"},
	} {
		cfg := base()
		cfg.Roots = tc.roots
		err := cfg.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
