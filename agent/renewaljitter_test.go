package agent

import (
	"testing"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
)

// A certificate's renewal time is fraction of its life plus a draw of up
// to a twentieth of it from the agent's jitter (backoff.Jitter), the same
// source its retries draw from, so a test can know it.
func TestRenewalTimeDrawsFromTheAgentsJitter(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	ca := identitytest.NewCA("pact.local", t0)
	id := ca.Issue(identity.SourceJournal, "spiffe://pact.local/pact-agent/n1", t0, t0.Add(20*time.Hour))
	var asked time.Duration
	longest := func(n time.Duration) time.Duration { asked = n; return n - 1 }
	got := renewalTimeWith(id, 0.5, longest)
	if asked != time.Hour {
		t.Errorf("the jitter was asked for a draw below %v, want a twentieth of the life (1h)", asked)
	}
	if want := t0.Add(11*time.Hour - 1); !got.Equal(want) {
		t.Errorf("renewal at t0+%v, want half the life plus the longest draw (t0+%v)", got.Sub(t0), want.Sub(t0))
	}
}
