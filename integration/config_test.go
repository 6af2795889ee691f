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
