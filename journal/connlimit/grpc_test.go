package connlimit_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pact-hpc/pact/journal/connlimit"
)

// The journal's gRPC port relies on gRPC lifting the connection's deadline
// once the TLS handshake and the HTTP/2 preface are done (the limiter's
// sign that the handshake is over). With a cap of 3: a gRPC client that
// made one call keeps its connection while silent connections, the oldest
// of them first, are evicted around it.
func TestAGRPCConnectionPastItsHandshakeIsNeverEvicted(t *testing.T) {
	l := newLimiter(t, func(c *connlimit.Config) { c.MaxConns, c.MaxConnsPerSource = 3, 3 })
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})),
		grpc.ConnectionTimeout(time.Minute))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(l.Listener(raw)) }()
	defer srv.Stop()
	addr := raw.Addr().String()

	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.9")}}
			return d.DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	check := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
		defer cancel()
		if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	check()

	// Four silent connections at a cap of three, one of which the gRPC
	// client holds: each from the second on evicts the silent one before
	// it, never the gRPC connection, though it is the oldest.
	silent := []net.Conn{dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.2", addr)}
	defer func() {
		// Before the server stops: it waits for handshakes in progress.
		for _, c := range silent {
			c.Close()
		}
	}()
	for i, src := range []string{"127.0.0.3", "127.0.0.4"} {
		silent = append(silent, dialFrom(t, src, addr))
		if !closedByServer(silent[i]) {
			t.Fatalf("silent connection %d was not evicted", i)
		}
	}
	if st := l.Stats(); st.Evicted != 2 || st.Open != 3 {
		t.Fatalf("stats %+v, want 2 evicted and 3 open", st)
	}
	if s := cc.GetState(); s != connectivity.Ready {
		t.Fatalf("the gRPC connection is %v, want it still ready", s)
	}
	check()
	if st := l.Stats(); st.Evicted != 2 || st.Open != 3 {
		t.Fatalf("stats %+v after a second call, want the same connection (2 evicted, 3 open)", st)
	}
}
