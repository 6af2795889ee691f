package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pact-hpc/pact/identity"
)

// metrics are the agent's Prometheus metrics, on a registry of its own.
type metrics struct {
	reg      *prometheus.Registry
	attempts prometheus.Counter
	failures *prometheus.CounterVec
	busy     prometheus.Counter
}

// allReasons are pre-set to zero so every failure series exists from the
// start.
var allReasons = []string{
	ReasonEndpointUnreachable, ReasonServerTLSUntrusted, ReasonCertExpired,
	ReasonRevoked, ReasonFenced, ReasonCertReplaced, ReasonSPIREBundleUntrusted, ReasonTrustDomainNotAccepted,
	ReasonSPIFFEIDUnmapped, ReasonIdentityRefused,
	ReasonClockSkew, ReasonDiskFull, ReasonRateLimited, ReasonJournalUnavailable, ReasonEnrollmentRefused, ReasonOther,
}

func newMetrics(a *Agent) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		attempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pact_agent_cert_renewal_attempts_total",
			Help: "Attempts to obtain a certificate or move the journal channel to one: enrollments, renewals, source changes and reconnections.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_agent_cert_renewal_failures_total",
			Help: "Failed attempts (as counted by pact_agent_cert_renewal_attempts_total) and failed identity file writes, by classified reason.",
		}, []string{"reason"}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pact_agent_journal_busy_total",
			Help: "Attempts a journal answered busy before its TLS handshake, naming when to come back (not failures: the backoff does not grow).",
		}),
	}
	for _, r := range allReasons {
		m.failures.WithLabelValues(r)
	}
	m.reg.MustRegister(
		m.attempts,
		m.failures,
		m.busy,
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
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for _, src := range []identity.Source{identity.SourceSPIRE, identity.SourceJournal, identity.SourceStatic} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
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
	return m
}
