package cli

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/duration"
	"github.com/pact-hpc/pact/internal/settings"
)

// Environment variables read when the matching flag is not given. A flag
// always wins over its variable.
const (
	EnvJournal = "PACT_JOURNAL"
	EnvCA      = "PACT_CA"
	EnvCert    = "PACT_CERT"
	EnvKey     = "PACT_KEY"
)

// Output formats.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// DefaultTimeout bounds each call to one journal.
const DefaultTimeout = 10 * time.Second

// globalFlags are the persistent flags of the root command, as parsed.
// --journal, --ca, --cert and --key are settings (internal/settings, as in
// pact-journal and pact-agent): a flag, or else its PACT_* variable.
type globalFlags struct {
	set      *settings.Set
	journal  string
	ca       string
	cert     string
	key      string
	output   string
	timeout  time.Duration
	flagsSet func(name string) bool
}

func (g *globalFlags) register(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	g.set = settings.New("pact")
	g.set.String(&g.journal, "journal", EnvJournal, "journal address host:port; several, comma-separated, are tried in order")
	g.set.String(&g.ca, "ca", EnvCA, "PEM file of the domain root CA, ca.pem")
	g.set.String(&g.cert, "cert", EnvCert, "PEM file of your admin client certificate")
	g.set.String(&g.key, "key", EnvKey, "PEM file of your admin client key")
	g.set.Register(f)
	f.StringVarP(&g.output, "output", "o", outputTable, "output format: table or json")
	f.Var(duration.NewValue(&g.timeout, DefaultTimeout), "timeout", "how long to wait for each journal, e.g. 10s or 2m")
	g.flagsSet = func(name string) bool { return f.Changed(name) }
}

// Config is what a command needs to reach the journal: the global flags
// resolved against the environment.
type Config struct {
	Journals []string // host:port, in the order to try them
	CAFile   string
	CertFile string
	KeyFile  string
	Output   string // "table" or "json"
	Timeout  time.Duration
}

// resolveOutput checks -o on its own: commands that never reach the
// journal (version) still honour it.
func (g *globalFlags) resolveOutput() (string, error) {
	switch g.output {
	case outputTable, outputJSON:
		return g.output, nil
	}
	return "", fmt.Errorf("unknown output format %q: use -o table or -o json", g.output)
}

// resolve merges flags with the environment (flags win) and reports every
// problem at once.
func (g *globalFlags) resolve(getenv func(string) string) (Config, []error) {
	var cfg Config
	var problems []error
	// An empty variable counts as unset, as it always has for the CLI.
	// String settings cannot fail to parse.
	_ = g.set.Resolve(func(k string) (string, bool) { v := getenv(k); return v, v != "" })
	out, err := g.resolveOutput()
	if err != nil {
		problems = append(problems, err)
	}
	cfg.Output = out
	if g.timeout <= 0 {
		problems = append(problems, fmt.Errorf("--timeout %s: must be positive, e.g. --timeout 10s", g.timeout))
	}
	cfg.Timeout = g.timeout

	journal := strings.TrimSpace(g.journal)
	if journal == "" {
		problems = append(problems, fmt.Errorf("no journal address: pass --journal host:port or set %s (make run prints the exports)", EnvJournal))
	}
	for _, a := range strings.Split(journal, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if err := checkAddr(a); err != nil {
			problems = append(problems, err)
			continue
		}
		cfg.Journals = append(cfg.Journals, a)
	}
	if journal != "" && len(cfg.Journals) == 0 && len(problems) == 0 {
		problems = append(problems, fmt.Errorf("no journal address in %q: pass --journal host:port", journal))
	}

	cfg.CAFile = strings.TrimSpace(g.ca)
	if cfg.CAFile == "" {
		problems = append(problems, fmt.Errorf("no CA bundle: pass --ca FILE or set %s to the domain root, ca.pem (make run prints the exports)", EnvCA))
	}
	cfg.CertFile = strings.TrimSpace(g.cert)
	if cfg.CertFile == "" {
		problems = append(problems, fmt.Errorf("no admin certificate: pass --cert FILE or set %s (make run prints the exports)", EnvCert))
	}
	cfg.KeyFile = strings.TrimSpace(g.key)
	if cfg.KeyFile == "" {
		problems = append(problems, fmt.Errorf("no admin key: pass --key FILE or set %s (make run prints the exports)", EnvKey))
	}
	return cfg, problems
}

var errBadAddr = errors.New("bad journal address")

// checkAddr accepts host:port with a numeric port; IPv6 hosts in brackets.
func checkAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err == nil && host == "" {
		err = errors.New("missing host")
	}
	if err == nil {
		var n uint64
		n, err = strconv.ParseUint(port, 10, 16)
		if err == nil && n == 0 {
			err = errors.New("port 0")
		}
	}
	if err != nil {
		return fmt.Errorf("%w %q: want host:port, e.g. 127.0.0.1:PORT or [::1]:PORT as printed by make run", errBadAddr, a)
	}
	return nil
}
