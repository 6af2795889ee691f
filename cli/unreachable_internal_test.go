package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
)

// make run and make cluster are named only for the development layouts'
// own addresses; a site's journals are told what is true of them.
func TestUnreachableAdviceNamesMakeRunOnlyForTheDevelopmentAddress(t *testing.T) {
	s := &session{cfg: Config{Timeout: 5 * time.Second}}
	refused := func(addr string) Attempt {
		return Attempt{Addr: addr, Err: &apierr.Error{Message: "connection refused"}}
	}
	for _, tt := range []struct {
		name     string
		attempts []Attempt
		want     []string
		not      []string
	}{
		{"the development journal", []Attempt{refused("127.0.0.1:7443")}, []string{"no journal took a connection at 127.0.0.1:7443", "the development journals start with make run"}, []string{"make cluster"}},
		{"make cluster's journals", []Attempt{refused("127.0.0.1:7451"), refused("127.0.0.1:7452")}, []string{"start with make cluster"}, []string{"make run"}},
		{"a site's journals", []Attempt{refused("10.0.0.1:7443"), refused("10.0.0.2:7443")}, []string{"no journal took a connection at 10.0.0.1:7443, 10.0.0.2:7443", "systemctl status pact-journal"}, []string{"make"}},
		{"one down, one not serving", []Attempt{refused("10.0.0.1:7443"), {Addr: "10.0.0.2:7443", Connected: true, Stalled: true, Err: &apierr.Error{Message: "context deadline exceeded"}}},
			[]string{"no journal took a connection at 10.0.0.1:7443:", "10.0.0.2:7443 took the connection but did not answer within 5s", "until it has a leader"}, []string{"make"}},
		{"a journal's own answer says it", []Attempt{{Addr: "10.0.0.1:7443", Connected: true, Err: &apierr.Error{Reason: apierr.NoLeader, Message: "no leader"}}}, nil, []string{"no journal took a connection", "make"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := s.explainUnreachable(&UnreachableError{Attempts: tt.attempts})
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Errorf("says %q:\n%s", n, got)
				}
			}
		})
	}
}
