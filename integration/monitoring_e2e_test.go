package integration

// The shipped alerting rules (dist/monitoring/pact-rules.yml) loaded into
// a real Prometheus — Debian's prometheus package, /usr/bin/prometheus —
// that scrapes a real three-journal quorum on loopback while the test
// causes what the alerts are for: a refused join token, nodes going
// Inactive, a journal killed, a journal CA revoked, the leader lost. The
// verdict is read from Prometheus's /api/v1/alerts: each alert
// docs/monitoring.md promises for the event fires. promtool's unit tests
// (dist/monitoring_test.go) feed the rules synthetic series; this test
// feeds them what the journals really export, from their first scrape
// (a counter born at 1 instead of 0 fires nothing here).
//
// It runs under make monitoring-e2e (PACT_MONITORING_E2E=1), which CI
// runs (.ci/run); plain go test skips it. With the variable set it fails,
// not skips, under CI=true when prometheus is missing.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/monitoringtest"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/internal/porttest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// monitoringE2EEnv gates the test: make monitoring-e2e sets it.
const monitoringE2EEnv = "PACT_MONITORING_E2E"

// prometheusBinary is Debian's prometheus (apt-get install prometheus),
// or PACT_PROMETHEUS.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if os.Getenv(monitoringE2EEnv) == "" {
		t.Skipf("runs a real Prometheus against a quorum for about two minutes: make monitoring-e2e (%s=1)", monitoringE2EEnv)
	}
	p := os.Getenv("PACT_PROMETHEUS")
	if p == "" {
		p = "/usr/bin/prometheus"
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing: apt-get install --no-install-recommends prometheus (.ci/run does), or set PACT_PROMETHEUS", p)
		}
		t.Skipf("%s is missing: apt-get install --no-install-recommends prometheus, or set PACT_PROMETHEUS", p)
	}
	return p
}

// forLineRE is a rule's `for:` line in the shipped rule files.
var forLineRE = regexp.MustCompile(`(?m)^(\s+for:\s*)(\S+)[ \t]*$`)

// shortenFor is the one change the test makes to the shipped rules: every
// `for:` duration is divided by 60 (a minute becomes a second: 2m → 2s,
// 30m → 30s), so an alert that must hold for minutes in production holds
// for seconds here, against a 1 s scrape and evaluation interval.
// Everything else — every expression, threshold, range window and offset
// — is the shipped text byte for byte. It returns how many `for:` it
// changed.
func shortenFor(rules []byte) ([]byte, int, error) {
	var errs []error
	n := 0
	out := forLineRE.ReplaceAllFunc(rules, func(line []byte) []byte {
		m := forLineRE.FindSubmatch(line)
		d, err := time.ParseDuration(string(m[2]))
		if err != nil {
			errs = append(errs, fmt.Errorf("for: %s: %w", m[2], err))
			return line
		}
		n++
		return append(append([]byte{}, m[1]...), promDuration(d/60)...)
	})
	return out, n, errors.Join(errs...)
}

// promDuration writes d as Prometheus reads it (no fractions).
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// testRules writes the shipped rule files into dir with their `for:`
// shortened (shortenFor), checking that the transform touched every rule
// that has a `for:` and nothing else.
func testRules(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	for _, f := range monitoringtest.RuleFiles(t, monitoringtest.Dir(t)) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		short, n, err := shortenFor(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var orig, copied struct {
			Groups []struct {
				Rules []map[string]any `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b, &orig); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := yaml.Unmarshal(short, &copied); err != nil {
			t.Fatalf("the test copy of %s: %v", f, err)
		}
		withFor := 0
		for gi, g := range orig.Groups {
			for ri, r := range g.Rules {
				c := copied.Groups[gi].Rules[ri]
				if _, ok := r["for"]; ok {
					withFor++
				}
				for k, v := range r {
					if k != "for" && fmt.Sprint(c[k]) != fmt.Sprint(v) {
						t.Fatalf("the test copy of %s changed %s of rule %v", f, k, r["alert"])
					}
				}
			}
		}
		if n != withFor || n == 0 {
			t.Fatalf("%s: shortened %d for: lines, the file has %d rules with a for:", f, n, withFor)
		}
		out := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(out, short, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, out)
	}
	return files
}

func TestShortenFor(t *testing.T) {
	in := "      - alert: A\n        expr: up == 0\n        for: 2m\n      - alert: B\n        expr: x[5m] > 0 # for: 5m\n        for: 90s\n"
	got, n, err := shortenFor([]byte(in))
	if err != nil || n != 2 {
		t.Fatalf("shortenFor: %d changed, %v", n, err)
	}
	want := "      - alert: A\n        expr: up == 0\n        for: 2s\n      - alert: B\n        expr: x[5m] > 0 # for: 5m\n        for: 1500ms\n"
	if string(got) != want {
		t.Fatalf("shortenFor:\n%s\nwant:\n%s", got, want)
	}
}

// promServer is a Prometheus process the test runs.
type promServer struct {
	t    *testing.T
	addr string
	cmd  *exec.Cmd
	out  *bytes.Buffer
	mu   *sync.Mutex
}

// lockedWriter collects a process's output for the failure report.
type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// startPrometheus runs bin on a free 127.0.0.1 port with its storage in a
// temporary directory, scraping targets every second as job pact-journal
// and evaluating ruleFiles every second.
func startPrometheus(t *testing.T, bin string, targets, ruleFiles []string) *promServer {
	t.Helper()
	dir := t.TempDir()
	l, err := porttest.Listen()
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
		"rule_files": ruleFiles,
		"scrape_configs": []any{map[string]any{
			"job_name":       "pact-journal",
			"static_configs": []any{map[string]any{"targets": targets}},
		}},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	p := &promServer{t: t, addr: addr, out: &bytes.Buffer{}, mu: &sync.Mutex{}}
	p.cmd = exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	w := lockedWriter{p.mu, p.out}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { p.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("--- prometheus (%s) output:\n%s\n--- its configuration:\n%s", addr, p.output(), b)
		}
	})
	polltest.Until(t, 30*time.Second, 100*time.Millisecond, func() bool {
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", p.output())
		default:
		}
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "prometheus on %s not ready:\n%s", addr, p.output())
	return p
}

func (p *promServer) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// get reads a Prometheus API answer's data into v.
func (p *promServer) get(path string, v any) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%s: %w: %s", path, err, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, v)
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant PromQL query.
func (p *promServer) query(expr string) []promSample {
	p.t.Helper()
	var d struct {
		Result []promSample `json:"result"`
	}
	if err := p.get("/api/v1/query?query="+url.QueryEscape(expr), &d); err != nil {
		p.t.Fatalf("query %s: %v", expr, err)
	}
	return d.Result
}

type promAlert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
	Value    string            `json:"value"`
}

func (p *promServer) alerts() []promAlert {
	p.t.Helper()
	var d struct {
		Alerts []promAlert `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", &d); err != nil {
		p.t.Fatalf("alerts: %v", err)
	}
	return d.Alerts
}

// expectAlert is an alert the test waits for: its name and the labels it
// must carry.
type expectAlert struct {
	name   string
	labels map[string]string
}

func (e expectAlert) String() string {
	if len(e.labels) == 0 {
		return e.name
	}
	return fmt.Sprintf("%s%v", e.name, e.labels)
}

func (e expectAlert) matches(a promAlert) bool {
	if a.Labels["alertname"] != e.name {
		return false
	}
	for k, v := range e.labels {
		if a.Labels[k] != v {
			return false
		}
	}
	return true
}

// waitFiring waits until every alert of want fires having become active
// (pending) after since: it fired because of what the test did at since,
// not from before. The wait is generous; its verdict is that the alert
// fired, not how soon.
func (p *promServer) waitFiring(since time.Time, want ...expectAlert) {
	p.t.Helper()
	fired := map[string]time.Duration{}
	var last []promAlert
	polltest.Until(p.t, 90*time.Second, 250*time.Millisecond, func() bool {
		last = p.alerts()
		for _, e := range want {
			if _, ok := fired[e.String()]; ok {
				continue
			}
			for _, a := range last {
				if e.matches(a) && a.State == "firing" && !a.ActiveAt.Before(since) {
					fired[e.String()] = time.Since(since).Round(100 * time.Millisecond)
				}
			}
		}
		return len(fired) == len(want)
	}, "of %v, only %v fired; Prometheus's alerts:\n%s", want, fired, describeAlerts(&last))
	for _, e := range want {
		p.t.Logf("%s fired (seen %v after the fault)", e, fired[e.String()])
	}
}

func describeAlerts(as *[]promAlert) string {
	var b strings.Builder
	for _, a := range *as {
		fmt.Fprintf(&b, "  %s %v active since %s value %s\n", a.State, a.Labels, a.ActiveAt.Format(time.RFC3339), a.Value)
	}
	return b.String()
}

// holdStreams opens a Subscribe stream for each enrolled node at one of
// addrs and keeps it until the returned function is called.
func holdStreams(t *testing.T, caFile string, addrs []string, acks []ack) (drop func()) {
	t.Helper()
	e := newEnroller(t, caFile, addrs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for k, a := range acks {
		cert := tls.Certificate{Certificate: a.resp.GetCertChainDer(), PrivateKey: a.key.key}
		conn := dialJournal(t, e.roots, addrs[k%len(addrs)], &cert)
		var s pactv1.EnrollmentService_SubscribeClient
		polltest.Until(t, 30*time.Second, 200*time.Millisecond, func() bool {
			var err error
			s, err = pactv1.NewEnrollmentServiceClient(conn).Subscribe(ctx, &pactv1.SubscribeRequest{})
			if err == nil {
				_, err = s.Recv()
			}
			return err == nil
		}, "%s could not open its stream", a.node.id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := s.Recv(); err != nil {
					return
				}
			}
		}()
	}
	var once sync.Once
	drop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(drop)
	return drop
}

// metricsTarget is a journal's metrics address as Prometheus's instance
// label names it.
func metricsTarget(m *member) string { return m.metrics }

// TestMonitoringAlertsFire: docs/monitoring.md's promises, checked against
// a real Prometheus scraping real journals.
func TestMonitoringAlertsFire(t *testing.T) {
	prom := prometheusBinary(t)
	skipShort(t)
	// A node is marked Inactive 5 s after its last stream (digests every
	// second), so the test need not wait the default 5 minutes.
	q := startQuorumWith(t, 3, "--heartbeat-timeout", "5s", "--digest-interval", "1s", "--takeover-window", "5s")
	var targets []string
	for _, m := range q.members {
		targets = append(targets, metricsTarget(m))
	}
	p := startPrometheus(t, prom, targets, testRules(t, t.TempDir()))
	caFile := filepath.Join(q.dir, "ca.pem")

	// Every journal scraped, every counter there at 0 before anything
	// happens: the first refusal below is the first event Prometheus sees.
	polltest.Until(t, 60*time.Second, 250*time.Millisecond, func() bool {
		return len(p.query(`up{job="pact-journal"} == 1`)) == 3 &&
			len(p.query(`pact_journal_enroll_credential_refusals_total{credential="join_token"} == 0`)) == 3 &&
			len(p.query(`pact:journal_voters_missing == 0`)) == 1
	}, "prometheus did not scrape the three journals serving with the refusal counters at 0:\nup: %v", p.query(`up`))

	// A refused join token: the first JOIN_TOKEN_REQUIRED refusal fires
	// PactEnrollCredentialRefused (issue 38: only the third did, when the
	// counter was born at 1).
	token := testNode{id: "mon-token", mac: "52:54:00:aa:00:01", bmc: "SN-MON-TOKEN"}
	if stdout, stderr, code := runPact(t, q.env(q.addrs()...), "node", "enroll", token.id, "--mac", token.mac, "--bmc-serial", token.bmc, "--require-token"); code != 0 {
		t.Fatalf("pact node enroll --require-token: exit %d\n%s%s", code, stdout, stderr)
	}
	for i := range q.members {
		q.syncRead(i, token.id)
	}
	e := newEnroller(t, caFile, q.addrs())
	refusedAt := time.Now()
	if a := e.enroll(context.Background(), token); a.err == nil || apierr.FromError(a.err).Reason != apierr.JoinTokenRequired {
		t.Fatalf("enrolling %s without its join token: %v, want JOIN_TOKEN_REQUIRED", token.id, a.err)
	}
	p.waitFiring(refusedAt, expectAlert{"PactEnrollCredentialRefused", map[string]string{"credential": "join_token"}})

	// Nodes going Inactive: 15 nodes stream, then all stop at once (a
	// rack's power lost): more than ten, and more than a tenth of the
	// enrolled nodes, within ten minutes.
	nodes := inventory("mon", 15)
	q.registerBatch(nodes)
	var acks []ack
	for _, n := range nodes {
		a := e.enroll(context.Background(), n)
		if a.err != nil || a.resp == nil {
			t.Fatalf("enroll %s: %v", n.id, a.err)
		}
		acks = append(acks, a)
	}
	drop := holdStreams(t, caFile, q.addrs(), acks)
	polltest.Until(t, 60*time.Second, 250*time.Millisecond, func() bool {
		return len(p.query(`pact:journal_nodes{state="active"} == 15`)) == 1
	}, "prometheus did not see the 15 nodes Active: %v", p.query(`pact:journal_nodes`))
	drop()
	droppedAt := time.Now()
	p.waitFiring(droppedAt, expectAlert{"PactNodesGoingInactive", nil}, expectAlert{"PactNodesGoingInactiveMassively", nil})

	// A journal killed: a follower, so the quorum keeps its leader.
	leader := q.leader()
	victim := (leader + 1) % 3
	other := 3 - leader - victim
	killedAt := time.Now()
	if err := q.pq.Kill(victim); err != nil {
		t.Fatal(err)
	}
	p.waitFiring(killedAt,
		expectAlert{"PactJournalDown", map[string]string{"instance": metricsTarget(q.members[victim])}},
		expectAlert{"PactQuorumVoterMissing", nil},
		expectAlert{"PactQuorumAtRisk", nil})

	// It comes back, and the quorum is whole again before the next fault.
	q.launch(victim)
	q.waitServing(victim)
	polltest.Until(t, 60*time.Second, 250*time.Millisecond, func() bool {
		return len(p.query(`pact:journal_voters_missing == 0`)) == 1
	}, "the restarted %s is not seen serving: %v", q.members[victim].id, p.query(`pact:journal_voters_missing`))

	// A journal CA revoked: the victim's, at the two others.
	revokedAt := time.Now()
	live := q.env(q.members[leader].grpc, q.members[other].grpc)
	if stdout, stderr, code := runPact(t, live, "journal", "revoke-ca", q.members[victim].id, "--reason", "monitoring test: host compromised", "--yes"); code != 0 {
		t.Fatalf("pact journal revoke-ca %s: exit %d\n%s%s", q.members[victim].id, code, stdout, stderr)
	}
	// It signs nothing (PactJournalCARevoked, seen by the others: cut off,
	// it may never apply its own revocation), the quorum refuses it as a
	// peer, so it serves nothing (PactJournalHalted); the others refuse
	// its calls (PactJournalPeerRefused, revoked_intermediate) and it is
	// refused (PactJournalPeerRefusedSteadily, refused_by_peer).
	p.waitFiring(revokedAt,
		expectAlert{"PactJournalCARevoked", map[string]string{"journal_id": q.members[victim].id}},
		expectAlert{"PactJournalHalted", map[string]string{"instance": metricsTarget(q.members[victim])}},
		expectAlert{"PactJournalPeerRefused", map[string]string{"reason": "revoked_intermediate"}},
		expectAlert{"PactJournalPeerRefusedSteadily", map[string]string{"instance": metricsTarget(q.members[victim]), "reason": "refused_by_peer"}})

	// The leader lost: with the revoked journal cut off, killing one more
	// leaves one journal of three, which cannot elect a leader.
	lostAt := time.Now()
	if err := q.pq.Kill(leader); err != nil {
		t.Fatal(err)
	}
	p.waitFiring(lostAt, expectAlert{"PactJournalNoLeader", nil},
		expectAlert{"PactJournalDown", map[string]string{"instance": metricsTarget(q.members[leader])}},
		expectAlert{"PactJournalLeaderContactLost", map[string]string{"instance": metricsTarget(q.members[other])}})
	t.Logf("alerts at the end:\n%s", describeAlertsNow(p))
}

func describeAlertsNow(p *promServer) string {
	as := p.alerts()
	return describeAlerts(&as)
}
