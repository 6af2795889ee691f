package journalmain

import (
	"bytes"
	"go/build"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/cmdline"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/settings"
	"github.com/pact-hpc/pact/internal/settings/settingstest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
)

func envOf(m map[string]string) settings.Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// resolve runs the real settings of pact-journal over args and env.
func resolve(t *testing.T, args []string, env map[string]string) (journal.Config, cmdline.Logging, error) {
	t.Helper()
	cfg := journal.DefaultConfig()
	var log cmdline.Logging
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
	var log cmdline.Logging
	var file string
	settingstest.EveryWay(t, Settings(&cfg, &log, &file), samples, func(t *testing.T, args []string, env map[string]string) (any, error) {
		cfg, log, err := resolve(t, args, env)
		return struct {
			Config  journal.Config
			Logging cmdline.Logging
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
	if _, err := ca.InitDev(dir, "site.example", time.Now()); err != nil {
		t.Fatal(err)
	}
	good := "data-dir: " + dir + "\nnode-id: j7\n"
	for _, tt := range []struct {
		name     string
		file     string
		env      map[string]string
		args     []string
		code     int
		contains []string
	}{
		{"good file", good, nil, nil, 0, []string{"the settings are valid, and the files and directories they name are usable"}},
		// One duration syntax: the days pact admin issue --lifetime takes.
		{"days in the file, a variable and a flag", good + "cert-lifetime: 3d\n", map[string]string{"PACT_OPERATOR_LIFETIME": "1d12h"},
			[]string{"--max-operator-lifetime", "30d"}, 0, []string{"the settings are valid, and the files and directories they name are usable"}},
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
	for _, forbidden := range []string{"flag", "github.com/pact-hpc/pact/internal/settings", "github.com/pact-hpc/pact/internal/cmdline"} {
		if slices.Contains(pkg.Imports, forbidden) {
			t.Errorf("package journal imports %s; flag parsing belongs in journal/journalmain", forbidden)
		}
	}
}

// init names no domain on its own: a root made without --domain would be
// one more pact.local. It prints the root's fingerprint, the one thing
// that tells two roots apart, and never changes an existing root.
func TestInitNeedsADomain(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"no flags", nil, 2, []string{"--dir is required", "--domain is required: name the domain after the site"}},
		{"no domain", []string{"--dir", dir}, 2, []string{"--domain is required"}},
		{"bad domain", []string{"--dir", dir, "--domain", "Site Example"}, 2, []string{"--domain: ", "lower-case"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(append([]string{"init"}, tt.args...), envOf(nil), &out, &errb); code != tt.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tt.code, out.String(), errb.String())
			}
			for _, want := range tt.contains {
				if !strings.Contains(errb.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, errb.String())
				}
			}
			if _, err := os.Stat(filepath.Join(dir, ca.RootCertFile)); err == nil {
				t.Errorf("a refused init wrote %s", ca.RootCertFile)
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run([]string{"init", "--dir", dir, "--domain", "hpc.example.org"}, envOf(nil), &out, &errb); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, errb.String())
	}
	auth, err := ca.LoadKeyFileAuthority(filepath.Join(dir, ca.RootCertFile), filepath.Join(dir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	fp := pki.CertFingerprint(auth.Root())
	if !strings.Contains(out.String(), "created domain hpc.example.org") || !strings.Contains(out.String(), "root SHA-256 fingerprint "+fp) {
		t.Errorf("init's answer lacks the domain or the fingerprint %s:\n%s", fp, out.String())
	}
	out.Reset()
	if code := run([]string{"init", "--dir", dir, "--domain", "hpc.example.org"}, envOf(nil), &out, &errb); code != 0 || !strings.Contains(out.String(), "nothing changed") {
		t.Errorf("init again: exit %d\n%s", code, out.String())
	}
	errb.Reset()
	if code := run([]string{"init", "--dir", dir, "--domain", "other.example.org"}, envOf(nil), &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "already holds the root of domain hpc.example.org (SHA-256 fingerprint "+fp+"), not other.example.org") {
		t.Errorf("init of another domain over a root: exit %d\n%s", code, errb.String())
	}
}

// --check-config checks what a start would meet on disk, without
// starting: the root files, the data directory, the SPIRE bundle and the
// audit log, and every address. Each problem says what to do, all are
// reported at once, and a production journal never hears of --dev.
func TestCheckConfigFiles(t *testing.T) {
	// newRoot makes a root of its own in a fresh directory.
	newRoot := func(t *testing.T) string {
		d := t.TempDir()
		if _, err := ca.InitDev(d, "site.example", time.Now()); err != nil {
			t.Fatal(err)
		}
		return d
	}
	write := func(t *testing.T, path, data string, mode os.FileMode) {
		if err := os.WriteFile(path, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	readFile := func(t *testing.T, path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for _, tt := range []struct {
		name string
		// setup returns the settings (YAML lines) for a journal whose
		// root is in root and data directory is data (not yet made);
		// ROOT and DATA in contains stand for the two.
		setup    func(t *testing.T, root, data string) string
		code     int
		contains []string
		lacks    []string
	}{
		{"a production journal with its root", func(t *testing.T, root, data string) string { return "" }, 0,
			[]string{"the settings are valid"}, nil},
		{"the root files missing", func(t *testing.T, root, data string) string {
			return "root-cert: " + filepath.Join(data, "nowhere/ca.pem") + "\nroot-key: " + filepath.Join(data, "nowhere/ca-key.pem") + "\n"
		}, 2, []string{"1 configuration problem;", "the domain root is missing: neither the root certificate DATA/nowhere/ca.pem",
			"make the root once, offline, with pact ca init", "point --root-cert, --journal-ca-cert and --journal-ca-key at them (docs/ceremony.md)"}, []string{"--dev"}},
		{"the root key missing", func(t *testing.T, root, data string) string {
			return "root-key: " + filepath.Join(root, "none.pem") + "\n"
		}, 2, []string{"root key ROOT/none.pem does not exist", "pact ca init", "pact ca sign-journal"}, []string{"--dev"}},
		{"neither a journal CA key nor the root key", func(t *testing.T, root, data string) string {
			return "root-key: \"\"\n"
		}, 2, []string{"no journal CA key given (--journal-ca-key), and no domain root key at DATA/ca-key.pem for the legacy layout", "pact-journal ca-request"}, []string{"--dev"}},
		{"a key readable by others", func(t *testing.T, root, data string) string {
			if err := os.Chmod(filepath.Join(root, ca.RootKeyFile), 0o644); err != nil {
				t.Fatal(err)
			}
			return ""
		}, 2, []string{"has mode 0644, readable by group or others; run: chmod 600 ROOT/ca-key.pem"}, nil},
		{"a key of another root", func(t *testing.T, root, data string) string {
			return "root-key: " + filepath.Join(newRoot(t), ca.RootKeyFile) + "\n"
		}, 2, []string{"does not belong to root certificate ROOT/ca.pem"}, nil},
		{"a root certificate that is no certificate", func(t *testing.T, root, data string) string {
			write(t, filepath.Join(root, ca.RootCertFile), "not PEM\n", 0o644)
			return ""
		}, 2, []string{"holds no PEM certificate", "give --root-cert the ca.pem pact ca init made"}, nil},
		{"a key that is no key", func(t *testing.T, root, data string) string {
			write(t, filepath.Join(root, ca.RootKeyFile), "not PEM\n", 0o600)
			return ""
		}, 2, []string{"holds no PEM block", "point --root-key at the ca-key.pem"}, nil},
		{"a data directory that is a file", func(t *testing.T, root, data string) string {
			write(t, data, "", 0o600)
			return ""
		}, 2, []string{"data directory DATA is not a directory; choose another --data-dir"}, nil},
		{"a data directory under a file", func(t *testing.T, root, data string) string {
			write(t, data, "", 0o600)
			return "data-dir: " + filepath.Join(data, "sub") + "\n"
		}, 2, []string{"data directory DATA/sub cannot be created: DATA is not a directory"}, nil},
		{"a removed journal", func(t *testing.T, root, data string) string {
			if err := os.MkdirAll(data, 0o700); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(data, journal.RemovedMarker), "removed by admin at 2026-01-01\n", 0o600)
			return ""
		}, ExitRemoved, []string{"removed from the quorum: removed by admin", "empty it and add the journal anew"}, nil},
		{"addresses that do not parse", func(t *testing.T, root, data string) string {
			return "listen: 10.0.0.1:99999\nraft-listen: 10.0.0.1\nadvertise-raft: :7500\ninitial-cluster: [j1=10.0.0.1:7500, j2=10.0.0.2:0]\nmetrics-listen: localhost:metrics\n"
		}, 2, []string{"--listen \"10.0.0.1:99999\": port \"99999\" is not a port number",
			"--raft-listen \"10.0.0.1\": address 10.0.0.1: missing port in address; write it as host:port",
			"--advertise-raft \":7500\": other journals dial it, so it needs a host",
			"--initial-cluster j2 \"10.0.0.2:0\": other journals dial it",
			"--metrics-listen \"localhost:metrics\": port \"metrics\" is not a port number"}, nil},
		{"a SPIRE bundle and an audit log that cannot be", func(t *testing.T, root, data string) string {
			return "spire-bundle: " + filepath.Join(root, "spire.pem") + "\naudit-log: " + filepath.Join(root, "no/such/dir/audit.jsonl") + "\n"
		}, 2, []string{"--spire-bundle: ", "spire-server bundle show", "--audit-log ROOT/no/such/dir/audit.jsonl cannot be created"}, nil},
		{"every problem at once", func(t *testing.T, root, data string) string {
			if err := os.Chmod(filepath.Join(root, ca.RootKeyFile), 0o640); err != nil {
				t.Fatal(err)
			}
			write(t, data, "", 0o600)
			return "listen: nowhere\ncert-lifetime: 1m\n"
		}, 2, []string{"4 configuration problems; nothing was started", "shorter than 10m", "--listen \"nowhere\"", "has mode 0640", "is not a directory"}, nil},
		{"a data directory a running journal holds", func(t *testing.T, root, data string) string {
			if err := os.MkdirAll(data, 0o700); err != nil {
				t.Fatal(err)
			}
			db, err := bbolt.Open(filepath.Join(data, "raft.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return ""
		}, 0, []string{"note: journal: data directory in use by a running pact-journal", "a start now would fail until that journal stops", "the settings are valid"}, nil},
		// The layout since issue 23: the root certificate alone on the
		// journal host, and a journal CA of its own.
		{"a journal CA journal", func(t *testing.T, root, data string) string {
			return jcaSettings(journalCAFiles(t, root, "j1", nil, nil, 0))
		}, 0, []string{"the settings are valid"}, nil},
		{"a journal CA of another journal", func(t *testing.T, root, data string) string {
			return jcaSettings(journalCAFiles(t, root, "j2", nil, nil, 0))
		}, 2, []string{"1 configuration problem;", "--journal-ca-cert", "the journal CA is for journal j2 of domain site.example, this is journal j1 of domain site.example"}, nil},
		{"a journal CA that does not permit a name of --server-names", func(t *testing.T, root, data string) string {
			return "server-names: [j1.site.example, j1-alias.site.example]\n" + jcaSettings(journalCAFiles(t, root, "j1", []string{"j1.site.example"}, nil, 0))
		}, 2, []string{"this journal serves as j1-alias.site.example, which its journal CA does not permit (it permits j1.site.example): re-issue the journal CA with that name"}, nil},
		{"a journal CA that permits only the names clients use (localhost, the host name left out)", func(t *testing.T, root, data string) string {
			return "server-names: [j1.site.example]\n" + jcaSettings(journalCAFiles(t, root, "j1", []string{"j1.site.example"}, nil, 0))
		}, 0, []string{"the settings are valid"}, nil},
		{"a journal CA that does not permit the listen address", func(t *testing.T, root, data string) string {
			return "listen: 10.9.8.7:7443\n" + jcaSettings(journalCAFiles(t, root, "j1", nil, nil, 0))
		}, 2, []string{"this journal serves on 10.9.8.7, which its journal CA does not permit"}, nil},
		{"an expired journal CA", func(t *testing.T, root, data string) string {
			return jcaSettings(journalCAFiles(t, root, "j1", nil, nil, -time.Minute))
		}, 2, []string{"the journal CA is valid from", "renew it (docs/ceremony.md)"}, nil},
		{"a journal CA of another root", func(t *testing.T, root, data string) string {
			return jcaSettings(journalCAFiles(t, newRoot(t), "j1", nil, nil, 0))
		}, 2, []string{"is not signed by the domain root this journal trusts (--root-cert)"}, nil},
		{"a journal CA key of another journal CA", func(t *testing.T, root, data string) string {
			cert, _ := journalCAFiles(t, root, "j1", nil, nil, 0)
			_, key := journalCAFiles(t, root, "j1", nil, nil, 0)
			return jcaSettings(cert, key)
		}, 2, []string{"is not the key of journal CA certificate", "pact-journal ca-request"}, nil},
		{"a journal CA key readable by others", func(t *testing.T, root, data string) string {
			cert, key := journalCAFiles(t, root, "j1", nil, nil, 0)
			if err := os.Chmod(key, 0o640); err != nil {
				t.Fatal(err)
			}
			return jcaSettings(cert, key)
		}, 2, []string{"has mode 640; run: chmod 600"}, nil},
		{"the journal CA certificate missing", func(t *testing.T, root, data string) string {
			_, key := journalCAFiles(t, root, "j1", nil, nil, 0)
			return jcaSettings(filepath.Join(root, "none.pem"), key)
		}, 2, []string{"journal CA certificate ROOT/none.pem does not exist", "pact ca sign-journal"}, []string{"--dev"}},
		{"a journal CA certificate without its key", func(t *testing.T, root, data string) string {
			cert, _ := journalCAFiles(t, root, "j1", nil, nil, 0)
			return "root-key: \"\"\njournal-ca-cert: " + cert + "\n"
		}, 2, []string{"--journal-ca-key is required with --journal-ca-cert"}, nil},
		{"a journal CA key location that cannot be", func(t *testing.T, root, data string) string {
			cert, _ := journalCAFiles(t, root, "j1", nil, nil, 0)
			return "root-key: \"\"\njournal-ca-cert: " + cert + "\njournal-ca-key: pkcs11:token=pact;pin-value=1234\n"
		}, 2, []string{"--journal-ca-key: keystore: invalid key location: pkcs11: pin-value is not accepted"}, []string{"1234"}},
		{"the root key beside a journal CA", func(t *testing.T, root, data string) string {
			cert, key := journalCAFiles(t, root, "j1", nil, nil, 0)
			return "journal-ca-cert: " + cert + "\njournal-ca-key: file:" + key + "\n"
		}, 2, []string{"--root-key and --journal-ca-cert/--journal-ca-key exclude each other", "docs/migration.md"}, nil},
		{"two roots of the domain, the journal CA of the second", func(t *testing.T, root, data string) string {
			second := newRoot(t)
			write(t, filepath.Join(root, "roots.pem"), readFile(t, filepath.Join(root, ca.RootCertFile))+readFile(t, filepath.Join(second, ca.RootCertFile)), 0o644)
			return "root-cert: " + filepath.Join(root, "roots.pem") + "\n" + jcaSettings(journalCAFiles(t, second, "j1", nil, nil, 0))
		}, 0, []string{"the settings are valid"}, nil},
		{"roots of two domains", func(t *testing.T, root, data string) string {
			other := t.TempDir()
			if _, err := ca.InitDev(other, "other.example", time.Now()); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(root, "roots.pem"), readFile(t, filepath.Join(root, ca.RootCertFile))+readFile(t, filepath.Join(other, ca.RootCertFile)), 0o644)
			return "root-cert: " + filepath.Join(root, "roots.pem") + "\n" + jcaSettings(journalCAFiles(t, root, "j1", nil, nil, 0))
		}, 2, []string{"the roots name two trust domains, site.example and other.example; a root rollover keeps the domain"}, nil},
		{"--dev makes its root", func(t *testing.T, root, data string) string {
			return "dev: true\nroot-cert: \"\"\nroot-key: \"\"\n"
		}, 0, []string{"the settings are valid"}, nil},
		{"--dev with a root key given that is missing", func(t *testing.T, root, data string) string {
			return "dev: true\nroot-cert: \"\"\nroot-key: " + filepath.Join(root, "none.pem") + "\n"
		}, 2, []string{"root key ROOT/none.pem does not exist; remove --root-key to have --dev make a development root"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := newRoot(t)
			data := filepath.Join(t.TempDir(), "data")
			file := "node-id: j1\ndata-dir: " + data + "\nroot-cert: " + filepath.Join(root, ca.RootCertFile) + "\nroot-key: " + filepath.Join(root, ca.RootKeyFile) + "\n"
			extra := tt.setup(t, root, data)
			// Later keys would be duplicates: the case's settings replace the
			// defaults above by name.
			lines := map[string]bool{}
			for _, l := range strings.Split(extra, "\n") {
				if k, _, ok := strings.Cut(l, ":"); ok {
					lines[k] = true
				}
			}
			var kept []string
			for _, l := range strings.Split(file, "\n") {
				if k, _, ok := strings.Cut(l, ":"); ok && !lines[k] {
					kept = append(kept, l)
				}
			}
			code, out, errOut := runWith(t, strings.Join(kept, "\n")+"\n"+extra, nil, "--check-config")
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tt.code, out, errOut)
			}
			for _, want := range tt.contains {
				want = strings.NewReplacer("ROOT", root, "DATA", data).Replace(want)
				if !strings.Contains(out+errOut, want) {
					t.Errorf("output lacks %q:\n%s%s", want, out, errOut)
				}
			}
			for _, not := range tt.lacks {
				if strings.Contains(out+errOut, not) {
					t.Errorf("output says %q:\n%s%s", not, out, errOut)
				}
			}
			if tt.name != "a data directory a running journal holds" && tt.name != "a removed journal" {
				if _, err := os.Stat(filepath.Join(data, "raft.db")); err == nil {
					t.Errorf("--check-config created %s", filepath.Join(data, "raft.db"))
				}
			}
		})
	}
}

// journalCAFiles makes a journal CA for journal id with the root in rootDir
// as the ceremony does, its key a 0600 file, both in a fresh directory
// (outside any data directory). names nil stands for the names a journal on
// the default --listen serves under; it lives from an hour ago until a
// year from now, or until now+until when until is not 0.
func journalCAFiles(t *testing.T, rootDir, id string, dnsNames []string, ips []net.IP, until time.Duration) (certPath, keyPath string) {
	t.Helper()
	root, err := ca.LoadKeyFileAuthority(filepath.Join(rootDir, ca.RootCertFile), filepath.Join(rootDir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	domain, _ := ca.DomainOf(root.Root())
	if dnsNames == nil && ips == nil {
		dnsNames, ips = journal.ServerNames(journal.DefaultConfig().ListenAddr, nil)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "journal-ca.pem"), filepath.Join(dir, "journal-ca-key.pem")
	key, err := keystore.Generate(keystore.Spec{Backend: keystore.BackendFile, Location: keyPath}, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	notAfter := time.Now().Add(caprofile.DefaultJournalCALifetime)
	if until != 0 {
		notAfter = time.Now().Add(until)
	}
	cert, err := ca.SignJournalCA(root, key.Public(), caprofile.JournalCAParams{Domain: domain, JournalID: id, DNSNames: dnsNames, IPs: ips,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, pki.EncodeCertsPEM(cert.Raw), 0o644); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

// jcaSettings are the settings of a journal CA journal: no root key.
func jcaSettings(certPath, keyPath string) string {
	return "root-key: \"\"\njournal-ca-cert: " + certPath + "\njournal-ca-key: file:" + keyPath + "\n"
}

// pact-journal init stays for trials and the legacy layout, and says so:
// its --help, the command list and its answer send a site to pact ca init
// and docs/ceremony.md.
func TestInitPointsSitesAtTheCeremony(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	for _, tt := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"init --help", []string{"init", "--help"}, 0, []string{"not how a site makes its root", "pact ca init --dir", "pact-journal ca-request", "pact ca sign-journal", "docs/ceremony.md", "docs/migration.md"}},
		{"--help", []string{"--help"}, 0, []string{"for trials and the legacy layout (a site: pact ca init)", "(a site: pact ca issue-admin, then pact admin issue)"}},
		{"admin issue --help", []string{"admin", "issue", "--help"}, 0, []string{"pact ca\nissue-admin", "docs/ceremony.md"}},
		{"init", []string{"init", "--dir", dir, "--domain", "hpc.example.org"}, 0, []string{"The root key is in " + dir + ": fine for a trial; a site makes its root offline with pact ca init and gives each journal a journal CA (docs/ceremony.md)."}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tt.args, envOf(nil), &out, &errb); code != tt.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tt.code, out.String(), errb.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String()+errb.String(), w) {
					t.Errorf("lacks %q:\n%s%s", w, out.String(), errb.String())
				}
			}
		})
	}
}

// The dev journal's banner hints at registering node-001 only while the
// registry is empty: a second make run does not repeat it (the enroll
// would answer that the node exists).
func TestDevBannerHintsAtRegisteringOnlyAnEmptyRegistry(t *testing.T) {
	cfg := journal.DefaultConfig()
	cfg.NodeID, cfg.DataDir = "j1", "/tmp/pact-dev"
	for _, tt := range []struct {
		name       string
		nodes      int
		hasExample bool
		want, not  []string
	}{
		{"first run", 0, false, []string{"bin/pact node enroll node-001", "bin/pact-agent --journal 127.0.0.1:7443", "bin/pact node inspect node-001"}, []string{"already"}},
		{"second run", 1, true, []string{"The registry holds 1 node already, node-001 among them", "bin/pact node list", "bin/pact-agent --journal 127.0.0.1:7443"}, []string{"node enroll"}},
		{"other nodes", 3, false, []string{"The registry holds 3 nodes already", "bin/pact node list"}, []string{"node enroll", "pact-agent"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			printDevBanner(&b, cfg, "127.0.0.1:7443", "pact.local", "ab:cd", tt.nodes, tt.hasExample)
			out := b.String()
			for _, w := range append(tt.want, "export PACT_JOURNAL=127.0.0.1:7443", "Stop with Ctrl-C") {
				if !strings.Contains(out, w) {
					t.Errorf("banner lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(out, n) {
					t.Errorf("banner says %q:\n%s", n, out)
				}
			}
		})
	}
}
