package journalmain

import (
	"bytes"
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/cmdutil"
	"github.com/pact-hpc/pact/internal/settings"
	"github.com/pact-hpc/pact/internal/settings/settingstest"
	"github.com/pact-hpc/pact/journal"
)

func envOf(m map[string]string) settings.Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// resolve runs the real settings of pact-journal over args and env.
func resolve(t *testing.T, args []string, env map[string]string) (journal.Config, cmdutil.Logging, error) {
	t.Helper()
	cfg := journal.DefaultConfig()
	var log cmdutil.Logging
	var file string
	s := Settings(&cfg, &log, &file)
	fs := newFlagSet(s)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	err := s.Resolve(envOf(env))
	return cfg, log, err
}

// The example the packages install as /etc/pact/journal.yaml loads
// through the real parser, names only real settings, and validates.
func TestExampleConfig(t *testing.T) {
	cfg, log, err := resolve(t, []string{"--config", "../../dist/config/journal.yaml"}, nil)
	if err != nil {
		t.Fatalf("dist/config/journal.yaml:\n%v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("dist/config/journal.yaml does not validate:\n%v", err)
	}
	if cfg.NodeID != "j1" || len(cfg.InitialCluster) != 3 || cfg.RaftListen == "" || log.Format != "json" {
		t.Errorf("the example did not reach the configuration: %+v", cfg)
	}
}

// samples are values, unlike the defaults, that each kind of setting
// accepts; some settings need values of their own.
var samples = map[string]string{
	"string": "s", "bool": "true", "int": "7", "uint": "7", "duration": "7s", "list": "a.example",
	"initial-cluster": "j1=127.0.0.1:7500", "key-exchange": "x25519mlkem768", "log-format": "json", "log-level": "debug",
}

// Every setting is reachable all three ways: as a flag, as its variable
// and as a key of the file, each changing the configuration.
func TestEverySettingThreeWays(t *testing.T) {
	var cfg journal.Config
	var log cmdutil.Logging
	var file string
	settingstest.EveryWay(t, Settings(&cfg, &log, &file), samples, func(t *testing.T, args []string, env map[string]string) (any, error) {
		cfg, log, err := resolve(t, args, env)
		return struct {
			Config  journal.Config
			Logging cmdutil.Logging
		}{cfg, log}, err
	})
}

// run parses as pact-journal does; the file is written to a temp dir.
func runWith(t *testing.T, file string, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	if file != "" {
		path := filepath.Join(t.TempDir(), "journal.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", path}, args...)
	}
	var out, errb bytes.Buffer
	code := run(args, envOf(env), &out, &errb)
	return code, out.String(), errb.String()
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	good := "data-dir: " + dir + "\nnode-id: j7\n"
	for _, tt := range []struct {
		name     string
		file     string
		env      map[string]string
		args     []string
		code     int
		contains []string
	}{
		{"good file", good, nil, nil, 0, []string{"the settings are valid"}},
		// One duration syntax: the days pact admin issue --lifetime takes.
		{"days in the file, a variable and a flag", good + "cert-lifetime: 3d\n", map[string]string{"PACT_OPERATOR_LIFETIME": "1d12h"},
			[]string{"--max-operator-lifetime", "30d"}, 0, []string{"the settings are valid"}},
		{"file, env and flag problems at once", good + "raft-listen: x\nlisten_addr: y\nheartbeat-timeout: 5 min\n",
			map[string]string{"PACT_MAX_CONNS": "lots"}, []string{"--cert-lifetime", "3w"}, 2, []string{
				"4 configuration problems; nothing was started",
				"journal.yaml:4: unknown setting \"listen_addr\" (did you mean listen?): remove it, or see pact-journal --help",
				"journal.yaml:5: heartbeat-timeout: \"5 min\" is not a duration (unknown unit \" min\"; units: ns, us, ms, s, m, h, d): write it like 90s, 30m, 36h, 7d or 1d12h",
				"PACT_MAX_CONNS: \"lots\" is not a whole number",
				"--cert-lifetime: \"3w\" is not a duration",
			}},
		{"a valid file with a value the journal refuses", good + "cert-lifetime: 1m\nmax-concurrent-enrollments: 0\n", nil, nil, 2, []string{
			"2 configuration problems", "shorter than 10m", "MaxConcurrentEnrollments"}},
		{"env over file", good, map[string]string{"PACT_NODE_ID": "bad id!"}, nil, 2, []string{"journal id"}},
		{"flag over env over file", good, map[string]string{"PACT_NODE_ID": "bad id!"}, []string{"--node-id", "j8"}, 0, []string{"valid"}},
		{"missing file", "", map[string]string{"PACT_JOURNAL_CONFIG": filepath.Join(dir, "none.yaml")}, nil, 2, []string{
			"none.yaml: cannot read the configuration file: no such file or directory", "give --config an existing file or unset PACT_JOURNAL_CONFIG"}},
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

// --help says how the settings work and names each variable.
func TestHelp(t *testing.T) {
	code, _, help := runWith(t, "", nil, "--help")
	if code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"--config FILE", "PACT_JOURNAL_CONFIG", "A flag wins over its variable, which wins over the file",
		"/etc/pact/journal.yaml", "--raft-snapshot-threshold uint", "(PACT_RAFT_SNAPSHOT_THRESHOLD) (default 8192)", "--check-config", "--version"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// The library takes a Config: flags, variables and files stay here.
func TestLibraryParsesNoFlags(t *testing.T) {
	pkg, err := build.ImportDir("..", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, forbidden := range []string{"flag", "github.com/pact-hpc/pact/internal/settings", "github.com/pact-hpc/pact/internal/cmdutil"} {
		if slices.Contains(pkg.Imports, forbidden) {
			t.Errorf("package journal imports %s; flag parsing belongs in journal/journalmain", forbidden)
		}
	}
}
