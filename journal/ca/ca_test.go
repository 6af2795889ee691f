package ca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/pki"
)

// testNow is a whole second: certificate times have one-second resolution.
var testNow = time.Date(2026, time.March, 2, 9, 30, 0, 0, time.UTC)

const (
	testDomain  = "pact.local"
	testJournal = "journal-1"
)

// Extension OIDs.
var (
	oidExtSubjectKeyID     = asn1.ObjectIdentifier{2, 5, 29, 14}
	oidExtKeyUsage         = asn1.ObjectIdentifier{2, 5, 29, 15}
	oidExtSAN              = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidExtBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}
	oidExtAuthorityKeyID   = asn1.ObjectIdentifier{2, 5, 29, 35}
	oidExtExtKeyUsage      = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidEKUServerAuth       = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 1}
	oidEKUClientAuth       = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 2}

	oidSigECDSAWithSHA1   = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 1}
	oidSigECDSAWithSHA256 = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}
	oidSigSHA256WithRSA   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}
)

// newUpstream makes a dev domain root in a fresh directory the way a journal
// does on first start, and loads it back from the files.
func newUpstream(tb testing.TB, now time.Time) (*KeyFileAuthority, string) {
	tb.Helper()
	dir := tb.TempDir()
	created, err := InitDev(dir, testDomain, now)
	if err != nil {
		tb.Fatalf("InitDev: %v", err)
	}
	if !created {
		tb.Fatal("InitDev on an empty directory reported created=false")
	}
	auth, err := LoadKeyFileAuthority(filepath.Join(dir, RootCertFile), filepath.Join(dir, RootKeyFile))
	if err != nil {
		tb.Fatalf("LoadKeyFileAuthority: %v", err)
	}
	return auth, dir
}

type fixture struct {
	ca  *CA
	clk *fakeclock.Clock
	up  *KeyFileAuthority
	cfg Config
	// journalCA is the journal CA the intermediates are signed with (nil
	// in the legacy layout), jcaKey its key.
	journalCA *x509.Certificate
	jcaKey    crypto.Signer
}

// Layouts: a journal CA signs the intermediates (since issue 23), or the
// domain root itself (legacy).
const (
	layoutJournalCA = "journal CA"
	layoutLegacy    = "legacy root"
)

var layouts = []string{layoutJournalCA, layoutLegacy}

// newFixture builds a CA of the journal CA layout on a fake clock reading
// testNow. mutate, if not nil, edits the default configuration before New.
func newFixture(tb testing.TB, mutate func(*Config)) *fixture {
	tb.Helper()
	return newFixtureLayout(tb, layoutJournalCA, mutate)
}

// newFixtureLayout builds a CA of layout: a domain root made as the
// ceremony makes it (caprofile.Root), and a journal CA for testJournal and
// the configuration's server names (caprofile.JournalCA, a year).
func newFixtureLayout(tb testing.TB, layout string, mutate func(*Config)) *fixture {
	tb.Helper()
	clk := fakeclock.New(testNow)
	up, _ := newUpstream(tb, testNow)
	cfg := DefaultConfig()
	cfg.JournalID = testJournal
	cfg.Clock = clk
	if mutate != nil {
		mutate(&cfg)
	}
	f := &fixture{clk: clk, up: up}
	switch {
	case cfg.Upstream != nil || cfg.Issuer.Certificate != nil:
	case layout == layoutLegacy:
		cfg.Issuer, cfg.Roots = up.Issuer(), []*x509.Certificate{up.Root()}
	default:
		f.journalCA, f.jcaKey = newJournalCA(tb, up, cfg.JournalID, cfg.ServerDNSNames, cfg.ServerIPs, testNow.Add(365*24*time.Hour))
		cfg.Issuer, cfg.Roots = Issuer{Certificate: f.journalCA, Signer: f.jcaKey}, []*x509.Certificate{up.Root()}
	}
	c, err := New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	f.ca, f.cfg = c, cfg
	return f
}

// verify is verifyClient against the fixture's root, with its journal CA
// among the intermediates.
func (f *fixture) verify(cert *x509.Certificate, at time.Time, inters ...*x509.Certificate) error {
	return verifyClient(cert, f.ca.Root(), at, append(inters, f.journalCA)...)
}

// isChain reports whether chain is leaf, then inter, then the journal CA
// (none in the legacy layout).
func (f *fixture) isChain(chain [][]byte, leaf, inter *x509.Certificate) bool {
	want := [][]byte{leaf.Raw, inter.Raw}
	if f.journalCA != nil {
		want = append(want, f.journalCA.Raw)
	}
	return slices.EqualFunc(chain, want, bytes.Equal)
}

// newJournalCA signs a journal CA for a fresh key with root, as the
// ceremony does (the journal id among its DNS names), valid from an hour
// before testNow to notAfter.
func newJournalCA(tb testing.TB, root RootAuthority, journalID string, dnsNames []string, ips []net.IP, notAfter time.Time) (*x509.Certificate, crypto.Signer) {
	tb.Helper()
	if !slices.Contains(dnsNames, journalID) {
		dnsNames = append([]string{journalID}, dnsNames...)
	}
	key := newKey(tb, "P-256")
	domain, err := DomainOf(root.Root())
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := SignJournalCA(root, key.Public(), caprofile.JournalCAParams{
		Domain: domain, JournalID: journalID, DNSNames: dnsNames, IPs: ips,
		NotBefore: testNow.Add(-time.Hour), NotAfter: notAfter,
	})
	if err != nil {
		tb.Fatalf("SignJournalCA: %v", err)
	}
	return cert, key
}

// newKey makes a real key of the named kind.
func newKey(tb testing.TB, kind string) crypto.Signer {
	tb.Helper()
	var (
		k   crypto.Signer
		err error
	)
	switch kind {
	case "P-224":
		k, err = ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	case "P-256":
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "P-384":
		k, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "P-521":
		k, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	case "Ed25519":
		_, k, err = ed25519.GenerateKey(rand.Reader)
	case "RSA-1024":
		k, err = rsa.GenerateKey(rand.Reader, 1024)
	case "RSA-2048":
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		tb.Fatalf("unknown key kind %q", kind)
	}
	if err != nil {
		tb.Fatalf("generate %s key: %v", kind, err)
	}
	return k
}

// makeCSR signs a CSR for key. tmpl may be nil.
func makeCSR(tb testing.TB, key crypto.Signer, tmpl *x509.CertificateRequest) []byte {
	tb.Helper()
	if tmpl == nil {
		tmpl = &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node-1"}}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		tb.Fatalf("CreateCertificateRequest: %v", err)
	}
	return der
}

// parseCSR is ParseCSR for input the test knows to be good.
func parseCSR(tb testing.TB, der []byte) *CSR {
	tb.Helper()
	csr, err := ParseCSR(der)
	if err != nil {
		tb.Fatalf("ParseCSR: %v", err)
	}
	return csr
}

// verifyClient verifies an agent chain the way a journal does: root pool,
// intermediates, clientAuth, at the given time.
func verifyClient(cert, root *x509.Certificate, at time.Time, inters ...*x509.Certificate) error {
	roots := x509.NewCertPool()
	roots.AddCert(root)
	ip := x509.NewCertPool()
	for _, c := range inters {
		if c != nil { // a legacy CA's JournalCA
			ip.AddCert(c)
		}
	}
	_, err := cert.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: ip,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		CurrentTime:   at,
	})
	return err
}

// wantSubjectKeyID is the key identifier RFC 7093 §2 method 1 gives pub,
// worked out from the key itself rather than from its encoding: the
// leftmost 160 bits of the SHA-256 of the subjectPublicKey bits, which are
// the uncompressed point of an ECDSA key and the raw Ed25519 key.
func wantSubjectKeyID(tb testing.TB, pub crypto.PublicKey) []byte {
	tb.Helper()
	var bits []byte
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		e, err := k.ECDH()
		if err != nil {
			tb.Fatal(err)
		}
		bits = e.Bytes()
	case ed25519.PublicKey:
		bits = k
	default:
		tb.Fatalf("no key identifier for %T", pub)
	}
	sum := sha256.Sum256(bits)
	return sum[:20]
}

func extOIDs(cert *x509.Certificate) []string {
	var out []string
	for _, e := range cert.Extensions {
		out = append(out, e.Id.String())
	}
	slices.Sort(out)
	return out
}

// checkAgentCert checks an issued agent certificate field by field against
// what the design says it must be. Nothing here is derived from the code
// under test except the intermediate it was meant to be signed by.
func checkAgentCert(t *testing.T, f *fixture, iss *Issued, csr *CSR, nodeID string, now time.Time) {
	t.Helper()
	cert := iss.Cert
	inter := f.ca.Intermediate()

	if want := "pact-service-agent/" + nodeID + "@" + testDomain; cert.Subject.CommonName != want {
		t.Errorf("subject CN = %q, want %q", cert.Subject.CommonName, want)
	}
	if len(cert.Subject.Names) != 1 {
		t.Errorf("subject has %d attributes (%v), want only the CN", len(cert.Subject.Names), cert.Subject)
	}
	wantURI := "spiffe://" + testDomain + "/pact-agent/" + nodeID
	if len(cert.URIs) != 1 || cert.URIs[0].String() != wantURI {
		t.Errorf("URI SANs = %v, want exactly [%s]", cert.URIs, wantURI)
	}
	if len(cert.DNSNames) != 0 || len(cert.IPAddresses) != 0 || len(cert.EmailAddresses) != 0 {
		t.Errorf("unexpected SANs: DNS %v IP %v email %v", cert.DNSNames, cert.IPAddresses, cert.EmailAddresses)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) || len(cert.UnknownExtKeyUsage) != 0 {
		t.Errorf("EKU = %v (unknown %v), want exactly [serverAuth clientAuth] (X.509-SVID §4.4)", cert.ExtKeyUsage, cert.UnknownExtKeyUsage)
	}
	if cert.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("KeyUsage = %b, want digitalSignature only (%b)", cert.KeyUsage, x509.KeyUsageDigitalSignature)
	}
	if cert.IsCA || !cert.BasicConstraintsValid {
		t.Errorf("IsCA = %v, BasicConstraintsValid = %v; want false, true", cert.IsCA, cert.BasicConstraintsValid)
	}
	if len(cert.PermittedDNSDomains)+len(cert.PermittedURIDomains)+len(cert.ExcludedDNSDomains) != 0 || len(cert.PolicyIdentifiers) != 0 {
		t.Errorf("unexpected name constraints or policies")
	}
	wantExt := []string{
		oidExtSubjectKeyID.String(), oidExtKeyUsage.String(), oidExtSAN.String(), oidExtBasicConstraints.String(),
		oidExtAuthorityKeyID.String(), oidExtExtKeyUsage.String(),
	}
	slices.Sort(wantExt)
	if got := extOIDs(cert); !slices.Equal(got, wantExt) {
		t.Errorf("extensions = %v, want %v", got, wantExt)
	}
	for _, e := range cert.Extensions {
		if e.Critical && !e.Id.Equal(oidExtKeyUsage) && !e.Id.Equal(oidExtBasicConstraints) {
			t.Errorf("extension %v is critical", e.Id)
		}
	}
	if cert.SerialNumber.Sign() <= 0 || cert.SerialNumber.BitLen() > 128 {
		t.Errorf("serial %x: sign %d, %d bits; want positive and at most 128 bits", cert.SerialNumber, cert.SerialNumber.Sign(), cert.SerialNumber.BitLen())
	}
	if want := now.Add(-f.cfg.Backdate); !cert.NotBefore.Equal(want) {
		t.Errorf("NotBefore = %v, want %v", cert.NotBefore, want)
	}
	wantNotAfter := now.Add(f.cfg.LeafLifetime)
	if wantNotAfter.After(inter.NotAfter) {
		wantNotAfter = inter.NotAfter
	}
	if !cert.NotAfter.Equal(wantNotAfter) {
		t.Errorf("NotAfter = %v, want %v", cert.NotAfter, wantNotAfter)
	}
	if want := wantSubjectKeyID(t, csr.PublicKey); !bytes.Equal(cert.SubjectKeyId, want) {
		t.Errorf("SubjectKeyId = %x, want %x (RFC 7093 §2 method 1 of the CSR key)", cert.SubjectKeyId, want)
	}
	if !bytes.Equal(cert.RawIssuer, inter.RawSubject) || !bytes.Equal(cert.AuthorityKeyId, inter.SubjectKeyId) {
		t.Errorf("issuer %v / AKI %x, want current intermediate %v / %x", cert.Issuer, cert.AuthorityKeyId, inter.Subject, inter.SubjectKeyId)
	}
	if err := cert.CheckSignatureFrom(inter); err != nil {
		t.Errorf("not signed by the current intermediate: %v", err)
	}
	if !bytes.Equal(cert.RawSubjectPublicKeyInfo, csr.SPKI) {
		t.Error("certificate public key differs from the CSR's")
	}
	if pk, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pk.Equal(csr.PublicKey) {
		t.Error("certificate PublicKey does not Equal the CSR PublicKey")
	}
	if err := f.verify(cert, now, inter); err != nil {
		t.Errorf("chain does not verify for clientAuth: %v", err)
	}

	// What the registry records.
	if !bytes.Equal(iss.DER, cert.Raw) {
		t.Error("Issued.DER != Cert.Raw")
	}
	if !f.isChain(iss.ChainDER, cert, inter) {
		t.Error("Issued.ChainDER is not [leaf, current intermediate, journal CA]")
	}
	if want := hex.EncodeToString(cert.SerialNumber.Bytes()); iss.Serial != want {
		t.Errorf("Issued.Serial = %q, want %q", iss.Serial, want)
	}
	sum := sha256.Sum256(csr.SPKI)
	if want := hex.EncodeToString(sum[:]); iss.SPKISHA256 != want {
		t.Errorf("Issued.SPKISHA256 = %q, want %q", iss.SPKISHA256, want)
	}
	if want := hex.EncodeToString(inter.SerialNumber.Bytes()); iss.IssuerSerial != want {
		t.Errorf("Issued.IssuerSerial = %q, want %q", iss.IssuerSerial, want)
	}
	if !iss.NotAfter.Equal(cert.NotAfter) {
		t.Errorf("Issued.NotAfter = %v, cert says %v", iss.NotAfter, cert.NotAfter)
	}
	id, err := pki.IdentityOf(cert)
	if err != nil || id != (pki.Identity{Kind: pki.KindAgent, Name: nodeID, Domain: testDomain}) {
		t.Errorf("IdentityOf = %+v, %v", id, err)
	}
}

func TestSignAgentCertificateFields(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		key, node string
	}{
		{"P-256", "node-001"},
		{"P-384", "rack3.node_7"},
		{"Ed25519", "n1"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			csr := parseCSR(t, makeCSR(t, newKey(t, tc.key), nil))
			iss, err := f.ca.SignAgent(csr, tc.node)
			if err != nil {
				t.Fatalf("SignAgent: %v", err)
			}
			checkAgentCert(t, f, iss, csr, tc.node, testNow)

			// The agent cert carries serverAuth (X.509-SVID §4.4) but no
			// host name: it cannot pose as a journal a client dials.
			roots := x509.NewCertPool()
			roots.AddCert(f.ca.Root())
			inters := x509.NewCertPool()
			inters.AddCert(f.ca.Intermediate())
			if _, err := iss.Cert.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, CurrentTime: testNow, DNSName: "localhost"}); err == nil {
				t.Error("agent certificate verified as the server localhost")
			}
			// Without the intermediate, or after expiry, it does not verify.
			if err := f.verify(iss.Cert, testNow); err == nil {
				t.Error("agent certificate verified without its intermediate")
			}
			if err := f.verify(iss.Cert, iss.Cert.NotAfter.Add(time.Second), f.ca.Intermediate()); err == nil {
				t.Error("agent certificate verified after NotAfter")
			}
		})
	}
}

func TestSignAgentSerialsUnique(t *testing.T) {
	f := newFixture(t, nil)
	csr := parseCSR(t, makeCSR(t, newKey(t, "P-256"), nil))
	const n = 500
	seen := make(map[string]bool, n)
	maxBits := 0
	for i := range n {
		iss, err := f.ca.SignAgent(csr, "node-1")
		if err != nil {
			t.Fatalf("SignAgent #%d: %v", i, err)
		}
		s := iss.Cert.SerialNumber
		if s.Sign() <= 0 || s.BitLen() > 128 {
			t.Fatalf("serial %x: sign %d, %d bits", s, s.Sign(), s.BitLen())
		}
		if seen[iss.Serial] {
			t.Fatalf("serial %s issued twice", iss.Serial)
		}
		seen[iss.Serial] = true
		maxBits = max(maxBits, s.BitLen())
	}
	// 500 random 128-bit serials all below 2^120 would be a 2^-4000 event:
	// this catches counters and short serials.
	if maxBits <= 120 {
		t.Errorf("largest serial has %d bits; serials are not 128-bit random", maxBits)
	}
}

func TestSignAgentRejectsBadNodeID(t *testing.T) {
	f := newFixture(t, nil)
	csr := parseCSR(t, makeCSR(t, newKey(t, "P-256"), nil))
	for _, node := range []string{"", "a/b", "node 1", "-x", "=cmd()", "node@evil", strings.Repeat("a", 64)} {
		iss, err := f.ca.SignAgent(csr, node)
		if !errors.Is(err, pki.ErrInvalidName) || iss != nil {
			t.Errorf("SignAgent(%q) = %v, %v; want nil, ErrInvalidName", node, iss, err)
		}
	}
}

// TestSignAgentIgnoresCSRContent asks, through the CSR, for every thing an
// agent must not get; the issued certificate carries none of it.
func TestSignAgentIgnoresCSRContent(t *testing.T) {
	caTrue, err := asn1.Marshal(struct{ IsCA bool }{true})
	if err != nil {
		t.Fatal(err)
	}
	// keyCertSign (bit 5) and cRLSign (bit 6).
	certSign, err := asn1.Marshal(asn1.BitString{Bytes: []byte{0x06}, BitLength: 7})
	if err != nil {
		t.Fatal(err)
	}
	serverAuth, err := asn1.Marshal([]asn1.ObjectIdentifier{oidEKUServerAuth, oidEKUClientAuth})
	if err != nil {
		t.Fatal(err)
	}
	evilURI, _ := url.Parse("spiffe://pact.local/pact-agent/other-node")
	adminURI, _ := url.Parse("spiffe://pact.local/pact-admin/root")
	extCA := pkix.Extension{Id: oidExtBasicConstraints, Critical: true, Value: caTrue}
	extKU := pkix.Extension{Id: oidExtKeyUsage, Critical: true, Value: certSign}
	extEKU := pkix.Extension{Id: oidExtExtKeyUsage, Value: serverAuth}

	for _, tc := range []struct {
		name  string
		tmpl  x509.CertificateRequest
		check func(*x509.CertificateRequest) bool // the CSR really asks for it
	}{
		{"DNS SANs", x509.CertificateRequest{DNSNames: []string{"journal.pact.local", "*.pact.local"}},
			func(r *x509.CertificateRequest) bool { return len(r.DNSNames) == 2 }},
		{"IP SANs", x509.CertificateRequest{IPAddresses: []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("::1")}},
			func(r *x509.CertificateRequest) bool { return len(r.IPAddresses) == 2 }},
		{"URI SANs", x509.CertificateRequest{URIs: []*url.URL{evilURI, adminURI}},
			func(r *x509.CertificateRequest) bool { return len(r.URIs) == 2 }},
		{"email SAN", x509.CertificateRequest{EmailAddresses: []string{"root@pact.local"}},
			func(r *x509.CertificateRequest) bool { return len(r.EmailAddresses) == 1 }},
		{"subject of another node with admin role", x509.CertificateRequest{Subject: pkix.Name{
			CommonName: "pact-service-agent/other-node@pact.local", OrganizationalUnit: []string{pki.RolePlatformAdmin}, Organization: []string{"pact"},
		}}, func(r *x509.CertificateRequest) bool {
			return r.Subject.CommonName == "pact-service-agent/other-node@pact.local"
		}},
		{"basicConstraints CA:TRUE", x509.CertificateRequest{ExtraExtensions: []pkix.Extension{extCA}},
			func(r *x509.CertificateRequest) bool { return hasExt(r, oidExtBasicConstraints) }},
		{"keyUsage keyCertSign", x509.CertificateRequest{ExtraExtensions: []pkix.Extension{extKU}},
			func(r *x509.CertificateRequest) bool { return hasExt(r, oidExtKeyUsage) }},
		{"EKU serverAuth", x509.CertificateRequest{ExtraExtensions: []pkix.Extension{extEKU}},
			func(r *x509.CertificateRequest) bool { return hasExt(r, oidExtExtKeyUsage) }},
		{"everything at once", x509.CertificateRequest{
			Subject:         pkix.Name{CommonName: "pact-service-agent/other-node@pact.local", OrganizationalUnit: []string{pki.RolePlatformAdmin}},
			DNSNames:        []string{"journal.pact.local"},
			IPAddresses:     []net.IP{net.ParseIP("10.0.0.1")},
			URIs:            []*url.URL{evilURI},
			EmailAddresses:  []string{"root@pact.local"},
			ExtraExtensions: []pkix.Extension{extCA, extKU, extEKU},
		}, func(r *x509.CertificateRequest) bool {
			return len(r.DNSNames) == 1 && len(r.URIs) == 1 && hasExt(r, oidExtBasicConstraints) && hasExt(r, oidExtKeyUsage)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			der := makeCSR(t, newKey(t, "P-256"), &tc.tmpl)
			req, err := x509.ParseCertificateRequest(der)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(req) {
				t.Fatal("the CSR does not carry what the test asks for")
			}
			if len(req.Extensions) > 0 {
				// Requested extensions (SANs included) are refused outright.
				if _, err := ParseCSR(der); !errors.Is(err, ErrCSRExtensions) {
					t.Fatalf("ParseCSR = %v, want ErrCSRExtensions", err)
				}
				return
			}
			csr := parseCSR(t, der)
			iss, err := f.ca.SignAgent(csr, "node-7")
			if err != nil {
				t.Fatalf("SignAgent: %v", err)
			}
			checkAgentCert(t, f, iss, csr, "node-7", testNow)
			if iss.Cert.Subject.CommonName != "pact-service-agent/node-7@pact.local" || len(iss.Cert.Subject.OrganizationalUnit) != 0 {
				t.Errorf("subject = %v", iss.Cert.Subject)
			}
		})
	}
}

func hasExt(r *x509.CertificateRequest, oid asn1.ObjectIdentifier) bool {
	for _, e := range r.Extensions {
		if e.Id.Equal(oid) {
			return true
		}
	}
	return false
}

func TestIntermediate(t *testing.T) {
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) { testIntermediate(t, newFixtureLayout(t, layout, nil)) })
	}
}

func testIntermediate(t *testing.T, f *fixture) {
	inter := f.ca.Intermediate()
	root := f.ca.Root()
	// What signs it: the journal CA, or in the legacy layout the root.
	issuer := root
	if f.journalCA != nil {
		issuer = f.journalCA
	}
	if got := f.ca.JournalCA(); got != f.journalCA {
		t.Errorf("JournalCA() = %v, want %v", got, f.journalCA)
	}
	if want := ""; f.journalCA != nil && f.ca.JournalCASerial() != pki.SerialHex(f.journalCA.SerialNumber) || f.journalCA == nil && f.ca.JournalCASerial() != want {
		t.Errorf("JournalCASerial() = %q", f.ca.JournalCASerial())
	}
	if f.ca.Legacy() != (f.journalCA == nil) {
		t.Errorf("Legacy() = %v", f.ca.Legacy())
	}

	if !inter.IsCA || !inter.BasicConstraintsValid {
		t.Errorf("IsCA = %v, BasicConstraintsValid = %v", inter.IsCA, inter.BasicConstraintsValid)
	}
	if inter.MaxPathLen != 0 || !inter.MaxPathLenZero {
		t.Errorf("MaxPathLen = %d, MaxPathLenZero = %v; want 0, true", inter.MaxPathLen, inter.MaxPathLenZero)
	}
	if inter.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("KeyUsage = %b", inter.KeyUsage)
	}
	if err := inter.CheckSignatureFrom(issuer); err != nil {
		t.Errorf("intermediate not signed by %s: %v", issuer.Subject.CommonName, err)
	}
	if !bytes.Equal(inter.RawIssuer, issuer.RawSubject) {
		t.Errorf("issuer = %v, want %v", inter.Issuer, issuer.Subject)
	}
	if want := testNow.Add(-f.cfg.Backdate); !inter.NotBefore.Equal(want) {
		t.Errorf("NotBefore = %v, want %v", inter.NotBefore, want)
	}
	if want := testNow.Add(f.cfg.IntermediateLifetime); !inter.NotAfter.Equal(want) {
		t.Errorf("NotAfter = %v, want %v", inter.NotAfter, want)
	}
	if len(inter.URIs) != 1 || inter.URIs[0].String() != "spiffe://"+testDomain {
		t.Errorf("URIs = %v", inter.URIs)
	}
	if pk, ok := inter.PublicKey.(*ecdsa.PublicKey); !ok || pk.Curve != elliptic.P256() {
		t.Errorf("intermediate key is %T, want ECDSA P-256", inter.PublicKey)
	} else if pk.Equal(root.PublicKey) || pk.Equal(issuer.PublicKey) {
		t.Error("intermediate reuses the root's or the journal CA's key")
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	above := x509.NewCertPool()
	if f.journalCA != nil {
		above.AddCert(f.journalCA)
	}
	if _, err := inter.Verify(x509.VerifyOptions{Roots: roots, Intermediates: above, CurrentTime: testNow, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("intermediate does not verify against the root: %v", err)
	}

	// pathLen 0: a CA below the intermediate is refused by verifiers, so a
	// journal cannot mint sub-CAs.
	key := f.ca.cur.Load().key
	subKey := newKey(t, "P-256")
	subTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "rogue sub-CA"},
		NotBefore: testNow.Add(-time.Hour), NotAfter: testNow.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	subDER, err := x509.CreateCertificate(rand.Reader, subTmpl, inter, subKey.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	sub, _ := x509.ParseCertificate(subDER)
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: testNow.Add(-time.Hour), NotAfter: testNow.Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, sub, newKey(t, "P-256").Public(), subKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(leafDER)
	if err := verifyClient(leaf, root, testNow, inter, sub, f.journalCA); err == nil {
		t.Error("a leaf under a sub-CA of the intermediate verified; pathLen 0 is not enforced")
	}
}

// The intermediate never outlives what signed it: the journal CA (which
// the ceremony gives a year), or the root in the legacy layout.
func TestIntermediateClampedToIssuer(t *testing.T) {
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) {
			f := newFixtureLayout(t, layout, nil)
			issuer := f.ca.Root()
			if f.journalCA != nil {
				issuer = f.journalCA
			}
			// Two days before the issuer expires, a 9-day intermediate must
			// stop at the issuer's NotAfter, and so must a 3-day leaf.
			f.clk.Advance(issuer.NotAfter.Sub(testNow) - 48*time.Hour)
			now := f.clk.Now()
			if err := f.ca.Rotate(); err != nil {
				t.Fatalf("Rotate: %v", err)
			}
			inter := f.ca.Intermediate()
			if !inter.NotAfter.Equal(issuer.NotAfter) {
				t.Errorf("intermediate NotAfter = %v, want the issuer's NotAfter %v", inter.NotAfter, issuer.NotAfter)
			}
			if !inter.NotBefore.Equal(now.Add(-f.cfg.Backdate)) {
				t.Errorf("intermediate NotBefore = %v", inter.NotBefore)
			}
			csr := parseCSR(t, makeCSR(t, newKey(t, "P-256"), nil))
			iss, err := f.ca.SignAgent(csr, "node-1")
			if err != nil {
				t.Fatalf("SignAgent: %v", err)
			}
			if !iss.Cert.NotAfter.Equal(issuer.NotAfter) {
				t.Errorf("leaf NotAfter = %v, want the issuer's NotAfter %v", iss.Cert.NotAfter, issuer.NotAfter)
			}
			checkAgentCert(t, f, iss, csr, "node-1", now)
			if srv := f.ca.ServerCertificate().Leaf; srv.NotAfter.After(issuer.NotAfter) {
				t.Errorf("server certificate NotAfter %v outlives the issuer", srv.NotAfter)
			}
		})
	}
}

func TestRotationDue(t *testing.T) {
	const life = 9 * 24 * time.Hour
	for _, tc := range []struct {
		name     string
		backdate time.Duration
		after    time.Duration
		want     bool
	}{
		{"fresh", 0, 0, false},
		{"one second before half", 0, life/2 - time.Second, false},
		{"at half", 0, life / 2, true},
		{"after half", 0, life/2 + time.Hour, true},
		{"at expiry", 0, life, true},
		{"long after expiry", 0, 3 * life, true},
		// With a backdate, half life counts from the backdated NotBefore,
		// so rotation comes due backdate/2 earlier, never later.
		{"backdated, fresh", 10 * time.Minute, 0, false},
		{"backdated, before half", 10 * time.Minute, life/2 - 5*time.Minute - time.Second, false},
		{"backdated, at half", 10 * time.Minute, life/2 - 5*time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) {
				c.IntermediateLifetime = life
				c.Backdate = tc.backdate
			})
			f.clk.Advance(tc.after)
			if got := f.ca.RotationDue(f.clk.Now()); got != tc.want {
				t.Errorf("RotationDue(+%v) = %v, want %v", tc.after, got, tc.want)
			}
			if err := f.ca.Rotate(); err != nil {
				t.Fatal(err)
			}
			if f.ca.RotationDue(f.clk.Now()) {
				t.Error("RotationDue right after Rotate")
			}
		})
	}
}

func TestRotateKeepsOldLeavesValid(t *testing.T) {
	f := newFixture(t, nil)
	oldInter := f.ca.Intermediate()
	oldServer := f.ca.ServerCertificate()
	csr := parseCSR(t, makeCSR(t, newKey(t, "P-256"), nil))
	if _, err := f.ca.SignAgent(csr, "node-1"); err != nil {
		t.Fatal(err)
	}

	// Rotate at half life, the latest a running journal does: a leaf issued
	// just before (3 days) still has time left and must keep verifying.
	f.clk.Advance(f.cfg.IntermediateLifetime/2 - time.Minute)
	if f.ca.RotationDue(f.clk.Now().Add(-time.Minute)) {
		t.Fatal("rotation due before half life")
	}
	oldLeaf, err := f.ca.SignAgent(csr, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(time.Minute)
	if !f.ca.RotationDue(f.clk.Now()) {
		t.Fatal("rotation not due at half life")
	}
	if err := f.ca.Rotate(); err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	now := f.clk.Now()
	newInter := f.ca.Intermediate()
	if newInter.SerialNumber.Cmp(oldInter.SerialNumber) == 0 {
		t.Error("new intermediate has the old serial")
	}
	if newInter.PublicKey.(*ecdsa.PublicKey).Equal(oldInter.PublicKey) {
		t.Error("new intermediate has the old key")
	}
	if !newInter.NotAfter.Equal(now.Add(f.cfg.IntermediateLifetime)) {
		t.Errorf("new intermediate NotAfter = %v", newInter.NotAfter)
	}
	if f.ca.ServerCertificate() == oldServer || !bytes.Equal(f.ca.ServerCertificate().Certificate[1], newInter.Raw) {
		t.Error("server certificate was not reissued under the new intermediate")
	}

	newLeaf, err := f.ca.SignAgent(csr, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	checkAgentCert(t, f, newLeaf, csr, "node-1", now)
	if newLeaf.IssuerSerial == oldLeaf.IssuerSerial {
		t.Error("IssuerSerial did not change with the intermediate")
	}
	if err := f.verify(oldLeaf.Cert, now, oldInter, newInter); err != nil {
		t.Errorf("old leaf with both intermediates in the bundle: %v", err)
	}
	if err := f.verify(newLeaf.Cert, now, oldInter, newInter); err != nil {
		t.Errorf("new leaf with both intermediates in the bundle: %v", err)
	}
	// Dropping (revoking) the old intermediate rejects what it signed.
	if err := f.verify(oldLeaf.Cert, now, newInter); err == nil {
		t.Error("old leaf verified without the old intermediate")
	}
}

func TestLeafNeverOutlivesIntermediate(t *testing.T) {
	const (
		interLife = 10 * time.Hour
		leafLife  = 5 * time.Hour // the most Validate allows: half of interLife
	)
	f := newFixture(t, func(c *Config) {
		c.IntermediateLifetime = interLife
		c.LeafLifetime = leafLife
	})
	interEnd := testNow.Add(interLife)
	csr := parseCSR(t, makeCSR(t, newKey(t, "Ed25519"), nil))
	var elapsed time.Duration
	for _, tc := range []struct {
		at           time.Duration // since the intermediate was made
		wantNotAfter time.Time
	}{
		{0, testNow.Add(leafLife)},
		{4 * time.Hour, testNow.Add(4*time.Hour + leafLife)},
		{5 * time.Hour, interEnd},
		{7 * time.Hour, interEnd},
		{9*time.Hour + 59*time.Minute, interEnd},
	} {
		f.clk.Advance(tc.at - elapsed)
		elapsed = tc.at
		now := f.clk.Now()
		iss, err := f.ca.SignAgent(csr, "node-1")
		if err != nil {
			t.Fatalf("+%v: SignAgent: %v", tc.at, err)
		}
		if !iss.Cert.NotAfter.Equal(tc.wantNotAfter) {
			t.Errorf("+%v: leaf NotAfter = %v, want %v", tc.at, iss.Cert.NotAfter, tc.wantNotAfter)
		}
		if iss.Cert.NotAfter.After(f.ca.Intermediate().NotAfter) {
			t.Errorf("+%v: leaf NotAfter %v is after the intermediate's %v", tc.at, iss.Cert.NotAfter, f.ca.Intermediate().NotAfter)
		}
		if err := f.verify(iss.Cert, now, f.ca.Intermediate()); err != nil {
			t.Errorf("+%v: %v", tc.at, err)
		}
	}
}

// A CA whose intermediate has run out (nobody called Rotate) must refuse to
// sign rather than hand out a certificate that is dead on arrival.
func TestSignAgentRefusesWithExpiredIntermediate(t *testing.T) {
	for _, after := range []time.Duration{10 * time.Hour, 10*time.Hour + time.Second, 30 * time.Hour} {
		t.Run(after.String(), func(t *testing.T) {
			f := newFixture(t, func(c *Config) {
				c.IntermediateLifetime = 10 * time.Hour
				c.LeafLifetime = 5 * time.Hour
			})
			csr := parseCSR(t, makeCSR(t, newKey(t, "P-256"), nil))
			f.clk.Advance(after)
			iss, err := f.ca.SignAgent(csr, "node-1")
			if err == nil {
				t.Fatalf("SignAgent with an expired intermediate issued NotBefore %v NotAfter %v", iss.Cert.NotBefore, iss.Cert.NotAfter)
			}
			if !errors.Is(err, ErrIssuedInvalid) || iss != nil {
				t.Errorf("SignAgent = %v, %v; want nil, ErrIssuedInvalid", iss, err)
			}
			// Rotating recovers.
			if err := f.ca.Rotate(); err != nil {
				t.Fatal(err)
			}
			if _, err := f.ca.SignAgent(csr, "node-1"); err != nil {
				t.Errorf("SignAgent after Rotate: %v", err)
			}
		})
	}
}

// An issuer (journal CA, or legacy root) past its NotAfter cannot make a
// usable intermediate: Rotate and New say so instead of producing one that
// is already expired.
func TestRotateRefusesExpiredIssuer(t *testing.T) {
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) {
			f := newFixtureLayout(t, layout, nil)
			issuer := f.ca.Root()
			want := ErrUpstream
			if f.journalCA != nil {
				issuer, want = f.journalCA, ErrJournalCA
			}
			before := f.ca.Intermediate()
			f.clk.Advance(issuer.NotAfter.Sub(testNow))
			err := f.ca.Rotate()
			if !errors.Is(err, ErrUpstream) || !strings.Contains(err.Error(), "expired") {
				t.Fatalf("Rotate at the issuer's expiry = %v, want ErrUpstream", err)
			}
			if f.ca.Intermediate() != before {
				t.Error("a failed Rotate replaced the intermediate")
			}
			cfg := f.cfg
			cfg.Clock = fakeclock.New(f.clk.Now().Add(time.Hour))
			if c, err := New(cfg); !errors.Is(err, want) || c != nil {
				t.Errorf("New with an expired issuer = %v, %v; want nil, %v", c, err, want)
			}
		})
	}
}

func TestServerCertificate(t *testing.T) {
	dns := []string{"journal-1.pact.local", "localhost"}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	f := newFixture(t, func(c *Config) {
		c.ServerDNSNames = slices.Clone(dns)
		c.ServerIPs = slices.Clone(ips)
	})
	check := func(t *testing.T, now time.Time) {
		t.Helper()
		sc := f.ca.ServerCertificate()
		inter := f.ca.Intermediate()
		if !f.isChain(sc.Certificate, sc.Leaf, inter) {
			t.Fatal("chain is not [leaf, current intermediate, journal CA]")
		}
		leaf := sc.Leaf
		if !slices.Equal(leaf.DNSNames, dns) {
			t.Errorf("DNSNames = %v, want %v", leaf.DNSNames, dns)
		}
		if len(leaf.IPAddresses) != len(ips) {
			t.Errorf("IPAddresses = %v, want %v", leaf.IPAddresses, ips)
		}
		for i := range min(len(ips), len(leaf.IPAddresses)) {
			if !leaf.IPAddresses[i].Equal(ips[i]) {
				t.Errorf("IPAddresses[%d] = %v, want %v", i, leaf.IPAddresses[i], ips[i])
			}
		}
		wantURI := "spiffe://pact.local/pact-journal/" + testJournal
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != wantURI {
			t.Errorf("URIs = %v, want [%s]", leaf.URIs, wantURI)
		}
		if leaf.Subject.CommonName != "pact-journal/"+testJournal+"@"+testDomain {
			t.Errorf("CN = %q", leaf.Subject.CommonName)
		}
		if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
			t.Errorf("EKU = %v", leaf.ExtKeyUsage)
		}
		if leaf.IsCA || leaf.KeyUsage&x509.KeyUsageCertSign != 0 {
			t.Error("server certificate can sign certificates")
		}
		if pub := sc.PrivateKey.(crypto.Signer).Public(); !pub.(*ecdsa.PublicKey).Equal(leaf.PublicKey) {
			t.Error("PrivateKey does not match the leaf")
		}
		if want := wantSubjectKeyID(t, leaf.PublicKey); !bytes.Equal(leaf.SubjectKeyId, want) {
			t.Errorf("SubjectKeyId = %x, want %x", leaf.SubjectKeyId, want)
		}
		if !bytes.Equal(leaf.AuthorityKeyId, inter.SubjectKeyId) {
			t.Errorf("AuthorityKeyId = %x, want the intermediate's %x", leaf.AuthorityKeyId, inter.SubjectKeyId)
		}
		if leaf.NotAfter.After(inter.NotAfter) {
			t.Errorf("server NotAfter %v after intermediate NotAfter %v", leaf.NotAfter, inter.NotAfter)
		}
		roots := x509.NewCertPool()
		roots.AddCert(f.ca.Root())
		ip := x509.NewCertPool()
		ip.AddCert(inter)
		ip.AddCert(f.journalCA)
		for _, name := range []string{"journal-1.pact.local", "localhost", "127.0.0.1", "::1"} {
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: ip, CurrentTime: now}); err != nil {
				t.Errorf("verify for serverAuth as %s: %v", name, err)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "evil.example", Roots: roots, Intermediates: ip, CurrentTime: now}); err == nil {
			t.Error("server certificate verified for a name it does not carry")
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: ip, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("verify for clientAuth (Raft peers): %v", err)
		}
	}
	check(t, testNow)

	// New copied the configuration: the caller's slices changing later does
	// not change what the next rotation puts in the certificate.
	f.cfg.ServerDNSNames[0] = "evil.example"
	f.cfg.ServerIPs[0] = net.ParseIP("203.0.113.9")
	f.clk.Advance(time.Hour)
	if err := f.ca.Rotate(); err != nil {
		t.Fatal(err)
	}
	check(t, f.clk.Now())
}

// TestMutualTLS runs a real handshake: journal server certificate on one
// side, an issued agent certificate on the other, each verifying the other
// against the root plus intermediate, on the fake clock.
func TestMutualTLS(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ServerDNSNames = []string{"journal-1.pact.local"} })
	agentKey := newKey(t, "P-256")
	iss, err := f.ca.SignAgent(parseCSR(t, makeCSR(t, agentKey, nil)), "node-9")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(f.ca.Root())
	srvCfg := &tls.Config{
		Certificates: []tls.Certificate{*f.ca.ServerCertificate()},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    roots,
		Time:         f.clk.Now,
		MinVersion:   tls.VersionTLS13,
	}
	cliCfg := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: iss.ChainDER, PrivateKey: agentKey}},
		RootCAs:      roots,
		ServerName:   "journal-1.pact.local",
		Time:         f.clk.Now,
		MinVersion:   tls.VersionTLS13,
	}
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	srv := tls.Server(c1, srvCfg)
	errc := make(chan error, 1)
	go func() { errc <- srv.Handshake() }()
	cli := tls.Client(c2, cliCfg)
	if err := cli.Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	peer := srv.ConnectionState().PeerCertificates
	if len(peer) == 0 || peer[0].Subject.CommonName != "pact-service-agent/node-9@pact.local" {
		t.Errorf("server saw client %v", peer)
	}
}

func TestConfigValidate(t *testing.T) {
	up, _ := newUpstream(t, testNow)
	good := func() Config {
		c := DefaultConfig()
		c.Upstream = up
		c.JournalID = testJournal
		c.Clock = fakeclock.New(testNow)
		return c
	}
	for _, tc := range []struct {
		name   string
		cfg    Config
		want   []string // substrings, one per reported problem
		wantIs []error
	}{
		{"default plus required fields", good(), nil, nil},
		{"zero config", Config{}, []string{"Issuer (certificate and signer) is required", "journal id", "LeafLifetime 0s is shorter than a minute", "Clock is required"}, []error{pki.ErrInvalidName}},
		{"default without upstream and id", func() Config { c := DefaultConfig(); return c }(), []string{"Issuer (certificate and signer) is required", "journal id"}, nil},
		{"bad journal id", func() Config { c := good(); c.JournalID = "j/1"; return c }(), []string{`journal id "j/1"`}, []error{pki.ErrInvalidName}},
		{"short leaf", func() Config { c := good(); c.LeafLifetime = 59 * time.Second; return c }(), []string{"shorter than a minute"}, nil},
		{"intermediate under twice leaf", func() Config { c := good(); c.IntermediateLifetime = 2*c.LeafLifetime - time.Second; return c }(), []string{"at least twice LeafLifetime"}, nil},
		{"intermediate exactly twice leaf", func() Config { c := good(); c.IntermediateLifetime = 2 * c.LeafLifetime; return c }(), nil, nil},
		{"negative backdate", func() Config { c := good(); c.Backdate = -time.Second; return c }(), []string{"Backdate must not be negative"}, nil},
		{"server name with an empty label", func() Config { c := good(); c.ServerDNSNames = []string{"ok.example", "j1.example."}; return c }(), []string{`server name "j1.example." has an empty label`}, nil},
		{"everything wrong", Config{JournalID: "-x", LeafLifetime: time.Hour, IntermediateLifetime: time.Hour, Backdate: -1}, []string{
			"Issuer (certificate and signer) is required", "journal id", "at least twice", "Backdate", "Clock is required",
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want %d problems", len(tc.want))
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Errorf("Validate reported %d problems, want %d:\n%v", len(lines), len(tc.want), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate error lacks %q:\n%v", w, err)
				}
			}
			for _, target := range tc.wantIs {
				if !errors.Is(err, target) {
					t.Errorf("Validate error is not %v", target)
				}
			}
			if c, nerr := New(tc.cfg); c != nil || nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New(invalid) = %v, %v", c, nerr)
			}
		})
	}
}

// staticAuthority is a RootAuthority over an in-memory root, standing in
// for the HSM/KMS implementations the interface is for.
type staticAuthority struct {
	root *x509.Certificate
	key  crypto.Signer
}

func (a staticAuthority) Root() *x509.Certificate { return a.root }
func (a staticAuthority) Signer() crypto.Signer   { return a.key }

func selfSignedCA(t *testing.T, uris ...string) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key := newKey(t, "P-256")
	var us []*url.URL
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		us = append(us, u)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: testNow.Add(-time.Hour), NotAfter: testNow.Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		URIs: us,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func TestNewUpstreamProblems(t *testing.T) {
	goodRoot, goodKey := selfSignedCA(t, "spiffe://site.example")
	noDomain, noDomainKey := selfSignedCA(t, "https://site.example")
	for _, tc := range []struct {
		name string
		up   RootAuthority
		want error
	}{
		{"in-memory authority works", staticAuthority{goodRoot, goodKey}, nil},
		{"root names no trust domain", staticAuthority{noDomain, noDomainKey}, ErrUpstream},
		{"signer does not match root", staticAuthority{goodRoot, newKey(t, "P-256")}, ErrUpstream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Upstream = tc.up
			cfg.JournalID = testJournal
			cfg.Clock = fakeclock.New(testNow)
			c, err := New(cfg)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if c.Domain() != "site.example" {
					t.Errorf("Domain = %q", c.Domain())
				}
				if err := c.Intermediate().CheckSignatureFrom(goodRoot); err != nil {
					t.Error(err)
				}
				return
			}
			if !errors.Is(err, tc.want) || c != nil {
				t.Errorf("New = %v, %v; want nil, %v", c, err, tc.want)
			}
		})
	}
}

func TestConcurrentSignAndRotate(t *testing.T) {
	f := newFixture(t, nil)
	csrs := []*CSR{
		parseCSR(t, makeCSR(t, newKey(t, "P-256"), nil)),
		parseCSR(t, makeCSR(t, newKey(t, "Ed25519"), nil)),
	}
	const (
		signers   = 8
		perSigner = 40
		rotations = 20
	)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		issued []*Issued
		inters = map[string]*x509.Certificate{}
		errs   []error
	)
	record := func(c *x509.Certificate) {
		mu.Lock()
		inters[string(c.Raw)] = c
		mu.Unlock()
	}
	record(f.ca.Intermediate())
	start := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		for range rotations {
			if err := f.ca.Rotate(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("Rotate: %w", err))
				mu.Unlock()
				return
			}
			record(f.ca.Intermediate())
		}
	}()
	for g := range signers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range perSigner {
				iss, err := f.ca.SignAgent(csrs[(g+i)%len(csrs)], fmt.Sprintf("node-%d-%d", g, i))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					issued = append(issued, iss)
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(issued) != signers*perSigner {
		t.Fatalf("issued %d certificates, want %d", len(issued), signers*perSigner)
	}
	if len(inters) != rotations+1 {
		t.Errorf("saw %d intermediates, want %d", len(inters), rotations+1)
	}
	all := slices.Collect(func(yield func(*x509.Certificate) bool) {
		for _, c := range inters {
			if !yield(c) {
				return
			}
		}
	})
	serials := map[string]bool{}
	for _, iss := range issued {
		if serials[iss.Serial] {
			t.Errorf("serial %s issued twice", iss.Serial)
		}
		serials[iss.Serial] = true
		// Each Issued is internally consistent even when a rotation raced it.
		chainInter, err := x509.ParseCertificate(iss.ChainDER[1])
		if err != nil {
			t.Fatal(err)
		}
		if inters[string(chainInter.Raw)] == nil {
			t.Errorf("%s: chain intermediate was never current", iss.Serial)
		}
		if iss.IssuerSerial != hex.EncodeToString(chainInter.SerialNumber.Bytes()) {
			t.Errorf("%s: IssuerSerial %s does not match the chain's intermediate", iss.Serial, iss.IssuerSerial)
		}
		if err := iss.Cert.CheckSignatureFrom(chainInter); err != nil {
			t.Errorf("%s: not signed by its chain's intermediate: %v", iss.Serial, err)
		}
		if err := f.verify(iss.Cert, testNow, all...); err != nil {
			t.Errorf("%s: %v", iss.Serial, err)
		}
	}
}

// TestValidateAgentCertCatchesTemplateMistakes proves the last check before
// a certificate leaves the CA actually fails on the mistakes it is for.
func TestValidateAgentCertCatchesTemplateMistakes(t *testing.T) {
	signer := newKey(t, "P-256")
	agentKey := newKey(t, "P-256")
	id := pki.Identity{Kind: pki.KindAgent, Name: "node-1", Domain: testDomain}
	spki, err := x509.MarshalPKIXPublicKey(agentKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	csr := &CSR{PublicKey: agentKey.Public(), SPKI: spki}
	base := func() *x509.Certificate {
		return &x509.Certificate{
			SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: id.CommonName()},
			NotBefore: testNow, NotAfter: testNow.Add(time.Hour),
			KeyUsage:              x509.KeyUsageDigitalSignature,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			BasicConstraintsValid: true,
			URIs:                  []*url.URL{id.SPIFFEID()},
			SubjectKeyId:          wantSubjectKeyID(t, agentKey.Public()),
		}
	}
	other, _ := url.Parse("spiffe://pact.local/pact-agent/node-2")
	for _, tc := range []struct {
		name   string
		mutate func(*x509.Certificate)
		pub    crypto.PublicKey
		ok     bool
	}{
		{"correct", func(*x509.Certificate) {}, nil, true},
		{"CA", func(c *x509.Certificate) { c.IsCA = true }, nil, false},
		{"keyCertSign", func(c *x509.Certificate) { c.KeyUsage |= x509.KeyUsageCertSign }, nil, false},
		{"cRLSign", func(c *x509.Certificate) { c.KeyUsage |= x509.KeyUsageCRLSign }, nil, false},
		{"no digitalSignature", func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageKeyAgreement }, nil, false},
		{"serverAuth only", func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth} }, nil, false},
		{"clientAuth only", func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} }, nil, false},
		{"extra EKU", func(c *x509.Certificate) {
			c.ExtKeyUsage = append(c.ExtKeyUsage, x509.ExtKeyUsageCodeSigning)
		}, nil, false},
		{"no EKU", func(c *x509.Certificate) { c.ExtKeyUsage = nil }, nil, false},
		{"wrong URI", func(c *x509.Certificate) { c.URIs = []*url.URL{other} }, nil, false},
		{"two URIs", func(c *x509.Certificate) { c.URIs = append(c.URIs, other) }, nil, false},
		{"DNS SAN", func(c *x509.Certificate) { c.DNSNames = []string{"x.pact.local"} }, nil, false},
		{"IP SAN", func(c *x509.Certificate) { c.IPAddresses = []net.IP{net.IPv4(10, 0, 0, 1)} }, nil, false},
		{"email SAN", func(c *x509.Certificate) { c.EmailAddresses = []string{"a@b"} }, nil, false},
		{"foreign key", func(*x509.Certificate) {}, newKey(t, "P-256").Public(), false},
		{"no subject key identifier", func(c *x509.Certificate) { c.SubjectKeyId = nil }, nil, false},
		{"another key's subject key identifier", func(c *x509.Certificate) {
			c.SubjectKeyId = wantSubjectKeyID(t, newKey(t, "P-256").Public())
		}, nil, false},
		{"SHA-1 subject key identifier", func(c *x509.Certificate) {
			e, _ := agentKey.Public().(*ecdsa.PublicKey).ECDH()
			c.SubjectKeyId = sha1Sum(e.Bytes())
		}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := base()
			tc.mutate(tmpl)
			pub := tc.pub
			if pub == nil {
				pub = agentKey.Public()
			}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, signer)
			if err != nil {
				t.Fatal(err)
			}
			cert, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			err = validateAgentCert(cert, id, csr)
			if tc.ok && err != nil {
				t.Errorf("validateAgentCert = %v, want nil", err)
			}
			if !tc.ok && !errors.Is(err, ErrIssuedInvalid) {
				t.Errorf("validateAgentCert = %v, want ErrIssuedInvalid", err)
			}
		})
	}
}

// ---- CSR policy ----

func sha1Sum(b []byte) []byte {
	s := sha1.Sum(b)
	return s[:]
}

// csrOuter and friends let tests assemble CSRs by hand: for keys and
// signature algorithms Go will not produce, and for tampering.
type csrOuter struct {
	TBS    asn1.RawValue
	SigAlg pkix.AlgorithmIdentifier
	Sig    asn1.BitString
}

func assembleCSR(t testing.TB, tbs []byte, alg asn1.ObjectIdentifier, params *asn1.RawValue, sig []byte) []byte {
	t.Helper()
	ai := pkix.AlgorithmIdentifier{Algorithm: alg}
	if params != nil {
		ai.Parameters = *params
	}
	der, err := asn1.Marshal(csrOuter{
		TBS:    asn1.RawValue{FullBytes: tbs},
		SigAlg: ai,
		Sig:    asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// buildTBS makes a CertificationRequestInfo for an arbitrary SPKI.
func buildTBS(t testing.TB, cn string, spki []byte) []byte {
	t.Helper()
	subject, err := asn1.Marshal(pkix.Name{CommonName: cn}.ToRDNSequence())
	if err != nil {
		t.Fatal(err)
	}
	tbs, err := asn1.Marshal(struct {
		Version    int
		Subject    asn1.RawValue
		SPKI       asn1.RawValue
		Attributes asn1.RawValue
	}{0, asn1.RawValue{FullBytes: subject}, asn1.RawValue{FullBytes: spki},
		asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true}})
	if err != nil {
		t.Fatal(err)
	}
	return tbs
}

// ecdsaSHA1CSR is a genuine, correctly signed ECDSA P-256 CSR using SHA-1,
// made by signing Go's own TBS with SHA-1 by hand.
func ecdsaSHA1CSR(t testing.TB) []byte {
	t.Helper()
	key := newKey(t, "P-256").(*ecdsa.PrivateKey)
	req, err := x509.ParseCertificateRequest(makeCSR(t, key, nil))
	if err != nil {
		t.Fatal(err)
	}
	digest := sha1Sum(req.RawTBSCertificateRequest)
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest)
	if err != nil {
		t.Fatal(err)
	}
	der := assembleCSR(t, req.RawTBSCertificateRequest, oidSigECDSAWithSHA1, nil, sig)
	// Precondition: x509 itself takes this as a valid SHA-1 CSR, so a
	// rejection can only come from pact's policy.
	parsed, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.SignatureAlgorithm != x509.ECDSAWithSHA1 {
		t.Fatalf("built CSR has %v", parsed.SignatureAlgorithm)
	}
	if err := parsed.CheckSignature(); err != nil {
		t.Fatalf("hand-signed SHA-1 CSR does not verify: %v", err)
	}
	return der
}

// rsa16384CSR is a CSR for a 16384-bit RSA public key. No such key is
// generated (far too slow): the modulus is random and the signature bytes
// are junk of the right length, which is fine because ParseCSR must refuse
// such a CSR (on size or key policy) before looking at the signature.
// fullSig chooses a signature as long as the modulus, as a real one would be.
func rsa16384CSR(t testing.TB, fullSig bool) []byte {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 16383))
	if err != nil {
		t.Fatal(err)
	}
	n.SetBit(n, 16383, 1)
	n.SetBit(n, 0, 1)
	spki, err := x509.MarshalPKIXPublicKey(&rsa.PublicKey{N: n, E: 65537})
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	if fullSig {
		sig = make([]byte, 2048)
	}
	if _, err := rand.Read(sig); err != nil {
		t.Fatal(err)
	}
	null := asn1.NullRawValue
	der := assembleCSR(t, buildTBS(t, "node-1", spki), oidSigSHA256WithRSA, &null, sig)
	if !fullSig {
		req, err := x509.ParseCertificateRequest(der)
		if err != nil {
			t.Fatalf("compact RSA-16384 CSR does not parse: %v", err)
		}
		if k, ok := req.PublicKey.(*rsa.PublicKey); !ok || k.N.BitLen() != 16384 {
			t.Fatalf("compact CSR key is %T", req.PublicKey)
		}
	}
	return der
}

// resignedWith replaces the signature of a CSR for key A with one by key B
// over the same TBS.
func resignedWith(t testing.TB, der []byte, other *ecdsa.PrivateKey) []byte {
	t.Helper()
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(req.RawTBSCertificateRequest)
	sig, err := ecdsa.SignASN1(rand.Reader, other, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return assembleCSR(t, req.RawTBSCertificateRequest, oidSigECDSAWithSHA256, nil, sig)
}

// withSigAlg keeps TBS and signature but names another algorithm.
func withSigAlg(t testing.TB, der []byte, alg asn1.ObjectIdentifier) []byte {
	t.Helper()
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return assembleCSR(t, req.RawTBSCertificateRequest, alg, nil, req.Signature)
}

// csrOfSize makes a valid Ed25519 CSR (fixed-size signature) of exactly n
// bytes by growing a DNS SAN.
func csrOfSize(t testing.TB, key crypto.Signer, n int) []byte {
	t.Helper()
	l := 1
	for range 10 {
		der := makeCSR(t, key, &x509.CertificateRequest{Subject: pkix.Name{Organization: []string{strings.Repeat("a", l)}}})
		if len(der) == n {
			return der
		}
		// Each extra character adds a byte, plus one when a DER length
		// grows a byte; converge on the exact size.
		if l += n - len(der); l < 1 {
			break
		}
	}
	t.Fatalf("cannot make a CSR of exactly %d bytes", n)
	return nil
}

func flipLast(der []byte) []byte {
	out := bytes.Clone(der)
	out[len(out)-1] ^= 0x01
	return out
}

func tamperCN(t testing.TB, der []byte) []byte {
	t.Helper()
	i := bytes.Index(der, []byte("node-1"))
	if i < 0 {
		t.Fatal("CN not found in CSR")
	}
	out := bytes.Clone(der)
	out[i+5] = '2' // node-1 -> node-2: still a valid CSR, wrong signature
	return out
}

var csrSentinels = []error{ErrCSRTooLarge, ErrCSRMalformed, ErrKeyPolicy, ErrCSRSignature, ErrCSRExtensions}

func TestParseCSRPolicy(t *testing.T) {
	p256 := newKey(t, "P-256")
	ed := newKey(t, "Ed25519")
	p256CSR := makeCSR(t, p256, nil)
	edCSR := makeCSR(t, ed, nil)
	bigSANs := make([]string, 200)
	for i := range bigSANs {
		bigSANs[i] = fmt.Sprintf("node-%03d.rack.pact.local", i)
	}

	for _, tc := range []struct {
		name string
		der  func(t *testing.T) []byte
		want error // nil: accepted
	}{
		{"empty", func(*testing.T) []byte { return nil }, ErrCSRMalformed},
		{"zero-length non-nil", func(*testing.T) []byte { return []byte{} }, ErrCSRMalformed},
		{"oversized zeros", func(*testing.T) []byte { return make([]byte, MaxCSRBytes+1) }, ErrCSRTooLarge},
		{"oversized 1 MiB", func(*testing.T) []byte { return bytes.Repeat([]byte{0x30}, 1<<20) }, ErrCSRTooLarge},
		{"oversized but validly signed", func(t *testing.T) []byte {
			return makeCSR(t, p256, &x509.CertificateRequest{DNSNames: bigSANs})
		}, ErrCSRTooLarge},
		{"exactly MaxCSRBytes+1", func(t *testing.T) []byte { return csrOfSize(t, ed, MaxCSRBytes+1) }, ErrCSRTooLarge},
		{"exactly MaxCSRBytes", func(t *testing.T) []byte { return csrOfSize(t, ed, MaxCSRBytes) }, nil},
		{"garbage", func(*testing.T) []byte { return []byte("this is not a certificate request") }, ErrCSRMalformed},
		{"random bytes", func(t *testing.T) []byte {
			b := make([]byte, 300)
			if _, err := rand.Read(b); err != nil {
				t.Fatal(err)
			}
			b[0] = 0x04 // not a SEQUENCE
			return b
		}, ErrCSRMalformed},
		{"PEM instead of DER", func(*testing.T) []byte {
			return []byte("-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n")
		}, ErrCSRMalformed},
		{"truncated", func(*testing.T) []byte { return p256CSR[:len(p256CSR)-10] }, ErrCSRMalformed},
		{"trailing data", func(*testing.T) []byte { return append(bytes.Clone(p256CSR), 0, 0) }, ErrCSRMalformed},
		{"a certificate, not a CSR", func(t *testing.T) []byte { r, _ := selfSignedCA(t); return r.Raw }, ErrCSRMalformed},
		{"RSA-1024", func(t *testing.T) []byte { return makeCSR(t, newKey(t, "RSA-1024"), nil) }, ErrKeyPolicy},
		{"RSA-2048", func(t *testing.T) []byte { return makeCSR(t, newKey(t, "RSA-2048"), nil) }, ErrKeyPolicy},
		// A real 16384-bit CSR carries a 2048-byte modulus and a 2048-byte
		// signature: the size cap stops it before parsing.
		{"RSA-16384", func(t *testing.T) []byte { return rsa16384CSR(t, true) }, ErrCSRTooLarge},
		// Squeezed under the cap, it parses and key policy stops it.
		{"RSA-16384 compact", func(t *testing.T) []byte { return rsa16384CSR(t, false) }, ErrKeyPolicy},
		{"ECDSA P-224", func(t *testing.T) []byte { return makeCSR(t, newKey(t, "P-224"), nil) }, ErrKeyPolicy},
		{"ECDSA P-521", func(t *testing.T) []byte { return makeCSR(t, newKey(t, "P-521"), nil) }, ErrKeyPolicy},
		// x509 would accept this signature (CheckSignature allows SHA-1 on
		// CSRs); pact's algorithm allow-list refuses it before that.
		{"ECDSA P-256 with SHA-1", func(t *testing.T) []byte { return ecdsaSHA1CSR(t) }, ErrKeyPolicy},
		{"corrupted ECDSA signature", func(*testing.T) []byte { return flipLast(p256CSR) }, ErrCSRSignature},
		{"corrupted Ed25519 signature", func(*testing.T) []byte { return flipLast(edCSR) }, ErrCSRSignature},
		{"tampered subject", func(t *testing.T) []byte { return tamperCN(t, p256CSR) }, ErrCSRSignature},
		{"signed by another key", func(t *testing.T) []byte {
			return resignedWith(t, p256CSR, newKey(t, "P-256").(*ecdsa.PrivateKey))
		}, ErrCSRSignature},
		{"Ed25519 key, ECDSA algorithm", func(t *testing.T) []byte { return withSigAlg(t, edCSR, oidSigECDSAWithSHA256) }, ErrCSRSignature},
		{"valid P-256", func(*testing.T) []byte { return p256CSR }, nil},
		{"valid P-256 SHA-384", func(t *testing.T) []byte {
			return makeCSR(t, p256, &x509.CertificateRequest{SignatureAlgorithm: x509.ECDSAWithSHA384})
		}, nil},
		{"valid P-384", func(t *testing.T) []byte { return makeCSR(t, newKey(t, "P-384"), nil) }, nil},
		{"valid Ed25519", func(*testing.T) []byte { return edCSR }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			der := tc.der(t)
			csr, err := ParseCSR(der)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("ParseCSR = %v, want accepted", err)
				}
				req, err := x509.ParseCertificateRequest(der)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(csr.SPKI, req.RawSubjectPublicKeyInfo) {
					t.Error("CSR.SPKI != RawSubjectPublicKeyInfo")
				}
				if pk, ok := csr.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pk.Equal(req.PublicKey) {
					t.Error("CSR.PublicKey differs from the request's")
				}
				if err := CheckKeyPolicy(csr.PublicKey); err != nil {
					t.Errorf("accepted key fails CheckKeyPolicy: %v", err)
				}
				return
			}
			if csr != nil {
				t.Errorf("ParseCSR returned a CSR with error %v", err)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("ParseCSR = %v, want %v", err, tc.want)
			}
			for _, other := range csrSentinels {
				if other != tc.want && errors.Is(err, other) {
					t.Errorf("error %q is also %v", err, other)
				}
			}
		})
	}
}

func TestCheckKeyPolicy(t *testing.T) {
	for _, tc := range []struct {
		name string
		pub  crypto.PublicKey
		ok   bool
	}{
		{"P-256", newKey(t, "P-256").Public(), true},
		{"P-384", newKey(t, "P-384").Public(), true},
		{"Ed25519", newKey(t, "Ed25519").Public(), true},
		{"P-224", newKey(t, "P-224").Public(), false},
		{"P-521", newKey(t, "P-521").Public(), false},
		{"RSA-2048 (public only)", &rsa.PublicKey{N: new(big.Int).Lsh(big.NewInt(1), 2047), E: 65537}, false},
		{"Ed25519 private key", newKey(t, "Ed25519"), false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckKeyPolicy(tc.pub)
			if tc.ok != (err == nil) {
				t.Errorf("CheckKeyPolicy = %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, ErrKeyPolicy) {
				t.Errorf("CheckKeyPolicy = %v, want ErrKeyPolicy", err)
			}
		})
	}
}
