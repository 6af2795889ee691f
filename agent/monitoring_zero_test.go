package agent

import (
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/monitoringtest"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// Every pact_agent_ counter a shipped rule or dashboard panel reads is
// exported at 0, for every reason the agent classifies a failure by, by an
// agent that has done nothing yet: increase() sees nothing of a series
// born at 1 (docs/monitoring.md, "Every series from the start").
func TestShippedAgentCountersStartAtZero(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.MetricsListen = "127.0.0.1:0"
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := a.metrics.registry()
	labelled := monitoringtest.Labelled(t, reg)
	// The label values each labelled counter has from the start, from the
	// lists the agent counts by.
	preset := map[string]map[string][]string{
		"pact_agent_cert_renewal_failures_total": {"reason": allReasons},
	}
	reads := monitoringtest.Reads(t, monitoringtest.Load(t, monitoringtest.Dir(t)), func(name string) bool {
		return strings.HasPrefix(name, "pact_agent_")
	})
	checked := 0
	for name, where := range reads {
		if !strings.HasSuffix(name, "_total") {
			continue
		}
		series := monitoringtest.Series(t, reg, name)
		if labelled[name] == nil {
			if v, ok := series[""]; !ok || v != 0 {
				t.Errorf("%s (read by %s) = %v (present: %v) on a fresh agent, want 0", name, where[0], v, ok)
			}
			checked++
			continue
		}
		want, ok := preset[name]
		if !ok {
			t.Errorf("%s{%s} (read by %s) has no label values set from the start", name, strings.Join(labelled[name], ","), where[0])
			continue
		}
		for label, values := range want {
			for _, v := range values {
				got, ok := series[monitoringtest.Key(label, v)]
				if !ok || got != 0 {
					t.Errorf("%s{%s=%q} = %v (present: %v) on a fresh agent, want 0", name, label, v, got, ok)
				}
				checked++
			}
		}
	}
	if checked < len(allReasons)+2 {
		t.Errorf("only %d series checked", checked)
	}
}
