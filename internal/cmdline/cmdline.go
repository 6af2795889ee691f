// Package cmdline is the command line of pact-journal and pact-agent
// (their mains and subcommands) on cobra and pflag, as pact's, with
// internal/settings the one place a setting is declared: a command whose
// flags are its settings and plain flags beside them (Command), run with
// an exit code (Execute, Exit), its settings resolved against the
// environment and the configuration file (Resolve), --help as the
// command's usage text and its flags (with each setting's variable and
// default), configuration problems reported before anything starts
// (ReportProblems), "did you mean" for a misspelt command or flag, from
// internal/suggest as for every pact binary (Suggestions), and
// --log-format and --log-level with the slog logger they name (Logging,
// NewLogger).
package cmdline

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pact-hpc/pact/internal/settings"
	"github.com/pact-hpc/pact/internal/suggest"
)

// Logging is the --log-format and --log-level settings of a daemon.
type Logging struct {
	Format string
	Level  string
}

// Declare adds --log-format (PACT_LOG_FORMAT) and --log-level
// (PACT_LOG_LEVEL), checked as they are read so a bad value in the file
// is reported with its line.
func (l *Logging) Declare(s *settings.Set) {
	l.Format, l.Level = "text", "info"
	s.Func("log-format", "PACT_LOG_FORMAT", "log format: text or json", "string", "text", func(v string) error {
		if v != "text" && v != "json" {
			return errors.New("want text or json")
		}
		l.Format = v
		return nil
	}, func() { l.Format = "text" })
	s.Func("log-level", "PACT_LOG_LEVEL", "log level: debug, info, warn or error", "string", "info", func(v string) error {
		var lvl slog.Level
		if err := lvl.UnmarshalText([]byte(v)); err != nil {
			return errors.New("want debug, info, warn or error")
		}
		l.Level = v
		return nil
	}, func() { l.Level = "info" })
}

// Logger builds the logger the settings name.
func (l Logging) Logger(w io.Writer) (*slog.Logger, error) { return NewLogger(w, l.Format, l.Level) }

// NewLogger builds a text or JSON slog logger at the named level.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// Command makes a command of a daemon: use is its name (with what
// follows it in a usage line), usage its help text, printed by --help
// before its flags (it ends with "Flags:\n"), s its settings (nil for
// none), registered as its flags. Plain flags go beside them on
// cmd.Flags(). run gives the exit code; it runs once the command line
// parsed, and takes no arguments: a stray one is bad usage (exit 2).
func Command(use, short, usage string, s *settings.Set, run func(cmd *cobra.Command) int) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   use,
		Short:                 short,
		Long:                  usage,
		Args:                  noArgs,
		SilenceErrors:         true,
		SilenceUsage:          true,
		DisableFlagsInUseLine: true,
		DisableSuggestions:    true, // Suggestions, for every pact binary
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Exit(run(cmd))
		},
	}
	if s != nil {
		s.Register(cmd.Flags())
	}
	cmd.SetHelpFunc(func(c *cobra.Command, _ []string) { printHelp(c, s) })
	return cmd
}

// Group makes cmd a command that holds subcommands: its usage text is
// printed, and the exit code is 2, when it is run without one; an unknown
// one is bad usage, with the names it may have meant.
func Group(cmd *cobra.Command) {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			fmt.Fprint(c.ErrOrStderr(), c.Long)
			return Exit(2)
		}
		return unknownCommand(c, args[0])
	}
}

// Subcommands makes a command that runs itself (a daemon) also hold
// subcommands: a first argument that names none is bad usage, with the
// names it may have meant.
func Subcommands(cmd *cobra.Command) {
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unexpected argument %q", args[0])
		if near := Suggestions(c, args[0]); len(near) > 0 {
			msg += "; did you mean " + strings.Join(near, " or ") + "?"
		}
		return errors.New(msg)
	}
}

func unknownCommand(c *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown command %q for %q", word, c.CommandPath())
	if near := Suggestions(c, word); len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return errors.New(msg)
}

func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q", args[0])
	}
	return nil
}

// Suggestions are the subcommands of cmd (names and aliases) an operator
// who typed word probably meant: internal/suggest, the one "did you
// mean" of pact's binaries (commands, flags, configuration keys and
// operator names).
func Suggestions(cmd *cobra.Command, word string) []string {
	var names []string
	for _, c := range cmd.Commands() {
		if !c.IsAvailableCommand() && c.Name() != "help" {
			continue
		}
		names = append(names, c.Name())
		names = append(names, c.Aliases...)
	}
	return suggest.Closest(word, names)
}

// FlagError adds to pflag's "unknown flag: --nope" the flags the operator
// may have meant; it is every pact binary's cobra FlagErrorFunc.
func FlagError(cmd *cobra.Command, err error) error {
	var notExist *pflag.NotExistError
	if !errors.As(err, &notExist) {
		return err
	}
	name := notExist.GetSpecifiedName()
	if name == "" {
		return err
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && len(f.Name) > 1 {
			names = append(names, f.Name)
		}
	})
	near := suggest.Closest(name, names)
	if len(near) == 0 {
		return err
	}
	for i, n := range near {
		near[i] = "--" + n
	}
	return fmt.Errorf("%w; did you mean %s?", err, strings.Join(near, " or "))
}

// ExitError ends a command with an exit code; Execute returns it.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit %d", e.Code) }

// Exit is the error that ends a command with code: nil for 0.
func Exit(code int) error {
	if code == 0 {
		return nil
	}
	return &ExitError{Code: code}
}

// Execute runs root (its flags and subcommands) on args, writing help and
// problems to stderr, and returns the exit code: the code the command
// ends with (Exit), 0 for --help, 2 for a command line that does not
// parse, said in one line with where to look.
//
// Long flags are written with two dashes, as pflag reads them; one dash
// (-data-dir, -version), as Go's flag package took them and older scripts
// may still write them, is taken too.
func Execute(root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(FlagError)
	root.SetArgs(OneDash(root, args))
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var exit *ExitError
	if errors.As(err, &exit) {
		return exit.Code
	}
	if cmd == nil {
		cmd = root
	}
	fmt.Fprintf(stderr, "%s: %v (see %s --help)\n", cmd.CommandPath(), err, cmd.CommandPath())
	return 2
}

// OneDash rewrites -name[=value] as --name[=value] where name is a long
// flag of root or of one of its subcommands (or --help), so a command line
// written for Go's flag package parses the same with pflag. The value of
// a flag that takes one (--node-id -x) is left alone, as are arguments
// after "--" and single-letter flags (-o, -h).
func OneDash(root *cobra.Command, args []string) []string {
	// long maps each long flag to whether it takes a value.
	long := map[string]bool{"help": false}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if len(f.Name) > 1 {
				long[f.Name] = f.NoOptDefVal == ""
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	out := make([]string, 0, len(args))
	value := false // args[i] is the value of the flag before it
	for i, a := range args {
		if value {
			out = append(out, a)
			value = false
			continue
		}
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' {
			name, _, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
			if takes, ok := long[name]; ok {
				value = takes && !hasValue
				if a[1] != '-' {
					a = "-" + a
				}
			}
		}
		out = append(out, a)
	}
	return out
}

// Resolve resolves s (whose flags cmd parsed) against env and the
// configuration file. When it returns false the command ends with exit
// code 2: every problem was reported, one per line.
func Resolve(cmd *cobra.Command, s *settings.Set, env settings.Env) bool {
	if err := s.Resolve(env); err != nil {
		ReportProblems(cmd.ErrOrStderr(), cmd.CommandPath(), err)
		return false
	}
	return true
}

// ReportProblems prints what settings.Resolve or a Validate found, one
// problem per line, and that nothing was started.
func ReportProblems(w io.Writer, prog string, err error) {
	var lines []string
	n := 0
	var walk func(error)
	walk = func(err error) {
		// Into errors.Join only (its text is its parts' one per line),
		// not into an error that wraps several causes in one message.
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			parts := j.Unwrap()
			texts := make([]string, len(parts))
			for i, e := range parts {
				texts[i] = e.Error()
			}
			if len(parts) > 0 && err.Error() == strings.Join(texts, "\n") {
				for _, e := range parts {
					walk(e)
				}
				return
			}
		}
		n++
		lines = append(lines, strings.Split(err.Error(), "\n")...)
	}
	walk(err)
	noun := "problem"
	if n > 1 {
		noun = "problems"
	}
	fmt.Fprintf(w, "%s: %d configuration %s; nothing was started:\n", prog, n, noun)
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

// printHelp is --help: the usage text, then the settings of s (with
// their variables and defaults), then cmd's flags that are not settings.
// It goes to stderr, as the daemons' help always has.
func printHelp(cmd *cobra.Command, s *settings.Set) {
	w := cmd.ErrOrStderr()
	fmt.Fprint(w, cmd.Long)
	if s != nil {
		s.PrintDefaults(w)
	}
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Hidden {
			return
		}
		if s != nil {
			if _, ok := s.Lookup(f.Name); ok {
				return
			}
		}
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		kind, usage := pflag.UnquoteUsage(f)
		if kind != "" && f.NoOptDefVal == "" {
			kind = " " + kind
		} else {
			kind = ""
		}
		fmt.Fprintf(w, "  %s%s%s\n    \t%s", dash, f.Name, kind, usage)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %q)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}
