package measuredboot_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-attestation/attest"

	"github.com/pact-hpc/pact/internal/measuredboot"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// realLogs are event logs captured from real machines that go-attestation
// ships as test data (read from the module cache, not copied here).
func realLogs(t *testing.T) map[string][]byte {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/google/go-attestation").Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot find go-attestation's test data: %v", err)
		}
		t.Skipf("cannot find go-attestation's test data: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "attest", "testdata")
	logs := map[string][]byte{}
	for _, name := range []string{"crypto_agile_eventlog", "ubuntu_2104_shielded_vm_no_secure_boot_eventlog", "coreos_36_shielded_vm_no_secure_boot_eventlog", "option_rom_eventlog", "sb_cert_eventlog"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Skipf("go-attestation's test data: %v", err)
		}
		logs[name] = b
	}
	return logs
}

// Real machines' logs go through the bounded parser and the replay: the
// PCR values their SHA-256 events produce replay, every event comes back,
// a policy captured from them matches, and one changed PCR value does not
// replay. (PCR 0 is left out: a TXT machine's starts at its locality.)
func TestRealEventLogs(t *testing.T) {
	for name, log := range realLogs(t) {
		t.Run(name, func(t *testing.T) {
			el, err := attest.ParseEventLog(log)
			if err != nil {
				t.Fatal(err)
			}
			pcrs := map[int][]byte{}
			n := 0
			for _, e := range el.Events(attest.HashSHA256) {
				if e.Index == 0 || e.Type == 0x03 || len(e.Digest) != 32 {
					continue
				}
				prev, ok := pcrs[e.Index]
				if !ok {
					prev = make([]byte, 32)
				}
				h := sha256.Sum256(append(bytes.Clone(prev), e.Digest...))
				pcrs[e.Index] = h[:]
				n++
			}
			if n == 0 {
				t.Skip("no SHA-256 events")
			}
			ev, err := measuredboot.Evidence(pcrs, log)
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			if len(ev.Events) != n {
				t.Errorf("%d events replayed, want %d", len(ev.Events), n)
			}
			var use []int
			for i := range pcrs {
				use = append(use, i)
			}
			p, err := measuredboot.Capture(ev, measuredboot.CaptureOptions{PCRs: use}, pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE)
			if err != nil {
				t.Fatal(err)
			}
			if d := measuredboot.Evaluate(p, ev); len(d) != 0 {
				t.Errorf("a policy captured from the log does not match it: %q", d)
			}
			for i := range pcrs {
				pcrs[i] = make([]byte, 32)
				break
			}
			if _, err := measuredboot.Evidence(pcrs, log); !errors.Is(err, measuredboot.ErrEventLogInvalid) {
				t.Errorf("a changed PCR replayed: %v", err)
			}
		})
	}
}
