package cli

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// liveJournal is a real journal (journaltest: Raft on bbolt, TLS and gRPC
// on loopback) that the CLI's behaviour tests run against, so what they
// check is what the registry and its authorisation really do. A fake
// journal (fakeJournal) is left only for faults a real one cannot produce
// on demand.
type liveJournal struct {
	h      *journaltest.Harness
	caFile string

	mu    sync.Mutex
	creds map[string]credFiles // by name and role
	next  int                  // the last block of fresh identifiers handed out
}

func newLiveJournal(h *journaltest.Harness) *liveJournal {
	return &liveJournal{h: h, caFile: filepath.Join(h.Dir, ca.RootCertFile), creds: map[string]credFiles{}}
}

// shared is the journal the tests of this package share: each takes fresh
// node names, MACs and serials from it (fresh), so they do not meet.
// TestMain closes it.
var shared struct {
	once sync.Once
	dir  string
	l    *liveJournal
	err  error
}

// seeded is a second shared journal that holds seedLive's three nodes and
// nothing else, for the tests that read what node list shows of a whole
// registry. Nothing writes to it after the seeding.
var seeded struct {
	once sync.Once
	dir  string
	l    *liveJournal
	r    registry
	ok   bool // seeded: false after a failed seeding
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, l := range []*liveJournal{shared.l, seeded.l} {
		if l != nil {
			_ = l.h.J.Close()
		}
	}
	for _, dir := range []string{shared.dir, seeded.dir} {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// startShared starts a journal in a directory of its own that outlives
// the test starting it (TestMain removes it).
func startShared() (dir string, l *liveJournal, err error) {
	if dir, err = os.MkdirTemp("", "pact-cli-test-"); err != nil {
		return "", nil, err
	}
	h, err := journaltest.StartHarness(journaltest.Config(dir), dir)
	if err != nil {
		return dir, nil, err
	}
	return dir, newLiveJournal(h), nil
}

// sharedJournal is the package's shared live journal, started on first use.
func sharedJournal(t *testing.T) *liveJournal {
	t.Helper()
	shared.once.Do(func() { shared.dir, shared.l, shared.err = startShared() })
	if shared.err != nil {
		t.Fatalf("the shared journal: %v", shared.err)
	}
	return shared.l
}

// seededJournal is the shared journal holding only seedLive's nodes
// (unsuffixed: node-a, node-b, node-c), started and seeded on first use.
// A test must not write to it.
func seededJournal(t *testing.T) (*liveJournal, registry) {
	t.Helper()
	seeded.once.Do(func() {
		if seeded.dir, seeded.l, seeded.err = startShared(); seeded.err == nil {
			seeded.r = seedLive(t, seeded.l, "", 0)
			seeded.ok = true
		}
	})
	if !seeded.ok {
		t.Fatalf("the seeded journal did not start or its seeding failed (in the first test to use it): %v", seeded.err)
	}
	return seeded.l, seeded.r
}

// startLiveJournal runs a journal of the test's own, for a test that needs
// the whole registry to itself (what node list shows) or its own clock.
func startLiveJournal(t *testing.T, mutate ...func(*journal.Config)) *liveJournal {
	t.Helper()
	cfg := journaltest.Config(t.TempDir())
	for _, m := range mutate {
		m(&cfg)
	}
	return newLiveJournal(journaltest.Start(t, cfg))
}

// operator is a credential the journal's root signed for name with role,
// written as the files --cert and --key read; one per name and role.
func (l *liveJournal) operator(t *testing.T, name, role string) credFiles {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.creds[name+"/"+role]; ok {
		return c
	}
	certPEM, keyPEM := l.h.IssueAdminPEM(t, name, role)
	dir := filepath.Join(l.h.Dir, "operators-of-the-test", name+"."+role)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	c := credFiles{certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"), keyPEM: keyPEM}
	for file, data := range map[string][]byte{c.certFile: certPEM, c.keyFile: keyPEM} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c.tls = &pair
	c.cert = pair.Leaf
	l.creds[name+"/"+role] = c
	return c
}

// expiredOperator is a credential the journal's root signed for name,
// which expired an hour ago.
func (l *liveJournal) expiredOperator(t *testing.T, name, role string) credFiles {
	t.Helper()
	auth, err := ca.LoadKeyFileAuthority(filepath.Join(l.h.Dir, ca.RootCertFile), filepath.Join(l.h.Dir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueAdmin(auth, name, role, 2*time.Hour, time.Now().Add(-3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := credFiles{certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"), keyPEM: keyPEM}
	for file, data := range map[string][]byte{c.certFile: certPEM, c.keyFile: keyPEM} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// alice is the platform-admin most tests act as.
func (l *liveJournal) alice(t *testing.T) credFiles {
	return l.operator(t, "alice", pki.RolePlatformAdmin)
}

// flags are the global flags for cred and this journal (or addrs, when
// given: a dead address first, say).
func (l *liveJournal) flags(cred credFiles, addrs ...string) []string {
	if len(addrs) == 0 {
		addrs = []string{l.h.Addr}
	}
	return []string{"--journal", strings.Join(addrs, ","), "--ca", l.caFile, "--cert", cred.certFile, "--key", cred.keyFile}
}

// fresh hands out a block of 16 identifiers no other test has: a suffix
// for node names and serials, and the first of 16 MACs (liveMAC).
func (l *liveJournal) fresh() (suffix string, mac int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	return fmt.Sprintf("-%d", l.next), l.next << 4
}

// liveBatchFile is a valid batch file of n nodes, node-000000 onwards
// with suffix, whose MACs and BMC serials no other test has: each call of
// fresh's gives mac a block of 2^24 MACs of its own (06: is a locally
// administered unicast prefix no other helper uses).
func liveBatchFile(n int, suffix string, mac int) string {
	var b strings.Builder
	b.WriteString(hdr)
	for i := range n {
		fmt.Fprintf(&b, "node-%06d%s,%s,BMC%06d%s,,\n", i, suffix, liveBatchMAC(mac, i), i, suffix)
	}
	return b.String()
}

// liveBatchMAC is row i's MAC in liveBatchFile(_, _, mac).
func liveBatchMAC(mac, i int) string {
	block := mac >> 4
	return fmt.Sprintf("06:%02x:%02x:%02x:%02x:%02x", byte(block>>8), byte(block), byte(i>>16), byte(i>>8), byte(i))
}

// liveMAC is a distinct unicast MAC for each i: liveMAC(1) is
// 52:54:00:00:00:01.
func liveMAC(i int) string {
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", byte(i>>16), byte(i>>8), byte(i))
}

// countingAddr is a loopback address that accepts connections and counts
// them, speaking nothing: a journal a test expects pact never to try.
func countingAddr(t *testing.T) (addr string, accepted func() int64) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return lis.Addr().String(), n.Load
}

// client is an AdminService client presenting cred.
func (l *liveJournal) client(t *testing.T, cred credFiles) pactv1.AdminServiceClient {
	t.Helper()
	return pactv1.NewAdminServiceClient(l.h.Dial(t, cred.tls))
}

// node is the registry's record of id.
func (l *liveJournal) node(t *testing.T, id string) *pactv1.Node {
	t.Helper()
	resp, err := l.h.AdminClient(t).InspectNode(context.Background(), &pactv1.InspectNodeRequest{NodeId: id})
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return resp.GetNode()
}

// exists reports whether id is in the registry.
func (l *liveJournal) exists(t *testing.T, id string) bool {
	t.Helper()
	_, err := l.h.AdminClient(t).InspectNode(context.Background(), &pactv1.InspectNodeRequest{NodeId: id})
	return err == nil
}

// register registers a node as cred, failing the test if the journal
// refuses.
func (l *liveJournal) register(t *testing.T, cred credFiles, req *pactv1.RegisterNodeRequest) *pactv1.Node {
	t.Helper()
	resp, err := l.client(t, cred).RegisterNode(context.Background(), req)
	if err != nil {
		t.Fatalf("register %s: %v", req.GetNodeId(), err)
	}
	return resp.GetNode()
}

// activate enrolls a registered node with its hardware, as its agent
// would, and returns the agent's key and certificate chain.
func (l *liveJournal) activate(t *testing.T, bmc string, macs ...string) tls.Certificate {
	t.Helper()
	key := journaltest.NewKey(t)
	resp, err := l.h.Enroll(t, key, bmc, macs...)
	if err != nil {
		t.Fatalf("enroll %v: %v", macs, err)
	}
	return key.TLSCert(resp.GetCertChainDer())
}

// stream opens the agent's stream with its certificate, as a running node
// holds it, until the test ends.
func (l *liveJournal) stream(t *testing.T, agent tls.Certificate) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := pactv1.NewEnrollmentServiceClient(l.h.Dial(t, &agent)).Subscribe(ctx, &pactv1.SubscribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil { // the stream is open once it speaks
		t.Fatal(err)
	}
}

// registry is seedRegistry's three nodes on a live journal, named with a
// suffix: a registered node in maintenance, an active node in ml with
// two MACs, and a decommissioned node that was in hpc, registered with a
// TPM EK hash and a long BMC serial. All registered by alice.
type registry struct {
	a, b, c    string
	macA, macC string
	macsB      []string
	bmcB, bmcC string
	ekC        string
	agentB     tls.Certificate
}

func seedLive(t *testing.T, l *liveJournal, suffix string, mac int) registry {
	t.Helper()
	alice := l.alice(t)
	sum := sha256.Sum256([]byte("ek" + suffix))
	r := registry{
		a: "node-a" + suffix, b: "node-b" + suffix, c: "node-c" + suffix,
		macA: liveMAC(mac + 1), macsB: []string{liveMAC(mac + 2), liveMAC(mac + 3)}, macC: liveMAC(mac + 4),
		bmcB: "BMC-0002" + suffix, bmcC: "A-VERY-LONG-BMC-SERIAL-NUMBER-0004" + suffix,
		ekC: hex.EncodeToString(sum[:]),
	}
	l.register(t, alice, &pactv1.RegisterNodeRequest{NodeId: r.a, Hardware: &pactv1.HardwareIdentity{Macs: []string{r.macA}}})
	l.register(t, alice, &pactv1.RegisterNodeRequest{NodeId: r.b, Vcluster: "ml", Hardware: &pactv1.HardwareIdentity{Macs: r.macsB, BmcSerial: r.bmcB}})
	r.agentB = l.activate(t, r.bmcB, r.macsB...)
	l.register(t, alice, &pactv1.RegisterNodeRequest{NodeId: r.c, Vcluster: "hpc", Hardware: &pactv1.HardwareIdentity{Macs: []string{r.macC}, BmcSerial: r.bmcC, TpmEkHash: r.ekC}})
	if _, err := l.client(t, alice).DecommissionNode(context.Background(), &pactv1.DecommissionNodeRequest{NodeId: r.c}); err != nil {
		t.Fatalf("decommission %s: %v", r.c, err)
	}
	return r
}

// recorder notes every call the CLI made and what it asked, between the
// CLI and the real journal: what the journal was asked is part of the
// behaviour (a filter passed on, a usage error that calls nobody).
type recorder struct {
	mu       sync.Mutex
	calls    []string
	requests []proto.Message
}

func (r *recorder) note(method string, req any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, method[strings.LastIndexByte(method, '/')+1:])
	if m, ok := req.(proto.Message); ok {
		r.requests = append(r.requests, proto.Clone(m))
	}
}

func (r *recorder) callCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *recorder) callsOf(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c == method {
			n++
		}
	}
	return n
}

// last is the last request of type T the CLI sent, or nil.
func last[T proto.Message](r *recorder) T {
	r.mu.Lock()
	defer r.mu.Unlock()
	var zero T
	for i := len(r.requests) - 1; i >= 0; i-- {
		if m, ok := r.requests[i].(T); ok {
			return m
		}
	}
	return zero
}

// chunkSizes are the row counts of the RegisterNodes calls sent.
func (r *recorder) chunkSizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, m := range r.requests {
		if req, ok := m.(*pactv1.RegisterNodesRequest); ok {
			out = append(out, len(req.GetNodes()))
		}
	}
	return out
}

// recordingConn passes every call to the CLI's own journal connections,
// noting it first.
type recordingConn struct {
	*journals
	rec *recorder
}

func (c recordingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	c.rec.note(method, args)
	return c.journals.Invoke(ctx, method, args, reply, opts...)
}

func (c recordingConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c.rec.note(method, nil)
	return c.journals.NewStream(ctx, desc, method, opts...)
}

// recordWith makes a's client record into rec.
func recordWith(a *app, rec *recorder) {
	a.newClient = func(cfg Config, cred *credential) (pactv1.AdminServiceClient, io.Closer, error) {
		js, err := dialJournals(cfg, cred, a.env.Now)
		if err != nil {
			return nil, nil, err
		}
		return pactv1.NewAdminServiceClient(recordingConn{journals: js, rec: rec}), js, nil
	}
}

// runLive runs pact as cred against l with the global flags appended, and
// fails the test if cred's key reached the output.
func runLive(t *testing.T, l *liveJournal, cred credFiles, o runOpts, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	o.key = cred.keyPEM
	return runEnv(t, nil, o, append(append([]string{}, args...), l.flags(cred)...)...)
}
