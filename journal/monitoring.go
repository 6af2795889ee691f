package journal

import (
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/v1rpc"
	"github.com/pact-hpc/pact/raftfsm"
)

// The metrics the shipped alerts and dashboards need beside the service
// counters of metrics.go (dist/monitoring, docs/monitoring.md): the
// quorum's state as this journal sees it, why streams end, why handshakes
// fail, the expiry of every credential the journal knows, and the limits
// the saturation alerts divide by. Every label has a fixed, small set of
// values: no per-node or per-serial label.

// How an Enroll (pact_journal_enroll_total{result}) or a RenewCert
// (pact_journal_renew_total{result}) call ended: v1rpc's outcomes, and the
// renewal's own.
const (
	resultOK           = string(v1rpc.OutcomeOK)
	resultRefused      = string(v1rpc.OutcomeRefused)
	resultRateLimited  = string(v1rpc.OutcomeRateLimited)
	resultTPMChallenge = string(v1rpc.OutcomeTPMChallenge)
	resultRetried      = string(v1rpc.OutcomeRetried)
)

var (
	enrollResults = []string{string(v1rpc.OutcomeOK), string(v1rpc.OutcomeRetry), string(v1rpc.OutcomeTakeover), string(v1rpc.OutcomeTPMChallenge),
		string(v1rpc.OutcomeRefused), string(v1rpc.OutcomeRateLimited), string(v1rpc.OutcomeError)}
	renewResults = []string{resultOK, resultRefused, resultRateLimited, resultRetried, resultTPMChallenge}
	// bootVerdicts label pact_journal_boot_policy_verdicts_total: what the
	// boot policy in force made of a TPM node's quote.
	bootVerdicts = []string{bootMatch, bootObserved, bootRefused, bootFenced}
)

// Boot policy verdicts (docs/tpm.md, "Boot policies").
const (
	bootMatch    = "match"    // the quote matched the policy
	bootObserved = "observed" // a mismatch let through (observe mode or action)
	bootRefused  = "refused"  // a mismatch refused
	bootFenced   = "fenced"   // a mismatch fenced and refused
)

// metricPorts are the ports the connection and handshake metrics label.
var metricPorts = []string{"grpc", "raft"}

// wireReasons are the reasons toStatus can give an error
// (pact_journal_enroll_failures_total{reason},
// pact_journal_auth_refused_total{reason}): those of its table and the two
// it makes itself.
func wireReasons() []string {
	seen := map[apierr.Reason]bool{apierr.Internal: true, apierr.OutcomeUnknown: true}
	for _, r := range reasons {
		seen[r.reason] = true
	}
	out := make([]string, 0, len(seen))
	for r := range seen {
		out = append(out, string(r))
	}
	slices.Sort(out)
	return out
}

// credentialKinds are the kinds of the credentials beside the hardware
// match this journal checks (pact_journal_enroll_credential_refusals_total).
func (j *Journal) credentialKinds() []string {
	out := make([]string, 0, len(j.credentials))
	for _, c := range j.credentials {
		out = append(out, c.kind())
	}
	return out
}

// countHandshakeRefused counts a failed server handshake on port (grpc,
// raft) by reason.
func (j *Journal) countHandshakeRefused(port string, err error) {
	if reason, ok := auth.HandshakeRefusalReason(err); ok {
		j.metrics.handshakesRefused.WithLabelValues(port, reason).Inc()
	}
}

// registerMonitoring makes the counters above and registers them with the
// collectors below. Every labelled counter of the journal's (those of
// metrics.go too) has every label value it can take present at 0 from the
// start: Prometheus's rate() and increase() see no increase in a series
// whose first sample is already 1, so the first refusal, the first drop,
// the first JOIN_TOKEN_REQUIRED would fire no alert and show on no panel
// (docs/monitoring.md, "Every series from the start").
func (m *metrics) registerMonitoring(j *Journal) {
	for _, vals := range []struct {
		v      *prometheus.CounterVec
		values []string
	}{
		{m.enroll, enrollResults},
		{m.renew, renewResults},
		{m.bootVerdicts, bootVerdicts},
		{m.attestations, attestResults},
		{m.enrollFailures, wireReasons()},
		{m.authRefused, wireReasons()},
		{m.credentialRefusals, j.credentialKinds()},
	} {
		for _, v := range vals.values {
			vals.v.WithLabelValues(v)
		}
	}
	m.streamDrops = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pact_journal_stream_drops_total",
		Help: "Subscribe streams this journal held that ended, by reason: client_gone, send_failed, shutdown, superseded (the certificate was replaced by a renewal and the node's new stream did not open within --renewal-stream-grace), node_revoked, node_fenced, cert_expired, intermediate_revoked, other. A stream replaced by its node's next stream (a renewal, an SVID rotation, an SVID-standby swap) is no drop (pact_journal_stream_handovers_total).",
	}, []string{"reason"})
	for _, r := range v1rpc.DropReasons {
		m.streamDrops.WithLabelValues(r)
	}
	m.streamHandovers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pact_journal_stream_handovers_total",
		Help: "Subscribe streams replaced by the same node's next stream, whatever identity either presents (a renewal, an SVID rotation, a swap between an SVID and its journal standby: the dual-channel swap): not drops.",
	})
	m.handshakesRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pact_journal_handshakes_refused_total",
		Help: "TLS handshakes that failed, by port (grpc, raft) and reason (foreign_root, no_certificate, intermediate_revoked, wrong_intermediate (a journal certificate from another journal's intermediate), not_journal, certificate_invalid, client_alert, not_tls, timeout, client_closed, tls_error); busy answers and connection caps are counted in pact_journal_connections_*.",
	}, []string{"port", "reason"})
	for _, port := range metricPorts {
		for _, r := range auth.HandshakeReasons {
			m.handshakesRefused.WithLabelValues(port, r)
		}
	}
	m.reg.MustRegister(m.streamDrops, m.streamHandovers, m.handshakesRefused,
		&quorumCollector{j: j}, &credentialCollector{j: j}, newLimitsCollector(j))
}

// quorumCollector reports Raft as this journal sees it.
type quorumCollector struct{ j *Journal }

var (
	haltedDesc      = prometheus.NewDesc("pact_journal_halted", "1 if this journal stopped serving (removed from the quorum, or a Raft entry it cannot apply); pact journal status says why.", nil, nil)
	hasLeaderDesc   = prometheus.NewDesc("pact_journal_has_leader", "1 if this journal knows a Raft leader (itself or another).", nil, nil)
	raftStateDesc   = prometheus.NewDesc("pact_journal_raft_state", "1 for this journal's Raft state (follower, candidate, leader, shutdown), 0 for the others.", []string{"state"}, nil)
	termDesc        = prometheus.NewDesc("pact_journal_raft_term", "This journal's current Raft term.", nil, nil)
	commitDesc      = prometheus.NewDesc("pact_journal_raft_commit_index", "The last Raft index this journal knows to be committed.", nil, nil)
	appliedDesc     = prometheus.NewDesc("pact_journal_raft_applied_index", "The last Raft index this journal applied to its registry.", nil, nil)
	lastContactDesc = prometheus.NewDesc("pact_journal_raft_last_contact_seconds", "Seconds since this journal last heard from the leader (0 on the leader; absent before the first contact).", nil, nil)
	votersDesc      = prometheus.NewDesc("pact_journal_raft_voters", "Voters in the Raft configuration as this journal knows it.", nil, nil)
	voterDesc       = prometheus.NewDesc("pact_journal_raft_voter", "1 if this journal is a voter of the Raft configuration it knows, 0 if a non-voter or not in it.", nil, nil)
)

var raftStates = []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown}

func (c *quorumCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{haltedDesc, hasLeaderDesc, raftStateDesc, termDesc, commitDesc, appliedDesc, lastContactDesc, votersDesc, voterDesc} {
		ch <- d
	}
}

func (c *quorumCollector) Collect(ch chan<- prometheus.Metric) {
	j := c.j
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(haltedDesc, b2f(j.raft.Halted() != ""))
	gauge(hasLeaderDesc, b2f(j.raft.Leader() != ""))
	state := j.raft.State()
	for _, s := range raftStates {
		gauge(raftStateDesc, b2f(s == state), lowerState(s))
	}
	gauge(termDesc, float64(j.raft.Term()))
	gauge(commitDesc, float64(j.raft.CommitIndex()))
	gauge(appliedDesc, float64(j.raft.AppliedIndex()))
	switch lc := j.raft.LastContact(); {
	case state == raft.Leader:
		gauge(lastContactDesc, 0)
	case !lc.IsZero():
		gauge(lastContactDesc, max(time.Since(lc), 0).Seconds())
	}
	if servers, _, err := j.raft.Servers(); err == nil {
		voters, self := 0, false
		for _, srv := range servers {
			if srv.Suffrage == raft.Voter {
				voters++
				self = self || string(srv.ID) == j.cfg.NodeID
			}
		}
		gauge(votersDesc, float64(voters))
		gauge(voterDesc, b2f(self))
	}
}

func lowerState(s raft.RaftState) string {
	switch s {
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	case raft.Leader:
		return "leader"
	}
	return "shutdown"
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// credentialCollector reports how long the credentials this journal knows
// have left, at the journal's clock. Node certificates are aggregated in
// nodeCollector (metrics.go), which already walks the registry.
type credentialCollector struct{ j *Journal }

var (
	rootExpiryDesc         = prometheus.NewDesc("pact_journal_root_expiry_seconds", "Seconds until the domain root certificate expires.", nil, nil)
	intermediateLifeDesc   = prometheus.NewDesc("pact_journal_intermediate_lifetime_seconds", "The validity period of this journal's current intermediate (it re-keys at half of it).", nil, nil)
	quorumIntermediateDesc = prometheus.NewDesc("pact_journal_quorum_intermediate_expiry_seconds", "Seconds until the newest live intermediate each member of the Raft configuration published expires, by journal_id (a member that stopped re-keying shows here on every journal).", []string{"journal_id"}, nil)
	intermediatesDesc      = prometheus.NewDesc("pact_journal_intermediates", "Intermediates recorded in Raft, by state: active, retiring (holders told to renew), revoked, expired.", []string{"state"}, nil)
	operatorExpiryDesc     = prometheus.NewDesc("pact_journal_operator_credential_expiry_seconds", "Seconds until the last-expiring valid (recorded, unrevoked, unexpired) credential of each operator expires, by operator name.", []string{"operator"}, nil)
	journalCAExpiryDesc    = prometheus.NewDesc("pact_journal_ca_expiry_timestamp_seconds", "When (Unix seconds) the last-expiring live (unrevoked, unexpired) journal CA the registry holds for each journal expires, by journal_id.", []string{"journal_id"}, nil)
	journalCARevokedDesc   = prometheus.NewDesc("pact_journal_ca_revoked", "1 while this journal's own journal CA is revoked: it signs nothing until it has a new one (docs/ceremony.md).", nil, nil)
	memberCARevokedDesc    = prometheus.NewDesc("pact_journal_member_ca_revoked", "1 for each member of the Raft configuration, by journal_id, that cannot sign because its journal CA is revoked, as this journal's registry has it (every journal CA recorded for it revoked; for this journal itself, that of its intermediate): a journal cut off before it applied its own revocation is seen by the others.", []string{"journal_id"}, nil)
	journalCAFileDesc      = prometheus.NewDesc("pact_journal_ca_file_refused", "1 while the certificate in this journal's --journal-ca-cert file was refused at its last re-key (another key, another journal, names it does not serve, unreadable): it signs under the journal CA it had; pact journal status says why.", nil, nil)
)

func (c *credentialCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rootExpiryDesc
	ch <- intermediateLifeDesc
	ch <- quorumIntermediateDesc
	ch <- intermediatesDesc
	ch <- operatorExpiryDesc
	ch <- journalCAExpiryDesc
	ch <- journalCARevokedDesc
	ch <- memberCARevokedDesc
	ch <- journalCAFileDesc
}

func (c *credentialCollector) Collect(ch chan<- prometheus.Metric) {
	j := c.j
	now := j.cfg.Clock.Now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(rootExpiryDesc, j.ca.Root().NotAfter.Sub(now).Seconds())
	inter := j.ca.Intermediate()
	gauge(intermediateLifeDesc, inter.NotAfter.Sub(inter.NotBefore).Seconds())

	newest := map[string]int64{}
	states := map[string]int{"active": 0, "retiring": 0, "revoked": 0, "expired": 0}
	for _, in := range j.fsm.AllIntermediates() {
		st := raftfsm.IntermediateState(in, now.UnixNano())
		if j.fsm.IsRevoked(in.GetSerial()) {
			st = "revoked"
		}
		if st != "revoked" && in.GetNotAfterUnix() < now.Unix() {
			st = "expired"
		}
		states[st]++
		if st == "active" || st == "retiring" {
			newest[in.GetJournalId()] = max(newest[in.GetJournalId()], in.GetNotAfterUnix())
		}
	}
	for st, n := range states {
		gauge(intermediatesDesc, float64(n), st)
	}
	// Members only: a removed journal's intermediates stay in Raft until
	// they expire, and nobody re-keys them.
	ownRevoked := j.revokedJournalCA() != nil
	if servers, _, err := j.raft.Servers(); err == nil {
		for _, srv := range servers {
			id := string(srv.ID)
			if notAfter, ok := newest[id]; ok {
				gauge(quorumIntermediateDesc, time.Unix(notAfter, 0).Sub(now).Seconds(), id)
			}
			// A member revoked at another journal is cut off from the
			// commit on and may never apply its own revocation, so its
			// own pact_journal_ca_revoked can stay 0: every journal
			// reports every member.
			revoked := ownRevoked
			if id != j.cfg.NodeID {
				revoked = revokedJournalCAOf(j.fsm, id, "") != nil
			}
			gauge(memberCARevokedDesc, b2f(revoked), id)
		}
	}

	ops, _ := j.fsm.Operators()
	latest := map[string]int64{}
	for _, o := range ops {
		if o.GetNotAfterUnix() < now.Unix() {
			continue
		}
		if st, _ := j.fsm.CheckOperator(o.GetName(), o.GetSerial(), o.GetNotBeforeUnix()); st != raftfsm.OperatorRecorded {
			continue
		}
		latest[o.GetName()] = max(latest[o.GetName()], o.GetNotAfterUnix())
	}
	for name, notAfter := range latest {
		gauge(operatorExpiryDesc, time.Unix(notAfter, 0).Sub(now).Seconds(), name)
	}

	// One series per journal: after a renewal ceremony the old and the new
	// journal CA are both live until the old one expires.
	lastCA := map[string]int64{}
	for _, jc := range j.fsm.JournalCAsAt(now.UnixNano()) {
		lastCA[jc.GetJournalId()] = max(lastCA[jc.GetJournalId()], jc.GetNotAfterUnix())
	}
	for id, notAfter := range lastCA {
		gauge(journalCAExpiryDesc, float64(notAfter), id)
	}
	gauge(journalCARevokedDesc, b2f(ownRevoked))
	gauge(journalCAFileDesc, b2f(j.journalCAFileRefused() != ""))
}

// Node certificate expiry, aggregated over the Active nodes by
// nodeCollector: how many are overdue for renewal or expired, and the
// earliest expiry. Overdue is relative to each certificate's own lifetime
// (agents renew at two thirds of it), so it holds for 3-day journal
// certificates and 1-hour SPIRE SVIDs alike.
var (
	nodeCertEarliestDesc = prometheus.NewDesc("pact_journal_node_cert_earliest_expiry_seconds", "Seconds until the earliest-expiring current certificate of an Active node expires (negative once expired; absent with no Active node).", nil, nil)
	nodeCertsOverdueDesc = prometheus.NewDesc("pact_journal_node_certs_renewal_overdue", "Active nodes whose current certificate has less than a sixth of its lifetime left (agents renew at two thirds) and has not expired.", nil, nil)
	nodeCertsExpiredDesc = prometheus.NewDesc("pact_journal_node_certs_expired", "Active nodes whose current certificate has expired.", nil, nil)
)

// nodeCertExpiry accumulates the Active nodes' certificate expiries.
type nodeCertExpiry struct {
	now      int64 // Unix seconds
	earliest int64
	any      bool
	overdue  int
	expired  int
}

func (e *nodeCertExpiry) add(notBeforeUnix, notAfterUnix int64) {
	if !e.any || notAfterUnix < e.earliest {
		e.earliest, e.any = notAfterUnix, true
	}
	switch left := notAfterUnix - e.now; {
	case left <= 0:
		e.expired++
	case 6*left < notAfterUnix-notBeforeUnix:
		e.overdue++
	}
}

func (e *nodeCertExpiry) collect(ch chan<- prometheus.Metric) {
	if e.any {
		ch <- prometheus.MustNewConstMetric(nodeCertEarliestDesc, prometheus.GaugeValue, float64(e.earliest-e.now))
	}
	ch <- prometheus.MustNewConstMetric(nodeCertsOverdueDesc, prometheus.GaugeValue, float64(e.overdue))
	ch <- prometheus.MustNewConstMetric(nodeCertsExpiredDesc, prometheus.GaugeValue, float64(e.expired))
}

// newLimitsCollector reports the configured caps the saturation alerts
// compare the connection and enrollment gauges with.
func newLimitsCollector(j *Journal) prometheus.Collector {
	c := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pact_journal_connections_max", Help: "The most connections a port holds open at once (Connections.MaxConns), by port."}, []string{"port"})
	h := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pact_journal_handshakes_max", Help: "The most TLS handshakes a port runs at once (Connections.MaxHandshakes), by port."}, []string{"port"})
	for _, port := range metricPorts {
		c.WithLabelValues(port).Set(float64(j.cfg.Connections.MaxConns))
		h.WithLabelValues(port).Set(float64(j.cfg.Connections.MaxHandshakes))
	}
	e := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pact_journal_enroll_in_flight_max", Help: "The most enrollments this journal works on at once (MaxConcurrentEnrollments)."})
	e.Set(float64(cap(j.gate.slots)))
	return collectorSet{c, h, e}
}

// collectorSet is several collectors as one.
type collectorSet []prometheus.Collector

func (cs collectorSet) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

func (cs collectorSet) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}
