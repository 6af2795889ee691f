package journal

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/raftnode"
	"github.com/pact-hpc/pact/journal/v1rpc"
)

// MetricsRegistry is the journal's Prometheus registry: the monitoring
// tests read what it registers (dist/monitoring names nothing else) and
// its counters after the journal stopped serving /metrics.
func (j *Journal) MetricsRegistry() *prometheus.Registry { return j.metrics.reg }

// PresetCounterSeries is, for every labelled counter of the journal, the
// series it has from the start, made from the lists the code counts by:
// each a set of label name, value pairs that at least one series has (all
// of its labels for a vector; the port alone for the connection limiters'
// counters, which report every limit of a port at every scrape).
func (j *Journal) PresetCounterSeries() map[string][][]string {
	one := func(label string, values []string) [][]string {
		var out [][]string
		for _, v := range values {
			out = append(out, []string{label, v})
		}
		return out
	}
	var handshakes [][]string
	for _, p := range metricPorts {
		for _, r := range auth.HandshakeReasons {
			handshakes = append(handshakes, []string{"port", p, "reason", r})
		}
	}
	return map[string][][]string{
		"pact_journal_enroll_total":                     one("result", enrollResults),
		"pact_journal_renew_total":                      one("result", renewResults),
		"pact_journal_boot_policy_verdicts_total":       one("verdict", bootVerdicts),
		"pact_journal_attestations_total":               one("result", attestResults),
		"pact_journal_enroll_failures_total":            one("reason", wireReasons()),
		"pact_journal_auth_refused_total":               one("reason", wireReasons()),
		"pact_journal_enroll_credential_refusals_total": one("credential", j.credentialKinds()),
		"pact_journal_stream_drops_total":               one("reason", v1rpc.DropReasons),
		"pact_journal_handshakes_refused_total":         handshakes,
		"pact_journal_peer_refused_total":               one("reason", raftnode.PeerRefusalReasons),
		"pact_journal_connections_refused_total":        one("port", metricPorts),
		"pact_journal_connections_busy_total":           one("port", metricPorts),
		"pact_journal_enroll_claimed_elsewhere_total":   one("policy", ClaimPolicies),
	}
}
