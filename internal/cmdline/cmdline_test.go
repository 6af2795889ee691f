package cmdline

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/settings"
)

func TestCommand(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		ran  bool
		out  []string
	}{
		{"good", []string{"--name", "x"}, nil, 0, true, nil},
		{"one dash, as Go's flag took it", []string{"-name=x", "-plain", "3"}, nil, 0, true, nil},
		{"help", []string{"--help"}, nil, 0, false, []string{"Usage of test", "--name string", "(PACT_NAME)", "--plain int", `(default "1")`}},
		{"help with one dash", []string{"-help"}, nil, 0, false, []string{"Usage of test"}},
		{"unknown flag", []string{"--nme", "x"}, nil, 2, false, []string{"test: unknown flag: --nme; did you mean --name? (see test --help)"}},
		{"stray argument", []string{"extra"}, nil, 2, false, []string{`test: unexpected argument "extra" (see test --help)`}},
		{"misspelt subcommand", []string{"stauts"}, nil, 2, false, []string{`test: unexpected argument "stauts"; did you mean status? (see test --help)`}},
		{"subcommand", []string{"status", "-o", "json"}, nil, 0, false, []string{"status json"}},
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
			ran := false
			s := settings.New("test")
			s.String(&name, "name", "PACT_NAME", "a name")
			log.Declare(s)
			env := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			root := Command("test", "", "Usage of test\n", s, func(cmd *cobra.Command) int {
				if !Resolve(cmd, s, env) {
					return 2
				}
				ran = true
				return 0
			})
			root.Flags().Int("plain", 1, "a plain flag")
			Subcommands(root)
			var o string
			status := Command("status", "", "Usage of status\n", nil, func(*cobra.Command) int {
				fmt.Fprintf(&out, "status %s\n", o)
				return 0
			})
			status.Flags().StringVarP(&o, "o", "o", "table", "output")
			root.AddCommand(status)
			code := Execute(root, tt.args, &out, &out)
			if code != tt.code || ran != tt.ran {
				t.Fatalf("Execute = %d, ran %v; want %d, %v\n%s", code, ran, tt.code, tt.ran, out.String())
			}
			for _, want := range tt.out {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			if tt.ran {
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

// A command line written for Go's flag package (one dash) reads the same;
// a value that starts with a dash stays the value.
func TestOneDash(t *testing.T) {
	root := &cobra.Command{Use: "x"}
	root.Flags().String("node-id", "", "")
	root.Flags().Bool("dev", false, "")
	root.Flags().StringP("o", "o", "", "")
	for _, tt := range []struct{ in, want []string }{
		{[]string{"-node-id", "j1", "-dev", "-o", "json"}, []string{"--node-id", "j1", "--dev", "-o", "json"}},
		{[]string{"-node-id=j1", "-dev=false"}, []string{"--node-id=j1", "--dev=false"}},
		{[]string{"--node-id", "-dev"}, []string{"--node-id", "-dev"}},
		{[]string{"-node-id", "-dev", "-dev"}, []string{"--node-id", "-dev", "--dev"}},
		{[]string{"-help"}, []string{"--help"}},
		{[]string{"-nope", "--", "-dev"}, []string{"-nope", "--", "-dev"}},
		{[]string{}, []string{}},
	} {
		if got := OneDash(root, tt.in); !slices.Equal(got, tt.want) || got == nil {
			t.Errorf("OneDash(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
