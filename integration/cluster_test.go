package integration

// Process-level tests of a three-journal quorum: three pact-journal
// processes with their own bbolt stores, Raft over mutual TLS on loopback,
// the pact CLI as an operator runs it, and an in-test Enroll client that
// behaves like a storm of agents.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/integration/launch"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/internal/porttest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// ---------------------------------------------------------------------------
// A quorum of journal processes.

// member is one journal of a quorum; its flags (kept by the launcher)
// stay the same across restarts unless a test sets new ones
// (pq.SetArgs), so a restart reuses its data directory and addresses.
type member struct {
	id      string
	grpc    string // gRPC address (CLI, agents, peers)
	raft    string
	metrics string
}

// quorum is journal processes run by integration/launch on loopback.
type quorum struct {
	t       *testing.T
	dir     string // domain root, admin credential, one data dir per journal
	pq      *launch.ProcQuorum
	members []*member
}

// startQuorum initialises a domain root and starts n journals, returning
// once every one logs that it serves.
func startQuorum(t *testing.T, n int) *quorum {
	t.Helper()
	return startQuorumWith(t, n)
}

// startQuorumWith is startQuorum with more flags for every journal.
func startQuorumWith(t *testing.T, n int, extra ...string) *quorum {
	t.Helper()
	return startQuorumFrom(t, binDir, n, extra...)
}

// startQuorumFrom is startQuorumWith with the pact-journal in bin
// (another release's; launch's SetBin changes one journal's later).
func startQuorumFrom(t *testing.T, bin string, n int, extra ...string) *quorum {
	t.Helper()
	q := &quorum{t: t, dir: t.TempDir()}
	lb, err := launch.NewLoopback(n, "the integration tests run on loopback")
	if err != nil {
		t.Fatal(err)
	}
	if q.pq, err = launch.NewProcQuorum(launch.ProcConfig{Bin: bin, Dir: q.dir, N: n, Net: lb, Extra: extra}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i := range q.pq.Size() {
				t.Logf("--- %s output:\n%s", q.pq.ID(i), q.pq.Log(i))
			}
		}
		if err := q.pq.Close(); err != nil {
			t.Logf("stopping the journals: %v", err)
		}
	})
	for i := range n {
		q.members = append(q.members, &member{id: q.pq.ID(i), grpc: q.pq.GRPC(i), raft: q.pq.Raft(i), metrics: q.pq.Metrics(i)})
	}
	if bin != binDir {
		q.foundPrevious()
	} else {
		for i := range q.members {
			q.launch(i)
		}
	}
	for i := range q.members {
		q.waitServing(i)
	}
	if bin == binDir {
		// A quorum of this tree runs at its feature level within a second
		// of its first leader (docs/upgrade.md); its features are refused
		// until then, and a test starts using them at once.
		polltest.Until(t, 30*time.Second, 50*time.Millisecond, func() bool {
			for i := range q.members {
				if strings.Contains(q.pq.CurrentLog(i), "quorum feature level raised") {
					return true
				}
			}
			return false
		}, "no journal of the new quorum logged that it raised the feature level")
	}
	return q
}

// foundPrevious starts a quorum of a previous release until its founders
// agree: 0.1.0 founders started together sometimes refuse the bootstrap
// (a co-founder's probe answered before it made its candidate; fixed in
// 0.2.0, docs/quorum.md "One quorum"), which is that release's bug and not
// what a test of it is about. Such a start is wiped and made again, at
// most three times; it returns with the journals serving.
func (q *quorum) foundPrevious() {
	q.t.Helper()
	for attempt := 1; ; attempt++ {
		for i := range q.members {
			q.launch(i)
		}
		var err error
		for i := range q.members {
			if err = q.pq.WaitServing(i, 60*time.Second); err != nil {
				break
			}
		}
		if err == nil {
			return
		}
		refused := false
		for i := range q.members {
			refused = refused || strings.Contains(q.pq.CurrentLog(i), "bootstrap refused")
		}
		for i := range q.members {
			_ = q.pq.Stop(i)
		}
		if !refused || attempt == 3 {
			q.t.Fatalf("the previous release's quorum did not start (attempt %d): %v", attempt, err)
		}
		q.t.Logf("the previous release's founders refused the bootstrap (its known race); starting afresh (attempt %d)", attempt+1)
		for i := range q.members {
			if err := os.RemoveAll(q.pq.DataDir(i)); err != nil {
				q.t.Fatal(err)
			}
		}
	}
}

// launch starts member i's process (first start or restart).
func (q *quorum) launch(i int) {
	q.t.Helper()
	if err := q.pq.Start(i); err != nil {
		q.t.Fatal(err)
	}
}

// output is member i's current process's output so far.
func (q *quorum) output(i int) string { return q.pq.CurrentLog(i) }

// exited is closed when member i's current process has exited.
func (q *quorum) exited(i int) <-chan struct{} { return q.pq.Exited(i) }

// signal sends sig to member i's current process.
func (q *quorum) signal(i int, sig syscall.Signal) error { return q.pq.Signal(i, sig) }

// wait waits (bounded) until member i's current process exits and returns
// its exit code.
func (q *quorum) wait(i int) int {
	q.t.Helper()
	select {
	case <-q.exited(i):
	case <-time.After(30 * time.Second):
		q.t.Fatalf("%s did not exit:\n%s", q.members[i].id, q.output(i))
	}
	err := q.pq.ExitError(i)
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		q.t.Fatalf("wait for %s: %v", q.members[i].id, err)
	}
	return 0
}

// add appends a journal with its own flags (on addresses from freeAddrs)
// to the quorum, not started, and returns its index.
func (q *quorum) add(m *member, args []string) int {
	q.t.Helper()
	i := q.pq.Add(m.id, args)
	q.members = append(q.members, m)
	if i != len(q.members)-1 {
		q.t.Fatalf("member %s has index %d in the launcher, %d here", m.id, i, len(q.members)-1)
	}
	return i
}

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago; all are held open together so they are distinct.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []string
	for range n {
		l, err := porttest.Listen()
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out
}

var journalServingRE = regexp.MustCompile(`msg="journal serving".*issuer_serial=([0-9a-f]+)`)

// waitServing waits (bounded) until member i's current process serves and
// returns the serial of the intermediate it signs with.
func (q *quorum) waitServing(i int) string {
	q.t.Helper()
	if err := q.pq.WaitServing(i, 60*time.Second); err != nil {
		q.t.Fatal(err)
	}
	m := journalServingRE.FindStringSubmatch(q.pq.CurrentLog(i))
	if m == nil {
		q.t.Fatalf("%s serves but logged no intermediate serial:\n%s", q.members[i].id, launch.Tail(q.pq.CurrentLog(i), 20))
	}
	return m[1]
}

// addrs is every member's gRPC address.
func (q *quorum) addrs() []string {
	var out []string
	for _, m := range q.members {
		out = append(out, m.grpc)
	}
	return out
}

// env is the CLI environment for the given journal addresses.
func (q *quorum) env(addrs ...string) []string {
	return []string{
		"PACT_JOURNAL=" + strings.Join(addrs, ","),
		"PACT_CA=" + filepath.Join(q.dir, "ca.pem"),
		"PACT_CERT=" + filepath.Join(q.dir, "admin.pem"),
		"PACT_KEY=" + filepath.Join(q.dir, "admin-key.pem"),
	}
}

var isLeaderRE = regexp.MustCompile(`(?m)^pact_journal_is_leader 1$`)

// isLeader asks member i's metrics endpoint whether it leads.
func (q *quorum) isLeader(i int) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + q.members[i].metrics + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return isLeaderRE.Match(b.Bytes())
}

// leader waits (bounded) for one of the members in among to lead.
func (q *quorum) leader(among ...int) int {
	q.t.Helper()
	if len(among) == 0 {
		for i := range q.members {
			among = append(among, i)
		}
	}
	leader := -1
	polltest.Until(q.t, 20*time.Second, 50*time.Millisecond, func() bool {
		for _, i := range among {
			if q.isLeader(i) {
				leader = i
				return true
			}
		}
		return false
	}, "no leader among %v within 20s", among)
	return leader
}

// runPact runs the CLI to completion with env and returns its stdout, its
// stderr and its exit code.
func runPact(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return runPactFrom(t, binDir, env, args...)
}

// runPactFrom is runPact with the CLI from dir (another release's).
func runPactFrom(t *testing.T, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "pact"), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("pact %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// testNode is one node of the inventory the tests register.
type testNode struct {
	id, mac, bmc string
}

func inventory(prefix string, n int) []testNode {
	out := make([]testNode, n)
	for i := range out {
		out[i] = testNode{
			id:  fmt.Sprintf("%s-%04d", prefix, i+1),
			mac: fmt.Sprintf("52:54:%02x:00:%02x:%02x", len(prefix), (i+1)>>8, (i+1)&0xff),
			bmc: fmt.Sprintf("SN-%s-%04d", strings.ToUpper(prefix), i+1),
		}
	}
	return out
}

// registerBatch registers nodes with pact node enroll --batch, through
// every journal address.
func (q *quorum) registerBatch(nodes []testNode) {
	q.t.Helper()
	var csv strings.Builder
	csv.WriteString("node_id,mac,bmc_serial,tpm_ek_hash,vcluster\n")
	for _, n := range nodes {
		fmt.Fprintf(&csv, "%s,%s,%s,,\n", n.id, n.mac, n.bmc)
	}
	file := filepath.Join(q.t.TempDir(), "nodes.csv")
	if err := os.WriteFile(file, []byte(csv.String()), 0o644); err != nil {
		q.t.Fatal(err)
	}
	stdout, stderr, code := runPact(q.t, q.env(q.addrs()...), "node", "enroll", "--batch", file)
	if code != 0 {
		q.t.Fatalf("pact node enroll --batch: exit %d\n%s%s", code, stdout, stderr)
	}
	// Enroll resolves hardware against the answering journal's local
	// registry, which may lag the journal that committed the batch by a few
	// milliseconds; a lagging one confirms with the leader before refusing
	// (and answers NO_LEADER if it cannot). Wait until every journal has
	// applied the batch so the enrollments below are not slowed by that.
	for i := range q.members {
		q.syncRead(i, nodes[len(nodes)-1].id)
	}
}

// syncRead runs a linearizable pact node inspect of probe on member i,
// retrying while it is unavailable (bounded): once it answers, member i's
// local registry reflects every write committed before the call.
func (q *quorum) syncRead(i int, probe string) {
	q.t.Helper()
	env := q.env(q.members[i].grpc)
	var last polltest.Last
	polltest.Until(q.t, 20*time.Second, 100*time.Millisecond, func() bool {
		stdout, stderr, code := runPact(q.t, env, "node", "inspect", probe, "-o", "json")
		if code != 0 && code != 7 {
			q.t.Fatalf("pact node inspect %s on %s: exit %d\n%s%s", probe, q.members[i].id, code, stdout, stderr)
		}
		last.Value = fmt.Sprintf("exit %d\n%s%s", code, stdout, stderr)
		return code == 0
	}, "pact node inspect %s on %s: %v", probe, q.members[i].id, &last)
}

// nodeList reads pact node list -o json from one journal, after a
// linearizable inspect of probe there (so the local list reflects every
// write committed before this call). It retries while the journal is
// unavailable, bounded.
func (q *quorum) nodeList(i int, probe string) ([]nodeJSON, []byte) {
	q.t.Helper()
	q.syncRead(i, probe)
	stdout, stderr, code := runPact(q.t, q.env(q.members[i].grpc), "node", "list", "-o", "json")
	if code != 0 {
		q.t.Fatalf("pact node list on %s: exit %d\n%s%s", q.members[i].id, code, stdout, stderr)
	}
	var nodes []nodeJSON
	if err := json.Unmarshal([]byte(stdout), &nodes); err != nil {
		q.t.Fatalf("pact node list on %s is not JSON: %v\n%s", q.members[i].id, err, stdout)
	}
	return nodes, canonicalList(q.t, []byte(stdout))
}

// canonicalList re-encodes a JSON node list sorted by node_id with sorted
// keys, so two journals' lists compare byte for byte.
func canonicalList(t *testing.T, raw []byte) []byte {
	t.Helper()
	var list []map[string]any
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("node list is not a JSON array: %v", err)
	}
	sort.Slice(list, func(a, b int) bool { return fmt.Sprint(list[a]["node_id"]) < fmt.Sprint(list[b]["node_id"]) })
	out, err := json.MarshalIndent(list, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// identicalLists reads every member's list until all are byte-identical
// (bounded: a background write may land between two reads) and returns
// them.
func (q *quorum) identicalLists(probe string) ([][]nodeJSON, [][]byte, bool) {
	q.t.Helper()
	var lists [][]nodeJSON
	var raws [][]byte
	same := polltest.Within(15*time.Second, 200*time.Millisecond, func() bool {
		lists, raws = make([][]nodeJSON, len(q.members)), make([][]byte, len(q.members))
		same := true
		for i := range q.members {
			lists[i], raws[i] = q.nodeList(i, probe)
			same = same && bytes.Equal(raws[i], raws[0])
		}
		return same
	})
	return lists, raws, same
}

// firstDiff names the first line where two canonical lists differ.
func firstDiff(a, b []byte) string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range max(len(la), len(lb)) {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: %q vs %q", i+1, x, y)
		}
	}
	return "no difference"
}

// ---------------------------------------------------------------------------
// An in-test agent: Enroll over server-TLS, rotating over the journals.

type enroller struct {
	roots   *x509.CertPool
	addrs   []string
	conns   []*grpc.ClientConn
	clients []pactv1.EnrollmentServiceClient
	next    atomic.Uint64
}

func newEnroller(t *testing.T, caFile string, addrs []string) *enroller {
	t.Helper()
	roots, _, err := pki.LoadCertPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	e := &enroller{roots: roots, addrs: addrs}
	for _, a := range addrs {
		conn := dialJournal(t, roots, a, nil)
		e.conns = append(e.conns, conn)
		e.clients = append(e.clients, pactv1.NewEnrollmentServiceClient(conn))
	}
	return e
}

// dialJournal opens a TLS 1.3 channel to a journal, presenting cert if
// set, with a short reconnect backoff so a restarted journal is found fast.
func dialJournal(t *testing.T, roots *x509.CertPool, addr string, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	bc := backoff.DefaultConfig
	bc.MaxDelay = time.Second
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: 2 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// agentKey is an agent's P-256 key and its CSR.
type agentKey struct {
	key  *ecdsa.PrivateKey
	csr  []byte
	spki string // hex SHA-256 of the public key info
}

func newAgentKey() (agentKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return agentKey{}, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, k)
	if err != nil {
		return agentKey{}, err
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return agentKey{}, err
	}
	return agentKey{key: k, csr: csr, spki: pki.SPKIFingerprintRaw(der)}, nil
}

// ack is what a client learned from one enrollment.
type ack struct {
	node     testNode
	key      agentKey
	resp     *pactv1.EnrollResponse
	serial   string // from the response
	leafSPKI string // SPKI hash of the certificate received
	at       time.Time
	attempts int
	addr     string // the journal that answered
	// uncertain: an earlier attempt failed in a way that may have been
	// after the journal acted (Unavailable, DeadlineExceeded).
	uncertain bool
	// unknown: the node ended ALREADY_ACTIVE after an uncertain attempt,
	// so the client never learned its certificate (no response received).
	unknown bool
	err     error
	codes   map[codes.Code]int // retried failures by code
}

// enroll enrolls one node with a fresh key, retrying with the same key
// (as an agent does) on Unavailable, ResourceExhausted and
// DeadlineExceeded, rotating over the journals.
func (e *enroller) enroll(ctx context.Context, n testNode) ack {
	a := ack{node: n, codes: map[codes.Code]int{}}
	key, err := newAgentKey()
	if err != nil {
		a.err = err
		return a
	}
	a.key = key
	req := &pactv1.EnrollRequest{
		Hardware: &pactv1.HardwareIdentity{Macs: []string{n.mac}, BmcSerial: n.bmc},
		CsrDer:   key.csr,
	}
	for a.attempts = 1; ; a.attempts++ {
		if err := ctx.Err(); err != nil {
			a.err = fmt.Errorf("gave up after %d attempts: %w", a.attempts-1, err)
			return a
		}
		i := int(e.next.Add(1) % uint64(len(e.clients)))
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := e.clients[i].Enroll(actx, req)
		cancel()
		if err == nil {
			a.resp, a.serial, a.at, a.addr = resp, resp.GetSerial(), time.Now(), e.addrs[i]
			if len(resp.GetCertChainDer()) > 0 {
				if leaf, perr := x509.ParseCertificate(resp.GetCertChainDer()[0]); perr == nil {
					a.leafSPKI = pki.SPKIFingerprint(leaf)
				}
			}
			return a
		}
		pe := apierr.FromError(err)
		switch pe.Code {
		case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
			a.codes[pe.Code]++
			if pe.Code != codes.ResourceExhausted {
				a.uncertain = true
			}
			wait := min(20*time.Millisecond<<min(a.attempts, 5), 500*time.Millisecond)
			wait = max(wait, pe.RetryAfter)
			wait += time.Duration(mrand.Int64N(int64(wait)/2 + 1))
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			continue
		case codes.FailedPrecondition:
			if pe.Reason == "ALREADY_ACTIVE" && a.uncertain {
				a.unknown, a.at, a.addr = true, time.Now(), e.addrs[i]
				return a
			}
		}
		a.err = fmt.Errorf("attempt %d at %s: %w", a.attempts, e.addrs[i], pe)
		return a
	}
}

// ---------------------------------------------------------------------------

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts journal processes; skipped with -short")
	}
}

// TestQuorumSurvivesLeaderKill enrolls 300 nodes from 8 concurrent clients
// while the leader is SIGKILLed, then checks that every acknowledged
// enrollment survived on every journal and that the journals agree.
func TestQuorumSurvivesLeaderKill(t *testing.T) {
	skipShort(t)
	const total, workers, killAfter = 300, 8, 100
	q := startQuorum(t, 3)
	nodes := inventory("kill", total)
	q.registerBatch(nodes)

	victim := q.leader()
	t.Logf("leader before the kill: %s", q.members[victim].id)
	e := newEnroller(t, filepath.Join(q.dir, "ca.pem"), q.addrs())

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		acks     []ack // in order of receipt
		killOnce sync.Once
		killAt   time.Time
		killAck  int
		killErr  error
	)
	work := make(chan testNode)
	go func() {
		defer close(work)
		for _, n := range nodes {
			select {
			case work <- n:
			case <-ctx.Done():
				return
			}
		}
	}()
	began := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				a := e.enroll(ctx, n)
				mu.Lock()
				acks = append(acks, a)
				if len(acks) >= killAfter {
					killOnce.Do(func() {
						killAt, killAck = time.Now(), len(acks)
						killErr = q.pq.Signal(victim, syscall.SIGKILL)
					})
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	if killErr != nil || killAt.IsZero() {
		t.Fatalf("SIGKILL of the leader %s: %v (killed: %v)", q.members[victim].id, killErr, !killAt.IsZero())
	}
	select {
	case <-q.pq.Exited(victim):
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not die on SIGKILL", q.members[victim].id)
	}
	var survivors []int
	for i := range q.members {
		if i != victim {
			survivors = append(survivors, i)
		}
	}
	newLeader := q.leader(survivors...)

	// What the clients saw.
	var failed, unknown, uncertain, retried int
	retries := map[codes.Code]int{}
	acked := map[string]ack{}
	for _, a := range acks {
		for c, n := range a.codes {
			retries[c] += n
		}
		if a.attempts > 1 {
			retried++
		}
		if a.uncertain {
			uncertain++
		}
		switch {
		case a.err != nil:
			failed++
			t.Errorf("enrollment of %s failed: %v", a.node.id, a.err)
		case a.unknown:
			unknown++
			acked[a.node.id] = a
		default:
			acked[a.node.id] = a
			// The certificate received is for this client's key, names the
			// right node, and chains to the domain root.
			if a.resp.GetNodeId() != a.node.id {
				t.Errorf("%s: the response names node %q", a.node.id, a.resp.GetNodeId())
			}
			if a.leafSPKI != a.key.spki {
				t.Errorf("%s: the certificate received is not for the client's key (spki %s, key %s)", a.node.id, a.leafSPKI, a.key.spki)
			}
			if err := verifyChain(e.roots, a.resp.GetCertChainDer(), a.serial); err != nil {
				t.Errorf("%s: %v", a.node.id, err)
			}
		}
	}
	if len(acked) != total {
		t.Errorf("%d of %d nodes acknowledged (%d failed) within %v", len(acked), total, failed, elapsed.Round(time.Millisecond))
	}

	// The unavailability window: the longest gap between consecutive acks
	// from the last ack before the kill onwards.
	var times []time.Time
	for _, a := range acks {
		if a.err == nil && !a.unknown {
			times = append(times, a.at)
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	var gap, firstAfter time.Duration
	var gapFrom time.Time
	for k := 1; k < len(times); k++ {
		if times[k].Before(killAt) {
			continue
		}
		if d := times[k].Sub(times[k-1]); d > gap {
			gap, gapFrom = d, times[k-1]
		}
	}
	for _, at := range times {
		if at.After(killAt) {
			firstAfter = at.Sub(killAt)
			break
		}
	}
	var before, after int
	for _, at := range times {
		if at.Before(killAt) {
			before++
		} else {
			after++
		}
	}
	t.Logf("workload: %d nodes, %d clients, %v; %d acked (%d before the kill, %d after), %d unknown outcome, %d failed; %d enrollments needed retries (%d with an uncertain attempt), retried failures by code %v",
		total, workers, elapsed.Round(time.Millisecond), len(times), before, after, unknown, failed, retried, uncertain, retries)
	t.Logf("kill: SIGKILL %s at ack %d, %v into the workload; new leader %s",
		q.members[victim].id, killAck, killAt.Sub(began).Round(time.Millisecond), q.members[newLeader].id)
	t.Logf("unavailability: longest gap between consecutive acks after the kill %v (from %v after the kill); first ack after the kill %v after it",
		gap.Round(time.Millisecond), gapFrom.Sub(killAt).Round(time.Millisecond), firstAfter.Round(time.Millisecond))

	// Restart the killed journal with the same flags and data directory.
	restartedAt := time.Now()
	q.launch(victim)
	q.waitServing(victim)
	t.Logf("restart: %s serves again %v after launch", q.members[victim].id, time.Since(restartedAt).Round(time.Millisecond))

	// (d) every journal ends with the same list; (a)-(c) on each.
	lists, raws, same := q.identicalLists(nodes[0].id)
	var tbl strings.Builder
	tw := tabwriter.NewWriter(&tbl, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "journal\trole\tnodes\tactive\tacked-ok\tmissing/not-active\tserial-mismatch\tmac-dup\tsame-as-j1")
	for i, list := range lists {
		byID := map[string]nodeJSON{}
		for _, n := range list {
			byID[n.NodeID] = n
		}
		var active, ok, missing, mismatch int
		for _, n := range list {
			if n.State == "active" {
				active++
			}
		}
		for id, a := range acked {
			n, found := byID[id]
			switch {
			case !found || n.State != "active" || n.CertSerial == "":
				missing++
				t.Errorf("(a) %s: acknowledged node %s is %q on this journal (found %v)", q.members[i].id, id, n.State, found)
			case a.unknown:
				ok++ // active with a serial; which one the client cannot know
			case n.CertSerial != a.serial:
				mismatch++
				t.Errorf("(a/c) %s: %s holds serial %s, the client was given %s", q.members[i].id, id, n.CertSerial, a.serial)
			default:
				ok++
			}
		}
		// (b) every MAC belongs to exactly one node.
		owners := map[string][]string{}
		for _, n := range list {
			for _, m := range n.MACs {
				owners[m] = append(owners[m], n.NodeID)
			}
		}
		dup := 0
		for m, ids := range owners {
			if len(ids) != 1 {
				dup++
				t.Errorf("(b) %s: MAC %s belongs to %v", q.members[i].id, m, ids)
			}
		}
		for _, n := range nodes {
			if len(owners[n.mac]) == 0 {
				t.Errorf("(b) %s: MAC %s of %s is on no node", q.members[i].id, n.mac, n.id)
			}
		}
		role := "follower"
		switch i {
		case newLeader:
			role = "leader"
		case victim:
			role = "killed+restarted"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%v\n", q.members[i].id, role, len(list), active, ok, missing, mismatch, dup, bytes.Equal(raws[i], raws[0]))
	}
	tw.Flush()
	t.Logf("final registry per journal:\n%s", tbl.String())
	if !same {
		for i := 1; i < len(raws); i++ {
			if !bytes.Equal(raws[i], raws[0]) {
				t.Errorf("(d) %s's node list differs from %s's: %s", q.members[i].id, q.members[0].id, firstDiff(raws[0], raws[i]))
			}
		}
	}
}

// verifyChain checks that a chain received from Enroll verifies to the
// domain root for client auth and that its leaf carries serial.
func verifyChain(roots *x509.CertPool, chain [][]byte, serial string) error {
	if len(chain) < 2 {
		return fmt.Errorf("certificate chain has %d certificates, want leaf and intermediate", len(chain))
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return fmt.Errorf("leaf: %w", err)
	}
	inter := x509.NewCertPool()
	for _, der := range chain[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("intermediate: %w", err)
		}
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("the certificate received does not verify: %w", err)
	}
	if got := pki.SerialHex(leaf.SerialNumber); got != serial {
		return fmt.Errorf("the certificate's serial %s is not the serial in the response %s", got, serial)
	}
	return nil
}

// TestQuorumMinorityAcceptsNoWrites freezes two of three journals and
// checks that the one left refuses writes and linearizable reads, and that
// the quorum accepts the write once the two are back.
func TestQuorumMinorityAcceptsNoWrites(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	stdout, stderr, code := runPact(t, q.env(q.addrs()...), "node", "enroll", "min-0001", "--mac", "52:54:00:aa:00:01", "--bmc-serial", "SN-MIN-1")
	if code != 0 {
		t.Fatalf("registering min-0001: exit %d\n%s%s", code, stdout, stderr)
	}
	leader := q.leader()
	// The one left is a follower: the leader is among the frozen.
	survivor := (leader + 1) % len(q.members)
	var frozen []int
	for i, m := range q.members {
		if i == survivor {
			continue
		}
		if err := q.pq.Signal(i, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %s: %v", m.id, err)
		}
		frozen = append(frozen, i)
	}
	thaw := func() {
		for _, i := range frozen {
			q.pq.Signal(i, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw) // before the processes' own cleanup sends SIGTERM
	t.Logf("froze %s and %s (leader %s); %s is alone", q.members[frozen[0]].id, q.members[frozen[1]].id, q.members[leader].id, q.members[survivor].id)

	// The survivor must answer for itself, at once: NO_LEADER, or
	// OUTCOME_UNKNOWN for a write forwarded into the frozen leader. The
	// CLI waits a minute per journal, so a survivor that only let the
	// call run out of time would end it with the CLI's deadline, not
	// with one of those reasons, however slow or fast the machine.
	answered := func(out string) bool {
		return strings.Contains(out, "NO_LEADER") || strings.Contains(out, "OUTCOME_UNKNOWN")
	}
	alone := q.env(q.members[survivor].grpc)
	began := time.Now()
	stdout, stderr, code = runPact(t, alone, "node", "enroll", "min-0002", "--mac", "52:54:00:aa:00:02", "--bmc-serial", "SN-MIN-2", "--timeout", "60s")
	took := time.Since(began)
	t.Logf("write on the minority: exit %d after %v: %s", code, took.Round(time.Millisecond), strings.TrimSpace(stderr+stdout))
	if code != 7 {
		t.Errorf("a write on the minority: exit %d, want 7 (unavailable)\n%s%s", code, stdout, stderr)
	}
	if !answered(stderr + stdout) {
		t.Errorf("a write on the minority failed after %v without the journal's NO_LEADER or OUTCOME_UNKNOWN:\n%s%s", took, stdout, stderr)
	}
	// Frozen right after the registration, the leader may still be the
	// survivor's leader when the write comes: it is forwarded into the
	// frozen leader's socket, times out as OUTCOME_UNKNOWN, and commits once
	// the leader is thawed, with the majority. Only a NO_LEADER answer says
	// the write was never made.
	mayHaveBeenMade := strings.Contains(stderr+stdout, "OUTCOME_UNKNOWN")

	began = time.Now()
	stdout, stderr, code = runPact(t, alone, "node", "inspect", "min-0001", "-o", "json", "--timeout", "60s")
	took = time.Since(began)
	t.Logf("linearizable read on the minority: exit %d after %v: %s", code, took.Round(time.Millisecond), strings.TrimSpace(stderr))
	if code != 7 {
		t.Errorf("inspect on the minority: exit %d, want 7 (a linearizable read needs the majority)\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "NO_LEADER") {
		t.Errorf("inspect on the minority failed after %v without the journal's NO_LEADER:\n%s%s", took, stdout, stderr)
	}

	thaw()
	healed := time.Now()
	tries := 0
	var last polltest.Last
	polltest.Until(t, 30*time.Second, 200*time.Millisecond, func() bool {
		tries++
		stdout, stderr, code = runPact(t, alone, "node", "enroll", "min-0002", "--mac", "52:54:00:aa:00:02", "--bmc-serial", "SN-MIN-2")
		switch {
		case code == 0:
			return true
		case code == 4:
			// An earlier attempt was applied after all: the one on the
			// minority, or (if tries > 1) a retry below that timed out.
			if mayHaveBeenMade {
				t.Logf("the minority's write, answered OUTCOME_UNKNOWN, was committed by the thawed leader")
				return true
			}
			t.Errorf("after the heal (try %d), registering min-0002 says it exists: a write that failed with exit 7 took effect\n%s%s", tries, stdout, stderr)
			return true
		case code != 7 && code != 8:
			t.Fatalf("the write after the heal: exit %d\n%s%s", code, stdout, stderr)
		}
		last.Value = fmt.Sprintf("exit %d\n%s%s", code, stdout, stderr)
		return false
	}, "the write after the heal: %v", &last)
	t.Logf("the write succeeded %v after SIGCONT", time.Since(healed).Round(time.Millisecond))
	for i := range q.members {
		var n nodeJSON
		stdout, stderr, code = runPact(t, q.env(q.members[i].grpc), "node", "inspect", "min-0002", "-o", "json")
		if code != 0 || json.Unmarshal([]byte(stdout), &n) != nil || n.State != "registered" {
			t.Errorf("min-0002 on %s: exit %d %+v\n%s%s", q.members[i].id, code, n, stdout, stderr)
		}
	}
}

// TestQuorumFullRestart stops every journal and starts them again: the
// registry survives on every journal, and a certificate issued before the
// restart (by an intermediate no running journal holds any more) still
// authenticates a stream.
func TestQuorumFullRestart(t *testing.T) {
	skipShort(t)
	const total = 20
	q := startQuorum(t, 3)
	nodes := inventory("rst", total)
	q.registerBatch(nodes)
	e := newEnroller(t, filepath.Join(q.dir, "ca.pem"), q.addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	serials := map[string]string{}
	var kept ack
	for i, n := range nodes {
		a := e.enroll(ctx, n)
		if a.err != nil || a.unknown {
			t.Fatalf("enroll %s: %v (unknown outcome %v)", n.id, a.err, a.unknown)
		}
		if err := verifyChain(e.roots, a.resp.GetCertChainDer(), a.serial); err != nil {
			t.Fatalf("%s: %v", n.id, err)
		}
		serials[n.id] = a.serial
		if i == total/2 {
			kept = a
		}
	}
	before, raws, same := q.identicalLists(nodes[0].id)
	if !same {
		t.Fatalf("before the restart the journals disagree: %s", firstDiff(raws[0], raws[1]))
	}
	var keptIssuer string
	for _, n := range before[0] {
		if n.NodeID == kept.node.id {
			keptIssuer = n.CertIssuerSerial
		}
	}

	// Stop all three at once, then start all three.
	for i := range q.members {
		q.pq.Signal(i, syscall.SIGTERM)
	}
	for i, m := range q.members {
		select {
		case <-q.pq.Exited(i):
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit on SIGTERM", m.id)
		}
		if err := q.pq.ExitError(i); err != nil {
			t.Errorf("%s exited on SIGTERM: %v", m.id, err)
		}
	}
	began := time.Now()
	for i := range q.members {
		q.launch(i)
	}
	issuers := map[string]bool{}
	for i := range q.members {
		issuers[q.waitServing(i)] = true
	}
	t.Logf("full restart: all three serve %v after launch", time.Since(began).Round(time.Millisecond))
	if issuers[keptIssuer] {
		t.Errorf("a restarted journal signs with intermediate %s again; it should have re-keyed", keptIssuer)
	}

	after, raws, same := q.identicalLists(nodes[0].id)
	if !same {
		for i := 1; i < len(raws); i++ {
			if !bytes.Equal(raws[i], raws[0]) {
				t.Errorf("after the restart %s's list differs from %s's: %s", q.members[i].id, q.members[0].id, firstDiff(raws[0], raws[i]))
			}
		}
	}
	for i, list := range after {
		byID := map[string]nodeJSON{}
		for _, n := range list {
			byID[n.NodeID] = n
		}
		for id, serial := range serials {
			if n := byID[id]; n.State != "active" || n.CertSerial != serial {
				t.Errorf("after the restart %s shows %s as %q with serial %q, want active with %s", q.members[i].id, id, n.State, n.CertSerial, serial)
			}
		}
		if len(list) != total {
			t.Errorf("after the restart %s lists %d nodes, want %d", q.members[i].id, len(list), total)
		}
	}

	// The kept certificate opens a stream on a restarted journal.
	target := (q.leader() + 1) % len(q.members) // a follower: no leader-only path
	cert := tls.Certificate{Certificate: kept.resp.GetCertChainDer(), PrivateKey: kept.key.key}
	conn := dialJournal(t, e.roots, q.members[target].grpc, &cert)
	client := pactv1.NewEnrollmentServiceClient(conn)
	var last polltest.Last
	polltest.Until(t, 20*time.Second, 100*time.Millisecond, func() bool {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		stream, err := client.Subscribe(sctx, &pactv1.SubscribeRequest{})
		var ev *pactv1.SubscribeResponse
		if err == nil {
			ev, err = stream.Recv()
		}
		scancel()
		if err == nil {
			as := ev.GetAssignment()
			if as == nil || as.GetNodeId() != kept.node.id {
				t.Errorf("first event on the stream: %v, want the assignment of %s", ev, kept.node.id)
			}
			t.Logf("stream: %s (certificate %s from intermediate %s, issued before the restart) authenticated to %s; first event %v",
				kept.node.id, kept.serial, keptIssuer, q.members[target].id, ev)
			return true
		}
		pe := apierr.FromError(err)
		if pe.Code != codes.Unavailable {
			t.Fatalf("Subscribe with the certificate issued before the restart, on %s: %v", q.members[target].id, pe)
		}
		last.Value = pe
		return false
	}, "Subscribe with the certificate issued before the restart, on %s: %v", q.members[target].id, &last)
}
