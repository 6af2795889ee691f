package raftnode

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/tlsalert"
)

// receivedAlert is what a peer's TLS stack refusing this journal's
// certificate leaves on this side: crypto/tls's report of the alert, read
// after the handshake (TLS 1.3).
func receivedAlert(t *testing.T) error {
	t.Helper()
	root := chaintest.NewRoot(peerDomain)
	inter := root.JournalCA("j2", chaintest.Names{}).Intermediate("j2", chaintest.Names{})
	server := inter.Server("j2", chaintest.Names{DNS: []string{"j2.pact.local"}}).TLS()
	client := inter.Server("j1", chaintest.Names{}).TLS()
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		defer b.Close()
		_ = tls.Server(b, &tls.Config{
			MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{server}, ClientAuth: tls.RequireAnyClientCert,
			VerifyPeerCertificate: func([][]byte, [][]*x509.Certificate) error { return errors.New("not a peer") },
		}).Handshake()
	}()
	c := tls.Client(a, &tls.Config{
		MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &client, nil },
	})
	if err := c.Handshake(); err != nil {
		t.Fatalf("this side's handshake: %v", err)
	}
	_, err := c.Read(make([]byte, 1))
	if _, ok := tlsalert.Received(err); !ok {
		t.Fatalf("read: %v, no alert", err)
	}
	return err
}

// A peer refuses this journal when its service says so, or when its TLS
// stack sent an alert: the alert itself, attached by the channel's
// credentials, never the words of gRPC's message.
func TestRefusedUs(t *testing.T) {
	words := status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: remote error: tls: bad certificate"`)
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"no error", nil, false},
		{"unauthenticated", status.Error(codes.Unauthenticated, "no"), true},
		{"permission denied", status.Error(codes.PermissionDenied, "no"), true},
		{"busy", status.Error(codes.ResourceExhausted, "busy"), true},
		{"unreachable", status.Error(codes.Unavailable, "connection refused"), false},
		{"an alert in words only", words, false},
		{"the peer's alert", tlsalert.Attach(words, receivedAlert(t)), true},
		{"deadline", status.Error(codes.DeadlineExceeded, "slow"), false},
	} {
		if got := refusedUs(tt.err); got != tt.want {
			t.Errorf("%s: refusedUs(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
