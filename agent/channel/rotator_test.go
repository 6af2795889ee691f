package channel_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"net/url"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/holdproxy"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/polltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// fakeJournal serves the agent half of EnrollmentService over real mTLS:
// Ping answers for the node named by the client certificate's SPIFFE ID,
// Subscribe sends an assignment and holds the stream. Serials marked stale
// are refused with STALE_CERTIFICATE, on calls and on open streams.
type fakeJournal struct {
	pactv1.UnimplementedEnrollmentServiceServer
	addr    string
	clients *x509.CertPool

	mu       sync.Mutex
	offset   time.Duration // added to the server's clock in Ping
	stale    map[string]bool
	staleNow chan struct{} // closed and replaced when a serial turns stale
	hold     chan struct{} // while non-nil, Ping waits for it to close
	held     int           // Pings waiting on hold
	refused  int           // calls refused as stale
	streams  int
}

func startFakeJournal(t *testing.T, ca *identitytest.CA) *fakeJournal {
	t.Helper()
	return startFakeJournalUnder(t, ca, ca)
}

// startFakeJournalUnder is startFakeJournal with a server certificate
// issued by ca and client certificates verified against clients.
func startFakeJournalUnder(t *testing.T, ca, clients *identitytest.CA) *fakeJournal {
	t.Helper()
	return startFakeServer(t, ca, clients, pki.Identity{Kind: pki.KindJournal, Name: "j1", Domain: ca.Domain})
}

// startFakeServer is startFakeJournalUnder with a server certificate that
// names 127.0.0.1 and carries who's SPIFFE ID: a journal's, or not.
func startFakeServer(t *testing.T, ca, clients *identitytest.CA, who pki.Identity) *fakeJournal {
	t.Helper()
	f := &fakeJournal{clients: x509.NewCertPool(), stale: map[string]bool{}, staleNow: make(chan struct{})}
	f.clients.AddCert(clients.Cert)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := pki.NewSerial()
	now := time.Now()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "fake journal"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		URIs:         []*url.URL{who.SPIFFEID()},
	}, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = lis.Addr().String()
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:   tls.RequireAnyClientCert,
	})))
	pactv1.RegisterEnrollmentServiceServer(gs, f)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return f
}

// who authenticates the caller: its leaf must verify against the client CA.
func (f *fakeJournal) who(ctx context.Context) (node, serial string, err error) {
	p, _ := peer.FromContext(ctx)
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return "", "", status.Error(codes.Unauthenticated, "no client certificate")
	}
	leaf := info.State.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: f.clients, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return "", "", status.Error(codes.Unauthenticated, "untrusted client certificate")
	}
	serial = pki.SerialHex(leaf.SerialNumber)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale[serial] {
		f.refused++
		return "", "", apierr.Status(apierr.StaleCertificate, 0, "certificate "+serial+" is stale").Err()
	}
	if len(leaf.URIs) == 0 {
		return "", "", status.Error(codes.Unauthenticated, "no SPIFFE ID")
	}
	return path.Base(leaf.URIs[0].Path), serial, nil
}

func (f *fakeJournal) Ping(ctx context.Context, _ *pactv1.PingRequest) (*pactv1.PingResponse, error) {
	node, serial, err := f.who(ctx)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	hold, offset := f.hold, f.offset
	if hold != nil {
		f.held++
	}
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	return &pactv1.PingResponse{NodeId: node, Serial: serial, IdentitySource: "journal", JournalId: "fake",
		ServerTimeUnixNano: time.Now().Add(offset).UnixNano()}, nil
}

func (f *fakeJournal) Subscribe(_ *pactv1.SubscribeRequest, stream grpc.ServerStreamingServer[pactv1.SubscribeResponse]) error {
	node, serial, err := f.who(stream.Context())
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.streams++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.streams--
		f.mu.Unlock()
	}()
	if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_Assignment{Assignment: &pactv1.Assignment{NodeId: node}}}); err != nil {
		return err
	}
	for {
		f.mu.Lock()
		stale, wake := f.stale[serial], f.staleNow
		f.mu.Unlock()
		if stale {
			return apierr.Status(apierr.StaleCertificate, 0, "certificate "+serial+" is stale").Err()
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-wake:
		}
	}
}

func (f *fakeJournal) markStale(serial string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stale[serial] = true
	close(f.staleNow)
	f.staleNow = make(chan struct{})
}

func (f *fakeJournal) set(fn func(f *fakeJournal)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeJournal) get(fn func(f *fakeJournal) int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fn(f)
}

type rotatorEnv struct {
	ca  *identitytest.CA
	fj  *fakeJournal
	rot *channel.Rotator
}

func newRotatorEnv(t *testing.T, mutate ...func(*channel.Config)) *rotatorEnv {
	t.Helper()
	ca := identitytest.NewCA("pact.local", time.Now())
	fj := startFakeJournal(t, ca)
	cfg := channel.DefaultConfig()
	cfg.Targets = []string{fj.addr}
	cfg.Roots = []*x509.Certificate{ca.Cert}
	cfg.CallTimeout = 5 * time.Second
	cfg.Logger = quiet
	for _, m := range mutate {
		m(&cfg)
	}
	rot, err := channel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rot.Close() })
	return &rotatorEnv{ca: ca, fj: fj, rot: rot}
}

func (e *rotatorEnv) issue(node string) *identity.Identity {
	now := time.Now()
	return e.ca.Issue(identity.SourceJournal, "spiffe://pact.local/pact-agent/"+node, now.Add(-time.Minute), now.Add(time.Hour))
}

func (e *rotatorEnv) swap(t *testing.T, id *identity.Identity) *channel.Channel {
	t.Helper()
	if err := e.rot.Swap(t.Context(), id); err != nil {
		t.Fatalf("swap to %v: %v", id, err)
	}
	ch := e.rot.Active()
	if ch.Identity() != id || !ch.StreamAlive() || ch.NodeID() != "n1" || ch.JournalID() != "fake" {
		t.Fatalf("active channel %+v after the swap to %v", ch, id)
	}
	return ch
}

// waitFor polls cond; the fake journal runs on its own goroutines.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, 10*time.Second, 5*time.Millisecond, cond, "timed out waiting until %s", what)
}

func ping(ctx context.Context, cc grpc.ClientConnInterface) error {
	_, err := pactv1.NewEnrollmentServiceClient(cc).Ping(ctx, &pactv1.PingRequest{})
	return err
}

// A swap publishes the new channel, stops the old stream at once, and
// closes the old channel only when its in-flight call has finished; the
// call succeeds.
func TestRotatorSwapDrainsTheOldChannel(t *testing.T) {
	e := newRotatorEnv(t)
	if err := ping(t.Context(), e.rot); status.Code(err) != codes.Unavailable {
		t.Fatalf("a call before the first swap: %v, want UNAVAILABLE", err)
	}
	old := e.swap(t, e.issue("n1"))

	hold := make(chan struct{})
	e.fj.set(func(f *fakeJournal) { f.hold = hold })
	inflight := make(chan error, 1)
	go func() { inflight <- ping(t.Context(), e.rot) }()
	// Wait for the journal to hold the call, not only for the client to
	// count it: clearing hold before the handler reads it would let the
	// call finish at once.
	waitFor(t, "the journal holds the call", func() bool { return e.fj.get(func(f *fakeJournal) int { return f.held }) == 1 })
	if n := old.InFlight(); n != 1 {
		t.Fatalf("%d calls in flight on the old channel, want 1", n)
	}
	e.fj.set(func(f *fakeJournal) { f.hold = nil })

	next := e.swap(t, e.issue("n1"))
	if e.rot.Conn() != next.Conn() {
		t.Fatal("Conn is not the new channel's")
	}
	if err := ping(t.Context(), e.rot); err != nil {
		t.Fatalf("a call on the new channel: %v", err)
	}
	<-old.StreamDone()
	if !old.StreamStopped() {
		t.Errorf("the old stream ended with %v, not stopped by the rotator", old.StreamErr())
	}
	if s := old.Conn().GetState(); s == connectivity.Shutdown {
		t.Fatal("the old channel was closed with a call in flight")
	}
	if err := ping(t.Context(), old.Conn()); !errors.Is(err, channel.ErrReplaced) {
		t.Errorf("a new call on the draining channel: %v, want ErrReplaced", err)
	}
	close(hold)
	if err := <-inflight; err != nil {
		t.Errorf("the in-flight call failed: %v", err)
	}
	waitFor(t, "the old channel is closed", func() bool { return old.Conn().GetState() == connectivity.Shutdown })
	waitFor(t, "one stream remains", func() bool { return e.fj.get(func(f *fakeJournal) int { return f.streams }) == 1 })
	rec, ok := e.rot.LastSwap()
	if !ok || rec.From != old || rec.To != next || rec.StreamGap() != 0 || rec.Duration() <= 0 {
		t.Errorf("last swap %+v (gap %v)", rec, rec.StreamGap())
	}
}

// An in-flight call that outlives DrainTimeout does not keep the old
// channel open.
func TestRotatorDrainTimeout(t *testing.T) {
	e := newRotatorEnv(t, func(c *channel.Config) { c.DrainTimeout = 50 * time.Millisecond })
	old := e.swap(t, e.issue("n1"))
	hold := make(chan struct{})
	defer close(hold)
	e.fj.set(func(f *fakeJournal) { f.hold = hold })
	inflight := make(chan error, 1)
	go func() { inflight <- ping(t.Context(), e.rot) }()
	// Wait for the journal to hold the call, not only for the client to
	// count it: clearing hold before the handler reads it would let the
	// call finish at once.
	waitFor(t, "the journal holds the call", func() bool { return e.fj.get(func(f *fakeJournal) int { return f.held }) == 1 })
	if n := old.InFlight(); n != 1 {
		t.Fatalf("%d calls in flight on the old channel, want 1", n)
	}
	e.fj.set(func(f *fakeJournal) { f.hold = nil })
	e.swap(t, e.issue("n1"))
	waitFor(t, "the old channel is closed", func() bool { return old.Conn().GetState() == connectivity.Shutdown })
	if err := <-inflight; err == nil {
		t.Error("the call on the closed channel succeeded")
	}
}

// A health check that fails leaves the active channel as it was.
func TestRotatorHealthCheckFailures(t *testing.T) {
	tests := []struct {
		name  string
		setup func(e *rotatorEnv) *identity.Identity
		check func(error) bool
	}{
		{"another node", func(e *rotatorEnv) *identity.Identity { return e.issue("n2") },
			func(err error) bool { return errors.Is(err, channel.ErrWrongNode) }},
		{"journal clock ten minutes behind", func(e *rotatorEnv) *identity.Identity {
			e.fj.set(func(f *fakeJournal) { f.offset = -10 * time.Minute })
			return e.issue("n1")
		}, func(err error) bool {
			var se *channel.ClockSkewError
			return errors.Is(err, channel.ErrClockSkew) && errors.As(err, &se) && se.Skew > 9*time.Minute
		}},
		{"identity the journal refuses", func(e *rotatorEnv) *identity.Identity {
			now := time.Now()
			return identitytest.NewCA("pact.local", now).Issue(identity.SourceSPIRE, "spiffe://pact.local/pact-agent/n1", now, now.Add(time.Hour))
		}, func(err error) bool { return status.Code(err) == codes.Unauthenticated }},
		{"stale identity", func(e *rotatorEnv) *identity.Identity {
			id := e.issue("n1")
			e.fj.markStale(id.Serial())
			return id
		}, func(err error) bool { return apierr.FromError(err).Reason == apierr.StaleCertificate }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newRotatorEnv(t)
			active := e.swap(t, e.issue("n1"))
			err := e.rot.Swap(t.Context(), tt.setup(e))
			if err == nil || !tt.check(err) {
				t.Fatalf("Swap = %v", err)
			}
			if e.rot.Active() != active || !active.StreamAlive() {
				t.Fatal("a failed swap disturbed the active channel")
			}
			if err := ping(t.Context(), e.rot); err != nil {
				t.Fatalf("the active channel no longer answers: %v", err)
			}
			waitFor(t, "only the active stream is open", func() bool { return e.fj.get(func(f *fakeJournal) int { return f.streams }) == 1 })
		})
	}
}

// A journal whose server certificate does not chain to the roots fails the
// swap with the typed TLS error, not a bare UNAVAILABLE.
func TestRotatorUntrustedJournal(t *testing.T) {
	e := newRotatorEnv(t, func(c *channel.Config) {
		c.Roots = []*x509.Certificate{identitytest.NewCA("other.example", time.Now()).Cert}
	})
	// The identity's bundle is trusted too; give it one that is not the
	// journal's CA either.
	id := e.issue("n1")
	id.Bundle = nil
	err := e.rot.Swap(t.Context(), id)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) || status.Code(err) != codes.Unavailable {
		t.Fatalf("Swap = %v, want UNAVAILABLE carrying an x509.UnknownAuthorityError", err)
	}
	if e.rot.Active() != nil {
		t.Fatal("a channel went live to an untrusted journal")
	}
}

// A unary call that the journal refuses as stale while a rotation is under
// way (the renewal committed, the new channel not yet live) is retried once
// on the new channel; without a rotation, the refusal stands.
func TestRotatorRetriesStaleCallOnce(t *testing.T) {
	e := newRotatorEnv(t)
	old := e.swap(t, e.issue("n1"))
	next := e.issue("n1")
	result := make(chan error, 1)
	err := e.rot.Rotate(t.Context(), func(ctx context.Context, active *channel.Channel) (*identity.Identity, error) {
		if active != old {
			t.Errorf("fetch got channel %p, want the active %p", active, old)
		}
		// What a journal renewal does: the old certificate is stale from
		// the commit on.
		e.fj.markStale(old.Identity().Serial())
		go func() { result <- ping(context.Background(), e.rot) }()
		waitFor(t, "the journal refused the call as stale", func() bool { return e.fj.get(func(f *fakeJournal) int { return f.refused }) >= 1 })
		return next, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-result; err != nil {
		t.Fatalf("the call refused as stale was not retried on the new channel: %v", err)
	}
	if n := e.rot.Retries(); n != 1 {
		t.Errorf("Retries = %d, want 1", n)
	}

	e.fj.markStale(next.Serial())
	if err := ping(t.Context(), e.rot); apierr.FromError(err).Reason != apierr.StaleCertificate {
		t.Fatalf("a stale refusal outside a rotation: %v, want STALE_CERTIFICATE", err)
	}
	if n := e.rot.Retries(); n != 1 {
		t.Errorf("Retries = %d after a refusal outside a rotation, want still 1", n)
	}
}

func TestRotatorClose(t *testing.T) {
	e := newRotatorEnv(t)
	ch := e.swap(t, e.issue("n1"))
	if err := e.rot.Close(); err != nil {
		t.Fatal(err)
	}
	if ch.StreamAlive() || ch.Conn().GetState() != connectivity.Shutdown {
		t.Error("Close left the channel open")
	}
	if err := e.rot.Swap(t.Context(), e.issue("n1")); !errors.Is(err, channel.ErrRotatorClosed) {
		t.Errorf("Swap after Close = %v", err)
	}
	if err := ping(t.Context(), e.rot); err == nil {
		t.Error("a call after Close succeeded")
	}
}

func TestRotatorConfigValidate(t *testing.T) {
	cfg := channel.Config{Targets: []string{"nohost"}, HandshakeQueueWait: -time.Second}
	err := cfg.Validate()
	for _, want := range []string{"want host:port", "domain root", "MaxClockSkew", "CallTimeout", "HandshakeQueueWait", "DrainTimeout", "Clock", "Logger"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v; want it to mention %q", err, want)
		}
	}
}

// A journal may hold a new channel's handshake in its queue for up to its
// queue wait before serving it: the health check, which makes the
// connection, allows that wait on top of CallTimeout, so a channel the
// journal serves within its promise is not given up (and its handshake
// wasted). Allowed no queue wait, the same channel times out.
func TestRotatorHealthCheckAllowsTheHandshakeQueue(t *testing.T) {
	for _, tc := range []struct {
		name      string
		queueWait time.Duration
		ok        bool
	}{
		{"queue wait allowed", 8 * time.Second, true},
		{"no queue wait allowed", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca := identitytest.NewCA("pact.local", time.Now())
			fj := startFakeJournal(t, ca)
			cfg := channel.DefaultConfig()
			cfg.Targets = []string{holdproxy.Start(t, fj.addr, 4*time.Second)}
			cfg.Roots = []*x509.Certificate{ca.Cert}
			cfg.CallTimeout = 2 * time.Second
			cfg.HandshakeQueueWait = tc.queueWait
			cfg.Logger = quiet
			rot, err := channel.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rot.Close() })
			now := time.Now()
			err = rot.Swap(t.Context(), ca.Issue(identity.SourceJournal, "spiffe://pact.local/pact-agent/n1", now.Add(-time.Minute), now.Add(time.Hour)))
			switch {
			case tc.ok && err != nil:
				t.Fatalf("Swap through a 4 s handshake queue, CallTimeout 2 s and an 8 s queue wait allowed: %v", err)
			case !tc.ok && status.Code(err) != codes.DeadlineExceeded:
				t.Fatalf("Swap through a 4 s handshake queue, CallTimeout 2 s and no queue wait allowed = %v, want DEADLINE_EXCEEDED", err)
			}
		})
	}
}
