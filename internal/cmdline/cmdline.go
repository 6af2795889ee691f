// Package cmdline is the command line of pact-journal and pact-agent
// (their mains and subcommands), on top of internal/settings: parsing the
// flags and resolving the settings (Parse, Subcommand), --help (SetUsage),
// reporting configuration problems before anything starts
// (ReportProblems), and --log-format and --log-level with the slog logger
// they name (Logging, NewLogger).
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/pact-hpc/pact/internal/settings"
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

// Parse parses a daemon's command line into fs (the settings of s,
// registered with s.Register, and any plain flags beside them), then
// resolves s against the environment and the configuration file. When it
// returns false the command ends with the exit code it gives: 0 for
// --help, 2 for bad usage or a bad setting, each problem on its own line.
func Parse(s *settings.Set, fs *flag.FlagSet, args []string, env settings.Env) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q (see %s --help)\n", fs.Name(), fs.Arg(0), fs.Name())
		return 2, false
	}
	if err := s.Resolve(env); err != nil {
		ReportProblems(fs.Output(), fs.Name(), err)
		return 2, false
	}
	return 0, true
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

// SetUsage makes fs's --help print usage, then the settings of s (with
// their variables and defaults), then fs's flags that are not settings.
func SetUsage(fs *flag.FlagSet, s *settings.Set, usage string) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprint(w, usage)
		s.PrintDefaults(w)
		fs.VisitAll(func(f *flag.Flag) {
			if _, ok := s.Lookup(f.Name); ok {
				return
			}
			dash := "--"
			if len(f.Name) == 1 {
				dash = "-"
			}
			kind, usage := flag.UnquoteUsage(f)
			if kind != "" {
				kind = " " + kind
			}
			fmt.Fprintf(w, "  %s%s%s\n    \t%s", dash, f.Name, kind, usage)
			if f.DefValue != "" && f.DefValue != "false" {
				fmt.Fprintf(w, " (default %q)", f.DefValue)
			}
			fmt.Fprintln(w)
		})
	}
}

// Subcommand makes the flag set of a subcommand: declare adds its settings
// (a flag and a variable each; subcommands read no configuration file)
// and plain flags beside them. Parse it with Parse.
func Subcommand(name, usage string, stderr io.Writer, declare func(*settings.Set, *flag.FlagSet)) (*settings.Set, *flag.FlagSet) {
	s := settings.New(name)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	declare(s, fs)
	s.Register(fs)
	SetUsage(fs, s, usage)
	return s, fs
}
