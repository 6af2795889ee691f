// Package cli is pact, the operator command line of a pact domain. It
// registers nodes with the journal (one at a time or from a CSV file),
// assigns them to vClusters, decommissions them, shows the enrollment
// registry and its audit trail, and shows and changes the journal quorum.
//
// Main does everything; cmd/pact only calls it. Each command checks its
// arguments locally and reports every problem at once before it talks to the
// journal, over mTLS with the operator's admin credential. Errors end the run
// with an exit code from ExitCode (see docs/exit-codes.md) and a message that says
// what to do next.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/cmdline"
	"github.com/pact-hpc/pact/internal/version"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Env is the outside world one run of the CLI sees.
type Env struct {
	// Stdin is read by "pact node enroll --batch -"; nil reads nothing.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// IsTerminal reports whether a stream is an interactive terminal; it
	// decides whether a long batch shows a progress line on Stderr. Nil
	// means never.
	IsTerminal func(w io.Writer) bool
	// Getenv reads PACT_* variables; nil reads nothing.
	Getenv func(string) string
	// Now is the clock for certificate validity, relative times, --since
	// and the progress rate; nil means time.Now.
	Now func() time.Time
	// Sleep waits before a retry, returning early with ctx's error; nil
	// waits on a real timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Jitter draws the random part of a retry's wait (internal/backoff):
	// a uniform duration in [0, n); nil draws from math/rand/v2.
	Jitter func(n time.Duration) time.Duration
}

func (e Env) withDefaults() Env {
	if e.Stdin == nil {
		e.Stdin = strings.NewReader("")
	}
	if e.Stdout == nil {
		e.Stdout = io.Discard
	}
	if e.Stderr == nil {
		e.Stderr = io.Discard
	}
	if e.Getenv == nil {
		e.Getenv = func(string) string { return "" }
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	if e.IsTerminal == nil {
		e.IsTerminal = func(io.Writer) bool { return false }
	}
	if e.Sleep == nil {
		e.Sleep = sleep
	}
	return e
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// isTerminal reports whether w is a character device (a terminal), with
// no dependency beyond os: it is how Main decides to show progress.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Main runs pact with args (without the program name) against the process
// environment and returns the exit code. Interrupt and SIGTERM cancel the
// call in flight.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, Env{
		Stdin: os.Stdin, Stdout: stdout, Stderr: stderr,
		Getenv: os.Getenv, Now: time.Now, IsTerminal: isTerminal,
	})
}

// Run is Main with the environment passed in.
func Run(ctx context.Context, args []string, env Env) int {
	a := &app{env: env.withDefaults()}
	a.newClient = a.dial
	return a.run(ctx, args)
}

// app is one run of the CLI: its environment, the global flags and whether
// a command got as far as running.
type app struct {
	env   Env
	flags globalFlags
	// ran is set once a command's own code starts; an error before that is
	// cobra refusing the command line.
	ran bool
	// newClient connects to the journals; tests may replace it.
	newClient func(Config, *credential) (pactv1.AdminServiceClient, io.Closer, error)
}

func (a *app) run(ctx context.Context, args []string) int {
	root := a.rootCommand()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var usage *UsageError
	if !a.ran && !errors.As(err, &usage) {
		path := root.CommandPath()
		if cmd != nil {
			path = cmd.CommandPath()
		}
		err = &UsageError{Command: path, Problems: []error{err}}
	}
	fmt.Fprintf(a.env.Stderr, "pact: %s\n", plainMessage(err.Error()))
	return ExitCode(err)
}

// action wraps a command's RunE so that run knows the command line was
// accepted.
func (a *app) action(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.ran = true
		return fn(cmd, args)
	}
}

// rootCommand builds the whole command tree. Each call returns a fresh tree
// bound to a, so tests can run many in one process.
func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "pact",
		Short: "Operate a pact domain: register, assign and decommission nodes; read the registry and its audit trail",
		Long: `pact is the operator CLI of a pact domain. A pact journal quorum keeps the
enrollment registry: which hardware may join the domain and the certificate
each node holds. Operators pre-register nodes by hardware identity with
"pact node enroll" (one node, or thousands from a CSV file with --batch);
when a node boots, its agent enrolls with matching hardware and receives a
short-lived certificate. "pact node assign|unassign|move" place nodes in
vClusters, "pact node decommission" revokes one, "pact node fence" quarantines
one without forgetting it, "pact node token" makes single-use join tokens
for nodes registered with --require-token, and "pact audit" shows who
changed what. "pact journal status|add|remove" show and change the quorum of
journals itself, and "pact journal snapshot save|inspect" back it up;
"pact journal intermediates|retire-intermediate|revoke-ca" its signing
certificates and journal CAs.
"pact admin list|issue|renew|revoke" manage operator credentials.
"pact ca init|sign-journal|issue-admin|show" is the offline ceremony that
makes the domain root and each journal's CA (it needs no journal).

Every command that talks to the journal needs an address and an admin
credential. Pass them as flags or set the environment (flags win):

  PACT_JOURNAL  journal address(es), host:port[,host:port...]
  PACT_CA       the domain root certificate, ca.pem
  PACT_CERT     your admin certificate
  PACT_KEY      your admin private key

"make run" starts a development journal and prints these exports.

Exit codes: 0 ok, 1 internal, 2 usage, 3 not found, 4 already exists,
5 permission denied, 6 failed precondition, 7 journal unavailable,
8 rate limited.`,
		Example: `  # Point pact at a development journal
  export PACT_JOURNAL=127.0.0.1:7443 PACT_CA=ca.pem PACT_CERT=admin.pem PACT_KEY=admin-key.pem

  # Register a node, then watch it become active when its agent enrolls
  pact node enroll node-001 --mac 52:54:00:12:34:56 --bmc-serial SN123
  pact node list --state active

  # Register a rack from a CSV file (see docs/batch.md), then put a node to work
  pact node enroll --batch rack-12.csv
  pact node assign node-001 --vcluster ml

  # What changed in the last hour
  pact audit --since 1h

  # Which journal leads, and is every journal up?
  pact journal status

  # Try a second journal if the first cannot be reached
  pact --journal 10.0.0.1:7443,10.0.0.2:7443 node inspect node-001 -o json`,
		Version:       version.Get().String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		CompletionOptions: cobra.CompletionOptions{
			HiddenDefaultCmd: true,
		},
	}
	root.SetOut(a.env.Stdout)
	root.SetErr(a.env.Stderr)
	root.SetVersionTemplate("pact {{.Version}}\n")
	root.SetFlagErrorFunc(cmdline.FlagError)
	a.flags.register(root)
	root.Flags().Bool("version", false, "print pact's version") // no -v: keep it free
	a.group(root)
	root.AddCommand(a.nodeCommand(), a.journalCommand(), a.domainCommand(), a.bootPolicyCommand(), a.adminCommand(), a.auditCommand(), a.caCommand(), a.versionCommand())
	return root
}

// group makes cmd a command that only holds subcommands: alone it prints
// its help; with an unknown subcommand it is a usage error.
func (a *app) group(cmd *cobra.Command) {
	cmd.Args = cobra.ArbitraryArgs
	cmd.DisableSuggestions = true // cmdline.Suggestions, as the daemons
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return c.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if s := cmdline.Suggestions(c, args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return &UsageError{Command: c.CommandPath(), Problems: []error{errors.New(msg)}}
	}
}

// session is a command's connection to the journal.
type session struct {
	cfg    Config
	cred   *credential
	client pactv1.AdminServiceClient
	closer io.Closer
}

func (s *session) close() {
	if s.closer != nil {
		_ = s.closer.Close()
	}
}

// connect resolves the global flags and the credential, adds them to the
// command's own problems (local) and, if there are none at all, prepares a
// client. No network traffic happens until the first call.
func (a *app) connect(cmd *cobra.Command, local []error) (*session, error) {
	cfg, problems := a.flags.resolve(a.env.Getenv)
	problems = append(local, problems...)
	var cred *credential
	if cfg.CAFile != "" && cfg.CertFile != "" && cfg.KeyFile != "" {
		var p []error
		cred, p = loadCredential(cfg)
		problems = append(problems, p...)
	}
	if err := newUsage(cmd.CommandPath(), problems...); err != nil {
		return nil, err
	}
	if err := cred.checkTime(cfg.CertFile, a.env.Now()); err != nil {
		return nil, err
	}
	client, closer, err := a.newClient(cfg, cred)
	if err != nil {
		return nil, err
	}
	return &session{cfg: cfg, cred: cred, client: client, closer: closer}, nil
}

// dial is the production newClient.
func (a *app) dial(cfg Config, cred *credential) (pactv1.AdminServiceClient, io.Closer, error) {
	js, err := dialJournals(cfg, cred, a.env.Now)
	if err != nil {
		return nil, nil, err
	}
	return pactv1.NewAdminServiceClient(js), js, nil
}
