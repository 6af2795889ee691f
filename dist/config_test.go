package dist

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/swtpmtest"
)

// The journal.yaml the packages ship is the production layout
// (docs/quorum.md, "Forming a quorum on real hosts"): the root
// certificate and a journal CA, never the root key. Followed as its
// comment says, with its /etc/pact and /var/lib paths moved under a
// temporary directory: before the root is installed --check-config
// refuses it and says how a production root is made (never --dev); with
// the root but no journal CA it names the missing journal CA; once the
// ceremony's journal CA is installed, the file checks out. The key is in
// a software TPM, as the file says (tpm:), when swtpm is installed, and
// in a file (PACT_JOURNAL_CA_KEY, the file's other choice) otherwise.
func TestShippedJournalConfig(t *testing.T) {
	shipped, err := os.ReadFile("config/journal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, l := range strings.Split(string(shipped), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok && !strings.HasPrefix(k, "#") && !strings.HasPrefix(k, " ") {
			settings[k] = v
		}
	}
	for k, want := range map[string]string{
		"root-cert":       "/etc/pact/ca.pem",
		"journal-ca-cert": "/etc/pact/journal-ca.pem",
		"journal-ca-key":  "tpm:/etc/pact/journal-ca.tpmkey",
	} {
		if settings[k] != want {
			t.Errorf("journal.yaml: %s: %q, want %q", k, settings[k], want)
		}
	}
	if strings.Contains(string(shipped), "root-key") || strings.Contains(string(shipped), "/ca-key.pem") {
		t.Error("journal.yaml names the root key: the production layout keeps it off the journal hosts")
	}

	tmp := t.TempDir()
	etc, data := filepath.Join(tmp, "etc/pact"), filepath.Join(tmp, "var/lib/pact-journal")
	yaml := strings.NewReplacer("/etc/pact/", etc+"/", "/var/lib/pact-journal", data).Replace(string(shipped))
	path := filepath.Join(tmp, "journal.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PACT_LOG_FORMAT=text"}
	if _, err := exec.LookPath("swtpm"); err == nil {
		env = append(env, "PACT_TPM_DEVICE="+swtpmtest.Start(t).Device)
	} else {
		t.Logf("swtpm is not installed: the journal CA key in a file instead")
		env = append(env, "PACT_JOURNAL_CA_KEY=file:"+filepath.Join(etc, "journal-ca-key.pem"))
	}
	run := func(bin string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, bin), args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Dir = tmp
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	check := func(what string, wantCode int, want ...string) {
		t.Helper()
		out, code := run("pact-journal", "--config", path, "--check-config")
		if code != wantCode {
			t.Errorf("%s: --check-config exit %d, want %d\n%s", what, code, wantCode, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: --check-config does not say %q:\n%s", what, w, out)
			}
		}
		if strings.Contains(out, "--dev") {
			t.Errorf("%s: a production journal is told about --dev:\n%s", what, out)
		}
	}
	check("nothing installed", 2, "root certificate "+etc+"/ca.pem does not exist", "pact ca init", "pact-journal ca-request", "pact ca sign-journal", "docs/ceremony.md")
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("--check-config created %s", data)
	}

	// The ceremony machine.
	rootDir := filepath.Join(tmp, "root-ca")
	if out, code := run("pact", "ca", "init", "--dir", rootDir, "--domain", "site.example"); code != 0 {
		t.Fatalf("pact ca init: exit %d\n%s", code, out)
	}
	// This host, as the file's comment says.
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(rootDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "ca.pem"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	check("the root installed, no journal CA", 2, "journal CA certificate "+etc+"/journal-ca.pem does not exist")

	key := strings.Replace(settings["journal-ca-key"], "/etc/pact/", etc+"/", 1)
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PACT_JOURNAL_CA_KEY="); ok {
			key = v
		}
	}
	names := "localhost,127.0.0.1,::1,j1,j1.example.org,10.0.0.1"
	if !strings.Contains(string(shipped), "--names "+names+" ") {
		t.Errorf("journal.yaml's comment no longer asks for --names %s", names)
	}
	if out, code := run("pact-journal", "ca-request", "--journal-id", "j1", "--key", key, "--names", names, "--out", "j1.csr"); code != 0 {
		t.Fatalf("pact-journal ca-request: exit %d\n%s", code, out)
	}
	// A journal CA that leaves out the file's listen address is refused.
	if out, code := run("pact", "ca", "sign-journal", "--dir", rootDir, "--csr", "j1.csr", "--journal-id", "j1", "--names", "j1,j1.example.org,localhost,127.0.0.1", "--out", "narrow.pem"); code != 0 {
		t.Fatalf("pact ca sign-journal: exit %d\n%s", code, out)
	}
	if out, code := run("pact", "ca", "sign-journal", "--dir", rootDir, "--csr", "j1.csr", "--journal-id", "j1", "--names", names, "--out", "j1-ca.pem"); code != 0 {
		t.Fatalf("pact ca sign-journal: exit %d\n%s", code, out)
	}
	install := func(from string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(tmp, from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(etc, "journal-ca.pem"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	install("narrow.pem")
	check("a journal CA without the listen address", 2, "10.0.0.1", "which its journal CA does not permit")
	install("j1-ca.pem")
	check("the journal CA installed", 0, "the settings are valid")
}
