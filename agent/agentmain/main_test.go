package agentmain

import (
	"bytes"
	"context"
	"fmt"
	"go/build"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pact-hpc/pact/agent"
	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/cmdline"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/internal/settings"
	"github.com/pact-hpc/pact/internal/settings/settingstest"
	"github.com/pact-hpc/pact/journal/journaltest"
)

func envOf(m map[string]string) settings.Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// comparable is the part of agent.Config the settings reach (the rest
// holds functions and a logger).
func comparable(c agent.Config) agent.Config {
	c.Logger, c.Clock, c.OnReady = nil, nil, nil
	return c
}

func resolve(t *testing.T, args []string, env map[string]string) (agent.Config, cmdline.Logging, error) {
	t.Helper()
	cfg := agent.DefaultConfig()
	var log cmdline.Logging
	var file string
	s := Settings(&cfg, &log, &file)
	fs := newFlagSet(s)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	err := s.Resolve(envOf(env))
	return comparable(cfg), log, err
}

// The example the packages install as /etc/pact/agent.yaml loads through
// the real parser, names only real settings, and validates.
func TestExampleConfig(t *testing.T) {
	cfg, log, err := resolve(t, []string{"--config", "../../dist/config/agent.yaml"}, nil)
	if err != nil {
		t.Fatalf("dist/config/agent.yaml:\n%v", err)
	}
	def := agent.DefaultConfig()
	cfg.Logger, cfg.Clock = def.Logger, def.Clock
	if err := cfg.Validate(); err != nil {
		t.Fatalf("dist/config/agent.yaml does not validate:\n%v", err)
	}
	if len(cfg.JournalAddrs) != 3 || cfg.CAFile != "/etc/pact/ca.pem" || log.Format != "json" {
		t.Errorf("the example did not reach the configuration: %+v", cfg)
	}
}

var samples = map[string]string{
	"string": "s", "bool": "true", "int": "7", "uint": "7", "duration": "7s", "list": "10.0.0.9:7443",
	"key-exchange": "x25519mlkem768", "log-format": "json", "log-level": "debug",
}

// Every setting is reachable all three ways: as a flag, as its variable
// and as a key of the file, each changing the configuration.
func TestEverySettingThreeWays(t *testing.T) {
	var cfg agent.Config
	var log cmdline.Logging
	var file string
	settingstest.EveryWay(t, Settings(&cfg, &log, &file), samples, func(t *testing.T, args []string, env map[string]string) (any, error) {
		cfg, log, err := resolve(t, args, env)
		return struct {
			Config  agent.Config
			Logging cmdline.Logging
		}{cfg, log}, err
	})
}

func runWith(t *testing.T, file string, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	if file != "" {
		path := filepath.Join(t.TempDir(), "agent.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", path}, args...)
	}
	var out, errb bytes.Buffer
	code := run(args, envOf(env), &out, &errb)
	return code, out.String(), errb.String()
}

// caFile writes a domain root certificate for --ca and returns its path.
func caFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pki.EncodeCertsPEM(chaintest.NewRoot("site.example").Cert.Raw), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckConfig(t *testing.T) {
	ca := caFile(t)
	good := "journal: [127.0.0.1:7443]\nca: " + ca + "\n"
	missing := filepath.Join(t.TempDir(), "ca.pem")
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		file     string
		env      map[string]string
		args     []string
		code     int
		contains []string
	}{
		{"good file", good, nil, nil, agent.ExitOK, []string{"the settings are valid"}},
		{"days, as pact takes them", good + "clock-bridge: 1d\n", nil, nil, agent.ExitOK, []string{"the settings are valid"}},
		{"every problem at once", good + "macs: [52:54:00:00:00:01]\nclock-bridge: an hour\nkey-exchange: rsa\n",
			map[string]string{"PACT_LOG_LEVEL": "loud"}, nil, agent.ExitUsage, []string{
				"4 configuration problems; nothing was started",
				`agent.yaml:3: unknown setting "macs" (did you mean mac?): remove it, or see pact-agent --help`,
				`agent.yaml:4: clock-bridge: "an hour" is not a duration`,
				`agent.yaml:5: key-exchange: "rsa": `,
				`PACT_LOG_LEVEL: "loud": want debug, info, warn or error`,
			}},
		{"env over file", good, map[string]string{"PACT_JOURNAL": ""}, nil, agent.ExitUsage, []string{"no journal address"}},
		{"flag over env over file", good, map[string]string{"PACT_JOURNAL": ""}, []string{"--journal", "127.0.0.1:7443"}, agent.ExitOK, []string{"valid"}},
		{"config from the environment", "", map[string]string{"PACT_AGENT_CONFIG": "../../dist/config/agent.yaml", "PACT_CA": ca}, nil, agent.ExitOK, []string{"valid"}},
		// What a start reads is read: a --ca that is not there, or holds
		// no certificate, is a problem (exit 2), not a start that exits 1
		// and is restarted for ever.
		{"a --ca that does not exist", "journal: [127.0.0.1:7443]\nca: " + missing + "\n", nil, nil, agent.ExitUsage,
			[]string{"1 configuration problem", "--ca " + missing, "no such file or directory", "the node image carries"}},
		{"a --ca that holds no certificate", "journal: [127.0.0.1:7443]\nca: " + notPEM + "\n", nil, nil, agent.ExitUsage, []string{"--ca " + notPEM}},
		{"a --join-token-file that does not exist", good + "join-token-file: " + missing + "\n", nil, nil, agent.ExitUsage, []string{"--join-token-file"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runWith(t, tt.file, tt.env, append(tt.args, "--check-config")...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tt.code, out, errOut)
			}
			for _, want := range tt.contains {
				if !strings.Contains(out+errOut, want) {
					t.Errorf("output lacks %q:\n%s%s", want, out, errOut)
				}
			}
		})
	}
}

func TestHelp(t *testing.T) {
	code, _, help := runWith(t, "", nil, "--help")
	if code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"--config FILE", "PACT_AGENT_CONFIG", "A flag wins over its variable, which wins over the file",
		"/etc/pact/agent.yaml", "(PACT_AGENT_CLOCK_BRIDGE) (default 1h0m0s)", "--check-config", "--version", "tmpfs"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// pact-agent refuses a --key-out off a tmpfs as a usage error (exit 2),
// before it enrolls.
func TestKeyOutOffTmpfs(t *testing.T) {
	dir := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == 0x01021994 { // TMPFS_MAGIC
		t.Skipf("the test temp dir %s is itself on a tmpfs; cannot test the refusal here", dir)
	}
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	keyOut := filepath.Join(dir, "key.pem")
	code, _, errOut := runWith(t, "", nil, "--journal", h.Addr, "--ca", filepath.Join(h.Dir, "ca.pem"), "--mac", "52:54:00:00:00:01",
		"--bmc-serial", "SN1", "--spire-socket", "", "--status-socket", "", "--key-out", keyOut)
	if code != agent.ExitUsage || !strings.Contains(errOut, "not on a tmpfs") {
		t.Fatalf("pact-agent --key-out on a disk: exit %d, stderr %s", code, errOut)
	}
	if _, err := os.Stat(keyOut); !os.IsNotExist(err) {
		t.Fatalf("the key was written to a disk: %v", err)
	}
}

// The subcommands read their settings the same way.
func TestStatusCommand(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none.sock")
	code, _, errOut := runWith(t, "", map[string]string{"PACT_AGENT_STATUS_SOCKET": none}, "status")
	if code != agent.ExitError || !strings.Contains(errOut, "no agent answers") || !strings.Contains(errOut, none) {
		t.Errorf("status without an agent: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runWith(t, "", nil, "status", "-o", "yaml"); code != agent.ExitUsage {
		t.Errorf("status -o yaml: exit %d, %s", code, errOut)
	}
}

// The library takes a Config: flags, variables and files stay here.
func TestLibraryParsesNoFlags(t *testing.T) {
	pkg, err := build.ImportDir("..", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, forbidden := range []string{"flag", "github.com/pact-hpc/pact/internal/settings", "github.com/pact-hpc/pact/internal/cmdline"} {
		if slices.Contains(pkg.Imports, forbidden) {
			t.Errorf("package agent imports %s; flag parsing belongs in agent/agentmain", forbidden)
		}
	}
}

func TestDefaultStatusSocket(t *testing.T) {
	for _, tt := range []struct {
		uid  int
		env  map[string]string
		want string
	}{
		{0, nil, "/run/pact/agent.sock"},
		{0, map[string]string{"XDG_RUNTIME_DIR": "/run/user/0"}, "/run/pact/agent.sock"},
		{1000, map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000"}, "/run/user/1000/pact/agent.sock"},
		{1000, map[string]string{"XDG_RUNTIME_DIR": "relative"}, "/run/pact/agent.sock"},
		{1000, nil, "/run/pact/agent.sock"},
	} {
		if got := defaultStatusSocket(tt.uid, envOf(tt.env)); got != tt.want {
			t.Errorf("uid %d, env %v: %s, want %s", tt.uid, tt.env, got, tt.want)
		}
	}
}

// The README's walkthrough as a user who is not root: the agent, started
// with no --status-socket, serves its status in the user's runtime
// directory, and pact-agent status, with no flag either, finds it there.
// The directory the agent made for the socket goes with it.
func TestStatusAsAUser(t *testing.T) {
	uid := getuid
	getuid = func() int { return 1000 }
	defer func() { getuid = uid }()
	env := map[string]string{"XDG_RUNTIME_DIR": t.TempDir()}
	sock := filepath.Join(env["XDG_RUNTIME_DIR"], "pact", "agent.sock")

	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", "52:54:00:00:00:01")
	cfg := defaultConfig(envOf(env))
	if cfg.StatusSocket != sock {
		t.Fatalf("status socket %s, want %s", cfg.StatusSocket, sock)
	}
	cfg.JournalAddrs, cfg.CAFile, cfg.SPIRESocket = []string{h.Addr}, filepath.Join(h.Dir, "ca.pem"), ""
	cfg.Hardware.MACs, cfg.Hardware.BMCSerial = []string{"52:54:00:00:00:01"}, "SN1"
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var last polltest.Last
	polltest.Until(t, 15*time.Second, 20*time.Millisecond, func() bool {
		code, out, errOut := runWith(t, "", env, "status")
		if code == agent.ExitOK {
			if !strings.Contains(out, "n1") {
				t.Errorf("pact-agent status: %s", out)
			}
			return true
		}
		last.Value = fmt.Sprintf("exit %d: %s", code, errOut)
		return false
	}, "pact-agent status: %v", &last)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(sock)); !os.IsNotExist(err) {
		t.Errorf("the agent left %s behind: %v", filepath.Dir(sock), err)
	}
	if want := `msg="status socket open" path=` + sock; !strings.Contains(logs.String(), want) {
		t.Errorf("the log does not say where the status socket is (%s):\n%s", want, logs.String())
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
