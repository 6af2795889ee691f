package auth

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/pki"
)

// The fast path accepts only what the whole chain's x509 verification
// accepts, and it is taken for the plain chain of every agent; the chains
// it must leave to x509 (the journal CA's constraints or path length
// broken only as seen from the leaf, a name it cannot judge) go there.
func TestFastVerifyAcceptsOnlyWhatX509Accepts(t *testing.T) {
	s := newChainSet()
	loose := s.jca.UnconstrainedIntermediate("j1")
	deep := s.inter.UnconstrainedIntermediate("j1")
	s.bundle.set(append(s.bundle.LiveIntermediates().Certs, loose.Cert, deep.Cert)...)
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
		{"agent: intermediate under an intermediate", deep.Agent("n1"), false},
		{"operator: root", s.root.Operator("alice", "viewer"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaf := tc.leaf.Cert
			id, err := pki.IdentityOf(leaf)
			if err != nil {
				id = pki.Identity{Kind: pki.KindAgent}
			}
			bundle := s.bundle.LiveIntermediates()
			fast := a.fastVerify(leaf, id.Kind, bundle, now)
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
				// Outside the certificates' validity it is x509's again.
				if a.fastVerify(leaf, id.Kind, bundle, leaf.NotAfter.Add(time.Second)) != nil {
					t.Fatal("the fast path accepted an expired leaf")
				}
				if a.fastVerify(leaf, id.Kind, bundle, fast[2].NotAfter.Add(time.Second)) != nil {
					t.Fatal("the fast path accepted a chain with an expired CA")
				}
			}
		})
	}
}

// BenchmarkVerifyClientFirstCall is a new connection's first call: its
// plain agent chain verified by verifyClient (the fast path), against the
// whole chain's x509 verification it replaces.
func BenchmarkVerifyClientFirstCall(b *testing.B) {
	s := newChainSet()
	a, _, _ := newChainAuth(b, s.bundle, s.root.Cert, s.root2.Cert)
	leaf := s.inter.Agent("n1").Cert
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
}
