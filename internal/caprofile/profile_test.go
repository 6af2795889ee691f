package caprofile_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/pki"
)

const profDomain = "site.example"

var profNow = time.Now()

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var serialN int64

func nextSerial() *big.Int {
	serialN++
	return big.NewInt(1000 + serialN)
}

// sign signs tmpl with parent (self-signed when parent is nil) for a fresh
// key, and parses the result.
func sign(t *testing.T, tmpl *x509.Certificate, parent *testCA) *testCA {
	t.Helper()
	key := newTestKey(t)
	if tmpl.SerialNumber == nil {
		tmpl.SerialNumber = nextSerial()
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = profNow.Add(-time.Hour), profNow.Add(24*time.Hour)
	}
	p, pk := tmpl, key
	if parent != nil {
		p, pk = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p, key.Public(), pk)
	if err != nil {
		t.Fatalf("sign %s: %v", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

func testRoot(t *testing.T) *testCA {
	return sign(t, caprofile.Root(profDomain, nextSerial(), profNow.Add(-time.Hour), profNow.Add(72*time.Hour)), nil)
}

// journalCATemplate is caprofile.JournalCA for j1 of profDomain, permitting
// j1, j1.site.example and 10.0.0.1, changed by mutate.
func journalCATemplate(mutate func(*x509.Certificate)) *x509.Certificate {
	tmpl := caprofile.JournalCA(caprofile.JournalCAParams{
		Domain: profDomain, JournalID: "j1", DNSNames: []string{"j1", "j1.site.example"}, IPs: []net.IP{net.ParseIP("10.0.0.1")},
		Serial: nextSerial(), NotBefore: profNow.Add(-time.Hour), NotAfter: profNow.Add(48 * time.Hour),
	})
	if mutate != nil {
		mutate(tmpl)
	}
	return tmpl
}

func cidr(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	if v4 := ip.To4(); v4 != nil {
		n.IP = v4
	}
	return n
}

func clearConstraints(c *x509.Certificate) {
	c.PermittedDNSDomainsCritical = false
	c.PermittedDNSDomains, c.ExcludedDNSDomains = nil, nil
	c.PermittedIPRanges, c.ExcludedIPRanges = nil, nil
	c.PermittedEmailAddresses, c.ExcludedEmailAddresses = nil, nil
	c.PermittedURIDomains, c.ExcludedURIDomains = nil, nil
}

// badJournalCAs are journal CAs of j1 (profDomain) that do not fit the
// profile, each with a word of the reason it is refused with.
var badJournalCAs = []struct {
	name   string
	mutate func(*x509.Certificate)
	reason string
}{
	{"no name constraints", clearConstraints, "no name constraints"},
	{"non-critical name constraints", func(c *x509.Certificate) { c.PermittedDNSDomainsCritical = false }, "not critical"},
	{"the trust domain as a DNS name", func(c *x509.Certificate) { c.PermittedDNSDomains = []string{"j1", "site.example"} }, `"site.example", every host under the trust domain`},
	{"a parent of the trust domain", func(c *x509.Certificate) { c.PermittedDNSDomains = []string{"j1", "example"} }, `"example", every host under the trust domain`},
	{"a parent of another name", func(c *x509.Certificate) {
		c.PermittedDNSDomains = []string{"j1", "j1.hpc.example.org", "example.org"}
	}, `"example.org", a parent of "j1.hpc.example.org"`},
	{"an empty DNS constraint", func(c *x509.Certificate) { c.PermittedDNSDomains = []string{"j1", ""} }, `"", which is not a host name`},
	{"a subdomains-only DNS constraint", func(c *x509.Certificate) { c.PermittedDNSDomains = []string{"j1", ".j1.site.example"} }, "not a host name"},
	{"no DNS name, every one excluded", func(c *x509.Certificate) {
		c.PermittedDNSDomains, c.ExcludedDNSDomains = nil, []string{""}
	}, "permits no DNS name"},
	{"no DNS name, none excluded", func(c *x509.Certificate) { c.PermittedDNSDomains = nil }, "permits no DNS name"},
	{"URIs of another domain", func(c *x509.Certificate) {
		c.PermittedURIDomains, c.ExcludedURIDomains = []string{"other.example"}, []string{".other.example"}
	}, "permits URIs of other.example"},
	{"URIs of every domain", func(c *x509.Certificate) { c.PermittedURIDomains = nil }, "permits URIs of every domain"},
	{"URIs of two domains", func(c *x509.Certificate) { c.PermittedURIDomains = []string{profDomain, "other.example"} }, "permits URIs of site.example, other.example"},
	{"URIs of subdomains", func(c *x509.Certificate) { c.ExcludedURIDomains = nil }, "subdomains of site.example"},
	{"e-mail addresses", func(c *x509.Certificate) { c.ExcludedEmailAddresses = nil }, "e-mail"},
	{"an IPv4 range", func(c *x509.Certificate) { c.PermittedIPRanges = []*net.IPNet{cidr("10.0.0.0/24")} }, "10.0.0.0/24, wider than one address"},
	{"every IPv4 address", func(c *x509.Certificate) { c.PermittedIPRanges = []*net.IPNet{cidr("0.0.0.0/0")} }, "wider than one address"},
	{"an IPv6 range", func(c *x509.Certificate) {
		c.PermittedIPRanges = []*net.IPNet{cidr("10.0.0.1/32"), cidr("fd00::/64")}
	}, "fd00::/64, wider than one address"},
	{"addresses unconstrained", func(c *x509.Certificate) { c.PermittedIPRanges, c.ExcludedIPRanges = nil, nil }, "permits IP addresses without naming them"},
	{"IPv6 addresses unconstrained", func(c *x509.Certificate) {
		c.PermittedIPRanges, c.ExcludedIPRanges = nil, []*net.IPNet{cidr("0.0.0.0/0")}
	}, "permits IP addresses without naming them"},
	{"path length 0", func(c *x509.Certificate) { c.MaxPathLen, c.MaxPathLenZero = 0, true }, "path length 0"},
	{"path length 2", func(c *x509.Certificate) { c.MaxPathLen = 2 }, "path length 2"},
	{"no path length limit", func(c *x509.Certificate) { c.MaxPathLen = -1 }, "no path length limit"},
	{"no keyCertSign", func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageDigitalSignature }, "no keyCertSign"},
	{"another domain's", func(c *x509.Certificate) { c.Subject.CommonName = "pact journal CA j1@other.example" }, `of domain "other.example"`},
	{"a subject without a domain", func(c *x509.Certificate) { c.Subject.CommonName = "pact journal CA j1" }, "is not a journal CA"},
	{"a subject with a bad journal id", func(c *x509.Certificate) { c.Subject.CommonName = "pact journal CA j 1@site.example" }, "is not a journal CA"},
	{"too many names", func(c *x509.Certificate) {
		for i := range 64 {
			c.PermittedIPRanges = append(c.PermittedIPRanges, &net.IPNet{IP: net.IPv4(10, 1, 0, byte(i)).To4(), Mask: net.CIDRMask(32, 32)})
		}
	}, "at most 64"},
}

func TestCheckJournalCAProfile(t *testing.T) {
	root := testRoot(t)
	good := []struct {
		name string
		tmpl *x509.Certificate
	}{
		{"as the ceremony makes it", journalCATemplate(nil)},
		{"no address", caprofile.JournalCA(caprofile.JournalCAParams{Domain: profDomain, JournalID: "j1", DNSNames: []string{"j1"}, Serial: nextSerial(), NotBefore: profNow, NotAfter: profNow.Add(time.Hour)})},
		{"IPv6 and short host names", caprofile.JournalCA(caprofile.JournalCAParams{Domain: profDomain, JournalID: "j1", DNSNames: []string{"localhost", "j1", "node7"},
			IPs: []net.IP{net.ParseIP("::1"), net.ParseIP("127.0.0.1"), net.ParseIP("fd00::7")}, Serial: nextSerial(), NotBefore: profNow, NotAfter: profNow.Add(time.Hour)})},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			if err := caprofile.CheckJournalCAProfile(sign(t, tt.tmpl, root).cert, profDomain); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
	for _, tt := range badJournalCAs {
		t.Run(tt.name, func(t *testing.T) {
			jca := sign(t, journalCATemplate(tt.mutate), root).cert
			err := caprofile.CheckJournalCAProfile(jca, profDomain)
			var pe *caprofile.ProfileError
			if !errors.Is(err, caprofile.ErrProfile) || !errors.As(err, &pe) {
				t.Fatalf("err %v, want a *ProfileError (ErrProfile)", err)
			}
			if !strings.Contains(pe.Reason, tt.reason) || !strings.Contains(pe.Reason, "pact ca sign-journal") {
				t.Errorf("reason %q lacks %q or what to do", pe.Reason, tt.reason)
			}
			// The journal's own check at start refuses it too.
			if err := caprofile.CheckJournalCA(jca, []*x509.Certificate{root.cert}, "j1", profDomain, nil, nil, profNow); !errors.Is(err, caprofile.ErrProfile) {
				t.Errorf("CheckJournalCA: %v, want ErrProfile", err)
			}
		})
	}
}

func TestCheckJournalCANames(t *testing.T) {
	root := testRoot(t)
	jca := func(dns []string, ips ...string) *x509.Certificate {
		var parsed []net.IP
		for _, s := range ips {
			parsed = append(parsed, net.ParseIP(s))
		}
		return sign(t, caprofile.JournalCA(caprofile.JournalCAParams{Domain: profDomain, JournalID: "j1", DNSNames: dns, IPs: parsed,
			Serial: nextSerial(), NotBefore: profNow, NotAfter: profNow.Add(time.Hour)}), root).cert
	}
	served := []string{"j1.site.example", "localhost"}
	servedIPs := []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	tests := []struct {
		name string
		cert *x509.Certificate
		want string // "" for accepted; else the names too many
	}{
		{"the journal's names and id", jca([]string{"j1", "j1.site.example", "localhost"}, "10.0.0.1", "::1"), ""},
		{"fewer names", jca([]string{"j1"}), ""},
		{"names in another case", jca([]string{"J1", "J1.Site.Example"}), ""},
		{"a zone of the journal's names", jca([]string{"j1", "hpc.example.org"}), "permits hpc.example.org,"},
		{"the trust domain", jca([]string{"j1", "site.example"}), "permits site.example,"},
		{"a parent of a name", jca([]string{"j1", "example"}), "permits example,"},
		{"another journal's name", jca([]string{"j1", "j2.site.example"}), "permits j2.site.example,"},
		{"another journal's address", jca([]string{"j1"}, "10.0.0.1", "10.0.0.2"), "permits 10.0.0.2/32,"},
		{"a range", sign(t, journalCATemplate(func(c *x509.Certificate) { c.PermittedIPRanges = []*net.IPNet{cidr("10.0.0.0/24")} }), root).cert, "permits 10.0.0.0/24,"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := caprofile.CheckJournalCANames(tt.cert, "j1", served, servedIPs)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var pe *caprofile.ProfileError
			if !errors.As(err, &pe) || !errors.Is(err, caprofile.ErrProfile) {
				t.Fatalf("err %v, want a *ProfileError", err)
			}
			for _, w := range []string{tt.want, "journal j1 does not serve under", "j1, j1.site.example, localhost, 10.0.0.1", "--names", "--server-names"} {
				if !strings.Contains(pe.Reason, w) {
					t.Errorf("reason %q lacks %q", pe.Reason, w)
				}
			}
		})
	}
}

// leafOf signs a leaf of kind named name with ca.
func leafOf(t *testing.T, ca *testCA, kind, name string, dns ...string) *x509.Certificate {
	t.Helper()
	id := pki.Identity{Kind: kind, Name: name, Domain: profDomain}
	return sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: id.CommonName()},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    dns,
		URIs:        []*url.URL{id.SPIFFEID()},
	}, ca).cert
}

func intermediateTemplate(id string, mutate func(*x509.Certificate)) *x509.Certificate {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "pact intermediate " + id + "@" + profDomain, Organization: []string{"pact"}},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: profDomain}},
	}
	caprofile.Constrain(tmpl, profDomain, []string{"j1.site.example"}, nil)
	if mutate != nil {
		mutate(tmpl)
	}
	return tmpl
}

// verified verifies leaf up to root through cas and returns the first
// chain, as every verifier does before CheckChainShape.
func verified(t *testing.T, leaf *x509.Certificate, root *testCA, cas ...*testCA) []*x509.Certificate {
	t.Helper()
	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root.cert)
	for _, c := range cas {
		inters.AddCert(c.cert)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, CurrentTime: profNow, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		t.Fatalf("x509 refuses %s: %v", leaf.Subject.CommonName, err)
	}
	return chains[0]
}

// TestCheckChainShapeProfiles: a chain through a journal CA that does not
// fit its profile, or through a root-signed CA that may sign CAs taken for
// a legacy intermediate, is of no shape pact issues, for every kind of
// leaf, though x509 verifies it.
func TestCheckChainShapeProfiles(t *testing.T) {
	root := testRoot(t)
	type shape struct {
		name  string
		chain []*x509.Certificate
		kind  string
		want  string // "" for accepted
	}
	var tests []shape
	// The shapes pact issues, as the control.
	good := sign(t, journalCATemplate(nil), root)
	goodInter := sign(t, intermediateTemplate("j1", nil), good)
	legacy := sign(t, intermediateTemplate("j1", nil), root)
	tests = append(tests,
		shape{"agent under a journal CA", verified(t, leafOf(t, goodInter, pki.KindAgent, "n1"), root, goodInter, good), pki.KindAgent, ""},
		shape{"journal under a journal CA", verified(t, leafOf(t, goodInter, pki.KindJournal, "j1", "j1.site.example"), root, goodInter, good), pki.KindJournal, ""},
		shape{"agent under a legacy intermediate", verified(t, leafOf(t, legacy, pki.KindAgent, "n1"), root, legacy), pki.KindAgent, ""},
		shape{"journal under a legacy intermediate", verified(t, leafOf(t, legacy, pki.KindJournal, "j1", "j1.site.example"), root, legacy), pki.KindJournal, ""},
	)
	// A root-signed CA that is no journal CA by name and may sign CAs,
	// signing leaves directly as a legacy intermediate would.
	for _, tc := range []struct {
		name   string
		mutate func(*x509.Certificate)
		want   string
	}{
		{"path length 2", func(c *x509.Certificate) { c.MaxPathLen, c.MaxPathLenZero = 2, false }, "has path length 2; an intermediate has path length 0"},
		{"path length 1", func(c *x509.Certificate) { c.MaxPathLen, c.MaxPathLenZero = 1, false }, "has path length 1"},
		{"no path length limit", func(c *x509.Certificate) { c.MaxPathLen, c.MaxPathLenZero = -1, false }, "has no path length limit"},
	} {
		ca := sign(t, intermediateTemplate("j1", tc.mutate), root)
		tests = append(tests,
			shape{"a root-signed CA of " + tc.name + " signing a journal", verified(t, leafOf(t, ca, pki.KindJournal, "j1", "j1.site.example"), root, ca), pki.KindJournal, tc.want},
			shape{"a root-signed CA of " + tc.name + " signing an agent", verified(t, leafOf(t, ca, pki.KindAgent, "n1"), root, ca), pki.KindAgent, tc.want},
		)
		// Under a journal CA it is no intermediate either.
		under := sign(t, intermediateTemplate("j1", tc.mutate), good)
		tests = append(tests, shape{"an intermediate of " + tc.name + " under a journal CA", verified(t, leafOf(t, under, pki.KindAgent, "n1"), root, under, good), pki.KindAgent, tc.want})
	}
	// A journal CA that does not fit its profile, for an agent, a journal
	// and an operator below its intermediate. Those x509 itself refuses
	// (a leaf outside the constraints, a path length 0 journal CA) are
	// left out: the shape is what this test is about.
	for _, bad := range badJournalCAs {
		switch bad.name {
		case "path length 0", "no keyCertSign", "URIs of another domain", "an empty DNS constraint":
			continue
		}
		jca := sign(t, journalCATemplate(bad.mutate), root)
		inter := sign(t, intermediateTemplate("j1", nil), jca)
		for _, kind := range []string{pki.KindAgent, pki.KindJournal, pki.KindAdmin} {
			// No DNS name: some of these journal CAs permit none.
			leaf := leafOf(t, inter, kind, "j1")
			tests = append(tests, shape{kind + " under a journal CA with " + bad.name, verified(t, leaf, root, inter, jca), kind, bad.reason})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := caprofile.CheckChainShape(tt.kind, tt.chain, profDomain)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if err := caprofile.CheckChainAboveLeaf(tt.kind, tt.chain[1:], profDomain); err != nil {
					t.Fatalf("CheckChainAboveLeaf refused: %v", err)
				}
				return
			}
			if !errors.Is(err, caprofile.ErrChainShape) {
				t.Fatalf("err %v, want ErrChainShape", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%q lacks %q", err, tt.want)
			}
			if err := caprofile.CheckChainAboveLeaf(tt.kind, tt.chain[1:], profDomain); !errors.Is(err, caprofile.ErrChainShape) {
				t.Errorf("CheckChainAboveLeaf: %v, want ErrChainShape", err)
			}
		})
	}
}
