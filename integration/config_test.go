package integration

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/integration/launch"
)

// pact-journal --config runs a journal whose every setting comes from the
// file, with the environment over the file: the file asks for JSON logs,
// PACT_LOG_FORMAT=text wins, and the journal serves (and its metrics
// answer) on the addresses the file gives.
func TestJournalConfigFile(t *testing.T) {
	dir := t.TempDir()
	lb, err := launch.NewLoopback(1, "the integration tests run on loopback")
	if err != nil {
		t.Fatal(err)
	}
	pq, err := launch.NewProcQuorum(launch.ProcConfig{Bin: binDir, Dir: dir, N: 1, Net: lb, Env: []string{"PACT_LOG_FORMAT=text"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- journal output:\n%s", pq.Log(0))
		}
		_ = pq.Close()
	})
	// The launcher's flags, written as the file's settings.
	args := pq.Args(0)
	var yaml strings.Builder
	yaml.WriteString("# written by TestJournalConfigFile\nlog-format: json\n")
	for i := 0; i+1 < len(args); i += 2 {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			t.Fatalf("launcher argument %q is not a flag with a value", args[i])
		}
		fmt.Fprintf(&yaml, "%s: %q\n", name, args[i+1])
	}
	path := filepath.Join(dir, "journal.yaml")
	if err := os.WriteFile(path, []byte(yaml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	pq.SetArgs(0, []string{"--config", path})
	if err := pq.Start(0); err != nil {
		t.Fatal(err)
	}
	// WaitServing reads text logs: it finds the line only if the variable
	// won over the file's log-format.
	if err := pq.WaitServing(0, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if log := pq.CurrentLog(0); !strings.Contains(log, "addr="+pq.GRPC(0)) {
		t.Errorf("the journal does not serve on the file's listen address %s:\n%s", pq.GRPC(0), launch.Tail(log, 10))
	}
	resp, err := http.Get("http://" + pq.Metrics(0) + "/metrics")
	if err != nil {
		t.Fatalf("metrics-listen from the file: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "pact_journal_") {
		t.Errorf("GET /metrics on the file's metrics-listen: %s\n%.300s", resp.Status, body)
	}
}

// A bad configuration file stops pact-journal before it starts: exit 2,
// every problem with its line.
func TestJournalBadConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.yaml")
	file := "data-dir: " + dir + "\nlisten_addr: 127.0.0.1:7443\ncert-lifetime: 3 days\nmax-conns: many\n"
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "pact-journal"), "--config", path)
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("pact-journal with a bad file: %v, want exit 2\n%s", err, out)
	}
	for _, want := range []string{
		"3 configuration problems; nothing was started",
		path + `:2: unknown setting "listen_addr" (did you mean listen?): remove it, or see pact-journal --help`,
		path + `:3: cert-lifetime: "3 days" is not a duration (unknown unit " days"; units: ns, us, ms, s, m, h, d): write it like 90s, 30m, 36h, 7d or 1d12h`,
		path + `:4: max-conns: "many" is not a whole number`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "raft")); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(dir)
		t.Errorf("a bad file still touched the data directory: %v", entries)
	}
}

// The journal.yaml the packages ship (the production layout: the root
// certificate and a journal CA, never the root key), on a host where
// nothing has been installed yet: --check-config fails with the reasons
// (the root file it names, how the ceremony makes it, never --dev), and so
// does a real start, at once and with exit 2 (which the unit does not
// restart) instead of exit 1 every 5 s. Then the ceremony as the file's
// comment says, with the key in a file (PACT_JOURNAL_CA_KEY, the file's
// other choice; dist's TestShippedJournalConfig runs it with a TPM): a
// journal CA key others can read is refused, and then the file checks
// out. The file's /etc/pact and /var/lib paths are moved under a
// temporary directory.
func TestShippedJournalConfigWithoutRoot(t *testing.T) {
	shipped, err := os.ReadFile("../dist/config/journal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	etc, data := filepath.Join(tmp, "etc/pact"), filepath.Join(tmp, "var/lib/pact-journal")
	yaml := strings.NewReplacer("/etc/pact/", etc+"/", "/var/lib/pact-journal", data).Replace(string(shipped))
	if !strings.Contains(yaml, "root-cert: "+etc+"/ca.pem") || !strings.Contains(yaml, "journal-ca-cert: "+etc+"/journal-ca.pem") || !strings.Contains(yaml, "data-dir: "+data) {
		t.Fatalf("the shipped file no longer names /etc/pact/ca.pem, /etc/pact/journal-ca.pem and /var/lib/pact-journal:\n%s", shipped)
	}
	path := filepath.Join(tmp, "journal.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(etc, "journal-ca-key.pem")
	run := func(bin string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, bin), args...)
		cmd.Env = append(os.Environ(), "PACT_LOG_FORMAT=text", "PACT_JOURNAL_CA_KEY=file:"+keyFile)
		cmd.Dir = tmp
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	journal := func(args ...string) (string, int) {
		t.Helper()
		return run("pact-journal", append([]string{"--config", path}, args...)...)
	}
	reasons := []string{
		"1 configuration problem; nothing was started",
		"root certificate " + etc + "/ca.pem does not exist",
		"pact ca init", "pact-journal ca-request", "pact ca sign-journal", "docs/ceremony.md",
	}
	for _, args := range [][]string{{"--check-config"}, nil} {
		out, code := journal(args...)
		if code != 2 {
			t.Errorf("pact-journal %v without its root: exit %d, want 2\n%s", args, code, out)
		}
		wantContains(t, fmt.Sprintf("pact-journal %v", args), out, reasons...)
		if strings.Contains(out, "--dev") {
			t.Errorf("pact-journal %v, a production journal, suggests --dev:\n%s", args, out)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("pact-journal %v without its root created %s", args, data)
		}
	}

	// The ceremony, as the file's comment says.
	rootDir := filepath.Join(tmp, "root-ca")
	names := "localhost,127.0.0.1,::1,j1,j1.example.org,10.0.0.1"
	for _, step := range [][]string{
		{"pact", "ca", "init", "--dir", rootDir, "--domain", "site.example"},
		{"pact-journal", "ca-request", "--journal-id", "j1", "--key", "file:" + keyFile, "--names", names, "--out", "j1.csr"},
		{"pact", "ca", "sign-journal", "--dir", rootDir, "--csr", "j1.csr", "--journal-id", "j1", "--names", names, "--out", "j1-ca.pem"},
	} {
		if step[1] == "ca-request" {
			if err := os.MkdirAll(etc, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if out, code := run(step[0], step[1:]...); code != 0 {
			t.Fatalf("%v: exit %d\n%s", step, code, out)
		}
	}
	for from, to := range map[string]string{filepath.Join(rootDir, "ca.pem"): "ca.pem", filepath.Join(tmp, "j1-ca.pem"): "journal-ca.pem"} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(etc, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The journal CA's key left readable by others.
	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := journal("--check-config")
	if code != 2 {
		t.Errorf("a journal CA key of mode 0644: exit %d, want 2\n%s", code, out)
	}
	wantContains(t, "a journal CA key of mode 0644", out, "readable by others", "run: chmod 600 "+keyFile)
	if err := os.Chmod(keyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = journal("--check-config")
	if code != 0 {
		t.Errorf("the shipped file with its root and journal CA installed: exit %d, want 0\n%s", code, out)
	}
	wantContains(t, "--check-config", out, "the settings are valid")
}
