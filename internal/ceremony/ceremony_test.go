package ceremony

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
)

const domain = "hpc.example.org"

var now = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// newRoot runs InitRoot in a fresh directory and opens the root as
// pact ca does.
func newRoot(t *testing.T, lifetime time.Duration) (dir string, root *x509.Certificate, key keystore.Key) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "root")
	if _, err := InitRoot(dir, domain, keystore.Spec{}, keystore.Options{}, lifetime, now); err != nil {
		t.Fatal(err)
	}
	root, key, err := LoadRoot(filepath.Join(dir, RootCertFile), DefaultRootKey(dir), keystore.Options{}, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { key.Close() })
	return dir, root, key
}

// request makes a journal CA's key and CSR as pact-journal ca-request does.
func request(t *testing.T, journalID string, names ...string) ([]byte, *Request) {
	t.Helper()
	dns, ips, err := ParseNames(names)
	if err != nil {
		t.Fatal(err)
	}
	spec := keystore.Spec{Backend: keystore.BackendFile, Location: filepath.Join(t.TempDir(), journalID+"-ca-key.pem")}
	req, err := NewRequest(journalID, spec, keystore.Options{}, dns, ips)
	if err != nil {
		t.Fatal(err)
	}
	return req.PEM, req
}

// signJournal makes journal journalID's request and signs it for names
// and the journal id (pact ca sign-journal refuses --names without it).
func signJournal(t *testing.T, root *x509.Certificate, key crypto.Signer, journalID string, names ...string) (*x509.Certificate, *Request, crypto.Signer) {
	t.Helper()
	if !slices.Contains(names, journalID) {
		names = append([]string{journalID}, names...)
	}
	csr, req := request(t, journalID, names...)
	dns, ips, err := ParseNames(names)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := SignJournalCA(root, key, csr, journalID, dns, ips, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	jkey, err := keystore.Open(keystore.Spec{Backend: keystore.BackendFile, Location: strings.TrimPrefix(req.Key, "file:")}, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cert, req, jkey
}

func pool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func ls(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestInitRoot(t *testing.T) {
	dir, root, key := newRoot(t, 0)
	if !caprofile.IsRoot(root) || root.MaxPathLen > 0 || root.MaxPathLenZero {
		t.Errorf("not an unconstrained pact root: %+v", root.Subject)
	}
	if d, err := DomainOf(root); err != nil || d != domain {
		t.Errorf("domain %q %v", d, err)
	}
	if got := root.NotAfter.Sub(now); got != caprofile.DefaultRootLifetime {
		t.Errorf("root lifetime %v, want the default %v", got, caprofile.DefaultRootLifetime)
	}
	if want, _ := caprofile.KeyID(key.Public()); !bytes.Equal(root.SubjectKeyId, want) {
		t.Errorf("root SKID %x, want %x", root.SubjectKeyId, want)
	}
	if _, err := root.Verify(x509.VerifyOptions{Roots: pool(root), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("root does not verify to itself: %v", err)
	}
	if m := mode(t, filepath.Join(dir, RootCertFile)); m != 0o644 {
		t.Errorf("ca.pem mode %o", m)
	}
	if m := mode(t, filepath.Join(dir, RootKeyFile)); m != 0o600 {
		t.Errorf("ca-key.pem mode %o", m)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("dir mode %o", m)
	}

	// A key elsewhere, as --key file:PATH gives it.
	dir2 := filepath.Join(t.TempDir(), "r2")
	keyPath := filepath.Join(t.TempDir(), "offline-root.key")
	if _, err := InitRoot(dir2, domain, keystore.Spec{Backend: keystore.BackendFile, Location: keyPath}, keystore.Options{}, 48*time.Hour, now); err != nil {
		t.Fatal(err)
	}
	if got := ls(t, dir2); !slices.Equal(got, []string{RootCertFile}) {
		t.Errorf("dir holds %v; the key belongs at %s", got, keyPath)
	}
	if _, _, err := LoadRoot(filepath.Join(dir2, RootCertFile), keystore.Spec{Backend: keystore.BackendFile, Location: keyPath}, keystore.Options{}, now); err != nil {
		t.Error(err)
	}
	// Another root's key is not this root's.
	if _, _, err := LoadRoot(filepath.Join(dir2, RootCertFile), DefaultRootKey(dir), keystore.Options{}, now); !errors.Is(err, ErrRoot) {
		t.Errorf("a foreign key opened the root: %v", err)
	}
	// Out of its validity, the root is refused.
	if _, _, err := LoadRoot(filepath.Join(dir2, RootCertFile), keystore.Spec{Backend: keystore.BackendFile, Location: keyPath}, keystore.Options{}, now.Add(72*time.Hour)); !errors.Is(err, ErrRoot) {
		t.Errorf("expired root opened: %v", err)
	}
}

// Anything in the way refuses the root, and nothing is written.
func TestInitRootRefuses(t *testing.T) {
	tests := []struct {
		name     string
		prepare  func(dir string)
		domain   string
		lifetime time.Duration
		want     error
		left     []string
	}{
		{name: "ca.pem exists", prepare: func(dir string) { write(t, filepath.Join(dir, RootCertFile), "old", 0o644) }, domain: domain, want: ErrExists, left: []string{RootCertFile}},
		{name: "key exists", prepare: func(dir string) { write(t, filepath.Join(dir, RootKeyFile), "old", 0o600) }, domain: domain, want: keystore.ErrExists, left: []string{RootKeyFile}},
		{name: "bad domain", domain: "Not A Domain", want: ErrInput},
		{name: "short lifetime", domain: domain, lifetime: time.Hour, want: ErrInput},
	}
	// A key location that cannot be made leaves no directory behind.
	noDir := filepath.Join(t.TempDir(), "new")
	if _, err := InitRoot(noDir, domain, keystore.Spec{Backend: keystore.BackendFile, Location: filepath.Join(t.TempDir(), "missing", "k.pem")}, keystore.Options{}, 0, now); err == nil {
		t.Error("a key in a missing directory was made")
	}
	if _, err := os.Stat(noDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory was left: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "root")
			if tt.prepare != nil {
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				tt.prepare(dir)
			}
			_, err := InitRoot(dir, tt.domain, keystore.Spec{}, keystore.Options{}, tt.lifetime, now)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
			if got := ls(t, dir); !slices.Equal(got, tt.left) {
				t.Errorf("dir holds %v, want %v", got, tt.left)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, RootCertFile)); len(b) > 0 && string(b) != "old" {
				t.Error("ca.pem overwritten")
			}
		})
	}
}

func write(t *testing.T, path, data string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
}

func TestSignJournalCA(t *testing.T) {
	_, root, key := newRoot(t, 0)
	jca, req, _ := signJournal(t, root, key, "j1", "j1.site.example", "10.0.0.1", "fd00::1")
	if _, err := jca.Verify(x509.VerifyOptions{Roots: pool(root), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("journal CA does not verify to the root: %v", err)
	}
	ips := []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("fd00::1")}
	if err := caprofile.CheckJournalCA(jca, []*x509.Certificate{root}, "j1", domain, []string{"j1.site.example"}, ips, now); err != nil {
		t.Errorf("CheckJournalCA: %v", err)
	}
	if id, d, ok := caprofile.JournalOf(jca); !ok || id != "j1" || d != domain {
		t.Errorf("JournalOf %q %q %v", id, d, ok)
	}
	if jca.MaxPathLen != 1 || !jca.IsCA || !jca.PermittedDNSDomainsCritical {
		t.Errorf("path length %d, CA %v, critical %v", jca.MaxPathLen, jca.IsCA, jca.PermittedDNSDomainsCritical)
	}
	if want, _ := caprofile.SPKIKeyID(jca.RawSubjectPublicKeyInfo); !bytes.Equal(jca.SubjectKeyId, want) {
		t.Errorf("SKID %x, want %x", jca.SubjectKeyId, want)
	}
	if !bytes.Equal(jca.AuthorityKeyId, root.SubjectKeyId) || len(jca.AuthorityKeyId) == 0 {
		t.Errorf("AKID %x, root SKID %x", jca.AuthorityKeyId, root.SubjectKeyId)
	}
	if got := pki.SPKIFingerprint(jca); got != req.Fingerprint {
		t.Errorf("signed key %s, the request's %s", got, req.Fingerprint)
	}
	if got := jca.NotAfter.Sub(now); got != caprofile.DefaultJournalCALifetime {
		t.Errorf("lifetime %v", got)
	}

	// Never past the root.
	_, shortRoot, shortKey := newRoot(t, 30*24*time.Hour)
	capped, _, _ := signJournal(t, shortRoot, shortKey, "j2", "j2.site.example")
	if !capped.NotAfter.Equal(shortRoot.NotAfter) {
		t.Errorf("journal CA ends %v, after its root's %v", capped.NotAfter, shortRoot.NotAfter)
	}
}

// The journal CA's name constraints hold below it, in crypto/x509's own
// verifier: an intermediate under it can vouch for the journal's names and
// SPIFFE IDs of the domain, nothing else.
func TestJournalCANameConstraints(t *testing.T) {
	_, root, key := newRoot(t, 0)
	jca, _, jkey := signJournal(t, root, key, "j1", "j1.site.example", "10.0.0.1")
	interKey := newKey(t)
	inter := sign(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "pact journal intermediate j1"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}, jca, interKey.Public(), jkey)
	leaf := func(dns []string, ips []net.IP, uri string) *x509.Certificate {
		u, _ := url.Parse(uri)
		return sign(t, &x509.Certificate{
			Subject: pkix.Name{CommonName: "leaf"}, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			DNSNames: dns, IPAddresses: ips, URIs: []*url.URL{u},
		}, inter, newKey(t).Public(), interKey)
	}
	tests := []struct {
		name string
		cert *x509.Certificate
		ok   bool
	}{
		{"journal's name and address", leaf([]string{"j1.site.example"}, []net.IP{net.ParseIP("10.0.0.1")}, "spiffe://"+domain+"/pact-journal/j1"), true},
		{"agent of the domain", leaf(nil, nil, "spiffe://"+domain+"/pact-agent/n1"), true},
		{"a name outside", leaf([]string{"evil.example"}, nil, "spiffe://"+domain+"/pact-journal/j1"), false},
		{"another journal's name", leaf([]string{"j2.site.example"}, nil, "spiffe://"+domain+"/pact-journal/j1"), false},
		{"an address outside", leaf(nil, []net.IP{net.ParseIP("10.0.0.2")}, "spiffe://"+domain+"/pact-journal/j1"), false},
		{"another trust domain", leaf(nil, nil, "spiffe://other.example/pact-agent/n1"), false},
		{"a subdomain's trust domain", leaf(nil, nil, "spiffe://x."+domain+"/pact-agent/n1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.cert.Verify(x509.VerifyOptions{Roots: pool(root), Intermediates: pool(jca, inter), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			if (err == nil) != tt.ok {
				t.Errorf("verify: %v, want ok=%v", err, tt.ok)
			}
			var inv x509.CertificateInvalidError
			if !tt.ok && (!errors.As(err, &inv) || inv.Reason != x509.CANotAuthorizedForThisName) {
				t.Errorf("refused for another reason: %v", err)
			}
		})
	}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t *testing.T, tmpl, parent *x509.Certificate, pub crypto.PublicKey, key crypto.Signer) *x509.Certificate {
	t.Helper()
	serial, _ := pki.NewSerial()
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func csrOf(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "j1"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestSignJournalCARefuses(t *testing.T) {
	_, root, key := newRoot(t, 0)
	good, _ := request(t, "j1", "j1.site.example")
	tampered := csrOf(t, newKey(t))
	tampered[len(tampered)-3] ^= 0xff
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	_, _, otherKey := newRoot(t, 0)
	jca, _, jkey := signJournal(t, root, key, "j9", "j9.site.example")
	names := []string{"j1", "j1.site.example"}
	tests := []struct {
		name  string
		root  *x509.Certificate
		key   crypto.Signer
		csr   []byte
		id    string
		dns   []string
		ips   []net.IP
		life  time.Duration
		at    time.Time
		want  error
		wantS string
	}{
		{name: "empty", csr: nil, want: ErrCSR},
		{name: "garbage", csr: []byte("not a request"), want: ErrCSR},
		{name: "a certificate instead", csr: pki.EncodeCertsPEM(root.Raw), want: ErrCSR, wantS: "CERTIFICATE REQUEST"},
		{name: "too large", csr: bytes.Repeat([]byte{'x'}, MaxCSRBytes+1), want: ErrCSR},
		{name: "tampered", csr: tampered, want: ErrCSR},
		{name: "RSA key", csr: csrOf(t, rsaKey), want: ErrKeyPolicy},
		{name: "P-224 key", csr: csrOf(t, p224), want: ErrKeyPolicy},
		{name: "the root's own key", csr: csrOf(t, key), want: ErrCSR, wantS: "root's own key"},
		{name: "bad journal id", csr: good, id: "j 1", want: ErrInput},
		{name: "no names", csr: good, dns: []string{}, want: caprofile.ErrNames},
		{name: "without the journal id", csr: good, dns: []string{"j1.site.example"}, ips: []net.IP{net.ParseIP("10.0.0.1").To4()}, want: ErrInput, wantS: "add it: --names j1,j1.site.example,10.0.0.1"},
		{name: "addresses only", csr: good, dns: []string{}, ips: []net.IP{net.ParseIP("10.0.0.1").To4()}, want: ErrInput, wantS: "lacks the journal id j1"},
		{name: "wildcard", csr: good, dns: []string{"*.site.example"}, want: caprofile.ErrNames},
		{name: "underscore", csr: good, dns: []string{"j_1.site.example"}, want: ErrName},
		{name: "unspecified address", csr: good, ips: []net.IP{net.IPv4zero}, want: ErrName},
		{name: "lifetime too short", csr: good, life: time.Minute, want: ErrInput},
		{name: "not the root's key", csr: good, key: otherKey, want: ErrRoot},
		{name: "a journal CA is no root", csr: good, root: jca, key: jkey, want: ErrRoot},
		{name: "root expired", csr: good, at: now.Add(caprofile.DefaultRootLifetime + time.Hour), want: ErrRoot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, k, id, dns, at := root, crypto.Signer(key), "j1", names, now
			if tt.root != nil {
				r = tt.root
			}
			if tt.key != nil {
				k = tt.key
			}
			if tt.id != "" {
				id = tt.id
			}
			if tt.dns != nil || tt.ips != nil {
				dns = tt.dns
			}
			if !tt.at.IsZero() {
				at = tt.at
			}
			cert, err := SignJournalCA(r, k, tt.csr, id, dns, tt.ips, tt.life, at)
			if !errors.Is(err, tt.want) || cert != nil {
				t.Fatalf("err %v (cert %v), want %v", err, cert != nil, tt.want)
			}
			if !strings.Contains(err.Error(), tt.wantS) {
				t.Errorf("%q lacks %q", err, tt.wantS)
			}
		})
	}
	// Ed25519 and P-384 keys are accepted.
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	for _, k := range []crypto.Signer{ed, p384} {
		if _, err := SignJournalCA(root, key, csrOf(t, k), "j1", names, nil, 0, now); err != nil {
			t.Errorf("%T: %v", k, err)
		}
	}
}

func TestParseNames(t *testing.T) {
	dns, ips, err := ParseNames([]string{"J1.Site.Example", " 10.0.0.1", "", "[fd00::1]", "j1"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dns, []string{"j1.site.example", "j1"}) || len(ips) != 2 || !ips[0].Equal(net.ParseIP("10.0.0.1")) || len(ips[0]) != 4 || !ips[1].Equal(net.ParseIP("fd00::1")) {
		t.Errorf("dns %v ips %v", dns, ips)
	}
	for _, bad := range []string{"j1.site:7443", "10.0.0.1:7443", "[::1]:7443", "0.0.0.0", "::", "224.0.0.1", "*.site", "a..b", ".site", "site.", "a b", "https://j1", "-j1.site", "j1@site", "a_b"} {
		if _, _, err := ParseNames([]string{bad}); !errors.Is(err, ErrName) && !errors.Is(err, caprofile.ErrNames) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	many := make([]string, 65)
	for i := range many {
		many[i] = "j" + big.NewInt(int64(i)).String()
	}
	if _, _, err := ParseNames(many); !errors.Is(err, caprofile.ErrNames) {
		t.Errorf("65 names: %v", err)
	}
}

func TestIssueAdmin(t *testing.T) {
	_, root, key := newRoot(t, 0)
	certPEM, keyPEM, cert, err := IssueAdmin(root, key, "alice", pki.RolePlatformAdmin, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(root), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("admin does not verify to the root: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(root), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("an operator credential serves as a server certificate")
	}
	id, err := pki.IdentityOf(cert)
	if err != nil || id != (pki.Identity{Kind: pki.KindAdmin, Name: "alice", Domain: domain}) {
		t.Errorf("identity %+v %v", id, err)
	}
	if cert.Subject.CommonName != "pact-admin/alice@"+domain || !slices.Equal(cert.Subject.OrganizationalUnit, []string{pki.RolePlatformAdmin}) || cert.IsCA {
		t.Errorf("subject %v CA %v", cert.Subject, cert.IsCA)
	}
	if want, _ := caprofile.SPKIKeyID(cert.RawSubjectPublicKeyInfo); !bytes.Equal(cert.SubjectKeyId, want) {
		t.Error("admin SKID is not its key's")
	}
	if got := cert.NotAfter.Sub(now); got != DefaultAdminLifetime {
		t.Errorf("lifetime %v", got)
	}
	if parsed, err := pki.ParseCertsPEM(certPEM); err != nil || !parsed[0].Equal(cert) {
		t.Errorf("cert PEM %v", err)
	}
	b, _ := pem.Decode(keyPEM)
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil || !k.(*ecdsa.PrivateKey).PublicKey.Equal(cert.PublicKey) {
		t.Errorf("key PEM does not hold the credential's key: %v", err)
	}
	for _, tt := range []struct{ name, role string }{{"a b", pki.RolePlatformAdmin}, {"bob", "root"}, {"bob", "pact-ops-"}, {"bob", "pact-ops-a b"}} {
		if _, _, _, err := IssueAdmin(root, key, tt.name, tt.role, 0, now); !errors.Is(err, ErrInput) {
			t.Errorf("%q %q: %v", tt.name, tt.role, err)
		}
	}
	if _, _, _, err := IssueAdmin(root, key, "bob", "viewer", time.Second, now); !errors.Is(err, ErrInput) {
		t.Errorf("one second: %v", err)
	}
}

func TestNewRequest(t *testing.T) {
	dir := t.TempDir()
	spec := keystore.Spec{Backend: keystore.BackendFile, Location: filepath.Join(dir, "journal-ca-key.pem")}
	first, err := NewRequest("j1", spec, keystore.Options{}, []string{"j1.site.example"}, []net.IP{net.ParseIP("10.0.0.1").To4()})
	if err != nil {
		t.Fatal(err)
	}
	if !first.Created || first.Key != spec.String() {
		t.Errorf("created %v key %s", first.Created, first.Key)
	}
	if m := mode(t, spec.Location); m != 0o600 {
		t.Errorf("key mode %o", m)
	}
	csr, err := ParseCSR(first.PEM)
	if err != nil {
		t.Fatal(err)
	}
	if csr.JournalID != "j1" || !slices.Equal(csr.DNSNames, []string{"j1.site.example"}) || len(csr.IPs) != 1 || csr.Fingerprint() != first.Fingerprint {
		t.Errorf("request %+v", csr)
	}
	// A renewal keeps the key.
	again, err := NewRequest("j1", spec, keystore.Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Created || again.Fingerprint != first.Fingerprint || bytes.Equal(again.PEM, first.PEM) {
		t.Errorf("renewal: created %v, same key %v", again.Created, again.Fingerprint == first.Fingerprint)
	}
	// An RSA key where the journal CA's key should be is refused.
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	der, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	rsaPath := filepath.Join(dir, "rsa.pem")
	write(t, rsaPath, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), 0o600)
	if _, err := NewRequest("j1", keystore.Spec{Backend: keystore.BackendFile, Location: rsaPath}, keystore.Options{}, nil, nil); !errors.Is(err, ErrKeyPolicy) {
		t.Errorf("RSA key: %v", err)
	}
	// A key file others can read is refused, never used.
	loose := filepath.Join(dir, "loose.pem")
	write(t, loose, "x", 0o644)
	if _, err := NewRequest("j1", keystore.Spec{Backend: keystore.BackendFile, Location: loose}, keystore.Options{}, nil, nil); !errors.Is(err, keystore.ErrPermission) {
		t.Errorf("0644 key: %v", err)
	}
	if _, err := NewRequest("j 1", spec, keystore.Options{}, nil, nil); !errors.Is(err, ErrInput) {
		t.Errorf("bad id: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	_, root, key := newRoot(t, 0)
	jca, req, jkey := signJournal(t, root, key, "j1", "j1.site.example", "10.0.0.1")
	_, _, admin, err := IssueAdmin(root, key, "alice", "viewer", 0, now)
	if err != nil {
		t.Fatal(err)
	}
	interKey := newKey(t)
	inter := sign(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "pact intermediate j1"}, NotBefore: now, NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
		URIs: []*url.URL{{Scheme: "spiffe", Host: domain}},
	}, jca, interKey.Public(), jkey)
	leafOf := func(id pki.Identity) *x509.Certificate {
		return sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: id.CommonName()}, NotBefore: now, NotAfter: now.Add(time.Hour), URIs: []*url.URL{id.SPIFFEID()}}, inter, newKey(t).Public(), interKey)
	}
	tests := []struct {
		cert            *x509.Certificate
		kind, label, id string
	}{
		{root, KindRoot, "domain root", ""},
		{jca, KindJournalCA, "journal CA", "j1"},
		{inter, KindIntermediate, "journal intermediate", ""},
		{leafOf(pki.Identity{Kind: pki.KindAgent, Name: "n1", Domain: domain}), KindAgent, "agent certificate", ""},
		{leafOf(pki.Identity{Kind: pki.KindJournal, Name: "j1", Domain: domain}), KindJournal, "journal server certificate", "j1"},
		{admin, KindOperator, "operator credential", ""},
		{sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: "x"}, NotBefore: now, NotAfter: now.Add(time.Hour)}, inter, newKey(t).Public(), interKey), KindOther, "certificate (not one pact makes)", ""},
	}
	for _, tt := range tests {
		d := Describe(tt.cert)
		if d.Kind != tt.kind || d.Label != tt.label || d.JournalID != tt.id {
			t.Errorf("%s: kind %q label %q journal %q", tt.cert.Subject.CommonName, d.Kind, d.Label, d.JournalID)
		}
		if d.SPKISHA256 != pki.SPKIFingerprint(tt.cert) || d.Serial != pki.SerialHex(tt.cert.SerialNumber) {
			t.Errorf("%s: fingerprint or serial", d.Kind)
		}
	}
	d := Describe(jca)
	if d.Domain != domain || d.SPKISHA256 != req.Fingerprint || d.Constraints == nil || d.Constraints.MaxPathLen != 1 ||
		!slices.Equal(d.Constraints.PermittedDNSDomains, []string{"j1", "j1.site.example"}) || !slices.Equal(d.Constraints.PermittedIPRanges, []string{"10.0.0.1/32"}) ||
		!slices.Equal(d.Constraints.PermittedURIDomains, []string{domain}) || d.Issuer != root.Subject.String() || d.SelfSigned {
		t.Errorf("journal CA described as %+v %+v", d, d.Constraints)
	}
	if d := Describe(root); !d.SelfSigned || d.Constraints.MaxPathLen != -1 || d.Domain != domain {
		t.Errorf("root described as %+v", d)
	}
	if d := Describe(admin); d.Role != "viewer" || d.Name != "alice" || d.Constraints != nil || !slices.Equal(d.ExtKeyUsage, []string{"clientAuth"}) {
		t.Errorf("operator described as %+v", d)
	}
}
