package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// signedCA is a CA certificate tmpl signed by parent, as a chaintest.CA
// that signs in turn.
func signedCA(parent *chaintest.CA, tmpl *x509.Certificate) *chaintest.CA {
	l := parent.Issue(tmpl)
	return &chaintest.CA{Domain: parent.Domain, Cert: l.Cert, Key: l.Key, Root: parent.Root, Path: l.Chain}
}

// misprofiledJournalCA is the journal CA of journal id as the ceremony
// makes it (its id and id.pact.local permitted), changed by mutate, signed
// by root.
func misprofiledJournalCA(root *chaintest.CA, id string, mutate func(*x509.Certificate)) *chaintest.CA {
	now := time.Now()
	tmpl := caprofile.JournalCA(caprofile.JournalCAParams{
		Domain: root.Domain, JournalID: id, DNSNames: []string{id, id + "." + root.Domain},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
	})
	mutate(tmpl)
	return signedCA(root, tmpl)
}

// rootSignedCA is a CA the root signed that is no journal CA by name and
// may sign CAs (path length pathLen, -1 for no limit): what an attacker
// with the root's signature on such a CA would pass off as a legacy
// intermediate.
func rootSignedCA(root *chaintest.CA, pathLen int) *chaintest.CA {
	return signedCA(root, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "pact intermediate j5@" + root.Domain, Organization: []string{"pact"}},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            pathLen,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: root.Domain}},
	})
}

// journalCAMutations are journal CAs that do not fit their profile, yet
// under which x509 verifies an agent's and an operator's chain.
var journalCAMutations = []struct {
	name   string
	mutate func(*x509.Certificate)
	reason string
}{
	{"no name constraints", func(c *x509.Certificate) {
		c.PermittedDNSDomainsCritical = false
		c.PermittedDNSDomains, c.ExcludedDNSDomains, c.PermittedURIDomains, c.ExcludedURIDomains = nil, nil, nil, nil
		c.ExcludedIPRanges, c.ExcludedEmailAddresses = nil, nil
	}, "no name constraints"},
	{"non-critical name constraints", func(c *x509.Certificate) { c.PermittedDNSDomainsCritical = false }, "not critical"},
	{"the whole trust domain's DNS names", func(c *x509.Certificate) { c.PermittedDNSDomains = []string{testDomain} }, "every host under the trust domain"},
	{"an empty DNS constraint", func(c *x509.Certificate) { c.PermittedDNSDomains = []string{"j1", ""} }, "not a host name"},
	{"no URI constraint", func(c *x509.Certificate) { c.PermittedURIDomains = nil }, "permits URIs of every domain"},
	{"an IPv4 range", func(c *x509.Certificate) {
		c.PermittedIPRanges, c.ExcludedIPRanges = []*net.IPNet{{IP: net.IPv4(10, 0, 0, 0).To4(), Mask: net.CIDRMask(8, 32)}}, nil
	}, "wider than one address"},
	{"path length 2", func(c *x509.Certificate) { c.MaxPathLen = 2 }, "path length 2"},
	{"no path length limit", func(c *x509.Certificate) { c.MaxPathLen = -1 }, "no path length limit"},
}

// Journal CAs that do not fit their profile, and root-signed CAs that may
// sign CAs, are live in the bundle (as a stolen root signature would make
// them, past every other check): x509 verifies the chains below them, and
// authenticate refuses them by their shape, on the whole-chain path and on
// the fast path alike, for agents and operators.
func TestAuthenticateMisprofiledCAs(t *testing.T) {
	root := chaintest.NewRoot(testDomain)
	good := root.JournalCA("j1", chaintest.Names{DNS: []string{"j1.pact.local"}})
	goodInter := good.Intermediate("j1", chaintest.Names{DNS: []string{"j1.pact.local"}})
	live := []*x509.Certificate{good.Cert, goodInter.Cert}

	agent := pactv1.EnrollmentService_Ping_FullMethodName
	admin := pactv1.AdminService_JournalStatus_FullMethodName
	type tcase struct {
		name   string
		method string
		leaf   *chaintest.Leaf
		kind   string
		reason string // "" accepted
	}
	tests := []tcase{
		{"agent under a journal CA of its profile", agent, goodInter.Agent("n1"), pki.KindAgent, ""},
		{"operator under a journal CA of its profile", admin, goodInter.Operator("bob", "viewer"), pki.KindAdmin, ""},
	}
	for _, m := range journalCAMutations {
		jca := misprofiledJournalCA(root, "j6", m.mutate)
		inter := jca.Intermediate("j6", chaintest.Names{})
		live = append(live, jca.Cert, inter.Cert)
		tests = append(tests,
			tcase{"agent under a journal CA with " + m.name, agent, inter.Agent("n1"), pki.KindAgent, m.reason},
			tcase{"operator under a journal CA with " + m.name, admin, inter.Operator("bob", "viewer"), pki.KindAdmin, m.reason},
		)
	}
	for _, pl := range []int{2, 1, -1} {
		ca := rootSignedCA(root, pl)
		live = append(live, ca.Cert)
		want := "an intermediate has path length 0"
		tests = append(tests,
			tcase{"agent signed directly by a root-signed CA of path length " + itoa(pl), agent, ca.Agent("n1"), pki.KindAgent, want},
			tcase{"operator signed directly by a root-signed CA of path length " + itoa(pl), admin, ca.Operator("eve", "platform-admin"), pki.KindAdmin, ""},
		)
		// An operator under a legacy intermediate is refused whatever its
		// path length (TestAuthenticateChainShapes); only the agent's
		// reason is this test's.
		tests[len(tests)-1].reason = "operator credential is signed by the root"
	}
	bundle := bundleOf(live...)
	a, reg, _ := newChainAuth(t, bundle, root.Cert)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// x509 itself verifies every one of them.
			if _, err := tc.leaf.Cert.Verify(x509.VerifyOptions{Roots: chaintest.Pool(root.Cert), Intermediates: bundle.LiveIntermediates().Pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Fatalf("x509 refuses the chain, so it tests nothing here: %v", err)
			}
			// The fast path takes none of the misshapen ones, whether or
			// not a handshake vouched for the leaf's signature.
			for _, handshake := range []bool{false, true} {
				if issuer := issuerIn(tc.leaf.Cert, bundle.LiveIntermediates().Certs); handshake && issuer != nil {
					a.signed.add(tc.leaf.Cert, issuer)
				}
				chain := a.fastVerify(tc.leaf.Cert, tc.kind, bundle.LiveIntermediates(), time.Now())
				if (chain != nil) != (tc.reason == "") {
					t.Errorf("fast path (after a handshake: %v) returned %d certificates, want a chain: %v", handshake, len(chain), tc.reason == "")
				}
			}
			reg.leaf = tc.leaf.Cert
			_, err := call(a, tc.method, tc.leaf.Chain)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrChainShape) || !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("got %v, want ErrChainShape and ErrUnauthenticated", err)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("%q does not say %q", err, tc.reason)
			}
		})
	}
}

func itoa(n int) string {
	if n < 0 {
		return "unlimited"
	}
	return string(rune('0' + n))
}
