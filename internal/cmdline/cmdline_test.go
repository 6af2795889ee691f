package cmdline

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/settings"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		ok   bool
		out  []string
	}{
		{"good", []string{"--name", "x"}, nil, 0, true, nil},
		{"help", []string{"--help"}, nil, 0, false, []string{"Usage of test", "--name string", "(PACT_NAME)", "--plain int"}},
		{"unknown flag", []string{"--nope"}, nil, 2, false, []string{"flag provided but not defined"}},
		{"stray argument", []string{"extra"}, nil, 2, false, []string{`unexpected argument "extra" (see test --help)`}},
		{"bad values everywhere", []string{"--log-level", "loud"}, map[string]string{"PACT_LOG_FORMAT": "xml"}, 2, false, []string{
			"test: 2 configuration problems; nothing was started:",
			"  PACT_LOG_FORMAT: \"xml\": want text or json",
			"  --log-level: \"loud\": want debug, info, warn or error",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			var name string
			var log Logging
			s, fs := Subcommand("test", "Usage of test\n", &out, func(s *settings.Set, fs *flag.FlagSet) {
				s.String(&name, "name", "PACT_NAME", "a name")
				log.Declare(s)
				fs.Int("plain", 1, "a plain flag")
			})
			code, ok := Parse(s, fs, tt.args, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if code != tt.code || ok != tt.ok {
				t.Fatalf("Parse = %d, %v; want %d, %v\n%s", code, ok, tt.code, tt.ok, out.String())
			}
			for _, want := range tt.out {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			if tt.ok {
				if _, err := log.Logger(&out); err != nil || name != "x" {
					t.Errorf("name %q, logger %v", name, err)
				}
			}
		})
	}
}

// A Validate error (several joined, some on several lines) prints one
// problem per line.
func TestReportProblems(t *testing.T) {
	var out bytes.Buffer
	ReportProblems(&out, "pact-x", errors.Join(errors.New("a"), errors.Join(errors.New("b"), errors.New("c\nd"))))
	want := "pact-x: 3 configuration problems; nothing was started:\n  a\n  b\n  c\n  d\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}
