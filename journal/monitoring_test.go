package journal_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"math"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// gathered reads one series of g: the metric name and its labels as
// name=value pairs, all of them. ok is false when there is no such series.
func gathered(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (v float64, ok bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels)/2 {
				continue
			}
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// must is gathered for a series that has to exist.
func must(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, ok := gathered(t, g, name, labels...)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	return v
}

var dropReasons = []string{"client_gone", "released", "send_failed", "shutdown", "superseded", "node_revoked", "node_fenced", "cert_expired", "intermediate_revoked", "other"}

// Every Subscribe stream that ends is counted once, by why it ended: the
// agent closing it, a renewal superseding its certificate, a fence, a
// decommission, its certificate expiring, the journal shutting down.
func TestStreamDropsByReason(t *testing.T) {
	e := newEnv(t, func(c *journal.Config) { c.RenewalStreamGrace = 10 * time.Minute })
	reg := e.h.J.MetricsRegistry()
	want := map[string]float64{}
	check := func(step string) {
		t.Helper()
		for _, r := range dropReasons {
			if got := must(t, reg, "pact_journal_stream_drops_total", "reason", r); got != want[r] {
				t.Errorf("after %s: drops{reason=%q} = %v, want %v", step, r, got, want[r])
			}
		}
	}
	check("start") // every reason is there, at zero

	a := e.activate(t, "n1", "SN1", "02:00:00:00:00:01")
	e.subscribe(t, a).close(t, e)
	want["client_gone"]++
	check("the agent closed its stream")

	// An agent that stops on purpose (pact-agent's clean stop) releases
	// its node, then closes its stream: a planned end, not a client gone.
	r := e.activate(t, "n5", "SN5", "02:00:00:00:00:05")
	rw := e.subscribe(t, r)
	if resp, err := e.agentClient(t, r).Release(callCtx(t), &pactv1.ReleaseRequest{}); err != nil || !resp.GetReleased() {
		t.Fatalf("release of n5: %v, %v", resp, err)
	}
	rw.close(t, e)
	want["released"]++
	check("the agent released its node and closed its stream")

	// A renewal: the old certificate's stream serves on until the node
	// streams with its new certificate, and is then handed over, no drop.
	w := e.subscribe(t, a)
	a, err := e.renew(t, a)
	if err != nil {
		t.Fatal(err)
	}
	superseded := func(w *watch, by *agent) {
		t.Helper()
		if ev := w.next(t); ev.GetSuperseded().GetSerial() != by.serial {
			t.Fatalf("event %v on the renewed certificate's stream, want superseded by %s", ev, by.serial)
		}
	}
	superseded(w, a)
	e.tick(t, time.Second)
	w.quiet(t)
	check("a renewal, the new stream not open yet")
	w2 := e.subscribe(t, a)
	e.tick(t, e.cfg.StreamRecheckInterval) // an agent that does not close its old stream: let go at its re-check
	w.end(t)
	eventually(t, "the old stream to be handed over", func() bool { return e.h.J.OpenStreams("n1") == 1 })
	if got := must(t, reg, "pact_journal_stream_handovers_total"); got != 1 {
		t.Errorf("handovers = %v after the new stream opened, want 1", got)
	}
	check("a renewal handed over")

	// A renewal whose new stream never opens: the old one ends with the
	// grace, superseded.
	w2.close(t, e)
	want["client_gone"]++
	w = e.subscribe(t, a)
	if a, err = e.renew(t, a); err != nil {
		t.Fatal(err)
	}
	superseded(w, a)
	e.tick(t, e.cfg.RenewalStreamGrace-time.Minute)
	w.quiet(t)
	e.tick(t, 2*time.Minute)
	w.end(t)
	eventually(t, "the old stream to be let go at the grace's end", func() bool { return e.h.J.OpenStreams("n1") == 0 })
	want["superseded"]++
	check("a renewal whose new stream never opened")

	w = e.subscribe(t, a)
	if _, err := e.admin.FenceNode(callCtx(t), &pactv1.FenceNodeRequest{NodeId: "n1", Reason: "INC-7"}); err != nil {
		t.Fatal(err)
	}
	w.end(t)
	eventually(t, "the fenced stream to be let go", func() bool { return e.h.J.OpenStreams("n1") == 0 })
	want["node_fenced"]++
	check("a fence")

	// A decommission ends a stream at once, within a renewal's grace too.
	b := e.activate(t, "n2", "SN2", "02:00:00:00:00:02")
	w = e.subscribe(t, b)
	if _, err := e.renew(t, b); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: "n2", Force: true}); err != nil {
		t.Fatal(err)
	}
	w.end(t)
	eventually(t, "the decommissioned stream to be let go", func() bool { return e.h.J.OpenStreams("n2") == 0 })
	want["node_revoked"]++
	check("a decommission")

	c := e.activate(t, "n3", "SN3", "02:00:00:00:00:03")
	w = e.subscribe(t, c)
	e.tick(t, e.cfg.CertLifetime+time.Minute)
	w.end(t)
	eventually(t, "the expired stream to be let go", func() bool { return e.h.J.OpenStreams("n3") == 0 })
	want["cert_expired"]++
	check("the certificate's expiry")

	d := e.activate(t, "n4", "SN4", "02:00:00:00:00:04")
	e.subscribe(t, d)
	if err := e.h.J.Close(); err != nil {
		t.Fatal(err)
	}
	want["shutdown"]++
	check("the journal's shutdown")
}

// An agent that renewed closes its old channel once its new one streams.
// Under load the old stream's goroutine can see its client leave before it
// has run for the renewal's wake-up (both ready when it is scheduled):
// that is the handover the grace is for, not a drop.
func TestHandoverSeenOnlyAfterTheClientLeft(t *testing.T) {
	e := newEnv(t, func(c *journal.Config) { c.RenewalStreamGrace = 10 * time.Minute })
	reg := e.h.J.MetricsRegistry()
	a := e.activate(t, "n1", "SN1", "02:00:00:00:00:01")
	old := e.subscribe(t, a)

	release := e.h.J.HoldStreamWakeups(t)
	defer release()
	renewed, err := e.renew(t, a)
	if err != nil {
		t.Fatal(err)
	}
	e.subscribe(t, renewed)
	old.quiet(t) // asleep: it has not seen the renewal
	old.cancel()
	<-old.done
	eventually(t, "the old stream to end", func() bool { return e.h.J.OpenStreams("n1") == 1 })

	if got := must(t, reg, "pact_journal_stream_handovers_total"); got != 1 {
		t.Errorf("handovers = %v, want 1", got)
	}
	for _, r := range dropReasons {
		if got := must(t, reg, "pact_journal_stream_drops_total", "reason", r); got != 0 {
			t.Errorf("drops{reason=%q} = %v, want 0", r, got)
		}
	}
}

// An agent's renewal over the connection its stream runs on is not
// announced on that stream (Superseded): the agent made it. The stream
// serves its grace as any other, and ends as superseded when the new
// stream never comes. A renewal made with the same certificate over
// another connection is announced (the stream's holder may not have made
// it: TestStreamDropsByReason, TestRefusalsNameTheirCause).
func TestOwnRenewalIsNotAnnouncedOnItsStream(t *testing.T) {
	e := newEnv(t, func(c *journal.Config) { c.RenewalStreamGrace = 10 * time.Minute })
	reg := e.h.J.MetricsRegistry()
	for _, tc := range []struct {
		name, node, bmc, mac string
		sameConnection       bool
	}{
		{"over the stream's connection", "n1", "SN1", "02:00:00:00:00:01", true},
		{"over another connection", "n2", "SN2", "02:00:00:00:00:02", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.activate(t, tc.node, tc.bmc, tc.mac)
			conn := e.agentClient(t, a)
			old := e.subscribeOver(t, conn, a.node, &pactv1.SubscribeRequest{})
			renewOver := e.agentClient(t, a)
			if tc.sameConnection {
				renewOver = conn
			}
			renewed, err := e.renewOver(t, renewOver, a)
			if err != nil {
				t.Fatal(err)
			}
			before := must(t, reg, "pact_journal_stream_drops_total", "reason", "superseded")
			// Past the grace with no new stream: the old one ends, and
			// what it carried before its end is all it will carry.
			e.tick(t, e.cfg.RenewalStreamGrace+time.Minute)
			evs, _, _ := old.end(t)
			var announced []string
			for _, ev := range evs {
				if sup := ev.GetSuperseded(); sup != nil {
					announced = append(announced, sup.GetSerial())
				} else {
					t.Errorf("event %v on the renewed certificate's stream", ev)
				}
			}
			switch {
			case tc.sameConnection && len(announced) != 0:
				t.Errorf("the stream was told Superseded %v; its own agent made the renewal over it", announced)
			case !tc.sameConnection && (len(announced) != 1 || announced[0] != renewed.serial):
				t.Errorf("the stream was told Superseded %v, want once, by %s", announced, renewed.serial)
			}
			if got := must(t, reg, "pact_journal_stream_drops_total", "reason", "superseded"); got != before+1 {
				t.Errorf("drops{reason=superseded} = %v after the grace, want %v", got, before+1)
			}
		})
	}
}

// A renewed node's new stream is its stream only once it has sent its
// first state. In a renewal storm a journal can take seconds over a new
// stream before it sends anything, and the agent, waiting for that first
// state, may give up on the new channel first: the old stream must still
// be serving then, and a stream that never streamed is no drop.
func TestOldStreamServesUntilTheNewOneHasStreamed(t *testing.T) {
	e := newEnv(t, func(c *journal.Config) { c.RenewalStreamGrace = 10 * time.Minute })
	reg := e.h.J.MetricsRegistry()
	noDrops := func(step string) {
		t.Helper()
		for _, r := range dropReasons {
			if got := must(t, reg, "pact_journal_stream_drops_total", "reason", r); got != 0 {
				t.Errorf("%s: drops{reason=%q} = %v, want 0", step, r, got)
			}
		}
	}
	a := e.activate(t, "n1", "SN1", "02:00:00:00:00:01")
	old := e.subscribe(t, a)
	renewed, err := e.renew(t, a)
	if err != nil {
		t.Fatal(err)
	}
	if ev := old.next(t); ev.GetSuperseded().GetSerial() != renewed.serial {
		t.Fatalf("event %v on the old stream, want superseded by %s", ev, renewed.serial)
	}

	// The new stream reaches the journal, which does not answer it yet.
	arrived, clear := e.h.J.HoldFirstState(t, renewed.serial)
	defer clear()
	ctx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	if _, err := e.agentClient(t, renewed).Subscribe(ctx, &pactv1.SubscribeRequest{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(pollTimeout):
		t.Fatal("the new stream never reached the journal")
	}
	// Wake the old stream: it re-checks, and must go on serving.
	e.fc.Advance(e.cfg.StreamRecheckInterval)
	eventually(t, "the old stream to re-check", func() bool {
		select {
		case <-old.done:
			return true
		default:
		}
		return e.fc.Timers() >= 3 // the two journal loops and the old stream's re-check
	})
	old.quiet(t)

	// The agent gives up on the new channel; its old one still serves.
	giveUp()
	eventually(t, "the abandoned stream to end", func() bool { return e.h.J.OpenStreams("n1") == 1 })
	old.quiet(t)
	noDrops("a new stream abandoned before its first state")
	if got := must(t, reg, "pact_journal_stream_handovers_total"); got != 0 {
		t.Errorf("handovers = %v before any new stream streamed, want 0", got)
	}

	// Its next try streams, and the old stream is handed over at its
	// next re-check (its agent has not closed it).
	clear()
	e.subscribe(t, renewed)
	e.tick(t, e.cfg.StreamRecheckInterval)
	old.end(t)
	eventually(t, "the old stream to be handed over", func() bool { return e.h.J.OpenStreams("n1") == 1 })
	if got := must(t, reg, "pact_journal_stream_handovers_total"); got != 1 {
		t.Errorf("handovers = %v after the new stream streamed, want 1", got)
	}
	noDrops("the handover")
}

// Failed handshakes are counted by port and reason; busy answers are not
// (they have counters of their own).
func TestHandshakesRefusedByReason(t *testing.T) {
	cfg := journaltest.Config(t.TempDir())
	cfg.RaftListen = journaltest.FreeAddr(t)
	cfg.InitialCluster = []journal.Peer{{ID: cfg.NodeID, RaftAddr: cfg.RaftListen}}
	h := journaltest.Start(t, cfg)
	reg := h.J.MetricsRegistry()
	h.Register(t, "n1", "SN1", mac1)
	key := journaltest.NewKey(t)
	resp, err := h.Enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	agent := key.TLSCert(resp.GetCertChainDer())
	foreign := foreignJournalCert(t)

	// dial runs a TLS client handshake against addr and reads once, so
	// a refusal the server sends after the client's side is done (TLS 1.3
	// verifies the client then) arrives.
	dial := func(addr string, cc *tls.Config) {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, cc)
		if err != nil {
			return // the client refused the server, or the server refused at once
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, _ = conn.Read(make([]byte, 1))
	}
	skip := func(certs ...tls.Certificate) *tls.Config {
		return &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, Certificates: certs}
	}

	dial(cfg.RaftListen, skip())
	dial(cfg.RaftListen, skip(*foreign))
	dial(cfg.RaftListen, skip(agent))
	dial(cfg.RaftListen, skip(h.Admin))
	dial(h.Addr, skip(*foreign))
	// A client that does not trust the journal (another domain's ca.pem)
	// refuses it with an alert.
	dial(h.Addr, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: x509.NewCertPool(), ServerName: "localhost"})
	// Not TLS at all.
	if raw, err := net.Dial("tcp", h.Addr); err == nil {
		_, _ = raw.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		_ = raw.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, _ = raw.Read(make([]byte, 64))
		raw.Close()
	}

	want := map[[2]string]float64{
		{"raft", "no_certificate"}: 1,
		{"raft", "foreign_root"}:   1,
		{"raft", "not_journal"}:    2,
		{"grpc", "foreign_root"}:   1,
		{"grpc", "client_alert"}:   1,
		{"grpc", "not_tls"}:        1,
	}
	eventually(t, "the refusals to be counted", func() bool {
		for k, n := range want {
			if v, _ := gathered(t, reg, "pact_journal_handshakes_refused_total", "port", k[0], "reason", k[1]); v != n {
				return false
			}
		}
		return true
	})
	for _, port := range []string{"grpc", "raft"} {
		for _, r := range []string{"foreign_root", "no_certificate", "intermediate_revoked", "wrong_intermediate", "not_journal", "certificate_invalid", "client_alert", "not_tls", "timeout", "client_closed", "tls_error"} {
			if got := must(t, reg, "pact_journal_handshakes_refused_total", "port", port, "reason", r); got != want[[2]string{port, r}] {
				t.Errorf("handshakes_refused{port=%q,reason=%q} = %v, want %v", port, r, got, want[[2]string{port, r}])
			}
		}
	}
}

// The quorum gauges, the credential expiries and the limits, on a single
// journal at a fake clock; then a halt.
func TestQuorumCredentialAndLimitMetrics(t *testing.T) {
	e := newEnv(t)
	reg := e.h.J.MetricsRegistry()
	now := e.fc.Now()

	for name, want := range map[string]float64{
		"pact_journal_halted": 0, "pact_journal_has_leader": 1, "pact_journal_raft_voters": 1,
		"pact_journal_raft_voter": 1, "pact_journal_raft_last_contact_seconds": 0,
	} {
		if got := must(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for state, want := range map[string]float64{"leader": 1, "follower": 0, "candidate": 0, "shutdown": 0} {
		if got := must(t, reg, "pact_journal_raft_state", "state", state); got != want {
			t.Errorf("raft_state{state=%q} = %v, want %v", state, got, want)
		}
	}
	if term, applied := must(t, reg, "pact_journal_raft_term"), must(t, reg, "pact_journal_raft_applied_index"); term < 1 || applied < 1 || must(t, reg, "pact_journal_raft_commit_index") < applied {
		t.Errorf("term %v, applied %v, commit %v", term, applied, must(t, reg, "pact_journal_raft_commit_index"))
	}

	near := func(what string, got float64, want time.Duration) {
		t.Helper()
		if math.Abs(got-want.Seconds()) > 1 {
			t.Errorf("%s = %v s, want %v s", what, got, want.Seconds())
		}
	}
	_, roots, err := pki.LoadCertPool(filepath.Join(e.h.Dir, ca.RootCertFile))
	if err != nil || len(roots) != 1 {
		t.Fatalf("the root: %v (%d certificates)", err, len(roots))
	}
	root := roots[0]
	near("root expiry", must(t, reg, "pact_journal_root_expiry_seconds"), root.NotAfter.Sub(now))
	if jc := e.h.J.JournalCA(); jc == nil || must(t, reg, "pact_journal_ca_expiry_timestamp_seconds", "journal_id", e.cfg.NodeID) != float64(jc.NotAfter.Unix()) {
		t.Errorf("pact_journal_ca_expiry_timestamp_seconds is not the journal CA's end")
	}
	near("intermediate lifetime", must(t, reg, "pact_journal_intermediate_lifetime_seconds"), 9*24*time.Hour+time.Minute)
	if got := must(t, reg, "pact_journal_intermediates", "state", "active"); got != 1 {
		t.Errorf("intermediates{state=active} = %v, want 1", got)
	}
	own := must(t, reg, "pact_journal_intermediate_expiry_seconds")
	near("the journal's own intermediate in the quorum view", must(t, reg, "pact_journal_quorum_intermediate_expiry_seconds", "journal_id", e.cfg.NodeID), time.Duration(own*float64(time.Second)))

	// The admin credential is recorded at its first use (newEnv made
	// calls with it).
	admin := parseCert(t, e.h.Admin.Certificate[0])
	name := strings.TrimPrefix(admin.Subject.CommonName, "pact-admin/")
	name = name[:strings.IndexByte(name, '@')]
	near("the operator credential's expiry", must(t, reg, "pact_journal_operator_credential_expiry_seconds", "operator", name), admin.NotAfter.Sub(now))

	for name, want := range map[string]float64{"pact_journal_connections_max": float64(e.cfg.Connections.MaxConns), "pact_journal_handshakes_max": float64(e.cfg.Connections.MaxHandshakes)} {
		for _, port := range []string{"grpc", "raft"} {
			if got := must(t, reg, name, "port", port); got != want {
				t.Errorf("%s{port=%q} = %v, want %v", name, port, got, want)
			}
		}
	}
	if got := must(t, reg, "pact_journal_enroll_in_flight_max"); got != float64(e.cfg.MaxConcurrentEnrollments) {
		t.Errorf("enroll_in_flight_max = %v, want %v", got, e.cfg.MaxConcurrentEnrollments)
	}

	// Node certificates: none Active yet, then one, then one past five
	// sixths of its life (it keeps its stream, so it stays Active).
	if _, ok := gathered(t, reg, "pact_journal_node_cert_earliest_expiry_seconds"); ok {
		t.Error("an earliest node certificate expiry with no Active node")
	}
	a := e.activate(t, "n1", "SN1", "02:00:00:00:00:01")
	e.subscribe(t, a)
	near("earliest node certificate expiry", must(t, reg, "pact_journal_node_cert_earliest_expiry_seconds"), e.cfg.CertLifetime)
	if got := must(t, reg, "pact_journal_node_certs_renewal_overdue"); got != 0 {
		t.Errorf("renewal_overdue = %v with a fresh certificate", got)
	}
	e.tick(t, e.cfg.CertLifetime*5/6+2*time.Minute)
	if got := must(t, reg, "pact_journal_node_certs_renewal_overdue"); got != 1 {
		t.Errorf("renewal_overdue = %v past five sixths of the lifetime, want 1", got)
	}
	if got := must(t, reg, "pact_journal_node_certs_expired"); got != 0 {
		t.Errorf("node_certs_expired = %v before the expiry", got)
	}

	// A command this version does not know halts the journal.
	done := e.h.J.ApplyRaw(newerCommand(t, false), 5*time.Second)
	eventually(t, "the journal to halt", func() bool { return e.h.J.Halted() != "" })
	if got := must(t, reg, "pact_journal_halted"); got != 1 {
		t.Errorf("pact_journal_halted = %v on a halted journal", got)
	}
	_ = done
}

func parseCert(t testing.TB, der []byte) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
