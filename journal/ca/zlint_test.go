package ca

import (
	"crypto/x509"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	zx509 "github.com/zmap/zcrypto/x509"
	"github.com/zmap/zlint/v3"
	"github.com/zmap/zlint/v3/lint"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/pki"
)

// pact is a private PKI: its roots are in no browser or operating-system
// trust store, its certificates name SPIFFE IDs, not web sites, and no
// CA/Browser Forum audit, root-program policy or EU qualified-trust rule
// applies to them. So the lints that bind pact are those whose source is an
// IETF RFC; the others are left out by source, each with why.
var (
	privatePKILintSources = lint.SourceList{
		lint.RFC3279, // algorithm and key encodings (profiled by RFC 5280)
		lint.RFC5280, // the certificate profile itself
		lint.RFC5480, // ECC SubjectPublicKeyInfo
		lint.RFC5891, // IDNA: applies to any DNS name in a SAN
		lint.RFC6960, // OCSP signing certificates (pact makes none: not applicable)
		lint.RFC6962, // CT precertificates (pact makes none: not applicable)
		lint.RFC8813, // ECC key usage
	}
	publicPKILintSources = map[lint.LintSource]string{
		lint.CABFBaselineRequirements:      "CA/Browser Forum TLS Baseline Requirements: publicly trusted TLS only",
		lint.CABFCSBaselineRequirements:    "CA/Browser Forum code-signing requirements: publicly trusted code signing only",
		lint.CABFSMIMEBaselineRequirements: "CA/Browser Forum S/MIME requirements: publicly trusted e-mail only",
		lint.CABFEVGuidelines:              "CA/Browser Forum EV guidelines: publicly trusted EV only",
		lint.MozillaRootStorePolicy:        "Mozilla root program: CAs in Mozilla's trust store only",
		lint.AppleRootStorePolicy:          "Apple root program: CAs in Apple's trust store only",
		lint.ChromeRootStorePolicy:         "Chrome root program: CAs in Chrome's trust store only",
		lint.EtsiEsi:                       "ETSI EN 319 412: EU qualified trust services only",
		lint.Community:                     "community best practice for the Web PKI, no normative source",
	}
)

// knownLintWarnings are the warnings a pact certificate may draw from the
// lints above, each with why it stays (docs/security.md, "Certificate
// profile and lint", lists the same). A warning not listed here fails the
// test: fix the certificate, or list it here and in the docs with a reason.
var knownLintWarnings = map[string]string{}

// zlintRegistry is zlint's registry narrowed to privatePKILintSources. It
// fails when zlint knows a source this test has not classified, so a new
// source is looked at rather than silently run or skipped.
func zlintRegistry(t *testing.T) lint.Registry {
	t.Helper()
	for _, s := range lint.GlobalRegistry().Sources() {
		_, public := publicPKILintSources[s]
		if !public && !slices.Contains(privatePKILintSources, s) {
			t.Errorf("zlint lint source %q is neither in privatePKILintSources nor in publicPKILintSources: classify it", s)
		}
	}
	reg, err := lint.GlobalRegistry().Filter(lint.FilterOptions{IncludeSources: privatePKILintSources})
	if err != nil {
		t.Fatalf("filter zlint registry: %v", err)
	}
	if n := len(reg.CertificateLints().Lints()); n < 100 {
		t.Fatalf("only %d certificate lints apply; the filter lost most of RFC 5280", n)
	}
	return reg
}

// lintCertificate runs the private-PKI lints over cert: an error or a fatal
// result fails the test, a known warning is logged, an unknown one fails.
func lintCertificate(t *testing.T, reg lint.Registry, cert *x509.Certificate) {
	t.Helper()
	zc, err := zx509.ParseCertificate(cert.Raw)
	if err != nil {
		t.Fatalf("zcrypto cannot parse the certificate: %v", err)
	}
	rs := zlint.LintCertificateEx(zc, reg)
	names := make([]string, 0, len(rs.Results))
	for name := range rs.Results {
		names = append(names, name)
	}
	sort.Strings(names)
	ran := 0
	for _, name := range names {
		r := rs.Results[name]
		source := reg.CertificateLints().ByName(name).Source
		switch r.Status {
		case lint.Error, lint.Fatal:
			t.Errorf("%s: %s (%s) %s", r.Status, name, source, r.Details)
		case lint.Warn:
			if why, ok := knownLintWarnings[name]; ok {
				t.Logf("warn: %s (%s), known: %s", name, source, why)
			} else {
				t.Errorf("warn: %s (%s) %s: fix it, or list it in knownLintWarnings and docs/security.md with why", name, source, r.Details)
			}
		case lint.Notice:
			t.Logf("notice: %s (%s) %s", name, source, r.Details)
		}
		if r.Status != lint.NA && r.Status != lint.NE {
			ran++
		}
	}
	if ran == 0 {
		t.Error("no lint applied to the certificate")
	}
}

// TestCertificatesPassZlint makes every kind of certificate pact makes,
// through the code that makes it in production, and lints each with zlint
// (issue 23). The standby certificate of a SPIRE node is an agent leaf
// (journal IssueStandby signs with SignAgent, like Enroll and RenewCert), so
// the agent cases cover it.
func TestCertificatesPassZlint(t *testing.T) {
	reg := zlintRegistry(t)

	// The domain root (caprofile.Root, the template the ceremony's pact ca
	// init uses) and the development admin credential, as a --dev journal
	// and pact-journal init make them.
	dir := t.TempDir()
	if _, err := InitDev(dir, testDomain, testNow); err != nil {
		t.Fatalf("InitDev: %v", err)
	}
	auth, err := LoadKeyFileAuthority(filepath.Join(dir, RootCertFile), filepath.Join(dir, RootKeyFile))
	if err != nil {
		t.Fatalf("LoadKeyFileAuthority: %v", err)
	}
	devAdmin := readPEMCert(t, filepath.Join(dir, AdminCertFile))
	// The same credential renewed by a --dev journal started after it aged.
	if renewed, err := RenewDevAdmin(dir, devAdmin.NotAfter.Add(-time.Hour)); err != nil || !renewed {
		t.Fatalf("RenewDevAdmin = %v, %v; want a renewal", renewed, err)
	}
	renewedAdmin := readPEMCert(t, filepath.Join(dir, AdminCertFile))

	// An operator credential made offline (pact-journal admin issue).
	offlinePEM, _, err := IssueAdmin(auth, "alice", pki.RoleOpsPrefix+"ml", DefaultOperatorLifetime, testNow)
	if err != nil {
		t.Fatalf("IssueAdmin: %v", err)
	}
	offline, err := pki.ParseCertsPEM(offlinePEM)
	if err != nil {
		t.Fatal(err)
	}

	// The journal CAs the ceremony signs (caprofile.JournalCA): one with
	// the journal's names and addresses, one with none (it permits no DNS
	// name and no address at all).
	namedDNS, namedIPs := []string{"j1.site.example", "localhost"}, []net.IP{net.IPv4(10, 0, 0, 1), net.IPv6loopback}
	namedJCA, namedJCAKey := newJournalCA(t, auth, testJournal, namedDNS, namedIPs, testNow.Add(caprofile.DefaultJournalCALifetime))
	bareJCA, bareJCAKey := newJournalCA(t, auth, testJournal, nil, nil, testNow.Add(caprofile.DefaultJournalCALifetime))

	newCA := func(issuer Issuer, dnsNames []string, ips []net.IP) *CA {
		cfg := DefaultConfig()
		cfg.Issuer, cfg.Roots = issuer, []*x509.Certificate{auth.Root()}
		cfg.JournalID = testJournal
		cfg.Clock = fakeclock.New(testNow)
		cfg.ServerDNSNames = dnsNames
		cfg.ServerIPs = ips
		c, err := New(cfg)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return c
	}
	// A journal with server names (its intermediate permits them) and one
	// without (its intermediate excludes every DNS name and address), each
	// under its journal CA; and a journal of the legacy layout, whose
	// intermediate the root signs.
	named := newCA(Issuer{namedJCA, namedJCAKey}, namedDNS, namedIPs)
	bare := newCA(Issuer{bareJCA, bareJCAKey}, nil, nil)
	legacy := newCA(auth.Issuer(), namedDNS, namedIPs)
	legacyOperator, _, err := legacy.SignOperator(parseCSR(t, makeCSR(t, newKey(t, "P-256"), nil)), "carol", pki.RolePlatformAdmin, DefaultOperatorLifetime)
	if err != nil {
		t.Fatalf("SignOperator (legacy): %v", err)
	}

	// An operator credential the journal signs for a CSR (pact admin issue,
	// pact admin renew), with the key pact's CLI makes.
	journalOperator, _, err := named.SignOperator(parseCSR(t, makeCSR(t, newKey(t, "P-256"), nil)), "bob", pki.RoleViewer, DefaultOperatorLifetime)
	if err != nil {
		t.Fatalf("SignOperator: %v", err)
	}

	certs := []struct {
		name string
		cert *x509.Certificate
	}{
		{"root", auth.Root()},
		{"journal CA with names", namedJCA},
		{"journal CA without names", bareJCA},
		{"dev admin", devAdmin},
		{"dev admin renewed", renewedAdmin},
		{"operator offline", offline[0]},
		{"operator journal-signed", journalOperator},
		{"operator root-signed by a legacy journal", legacyOperator},
		{"intermediate with server names", named.Intermediate()},
		{"intermediate without server names", bare.Intermediate()},
		{"intermediate of the legacy layout", legacy.Intermediate()},
		{"journal server with names", named.ServerCertificate().Leaf},
		{"journal server of the legacy layout", legacy.ServerCertificate().Leaf},
		{"journal server without names", bare.ServerCertificate().Leaf},
	}
	// Agent leaves (Enroll, RenewCert, IssueStandby) for every key the CSR
	// policy accepts.
	for _, kind := range []string{"P-256", "P-384", "Ed25519"} {
		iss, err := named.SignAgent(parseCSR(t, makeCSR(t, newKey(t, kind), nil)), "node-001")
		if err != nil {
			t.Fatalf("SignAgent %s: %v", kind, err)
		}
		certs = append(certs, struct {
			name string
			cert *x509.Certificate
		}{"agent " + kind, iss.Cert})
	}
	for _, c := range certs {
		t.Run(c.name, func(t *testing.T) { lintCertificate(t, reg, c.cert) })
	}
}
