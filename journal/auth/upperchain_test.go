package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/pki"
)

// The fast path accepts only what the whole chain's x509 verification
// accepts, and it is taken for the plain chain of every agent; the chains
// it must leave to x509 (the journal CA's constraints or path length
// broken only as seen from the leaf, a name it cannot judge) go there.
// Each chain is tried twice: on a call with no handshake before it (x509
// checks the leaf's signature under its intermediate), and after the
// connection's handshake checked that signature (leafSigs), when the
// intermediate's rules on the leaf are the fast path's to check.
func TestFastVerifyAcceptsOnlyWhatX509Accepts(t *testing.T) {
	s := newChainSet()
	loose := s.jca.UnconstrainedIntermediate("j1")
	deep := s.inter.UnconstrainedIntermediate("j1")
	// Intermediates whose own constraints permit another trust domain
	// only, all that refuses a leaf of this one: one signed by the root
	// (nothing constrains it from above), one under the journal CA (which
	// permits the leaf).
	elsewhere := s.root.In("other.example").Intermediate("j8", chaintest.Names{})
	elsewhereUnder := constrainedTo(s.jca, s.inter.Cert, "other.example")
	s.bundle.set(append(s.bundle.LiveIntermediates().Certs, loose.Cert, deep.Cert, elsewhere.Cert, elsewhereUnder.Cert)...)
	a, _, _ := newChainAuth(t, s.bundle, s.root.Cert, s.root2.Cert)
	now := time.Now()
	for _, tc := range []struct {
		name string
		leaf *chaintest.Leaf
		fast bool // the fast path must take it
	}{
		{"agent: intermediate, journal CA, root", s.inter.Agent("n1"), true},
		{"agent: under the second root", s.inter2.Agent("n1"), true},
		{"agent: legacy intermediate, root", s.legacy.Agent("n1"), true},
		{"agent: unconstrained intermediate under the journal CA", loose.Agent("n1"), true},
		{"operator: intermediate, journal CA, root", s.inter.Operator("bob", "viewer"), true},
		{"agent: signed by a journal CA", s.jca.Agent("n1"), false},
		{"agent: signed by the root", s.root.Agent("n1"), false},
		{"agent: under a revoked journal CA", s.underRevoked.Agent("n1"), false},
		{"agent: under a retired intermediate", s.retired.Agent("n1"), false},
		{"agent: under a journal CA of another domain", s.foreignInter.Agent("n1"), false},
		{"agent: second SPIFFE ID in another trust domain", agentNamingAlso(loose, "evil.example"), false},
		{"agent: SPIFFE ID in another trust domain", loose.In("evil.example").Agent("n1"), false},
		{"agent: SPIFFE ID in a subdomain (excluded by the journal CA)", loose.In("sub." + testDomain).Agent("n1"), false},
		{"agent: SPIFFE ID in the domain's parent", loose.In("local").Agent("n1"), false},
		{"agent: legacy intermediate constrained to another domain", elsewhere.In(testDomain).Agent("n1"), false},
		{"agent: intermediate constrained to another domain, under the journal CA", elsewhereUnder.In(testDomain).Agent("n1"), false},
		{"agent: intermediate under an intermediate", deep.Agent("n1"), false},
		{"operator: root", s.root.Operator("alice", "viewer"), false},
	} {
		for _, handshake := range []bool{false, true} {
			name := tc.name
			if handshake {
				name += ", after the handshake"
			}
			t.Run(name, func(t *testing.T) {
				leaf := tc.leaf.Cert
				id, err := pki.IdentityOf(leaf)
				if err != nil {
					id = pki.Identity{Kind: pki.KindAgent}
				}
				bundle := s.bundle.LiveIntermediates()
				fastAt := func(now time.Time) []*x509.Certificate {
					if handshake {
						// The handshake passes every chain here (each
						// reaches a root) and records the leaf's signature.
						if err := a.VerifyClientHandshake(tc.leaf.DER(), nil); err != nil {
							t.Fatalf("handshake: %v", err)
						}
					}
					return a.fastVerify(leaf, id.Kind, bundle, now)
				}
				fast := fastAt(now)
				_, full := a.verifyShaped(leaf, id.Kind, x509.VerifyOptions{Roots: a.roots, Intermediates: bundle.Pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
				if fast != nil && full != nil {
					t.Fatalf("the fast path accepted what x509 refuses: %v", full)
				}
				if (fast != nil) != tc.fast {
					t.Fatalf("fast path taken: %v, want %v (x509: %v)", fast != nil, tc.fast, full)
				}
				if fast != nil {
					if err := ChainShape(id.Kind, fast, testDomain); err != nil {
						t.Fatalf("the fast path's chain: %v", err)
					}
					if handshake && a.signed.has(leaf, tc.leaf.Chain[1]) {
						t.Fatal("the fast path did not use the handshake's check of the leaf's signature")
					}
					// Outside the certificates' validity it is x509's again.
					if fastAt(leaf.NotAfter.Add(time.Second)) != nil {
						t.Fatal("the fast path accepted an expired leaf")
					}
					if fastAt(fast[2].NotAfter.Add(time.Second)) != nil {
						t.Fatal("the fast path accepted a chain with an expired CA")
					}
				}
			})
		}
	}
}

// constrainedTo makes, signed by parent, an intermediate like tmpl (of
// parent's domain) but of its own name and key, whose name constraints
// permit SPIFFE IDs of domain only.
func constrainedTo(parent *chaintest.CA, tmpl *x509.Certificate, domain string) *chaintest.CA {
	t := *tmpl
	t.RawSubject, t.SubjectKeyId, t.SerialNumber = nil, nil, nil
	t.Subject = pkix.Name{CommonName: "pact intermediate constrained to " + domain, Organization: []string{"pact"}}
	t.PermittedURIDomains, t.ExcludedURIDomains = []string{domain}, []string{"." + domain}
	l := parent.Issue(&t)
	return &chaintest.CA{Domain: parent.Domain, Cert: l.Cert, Key: l.Key, Root: l.Root, Path: l.Chain}
}

// BenchmarkVerifyClientFirstCall is a new connection's first call: its
// plain agent chain verified by verifyClient (the fast path), against the
// whole chain's x509 verification it replaces; and the handshake's check
// and the first call together, the leaf's signature checked once (the
// handshake's record taken by the call) and, as before leafSigs, twice.
func BenchmarkVerifyClientFirstCall(b *testing.B) {
	s := newChainSet()
	a, _, _ := newChainAuth(b, s.bundle, s.root.Cert, s.root2.Cert)
	agent := s.inter.Agent("n1")
	leaf := agent.Cert
	id, err := pki.IdentityOf(leaf)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("verifyClient", func(b *testing.B) {
		for b.Loop() {
			if err := a.verifyClient(leaf, id, &chainVerdict{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("whole chain x509", func(b *testing.B) {
		bundle := s.bundle.LiveIntermediates()
		for b.Loop() {
			if _, err := a.verifyShaped(leaf, id.Kind, x509.VerifyOptions{Roots: a.roots, Intermediates: bundle.Pool, CurrentTime: time.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	handshakeAndCall := func(b *testing.B, a *Authenticator) {
		raw := agent.DER()
		b.ReportAllocs()
		for b.Loop() {
			if err := a.VerifyClientHandshake(raw, nil); err != nil {
				b.Fatal(err)
			}
			if err := a.verifyClient(leaf, id, &chainVerdict{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("handshake+first call", func(b *testing.B) {
		handshakeAndCall(b, a)
	})
	b.Run("handshake+first call, leaf signature checked twice", func(b *testing.B) {
		twice, _, _ := newChainAuth(b, s.bundle, s.root.Cert, s.root2.Cert)
		twice.signed = nil
		handshakeAndCall(b, twice)
	})
}
