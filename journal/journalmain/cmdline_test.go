package journalmain

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/journal/ca"
)

// pact-journal's command line on cobra (issue 42): every subcommand is
// reached and has its help, a long flag may still be written with one
// dash as Go's flag package took it, and a misspelt command or flag is
// answered with the name meant, exit 2.
func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	if _, err := ca.InitDev(dir, "site.example", time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"--help", []string{"--help"}, 0, []string{"pact-journal runs one node of the pact journal", "--node-id string", "--check-config", "--version"}},
		{"-h", []string{"-h"}, 0, []string{"pact-journal runs one node of the pact journal"}},
		{"init --help", []string{"init", "--help"}, 0, []string{"pact-journal init creates a domain root CA", "--dir string", "--domain string"}},
		{"admin issue --help", []string{"admin", "issue", "--help"}, 0, []string{"pact-journal admin issue signs", "--data-dir string", "(PACT_DATA_DIR)", "--lifetime", `(default "7d")`}},
		{"admin alone", []string{"admin"}, 2, []string{"pact-journal admin issue signs"}},
		{"admin misspelt", []string{"admin", "isue"}, 2, []string{`unknown command "isue" for "pact-journal admin"; did you mean issue?`}},
		{"ca-request --help", []string{"ca-request", "--help"}, 0, []string{"pact-journal ca-request makes", "--journal-id string", "--out string"}},
		{"restore --help", []string{"restore", "--help"}, 0, []string{"pact-journal restore seeds", "--snapshot string"}},
		{"recover --help", []string{"recover", "--help"}, 0, []string{"pact-journal recover makes", "--members string", "--even-if-quorum-answers", "--raft-listen string"}},
		{"help init", []string{"help", "init"}, 0, []string{"pact-journal init creates a domain root CA"}},
		{"-version", []string{"-version"}, 0, []string{"pact-journal "}},
		{"one dash", []string{"-data-dir", dir, "-node-id=j7", "-check-config"}, 0, []string{"the settings are valid"}},
		{"misspelt command", []string{"inti"}, 2, []string{`pact-journal: unexpected argument "inti"; did you mean init? (see pact-journal --help)`}},
		{"misspelt flag", []string{"--nod-id", "j1"}, 2, []string{"pact-journal: unknown flag: --nod-id; did you mean --node-id? (see pact-journal --help)"}},
		{"subcommand's misspelt flag", []string{"restore", "--snapshoot", "f"}, 2, []string{"pact-journal restore: unknown flag: --snapshoot; did you mean --snapshot? (see pact-journal restore --help)"}},
		{"flag without its value", []string{"--data-dir"}, 2, []string{"flag needs an argument: --data-dir"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, envOf(nil), &out, &errb)
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
