package cli_test

// pact node token / fence / unfence and --require-token against a real
// journal (journaltest: Raft on bbolt, TLS and gRPC on loopback), run
// through cli.Run as an operator would.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/cli"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

type realJournal struct {
	h     *journaltest.Harness
	flags []string
}

func startRealJournal(t *testing.T) *realJournal {
	t.Helper()
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	return &realJournal{h: h, flags: []string{"--journal", h.Addr,
		"--ca", filepath.Join(h.Dir, ca.RootCertFile),
		"--cert", filepath.Join(h.Dir, ca.AdminCertFile),
		"--key", filepath.Join(h.Dir, ca.AdminKeyFile)}}
}

func (r *realJournal) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Run(context.Background(), append(append([]string{}, r.flags...), args...), cli.Env{Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

func TestTokenCommands(t *testing.T) {
	r := startRealJournal(t)
	if code, _, stderr := r.run(t, "node", "enroll", "n1", "--mac", "52:54:00:00:00:01", "--require-token"); code != cli.ExitOK {
		t.Fatalf("enroll --require-token: %d %s", code, stderr)
	}
	code, stdout, stderr := r.run(t, "node", "inspect", "n1", "-o", "json")
	var v cli.NodeView
	if err := json.Unmarshal([]byte(stdout), &v); code != cli.ExitOK || err != nil || !v.RequireJoinToken {
		t.Fatalf("inspect: %d %v %s %s", code, err, stdout, stderr)
	}

	// Printed once, alone on stdout; the description on stderr.
	code, stdout, stderr = r.run(t, "node", "token", "create", "n1", "--ttl", "30m")
	tok := strings.TrimSpace(stdout)
	if code != cli.ExitOK || !strings.HasPrefix(tok, "pactjt_") || len(tok) != 50 || !strings.Contains(stderr, "shown only now") {
		t.Fatalf("token create: %d %q %q", code, stdout, stderr)
	}
	// -o json never prints a token: without --out it is a usage error.
	if code, stdout, stderr := r.run(t, "node", "token", "create", "n1", "-o", "json"); code != cli.ExitUsage || stdout != "" || !strings.Contains(stderr, "--out") {
		t.Errorf("token create -o json without --out: %d %q %q", code, stdout, stderr)
	}
	file := filepath.Join(t.TempDir(), "n1.token")
	code, stdout, stderr = r.run(t, "node", "token", "create", "n1", "--out", file, "-o", "json")
	var created cli.JoinTokenView
	if err := json.Unmarshal([]byte(stdout), &created); code != cli.ExitOK || err != nil || created.NodeID != "n1" || created.State != "unused" {
		t.Fatalf("token create --out -o json: %d %v %q %q", code, err, stdout, stderr)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	written, _ := os.ReadFile(file)
	if strings.Contains(stdout, strings.TrimSpace(string(written))) {
		t.Error("-o json printed the token")
	}
	if code, _, stderr := r.run(t, "node", "token", "create", "n1", "--out", file); code != cli.ExitUsage || !strings.Contains(stderr, "never overwritten") {
		t.Errorf("--out onto an existing file: %d %s", code, stderr)
	}

	code, stdout, _ = r.run(t, "node", "token", "list", "n1", "-o", "json")
	var list []cli.JoinTokenView
	if err := json.Unmarshal([]byte(stdout), &list); code != cli.ExitOK || err != nil || len(list) != 2 {
		t.Fatalf("token list: %d %v %s", code, err, stdout)
	}
	for _, secret := range []string{tok, strings.TrimSpace(string(written))} {
		if strings.Contains(stdout, strings.TrimPrefix(secret, "pactjt_")[:16]) {
			t.Error("token list shows a token")
		}
	}

	// The node enrolls with the first token.
	key := journaltest.NewKey(t)
	if _, err := pactv1.NewEnrollmentServiceClient(r.h.Dial(t, nil)).Enroll(context.Background(), &pactv1.EnrollRequest{
		Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:01"}}, CsrDer: key.CSR,
		Credentials: &pactv1.EnrollCredentials{JoinToken: tok},
	}); err != nil {
		t.Fatalf("enroll with the token: %v", err)
	}
	code, stdout, _ = r.run(t, "node", "token", "list")
	if code != cli.ExitOK || !strings.Contains(stdout, "used") || !strings.Contains(stdout, created.ID) {
		t.Errorf("token list after use:\n%s", stdout)
	}
	// Revoke leaves the used one; a second revoke finds nothing (exit 3).
	code, stdout, _ = r.run(t, "node", "token", "revoke", "n1")
	if code != cli.ExitOK || strings.TrimSpace(stdout) != "revoked join token "+created.ID+" of n1" {
		t.Errorf("token revoke: %d %q", code, stdout)
	}
	if code, _, stderr := r.run(t, "node", "token", "revoke", "n1"); code != cli.ExitNotFound || !strings.Contains(stderr, "nothing to revoke") {
		t.Errorf("second revoke: %d %s", code, stderr)
	}
	if code, _, _ := r.run(t, "node", "token", "create", "nobody"); code != cli.ExitNotFound {
		t.Errorf("token for an unknown node: exit %d, want %d", code, cli.ExitNotFound)
	}
}

func TestFenceCommands(t *testing.T) {
	r := startRealJournal(t)
	r.h.Register(t, "n1", "SN1", "52:54:00:00:00:01")
	if _, err := r.h.Enroll(t, journaltest.NewKey(t), "SN1", "52:54:00:00:00:01"); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := r.run(t, "node", "fence", "n1"); code != cli.ExitUsage || !strings.Contains(stderr, "--reason is required") {
		t.Errorf("fence without --reason: %d %s", code, stderr)
	}
	code, stdout, stderr := r.run(t, "node", "fence", "n1", "--reason", "INC-9 odd traffic")
	if code != cli.ExitOK || !strings.Contains(stdout, "fenced n1 (certificate") || !strings.Contains(stdout, "pact node unfence n1") {
		t.Fatalf("fence: %d %q %q", code, stdout, stderr)
	}
	code, stdout, _ = r.run(t, "node", "inspect", "n1", "-o", "json")
	var v cli.NodeView
	if err := json.Unmarshal([]byte(stdout), &v); code != cli.ExitOK || err != nil || !v.Fenced || v.FenceReason != "INC-9 odd traffic" || v.FencedBy != "admin/admin" || v.State != "inactive" {
		t.Fatalf("inspect fenced: %d %v %s", code, err, stdout)
	}
	if code, stdout, _ := r.run(t, "node", "list"); code != cli.ExitOK || !strings.Contains(stdout, "inactive,fenced") {
		t.Errorf("list does not show the fence:\n%s", stdout)
	}
	if code, stdout, _ := r.run(t, "audit", "--node", "n1"); code != cli.ExitOK || !strings.Contains(stdout, "reason: INC-9 odd traffic") {
		t.Errorf("audit does not show the reason:\n%s", stdout)
	}
	if code, _, _ := r.run(t, "node", "fence", "nobody", "--reason", "x"); code != cli.ExitNotFound {
		t.Errorf("fence of an unknown node: exit %d", code)
	}
	if code, stdout, _ := r.run(t, "node", "unfence", "n1"); code != cli.ExitOK || !strings.Contains(stdout, "unfenced n1") {
		t.Errorf("unfence: %d %q", code, stdout)
	}
	if _, err := r.h.Enroll(t, journaltest.NewKey(t), "SN1", "52:54:00:00:00:01"); err != nil {
		t.Errorf("enroll after unfence: %v", err)
	}
}
