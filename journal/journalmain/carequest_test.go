package journalmain

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/ceremony"
	"github.com/pact-hpc/pact/internal/swtpmtest"
)

func caRequest(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"ca-request"}, args...), envOf(nil), &out, &errb)
	if strings.Contains(out.String()+errb.String(), "PRIVATE KEY") {
		t.Errorf("output mentions a private key:\n%s%s", out.String(), errb.String())
	}
	return code, out.String(), errb.String()
}

var spkiLine = regexp.MustCompile(`SPKI SHA-256 ([0-9a-f]{64})`)

// checkRequest reads the request written and checks it carries the key
// whose fingerprint the output printed.
func checkRequest(t *testing.T, path, stdout string) string {
	t.Helper()
	m := spkiLine.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no SPKI SHA-256 in:\n%s", stdout)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ceremony.ParseCSR(data)
	if err != nil {
		t.Fatal(err)
	}
	if csr.Fingerprint() != m[1] || csr.JournalID != "j1" {
		t.Errorf("request key %s journal %q; printed %s", csr.Fingerprint(), csr.JournalID, m[1])
	}
	return m[1]
}

func TestCARequestFile(t *testing.T) {
	dir := t.TempDir()
	key := "file:" + filepath.Join(dir, "journal-ca-key.pem")
	first := filepath.Join(dir, "j1.csr")
	code, stdout, stderr := caRequest(t, "--journal-id", "j1", "--key", key, "--names", "j1.site.example,10.0.0.1", "--out", first)
	if code != 0 || !strings.Contains(stdout, "made the journal CA key") || !strings.Contains(stdout, "pact ca sign-journal") {
		t.Fatalf("%d\n%s%s", code, stdout, stderr)
	}
	fp := checkRequest(t, first, stdout)
	st, err := os.Stat(filepath.Join(dir, "journal-ca-key.pem"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	// Renewal: the same key.
	second := filepath.Join(dir, "j1-renew.csr")
	code, stdout, stderr = caRequest(t, "--journal-id", "j1", "--key", key, "--out", second)
	if code != 0 || !strings.Contains(stdout, "reused the journal CA key") || checkRequest(t, second, stdout) != fp {
		t.Fatalf("renewal: %d\n%s%s", code, stdout, stderr)
	}
}

func TestCARequestRefuses(t *testing.T) {
	dir := t.TempDir()
	exists := filepath.Join(dir, "exists.csr")
	if err := os.WriteFile(exists, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	loose := filepath.Join(dir, "loose.pem")
	if err := os.WriteFile(loose, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"nothing", nil, 2, []string{"--journal-id is required", "--key is required", "--out is required"}},
		{"bad id and names", []string{"--journal-id", "j 1", "--key", "file:" + filepath.Join(dir, "k"), "--names", "j1:7443,*.x", "--out", filepath.Join(dir, "a.csr")}, 2, []string{"--journal-id", "has a port", "*.x"}},
		{"pin in the URI", []string{"--journal-id", "j1", "--key", "pkcs11:token=t?pin-value=1", "--out", filepath.Join(dir, "b.csr")}, 2, []string{"pin-value is not accepted"}},
		{"out exists", []string{"--journal-id", "j1", "--key", "file:" + filepath.Join(dir, "k"), "--out", exists}, 2, []string{"already exists"}},
		{"key readable by others", []string{"--journal-id", "j1", "--key", "file:" + loose, "--out", filepath.Join(dir, "c.csr")}, 1, []string{"chmod 600"}},
		{"stray argument", []string{"--journal-id", "j1", "extra"}, 2, []string{"unexpected argument"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := caRequest(t, tt.args...)
			if code != tt.code {
				t.Errorf("code %d, want %d\n%s%s", code, tt.code, stdout, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
	for _, f := range []string{"k", "a.csr", "b.csr", "c.csr"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s was written", f)
		}
	}
}

// The key in a software TPM: made, then reused.
func TestCARequestTPM(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "journal-ca.tpmkey")
	tpm := swtpmtest.Start(t)
	first := filepath.Join(dir, "j1.csr")
	code, stdout, stderr := caRequest(t, "--journal-id", "j1", "--key", "tpm:"+keyFile, "--tpm-device", tpm.Device, "--out", first)
	if code != 0 || !strings.Contains(stdout, "made the journal CA key") {
		t.Fatalf("%d\n%s%s", code, stdout, stderr)
	}
	fp := checkRequest(t, first, stdout)
	second := filepath.Join(dir, "j1-renew.csr")
	code, stdout, stderr = caRequest(t, "--journal-id", "j1", "--key", "tpm:"+keyFile, "--tpm-device", tpm.Device, "--out", second)
	if code != 0 || !strings.Contains(stdout, "reused") || checkRequest(t, second, stdout) != fp {
		t.Fatalf("renewal: %d\n%s%s", code, stdout, stderr)
	}
}
