package journal_test

import (
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/monitoringtest"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// Every metric name the shipped rules and dashboards (dist/monitoring) use,
// but the agent's, is one a running journal registers (or one a shipped
// recording rule defines, or Prometheus's own up).
func TestShippedMonitoringUsesJournalMetrics(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	// An enrollment observes the histograms, so their _bucket, _sum and
	// _count series are known by type.
	h.Register(t, "n1", "SN1", mac1)
	if _, err := h.Enroll(t, journaltest.NewKey(t), "SN1", mac1); err != nil {
		t.Fatal(err)
	}
	reg := h.J.MetricsRegistry()
	names := monitoringtest.Registered(t, reg, reg)
	for _, n := range []string{"pact_journal_is_leader", "pact_journal_stream_drops_total", "pact_journal_raft_apply_seconds_bucket", "process_resident_memory_bytes",
		// Where a connection spends its time before it is served, per
		// port (issue 39): the storm benchmark reads them.
		"pact_journal_handshake_slot_wait_seconds_bucket", "pact_journal_handshake_seconds_bucket", "pact_journal_first_call_seconds_bucket"} {
		if !names[n] {
			t.Fatalf("the journal's registry does not list %s: %v", n, names)
		}
	}
	s := monitoringtest.Load(t, monitoringtest.Dir(t))
	if n := monitoringtest.Check(t, s, names, func(name string) bool { return !strings.HasPrefix(name, "pact_agent_") }); n < 100 {
		t.Errorf("only %d uses of journal metrics checked", n)
	}
}
