package ca

import (
	"bytes"
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/pki"
)

var devFiles = []string{RootCertFile, RootKeyFile, AdminCertFile, AdminKeyFile}

type fileState struct {
	data    []byte
	mode    fs.FileMode
	modTime time.Time
}

func snapshot(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	for _, name := range devFiles {
		p := filepath.Join(dir, name)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = fileState{data, st.Mode(), st.ModTime()}
	}
	return out
}

func readPEMKey(t *testing.T, path string) crypto.Signer {
	t.Helper()
	k, err := ReadKeyFile(path)
	if err != nil {
		t.Fatalf("ReadKeyFile(%s): %v", path, err)
	}
	return k
}

func readPEMCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.ParseCertsPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(certs) != 1 {
		t.Fatalf("%s holds %d certificates", path, len(certs))
	}
	return certs[0]
}

func TestInitDevCreatesFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // InitDev creates it
	created, err := InitDev(dir, testDomain, testNow)
	if err != nil || !created {
		t.Fatalf("InitDev = %v, %v; want true, nil", created, err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode = %v, %v; want 0700", st.Mode().Perm(), err)
	}
	for _, tc := range []struct {
		name string
		perm fs.FileMode // exact permission bits; 0 means group/other may read
	}{
		{RootKeyFile, 0o600},
		{AdminKeyFile, 0o600},
		{RootCertFile, 0},
		{AdminCertFile, 0},
	} {
		st, err := os.Stat(filepath.Join(dir, tc.name))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !st.Mode().IsRegular() {
			t.Errorf("%s is not a regular file", tc.name)
		}
		if tc.perm != 0 && st.Mode().Perm() != tc.perm {
			t.Errorf("%s mode = %o, want %o", tc.name, st.Mode().Perm(), tc.perm)
		}
		if st.Mode().Perm()&0o022 != 0 {
			t.Errorf("%s is writable by group or others (%o)", tc.name, st.Mode().Perm())
		}
	}

	root := readPEMCert(t, filepath.Join(dir, RootCertFile))
	rootKey := readPEMKey(t, filepath.Join(dir, RootKeyFile))
	if !root.IsCA || !root.BasicConstraintsValid || root.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("root: IsCA %v, KeyUsage %b", root.IsCA, root.KeyUsage)
	}
	if err := root.CheckSignatureFrom(root); err != nil {
		t.Errorf("root is not self-signed: %v", err)
	}
	if !rootKey.Public().(*ecdsa.PublicKey).Equal(root.PublicKey) {
		t.Error("ca-key.pem does not match ca.pem")
	}
	if d, err := DomainOf(root); err != nil || d != testDomain {
		t.Errorf("DomainOf(root) = %q, %v", d, err)
	}
	if !root.NotBefore.Equal(testNow.Add(-time.Hour)) || !root.NotAfter.Equal(testNow.Add(10*365*24*time.Hour)) {
		t.Errorf("root validity %v .. %v", root.NotBefore, root.NotAfter)
	}

	admin := readPEMCert(t, filepath.Join(dir, AdminCertFile))
	adminKey := readPEMKey(t, filepath.Join(dir, AdminKeyFile))
	if !adminKey.Public().(*ecdsa.PublicKey).Equal(admin.PublicKey) {
		t.Error("admin-key.pem does not match admin.pem")
	}
	if len(admin.Subject.OrganizationalUnit) != 1 || admin.Subject.OrganizationalUnit[0] != pki.RolePlatformAdmin {
		t.Errorf("admin role = %v", admin.Subject.OrganizationalUnit)
	}
	if err := verifyClient(admin, root, testNow); err != nil {
		t.Errorf("admin cert does not verify against the root: %v", err)
	}
	// Go names a CA's key itself; pact names every leaf's key the same way.
	if want := wantSubjectKeyID(t, root.PublicKey); !bytes.Equal(root.SubjectKeyId, want) {
		t.Errorf("root SubjectKeyId = %x, want %x", root.SubjectKeyId, want)
	}
	if want := wantSubjectKeyID(t, admin.PublicKey); !bytes.Equal(admin.SubjectKeyId, want) {
		t.Errorf("admin SubjectKeyId = %x, want %x", admin.SubjectKeyId, want)
	}
	if !bytes.Equal(admin.AuthorityKeyId, root.SubjectKeyId) {
		t.Errorf("admin AuthorityKeyId = %x, want the root's %x", admin.AuthorityKeyId, root.SubjectKeyId)
	}
}

func TestInitDevIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	if created, err := InitDev(dir, testDomain, testNow); err != nil || !created {
		t.Fatalf("first InitDev = %v, %v", created, err)
	}
	before := snapshot(t, dir)
	for _, tc := range []struct {
		name   string
		domain string
		now    time.Time
	}{
		{"same arguments", testDomain, testNow},
		{"other domain, later", "other.example", testNow.Add(48 * time.Hour)},
	} {
		created, err := InitDev(dir, tc.domain, tc.now)
		if err != nil || created {
			t.Errorf("%s: InitDev = %v, %v; want false, nil", tc.name, created, err)
		}
		after := snapshot(t, dir)
		for _, name := range devFiles {
			b, a := before[name], after[name]
			if !bytes.Equal(b.data, a.data) || b.mode != a.mode || !b.modTime.Equal(a.modTime) {
				t.Errorf("%s: InitDev changed %s", tc.name, name)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(devFiles) {
		t.Errorf("data dir holds %d entries, want %d", len(entries), len(devFiles))
	}
}

func TestInitDevRejectsBadDomain(t *testing.T) {
	for _, domain := range []string{"", "Pact.Local", "pact local", "pact.local/x", "-pact"} {
		dir := filepath.Join(t.TempDir(), "d")
		created, err := InitDev(dir, domain, testNow)
		if created || !errors.Is(err, pki.ErrInvalidName) {
			t.Errorf("InitDev(%q) = %v, %v; want false, ErrInvalidName", domain, created, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("InitDev(%q) created the directory", domain)
		}
	}
}

// A run that died after writing the key but before the root never gets its
// key overwritten: InitDev fails instead.
func TestInitDevNeverOverwritesAKey(t *testing.T) {
	dir := t.TempDir()
	keyPath := filepath.Join(dir, RootKeyFile)
	orig := []byte("left over from an interrupted run\n")
	if err := os.WriteFile(keyPath, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	created, err := InitDev(dir, testDomain, testNow)
	if err == nil || created {
		t.Fatalf("InitDev = %v, %v; want an error", created, err)
	}
	if got, _ := os.ReadFile(keyPath); !bytes.Equal(got, orig) {
		t.Error("InitDev overwrote an existing key file")
	}
	if _, err := os.Stat(filepath.Join(dir, RootCertFile)); !errors.Is(err, os.ErrNotExist) {
		t.Error("InitDev wrote a root next to a key it did not make")
	}
}

func TestLoadKeyFileAuthority(t *testing.T) {
	_, dir := newUpstream(t, testNow)
	_, otherDir := newUpstream(t, testNow)
	certPath := filepath.Join(dir, RootCertFile)
	keyPath := filepath.Join(dir, RootKeyFile)
	scratch := t.TempDir()

	// copyTo copies src to a fresh file with the given mode.
	copies := 0
	copyTo := func(t *testing.T, src string, mode fs.FileMode) string {
		t.Helper()
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		copies++
		return writeMode(t, filepath.Join(scratch, fmt.Sprintf("copy-%d.pem", copies)), data, mode)
	}
	sec1 := func(t *testing.T) string {
		k := readPEMKey(t, keyPath).(*ecdsa.PrivateKey)
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return writeMode(t, filepath.Join(scratch, "sec1.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
	}

	for _, tc := range []struct {
		name      string
		cert, key func(t *testing.T) string
		wantErr   string // substring; empty means success
	}{
		{"dev root", func(*testing.T) string { return certPath }, func(*testing.T) string { return keyPath }, ""},
		{"SEC1 key", func(*testing.T) string { return certPath }, sec1, ""},
		{"key mode 0400", func(*testing.T) string { return certPath }, func(t *testing.T) string { return copyTo(t, keyPath, 0o400) }, ""},
		{"key mode 0644", func(*testing.T) string { return certPath }, func(t *testing.T) string { return copyTo(t, keyPath, 0o644) }, "chmod 600"},
		{"key mode 0640", func(*testing.T) string { return certPath }, func(t *testing.T) string { return copyTo(t, keyPath, 0o640) }, "chmod 600"},
		{"key mode 0604", func(*testing.T) string { return certPath }, func(t *testing.T) string { return copyTo(t, keyPath, 0o604) }, "chmod 600"},
		{"key of another root", func(*testing.T) string { return certPath }, func(*testing.T) string { return filepath.Join(otherDir, RootKeyFile) }, "does not belong"},
		{"non-CA certificate", func(*testing.T) string { return filepath.Join(dir, AdminCertFile) }, func(*testing.T) string { return filepath.Join(dir, AdminKeyFile) }, "not a CA"},
		{"missing certificate", func(*testing.T) string { return filepath.Join(scratch, "nope.pem") }, func(*testing.T) string { return keyPath }, "no such file"},
		{"missing key", func(*testing.T) string { return certPath }, func(*testing.T) string { return filepath.Join(scratch, "nope-key.pem") }, "no such file"},
		{"certificate file not PEM", func(t *testing.T) string {
			return writeMode(t, filepath.Join(scratch, "junk.pem"), []byte("junk"), 0o644)
		}, func(*testing.T) string { return keyPath }, "no PEM block"},
		{"key file holds a certificate", func(*testing.T) string { return certPath }, func(t *testing.T) string { return copyTo(t, certPath, 0o600) }, "unsupported PEM type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			auth, err := LoadKeyFileAuthority(tc.cert(t), tc.key(t))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("LoadKeyFileAuthority: %v", err)
				}
				if d, err := DomainOf(auth.Root()); err != nil || d != testDomain {
					t.Errorf("DomainOf = %q, %v", d, err)
				}
				if !auth.Signer().Public().(*ecdsa.PublicKey).Equal(auth.Root().PublicKey) {
					t.Error("Signer does not match Root")
				}
				return
			}
			if auth != nil || !errors.Is(err, ErrUpstream) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("LoadKeyFileAuthority = %v, %v; want nil, ErrUpstream containing %q", auth, err, tc.wantErr)
			}
		})
	}
}

func writeMode(t *testing.T, path string, data []byte, mode fs.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	// Explicit chmod: WriteFile's mode is filtered by the umask.
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDomainOf(t *testing.T) {
	mk := func(uris ...string) *x509.Certificate {
		c := &x509.Certificate{}
		for _, s := range uris {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			c.URIs = append(c.URIs, u)
		}
		return c
	}
	up, _ := newUpstream(t, testNow)
	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		want string // empty: ErrUpstream
	}{
		{"dev root", up.Root(), testDomain},
		{"spiffe trust domain", mk("spiffe://site.example"), "site.example"},
		{"spiffe after other URIs", mk("https://pact.example", "spiffe://site.example"), "site.example"},
		{"first spiffe wins", mk("spiffe://a.example", "spiffe://b.example"), "a.example"},
		{"no URIs", mk(), ""},
		{"https only", mk("https://site.example"), ""},
		{"spiffe without host", mk("spiffe:///path"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DomainOf(tc.cert)
			if tc.want == "" {
				if !errors.Is(err, ErrUpstream) || got != "" {
					t.Errorf("DomainOf = %q, %v; want ErrUpstream", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("DomainOf = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestIssueAdmin(t *testing.T) {
	up, _ := newUpstream(t, testNow)
	const life = 30 * 24 * time.Hour
	for _, tc := range []struct {
		name, role string
	}{
		{"alice", pki.RolePlatformAdmin},
		{"bob", pki.RoleViewer},
		{"carol.ops", "pact-ops-vc1"},
	} {
		t.Run(tc.role, func(t *testing.T) {
			certPEM, keyPEM, err := IssueAdmin(up, tc.name, tc.role, life, testNow)
			if err != nil {
				t.Fatalf("IssueAdmin: %v", err)
			}
			certs, err := pki.ParseCertsPEM(certPEM)
			if err != nil || len(certs) != 1 {
				t.Fatalf("cert PEM: %d certs, %v", len(certs), err)
			}
			cert := certs[0]
			b, rest := pem.Decode(keyPEM)
			if b == nil || b.Type != "PRIVATE KEY" || len(rest) != 0 {
				t.Fatalf("key PEM is not a single PRIVATE KEY block")
			}
			key, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if !key.(*ecdsa.PrivateKey).PublicKey.Equal(cert.PublicKey) {
				t.Error("key does not match certificate")
			}
			if got := cert.Subject.OrganizationalUnit; len(got) != 1 || got[0] != tc.role {
				t.Errorf("OU = %v, want [%s]", got, tc.role)
			}
			if want := "pact-admin/" + tc.name + "@" + testDomain; cert.Subject.CommonName != want {
				t.Errorf("CN = %q, want %q", cert.Subject.CommonName, want)
			}
			wantURI := "spiffe://" + testDomain + "/pact-admin/" + tc.name
			if len(cert.URIs) != 1 || cert.URIs[0].String() != wantURI {
				t.Errorf("URIs = %v, want [%s]", cert.URIs, wantURI)
			}
			if len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.EmailAddresses) != 0 {
				t.Error("unexpected SANs")
			}
			if len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
				t.Errorf("EKU = %v", cert.ExtKeyUsage)
			}
			if cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign != 0 {
				t.Error("admin certificate can sign certificates")
			}
			if !cert.NotBefore.Equal(testNow.Add(-time.Minute)) || !cert.NotAfter.Equal(testNow.Add(life)) {
				t.Errorf("validity %v .. %v", cert.NotBefore, cert.NotAfter)
			}
			// Signed directly by the root: no intermediate in between.
			if !bytes.Equal(cert.RawIssuer, up.Root().RawSubject) {
				t.Errorf("issuer = %v", cert.Issuer)
			}
			if err := cert.CheckSignatureFrom(up.Root()); err != nil {
				t.Errorf("not signed by the root: %v", err)
			}
			if err := verifyClient(cert, up.Root(), testNow); err != nil {
				t.Errorf("verify with the root alone: %v", err)
			}
			if id, err := pki.IdentityOf(cert); err != nil || id != (pki.Identity{Kind: pki.KindAdmin, Name: tc.name, Domain: testDomain}) {
				t.Errorf("IdentityOf = %+v, %v", id, err)
			}
		})
	}
	for _, tc := range []struct {
		name, role string
		want       error
	}{
		{"alice", "admin", ErrInvalidRole},
		{"alice", "", ErrInvalidRole},
		{"alice", "pact-ops-a/b", pki.ErrInvalidName},
		{"al/ice", pki.RoleViewer, pki.ErrInvalidName},
		{"", pki.RoleViewer, pki.ErrInvalidName},
		{"alice,OU=platform-admin", pki.RoleViewer, pki.ErrInvalidName},
		{"alice+OU=platform-admin", pki.RoleViewer, pki.ErrInvalidName},
	} {
		certPEM, keyPEM, err := IssueAdmin(up, tc.name, tc.role, life, testNow)
		if !errors.Is(err, tc.want) || certPEM != nil || keyPEM != nil {
			t.Errorf("IssueAdmin(%q, %q) = %d, %d bytes, %v; want %v", tc.name, tc.role, len(certPEM), len(keyPEM), err, tc.want)
		}
	}
}

func TestValidateRole(t *testing.T) {
	for _, tc := range []struct {
		role string
		want error
	}{
		{"platform-admin", nil},
		{"viewer", nil},
		{"pact-ops-vc1", nil},
		{"pact-ops-a.b_c-d", nil},
		{"pact-ops-", ErrInvalidRole},
		{"pact-ops", ErrInvalidRole},
		{"admin", ErrInvalidRole},
		{"", ErrInvalidRole},
		{"Platform-Admin", ErrInvalidRole},
		{"viewer ", ErrInvalidRole},
		{"pact-ops-.vc", pki.ErrInvalidName},
		{"pact-ops-vc/1", pki.ErrInvalidName},
		{"pact-ops-" + strings.Repeat("v", 64), pki.ErrInvalidName},
	} {
		err := ValidateRole(tc.role)
		if tc.want == nil {
			if err != nil {
				t.Errorf("ValidateRole(%q) = %v, want nil", tc.role, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("ValidateRole(%q) = %v, want %v", tc.role, err, tc.want)
		}
	}
}

// secretsOf lists strings that would betray key material from a key file:
// each base64 line of its PEM body, the base64 of the whole DER, and the
// private scalar in hex and decimal.
// scalarOf is the private scalar of an ECDSA key as a number.
func scalarOf(t *testing.T, key crypto.Signer) *big.Int {
	t.Helper()
	raw, err := key.(*ecdsa.PrivateKey).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return new(big.Int).SetBytes(raw)
}

func secretsOf(t *testing.T, pemData []byte, d *big.Int) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(string(pemData), "\n") {
		if line = strings.TrimSpace(line); len(line) >= 16 && !strings.HasPrefix(line, "-----") {
			out = append(out, line)
		}
	}
	if b, _ := pem.Decode(pemData); b != nil {
		out = append(out, base64.StdEncoding.EncodeToString(b.Bytes), hex.EncodeToString(b.Bytes))
	}
	if d != nil {
		out = append(out, d.Text(16), d.String(), base64.StdEncoding.EncodeToString(d.Bytes()))
	}
	if len(out) == 0 {
		t.Fatal("no secrets to look for")
	}
	return out
}

func assertNoSecrets(t *testing.T, what, text string, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		// Any 16-character run of a secret is enough to count as a leak.
		for i := 0; i+16 <= len(s); i += 8 {
			if strings.Contains(text, s[i:i+16]) {
				t.Errorf("%s leaks key material (%q...):\n%s", what, s[i:i+16], text)
				return
			}
		}
	}
}

func TestNoKeyMaterialInOutput(t *testing.T) {
	auth, dir := newUpstream(t, testNow)
	keyPath := filepath.Join(dir, RootKeyFile)
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	d := scalarOf(t, auth.Signer())
	secrets := secretsOf(t, keyPEM, d)

	printed := fmt.Sprintf("%v %+v %s %#v | %v %+v", auth, auth, auth, auth, *auth, *auth)
	assertNoSecrets(t, "formatted authority", printed, secrets)
	if !strings.Contains(fmt.Sprint(auth), "pact root CA "+testDomain) {
		t.Errorf("String() = %q, want it to name the root", auth.String())
	}
	// The same authority behind the interface, as callers hold it.
	var up RootAuthority = auth
	assertNoSecrets(t, "formatted RootAuthority", fmt.Sprintf("%v %+v", up, up), secrets)
	c := newFixtureWith(t, auth)
	assertNoSecrets(t, "formatted CA", fmt.Sprintf("%v %+v", c, c), secrets)

	block, _ := pem.Decode(keyPEM)
	if block == nil {
		t.Fatal("key file is not PEM")
	}
	xkey, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	x25519DER, err := x509.MarshalPKCS8PrivateKey(xkey)
	if err != nil {
		t.Fatal(err)
	}
	scratch := t.TempDir()
	for _, tc := range []struct {
		name    string
		content []byte
		d       *big.Int
	}{
		{"truncated key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: block.Bytes[:len(block.Bytes)-3]}), d},
		{"corrupted key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: append([]byte{0x31}, block.Bytes[1:]...)}), d},
		{"wrong PEM type", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: block.Bytes}), d},
		{"PKCS#8 labelled SEC1", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: block.Bytes}), d},
		{"base64 without armour", []byte(base64.StdEncoding.EncodeToString(block.Bytes) + "\n"), d},
		{"raw DER", block.Bytes, d},
		{"PEM headers", pem.EncodeToMemory(&pem.Block{Type: "BOGUS", Headers: map[string]string{"Note": base64.StdEncoding.EncodeToString(block.Bytes)}, Bytes: block.Bytes}), d},
		{"X25519 key cannot sign", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: x25519DER}), new(big.Int).SetBytes(xkey.Bytes())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeMode(t, filepath.Join(scratch, strings.ReplaceAll(tc.name, " ", "_")), tc.content, 0o600)
			secrets := append(secretsOf(t, keyPEM, tc.d), secretsOf(t, tc.content, nil)...)
			if len(tc.content) > 0 && tc.content[0] != '-' {
				secrets = append(secrets, string(tc.content[:min(len(tc.content), 40)]))
			}
			k, err := ReadKeyFile(p)
			if err == nil || k != nil {
				t.Fatalf("ReadKeyFile = %v, %v; want an error", k, err)
			}
			if !errors.Is(err, ErrUpstream) {
				t.Errorf("ReadKeyFile = %v, want ErrUpstream", err)
			}
			assertNoSecrets(t, "ReadKeyFile error", err.Error(), secrets)
			assertNoSecrets(t, "ReadKeyFile error (%+v)", fmt.Sprintf("%+v %#v", err, err), secrets)
			a, err := LoadKeyFileAuthority(filepath.Join(dir, RootCertFile), p)
			if err == nil || a != nil {
				t.Fatalf("LoadKeyFileAuthority = %v, %v; want an error", a, err)
			}
			assertNoSecrets(t, "LoadKeyFileAuthority error", err.Error(), secrets)
		})
	}

	// A good key that belongs to another root: the mismatch error names
	// files, not keys.
	other, otherDir := newUpstream(t, testNow)
	otherPEM, err := os.ReadFile(filepath.Join(otherDir, RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	_, err = LoadKeyFileAuthority(filepath.Join(dir, RootCertFile), filepath.Join(otherDir, RootKeyFile))
	if err == nil {
		t.Fatal("mismatched key accepted")
	}
	assertNoSecrets(t, "mismatch error", err.Error(), secretsOf(t, otherPEM, scalarOf(t, other.Signer())))
}

// newFixtureWith builds a CA over an existing authority on the real clock.
func newFixtureWith(t *testing.T, up RootAuthority) *CA {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Upstream = up
	cfg.JournalID = testJournal
	cfg.Clock = fakeclock.New(testNow)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
