package journal_test

// The lifecycle suite walks every transition of the registry and every error
// of the agent and operator RPCs through a real journal (journaltest: Raft on
// bbolt, TLS and gRPC on loopback). Time is a fake clock: the liveness loop,
// the takeover window and the certificates all read it, and the tests
// advance it instead of sleeping. Every refusal is checked for its gRPC code
// and reason, for returning no certificate, and for leaving the registry and
// its audit trail exactly as they were.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	"github.com/pact-hpc/pact/journal/v1rpc"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Every wait is a bounded poll: a loaded machine makes the suite slower,
// never wrong. No test bounds how long the journal takes in wall time:
// "at once" is checked with the journal's clock standing still, so only
// the event itself, never a timer, can have done it.
const (
	pollEvery   = 10 * time.Millisecond
	pollTimeout = 20 * time.Second
	callTimeout = 30 * time.Second
)

const (
	stRegistered = pactv1.NodeState_NODE_STATE_REGISTERED
	stActive     = pactv1.NodeState_NODE_STATE_ACTIVE
	stInactive   = pactv1.NodeState_NODE_STATE_INACTIVE
	stRevoked    = pactv1.NodeState_NODE_STATE_REVOKED
)

// devAdmin is the actor of the development admin credential.
const devAdmin = "admin/admin"

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, pollTimeout, pollEvery, cond, "gave up after %v waiting for %s", pollTimeout, what)
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// wantErr checks a refusal's gRPC code and pact reason.
func wantErr(t testing.TB, err error, code codes.Code, reason apierr.Reason) *apierr.Error {
	t.Helper()
	pe := apierr.FromError(err)
	if pe == nil {
		t.Fatalf("call succeeded, want %s %s", code, reason)
	}
	if pe.Code != code || pe.Reason != reason {
		t.Fatalf("got %v (code %s, reason %q), want %s %s", err, pe.Code, pe.Reason, code, reason)
	}
	return pe
}

func hw(bmc string, macs ...string) *pactv1.HardwareIdentity {
	return &pactv1.HardwareIdentity{Macs: macs, BmcSerial: bmc}
}

// env is a journal on a fake clock and its platform-admin client.
type env struct {
	h     *journaltest.Harness
	fc    *fakeclock.Clock
	cfg   journal.Config
	admin pactv1.AdminServiceClient
	// streamed lists the nodes that ever had a stream, so quiesce can
	// count the stream timers.
	streamed map[string]bool
}

func newEnv(t *testing.T, mutate ...func(*journal.Config)) *env {
	t.Helper()
	cfg := journaltest.Config(t.TempDir())
	fc := fakeclock.New(time.Now())
	cfg.Clock = fc
	for _, m := range mutate {
		m(&cfg)
	}
	h := journaltest.Start(t, cfg)
	e := &env{h: h, fc: fc, cfg: cfg, admin: h.AdminClient(t), streamed: map[string]bool{}}
	e.quiesce(t)
	return e
}

// quiesce waits until every journal loop that runs on the clock waits on a
// timer: the intermediate rotation, the liveness loop, the federation
// refresher, and one re-check per open stream. Then an advance reaches
// all of them, and whatever an earlier advance started (a digest, a
// MarkInactive) has been committed.
func (e *env) quiesce(t testing.TB) {
	t.Helper()
	eventually(t, "the journal's loops to wait on the clock", func() bool {
		want := 3
		for id := range e.streamed {
			want += e.h.J.OpenStreams(id)
		}
		return e.fc.Timers() >= want
	})
}

// tick advances the fake clock by d and lets the loops it wakes finish.
func (e *env) tick(t testing.TB, d time.Duration) {
	t.Helper()
	e.quiesce(t)
	e.fc.Advance(d)
	e.quiesce(t)
}

func (e *env) now() int64 { return e.fc.Now().UnixNano() }

func (e *env) register(t testing.TB, id, bmc string, macs ...string) *pactv1.Node {
	t.Helper()
	return e.registerIn(t, id, "", bmc, macs...)
}

func (e *env) registerIn(t testing.TB, id, vcluster, bmc string, macs ...string) *pactv1.Node {
	t.Helper()
	resp, err := e.admin.RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: id, Vcluster: vcluster, Hardware: hw(bmc, macs...)})
	if err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
	return resp.GetNode()
}

func (e *env) enroll(t testing.TB, key journaltest.Key, bmc string, macs ...string) (*pactv1.EnrollResponse, error) {
	t.Helper()
	return pactv1.NewEnrollmentServiceClient(e.h.Dial(t, nil)).Enroll(callCtx(t), &pactv1.EnrollRequest{Hardware: hw(bmc, macs...), CsrDer: key.CSR})
}

// agent is an enrolled node as its agent holds it.
type agent struct {
	node   string
	key    journaltest.Key
	serial string
	cert   tls.Certificate
}

func newAgent(node string, key journaltest.Key, chain [][]byte, serial string) *agent {
	return &agent{node: node, key: key, serial: serial, cert: key.TLSCert(chain)}
}

// activate registers a node and enrolls it with a fresh key.
func (e *env) activate(t testing.TB, node, bmc, mac string) *agent {
	t.Helper()
	e.register(t, node, bmc, mac)
	return e.enrollNew(t, node, bmc, mac)
}

// enrollNew enrolls a registered node with a fresh key.
func (e *env) enrollNew(t testing.TB, node, bmc string, macs ...string) *agent {
	t.Helper()
	key := journaltest.NewKey(t)
	resp, err := e.enroll(t, key, bmc, macs...)
	if err != nil {
		t.Fatalf("enroll %s: %v", node, err)
	}
	if resp.GetNodeId() != node {
		t.Fatalf("enrolled as %s, want %s", resp.GetNodeId(), node)
	}
	return newAgent(node, key, resp.GetCertChainDer(), resp.GetSerial())
}

func (e *env) agentClient(t testing.TB, a *agent) pactv1.EnrollmentServiceClient {
	return pactv1.NewEnrollmentServiceClient(e.h.Dial(t, &a.cert))
}

// renew renews a's certificate onto a fresh key.
func (e *env) renew(t testing.TB, a *agent) (*agent, error) {
	t.Helper()
	return e.renewOver(t, e.agentClient(t, a), a)
}

// renewOver is renew over a connection of the caller's (a client of a's).
func (e *env) renewOver(t testing.TB, client pactv1.EnrollmentServiceClient, a *agent) (*agent, error) {
	t.Helper()
	key := journaltest.NewKey(t)
	resp, err := client.RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: key.CSR})
	if err != nil {
		if len(resp.GetCertChainDer()) > 0 {
			t.Errorf("a refused renewal returned a certificate")
		}
		return nil, err
	}
	return newAgent(a.node, key, resp.GetCertChainDer(), resp.GetSerial()), nil
}

// subscribeErr opens a stream with cert that must be refused, and returns
// how it ended.
func (e *env) subscribeErr(t testing.TB, cert *tls.Certificate) error {
	t.Helper()
	s, err := pactv1.NewEnrollmentServiceClient(e.h.Dial(t, cert)).Subscribe(callCtx(t), &pactv1.SubscribeRequest{})
	if err != nil {
		return err
	}
	ev, err := s.Recv() // a refused stream reports its status on the first Recv
	if err == nil {
		t.Errorf("a refused stream delivered %v", ev)
	}
	return err
}

func (e *env) node(t testing.TB, id string) *pactv1.Node {
	t.Helper()
	resp, err := e.admin.InspectNode(callCtx(t), &pactv1.InspectNodeRequest{NodeId: id})
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return resp.GetNode()
}

// waitNode polls InspectNode until ok holds.
func (e *env) waitNode(t testing.TB, id, what string, ok func(*pactv1.Node) bool) *pactv1.Node {
	t.Helper()
	var n *pactv1.Node
	eventually(t, id+" "+what, func() bool {
		n = e.node(t, id)
		return ok(n)
	})
	return n
}

func (e *env) waitState(t testing.TB, id string, st pactv1.NodeState) *pactv1.Node {
	t.Helper()
	return e.waitNode(t, id, "to be "+st.String(), func(n *pactv1.Node) bool { return n.GetState() == st })
}

// audit lists the audit entries about node ("" for all), oldest first.
func (e *env) audit(t testing.TB, node string) []*pactv1.AuditEntry {
	t.Helper()
	resp, err := e.admin.ListAudit(callCtx(t), &pactv1.ListAuditRequest{NodeId: node, Limit: 10000})
	if err != nil {
		t.Fatalf("list audit: %v", err)
	}
	return resp.GetEntries()
}

func (e *env) lastAudit(t testing.TB, node string) *pactv1.AuditEntry {
	t.Helper()
	entries := e.audit(t, node)
	if len(entries) == 0 {
		t.Fatalf("no audit entry for %s", node)
	}
	return entries[len(entries)-1]
}

func actions(entries []*pactv1.AuditEntry) []string {
	out := make([]string, len(entries))
	for i, a := range entries {
		out[i] = a.GetAction()
	}
	return out
}

// registry is what a refusal must leave untouched: the records, the audit
// trail, and the Raft log (the journal's applied index: no write at all).
type registry struct {
	nodes   []*pactv1.Node
	audit   int
	applied uint64
}

func (e *env) registry(t testing.TB) registry {
	t.Helper()
	resp, err := e.admin.ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
	if err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	return registry{nodes: resp.GetNodes(), audit: len(e.audit(t, "")), applied: resp.GetAppliedIndex()}
}

func (e *env) unchanged(t testing.TB, before registry) {
	t.Helper()
	after := e.registry(t)
	if after.audit != before.audit {
		t.Errorf("the audit trail went from %d to %d entries", before.audit, after.audit)
	}
	same := len(after.nodes) == len(before.nodes)
	for i := 0; same && i < len(after.nodes); i++ {
		same = proto.Equal(after.nodes[i], before.nodes[i])
	}
	if !same {
		t.Errorf("the registry changed:\nbefore %v\nafter  %v", before.nodes, after.nodes)
	}
}

// unchangedUnwritten is unchanged, and also checks that nothing reached
// the Raft log (a no-op answered "unchanged" from confirmed state).
func (e *env) unchangedUnwritten(t testing.TB, before registry) {
	t.Helper()
	e.unchanged(t, before)
	if after := e.registry(t); after.applied != before.applied {
		t.Errorf("the Raft log went from index %d to %d: the no-op was written", before.applied, after.applied)
	}
}

// certCarrier is a response that can carry a certificate.
type certCarrier interface{ GetCertChainDer() [][]byte }

// refused checks a refusal: its code and reason, no certificate in the
// response, and no change to the registry or the audit trail since before.
func (e *env) refused(t testing.TB, before registry, resp certCarrier, err error, code codes.Code, reason apierr.Reason) *apierr.Error {
	t.Helper()
	if resp != nil && len(resp.GetCertChainDer()) > 0 {
		t.Errorf("a refused call returned a certificate")
	}
	pe := wantErr(t, err, code, reason)
	e.unchanged(t, before)
	return pe
}

// refusedUnwritten is refused, and also checks that nothing reached the
// Raft log: the journal's applied index did not move. (Operator writes a
// rule refuses in Apply are entries; agent and credential refusals are
// decided before any proposal.)
func (e *env) refusedUnwritten(t testing.TB, before registry, resp certCarrier, err error, code codes.Code, reason apierr.Reason) *apierr.Error {
	t.Helper()
	pe := e.refused(t, before, resp, err, code, reason)
	if after := e.registry(t); after.applied != before.applied {
		t.Errorf("the Raft log went from index %d to %d: the refusal was written", before.applied, after.applied)
	}
	return pe
}

// watch is an open Subscribe stream, read by a goroutine.
type watch struct {
	node   string
	first  *pactv1.Assignment
	cancel context.CancelFunc
	events chan *pactv1.SubscribeResponse
	done   chan struct{}
	err    error     // how the stream ended; read after done
	ended  time.Time // when Recv returned err
}

// subscribe opens a's stream and reads its opening events: the assignment
// and the trust bundle.
func (e *env) subscribe(t testing.TB, a *agent) *watch {
	t.Helper()
	return e.subscribeWith(t, a, &pactv1.SubscribeRequest{})
}

// subscribeWith is subscribe with the request a's agent sends.
func (e *env) subscribeWith(t testing.TB, a *agent, req *pactv1.SubscribeRequest) *watch {
	t.Helper()
	return e.subscribeOver(t, e.agentClient(t, a), a.node, req)
}

// subscribeOver is subscribeWith over a connection of the caller's (a
// client of a's), for calls that must share it.
func (e *env) subscribeOver(t testing.TB, client pactv1.EnrollmentServiceClient, node string, req *pactv1.SubscribeRequest) *watch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := client.Subscribe(ctx, req)
	if err != nil {
		cancel()
		t.Fatalf("subscribe %s: %v", node, err)
	}
	w := &watch{node: node, cancel: cancel, events: make(chan *pactv1.SubscribeResponse, 64), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			ev, err := s.Recv()
			if err != nil {
				w.err, w.ended = err, time.Now()
				return
			}
			select {
			case w.events <- ev:
			case <-ctx.Done():
				w.err, w.ended = ctx.Err(), time.Now()
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	e.streamed[node] = true
	ev := w.next(t)
	if ev.GetAssignment().GetNodeId() != node {
		t.Fatalf("first event %v, want the assignment of %s", ev, node)
	}
	w.first = ev.GetAssignment()
	if ev := w.next(t); len(ev.GetTrustBundle().GetDer()) == 0 {
		t.Fatalf("second event %v, want the trust bundle", ev)
	}
	return w
}

// next returns the stream's next event.
func (w *watch) next(t testing.TB) *pactv1.SubscribeResponse {
	t.Helper()
	select {
	case ev := <-w.events:
		return ev
	default:
	}
	select {
	case ev := <-w.events:
		return ev
	case <-w.done:
		select {
		case ev := <-w.events:
			return ev
		default:
		}
		t.Fatalf("the stream of %s ended (%v) while an event was expected", w.node, w.err)
	case <-time.After(pollTimeout):
		t.Fatalf("no event on the stream of %s within %v", w.node, pollTimeout)
	}
	return nil
}

// quiet checks that no event is waiting and the stream is still open.
func (w *watch) quiet(t testing.TB) {
	t.Helper()
	select {
	case ev := <-w.events:
		t.Errorf("unexpected event on the stream of %s: %v", w.node, ev)
	default:
	}
	select {
	case <-w.done:
		t.Errorf("the stream of %s ended: %v", w.node, w.err)
	default:
	}
}

// end waits for the stream to end; it returns the events it still
// delivered, when it ended and how.
func (w *watch) end(t testing.TB) ([]*pactv1.SubscribeResponse, time.Time, error) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(pollTimeout):
		t.Fatalf("the stream of %s did not end within %v", w.node, pollTimeout)
	}
	var evs []*pactv1.SubscribeResponse
	for {
		select {
		case ev := <-w.events:
			evs = append(evs, ev)
		default:
			return evs, w.ended, w.err
		}
	}
}

// close ends the stream from the agent's side and waits for the journal to
// let go of it.
func (w *watch) close(t testing.TB, e *env) {
	t.Helper()
	w.cancel()
	<-w.done
	eventually(t, "the journal to drop the stream of "+w.node, func() bool { return e.h.J.OpenStreams(w.node) == 0 })
}

// localAddr records the client address of the connections a channel dials:
// the source the journal sees.
type localAddr struct {
	mu   sync.Mutex
	addr string
}

func (l *localAddr) option() grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			l.mu.Lock()
			l.addr = c.LocalAddr().String()
			l.mu.Unlock()
		}
		return c, err
	})
}

func (l *localAddr) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}

func withCorrelation(t testing.TB, id string) context.Context {
	return metadata.AppendToOutgoingContext(callCtx(t), v1rpc.CorrelationHeader, id)
}

// correlation is the one correlation id in a response header.
func correlation(t testing.TB, hdr metadata.MD) string {
	t.Helper()
	v := hdr.Get(v1rpc.CorrelationHeader)
	if len(v) != 1 {
		t.Fatalf("response header has %d %s values (%v), want 1", len(v), v1rpc.CorrelationHeader, v)
	}
	return v[0]
}

// ---------------------------------------------------------------------------
// Enroll on an Active node: retry, refusal while streaming or recently seen,
// refusal with a retry-after while quiet, takeover after the window.

func TestEnrollOnActiveNode(t *testing.T) {
	e := newEnv(t)
	window, digest := e.cfg.TakeoverWindow, e.cfg.DigestInterval
	wait := func(d time.Duration) func(*testing.T, *env, *agent) {
		return func(t *testing.T, e *env, _ *agent) { e.tick(t, d) }
	}
	tests := []struct {
		name string
		// before runs once the node is Active with its first key.
		before  func(*testing.T, *env, *agent)
		sameKey bool
		// refusal: ALREADY_ACTIVE, with retryAfter (0: none). Otherwise
		// the enrollment succeeds.
		refusal    bool
		retryAfter time.Duration
	}{
		{name: "same key returns the committed certificate", sameKey: true},
		{name: "same key after the takeover window returns the committed certificate", before: wait(window + time.Second), sameKey: true},
		{name: "other key while the node streams here", refusal: true, before: func(t *testing.T, e *env, a *agent) {
			// Quiet for longer than two digest intervals, then a stream
			// opens and no digest has reported it yet: the stream alone
			// must refuse.
			seen := e.node(t, a.node).GetLastSeenUnixNano()
			e.tick(t, 3*digest)
			e.subscribe(t, a)
			e.tick(t, digest/2)
			if got := e.node(t, a.node).GetLastSeenUnixNano(); got != seen {
				t.Fatalf("last_seen moved to %d; the case needs it at the enrollment", got)
			}
		}},
		{name: "other key while the node streams, after many digests", refusal: true, before: func(t *testing.T, e *env, a *agent) {
			e.subscribe(t, a)
			e.tick(t, window+time.Second)
		}},
		{name: "other key, stream closed a digest interval ago", refusal: true, retryAfter: window - digest, before: func(t *testing.T, e *env, a *agent) {
			w := e.subscribe(t, a)
			e.tick(t, 3*digest)
			now := e.now()
			e.waitNode(t, a.node, "to be seen by a digest", func(n *pactv1.Node) bool { return n.GetLastSeenUnixNano() == now })
			w.close(t, e)
			e.tick(t, digest)
		}},
		{name: "other key, no stream, seen within two digest intervals", refusal: true, retryAfter: window - 2*digest + time.Second, before: wait(2*digest - time.Second)},
		{name: "other key, quiet for two digest intervals", refusal: true, retryAfter: window - 2*digest, before: wait(2 * digest)},
		{name: "other key, quiet for half the window", refusal: true, retryAfter: window / 2, before: wait(window / 2)},
		{name: "other key, quiet until a second before the window", refusal: true, retryAfter: time.Second, before: wait(window - time.Second)},
		{name: "other key, quiet since its stream closed", refusal: true, retryAfter: window - 30*time.Second, before: func(t *testing.T, e *env, a *agent) {
			// The digests move last_seen along while the stream is open;
			// the window counts from the last one, not from the enrollment.
			w := e.subscribe(t, a)
			for range 2 {
				e.tick(t, digest)
				now := e.now()
				e.waitNode(t, a.node, "to be seen by a digest", func(n *pactv1.Node) bool { return n.GetLastSeenUnixNano() == now })
			}
			w.close(t, e)
			e.tick(t, 30*time.Second)
		}},
		{name: "other key after the takeover window takes over", before: wait(window + time.Second)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node, bmc, m := fmt.Sprintf("n%d", i), fmt.Sprintf("SN%d", i), mac(0x100+i)
			a := e.activate(t, node, bmc, m)
			if tt.before != nil {
				tt.before(t, e, a)
			}
			key := journaltest.NewKey(t)
			if tt.sameKey {
				key = a.key
			}
			before := e.registry(t)
			resp, err := e.enroll(t, key, bmc, m)
			switch {
			case tt.refusal:
				pe := e.refused(t, before, resp, err, codes.FailedPrecondition, apierr.AlreadyActive)
				if tt.retryAfter == 0 && pe.RetryAfter != 0 {
					t.Errorf("retry-after %v; a node that streams to this journal must be refused for good", pe.RetryAfter)
				}
				if tt.retryAfter != 0 && (pe.RetryAfter <= 0 || (pe.RetryAfter-tt.retryAfter).Abs() > time.Second) {
					t.Errorf("retry-after %v, want about %v (what is left of the takeover window)", pe.RetryAfter, tt.retryAfter)
				}
			case err != nil:
				t.Fatalf("enroll: %v", err)
			case tt.sameKey:
				if resp.GetSerial() != a.serial || string(resp.GetCertChainDer()[0]) != string(a.cert.Certificate[0]) {
					t.Errorf("a retry with the same key got serial %s, want the committed %s", resp.GetSerial(), a.serial)
				}
				e.unchanged(t, before) // a retry is no write
			default:
				checkTakeover(t, e, a, key, resp)
			}
		})
	}
}

// checkTakeover checks what a takeover leaves: the new certificate is the
// node's, the audit says "takeover", and the old certificate is stale.
func checkTakeover(t *testing.T, e *env, old *agent, key journaltest.Key, resp *pactv1.EnrollResponse) {
	t.Helper()
	if resp.GetSerial() == old.serial {
		t.Fatal("the takeover kept the old serial")
	}
	n := e.node(t, old.node)
	if n.GetState() != stActive || n.GetCert().GetSerial() != resp.GetSerial() {
		t.Errorf("after the takeover the registry has %v serial %s, want active %s", n.GetState(), n.GetCert().GetSerial(), resp.GetSerial())
	}
	last := e.lastAudit(t, old.node)
	if last.GetAction() != "takeover" || last.GetActor() != "agent/"+old.node || last.GetSerial() != resp.GetSerial() || !strings.Contains(last.GetDetail(), old.serial) {
		t.Errorf("audit entry %v, want a takeover by agent/%s to %s naming the old serial %s", last, old.node, resp.GetSerial(), old.serial)
	}
	before := e.registry(t)
	_, err := e.renew(t, old)
	e.refused(t, before, nil, err, codes.PermissionDenied, apierr.StaleCertificate)
	e.refused(t, before, nil, e.subscribeErr(t, &old.cert), codes.PermissionDenied, apierr.StaleCertificate)
	w := e.subscribe(t, newAgent(old.node, key, resp.GetCertChainDer(), resp.GetSerial()))
	w.close(t, e)
}

// An agent told to retry after d, retrying exactly then, must get either the
// takeover or another retry-after: a bare ALREADY_ACTIVE is what a node that
// is still streaming gets, and agents take it as final.
func TestTakeoverRetryAtTheRetryAfter(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	e.tick(t, 3*e.cfg.DigestInterval)
	key := journaltest.NewKey(t)
	before := e.registry(t)
	resp, err := e.enroll(t, key, "SN1", mac1)
	pe := e.refused(t, before, resp, err, codes.FailedPrecondition, apierr.AlreadyActive)
	if pe.RetryAfter <= 0 {
		t.Fatalf("quiet node refused without a retry-after")
	}
	e.tick(t, pe.RetryAfter)
	resp, err = e.enroll(t, key, "SN1", mac1)
	if err != nil {
		if pe := apierr.FromError(err); pe.Reason == apierr.AlreadyActive && pe.RetryAfter > 0 {
			return // told to wait a little more: fine
		}
		t.Fatalf("retrying after the %v the journal asked for: %v (retry-after %v); want the takeover or another retry-after", pe.RetryAfter, err, apierr.FromError(err).RetryAfter)
	}
	checkTakeover(t, e, a, key, resp)
}

// ---------------------------------------------------------------------------
// Liveness: Active -> Inactive without a stream, back by the stream or by a
// new enrollment; a streaming node never goes Inactive.

func TestLivenessInactiveAndBack(t *testing.T) {
	e := newEnv(t)
	timeout, digest := e.cfg.NodeLivenessTimeout, e.cfg.DigestInterval
	a := e.activate(t, "n1", "SN1", mac1)
	enrolledAt := e.node(t, "n1").GetLastSeenUnixNano()
	if enrolledAt != e.now() {
		t.Fatalf("last_seen after enrollment %d, want the enrollment time %d", enrolledAt, e.now())
	}

	// A second short of the node liveness timeout nothing happens...
	e.tick(t, timeout-time.Second)
	if n := e.node(t, "n1"); n.GetState() != stActive || n.GetLastSeenUnixNano() != enrolledAt {
		t.Fatalf("%s short of the node liveness timeout: %v last_seen %d, want active, seen at enrollment", timeout-time.Second, n.GetState(), n.GetLastSeenUnixNano())
	}
	// ...at the next check, past it, the leader marks the node Inactive.
	e.tick(t, digest)
	n := e.waitState(t, "n1", stInactive)
	if n.GetCert().GetSerial() != a.serial {
		t.Errorf("going inactive changed the certificate to %s", n.GetCert().GetSerial())
	}
	if last := e.lastAudit(t, "n1"); last.GetAction() != "inactive" || last.GetActor() != "journal/"+e.cfg.NodeID {
		t.Errorf("audit entry %v, want inactive by journal/%s", last, e.cfg.NodeID)
	}

	// The agent comes back on its certificate: the next digest makes it
	// Active again.
	w := e.subscribe(t, a)
	e.tick(t, digest)
	now := e.now()
	e.waitNode(t, "n1", "to be active and seen now", func(n *pactv1.Node) bool {
		return n.GetState() == stActive && n.GetLastSeenUnixNano() == now
	})
	if last := e.lastAudit(t, "n1"); last.GetAction() != "active" || last.GetActor() != "journal/"+e.cfg.NodeID {
		t.Errorf("audit entry %v, want active by journal/%s", last, e.cfg.NodeID)
	}

	// While it streams, every digest moves last_seen and it stays Active
	// well past the node liveness timeout.
	for elapsed := time.Duration(0); elapsed <= timeout+time.Minute; elapsed += time.Minute {
		e.tick(t, time.Minute)
		now := e.now()
		e.waitNode(t, "n1", "to be seen by the digest", func(n *pactv1.Node) bool { return n.GetLastSeenUnixNano() == now })
		if st := e.node(t, "n1").GetState(); st != stActive {
			t.Fatalf("a streaming node went %v", st)
		}
	}
	w.quiet(t)

	// The stream goes; a node liveness timeout later the node is Inactive.
	w.close(t, e)
	e.tick(t, timeout+time.Second)
	e.waitState(t, "n1", stInactive)

	// A fresh Enroll (a reboot with a new key) makes it Active: an
	// enrollment, not a takeover, and the old certificate is stale.
	key := journaltest.NewKey(t)
	resp, err := e.enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatalf("enroll an inactive node: %v", err)
	}
	n = e.node(t, "n1")
	if n.GetState() != stActive || n.GetCert().GetSerial() != resp.GetSerial() || resp.GetSerial() == a.serial {
		t.Errorf("after enrolling again: %v serial %s (response %s, old %s)", n.GetState(), n.GetCert().GetSerial(), resp.GetSerial(), a.serial)
	}
	if last := e.lastAudit(t, "n1"); last.GetAction() != "enroll" || last.GetActor() != "agent/n1" {
		t.Errorf("audit entry %v, want enroll by agent/n1", last)
	}
	before := e.registry(t)
	e.refused(t, before, nil, e.subscribeErr(t, &a.cert), codes.PermissionDenied, apierr.StaleCertificate)
	got := actions(e.audit(t, "n1"))
	want := []string{"register", "enroll", "inactive", "active", "inactive", "enroll"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("audit of n1: %v, want %v", got, want)
	}
}

// ---------------------------------------------------------------------------
// Decommission.

func TestDecommissionRefusedWhileStreaming(t *testing.T) {
	e := newEnv(t)
	digest := e.cfg.DigestInterval
	tests := []struct {
		name   string
		before func(*testing.T, *env, *agent) *watch
	}{
		{"stream open on this journal, not yet in a digest", func(t *testing.T, e *env, a *agent) *watch {
			seen := e.node(t, a.node).GetLastSeenUnixNano()
			e.tick(t, 3*digest)
			w := e.subscribe(t, a)
			e.tick(t, digest/2)
			if got := e.node(t, a.node).GetLastSeenUnixNano(); got != seen {
				t.Fatalf("last_seen moved to %d; the case needs it at the enrollment", got)
			}
			return w
		}},
		{"stream open on this journal, seen by digests", func(t *testing.T, e *env, a *agent) *watch {
			w := e.subscribe(t, a)
			e.tick(t, 3*digest)
			now := e.now()
			e.waitNode(t, a.node, "to be seen by a digest", func(n *pactv1.Node) bool { return n.GetLastSeenUnixNano() == now })
			return w
		}},
		{"stream closed a digest interval ago", func(t *testing.T, e *env, a *agent) *watch {
			w := e.subscribe(t, a)
			e.tick(t, 3*digest)
			now := e.now()
			e.waitNode(t, a.node, "to be seen by a digest", func(n *pactv1.Node) bool { return n.GetLastSeenUnixNano() == now })
			w.close(t, e)
			e.tick(t, digest)
			return nil
		}},
		{"no stream, seen within two digest intervals", func(t *testing.T, e *env, _ *agent) *watch {
			e.tick(t, 2*digest-time.Second)
			return nil
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := fmt.Sprintf("n%d", i)
			a := e.activate(t, node, "SN-"+node, mac(0x200+i))
			w := tt.before(t, e, a)
			before := e.registry(t)
			_, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: node})
			e.refused(t, before, nil, err, codes.FailedPrecondition, apierr.NodeStreaming)
			if w != nil {
				w.quiet(t)
			}
			// The agent's certificate still works.
			if _, err := e.renew(t, a); err != nil {
				t.Errorf("renew after the refused decommission: %v", err)
			}
		})
	}
}

func TestDecommissionWithoutForce(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name  string
		setup func(t *testing.T, e *env, node, bmc, mac string)
	}{
		{"registered, never enrolled", func(t *testing.T, e *env, node, bmc, mac string) {
			e.register(t, node, bmc, mac)
		}},
		{"active, quiet for two digest intervals", func(t *testing.T, e *env, node, bmc, mac string) {
			e.activate(t, node, bmc, mac)
			e.tick(t, 2*e.cfg.DigestInterval)
		}},
		{"inactive", func(t *testing.T, e *env, node, bmc, mac string) {
			e.activate(t, node, bmc, mac)
			e.tick(t, e.cfg.NodeLivenessTimeout+time.Second)
			e.waitState(t, node, stInactive)
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node, bmc := fmt.Sprintf("n%d", i), fmt.Sprintf("SN%d", i)
			tt.setup(t, e, node, bmc, mac(0x300+i))
			prev := e.node(t, node)
			resp, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: node})
			if err != nil {
				t.Fatalf("decommission: %v", err)
			}
			checkRevoked(t, e, resp.GetNode(), prev)
			if last := e.lastAudit(t, node); last.GetAction() != "decommission" || last.GetActor() != devAdmin || last.GetSerial() != prev.GetCert().GetSerial() {
				t.Errorf("audit entry %v, want decommission of serial %q by %s", last, prev.GetCert().GetSerial(), devAdmin)
			}
		})
	}
}

// checkRevoked checks a decommissioned record against the one before.
func checkRevoked(t *testing.T, e *env, got, prev *pactv1.Node) {
	t.Helper()
	n := e.node(t, prev.GetNodeId())
	if !proto.Equal(got, n) {
		t.Errorf("decommission answered %v, the registry has %v", got, n)
	}
	if n.GetState() != stRevoked || n.GetRevokedAtUnixNano() != e.now() || n.GetRevokedBy() != devAdmin {
		t.Errorf("decommissioned node: %v revoked at %d by %q, want revoked at %d by %s", n.GetState(), n.GetRevokedAtUnixNano(), n.GetRevokedBy(), e.now(), devAdmin)
	}
	if n.GetCert().GetSerial() != prev.GetCert().GetSerial() || !proto.Equal(n.GetHardware(), prev.GetHardware()) {
		t.Errorf("decommission changed the record's certificate or hardware: %v, was %v", n, prev)
	}
}

func TestDecommissionForcedCutsTheStream(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	w := e.subscribe(t, a)
	prev := e.node(t, "n1")

	start := time.Now()
	resp, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: "n1", Force: true})
	answered := time.Since(start)
	if err != nil {
		t.Fatalf("forced decommission: %v", err)
	}
	checkRevoked(t, e, resp.GetNode(), prev)
	// The journal's clock has not moved since the stream opened: no
	// re-check or liveness timer can have fired, so the decommission
	// itself closed the stream.
	evs, ended, err := w.end(t)
	t.Logf("decommission answered in %v; the stream ended %v after the call began", answered, ended.Sub(start))
	if len(evs) != 1 || evs[0].GetRevoked() == nil {
		t.Errorf("the stream delivered %v before ending, want one Revoked event", evs)
	}
	wantErr(t, err, codes.PermissionDenied, apierr.NodeRevoked)
	eventually(t, "the journal to drop the stream", func() bool { return e.h.J.OpenStreams("n1") == 0 })

	newKey := journaltest.NewKey(t)
	tests := []struct {
		name string
		call func(t *testing.T) (certCarrier, error)
	}{
		{"RenewCert with the certificate", func(t *testing.T) (certCarrier, error) {
			r, err := e.agentClient(t, a).RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: newKey.CSR})
			return r, err
		}},
		{"Subscribe with the certificate", func(t *testing.T) (certCarrier, error) {
			return nil, e.subscribeErr(t, &a.cert)
		}},
		{"Enroll with the hardware and a new key", func(t *testing.T) (certCarrier, error) {
			r, err := e.enroll(t, newKey, "SN1", mac1)
			return r, err
		}},
		{"Enroll with the hardware and the old key", func(t *testing.T) (certCarrier, error) {
			r, err := e.enroll(t, a.key, "SN1", mac1)
			return r, err
		}},
		{"Enroll with one of its MACs only", func(t *testing.T) (certCarrier, error) {
			r, err := e.enroll(t, newKey, "", mac1)
			return r, err
		}},
		{"decommission again", func(t *testing.T) (certCarrier, error) {
			_, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: "n1"})
			return nil, err
		}},
		{"decommission again, forced", func(t *testing.T) (certCarrier, error) {
			_, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: "n1", Force: true})
			return nil, err
		}},
		{"assign", func(t *testing.T) (certCarrier, error) {
			_, err := e.admin.AssignNode(callCtx(t), &pactv1.AssignNodeRequest{NodeId: "n1", Vcluster: "vc1"})
			return nil, err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.registry(t)
			resp, err := tt.call(t)
			e.refused(t, before, resp, err, codes.PermissionDenied, apierr.NodeRevoked)
		})
	}

	// Registering the node again makes a new record; it enrolls afresh.
	e.tick(t, time.Second)
	n := e.register(t, "n1", "SN1", mac1)
	if n.GetState() != stRegistered || n.GetRegisteredAtUnixNano() != e.now() || n.GetRevokedAtUnixNano() != 0 || n.GetRevokedBy() != "" || n.GetCert() != nil {
		t.Errorf("registered again: %v, want a fresh registered record", n)
	}
	// The revoked serial stays revoked, whatever the record says now.
	before := e.registry(t)
	_, err = e.renew(t, a)
	e.refused(t, before, nil, err, codes.PermissionDenied, apierr.NodeRevoked)

	b := e.enrollNew(t, "n1", "SN1", mac1)
	if b.serial == a.serial {
		t.Error("the new enrollment reused the revoked serial")
	}
	e.subscribe(t, b).close(t, e)
	got := actions(e.audit(t, "n1"))
	want := []string{"register", "enroll", "decommission", "register", "enroll"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("audit of n1: %v, want %v", got, want)
	}
}

// A decommissioned node's hardware may be registered again, under its old
// node id or another.
func TestReRegisterAfterDecommission(t *testing.T) {
	for _, id := range []string{"n1", "n2"} {
		t.Run("as "+id, func(t *testing.T) {
			e := newEnv(t)
			e.activate(t, "n1", "SN1", mac1)
			e.tick(t, 2*e.cfg.DigestInterval)
			if _, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: "n1"}); err != nil {
				t.Fatal(err)
			}
			e.register(t, id, "SN1", mac1)
			b := e.enrollNew(t, id, "SN1", mac1)
			if n := e.node(t, id); n.GetState() != stActive || n.GetCert().GetSerial() != b.serial {
				t.Errorf("%s after enrolling: %v serial %s, want active %s", id, n.GetState(), n.GetCert().GetSerial(), b.serial)
			}
			if id != "n1" {
				if n := e.node(t, "n1"); n.GetState() != stRevoked {
					t.Errorf("the old record n1 is %v, want revoked", n.GetState())
				}
			}
		})
	}
}

// ---------------------------------------------------------------------------
// vCluster assignment.

func TestAssignUnassignMove(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	w := e.subscribe(t, a)
	if w.first.GetVcluster() != "" {
		t.Fatalf("a new node streams vCluster %q, want maintenance", w.first.GetVcluster())
	}
	assign := func(node, vc string) func(context.Context) (*pactv1.Node, string, error) {
		return func(ctx context.Context) (*pactv1.Node, string, error) {
			r, err := e.admin.AssignNode(ctx, &pactv1.AssignNodeRequest{NodeId: node, Vcluster: vc})
			return r.GetNode(), "", err
		}
	}
	unassign := func(node string) func(context.Context) (*pactv1.Node, string, error) {
		return func(ctx context.Context) (*pactv1.Node, string, error) {
			r, err := e.admin.UnassignNode(ctx, &pactv1.UnassignNodeRequest{NodeId: node})
			return r.GetNode(), r.GetPreviousVcluster(), err
		}
	}
	move := func(node, vc string) func(context.Context) (*pactv1.Node, string, error) {
		return func(ctx context.Context) (*pactv1.Node, string, error) {
			r, err := e.admin.MoveNode(ctx, &pactv1.MoveNodeRequest{NodeId: node, ToVcluster: vc})
			return r.GetNode(), r.GetPreviousVcluster(), err
		}
	}
	// The steps run in order on one node; each starts where the last left it.
	steps := []struct {
		name   string
		call   func(context.Context) (*pactv1.Node, string, error)
		code   codes.Code
		reason apierr.Reason
		// On success: the vCluster after, the previous one, and the audit
		// action ("" for a no-op, which writes nothing and sends nothing).
		vcluster, previous, action string
	}{
		{name: "unassign a node in maintenance is a no-op", call: unassign("n1")},
		{name: "move a node in maintenance", call: move("n1", "vc1"), code: codes.FailedPrecondition, reason: apierr.VClusterChanged},
		{name: "assign without a vCluster", call: assign("n1", ""), code: codes.InvalidArgument, reason: apierr.InvalidArgument},
		{name: "assign into an invalid name", call: assign("n1", "=1+1"), code: codes.InvalidArgument, reason: apierr.InvalidArgument},
		{name: "assign an unknown node", call: assign("nope", "vc1"), code: codes.NotFound, reason: apierr.NodeNotEnrolled},
		{name: "assign into vc1", call: assign("n1", "vc1"), vcluster: "vc1", action: "assign"},
		{name: "assign an assigned node", call: assign("n1", "vc2"), code: codes.FailedPrecondition, reason: apierr.VClusterChanged},
		{name: "assign an assigned node to its own vCluster", call: assign("n1", "vc1"), code: codes.FailedPrecondition, reason: apierr.VClusterChanged},
		{name: "move without a target", call: move("n1", ""), code: codes.InvalidArgument, reason: apierr.InvalidArgument},
		{name: "move an unknown node", call: move("nope", "vc2"), code: codes.NotFound, reason: apierr.NodeNotEnrolled},
		{name: "move to vc2", call: move("n1", "vc2"), vcluster: "vc2", previous: "vc1", action: "move"},
		{name: "move to where it is is a no-op", call: move("n1", "vc2"), vcluster: "vc2", previous: "vc2"},
		{name: "unassign an unknown node", call: unassign("nope"), code: codes.NotFound, reason: apierr.NodeNotEnrolled},
		{name: "unassign", call: unassign("n1"), vcluster: "", previous: "vc2", action: "unassign"},
		{name: "assign into vc1 again", call: assign("n1", "vc1"), vcluster: "vc1", action: "assign"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			e.tick(t, time.Second) // a distinct time for each change
			before := e.registry(t)
			n, prev, err := s.call(callCtx(t))
			if s.code != codes.OK {
				e.refused(t, before, nil, err, s.code, s.reason)
				w.quiet(t)
				return
			}
			if err != nil {
				t.Fatalf("got %v, want success", err)
			}
			if n.GetVcluster() != s.vcluster || prev != s.previous {
				t.Errorf("answered vCluster %q previous %q, want %q previous %q", n.GetVcluster(), prev, s.vcluster, s.previous)
			}
			got := e.node(t, "n1")
			if got.GetVcluster() != s.vcluster || got.GetState() != stActive || got.GetCert().GetSerial() != a.serial {
				t.Errorf("registry: %v vCluster %q serial %s, want active in %q with the untouched serial %s", got.GetState(), got.GetVcluster(), got.GetCert().GetSerial(), s.vcluster, a.serial)
			}
			if s.action == "" {
				e.unchanged(t, before)
				w.quiet(t)
				return
			}
			if got.GetUpdatedAtUnixNano() != e.now() {
				t.Errorf("updated_at %d, want %d", got.GetUpdatedAtUnixNano(), e.now())
			}
			ev := w.next(t)
			if as := ev.GetAssignment(); as == nil || as.GetNodeId() != "n1" || as.GetVcluster() != s.vcluster {
				t.Errorf("the stream got %v, want the assignment of n1 to %q", ev, s.vcluster)
			}
			last := e.lastAudit(t, "n1")
			if last.GetAction() != s.action || last.GetActor() != devAdmin || last.GetAtUnixNano() != e.now() {
				t.Errorf("audit entry %v, want %s by %s at %d", last, s.action, devAdmin, e.now())
			}
		})
	}
	// The certificate the node had all along still authenticates.
	if _, err := e.renew(t, a); err != nil {
		t.Errorf("renew after the assignments: %v", err)
	}
}

// A node registered into a vCluster gets it in its enrollment and stream.
func TestRegisteredVClusterReachesTheAgent(t *testing.T) {
	e := newEnv(t)
	e.registerIn(t, "n1", "vc1", "SN1", mac1)
	key := journaltest.NewKey(t)
	resp, err := e.enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetVcluster() != "vc1" {
		t.Errorf("enroll answered vCluster %q, want vc1", resp.GetVcluster())
	}
	w := e.subscribe(t, newAgent("n1", key, resp.GetCertChainDer(), resp.GetSerial()))
	if w.first.GetVcluster() != "vc1" {
		t.Errorf("the stream opened with vCluster %q, want vc1", w.first.GetVcluster())
	}
}

// What platform-admin and pact-ops-vc1 may do; the refusals are in the
// bad-input suite.
func TestAssignmentRoles(t *testing.T) {
	e := newEnv(t)
	ops := e.h.IssueAdmin(t, "otto", "pact-ops-vc1")
	clients := map[string]pactv1.AdminServiceClient{
		"platform-admin": e.admin,
		"pact-ops-vc1":   pactv1.NewAdminServiceClient(e.h.Dial(t, &ops)),
	}
	actors := map[string]string{"platform-admin": devAdmin, "pact-ops-vc1": "admin/otto"}
	tests := []struct {
		role, from, op, to string
	}{
		{"platform-admin", "", "assign", "vc2"},
		{"platform-admin", "vc1", "move", "vc2"},
		{"platform-admin", "vc2", "unassign", ""},
		{"pact-ops-vc1", "", "assign", "vc1"},
		{"pact-ops-vc1", "vc1", "unassign", ""},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%s %s %q to %q", tt.role, tt.op, tt.from, tt.to), func(t *testing.T) {
			node := fmt.Sprintf("n%d", i)
			e.registerIn(t, node, tt.from, "", mac(0x400+i))
			c := clients[tt.role]
			var err error
			switch tt.op {
			case "assign":
				_, err = c.AssignNode(callCtx(t), &pactv1.AssignNodeRequest{NodeId: node, Vcluster: tt.to})
			case "move":
				_, err = c.MoveNode(callCtx(t), &pactv1.MoveNodeRequest{NodeId: node, ToVcluster: tt.to})
			case "unassign":
				_, err = c.UnassignNode(callCtx(t), &pactv1.UnassignNodeRequest{NodeId: node})
			}
			if err != nil {
				t.Fatalf("%s: %v", tt.op, err)
			}
			if got := e.node(t, node).GetVcluster(); got != tt.to {
				t.Errorf("node is in %q, want %q", got, tt.to)
			}
			if last := e.lastAudit(t, node); last.GetAction() != tt.op || last.GetActor() != actors[tt.role] {
				t.Errorf("audit entry %v, want %s by %s", last, tt.op, actors[tt.role])
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Batch registration and listing.

func TestRegisterNodesBatch(t *testing.T) {
	e := newEnv(t)
	e.registerIn(t, "dup", "vc1", "SN-dup", mac(0xab))
	e.register(t, "owner", "", mac(0x02))
	row := func(id, vc, bmc string, macs ...string) *pactv1.RegisterNodeRequest {
		return &pactv1.RegisterNodeRequest{NodeId: id, Vcluster: vc, Hardware: hw(bmc, macs...)}
	}
	const (
		ok     = pactv1.RegisterOutcome_REGISTER_OUTCOME_OK
		exists = pactv1.RegisterOutcome_REGISTER_OUTCOME_EXISTS
		failed = pactv1.RegisterOutcome_REGISTER_OUTCOME_ERROR
	)
	rows := []struct {
		name    string
		req     *pactv1.RegisterNodeRequest
		outcome pactv1.RegisterOutcome
		reason  apierr.Reason
	}{
		{"new node", row("new1", "", "SN-new1", mac(0x03)), ok, ""},
		{"same registration, MAC spelled differently", row("dup", "vc1", "SN-dup", "02-00-00-00-00-AB"), exists, ""},
		{"same id, other MAC", row("dup", "vc1", "SN-dup", mac(0x04)), failed, apierr.NodeAlreadyEnrolled},
		{"same id and hardware, other vCluster", row("dup", "vc2", "SN-dup", mac(0xab)), failed, apierr.NodeAlreadyEnrolled},
		{"MAC of another node", row("new2", "", "", mac(0x02)), failed, apierr.HardwareIdentityConflict},
		{"BMC serial of another node", row("new3", "", "SN-dup", mac(0x05)), failed, apierr.HardwareIdentityConflict},
		{"bad MAC", row("new4", "", "", "zz:zz"), failed, apierr.InvalidArgument},
		{"no MAC", row("new5", "", "SN-new5"), failed, apierr.InvalidArgument},
		{"bad node id", row("a/b", "", "", mac(0x06)), failed, apierr.InvalidArgument},
		{"bad vCluster", row("new6", "=cmd", "", mac(0x07)), failed, apierr.InvalidArgument},
		{"new node in a vCluster", row("new7", "vc1", "", mac(0x08)), ok, ""},
	}
	req := &pactv1.RegisterNodesRequest{}
	for _, r := range rows {
		req.Nodes = append(req.Nodes, r.req)
	}
	before := e.registry(t)
	resp, err := e.admin.RegisterNodes(callCtx(t), req)
	if err != nil {
		t.Fatalf("register batch: %v", err)
	}
	if len(resp.GetResults()) != len(rows) {
		t.Fatalf("%d results for %d rows", len(resp.GetResults()), len(rows))
	}
	for i, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			got := resp.GetResults()[i]
			if got.GetNodeId() != r.req.GetNodeId() || got.GetOutcome() != r.outcome || got.GetReason() != string(r.reason) {
				t.Errorf("result %v, want %s %v %q", got, r.req.GetNodeId(), r.outcome, r.reason)
			}
			if (got.GetOutcome() == failed) != (got.GetMessage() != "") {
				t.Errorf("result %v: a message goes with an error and only with one", got)
			}
		})
	}
	for _, id := range []string{"new1", "new7"} {
		if n := e.node(t, id); n.GetState() != stRegistered || n.GetRegisteredBy() != devAdmin {
			t.Errorf("%s: %v by %q, want registered by %s", id, n.GetState(), n.GetRegisteredBy(), devAdmin)
		}
	}
	if got := e.node(t, "new7").GetVcluster(); got != "vc1" {
		t.Errorf("new7 is in %q, want vc1", got)
	}
	after := e.registry(t)
	if len(after.nodes) != len(before.nodes)+2 || after.audit != before.audit+2 {
		t.Errorf("the batch added %d nodes and %d audit entries, want 2 and 2", len(after.nodes)-len(before.nodes), after.audit-before.audit)
	}
	if got := actions(e.audit(t, "")[before.audit:]); strings.Join(got, " ") != "register register" {
		t.Errorf("the batch audited %v", got)
	}

	// Re-running the same file writes nothing: the new rows now exist.
	before = e.registry(t)
	again, err := e.admin.RegisterNodes(callCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		want := r.outcome
		if want == ok {
			want = exists
		}
		if got := again.GetResults()[i]; got.GetOutcome() != want || got.GetReason() != string(r.reason) {
			t.Errorf("re-run of %q: %v, want %v %q", r.name, got, want, r.reason)
		}
	}
	e.unchanged(t, before)

	// At most 1000 rows in a call: 1000 are taken row by row...
	bad := make([]*pactv1.RegisterNodeRequest, v1rpc.MaxBatch)
	for i := range bad {
		bad[i] = row(fmt.Sprintf("bad%d", i), "", "", "not-a-mac")
	}
	resp, err = e.admin.RegisterNodes(callCtx(t), &pactv1.RegisterNodesRequest{Nodes: bad})
	if err != nil {
		t.Fatalf("%d rows: %v", len(bad), err)
	}
	for _, r := range resp.GetResults() {
		if r.GetOutcome() != failed || r.GetReason() != string(apierr.InvalidArgument) {
			t.Fatalf("row %v, want an INVALID_ARGUMENT error", r)
		}
	}
	// ...one more refuses the whole call.
	bad = append(bad, row("one-more", "", "", mac(0x09)))
	resp, err = e.admin.RegisterNodes(callCtx(t), &pactv1.RegisterNodesRequest{Nodes: bad})
	if len(resp.GetResults()) != 0 {
		t.Errorf("a refused batch returned %d results", len(resp.GetResults()))
	}
	e.refused(t, before, nil, err, codes.InvalidArgument, apierr.InvalidArgument)
}

func TestListNodesFilters(t *testing.T) {
	e := newEnv(t)
	e.activate(t, "i1", "", mac(0x11))
	e.tick(t, e.cfg.NodeLivenessTimeout+time.Second)
	e.waitState(t, "i1", stInactive)
	e.register(t, "r1", "", mac(0x12))
	e.registerIn(t, "r2", "vc1", "", mac(0x13))
	e.registerIn(t, "a1", "vc1", "", mac(0x14))
	e.enrollNew(t, "a1", "", mac(0x14))
	e.registerIn(t, "a2", "vc2", "", mac(0x15))
	e.enrollNew(t, "a2", "", mac(0x15))
	e.register(t, "d1", "", mac(0x16))
	if _, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: "d1"}); err != nil {
		t.Fatal(err)
	}
	// f1 is fenced while registered; rel's agent stopped cleanly.
	e.register(t, "f1", "", mac(0x17))
	if _, err := e.admin.FenceNode(callCtx(t), &pactv1.FenceNodeRequest{NodeId: "f1", Reason: "INC-1"}); err != nil {
		t.Fatal(err)
	}
	rel := e.activate(t, "rel", "", mac(0x18))
	if resp, err := e.agentClient(t, rel).Release(callCtx(t), &pactv1.ReleaseRequest{}); err != nil || !resp.GetReleased() {
		t.Fatalf("release: %v %v", resp, err)
	}
	tests := []struct {
		name string
		req  *pactv1.ListNodesRequest
		want string
	}{
		{"everything", &pactv1.ListNodesRequest{}, "a1 a2 d1 f1 i1 r1 r2 rel"},
		{"registered", &pactv1.ListNodesRequest{State: stRegistered}, "f1 r1 r2"},
		{"active", &pactv1.ListNodesRequest{State: stActive}, "a1 a2 rel"},
		{"fenced", &pactv1.ListNodesRequest{Fenced: true}, "f1"},
		{"registered and fenced", &pactv1.ListNodesRequest{State: stRegistered, Fenced: true}, "f1"},
		{"inactive and fenced", &pactv1.ListNodesRequest{State: stInactive, Fenced: true}, ""},
		{"released", &pactv1.ListNodesRequest{Released: true}, "rel"},
		{"active and released", &pactv1.ListNodesRequest{State: stActive, Released: true}, "rel"},
		{"inactive", &pactv1.ListNodesRequest{State: stInactive}, "i1"},
		{"revoked", &pactv1.ListNodesRequest{State: stRevoked}, "d1"},
		{"vc1", &pactv1.ListNodesRequest{Vcluster: "vc1"}, "a1 r2"},
		{"unassigned", &pactv1.ListNodesRequest{Unassigned: true}, "d1 f1 i1 r1 rel"},
		{"active in vc2", &pactv1.ListNodesRequest{State: stActive, Vcluster: "vc2"}, "a2"},
		{"registered and unassigned", &pactv1.ListNodesRequest{State: stRegistered, Unassigned: true}, "f1 r1"},
		{"a vCluster with no nodes", &pactv1.ListNodesRequest{Vcluster: "vc9"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := e.admin.ListNodes(callCtx(t), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range resp.GetNodes() {
				got = append(got, n.GetNodeId())
				if len(n.GetCert().GetDer()) != 0 {
					t.Errorf("%s listed with its certificate DER", n.GetNodeId())
				}
				// The release shows while it holds: rel's, and no one else's.
				if released := n.GetReleasedSerial() != ""; released != (n.GetNodeId() == "rel") || (released && n.GetReleasedSerial() != rel.serial) {
					t.Errorf("%s listed with released serial %q (rel's certificate %s)", n.GetNodeId(), n.GetReleasedSerial(), rel.serial)
				}
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("got %v, want %s", got, tt.want)
			}
		})
	}
	t.Run("vCluster and unassigned together", func(t *testing.T) {
		before := e.registry(t)
		resp, err := e.admin.ListNodes(callCtx(t), &pactv1.ListNodesRequest{Vcluster: "vc1", Unassigned: true})
		if len(resp.GetNodes()) != 0 {
			t.Errorf("a refused listing returned %d nodes", len(resp.GetNodes()))
		}
		e.refused(t, before, nil, err, codes.InvalidArgument, apierr.InvalidArgument)
	})
}

// ---------------------------------------------------------------------------
// Audit.

// auditLine is an exported audit entry (cfg.AuditLog).
type auditLine struct {
	Time          string `json:"time"`
	Index         uint64 `json:"index"`
	Action        string `json:"action"`
	NodeID        string `json:"node_id"`
	Actor         string `json:"actor"`
	Source        string `json:"source"`
	Serial        string `json:"serial"`
	CorrelationID string `json:"correlation_id"`
	Detail        string `json:"detail"`
}

// TestAuditTrail makes every kind of change to one node, each with its own
// correlation id, and reads the trail back: from ListAudit (whole, by node,
// since, limit) and from the exported JSON lines. Refused attempts in
// between leave no entry.
func TestAuditTrail(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "audit.jsonl")
	e := newEnv(t, func(c *journal.Config) { c.AuditLog = logPath })
	journalActor := "journal/" + e.cfg.NodeID

	var adminAddr localAddr
	admin := pactv1.NewAdminServiceClient(e.h.DialWith(t, &e.h.Admin, adminAddr.option()))
	type want struct{ action, actor, source, corr string }
	var wants []want
	// call runs one call with correlation id corr, checks the journal
	// echoed it, and expects an audit entry unless it is refused.
	call := func(corr string, w *want, f func(ctx context.Context, opt grpc.CallOption) error) {
		t.Helper()
		e.tick(t, time.Second) // a distinct time for each entry
		var hdr metadata.MD
		err := f(withCorrelation(t, corr), grpc.Header(&hdr))
		if got := correlation(t, hdr); got != corr {
			t.Errorf("%s: the journal answered correlation id %q", corr, got)
		}
		switch {
		case w == nil && err == nil:
			t.Fatalf("%s succeeded, want a refusal", corr)
		case w == nil:
		case err != nil:
			t.Fatalf("%s: %v", corr, err)
		default:
			w.corr = corr
			wants = append(wants, *w)
		}
	}
	agentCall := func(cert *tls.Certificate) (pactv1.EnrollmentServiceClient, *localAddr) {
		var l localAddr
		return pactv1.NewEnrollmentServiceClient(e.h.DialWith(t, cert, l.option())), &l
	}

	call("c-register", &want{action: "register", actor: devAdmin}, func(ctx context.Context, opt grpc.CallOption) error {
		_, err := admin.RegisterNode(ctx, &pactv1.RegisterNodeRequest{NodeId: "n1", Hardware: hw("SN1", mac1)}, opt)
		return err
	})
	wants[len(wants)-1].source = adminAddr.String()
	// Another node's entry, not in n1's trail.
	e.tick(t, time.Second)
	if _, err := admin.RegisterNode(withCorrelation(t, "c-other-node"), &pactv1.RegisterNodeRequest{NodeId: "n2", Hardware: hw("SN2", mac2)}); err != nil {
		t.Fatal(err)
	}

	key := journaltest.NewKey(t)
	var a *agent
	enroller, enrollerAddr := agentCall(nil)
	call("c-enroll", &want{action: "enroll", actor: "agent/n1"}, func(ctx context.Context, opt grpc.CallOption) error {
		resp, err := enroller.Enroll(ctx, &pactv1.EnrollRequest{Hardware: hw("SN1", mac1), CsrDer: key.CSR}, opt)
		if err == nil {
			a = newAgent("n1", key, resp.GetCertChainDer(), resp.GetSerial())
		}
		return err
	})
	wants[len(wants)-1].source = enrollerAddr.String()
	call("c-refused-enroll", nil, func(ctx context.Context, opt grpc.CallOption) error {
		_, err := enroller.Enroll(ctx, &pactv1.EnrollRequest{Hardware: hw("SN1", mac1), CsrDer: journaltest.NewKey(t).CSR}, opt)
		return err
	})

	renewer, renewerAddr := agentCall(&a.cert)
	renewKey := journaltest.NewKey(t)
	call("c-renew", &want{action: "renew", actor: "agent/n1"}, func(ctx context.Context, opt grpc.CallOption) error {
		resp, err := renewer.RenewCert(ctx, &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: renewKey.CSR}, opt)
		if err == nil {
			a = newAgent("n1", renewKey, resp.GetCertChainDer(), resp.GetSerial())
		}
		return err
	})
	wants[len(wants)-1].source = renewerAddr.String()

	adminWant := func(action string) *want { return &want{action: action, actor: devAdmin, source: adminAddr.String()} }
	call("c-assign", adminWant("assign"), func(ctx context.Context, opt grpc.CallOption) error {
		_, err := admin.AssignNode(ctx, &pactv1.AssignNodeRequest{NodeId: "n1", Vcluster: "vc1"}, opt)
		return err
	})
	call("c-refused-assign", nil, func(ctx context.Context, opt grpc.CallOption) error {
		_, err := admin.AssignNode(ctx, &pactv1.AssignNodeRequest{NodeId: "n1", Vcluster: "vc2"}, opt)
		return err
	})
	call("c-move", adminWant("move"), func(ctx context.Context, opt grpc.CallOption) error {
		_, err := admin.MoveNode(ctx, &pactv1.MoveNodeRequest{NodeId: "n1", ToVcluster: "vc2"}, opt)
		return err
	})
	call("c-unassign", adminWant("unassign"), func(ctx context.Context, opt grpc.CallOption) error {
		_, err := admin.UnassignNode(ctx, &pactv1.UnassignNodeRequest{NodeId: "n1"}, opt)
		return err
	})

	// The journal's own changes: inactive, then active on the stream.
	e.tick(t, e.cfg.NodeLivenessTimeout+time.Second)
	e.waitState(t, "n1", stInactive)
	wants = append(wants, want{action: "inactive", actor: journalActor, source: "*", corr: "*"})
	w := e.subscribe(t, a)
	e.tick(t, e.cfg.DigestInterval)
	e.waitState(t, "n1", stActive)
	wants = append(wants, want{action: "active", actor: journalActor, source: "*", corr: "*"})
	activeAt := e.now()
	w.close(t, e)

	e.tick(t, e.cfg.TakeoverWindow+time.Second)
	call("c-takeover", &want{action: "takeover", actor: "agent/n1"}, func(ctx context.Context, opt grpc.CallOption) error {
		_, err := enroller.Enroll(ctx, &pactv1.EnrollRequest{Hardware: hw("SN1", mac1), CsrDer: journaltest.NewKey(t).CSR}, opt)
		return err
	})
	wants[len(wants)-1].source = enrollerAddr.String()
	call("c-refused-decommission", nil, func(ctx context.Context, opt grpc.CallOption) error {
		_, err := admin.DecommissionNode(ctx, &pactv1.DecommissionNodeRequest{NodeId: "n1"}, opt)
		return err
	})
	call("c-decommission", adminWant("decommission"), func(ctx context.Context, opt grpc.CallOption) error {
		_, err := admin.DecommissionNode(ctx, &pactv1.DecommissionNodeRequest{NodeId: "n1", Force: true}, opt)
		return err
	})
	call("c-register-again", adminWant("register"), func(ctx context.Context, opt grpc.CallOption) error {
		_, err := admin.RegisterNode(ctx, &pactv1.RegisterNodeRequest{NodeId: "n1", Hardware: hw("SN1", mac1)}, opt)
		return err
	})

	trail := e.audit(t, "n1")
	if len(trail) != len(wants) {
		t.Fatalf("n1's audit trail %v, want %d entries %v", actions(trail), len(wants), wants)
	}
	for i, w := range wants {
		g := trail[i]
		if g.GetAction() != w.action || g.GetActor() != w.actor || g.GetNodeId() != "n1" ||
			(w.source != "*" && g.GetSource() != w.source) || (w.corr != "*" && g.GetCorrelationId() != w.corr) {
			t.Errorf("entry %d: %v, want %+v", i, g, w)
		}
		if i > 0 && (g.GetIndex() <= trail[i-1].GetIndex() || g.GetAtUnixNano() <= trail[i-1].GetAtUnixNano()) {
			t.Errorf("entry %d (index %d at %d) is not after entry %d (index %d at %d)", i, g.GetIndex(), g.GetAtUnixNano(), i-1, trail[i-1].GetIndex(), trail[i-1].GetAtUnixNano())
		}
	}

	all := e.audit(t, "")
	// The quorum id and feature level the leader records at bootstrap
	// come first, and the journal CA Raft records with the journal's
	// first intermediate (in either order with the bootstrap operator's
	// record: they race).
	rest := slices.DeleteFunc(slices.Clone(all), func(a *pactv1.AuditEntry) bool {
		return a.GetAction() == "quorum-id" || a.GetAction() == "quorum-level" || a.GetAction() == "journal-ca-recorded"
	})
	if len(rest) != len(all)-3 {
		t.Errorf("whole trail %v, want one quorum-id entry, one quorum-level and one journal-ca-recorded", all)
	}
	// The whole trail opens with the record of the bootstrap operator
	// credential, made when the journal started.
	if len(rest) != len(trail)+2 || rest[0].GetAction() != "operator-record" || rest[0].GetActor() != "journal/j1" ||
		rest[2].GetNodeId() != "n2" || rest[2].GetCorrelationId() != "c-other-node" {
		t.Errorf("whole trail %v, want the bootstrap operator's record, n1's and n2's registration", all)
	}
	for _, a := range all {
		if strings.HasPrefix(a.GetCorrelationId(), "c-refused") {
			t.Errorf("a refused call is in the audit trail: %v", a)
		}
	}

	filters := []struct {
		name string
		req  *pactv1.ListAuditRequest
		want []string
	}{
		{"since the node came back", &pactv1.ListAuditRequest{NodeId: "n1", SinceUnixNano: activeAt}, []string{"active", "takeover", "decommission", "register"}},
		{"since, any node", &pactv1.ListAuditRequest{SinceUnixNano: activeAt}, []string{"active", "takeover", "decommission", "register"}},
		{"since just after", &pactv1.ListAuditRequest{NodeId: "n1", SinceUnixNano: activeAt + 1}, []string{"takeover", "decommission", "register"}},
		{"newest three", &pactv1.ListAuditRequest{NodeId: "n1", Limit: 3}, []string{"takeover", "decommission", "register"}},
		{"another node", &pactv1.ListAuditRequest{NodeId: "n2"}, []string{"register"}},
		{"an unknown node", &pactv1.ListAuditRequest{NodeId: "nope"}, nil},
		{"the future", &pactv1.ListAuditRequest{SinceUnixNano: e.now() + 1}, nil},
	}
	for _, limit := range []uint32{10001, 1 << 31} {
		_, err := e.admin.ListAudit(callCtx(t), &pactv1.ListAuditRequest{Limit: limit})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ask for 1 to 10000") {
			t.Errorf("ListAudit limit %d: %v, want InvalidArgument saying the range", limit, err)
		}
	}
	for _, f := range filters {
		t.Run(f.name, func(t *testing.T) {
			resp, err := e.admin.ListAudit(callCtx(t), f.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := actions(resp.GetEntries()); strings.Join(got, " ") != strings.Join(f.want, " ") {
				t.Errorf("got %v, want %v", got, f.want)
			}
		})
	}

	t.Run("exported as JSON lines", func(t *testing.T) {
		var lines []auditLine
		eventually(t, fmt.Sprintf("%d lines in the audit log", len(all)), func() bool {
			lines = readAuditLog(t, logPath)
			return len(lines) >= len(all)
		})
		if len(lines) != len(all) {
			t.Fatalf("the audit log has %d lines, the registry %d entries", len(lines), len(all))
		}
		for i, l := range lines {
			a := all[i]
			at, err := time.Parse(time.RFC3339Nano, l.Time)
			if err != nil || at.UnixNano() != a.GetAtUnixNano() || l.Index != a.GetIndex() || l.Action != a.GetAction() || l.NodeID != a.GetNodeId() ||
				l.Actor != a.GetActor() || l.Source != a.GetSource() || l.Serial != a.GetSerial() || l.CorrelationID != a.GetCorrelationId() || l.Detail != a.GetDetail() {
				t.Errorf("line %d %+v does not match entry %v", i, l, a)
			}
		}
	})
}

func readAuditLog(t testing.TB, path string) []auditLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return out // a line still being written
		}
		out = append(out, l)
	}
	return out
}

func TestCorrelationID(t *testing.T) {
	e := newEnv(t)
	generated := regexp.MustCompile(`^[0-9a-f]{16}$`)
	tests := []struct {
		name string
		sent []string
		want string // "": one the journal made
	}{
		{"the caller's id is used", []string{"job-42.step_1"}, "job-42.step_1"},
		{"none: the journal makes one", nil, ""},
		{"malformed: replaced", []string{"has space"}, ""},
		{"too long: replaced", []string{strings.Repeat("a", 65)}, ""},
		{"two ids: replaced", []string{"one", "two"}, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := callCtx(t)
			for _, v := range tt.sent {
				ctx = metadata.AppendToOutgoingContext(ctx, v1rpc.CorrelationHeader, v)
			}
			node := fmt.Sprintf("n%d", i)
			var hdr metadata.MD
			if _, err := e.admin.RegisterNode(ctx, &pactv1.RegisterNodeRequest{NodeId: node, Hardware: hw("", mac(0x500+i))}, grpc.Header(&hdr)); err != nil {
				t.Fatal(err)
			}
			got := correlation(t, hdr)
			switch {
			case tt.want != "" && got != tt.want:
				t.Errorf("correlation id %q, want the caller's %q", got, tt.want)
			case tt.want == "" && !generated.MatchString(got):
				t.Errorf("correlation id %q, want 16 hex digits made by the journal", got)
			}
			if a := e.lastAudit(t, node); a.GetCorrelationId() != got {
				t.Errorf("audit entry has correlation id %q, the response %q", a.GetCorrelationId(), got)
			}
			// A refused call echoes the id too, for the caller's logs.
			ctx = callCtx(t)
			for _, v := range tt.sent {
				ctx = metadata.AppendToOutgoingContext(ctx, v1rpc.CorrelationHeader, v)
			}
			hdr = nil
			// (another MAC: the same registration again would be "exists")
			_, err := e.admin.RegisterNode(ctx, &pactv1.RegisterNodeRequest{NodeId: node, Hardware: hw("", mac(0x600+i))}, grpc.Header(&hdr))
			wantErr(t, err, codes.AlreadyExists, apierr.NodeAlreadyEnrolled)
			if got := correlation(t, hdr); tt.want != "" && got != tt.want {
				t.Errorf("refusal: correlation id %q, want %q", got, tt.want)
			}
		})
	}
}

// A certificate another journal signed while its clock ran ahead (here:
// this journal's clock stepped back) is accepted while its not_before is
// within ClockSkewTolerance of this journal's clock, and refused
// CERT_NOT_YET_VALID beyond it.
func TestClientCertAheadWithinSkewTolerance(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", "02:00:00:00:00:01")
	c := e.agentClient(t, a)
	if _, err := c.Ping(callCtx(t), &pactv1.PingRequest{}); err != nil {
		t.Fatalf("ping with a fresh certificate: %v", err)
	}
	// not_before is one minute back (the CA's backdate): 4 minutes back,
	// the journal's clock is 3 minutes behind it, inside the 5 minutes.
	e.fc.Advance(-4 * time.Minute)
	if _, err := c.Ping(callCtx(t), &pactv1.PingRequest{}); err != nil {
		t.Fatalf("ping with not_before 3 minutes ahead of the journal's clock: %v", err)
	}
	// 7 minutes ahead: beyond the tolerance.
	e.fc.Advance(-4 * time.Minute)
	_, err := c.Ping(callCtx(t), &pactv1.PingRequest{})
	wantErr(t, err, codes.Unauthenticated, apierr.CertNotYetValid)
}

// ListNodes pages a registry in node ID order: each node once, a page
// never more than asked, the filters applied on every page, a bad token a
// typed error; page_size zero still answers everything at once.
func TestListNodesPages(t *testing.T) {
	e := newEnv(t)
	req := &pactv1.RegisterNodesRequest{}
	for i := range 250 {
		vc := ""
		if i%2 == 0 {
			vc = "even"
		}
		req.Nodes = append(req.Nodes, &pactv1.RegisterNodeRequest{NodeId: fmt.Sprintf("page-%03d", i), Vcluster: vc,
			Hardware: &pactv1.HardwareIdentity{Macs: []string{fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff)}}})
	}
	if _, err := e.admin.RegisterNodes(callCtx(t), req); err != nil {
		t.Fatal(err)
	}
	walk := func(in *pactv1.ListNodesRequest) (ids []string, pages int) {
		t.Helper()
		for {
			resp, err := e.admin.ListNodes(callCtx(t), in)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if in.GetPageSize() > 0 && len(resp.GetNodes()) > int(in.GetPageSize()) {
				t.Fatalf("page of %d, asked for %d", len(resp.GetNodes()), in.GetPageSize())
			}
			for _, n := range resp.GetNodes() {
				ids = append(ids, n.GetNodeId())
			}
			if resp.GetNextPageToken() == "" {
				return ids, pages
			}
			in.PageToken = resp.GetNextPageToken()
		}
	}
	all, _ := walk(&pactv1.ListNodesRequest{})
	paged, pages := walk(&pactv1.ListNodesRequest{PageSize: 100})
	if pages != 3 || !slices.Equal(all, paged) || !slices.IsSorted(paged) {
		t.Fatalf("%d pages, %d nodes paged against %d at once", pages, len(paged), len(all))
	}
	even, pages := walk(&pactv1.ListNodesRequest{PageSize: 50, Vcluster: "even"})
	if pages != 3 || len(even) != 125 {
		t.Fatalf("vCluster even: %d nodes in %d pages, want 125 in 3", len(even), pages)
	}
	_, err := e.admin.ListNodes(callCtx(t), &pactv1.ListNodesRequest{PageSize: 10, PageToken: "not a token"})
	if apierr.FromError(err).Code != codes.InvalidArgument || !strings.Contains(err.Error(), "start the list again") {
		t.Fatalf("bad token: %v", err)
	}
}
