package journal

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/journal/connlimit"
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
	bootVerdicts     *prometheus.CounterVec
	attestations     *prometheus.CounterVec
	unconfirmed      prometheus.Counter
	authRefused      *prometheus.CounterVec
	applySeconds     *prometheus.HistogramVec
	// credentialRefusals counts enrollments refused by a credential
	// beside the hardware match, by credential kind.
	credentialRefusals *prometheus.CounterVec
	streamsRefused     prometheus.Counter
	// activationBatch observes how many activations each proposal this
	// journal sends carries (1: alone).
	activationBatch prometheus.Histogram
	// streamDrops and handshakesRefused: monitoring.go.
	streamDrops       *prometheus.CounterVec
	streamHandovers   prometheus.Counter
	handshakesRefused *prometheus.CounterVec
}

func newMetrics(j *Journal) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		enroll: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_enroll_total",
			Help: "Enroll calls by result: ok, retry (same key, same certificate), takeover, tpm_challenge (round one of TPM attestation), refused, rate_limited, error.",
		}, []string{"result"}),
		enrollFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_enroll_failures_total",
			Help: "Refused enrollments by reason (never written to Raft).",
		}, []string{"reason"}),
		identityWarnings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pact_journal_enroll_identity_failure_warnings_total",
			Help: "Times one hardware identity crossed the repeated-failure threshold.",
		}),
		unconfirmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pact_journal_unconfirmed_refusals_total",
			Help: "Final refusals this journal could not confirm with the leader and answered NO_LEADER instead.",
		}),
		bootVerdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_boot_policy_verdicts_total",
			Help: "Boot policy evaluations of TPM nodes' quotes at enrollment and renewal, by verdict: match, observed (a mismatch let through: observe mode or action), refused, fenced.",
		}, []string{"verdict"}),
		attestations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_attestations_total",
			Help: "Boot attestation between renewals (a boot policy's attest interval), by result: asked (a request sent on a stream), match, mismatch (a verified quote that does not match the policy), refused (an answer that did not verify), unanswered (no verified answer within the bound).",
		}, []string{"result"}),
		renew: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_renew_total",
			Help: "RenewCert calls by result: ok, refused, rate_limited, retried (a renewal whose answer was lost, answered again with the certificate that committed), tpm_challenge (round one of an attested renewal).",
		}, []string{"result"}),
		authRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_auth_refused_total",
			Help: "Refused authentications of calls that need a client certificate, by wire reason (SPIRE_BUNDLE_UNTRUSTED, TRUST_DOMAIN_NOT_ACCEPTED, SPIFFE_ID_UNMAPPED, STALE_CERTIFICATE, NODE_REVOKED, NODE_FENCED, CERT_NOT_YET_VALID, UNAUTHENTICATED, PERMISSION_DENIED ...).",
		}, []string{"reason"}),
		applySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pact_journal_raft_apply_seconds",
			Help:    "Time from proposal to applied result, by command.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"op"}),
		credentialRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_enroll_credential_refusals_total",
			Help: "Enrollments refused by a credential beside the hardware match (join_token, tpm), checked before any Raft write.",
		}, []string{"credential"}),
		streamsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pact_journal_streams_refused_total",
			Help: "Streams refused because their certificate held --max-streams-per-cert already.",
		}),
		activationBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pact_journal_activation_batch_size",
			Help:    "Activations and renewals per Raft entry this journal proposed (or forwarded to the leader in one call); 1 is one sent alone.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
	}
	m.reg.MustRegister(m.enroll, m.credentialRefusals, m.enrollFailures, m.identityWarnings, m.renew, m.bootVerdicts, m.attestations, m.unconfirmed, m.authRefused, m.applySeconds, m.streamsRefused, m.activationBatch,
		&connCollector{ports: map[string]*connlimit.Limiter{"grpc": j.conns, "raft": j.raftConns}},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_enroll_in_flight", Help: "Enrollments being worked on."},
			func() float64 { return float64(j.gate.inFlight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_streams_open", Help: "Agent streams held by this journal."},
			func() float64 { return float64(j.hub.total()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_tpm_challenges_pending", Help: "TPM credential-activation challenges this journal holds between the two rounds of an Enroll (bounded by TPMChallenges.MaxPending)."},
			func() float64 { return float64(j.tpm.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_is_leader", Help: "1 if this journal is the Raft leader."},
			func() float64 {
				if j.raft.IsLeader() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_feature_level", Help: "The highest quorum feature level this journal's binary speaks (docs/upgrade.md)."},
			func() float64 { return raftfsm.FeatureLevel }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_quorum_feature_level", Help: "The quorum feature level this journal's registry records: below pact_journal_feature_level while a member runs an older release."},
			func() float64 { return float64(j.raft.QuorumLevel()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_intermediate_expiry_seconds", Help: "Seconds until this journal's intermediate expires."},
			func() float64 { return j.ca.Intermediate().NotAfter.Sub(j.cfg.Clock.Now()).Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pact_journal_audit_export_dropped_total", Help: "Audit entries dropped from the JSON-lines export because the writer fell behind."},
			func() float64 {
				if j.audit == nil {
					return 0
				}
				return float64(j.audit.dropped.Load())
			}),
		&nodeCollector{fsm: j.fsm, now: j.cfg.Clock.Now},
	)
	m.registerMonitoring(j)
	m.reg.MustRegister(j.federation.failures, j.federation.feedRefused, j.federation.claimsDropped, j.federation.claimed, federationCollector{j}, claimsCollector{j})
	return m
}

// raftMetrics is what the Raft node measures, in the journal's metrics.
type raftMetrics struct{ j *Journal }

func (r raftMetrics) ObserveApply(op string, d time.Duration) {
	r.j.metrics.applySeconds.WithLabelValues(op).Observe(d.Seconds())
}

func (r raftMetrics) ObserveBatch(n int) { r.j.metrics.activationBatch.Observe(float64(n)) }

func (r raftMetrics) HandshakeRefused(port string, err error) { r.j.countHandshakeRefused(port, err) }

// connCollector reports the connection limiters of both ports.
type connCollector struct{ ports map[string]*connlimit.Limiter }

var (
	connsOpenDesc           = prometheus.NewDesc("pact_journal_connections_open", "Connections open, by port.", []string{"port"}, nil)
	slotWaitDesc            = prometheus.NewDesc("pact_journal_handshake_slot_wait_seconds", "Time from a client's ClientHello (the Raft port: its accepted connection) to its handshake slot, for clients that got one (0 when one was free), by port; clients answered busy are counted in connections_busy_total and connections_refused_total{limit=\"handshakes\"} instead.", []string{"port"}, nil)
	handshakeTimeDesc       = prometheus.NewDesc("pact_journal_handshake_seconds", "How long a successful TLS handshake held its slot, by port.", []string{"port"}, nil)
	firstCallDesc           = prometheus.NewDesc("pact_journal_first_call_seconds", "Time from a connection's accept to its first call (queue, handshake, HTTP/2 setup and the client's own delay), by port (the gRPC port: Raft makes no calls).", []string{"port"}, nil)
	handshakesDesc          = prometheus.NewDesc("pact_journal_handshakes_in_progress", "TLS handshakes in progress, by port.", []string{"port"}, nil)
	connsRefusedDesc        = prometheus.NewDesc("pact_journal_connections_refused_total", "Connections closed before their TLS handshake, by port and limit (per_source, total, handshakes; evicted: to make room at the total cap for a newer connection).", []string{"port", "limit"}, nil)
	connsBusyDesc           = prometheus.NewDesc("pact_journal_connections_busy_total", "Connections answered busy, with a retry-after, at their ClientHello: no handshake slot soon enough (gRPC port).", []string{"port"}, nil)
	handshakeQueued         = prometheus.NewDesc("pact_journal_handshakes_queued", "Clients whose ClientHello has arrived waiting for a handshake slot, by port.", []string{"port"}, nil)
	handshakeServed         = prometheus.NewDesc("pact_journal_handshake_served_rate", "The most successful handshakes per second the port finished over five seconds during which clients queued throughout, within the last minute (0 if none): busy answers past the queue wait (to an address answered busy more than --near-busy-answers times in a row, up to --max-retry-after) are booked at four times it.", []string{"port"}, nil)
	handshakeRate           = prometheus.NewDesc("pact_journal_handshake_rate", "Handshakes per second the port's admission counts on: its handshake slots over the moving mean of how long a handshake holds one.", []string{"port"}, nil)
	connsEvictedDesc        = prometheus.NewDesc("pact_journal_connections_evicted_total", "Connections evicted at the total cap, by port and what they had done: silent (no whole ClientHello), spoken (in their handshake), idle (past their handshake from an unvouched address, no authenticated call and none under way for Connections.ProveWithin); their sum is connections_refused_total{limit=\"evicted\"}.", []string{"port", "stage"}, nil)
	connsVouchedEvictedDesc = prometheus.NewDesc("pact_journal_connections_evicted_vouched_total", "Of the connections evicted, those from a vouched address (silent or spoken), to make room for a newer one from a vouched address, by port.", []string{"port"}, nil)
	connsSilentDesc         = prometheus.NewDesc("pact_journal_connections_silent", "Connections open whose ClientHello has not arrived, by port.", []string{"port"}, nil)
	connsSpokenDesc         = prometheus.NewDesc("pact_journal_connections_spoken_total", "Connections whose whole ClientHello arrived while they were silent to the limiter (read, or found waiting in the socket at the cap), by port.", []string{"port"}, nil)
	connsUnprovenDesc       = prometheus.NewDesc("pact_journal_connections_unproven", "Connections past their handshake from an unvouched address with no authenticated call and none under way (evictable at the total cap after Connections.ProveWithin), by port.", []string{"port"}, nil)
	vouchedDesc             = prometheus.NewDesc("pact_journal_vouched_sources", "Source addresses vouched for (an authenticated call from them within Connections.VouchFor), by port.", []string{"port"}, nil)
)

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connsOpenDesc
	ch <- handshakesDesc
	ch <- slotWaitDesc
	ch <- handshakeTimeDesc
	ch <- firstCallDesc
	ch <- connsRefusedDesc
	ch <- connsBusyDesc
	ch <- handshakeQueued
	ch <- handshakeRate
	ch <- handshakeServed
	ch <- connsEvictedDesc
	ch <- connsVouchedEvictedDesc
	ch <- connsSilentDesc
	ch <- connsSpokenDesc
	ch <- connsUnprovenDesc
	ch <- vouchedDesc
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	for port, l := range c.ports {
		st := l.Stats()
		ch <- prometheus.MustNewConstMetric(connsOpenDesc, prometheus.GaugeValue, float64(st.Open), port)
		ch <- prometheus.MustNewConstMetric(handshakesDesc, prometheus.GaugeValue, float64(st.Handshakes), port)
		ch <- prometheus.MustNewConstMetric(connsRefusedDesc, prometheus.CounterValue, float64(st.RefusedPerSource), port, "per_source")
		ch <- prometheus.MustNewConstMetric(connsRefusedDesc, prometheus.CounterValue, float64(st.RefusedTotal), port, "total")
		ch <- prometheus.MustNewConstMetric(connsRefusedDesc, prometheus.CounterValue, float64(st.RefusedBusy), port, "handshakes")
		ch <- prometheus.MustNewConstMetric(connsRefusedDesc, prometheus.CounterValue, float64(st.Evicted), port, "evicted")
		ch <- prometheus.MustNewConstMetric(connsBusyDesc, prometheus.CounterValue, float64(st.Deferred), port)
		ch <- prometheus.MustNewConstMetric(handshakeQueued, prometheus.GaugeValue, float64(st.Queued), port)
		ch <- prometheus.MustNewConstMetric(handshakeRate, prometheus.GaugeValue, st.Rate, port)
		ch <- prometheus.MustNewConstMetric(handshakeServed, prometheus.GaugeValue, st.ServedRate, port)
		ch <- prometheus.MustNewConstMetric(connsEvictedDesc, prometheus.CounterValue, float64(st.Evicted-st.EvictedSpoken-st.EvictedIdle), port, "silent")
		ch <- prometheus.MustNewConstMetric(connsEvictedDesc, prometheus.CounterValue, float64(st.EvictedSpoken), port, "spoken")
		ch <- prometheus.MustNewConstMetric(connsEvictedDesc, prometheus.CounterValue, float64(st.EvictedIdle), port, "idle")
		ch <- prometheus.MustNewConstMetric(connsVouchedEvictedDesc, prometheus.CounterValue, float64(st.EvictedVouched), port)
		ch <- prometheus.MustNewConstMetric(connsSilentDesc, prometheus.GaugeValue, float64(st.Silent), port)
		ch <- prometheus.MustNewConstMetric(connsSpokenDesc, prometheus.CounterValue, float64(st.Spoken), port)
		ch <- prometheus.MustNewConstMetric(connsUnprovenDesc, prometheus.GaugeValue, float64(st.Unproven), port)
		ch <- prometheus.MustNewConstMetric(vouchedDesc, prometheus.GaugeValue, float64(st.Vouched), port)
		tm := l.Timings()
		ch <- prometheus.MustNewConstHistogram(slotWaitDesc, tm.SlotWait.Count, tm.SlotWait.Sum, tm.SlotWait.Buckets, port)
		ch <- prometheus.MustNewConstHistogram(handshakeTimeDesc, tm.Handshake.Count, tm.Handshake.Sum, tm.Handshake.Buckets, port)
		ch <- prometheus.MustNewConstHistogram(firstCallDesc, tm.FirstCall.Count, tm.FirstCall.Sum, tm.FirstCall.Buckets, port)
	}
}

// nodeCollector reports the registry by state at scrape time, and the
// expiry of the Active nodes' certificates (monitoring.go).
type nodeCollector struct {
	fsm *raftfsm.FSM
	now func() time.Time
}

var (
	nodesDesc  = prometheus.NewDesc("pact_journal_nodes", "Registered nodes by state.", []string{"state"}, nil)
	fencedDesc = prometheus.NewDesc("pact_journal_nodes_fenced", "Nodes an operator has fenced (quarantined), whatever their state.", nil, nil)
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodesDesc
	ch <- fencedDesc
	ch <- nodeCertEarliestDesc
	ch <- nodeCertsOverdueDesc
	ch <- nodeCertsExpiredDesc
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[pactv1.NodeState]int{}
	fenced := 0
	certs := nodeCertExpiry{now: c.now().Unix()}
	for _, n := range c.fsm.Nodes(raftfsm.Filter{}) {
		counts[n.GetState()]++
		if n.GetFence() != nil {
			fenced++
		}
		if cert := n.GetCert(); n.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && cert.GetNotAfterUnix() != 0 {
			certs.add(cert.GetNotBeforeUnix(), cert.GetNotAfterUnix())
		}
	}
	certs.collect(ch)
	ch <- prometheus.MustNewConstMetric(fencedDesc, prometheus.GaugeValue, float64(fenced))
	for _, s := range []pactv1.NodeState{pactv1.NodeState_NODE_STATE_REGISTERED, pactv1.NodeState_NODE_STATE_ACTIVE, pactv1.NodeState_NODE_STATE_INACTIVE, pactv1.NodeState_NODE_STATE_REVOKED} {
		ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(counts[s]), raftfsm.StateName(s))
	}
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
	if r := j.raft.Halted(); r != "" {
		return errors.New("halted: " + r)
	}
	if j.server == nil {
		return errors.New("not serving yet")
	}
	if j.raft.Leader() == "" {
		return errors.New("no Raft leader")
	}
	if j.cfg.Clock.Now().After(j.ca.Intermediate().NotAfter) {
		return errors.New("intermediate certificate expired")
	}
	return nil
}
