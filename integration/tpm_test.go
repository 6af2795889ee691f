package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/swtpmtest"
)

// TestEndToEndTPM runs docs/tpm.md as a user does, with the three real
// binaries and two software TPMs (swtpm processes): read the EK hash with
// pact-agent tpm-ek, register it with pact node enroll, and the agent with
// that TPM enrolls; on another machine's TPM it is refused and exits 5.
func TestEndToEndTPM(t *testing.T) {
	node, other := swtpmtest.Start(t), swtpmtest.Start(t)
	j := startJournal(t, t.TempDir(), "127.0.0.1:0")

	out, err := exec.Command(filepath.Join(binDir, "pact-agent"), "tpm-ek", "--tpm-device", node.Device).CombinedOutput()
	if err != nil {
		t.Fatalf("pact-agent tpm-ek: %v\n%s", err, out)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	hash, ok := strings.CutPrefix(first, "tpm_ek_hash: ")
	if !ok || len(hash) != 64 || !strings.Contains(string(out), "BEGIN PUBLIC KEY") {
		t.Fatalf("pact-agent tpm-ek printed:\n%s", out)
	}
	if o, code := j.pact(t, "node", "enroll", "node-tpm", "--mac", "52:54:00:00:0a:01", "--bmc-serial", "SN-TPM", "--tpm-ek-hash", hash); code != 0 {
		t.Fatalf("pact node enroll: exit %d\n%s", code, o)
	}

	t.Run("another machine's TPM is refused", func(t *testing.T) {
		p := start(t, nil, "pact-agent", "--journal", j.addr, "--ca", filepath.Join(j.dir, "ca.pem"),
			"--mac", "52:54:00:00:0a:01", "--bmc-serial", "SN-TPM", "--tpm-device", other.Device, "--status-socket", "")
		if code := p.wait(t); code != 5 {
			t.Errorf("exit %d, want 5", code)
		}
		if out := p.output(); !strings.Contains(out, "TPM_EK_MISMATCH") || !strings.Contains(out, "pact-agent tpm-ek") {
			t.Errorf("output does not name TPM_EK_MISMATCH and what to do:\n%s", out)
		}
		if n := j.inspect(t, "node-tpm"); n.State != "registered" {
			t.Errorf("node-tpm is %s after the refusal", n.State)
		}
	})
	t.Run("no TPM is refused", func(t *testing.T) {
		p := start(t, nil, "pact-agent", "--journal", j.addr, "--ca", filepath.Join(j.dir, "ca.pem"),
			"--mac", "52:54:00:00:0a:01", "--bmc-serial", "SN-TPM", "--tpm-device", filepath.Join(t.TempDir(), "tpmrm0"), "--tpm-ek-hash", hash, "--status-socket", "")
		if code := p.wait(t); code != 5 {
			t.Errorf("exit %d, want 5", code)
		}
		if out := p.output(); !strings.Contains(out, "TPM_REQUIRED") {
			t.Errorf("output does not name TPM_REQUIRED:\n%s", out)
		}
	})

	a := start(t, nil, "pact-agent", "--journal", j.addr, "--ca", filepath.Join(j.dir, "ca.pem"),
		"--mac", "52:54:00:00:0a:01", "--bmc-serial", "SN-TPM", "--tpm-device", node.Device, "--status-socket", "")
	m := a.waitLine(t, enrolledRE)
	a.waitLine(t, streamOpenRE)
	if n := j.inspect(t, "node-tpm"); n.State != "active" || n.CertSerial != m[1] {
		t.Fatalf("after the agent with its TPM: %+v", n)
	}
	if log := j.proc.output(); !strings.Contains(log, "TPM credential activation proved") {
		t.Errorf("the journal did not log the proof")
	}
}
