package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A policy's IMA rules go through pact boot-policy set --file and come back
// from show (text and JSON) as written; bad digests are refused with the
// file they belong to, and a rule that would allow any measurement is the
// journal's refusal, nothing set.
func TestBootPolicyIMACommands(t *testing.T) {
	clearEnv(t)
	l := startLiveJournal(t)
	alice := l.alice(t)
	run := func(args ...string) (int, string, string) { return runLive(t, l, alice, runOpts{}, args...) }
	write := func(v BootPolicyView) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "policy.json")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	slurmd := strings.Repeat("ab", 32)
	in := BootPolicyView{Mode: "enforce", Action: "refuse", IMA: &BootPolicyIMAView{
		Files:           []BootPolicyIMAFileView{{Path: "/usr/sbin/slurmd", AllowedDigests: []string{slurmd}}},
		OnlyListed:      true,
		ExcludePrefixes: []string{"/tmp/"},
	}}
	code, stdout, stderr := run("boot-policy", "set", "--file", write(in), "-o", "json")
	var got BootPolicyView
	if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil || got.IMA == nil || !got.IMA.OnlyListed ||
		len(got.IMA.Files) != 1 || got.IMA.Files[0].AllowedDigests[0] != slurmd || got.IMA.ExcludePrefixes[0] != "/tmp/" {
		t.Fatalf("set an IMA policy: exit %d %+v, %v\n%s%s", code, got.IMA, err, stdout, stderr)
	}
	if code, stdout, _ := run("boot-policy", "show"); code != 0 || !strings.Contains(stdout, "ima: only listed files allowed; never checked: /tmp/") ||
		!strings.Contains(stdout, "ima file /usr/sbin/slurmd: "+slurmd) {
		t.Errorf("show: exit %d\n%s", code, stdout)
	}
	bad := in
	bad.IMA = &BootPolicyIMAView{Files: []BootPolicyIMAFileView{{Path: "/usr/sbin/munged", AllowedDigests: []string{"not-hex"}}}}
	if code, _, stderr := run("boot-policy", "set", "--file", write(bad)); code == 0 || !strings.Contains(stderr, "IMA file /usr/sbin/munged") {
		t.Errorf("set with a bad digest: exit %d\n%s", code, stderr)
	}
	anything := in
	anything.IMA = &BootPolicyIMAView{}
	if code, _, stderr := run("boot-policy", "set", "--file", write(anything)); code == 0 || !strings.Contains(stderr, "would allow any measurement") {
		t.Errorf("set IMA rules that allow anything: exit %d\n%s", code, stderr)
	}
	if code, stdout, _ := run("boot-policy", "show", "-o", "json"); code != 0 || !strings.Contains(stdout, `"only_listed": true`) {
		t.Errorf("the refused sets changed the policy:\n%s", stdout)
	}
	// A node registered without a TPM never quotes: capture says so at
	// once instead of asking every journal and suggesting a renewal.
	if code, stdout, stderr := run("node", "enroll", "plain-1", "--mac", "52:54:00:00:09:01", "--bmc-serial", "SN-P1"); code != 0 {
		t.Fatalf("enroll plain-1: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := run("boot-policy", "capture", "--from-node", "plain-1", "--ima"); code == 0 || !strings.Contains(stderr, "registered without a TPM EK hash") {
		t.Errorf("capture from a node without a TPM: exit %d\n%s", code, stderr)
	}
}
