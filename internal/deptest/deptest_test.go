package deptest

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what Forbid reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.errs = append(r.errs, "fatal: "+fmt.Sprintf(format, args...))
}

// The journal links every package of JournalOnly but its own and bolt's
// predecessor: Forbid must name them, or the binaries' tests prove nothing.
func TestForbidNamesWhatTheJournalLinks(t *testing.T) {
	r := &recorder{TB: t}
	Forbid(r, []string{"github.com/pact-hpc/pact/cmd/pact-journal"}, JournalOnly...)
	got := strings.Join(r.errs, "\n")
	for _, want := range []string{
		"imports github.com/hashicorp/raft\n",
		"imports github.com/hashicorp/go-msgpack/",
		"imports go.etcd.io/bbolt\n",
		"imports github.com/pact-hpc/pact/journal\n",
		"imports github.com/pact-hpc/pact/raftfsm\n",
	} {
		if !strings.Contains(got+"\n", want) {
			t.Errorf("Forbid did not report %q; it reported:\n%s", want, got)
		}
	}
	if strings.Contains(got, "fatal") {
		t.Errorf("Forbid failed: %s", got)
	}
}

// TestOnly must name the linter as a binary would link it: Forbid over
// zlint itself reports zlint and zcrypto.
func TestForbidNamesTheTestOnlyLinter(t *testing.T) {
	r := &recorder{TB: t}
	Forbid(r, []string{"github.com/zmap/zlint/v3"}, TestOnly...)
	got := strings.Join(r.errs, "\n")
	for _, want := range []string{
		"imports github.com/zmap/zlint/v3\n",
		"imports github.com/zmap/zcrypto/x509\n",
	} {
		if !strings.Contains(got+"\n", want) {
			t.Errorf("Forbid did not report %q; it reported:\n%s", want, got)
		}
	}
	if strings.Contains(got, "fatal") {
		t.Errorf("Forbid failed: %s", got)
	}
}
