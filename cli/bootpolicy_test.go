package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/pki"
)

// pact boot-policy set, list, show, capture and remove against a real
// journal: JSON in and out, versions, the refusals an operator meets.
func TestBootPolicyCommands(t *testing.T) {
	clearEnv(t)
	l := startLiveJournal(t)
	alice := l.alice(t)
	run := func(args ...string) (int, string, string) { return runLive(t, l, alice, runOpts{}, args...) }

	if code, stdout, stderr := run("boot-policy", "list"); code != 0 || !strings.Contains(stdout, "no boot policy") {
		t.Fatalf("list (none): exit %d\n%s%s", code, stdout, stderr)
	}
	zero := strings.Repeat("00", 32)
	file := filepath.Join(t.TempDir(), "policy.json")
	in := BootPolicyView{Mode: "observe", Action: "refuse",
		PCRs:   []BootPolicyPCRView{{Index: 7, Allowed: []string{zero}}},
		Events: []BootPolicyEventRow{{Name: "kernel", PCR: 9, EventType: 0xd, AllowedDigests: []string{zero}}}}
	b, _ := json.Marshal(in)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run("boot-policy", "set", "--file", file, "-o", "json")
	if code != 0 {
		t.Fatalf("set: exit %d\n%s%s", code, stdout, stderr)
	}
	var got BootPolicyView
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || got.Version != 1 || got.Mode != "observe" || got.SetBy == "" || got.SetAt == nil || len(got.Events) != 1 || got.Events[0].AllowedDigests[0] != zero {
		t.Fatalf("set -o json: %+v, %v\n%s", got, err, stdout)
	}
	code, stdout, stderr = run("boot-policy", "set", "--file", file, "--mode", "enforce", "--action", "fence", "--expect-version", "1")
	if code != 0 || !strings.Contains(stdout, "version 2 (enforce, action fence)") {
		t.Fatalf("set enforce: exit %d\n%s%s", code, stdout, stderr)
	}
	// A stale read is refused.
	if code, _, stderr := run("boot-policy", "set", "--file", file, "--expect-version", "1"); code == 0 || !strings.Contains(stderr, "version 2, not 1") {
		t.Errorf("set with a stale version: exit %d\n%s", code, stderr)
	}
	// Bad flags and a bad file are reported together.
	if code, _, stderr := run("boot-policy", "set", "--file", file, "--mode", "maybe", "--action", "explode"); code == 0 || !strings.Contains(stderr, "mode \"maybe\"") || !strings.Contains(stderr, "action \"explode\"") {
		t.Errorf("set with bad flags: exit %d\n%s", code, stderr)
	}
	// Two images' policies set as one: each allows its own kernel, the
	// merged policy both (a rollout).
	one := strings.Repeat("11", 32)
	second := filepath.Join(t.TempDir(), "image-2.json")
	in2 := in
	in2.Events = []BootPolicyEventRow{{Name: "kernel", PCR: 9, EventType: 0xd, AllowedDigests: []string{one}}}
	b2, _ := json.Marshal(in2)
	if err := os.WriteFile(second, b2, 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = run("boot-policy", "set", "--file", file, "--file", second, "--mode", "enforce", "--action", "fence", "-o", "json")
	var merged BootPolicyView
	if err := json.Unmarshal([]byte(stdout), &merged); code != 0 || err != nil || merged.Version != 3 || len(merged.Events) != 1 ||
		strings.Join(merged.Events[0].AllowedDigests, ",") != zero+","+one {
		t.Fatalf("set of two files: exit %d %+v, %v\n%s%s", code, merged, err, stdout, stderr)
	}
	if code, _, stderr := run("boot-policy", "set", "--file", file, "--file", filepath.Join(t.TempDir(), "missing.json")); code == 0 || !strings.Contains(stderr, "missing.json") {
		t.Errorf("set with a missing second file: exit %d\n%s", code, stderr)
	}
	var list []BootPolicyView
	code, stdout, _ = run("boot-policy", "list", "-o", "json")
	if err := json.Unmarshal([]byte(stdout), &list); code != 0 || err != nil || len(list) != 1 || list[0].Version != 3 || list[0].Action != "fence" {
		t.Fatalf("list -o json: %v %+v\n%s", err, list, stdout)
	}
	if code, stdout, _ := run("boot-policy", "show"); code != 0 || !strings.Contains(stdout, "event kernel (pcr 9, type 0xd): "+zero) {
		t.Errorf("show: exit %d\n%s", code, stdout)
	}
	// Attestation between renewals: set, shown, listed, kept in JSON.
	code, stdout, stderr = run("boot-policy", "set", "--file", file, "--attest-interval", "1h", "--attest-tolerance", "2", "-o", "json")
	var attesting BootPolicyView
	if err := json.Unmarshal([]byte(stdout), &attesting); code != 0 || err != nil || attesting.AttestInterval != "1h0m0s" || attesting.AttestTolerance != 2 {
		t.Fatalf("set --attest-interval: exit %d %+v, %v\n%s%s", code, attesting, err, stdout, stderr)
	}
	if code, stdout, _ := run("boot-policy", "show"); code != 0 || !strings.Contains(stdout, "attest between renewals: every 1h0m0s (tolerance 2)") {
		t.Errorf("show of an attesting policy: exit %d\n%s", code, stdout)
	}
	if code, stdout, _ := run("boot-policy", "list"); code != 0 || !strings.Contains(stdout, "ATTEST") || !strings.Contains(stdout, "1h0m0s") {
		t.Errorf("list of an attesting policy: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := run("boot-policy", "set", "--file", file, "--attest-interval", "soon"); code == 0 || !strings.Contains(stderr, "attest interval \"soon\"") {
		t.Errorf("set --attest-interval soon: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := run("boot-policy", "set", "--file", file, "--attest-interval", "10s"); code == 0 || !strings.Contains(stderr, "60s to 720h") {
		t.Errorf("set --attest-interval 10s: exit %d\n%s", code, stderr)
	}
	if code, stdout, stderr := run("boot-policy", "set", "--file", file, "--attest-interval", "0", "-o", "json"); code != 0 || strings.Contains(stdout, "attest_interval") {
		t.Errorf("set --attest-interval 0 (off): exit %d\n%s%s", code, stdout, stderr)
	}
	// A viewer lists and may not set.
	viewer := l.operator(t, "vera", pki.RoleViewer)
	if code, _, _ := runLive(t, l, viewer, runOpts{}, "boot-policy", "list"); code != 0 {
		t.Errorf("viewer list: exit %d", code)
	}
	if code, _, stderr := runLive(t, l, viewer, runOpts{}, "boot-policy", "set", "--file", file); code == 0 || !strings.Contains(stderr, "platform-admin") {
		t.Errorf("viewer set: exit %d\n%s", code, stderr)
	}
	// Capture needs a node whose quote the journal verified.
	if code, _, stderr := run("boot-policy", "capture", "--from-node", "n1"); code == 0 || !strings.Contains(stderr, "no journal of the quorum holds a verified TPM quote") {
		t.Errorf("capture without a quote: exit %d\n%s", code, stderr)
	}
	if code, stdout, stderr := run("boot-policy", "remove"); code != 0 || !strings.Contains(stdout, "removed (was version 5)") {
		t.Fatalf("remove: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := run("boot-policy", "remove"); code == 0 || !strings.Contains(stderr, "pact boot-policy list") {
		t.Errorf("remove again: exit %d\n%s", code, stderr)
	}
}
