package agentmain

import (
	"bytes"
	"strings"
	"testing"
)

// pact-agent's command line on cobra (issue 42): status and tpm-ek are
// reached with their help and flags (-o as before), a long flag may still
// be written with one dash, and a misspelt command or flag is answered
// with the name meant, exit 2.
func TestCommandLine(t *testing.T) {
	env := func(k string) (string, bool) { return "", false }
	for _, tt := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"--help", []string{"--help"}, 0, []string{"--journal list", "(PACT_JOURNAL)", "--check-config", "--version"}},
		{"status --help", []string{"status", "--help"}, 0, []string{"pact-agent status shows the identity", "--status-socket string", "-o string", `(default "table")`}},
		{"tpm-ek --help", []string{"tpm-ek", "--help"}, 0, []string{"pact-agent tpm-ek [--tpm-device DEV]", "--tpm-device string", `(default "text")`}},
		{"status -o yaml", []string{"status", "-o", "yaml"}, 2, []string{`pact-agent status: -o "yaml": want table or json`}},
		{"status --o yaml", []string{"status", "--o=yaml"}, 2, []string{`pact-agent status: -o "yaml": want table or json`}},
		{"tpm-ek -o yaml", []string{"tpm-ek", "-o", "yaml"}, 2, []string{`pact-agent tpm-ek: -o "yaml": want text or json`}},
		{"-version", []string{"-version"}, 0, []string{"pact-agent "}},
		{"one dash bad value", []string{"-log-level", "loud", "-check-config"}, 2, []string{`--log-level: "loud": want debug, info, warn or error`}},
		{"misspelt command", []string{"stauts"}, 2, []string{`pact-agent: unexpected argument "stauts"; did you mean status? (see pact-agent --help)`}},
		{"misspelt flag", []string{"--bmc-seral", "x"}, 2, []string{"pact-agent: unknown flag: --bmc-seral; did you mean --bmc-serial? (see pact-agent --help)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, env, &out, &errb)
			if code != tt.code {
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
