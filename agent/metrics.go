package agent

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pact-hpc/pact/identity"
)

// metrics are the agent's Prometheus metrics. The counts are plain
// atomics the agent always keeps; the registry that exposes them, with the
// gauges read from the agent, is built the first time it is asked for
// (registry: the /metrics handler, tests). An agent that serves no
// /metrics (no --metrics-listen; each of the storm benchmark's thousands
// of agents in one process) never builds it: a registry with its
// descriptors, the failure series pre-set per reason and the gauges'
// closures were some 10 KB per agent, for nothing.
type metrics struct {
	a        *Agent
	attempts atomic.Uint64
	busy     atomic.Uint64

	mu       sync.Mutex
	failures map[string]uint64 // by reason; only reasons that happened

	once sync.Once
	reg  *prometheus.Registry
}

// failed counts a failure of reason.
func (m *metrics) failed(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failures == nil {
		m.failures = map[string]uint64{}
	}
	m.failures[reason]++
}

func (m *metrics) failureCounts() map[string]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]uint64, len(allReasons)+len(m.failures))
	for _, r := range allReasons {
		out[r] = 0
	}
	maps.Copy(out, m.failures)
	return out
}

// failuresDesc is pact_agent_cert_renewal_failures_total's.
var failuresDesc = prometheus.NewDesc("pact_agent_cert_renewal_failures_total",
	"Failed attempts (as counted by pact_agent_cert_renewal_attempts_total) and failed identity file writes, by classified reason.",
	[]string{"reason"}, nil)

// failuresCollector exposes the failure counts: every reason of
// allReasons (zero until it happens) and any other that happened.
type failuresCollector struct{ m *metrics }

func (c failuresCollector) Describe(ch chan<- *prometheus.Desc) { ch <- failuresDesc }

func (c failuresCollector) Collect(ch chan<- prometheus.Metric) {
	for r, n := range c.m.failureCounts() {
		ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.CounterValue, float64(n), r)
	}
}

// allReasons are pre-set to zero so every failure series exists from the
// start.
var allReasons = []string{
	ReasonEndpointUnreachable, ReasonServerTLSUntrusted, ReasonCertExpired,
	ReasonRevoked, ReasonFenced, ReasonCertReplaced, ReasonSPIREBundleUntrusted, ReasonTrustDomainNotAccepted,
	ReasonSPIFFEIDUnmapped, ReasonIdentityRefused,
	ReasonClockSkew, ReasonDiskFull, ReasonRateLimited, ReasonJournalUnavailable, ReasonEnrollmentRefused, ReasonActiveInAnotherDomain, ReasonOther,
}

func newMetrics(a *Agent) *metrics { return &metrics{a: a} }

// registry is the agent's registry, built on first use.
func (m *metrics) registry() *prometheus.Registry {
	m.once.Do(func() { m.reg = m.build() })
	return m.reg
}

func (m *metrics) build() *prometheus.Registry {
	a := m.a
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "pact_agent_cert_renewal_attempts_total",
			Help: "Attempts to obtain a certificate or move the journal channel to one: enrollments, renewals, source changes and reconnections.",
		}, func() float64 { return float64(m.attempts.Load()) }),
		failuresCollector{m},
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "pact_agent_journal_busy_total",
			Help: "Attempts a journal answered busy before its TLS handshake, naming when to come back (not failures: the backoff does not grow).",
		}, func() float64 { return float64(m.busy.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pact_agent_clock_skew_seconds",
			Help: "This node's clock minus the journal's, as last measured from a journal's answer (positive: the node is ahead).",
		}, func() float64 { return time.Duration(a.clk.measured.Load()).Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pact_agent_clock_offset_seconds",
			Help: "What the agent adds to its clock for certificate decisions (the journal's time as it knows it); non-zero means its clock is being bridged.",
		}, func() float64 { return a.clk.Offset().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pact_agent_cert_expiry_seconds",
			Help: "Seconds until the certificate of the active channel expires (negative once expired, 0 without one).",
		}, func() float64 {
			ch := a.rot.Active()
			if ch == nil {
				return 0
			}
			return ch.Identity().NotAfter.Sub(a.cfg.Clock.Now()).Seconds()
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pact_agent_last_successful_stream_timestamp_seconds",
			Help: "When the agent last held an open Subscribe stream to a journal (now while it holds one), Unix seconds; 0 if never.",
		}, func() float64 {
			t := a.lastStream()
			if t.IsZero() {
				return 0
			}
			return float64(t.UnixNano()) / 1e9
		}),
	)
	if a.cfg.MetricsListen != "" {
		// The process's own figures, only where /metrics is served: a
		// process running many agents (the storm benchmark) builds none.
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for _, src := range []identity.Source{identity.SourceSPIRE, identity.SourceJournal, identity.SourceStatic} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "pact_agent_identity_source",
			Help:        "1 for the source of the identity the active channel presents (spire, journal or static), 0 for the others.",
			ConstLabels: prometheus.Labels{"source": string(src)},
		}, func() float64 {
			if ch := a.rot.Active(); ch != nil && ch.Identity().Source == src {
				return 1
			}
			return 0
		}))
	}
	return reg
}
