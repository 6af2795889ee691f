package journal

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pact-hpc/pact/internal/logkey"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// metrics are the journal's Prometheus metrics (pact_journal_*).
type metrics struct {
	reg              *prometheus.Registry
	enroll           *prometheus.CounterVec
	enrollFailures   *prometheus.CounterVec
	identityWarnings prometheus.Counter
	renew            *prometheus.CounterVec
	applySeconds     *prometheus.HistogramVec
}

func newMetrics(j *Journal) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		enroll: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_enroll_total",
			Help: "Enroll calls by result: ok, retry (same key, same certificate), takeover, refused, rate_limited, error.",
		}, []string{"result"}),
		enrollFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_enroll_failures_total",
			Help: "Refused enrollments by reason (never written to Raft).",
		}, []string{"reason"}),
		identityWarnings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pact_journal_enroll_identity_failure_warnings_total",
			Help: "Times one hardware identity crossed the repeated-failure threshold.",
		}),
		renew: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_renew_total",
			Help: "RenewCert calls by result.",
		}, []string{"result"}),
		applySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pact_journal_raft_apply_seconds",
			Help:    "Time from proposal to applied result, by command.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"op"}),
	}
	m.reg.MustRegister(m.enroll, m.enrollFailures, m.identityWarnings, m.renew, m.applySeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_enroll_in_flight", Help: "Enrollments being worked on."},
			func() float64 { return float64(j.gate.inFlight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_streams_open", Help: "Agent streams held by this journal."},
			func() float64 { return float64(j.hub.total()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_is_leader", Help: "1 if this journal is the Raft leader."},
			func() float64 {
				if j.raft.State() == raft.Leader {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_intermediate_expiry_seconds", Help: "Seconds until this journal's intermediate expires."},
			func() float64 { return time.Until(j.ca.Intermediate().NotAfter).Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pact_journal_audit_export_dropped_total", Help: "Audit entries dropped from the JSON-lines export because the writer fell behind."},
			func() float64 {
				if j.audit == nil {
					return 0
				}
				return float64(j.audit.dropped.Load())
			}),
		&nodeCollector{fsm: j.fsm},
	)
	return m
}

// nodeCollector reports the registry by state at scrape time.
type nodeCollector struct{ fsm *raftfsm.FSM }

var nodesDesc = prometheus.NewDesc("pact_journal_nodes", "Registered nodes by state.", []string{"state"}, nil)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- nodesDesc }

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[pactv1.NodeState]int{}
	for _, n := range c.fsm.Nodes(raftfsm.Filter{}) {
		counts[n.GetState()]++
	}
	for _, s := range []pactv1.NodeState{pactv1.NodeState_NODE_STATE_REGISTERED, pactv1.NodeState_NODE_STATE_ACTIVE, pactv1.NodeState_NODE_STATE_INACTIVE, pactv1.NodeState_NODE_STATE_REVOKED} {
		ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(counts[s]), raftfsm.StateName(s))
	}
}

// opName labels a command for metrics.
func opName(cmd *pactv1.Command) string {
	switch cmd.GetOp().(type) {
	case *pactv1.Command_RegisterNode:
		return "register"
	case *pactv1.Command_Activate:
		return "activate"
	case *pactv1.Command_Renew:
		return "renew"
	case *pactv1.Command_PublishIntermediate:
		return "publish_intermediate"
	case *pactv1.Command_Decommission:
		return "decommission"
	case *pactv1.Command_Assign:
		return "assign"
	case *pactv1.Command_LivenessDigest:
		return "liveness_digest"
	case *pactv1.Command_MarkInactive:
		return "mark_inactive"
	}
	return "unknown"
}

// serveMetrics serves /metrics, /healthz and /readyz until the journal
// stops. /readyz is 200 only while this journal serves with a leader known
// and an intermediate that has not expired.
func (j *Journal) serveMetrics() (net.Listener, error) {
	lis, err := net.Listen("tcp", j.cfg.MetricsListen)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(j.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := j.ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			j.log.Error("metrics server stopped", logkey.Err, err)
		}
	}()
	go func() {
		<-j.stop
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	return lis, nil
}

func (j *Journal) ready() error {
	if j.server == nil {
		return errors.New("not serving yet")
	}
	if addr, _ := j.raft.LeaderWithID(); addr == "" {
		return errors.New("no Raft leader")
	}
	if j.cfg.Clock.Now().After(j.ca.Intermediate().NotAfter) {
		return errors.New("intermediate certificate expired")
	}
	return nil
}
