package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// realJournal runs a real single journal (Raft, TLS, gRPC on loopback) and
// returns the environment pointing pact at it with the bootstrap admin.
func realJournal(t *testing.T) (*journaltest.Harness, map[string]string) {
	t.Helper()
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	return h, map[string]string{
		EnvJournal: h.Addr,
		EnvCA:      filepath.Join(h.Dir, ca.RootCertFile),
		EnvCert:    filepath.Join(h.Dir, ca.AdminCertFile),
		EnvKey:     filepath.Join(h.Dir, ca.AdminKeyFile),
	}
}

// pact runs the CLI with env (overridden by extra) and returns exit code,
// stdout and stderr.
func pact(t *testing.T, env map[string]string, extra map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, Env{
		Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string {
			if v, ok := extra[k]; ok {
				return v
			}
			return env[k]
		},
	})
	return code, out.String(), errb.String()
}

func TestAdminCommandsAgainstAJournal(t *testing.T) {
	_, env := realJournal(t)
	dir := t.TempDir()
	aliceCert, aliceKey := filepath.Join(dir, "alice.pem"), filepath.Join(dir, "alice-key.pem")
	code, out, errs := pact(t, env, nil, "admin", "issue", "alice", "--role", "viewer", "--cert-out", aliceCert, "--key-out", aliceKey)
	if code != ExitOK || !strings.Contains(out, "issued viewer credential for alice") {
		t.Fatalf("issue: exit %d\n%s%s", code, out, errs)
	}
	if st, err := os.Stat(aliceKey); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	// Never overwrites.
	if code, _, errs := pact(t, env, nil, "admin", "issue", "alice", "--role", "viewer", "--cert-out", aliceCert, "--key-out", aliceKey); code != ExitUsage || !strings.Contains(errs, "already exists") {
		t.Errorf("issue over existing files: exit %d, %s", code, errs)
	}
	alice := map[string]string{EnvCert: aliceCert, EnvKey: aliceKey}

	code, out, _ = pact(t, env, nil, "admin", "list", "-o", "json")
	var list OperatorsView
	if code != ExitOK || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("list: exit %d: %s", code, out)
	}
	names := map[string]OperatorView{}
	for _, o := range list.Operators {
		names[o.Name] = o
	}
	if names["admin"].IssuedBy != "journal/j1" || names["alice"].Role != "viewer" || names["alice"].IssuedBy != "admin/admin" || names["alice"].State != "valid" {
		t.Errorf("list = %+v", list)
	}

	// alice renews her own credential in place; she may not issue others'.
	before, _ := os.ReadFile(aliceCert)
	if code, out, errs := pact(t, env, alice, "admin", "renew"); code != ExitOK {
		t.Fatalf("renew: exit %d\n%s%s", code, out, errs)
	}
	if after, _ := os.ReadFile(aliceCert); bytes.Equal(before, after) {
		t.Error("renew did not replace the certificate file")
	}
	if code, _, errs := pact(t, env, alice, "node", "list"); code != ExitOK {
		t.Errorf("alice with her renewed credential: exit %d: %s", code, errs)
	}
	if code, _, errs := pact(t, env, alice, "admin", "issue", "bob", "--role", "viewer", "--cert-out", filepath.Join(dir, "b.pem"), "--key-out", filepath.Join(dir, "b-key.pem")); code != ExitDenied {
		t.Errorf("a viewer issuing for bob: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "b-key.pem")); err == nil {
		t.Error("a refused issue wrote a key file")
	}

	// Revoked: her next call is refused, exit 5, saying why.
	if code, out, errs := pact(t, env, nil, "admin", "revoke", "alice"); code != ExitOK || !strings.Contains(out, "revoked every credential of alice") {
		t.Fatalf("revoke: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := pact(t, env, alice, "node", "list"); code != ExitDenied || !strings.Contains(errs, "was revoked") {
		t.Errorf("alice after revocation: exit %d: %s", code, errs)
	}
	if code, _, errs := pact(t, env, nil, "admin", "revoke", "00112233445566778899aabbccddeeff"); code != ExitNotFound {
		t.Errorf("revoke an unknown serial: exit %d: %s", code, errs)
	}
}

func TestIntermediateCommandsAgainstAJournal(t *testing.T) {
	_, env := realJournal(t)
	code, out, errs := pact(t, env, nil, "journal", "intermediates", "-o", "json")
	var ins []IntermediateView
	if code != ExitOK || json.Unmarshal([]byte(out), &ins) != nil || len(ins) != 1 || ins[0].JournalID != "j1" || ins[0].State != "active" {
		t.Fatalf("intermediates: exit %d %s %s", code, out, errs)
	}
	if code, _, errs := pact(t, env, nil, "journal", "retire-intermediate", "nope"); code != ExitNotFound {
		t.Errorf("retire an unknown intermediate: exit %d: %s", code, errs)
	}
	if code, _, errs := pact(t, env, nil, "journal", "retire-intermediate", "j1", "--now", "--grace", "1h"); code != ExitUsage {
		t.Errorf("--now with --grace: exit %d: %s", code, errs)
	}
	if code, _, errs := pact(t, env, nil, "journal", "remove", "j1", "--grace", "5m"); code != ExitUsage || !strings.Contains(errs, "--revoke-intermediate") {
		t.Errorf("--grace without --revoke-intermediate: exit %d: %s", code, errs)
	}
	if code, out, errs := pact(t, env, nil, "journal", "retire-intermediate", ins[0].Serial, "--grace", "1h", "--reason", "drill"); code != ExitOK || !strings.Contains(out, ins[0].Serial) {
		t.Fatalf("retire: exit %d\n%s%s", code, out, errs)
	}
	_, out, _ = pact(t, env, nil, "journal", "intermediates")
	if !strings.Contains(out, "retiring") || !strings.Contains(out, "drill") {
		t.Errorf("after retiring:\n%s", out)
	}
}

// An operator credential from another domain's root fails the TLS
// handshake: the CLI says so, and exits 7 (no journal served the call).
func TestForeignCredentialFailsTheHandshake(t *testing.T) {
	_, env := realJournal(t)
	other, _ := realJournal(t)
	foreign := map[string]string{
		EnvCert: filepath.Join(other.Dir, ca.AdminCertFile),
		EnvKey:  filepath.Join(other.Dir, ca.AdminKeyFile),
	}
	code, _, errs := pact(t, env, foreign, "node", "list")
	if code != ExitUnavailable || !strings.Contains(errs, "bad certificate") {
		t.Errorf("exit %d, stderr %q; want 7 and the handshake's bad certificate", code, errs)
	}
}
