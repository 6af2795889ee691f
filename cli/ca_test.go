package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/ceremony"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/journalmain"
)

// caRun runs pact with a hostile journal environment: every PACT_*
// variable names something that does not work. The ca commands must not
// read it.
func caRun(t *testing.T, now time.Time, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	bad := map[string]string{EnvJournal: "::not an address", EnvCA: "/nonexistent/ca.pem", EnvCert: "/nonexistent/admin.pem", EnvKey: "/nonexistent/admin-key.pem"}
	a := &app{env: Env{Stdout: &out, Stderr: &errb, Now: func() time.Time { return now }, Getenv: func(k string) string { return bad[k] }}.withDefaults()}
	a.newClient = a.dial
	code := a.run(context.Background(), args)
	return code, out.String(), errb.String()
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.ParseCertsPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

// secretForms are the ways a private key file's secret could leak into
// output: its PEM body lines, and its raw scalar in hex and base64.
func secretForms(t *testing.T, keyFile string) []string {
	t.Helper()
	data, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s holds no PEM", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	scalar, err := k.(*ecdsa.PrivateKey).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	forms := []string{
		hex.EncodeToString(scalar), strings.ToUpper(hex.EncodeToString(scalar)),
		base64.StdEncoding.EncodeToString(scalar), base64.RawURLEncoding.EncodeToString(scalar),
		base64.StdEncoding.EncodeToString(b.Bytes),
		pki.FormatFingerprint(scalar),
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.HasPrefix(line, "-----") {
			forms = append(forms, line)
		}
	}
	return forms
}

// The whole ceremony through the commands an operator types: the root on
// the ceremony machine, the journal CA's key and request on the journal
// host (pact-journal ca-request), the journal CA signed, the first admin,
// a renewal with the same key, and show. Every file has its mode; every
// certificate verifies to the root; no output holds the root's key.
func TestCeremonyEndToEnd(t *testing.T) {
	now := time.Now()
	base := t.TempDir()
	rootDir, host, adminDir := filepath.Join(base, "root-ca"), filepath.Join(base, "j1-host"), filepath.Join(base, "alice")
	if err := os.Mkdir(host, 0o700); err != nil {
		t.Fatal(err)
	}
	var outputs []string
	run := func(args ...string) (int, string, string) {
		t.Helper()
		code, stdout, stderr := caRun(t, now, args...)
		outputs = append(outputs, stdout, stderr)
		return code, stdout, stderr
	}
	journalHost := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := journalmain.Main(args, &out, &errb)
		outputs = append(outputs, out.String(), errb.String())
		return code, out.String(), errb.String()
	}

	// 1. The root, on the ceremony machine.
	code, stdout, stderr := run("ca", "init", "--dir", rootDir, "--domain", testDomain)
	if code != 0 {
		t.Fatalf("init: %d\n%s%s", code, stdout, stderr)
	}
	root := readCert(t, filepath.Join(rootDir, "ca.pem"))
	for _, want := range []string{"created the domain root of " + testDomain, pki.CertFingerprint(root), pki.SerialHex(root.SerialNumber), "pact-journal ca-request", "pact ca sign-journal", "pact ca issue-admin"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("init output lacks %q:\n%s", want, stdout)
		}
	}
	for path, want := range map[string]os.FileMode{rootDir: 0o700, filepath.Join(rootDir, "ca.pem"): 0o644, filepath.Join(rootDir, "ca-key.pem"): 0o600} {
		if got := fileMode(t, path); got != want {
			t.Errorf("%s mode %o, want %o", path, got, want)
		}
	}
	if code, _, stderr := run("ca", "init", "--dir", rootDir, "--domain", testDomain); code != ExitUsage || !strings.Contains(stderr, "already holds a domain root") {
		t.Errorf("a second init: %d %s", code, stderr)
	}

	// 2. The journal CA's key and request, on the journal host.
	hostKey := "file:" + filepath.Join(host, "journal-ca-key.pem")
	csrFile := filepath.Join(base, "j1.csr")
	code, stdout, stderr = journalHost("ca-request", "--journal-id", "j1", "--key", hostKey, "--names", "j1,j1.example.org,127.0.0.1", "--out", csrFile)
	if code != 0 {
		t.Fatalf("ca-request: %d\n%s%s", code, stdout, stderr)
	}
	fp := regexp.MustCompile(`SPKI SHA-256 ([0-9a-f]{64})`).FindStringSubmatch(stdout)
	if fp == nil || !strings.Contains(stdout, "made the journal CA key") {
		t.Fatalf("ca-request output:\n%s", stdout)
	}
	if got := fileMode(t, filepath.Join(host, "journal-ca-key.pem")); got != 0o600 {
		t.Errorf("journal CA key mode %o", got)
	}

	// 3. The journal CA, signed on the ceremony machine.
	jcaFile := filepath.Join(base, "j1-ca.pem")
	code, stdout, stderr = run("ca", "sign-journal", "--dir", rootDir, "--csr", csrFile, "--journal-id", "j1", "--names", "j1,j1.example.org,127.0.0.1", "--out", jcaFile)
	if code != 0 || stderr != "" {
		t.Fatalf("sign-journal: %d\n%s%s", code, stdout, stderr)
	}
	jca := readCert(t, jcaFile)
	if got := fileMode(t, jcaFile); got != 0o644 {
		t.Errorf("journal CA mode %o", got)
	}
	if err := caprofile.CheckJournalCA(jca, []*x509.Certificate{root}, "j1", testDomain, []string{"j1.example.org"}, []net.IP{net.ParseIP("127.0.0.1")}, now); err != nil {
		t.Errorf("the journal would refuse its CA: %v", err)
	}
	if pki.SPKIFingerprint(jca) != fp[1] {
		t.Errorf("signed key %s, the host's %s", pki.SPKIFingerprint(jca), fp[1])
	}
	for _, want := range []string{"signed the journal CA of journal j1", fp[1], pki.SerialHex(jca.SerialNumber), "j1.example.org, 127.0.0.1/32", "pact journal retire-intermediate j1", pki.CertFingerprint(root)} {
		if !strings.Contains(stdout, want) {
			t.Errorf("sign-journal output lacks %q:\n%s", want, stdout)
		}
	}

	// 4. The first platform-admin.
	code, stdout, stderr = run("ca", "issue-admin", "--dir", rootDir, "--name", "alice", "--out-dir", adminDir)
	if code != 0 {
		t.Fatalf("issue-admin: %d\n%s%s", code, stdout, stderr)
	}
	for path, want := range map[string]os.FileMode{adminDir: 0o700, filepath.Join(adminDir, "admin.pem"): 0o644, filepath.Join(adminDir, "admin-key.pem"): 0o600} {
		if got := fileMode(t, path); got != want {
			t.Errorf("%s mode %o, want %o", path, got, want)
		}
	}
	admin := readCert(t, filepath.Join(adminDir, "admin.pem"))
	roots := x509.NewCertPool()
	roots.AddCert(root)
	if _, err := admin.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin does not verify to the root: %v", err)
	}
	if admin.Subject.OrganizationalUnit[0] != pki.RolePlatformAdmin || !strings.Contains(stdout, "pact admin renew") {
		t.Errorf("admin %v; output:\n%s", admin.Subject, stdout)
	}
	before, _ := os.ReadFile(filepath.Join(adminDir, "admin-key.pem"))
	if code, _, stderr := run("ca", "issue-admin", "--dir", rootDir, "--name", "alice", "--out-dir", adminDir); code != ExitUsage || !strings.Contains(stderr, "already exists") {
		t.Errorf("issue-admin over existing files: %d %s", code, stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(adminDir, "admin-key.pem")); !bytes.Equal(before, after) {
		t.Error("the admin key was overwritten")
	}

	// 5. Renewal: the same key, a new certificate.
	csr2 := filepath.Join(base, "j1-renew.csr")
	code, stdout, stderr = journalHost("ca-request", "--journal-id", "j1", "--key", hostKey, "--out", csr2)
	if code != 0 || !strings.Contains(stdout, "reused the journal CA key") || !strings.Contains(stdout, fp[1]) {
		t.Fatalf("renewal request: %d\n%s%s", code, stdout, stderr)
	}
	jca2File := filepath.Join(base, "j1-ca-2.pem")
	if code, stdout, stderr := run("ca", "sign-journal", "--dir", rootDir, "--csr", csr2, "--journal-id", "j1", "--names", "j1,j1.example.org,127.0.0.1", "--out", jca2File, "--lifetime", "30d"); code != 0 {
		t.Fatalf("renewal: %d\n%s%s", code, stdout, stderr)
	}
	jca2 := readCert(t, jca2File)
	if pki.SPKIFingerprint(jca2) != fp[1] || jca2.SerialNumber.Cmp(jca.SerialNumber) == 0 || jca2.NotAfter.Sub(now).Round(time.Hour) != 30*24*time.Hour {
		t.Errorf("renewed journal CA: key %s serial %s ends %v", pki.SPKIFingerprint(jca2), pki.SerialHex(jca2.SerialNumber), jca2.NotAfter)
	}

	// 6. show, for people and for scripts.
	code, stdout, _ = run("ca", "show", jcaFile)
	if code != 0 || !strings.Contains(stdout, "journal CA") || !strings.Contains(stdout, fp[1]) || !strings.Contains(stdout, "1 CA below") {
		t.Errorf("show: %d\n%s", code, stdout)
	}
	for _, args := range [][]string{{"ca", "show", jcaFile, "--json"}, {"-o", "json", "ca", "show", jcaFile}} {
		code, stdout, _ = run(args...)
		var v CAShowView
		if err := json.Unmarshal([]byte(stdout), &v); err != nil || code != 0 {
			t.Fatalf("%v: %d %v\n%s", args, code, err, stdout)
		}
		if len(v.Certificates) != 1 || v.Certificates[0].Kind != ceremony.KindJournalCA || v.Certificates[0].JournalID != "j1" || v.Certificates[0].SPKISHA256 != fp[1] || v.Certificates[0].State != "valid" {
			t.Errorf("%v: %+v", args, v)
		}
	}
	code, stdout, _ = run("-o", "json", "ca", "issue-admin", "--dir", rootDir, "--name", "bob", "--role", "viewer", "--out-dir", filepath.Join(base, "bob"))
	var res CAResultView
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != 0 || res.Certificate.Kind != ceremony.KindOperator || res.Certificate.Role != "viewer" || res.SignedBy.Kind != ceremony.KindRoot || res.KeyFile == "" {
		t.Errorf("issue-admin -o json: %d %v %+v", code, err, res)
	}
	if code, stdout, _ := run("ca", "show", csrFile); code != 0 || !strings.Contains(stdout, fp[1]) || !strings.Contains(stdout, "j1.example.org, 127.0.0.1") {
		t.Errorf("show of a request: %d\n%s", code, stdout)
	}
	if code, _, stderr := run("ca", "show", filepath.Join(rootDir, "ca-key.pem")); code != ExitUsage || !strings.Contains(stderr, "holds a private key") {
		t.Errorf("show of the root key: %d %s", code, stderr)
	}

	// Nothing printed, on any stream of any step, holds the root's key
	// (nor the journal CA's, nor the admin's).
	all := strings.Join(outputs, "\n")
	if strings.Contains(all, "PRIVATE KEY") {
		t.Error("an output mentions a PEM private key")
	}
	for _, keyFile := range []string{filepath.Join(rootDir, "ca-key.pem"), filepath.Join(host, "journal-ca-key.pem"), filepath.Join(adminDir, "admin-key.pem")} {
		for _, form := range secretForms(t, keyFile) {
			if strings.Contains(all, form) {
				t.Errorf("an output holds key material of %s: %q", keyFile, form)
			}
		}
	}
}

// Refusals say what to do and write nothing.
func TestCeremonyRefusals(t *testing.T) {
	now := time.Now()
	base := t.TempDir()
	rootDir := filepath.Join(base, "root")
	if code, stdout, stderr := caRun(t, now, "ca", "init", "--dir", rootDir, "--domain", testDomain); code != 0 {
		t.Fatalf("init: %s%s", stdout, stderr)
	}
	req, err := ceremony.NewRequest("j1", keystore.Spec{Backend: keystore.BackendFile, Location: filepath.Join(base, "j1.key")}, keystore.Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	csr := filepath.Join(base, "j1.csr")
	if err := os.WriteFile(csr, req.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(base, "garbage.csr")
	if err := os.WriteFile(garbage, []byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(base, "other")
	if code, _, _ := caRun(t, now, "ca", "init", "--dir", other, "--domain", testDomain); code != 0 {
		t.Fatal("second root")
	}
	// Two roots in one file (a rollover's --root-cert): show tells both.
	bundle := filepath.Join(base, "roots.pem")
	r1, _ := os.ReadFile(filepath.Join(rootDir, "ca.pem"))
	r2, _ := os.ReadFile(filepath.Join(other, "ca.pem"))
	if err := os.WriteFile(bundle, append(r1, r2...), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ := caRun(t, now, "ca", "show", "--json", bundle)
	var shown CAShowView
	if err := json.Unmarshal([]byte(stdout), &shown); err != nil || code != 0 || len(shown.Certificates) != 2 || shown.Certificates[0].Kind != ceremony.KindRoot || shown.Certificates[1].Kind != ceremony.KindRoot ||
		shown.Certificates[0].SHA256Fingerprint == shown.Certificates[1].SHA256Fingerprint {
		t.Errorf("show of two roots: %d %v\n%s", code, err, stdout)
	}

	out := filepath.Join(base, "out.pem")
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"init without flags", []string{"ca", "init"}, ExitUsage, []string{"--dir is required", "--domain is required"}},
		{"init bad domain", []string{"ca", "init", "--dir", filepath.Join(base, "x"), "--domain", "Bad Domain"}, ExitUsage, []string{"--domain"}},
		{"init bad key spec", []string{"ca", "init", "--dir", filepath.Join(base, "y"), "--domain", testDomain, "--key", "pkcs11:token=a?pin-value=1234"}, ExitUsage, []string{"pin-value is not accepted"}},
		{"sign without flags", []string{"ca", "sign-journal"}, ExitUsage, []string{"--dir is required", "--csr is required", "--journal-id is required", "--names is required", "--out is required"}},
		{"sign bad names", []string{"ca", "sign-journal", "--dir", rootDir, "--csr", csr, "--journal-id", "j1", "--names", "j1.example.org:7443,*.example.org,0.0.0.0", "--out", out}, ExitUsage, []string{"has a port", "*.example.org", "0.0.0.0"}},
		{"sign without the journal id", []string{"ca", "sign-journal", "--dir", rootDir, "--csr", csr, "--journal-id", "j1", "--names", "j1.example.org,10.0.0.1", "--out", out}, ExitUsage, []string{"lacks the journal id j1", "--names j1,j1.example.org,10.0.0.1"}},
		{"sign garbage request", []string{"ca", "sign-journal", "--dir", rootDir, "--csr", garbage, "--journal-id", "j1", "--names", "j1.example.org", "--out", out}, ExitUsage, []string{"does not parse"}},
		{"sign with another root's key", []string{"ca", "sign-journal", "--dir", rootDir, "--key", filepath.Join(other, "ca-key.pem"), "--csr", csr, "--journal-id", "j1", "--names", "j1,j1.example.org", "--out", out}, ExitUsage, []string{"is not the key of"}},
		{"sign with no root key", []string{"ca", "sign-journal", "--dir", filepath.Join(base, "none"), "--csr", csr, "--journal-id", "j1", "--names", "j1,j1.example.org", "--out", out}, ExitUsage, []string{"pact ca init"}},
		{"sign over an existing file", []string{"ca", "sign-journal", "--dir", rootDir, "--csr", csr, "--journal-id", "j1", "--names", "j1.example.org", "--out", csr}, ExitUsage, []string{"already exists"}},
		{"admin bad role", []string{"ca", "issue-admin", "--dir", rootDir, "--name", "alice", "--role", "root", "--out-dir", filepath.Join(base, "a")}, ExitUsage, []string{"--role"}},
		{"show nothing", []string{"ca", "show"}, ExitUsage, []string{"takes one FILE"}},
		{"show a non-certificate", []string{"ca", "show", garbage}, ExitUsage, []string{"does not parse"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := caRun(t, now, tt.args...)
			if code != tt.code {
				t.Errorf("code %d, want %d\n%s%s", code, tt.code, stdout, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatalf("%s was written", out)
			}
			for _, d := range []string{"x", "y", "a", "none"} {
				if _, err := os.Stat(filepath.Join(base, d)); err == nil {
					t.Errorf("%s was made", d)
				}
			}
		})
	}
}

// --help teaches the ceremony: what runs where.
func TestCeremonyHelp(t *testing.T) {
	code, stdout, _ := caRun(t, time.Now(), "ca", "--help")
	for _, want := range []string{"offline", "pact ca init", "pact-journal ca-request", "pact ca sign-journal", "pact ca issue-admin", "pact ca show", "docs/ceremony.md", "need no journal"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("pact ca --help lacks %q", want)
		}
	}
	if code != 0 {
		t.Errorf("code %d", code)
	}
	code, stdout, _ = caRun(t, time.Now(), "ca", "sign-journal", "--help")
	if code != 0 {
		t.Errorf("sign-journal --help: code %d", code)
	}
	for _, want := range []string{"SPKI SHA-256", "retire-intermediate", "--names", "Renewal"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("pact ca sign-journal --help lacks %q", want)
		}
	}
	var out, errb bytes.Buffer
	if code := journalmain.Main([]string{"ca-request", "--help"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "renewal") || !strings.Contains(errb.String(), "tpm:") {
		t.Errorf("pact-journal ca-request --help: %d\n%s", code, errb.String())
	}
}
