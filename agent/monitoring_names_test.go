package agent

import (
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/monitoringtest"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// Every pact_agent_ metric the shipped rules and dashboards
// (dist/monitoring) use is one an agent serving /metrics registers.
func TestShippedMonitoringUsesAgentMetrics(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.MetricsListen = "127.0.0.1:0"
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	names := monitoringtest.Registered(t, a.metrics.registry(), a.metrics.registry())
	if !names["pact_agent_clock_skew_seconds"] {
		t.Fatalf("the agent's registry does not list pact_agent_clock_skew_seconds: %v", names)
	}
	s := monitoringtest.Load(t, monitoringtest.Dir(t))
	if n := monitoringtest.Check(t, s, names, func(name string) bool { return strings.HasPrefix(name, "pact_agent_") }); n < 10 {
		t.Errorf("only %d uses of agent metrics checked", n)
	}
}
