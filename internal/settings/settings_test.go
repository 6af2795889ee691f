package settings

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// target is one of each kind of setting.
type target struct {
	config   string
	name     string
	dev      bool
	conns    int
	snap     uint64
	lifetime time.Duration
	macs     []string
	kx       string
}

func newTarget() (*target, *Set) {
	t := &target{name: "j1", conns: 100, snap: 8192, lifetime: 72 * time.Hour, macs: []string{"def"}, kx: "x25519"}
	s := New("pact-test")
	s.ConfigFile(&t.config, "config", "PACT_TEST_CONFIG", "configuration file")
	s.String(&t.name, "node-id", "PACT_NODE_ID", "id")
	s.Bool(&t.dev, "dev", "PACT_DEV", "dev mode")
	s.Int(&t.conns, "max-conns", "PACT_MAX_CONNS", "connections")
	s.Uint64(&t.snap, "raft-snapshot-threshold", "PACT_RAFT_SNAPSHOT_THRESHOLD", "entries")
	s.Duration(&t.lifetime, "cert-lifetime", "PACT_CERT_LIFETIME", "lifetime")
	s.List(&t.macs, "mac", "PACT_MACS", "MACs")
	s.Func("key-exchange", "PACT_KEY_EXCHANGE", "kx", "string", "x25519", func(v string) error {
		if v != "x25519" && v != "x25519mlkem768" {
			return errors.New("want x25519 or x25519mlkem768")
		}
		t.kx = v
		return nil
	}, func() { t.kx = "x25519" })
	return t, s
}

// resolve parses args, then resolves against env (a map) and returns the
// target and the problems.
func resolve(t *testing.T, file string, env map[string]string, args ...string) (*target, []*Error) {
	t.Helper()
	tg, s := newTarget()
	if file != "" {
		p := filepath.Join(t.TempDir(), "pact.yaml")
		if err := os.WriteFile(p, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", p}, args...)
	}
	fs := pflag.NewFlagSet("pact-test", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	err := s.Resolve(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	probs := Problems(err)
	if (err == nil) != (len(probs) == 0) {
		t.Fatalf("Resolve = %v, but Problems found %d *Errors", err, len(probs))
	}
	return tg, probs
}

func TestPrecedence(t *testing.T) {
	const file = "node-id: from-file\nmax-conns: 7\nmac: [aa, bb]\ncert-lifetime: 1h\n"
	for _, tt := range []struct {
		name  string
		file  string
		env   map[string]string
		args  []string
		check func(*target) bool
	}{
		{"defaults", "", nil, nil, func(g *target) bool {
			return g.name == "j1" && g.conns == 100 && slices.Equal(g.macs, []string{"def"}) && g.lifetime == 72*time.Hour
		}},
		{"file over default", file, nil, nil, func(g *target) bool {
			return g.name == "from-file" && g.conns == 7 && slices.Equal(g.macs, []string{"aa", "bb"}) && g.lifetime == time.Hour && g.snap == 8192
		}},
		{"env over file", file, map[string]string{"PACT_NODE_ID": "from-env", "PACT_MACS": "cc,dd"}, nil, func(g *target) bool {
			return g.name == "from-env" && g.conns == 7 && slices.Equal(g.macs, []string{"cc", "dd"})
		}},
		{"flag over env over file", file, map[string]string{"PACT_NODE_ID": "from-env", "PACT_MAX_CONNS": "8"},
			[]string{"--node-id", "from-flag"}, func(g *target) bool { return g.name == "from-flag" && g.conns == 8 }},
		{"repeated flag adds to a list, replacing env", file, map[string]string{"PACT_MACS": "cc"},
			[]string{"--mac", "ee", "--mac", "ff,gg"}, func(g *target) bool { return slices.Equal(g.macs, []string{"ee", "ff", "gg"}) }},
		{"env set to empty is set", file, map[string]string{"PACT_NODE_ID": ""}, nil, func(g *target) bool { return g.name == "" }},
		{"file empty list empties", "mac: []\n", nil, nil, func(g *target) bool { return len(g.macs) == 0 }},
		{"file list as a string", "mac: aa, bb\n", nil, nil, func(g *target) bool { return slices.Equal(g.macs, []string{"aa", "bb"}) }},
		{"bool flag without value", "dev: false\n", nil, []string{"--dev"}, func(g *target) bool { return g.dev }},
		{"bool env over file", "dev: true\n", map[string]string{"PACT_DEV": "0"}, nil, func(g *target) bool { return !g.dev }},
		{"func setting from file", "key-exchange: x25519mlkem768\n", nil, nil, func(g *target) bool { return g.kx == "x25519mlkem768" }},
		{"uint from env", "", map[string]string{"PACT_RAFT_SNAPSHOT_THRESHOLD": "16"}, nil, func(g *target) bool { return g.snap == 16 }},
		{"comments only", "# nothing yet\n", nil, nil, func(g *target) bool { return g.name == "j1" }},
		{"empty file", " ", nil, nil, func(g *target) bool { return g.name == "j1" }},
		// One duration syntax everywhere: days in the file, the
		// environment and on the command line, as the pact CLI takes them.
		{"days in the file", "cert-lifetime: 3d\n", nil, nil, func(g *target) bool { return g.lifetime == 72*time.Hour }},
		{"days and hours from env", "", map[string]string{"PACT_CERT_LIFETIME": "1d12h"}, nil, func(g *target) bool { return g.lifetime == 36*time.Hour }},
		{"days on the command line", "cert-lifetime: 1h\n", nil, []string{"--cert-lifetime", "2d"}, func(g *target) bool { return g.lifetime == 48*time.Hour }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, probs := resolve(t, tt.file, tt.env, tt.args...)
			if len(probs) > 0 {
				t.Fatalf("problems: %v", probs)
			}
			if !tt.check(g) {
				t.Errorf("got %+v", *g)
			}
		})
	}
}

// The configuration file can also be named by its variable; the flag wins.
func TestConfigFileFromEnv(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	_ = os.WriteFile(a, []byte("node-id: a\n"), 0o600)
	_ = os.WriteFile(b, []byte("node-id: b\n"), 0o600)
	env := map[string]string{"PACT_TEST_CONFIG": a}
	if g, probs := resolve(t, "", env); len(probs) > 0 || g.name != "a" {
		t.Errorf("from PACT_TEST_CONFIG: %q %v", g.name, probs)
	}
	if g, probs := resolve(t, "", env, "--config", b); len(probs) > 0 || g.name != "b" {
		t.Errorf("--config over PACT_TEST_CONFIG: %q %v", g.name, probs)
	}
}

type want struct {
	source   Source
	line     int
	name     string
	sentinel error
	text     string
}

func TestProblems(t *testing.T) {
	for _, tt := range []struct {
		name string
		file string
		env  map[string]string
		args []string
		want []want
	}{
		{"unknown key", "node-id: a\nlisten_adr: x\n", nil, nil,
			[]want{{FromFile, 2, "listen_adr", ErrUnknownKey, `pact.yaml:2: unknown setting "listen_adr": remove it, or see pact-test --help`}}},
		{"typo suggests", "max_conns: 3\n", nil, nil,
			[]want{{FromFile, 1, "max_conns", ErrUnknownKey, "did you mean max-conns?"}}},
		{"bad duration", "node-id: a\n\ncert-lifetime: 3 days\n", nil, nil,
			[]want{{FromFile, 3, "cert-lifetime", ErrBadValue, `pact.yaml:3: cert-lifetime: "3 days" is not a duration`}}},
		{"every problem at once", "cert-lifetime: 3 weeks\nbogus: 1\nmax-conns: many\ndev: yes\nmac: {a: b}\nnode-id: [a]\nkey-exchange: rsa\n", nil, nil,
			[]want{
				{FromFile, 2, "bogus", ErrUnknownKey, "remove it"},
				{FromFile, 6, "node-id", ErrBadValue, "not a list"},
				{FromFile, 5, "mac", ErrBadValue, "not a mapping"},
				{FromFile, 4, "dev", ErrBadValue, "write true or false"},
				{FromFile, 3, "max-conns", ErrBadValue, "not a whole number"},
				{FromFile, 1, "cert-lifetime", ErrBadValue, `unknown unit " weeks"; units: ns, us, ms, s, m, h, d): write it like 90s, 30m, 36h, 7d or 1d12h`},
				{FromFile, 7, "key-exchange", ErrBadValue, "want x25519 or"},
			}},
		{"file, env and flag problems together", "max-conns: x\n", map[string]string{"PACT_CERT_LIFETIME": "soon"}, []string{"--raft-snapshot-threshold", "-1"},
			[]want{
				{FromFile, 1, "max-conns", ErrBadValue, "not a whole number"},
				{FromEnv, 0, "cert-lifetime", ErrBadValue, `PACT_CERT_LIFETIME: "soon" is not a duration`},
				{FromFlag, 0, "raft-snapshot-threshold", ErrBadValue, `--raft-snapshot-threshold: "-1" is not a whole number of 0 or more`},
			}},
		{"bad file value is reported even when a flag overrides it", "max-conns: x\n", nil, []string{"--max-conns", "3"},
			[]want{{FromFile, 1, "max-conns", ErrBadValue, "not a whole number"}}},
		{"set twice", "node-id: a\nnode-id: b\n", nil, nil,
			[]want{{FromFile, 2, "node-id", ErrBadValue, "node-id: set twice (first on line 1); keep one"}}},
		{"config in the file", "config: other.yaml\n", nil, nil,
			[]want{{FromFile, 1, "config", ErrUnknownKey, "cannot be set in the configuration file"}}},
		{"null value", "node-id:\n", nil, nil,
			[]want{{FromFile, 1, "node-id", ErrBadValue, "no value"}}},
		{"not a mapping", "- a\n- b\n", nil, nil,
			[]want{{FromFile, 1, "", ErrFile, "want a mapping"}}},
		{"syntax error with its line", "node-id: a\nmax-conns: [1\ndev: true\n", nil, nil,
			[]want{{FromFile, 2, "", ErrFile, "not valid YAML: did not find expected ',' or ']'"}}},
		{"scanner error with its line", "node-id: a\nmax-conns: 2\ndev: a: b\n", nil, nil,
			[]want{{FromFile, 3, "", ErrFile, "not valid YAML"}}},
		{"parser error on the first lines", "- a\nb: c\n", nil, nil,
			[]want{{FromFile, 1, "", ErrFile, "expected '-' indicator"}}},
		// The line of the construct the error breaks: the value of node-id,
		// which the tabbed line would continue (as on any other line).
		{"tab indentation", "node-id: a\n\tdev: true\n", nil, nil,
			[]want{{FromFile, 1, "", ErrFile, "not valid YAML: found a tab character that violates indentation"}}},
		{"tab indentation further down", "node-id: a\nmax-conns: 2\n\tdev: true\n", nil, nil,
			[]want{{FromFile, 2, "", ErrFile, "not valid YAML: found a tab character that violates indentation"}}},
		{"two documents", "node-id: a\n---\ndev: true\n", nil, nil,
			[]want{{FromFile, 2, "", ErrFile, "second YAML document"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, probs := resolve(t, tt.file, tt.env, tt.args...)
			if len(probs) != len(tt.want) {
				t.Fatalf("got %d problems, want %d: %v", len(probs), len(tt.want), probs)
			}
			for _, w := range tt.want {
				found := false
				for _, p := range probs {
					if p.Source == w.source && p.Line == w.line && p.Name == w.name && errors.Is(p, w.sentinel) && strings.Contains(p.Error(), w.text) {
						found = true
					}
				}
				if !found {
					t.Errorf("no problem %+v among:\n%v", w, probs)
				}
			}
			for _, p := range probs {
				if p.Source == FromFile && p.Line > 0 && !strings.Contains(p.Error(), "pact.yaml:") {
					t.Errorf("%q does not name the file and line", p.Error())
				}
			}
		})
	}
}

// TestSyntaxErrorLines: a syntax error is reported at the line of the
// construct it breaks, wherever that line is. yaml.v3 prints no line, or
// the line of the problem, when the construct starts on line 1: an error
// on line 1 used to read "line 2", "line 3" or no line.
func TestSyntaxErrorLines(t *testing.T) {
	for _, tt := range []struct{ bad, msg string }{
		{"max-conns: [1", "did not find expected ',' or ']'"},
		{"max-conns: {a", "did not find expected ',' or '}'"},
		{"dev: a: b", "mapping values are not allowed in this context"},
		{"node-id: 'x", "found unexpected end of stream"},
		{"\tdev: true", "found character that cannot start any token"},
		{"- a", "did not find expected '-' indicator"},
	} {
		for line := 1; line <= 3; line++ {
			file := strings.Repeat("# comment\n", line-1) + tt.bad + "\nnode-id: z\n"
			if line == 2 {
				file = "\xef\xbb\xbf" + file // a byte order mark changes no line
			}
			_, s := newTarget()
			_, errs := s.ParseFile("pact.yaml", []byte(file))
			want := fmt.Sprintf("pact.yaml:%d: not valid YAML: %s", line, tt.msg)
			if len(errs) != 1 || errs[0].Error() != want {
				t.Errorf("%q: got %v, want %q", file, errs, want)
			}
		}
	}
	// An error yaml gives no position for keeps none.
	_, s := newTarget()
	if _, errs := s.ParseFile("pact.yaml", []byte("node-id: *x\n")); len(errs) != 1 || errs[0].Error() != "pact.yaml: not valid YAML: unknown anchor 'x' referenced" {
		t.Errorf("unknown anchor: %v", errs)
	}
}

func TestMissingConfigFile(t *testing.T) {
	_, probs := resolve(t, "", nil, "--config", filepath.Join(t.TempDir(), "none.yaml"))
	if len(probs) != 1 || !errors.Is(probs[0], ErrFile) || !strings.Contains(probs[0].Error(), "give --config an existing file") {
		t.Fatalf("problems %v", probs)
	}
}

// Resolve starts from the defaults every time, so a caller may resolve
// again (the CLI does) and get the same answer.
func TestResolveIsRepeatable(t *testing.T) {
	g, s := newTarget()
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	s.Register(fs)
	_ = fs.Parse([]string{"--mac", "aa"})
	env := func(k string) (string, bool) { return map[string]string{"PACT_NODE_ID": "e"}[k], k == "PACT_NODE_ID" }
	for range 2 {
		if err := s.Resolve(env); err != nil {
			t.Fatal(err)
		}
		if g.name != "e" || !slices.Equal(g.macs, []string{"aa"}) || !s.Given("mac") || s.Given("node-id") {
			t.Fatalf("got %+v", *g)
		}
	}
}

// --help names each setting's variable and default.
func TestHelpNamesVariables(t *testing.T) {
	_, s := newTarget()
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	s.Register(fs)
	fs.PrintDefaults()
	for _, want := range []string{"(PACT_RAFT_SNAPSHOT_THRESHOLD)", "(default 8192)", "(default 3d)", "-dev", "(PACT_TEST_CONFIG)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDeclaringTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	s := New("x")
	var a, b string
	s.String(&a, "a", "PACT_A", "")
	s.String(&b, "b", "PACT_A", "")
}
