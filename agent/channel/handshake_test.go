package channel_test

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/agent/channel"
)

// A journal that closes the connection on the ClientHello (no handshake
// slot free) fails the handshake with io.EOF, and Explain hands the call
// that failure typed, as a HandshakeError, with its text unchanged.
func TestExplainTypesAHandshakeClosedOnTheClientHello(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		// Half-closed, then drained: the client reads the end of the
		// stream, not a reset.
		_ = c.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, c)
		_ = c.Close()
	}()
	raw, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	root, _ := testCert(t, "root", nil, nil, time.Now())
	creds := channel.NewClientCredentials(channel.ClientTLSConfig([]*x509.Certificate{root}, nil, time.Now))
	if _, _, err := creds.ClientHandshake(context.Background(), "127.0.0.1", raw); !errors.Is(err, io.EOF) {
		t.Fatalf("handshake: %v, want EOF", err)
	}
	call := status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: EOF"`)
	got := creds.Explain(call)
	var he *channel.HandshakeError
	if !errors.As(got, &he) || !errors.Is(he, io.EOF) {
		t.Errorf("%v: no HandshakeError wrapping io.EOF", got)
	}
	if want := call.Error() + " (TLS handshake: EOF)"; got.Error() != want {
		t.Errorf("%q, want %q", got, want)
	}
	if status.Code(got) != codes.Unavailable {
		t.Errorf("code %v", status.Code(got))
	}
}
