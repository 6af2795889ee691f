package journal_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/monitoringtest"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// Every labelled counter a shipped rule or dashboard panel reads
// (dist/monitoring) is exported at 0 for every label value the journal can
// count, before anything happened: increase() and rate() see nothing of a
// series whose first sample is already 1, so a counter that appeared with
// its first JOIN_TOKEN_REQUIRED refusal fired PactEnrollCredentialRefused
// only at the third (docs/monitoring.md, "Every series from the start").
func TestShippedCountersStartAtZero(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	reg := h.J.MetricsRegistry()
	labelled := monitoringtest.Labelled(t, reg)
	preset := h.J.PresetCounterSeries()
	reads := monitoringtest.Reads(t, monitoringtest.Load(t, monitoringtest.Dir(t)), func(name string) bool {
		return !strings.HasPrefix(name, "pact_agent_")
	})
	checked := 0
	for name, where := range reads {
		if !strings.HasSuffix(name, "_total") {
			continue
		}
		series := monitoringtest.Series(t, reg, name)
		if labelled[name] == nil {
			// An unlabelled counter: one series, at 0.
			if v, ok := series[""]; !ok || v != 0 {
				t.Errorf("%s (read by %s) = %v (present: %v) on a fresh journal, want 0", name, where[0], v, ok)
			}
			continue
		}
		want, ok := preset[name]
		if !ok {
			t.Errorf("%s{%s} (read by %s) has no label values set from the start", name, strings.Join(labelled[name], ","), where[0])
			continue
		}
		if len(want) == 0 {
			t.Errorf("%s: the code lists no label values", name)
		}
		for _, labels := range want {
			n := 0
			for key, v := range series {
				if !hasPairs(key, labels) {
					continue
				}
				n++
				if v != 0 {
					t.Errorf("%s{%s} = %v on a fresh journal, want 0", name, key, v)
				}
			}
			if n == 0 {
				t.Errorf("%s has no series %v on a fresh journal (read by %s)", name, labels, strings.Join(where, "; "))
			}
			checked++
		}
	}
	// The counters the issue named: the JOIN_TOKEN_REQUIRED refusal, its
	// wire reason and the results the dashboards draw.
	for _, s := range []struct{ name, label, value string }{
		{"pact_journal_enroll_credential_refusals_total", "credential", "join_token"},
		{"pact_journal_enroll_failures_total", "reason", "JOIN_TOKEN_REQUIRED"},
		{"pact_journal_auth_refused_total", "reason", "STALE_CERTIFICATE"},
		{"pact_journal_enroll_total", "result", "refused"},
		{"pact_journal_renew_total", "result", "rate_limited"},
		{"pact_journal_peer_refused_total", "reason", "quorum_mismatch"},
	} {
		if _, ok := monitoringtest.Series(t, reg, s.name)[monitoringtest.Key(s.label, s.value)]; !ok {
			t.Errorf("no series %s{%s=%q} on a fresh journal", s.name, s.label, s.value)
		}
	}
	if checked < 100 {
		t.Errorf("only %d preset series checked", checked)
	}
}

// hasPairs reports whether a Series key holds every name, value pair.
func hasPairs(key string, pairs []string) bool {
	have := strings.Split(key, ",")
	for i := 0; i+1 < len(pairs); i += 2 {
		if !slices.Contains(have, pairs[i]+"="+pairs[i+1]) {
			return false
		}
	}
	return true
}
