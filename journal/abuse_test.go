package journal_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/encoding"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// One certificate may hold MaxStreamsPerCert streams on a journal; the
// next is refused with TOO_MANY_STREAMS (retryable, with a retry-after),
// and a place comes back when a stream ends. Another certificate is not
// affected.
func TestStreamsPerCertificateAreCapped(t *testing.T) {
	cfg := journaltest.Config(t.TempDir())
	cfg.MaxStreamsPerCert = 3
	h := journaltest.Start(t, cfg)
	h.Register(t, "n1", "SN1", mac1)
	key := journaltest.NewKey(t)
	resp, err := h.Enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	cert := key.TLSCert(resp.GetCertChainDer())
	client := pactv1.NewEnrollmentServiceClient(h.Dial(t, &cert))

	open := func(ctx context.Context) error {
		s, err := client.Subscribe(ctx, &pactv1.SubscribeRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv() // the first event: the stream is established
		return err
	}
	var cancels []context.CancelFunc
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		if err := open(ctx); err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
		cancels = append(cancels, cancel)
	}
	err = open(context.Background())
	wantReason(t, err, codes.ResourceExhausted, apierr.TooManyStreams)
	if pe := apierr.FromError(err); pe.RetryAfter <= 0 || pe.Final() {
		t.Errorf("refusal %+v: want a retryable answer with a retry-after", pe)
	}
	if n := h.J.OpenStreams("n1"); n != 3 {
		t.Errorf("open streams %d, want 3 (the refused one never registered)", n)
	}

	// A second node's certificate has its own places.
	h.Register(t, "n2", "SN2", "52:54:00:00:00:02")
	key2 := journaltest.NewKey(t)
	resp2, err := h.Enroll(t, key2, "SN2", "52:54:00:00:00:02")
	if err != nil {
		t.Fatal(err)
	}
	cert2 := key2.TLSCert(resp2.GetCertChainDer())
	s2, err := pactv1.NewEnrollmentServiceClient(h.Dial(t, &cert2)).Subscribe(context.Background(), &pactv1.SubscribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Recv(); err != nil {
		t.Fatalf("another certificate's stream: %v", err)
	}

	// Ending a stream gives its place back (once the journal has seen it
	// end: the handler returns asynchronously).
	cancels[0]()
	polltest.Until(t, 10*time.Second, time.Millisecond, func() bool {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		err := open(ctx)
		if err != nil && apierr.FromError(err).Reason != apierr.TooManyStreams {
			t.Fatalf("after one stream ended: %v", err)
		}
		return err == nil
	}, "after one stream ended: still TOO_MANY_STREAMS after 10s")
}

// rawCodec sends whatever bytes it is given, so a test can put a message
// on the wire that is no protobuf at all.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error { return nil }
func (rawCodec) Name() string                    { return "proto" }

var _ encoding.Codec = rawCodec{}

// A request that does not decode is the caller's fault: INVALID_ARGUMENT,
// not INTERNAL, on unary calls and on streams, and nothing is written.
func TestUndecodableRequestsAreInvalidArgument(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	key := journaltest.NewKey(t)
	resp, err := h.Enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	cert := key.TLSCert(resp.GetCertChainDer())
	before := h.J.CommitIndex()
	// Field 1 as a length-delimited value running past the end.
	garbage := []byte{0x0a, 0xff, 0xff, 0xff, 0x0f, 0x01}
	for _, tc := range []struct {
		method string
		cert   bool
	}{
		{pactv1.AdminService_RegisterNode_FullMethodName, false},
		{pactv1.EnrollmentService_Ping_FullMethodName, true},
		{pactv1.EnrollmentService_Enroll_FullMethodName, false},
		{pactv1.EnrollmentService_Enroll_FullMethodName, true},
	} {
		var conn *grpc.ClientConn
		if tc.cert {
			conn = h.DialWith(t, &cert, grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
		} else {
			conn = h.DialWith(t, nil, grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
		}
		var out []byte
		err := conn.Invoke(context.Background(), tc.method, garbage, &out)
		wantReason(t, err, codes.InvalidArgument, apierr.InvalidArgument)
	}
	// A stream's request.
	conn := h.DialWith(t, &cert, grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	s, err := conn.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true}, pactv1.EnrollmentService_Subscribe_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(garbage); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseSend()
	var out []byte
	wantReason(t, s.RecvMsg(&out), codes.InvalidArgument, apierr.InvalidArgument)
	if after := h.J.CommitIndex(); after != before {
		t.Errorf("commit index %d -> %d: an undecodable request was written", before, after)
	}
}

// syncBuffer is a log sink safe for the journal's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// dialFrom connects to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitClosed reads from c until the journal closes it (bounded by a
// generous deadline) and reports whether it did.
func waitClosed(c net.Conn, within time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// The Raft port bounds connections per source, closes a client that never
// completes a handshake after the handshake timeout, and logs refused
// connections at most once per interval with the count it held back;
// Raft's own log stays quiet about them.
func TestRaftPortLimitsAndQuietRefusals(t *testing.T) {
	fc := fakeclock.New(time.Now())
	var logs syncBuffer
	cfg := journaltest.Config(t.TempDir())
	cfg.Clock = fc
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.RaftListen = journaltest.FreeAddr(t)
	cfg.InitialCluster = []journal.Peer{{ID: cfg.NodeID, RaftAddr: cfg.RaftListen}}
	cfg.MetricsListen = "127.0.0.1:0"
	cfg.Connections.MaxConnsPerSource = 3
	// Long enough that the three silent connections below are still open
	// when the fourth is accepted, however loaded the machine.
	cfg.Connections.HandshakeTimeout = 3 * time.Second
	cfg.Connections.HandshakeQueueWait = 100 * time.Millisecond
	h := journaltest.Start(t, cfg)
	addr := cfg.RaftListen

	// Ten clients that are no journal: bytes that are no TLS at all.
	for range 10 {
		c := dialFrom(t, "127.0.3.1", addr)
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if !waitClosed(c, 30*time.Second) {
			t.Fatal("the Raft port kept a connection that sent no TLS")
		}
	}
	const refusal = "refused a connection on the Raft port"
	if n := strings.Count(logs.String(), refusal); n != 1 {
		t.Fatalf("%d refusal lines for 10 refusals within one interval, want 1:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "failed to decode incoming command") {
		t.Errorf("Raft logged the refused connections itself:\n%s", logs.String())
	}
	fc.Advance(11 * time.Second)
	c := dialFrom(t, "127.0.3.1", addr)
	_, _ = io.WriteString(c, "nonsense")
	if !waitClosed(c, 30*time.Second) {
		t.Fatal("the Raft port kept a connection that sent nonsense")
	}
	if n := strings.Count(logs.String(), refusal); n != 2 || !strings.Contains(logs.String(), "refusals_not_logged=9") {
		t.Fatalf("after the interval: %d refusal lines, want 2, the second counting 9 held back:\n%s", n, logs.String())
	}

	// Per source: the fourth silent connection from one address is closed
	// at once, in Accept (the refusal counter says which limit closed it:
	// the handshake timeout would close it too, later).
	silent := []net.Conn{dialFrom(t, "127.0.3.2", addr), dialFrom(t, "127.0.3.2", addr), dialFrom(t, "127.0.3.2", addr)}
	over := dialFrom(t, "127.0.3.2", addr)
	if !waitClosed(over, 30*time.Second) {
		t.Fatal("a fourth connection from one source was kept")
	}
	if m := `pact_journal_connections_refused_total{limit="per_source",port="raft"} 1`; !strings.Contains(scrape(t, h), m) {
		t.Fatalf("the fourth connection from one source was not refused by the per-source cap: /metrics lacks %s", m)
	}
	// A silent connection is closed after the handshake timeout (3 s
	// here), not held for minutes.
	began := time.Now()
	if !waitClosed(silent[0], 30*time.Second) {
		t.Fatal("a silent Raft connection outlived the handshake timeout")
	}
	t.Logf("silent Raft connection closed after %v (handshake timeout 3s)", time.Since(began).Round(10*time.Millisecond))
}

// The gRPC port does the same before its TLS handshake: a source's
// connections beyond the cap are closed at once, and a silent one is
// closed after the handshake timeout instead of gRPC's 120 s.
func TestGRPCPortConnectionLimits(t *testing.T) {
	cfg := journaltest.Config(t.TempDir())
	cfg.MetricsListen = "127.0.0.1:0"
	cfg.Connections.MaxConnsPerSource = 2
	// Long enough that a and b are still open when the third is accepted,
	// however loaded the machine.
	cfg.Connections.HandshakeTimeout = 3 * time.Second
	cfg.Connections.HandshakeQueueWait = 100 * time.Millisecond
	h := journaltest.Start(t, cfg)
	a, b := dialFrom(t, "127.0.4.1", h.Addr), dialFrom(t, "127.0.4.1", h.Addr)
	if !waitClosed(dialFrom(t, "127.0.4.1", h.Addr), 30*time.Second) {
		t.Fatal("a third connection from one source was kept")
	}
	// Closed by the cap, at once, not later by the handshake timeout.
	if m := `pact_journal_connections_refused_total{limit="per_source",port="grpc"} 1`; !strings.Contains(scrape(t, h), m) {
		t.Fatalf("the third connection from one source was not refused by the per-source cap: /metrics lacks %s", m)
	}
	// Honest callers from other addresses are served meanwhile.
	if _, err := h.AdminClient(t).ListNodes(context.Background(), &pactv1.ListNodesRequest{}); err != nil {
		t.Fatalf("ListNodes while one source holds its cap: %v", err)
	}
	for _, c := range []net.Conn{a, b} {
		if !waitClosed(c, 30*time.Second) {
			t.Fatal("a silent connection outlived the handshake timeout")
		}
	}
}

// The new limits are validated with the rest of the configuration.
func TestLimitsConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*journal.Config)
		want string
	}{
		{"streams", func(c *journal.Config) { c.MaxStreamsPerCert = 1 }, "MaxStreamsPerCert 1"},
		{"idle", func(c *journal.Config) { c.IdleTimeout = 0 }, "idle timeout"},
		{"waiters", func(c *journal.Config) { c.MaxEnrollWaiters = 0 }, "MaxEnrollWaiters"},
		{"per source", func(c *journal.Config) { c.Connections.MaxConnsPerSource = 0 }, "MaxConnsPerSource"},
		{"handshake timeout", func(c *journal.Config) { c.Connections.HandshakeTimeout = 2 * time.Minute }, "HandshakeTimeout"},
		{"fresh budget", func(c *journal.Config) { c.RateLimit.FreshBurst = -1 }, "FreshBurst"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := journal.DefaultConfig()
			cfg.DataDir = t.TempDir()
			tc.set(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want it to name %q", err, tc.want)
			}
		})
	}
}

// A gRPC connection that carries no call for the idle timeout is closed by
// the journal (the client sees its channel go idle).
func TestIdleGRPCConnectionsAreClosed(t *testing.T) {
	cfg := journaltest.Config(t.TempDir())
	cfg.IdleTimeout = time.Second
	h := journaltest.Start(t, cfg)
	conn := h.Dial(t, &h.Admin)
	if _, err := pactv1.NewAdminServiceClient(conn).ListNodes(context.Background(), &pactv1.ListNodesRequest{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	began := time.Now()
	for s := conn.GetState(); s != connectivity.Idle; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("the channel stayed %v: the journal did not close the idle connection", s)
		}
	}
	t.Logf("idle connection closed by the journal after %v (idle timeout 1s)", time.Since(began).Round(10*time.Millisecond))
}
