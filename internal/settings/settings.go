// Package settings is the one flag, environment and configuration-file
// layer of pact's binaries. A command declares each setting once (its
// name, environment variable, help and target); the same name is its
// command-line flag and its key in the YAML configuration file, so every
// setting is reachable all three ways. Resolve applies, in order, the
// defaults already in the targets, the file, the environment and the
// command line: a flag wins over its variable, which wins over the file.
//
// Every problem is reported at once, each as an *Error that says where it
// came from (file and line, variable, or flag) and what to do; a command
// starts only when Resolve returns nil.
package settings

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/pact-hpc/pact/internal/duration"
)

// Sentinel errors, matched with errors.Is on an *Error.
var (
	// ErrUnknownKey: the configuration file names no setting of the
	// command.
	ErrUnknownKey = errors.New("unknown setting")
	// ErrBadValue: a value does not parse as its setting's type, or its
	// setting refuses it.
	ErrBadValue = errors.New("bad value")
	// ErrFile: the configuration file cannot be read or is not YAML.
	ErrFile = errors.New("bad configuration file")
)

// Source says where a value came from.
type Source int

// The sources, lowest precedence first.
const (
	FromFile Source = iota + 1
	FromEnv
	FromFlag
)

func (s Source) String() string {
	switch s {
	case FromFile:
		return "file"
	case FromEnv:
		return "environment"
	case FromFlag:
		return "flag"
	}
	return "unknown source"
}

// Error is one problem with one value.
type Error struct {
	Source Source
	// File and Line locate a problem in the configuration file; Line is 0
	// when the file as a whole is at fault (unreadable, not YAML without a
	// position).
	File string
	Line int
	// Name is the setting (or, for ErrUnknownKey, the key as written);
	// Env the variable when Source is FromEnv.
	Name string
	Env  string
	// Reason is ErrUnknownKey, ErrBadValue or ErrFile; Err says what is
	// wrong and what to do.
	Reason error
	Err    error
}

func (e *Error) Error() string {
	var where string
	switch {
	case e.Source == FromFile && e.Line > 0:
		where = fmt.Sprintf("%s:%d: ", e.File, e.Line)
	case e.Source == FromFile:
		where = e.File + ": "
	case e.Source == FromEnv:
		where = e.Env + ": "
	case e.Source == FromFlag:
		where = "--" + e.Name + ": "
	}
	if e.Source == FromFile && e.Reason == ErrBadValue && e.Name != "" {
		where += e.Name + ": "
	}
	return where + e.Err.Error()
}

// Unwrap gives errors.Is the sentinel and errors.As the detail.
func (e *Error) Unwrap() []error { return []error{e.Reason, e.Err} }

// Setting is one declared setting.
type Setting struct {
	Name  string
	Env   string
	Usage string
	// Kind names the value type in help and messages: string, bool, int,
	// uint, duration, list.
	Kind string
	// Default is the default as printed by --help.
	Default string

	apply func(raw []string) error // one layer's values
	reset func()                   // back to the default
	list  bool                     // several values (a list, or a repeated flag)
	file  bool                     // may appear in the configuration file

	given []string // from the command line, in order
	set   bool     // given on the command line
}

// Set is every setting of one command.
type Set struct {
	prog     string
	settings []*Setting
	byName   map[string]*Setting
	config   *Setting // the setting naming the configuration file
	env      map[string]bool
}

// New starts the settings of the command prog (used in messages, e.g.
// "see pact-journal --help").
func New(prog string) *Set {
	return &Set{prog: prog, byName: map[string]*Setting{}, env: map[string]bool{}}
}

// Settings lists the settings in the order they were declared.
func (s *Set) Settings() []*Setting { return slices.Clone(s.settings) }

// Lookup finds a setting by name.
func (s *Set) Lookup(name string) (*Setting, bool) {
	st, ok := s.byName[name]
	return st, ok
}

func (s *Set) add(st *Setting) *Setting {
	if st.Name == "" || strings.ContainsAny(st.Name, " =.") {
		panic("settings: bad name " + strconv.Quote(st.Name))
	}
	if _, dup := s.byName[st.Name]; dup {
		panic("settings: " + st.Name + " declared twice")
	}
	if st.Env != "" {
		if s.env[st.Env] {
			panic("settings: variable " + st.Env + " declared twice")
		}
		s.env[st.Env] = true
	}
	st.file = true
	s.settings = append(s.settings, st)
	s.byName[st.Name] = st
	return st
}

func scalar(raw []string) (string, error) {
	if len(raw) == 0 {
		return "", errors.New("no value")
	}
	return raw[len(raw)-1], nil
}

// String declares a string setting with its default in *p.
func (s *Set) String(p *string, name, env, usage string) {
	def := *p
	s.add(&Setting{Name: name, Env: env, Usage: usage, Kind: "string", Default: def,
		reset: func() { *p = def },
		apply: func(raw []string) error {
			v, err := scalar(raw)
			*p = v
			return err
		}})
}

// Bool declares a boolean setting (true/false, 1/0) with its default in *p.
func (s *Set) Bool(p *bool, name, env, usage string) {
	def := *p
	s.add(&Setting{Name: name, Env: env, Usage: usage, Kind: "bool", Default: strconv.FormatBool(def),
		reset: func() { *p = def },
		apply: func(raw []string) error {
			v, err := scalar(raw)
			if err != nil {
				return err
			}
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%s is not a boolean: write true or false", quote(v))
			}
			*p = b
			return nil
		}})
}

// Int declares an integer setting with its default in *p.
func (s *Set) Int(p *int, name, env, usage string) {
	def := *p
	s.add(&Setting{Name: name, Env: env, Usage: usage, Kind: "int", Default: strconv.Itoa(def),
		reset: func() { *p = def },
		apply: func(raw []string) error {
			v, err := scalar(raw)
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("%s is not a whole number", quote(v))
			}
			*p = n
			return nil
		}})
}

// Uint64 declares a non-negative integer setting with its default in *p.
func (s *Set) Uint64(p *uint64, name, env, usage string) {
	def := *p
	s.add(&Setting{Name: name, Env: env, Usage: usage, Kind: "uint", Default: strconv.FormatUint(def, 10),
		reset: func() { *p = def },
		apply: func(raw []string) error {
			v, err := scalar(raw)
			if err != nil {
				return err
			}
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return fmt.Errorf("%s is not a whole number of 0 or more", quote(v))
			}
			*p = n
			return nil
		}})
}

// Duration declares a duration setting with its default in *p. A value
// is read with duration.Parse, the syntax of every pact binary: Go's
// (72h, 30m, 1h30m) plus days (3d, 1d12h).
func (s *Set) Duration(p *time.Duration, name, env, usage string) {
	def := *p
	s.add(&Setting{Name: name, Env: env, Usage: usage, Kind: "duration", Default: duration.Format(def),
		reset: func() { *p = def },
		apply: func(raw []string) error {
			v, err := scalar(raw)
			if err != nil {
				return err
			}
			d, err := duration.Parse(strings.TrimSpace(v))
			if err != nil {
				return err
			}
			*p = d
			return nil
		}})
}

// List declares a list of strings. A flag or variable takes a
// comma-separated list (a repeated flag adds to it); the file takes a YAML
// sequence or a comma-separated string. Each source replaces the list of
// the source below it.
func (s *Set) List(p *[]string, name, env, usage string) {
	def := slices.Clone(*p)
	s.add(&Setting{Name: name, Env: env, Usage: usage, Kind: "list", Default: strings.Join(def, ","), list: true,
		reset: func() { *p = slices.Clone(def) },
		apply: func(raw []string) error {
			var out []string
			for _, r := range raw {
				for _, v := range strings.Split(r, ",") {
					if v = strings.TrimSpace(v); v != "" {
						out = append(out, v)
					}
				}
			}
			*p = out
			return nil
		}})
}

// Func declares a setting of a type the command parses itself: parse gets
// the value of the winning source (after those below it); def is the
// default as --help shows it, and reset restores the default.
func (s *Set) Func(name, env, usage, kind, def string, parse func(string) error, reset func()) {
	s.add(&Setting{Name: name, Env: env, Usage: usage, Kind: kind, Default: def,
		reset: reset,
		apply: func(raw []string) error {
			v, err := scalar(raw)
			if err != nil {
				return err
			}
			if err := parse(v); err != nil {
				return fmt.Errorf("%s: %w", quote(v), err)
			}
			return nil
		}})
}

// FuncList is Func for a list the command parses itself: parse gets the
// items of the winning source (a comma-separated flag or variable, a
// repeated flag, or a YAML sequence).
func (s *Set) FuncList(name, env, usage, def string, parse func([]string) error, reset func()) {
	s.add(&Setting{Name: name, Env: env, Usage: usage, Kind: "list", Default: def, list: true,
		reset: reset,
		apply: func(raw []string) error {
			var items []string
			for _, r := range raw {
				for _, v := range strings.Split(r, ",") {
					if v = strings.TrimSpace(v); v != "" {
						items = append(items, v)
					}
				}
			}
			return parse(items)
		}})
}

// ConfigFile declares the setting that names the configuration file
// (--config, and env): it cannot be set in the file itself.
func (s *Set) ConfigFile(p *string, name, env, usage string) {
	s.String(p, name, env, usage)
	st := s.byName[name]
	st.file = false
	s.config = st
}

// quote shows a value in a message, cut short so a huge or binary value
// cannot flood a terminal.
func quote(v string) string {
	const max = 64
	if len(v) > max {
		v = v[:max] + "..."
	}
	return strconv.Quote(v)
}

// recorder is what pflag sees: it keeps what the command line says and
// leaves applying it to Resolve, so the layers apply in order.
type recorder struct{ st *Setting }

func (r recorder) String() string {
	if r.st == nil {
		return ""
	}
	return r.st.Default
}

func (r recorder) Set(v string) error {
	if !r.st.list {
		r.st.given = r.st.given[:0]
	}
	r.st.given = append(r.st.given, v)
	r.st.set = true
	return nil
}

// Type names the value's kind in pflag's messages.
func (r recorder) Type() string {
	if r.st == nil {
		return ""
	}
	return r.st.Kind
}

// Usage is the help line of a setting: its text and its variable.
func (st *Setting) usage() string {
	if st.Env == "" {
		return st.Usage
	}
	return st.Usage + " (" + st.Env + ")"
}

// PrintDefaults writes the help of every setting, one per flag, with each
// one's kind, variable and default.
func (s *Set) PrintDefaults(w io.Writer) {
	for _, st := range s.settings {
		kind := " " + st.Kind
		if st.Kind == "bool" {
			kind = ""
		}
		fmt.Fprintf(w, "  --%s%s\n    \t%s", st.Name, kind, strings.ReplaceAll(st.usage(), "\n", "\n    \t"))
		switch {
		case st.Kind == "bool" && st.Default == "false", st.Default == "", st.Default == "0" && st.Kind != "int":
		case st.Kind == "string":
			fmt.Fprintf(w, " (default %q)", st.Default)
		default:
			fmt.Fprintf(w, " (default %s)", st.Default)
		}
		fmt.Fprintln(w)
	}
}

// Register adds every setting to fs as a flag (a bool one takes no
// argument: --dev is --dev=true). What the command line gives is applied
// by Resolve, over the file and the environment. Flags that are not
// settings (--version, --help) can be added to fs beside them.
func (s *Set) Register(fs *pflag.FlagSet) {
	for _, st := range s.settings {
		f := fs.VarPF(recorder{st}, st.Name, "", st.usage())
		if st.Kind == "bool" {
			f.NoOptDefVal = "true"
		}
	}
}

// Env looks a variable up; os.LookupEnv is one. A variable set to the
// empty string is set: it gives the setting an empty value.
type Env func(string) (string, bool)

// Resolve applies, over the defaults, the configuration file (named by
// the ConfigFile setting, from the command line or its variable), the
// environment and the command line, in that order. It returns every
// problem joined; each is an *Error. On error the targets may hold part of
// the values and must not be used.
func (s *Set) Resolve(env Env) error {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	for _, st := range s.settings {
		st.reset()
	}
	var errs []error
	fileValues := map[string]FileValue{}
	if s.config != nil {
		path := ""
		if v, ok := env(s.config.Env); ok && s.config.Env != "" {
			path = v
		}
		if s.config.set {
			path = s.config.given[len(s.config.given)-1]
		}
		if path != "" {
			data, err := readFile(path)
			if err != nil {
				errs = append(errs, &Error{Source: FromFile, File: path, Name: s.config.Name, Reason: ErrFile,
					Err: fmt.Errorf("cannot read the configuration file: %v; give --%s an existing file or unset %s", errors.Unwrap(err), s.config.Name, s.config.Env)})
			} else {
				var ferrs []error
				fileValues, ferrs = s.ParseFile(path, data)
				errs = append(errs, ferrs...)
			}
		}
	}
	for _, st := range s.settings {
		if v, ok := fileValues[st.Name]; ok {
			if err := st.apply(v.Raw); err != nil {
				errs = append(errs, &Error{Source: FromFile, File: v.File, Line: v.Line, Name: st.Name, Reason: ErrBadValue, Err: err})
			}
		}
		if st.Env != "" {
			if v, ok := env(st.Env); ok {
				if err := st.apply([]string{v}); err != nil {
					errs = append(errs, &Error{Source: FromEnv, Env: st.Env, Name: st.Name, Reason: ErrBadValue, Err: err})
				}
			}
		}
		if st.set {
			if err := st.apply(st.given); err != nil {
				errs = append(errs, &Error{Source: FromFlag, Name: st.Name, Reason: ErrBadValue, Err: err})
			}
		}
	}
	// In reading order: the file line by line, then the environment, then
	// the command line.
	slices.SortStableFunc(errs, func(a, b error) int {
		ea, eb := a.(*Error), b.(*Error)
		if ea.Source != eb.Source {
			return int(ea.Source - eb.Source)
		}
		return ea.Line - eb.Line
	})
	return errors.Join(errs...)
}

// readFile reads at most MaxFileSize+1 bytes: ParseFile refuses more.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxFileSize+1))
}
