package tlsalert_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/tlsalert"
)

func selfSigned(t *testing.T, name string) (tls.Certificate, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, c
}

// A TLS 1.3 server that refuses the client's certificate sends
// bad_certificate after the client's handshake is done: the watched
// connection records it on the first read, typed.
func TestWatchRecordsTheAlertOfTheFirstRead(t *testing.T) {
	serverCert, serverX := selfSigned(t, "journal.test")
	clientCert, _ := selfSigned(t, "node.test")
	roots := x509.NewCertPool()
	roots.AddCert(serverX)

	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{serverCert},
		// As a journal refuses a chain it does not trust: its own check.
		ClientAuth: tls.RequireAnyClientCert,
		VerifyPeerCertificate: func([][]byte, [][]*x509.Certificate) error {
			return errors.New("not a node of this domain")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.(*tls.Conn).Handshake()
	}()

	raw, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "journal.test",
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &clientCert, nil },
	})
	if err != nil {
		t.Fatalf("the client's side of the handshake: %v", err)
	}
	rec := &tlsalert.Record{}
	conn := tlsalert.Watch(raw, rec)
	defer conn.Close()
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("read on a refused connection succeeded")
	}
	a, ok := tlsalert.Received(rec.Err())
	if !ok || a != tlsalert.BadCertificate {
		t.Fatalf("recorded %v (alert %v, %v), want bad_certificate", rec.Err(), a, ok)
	}
	// Found through wrapping, also when the wrapper does not print it.
	wrapped := fmt.Errorf("rpc error: connection closed%.0w", rec.Err())
	if a, ok := tlsalert.Received(fmt.Errorf("x: %w", errors.Join(errors.New("y"), wrapped))); !ok || a != tlsalert.BadCertificate {
		t.Errorf("wrapped: alert %v, %v", a, ok)
	}
}

// Only crypto/tls's report of a received alert counts: not its text, not
// an alert this side sent, not another network error.
func TestReceivedIsTyped(t *testing.T) {
	for _, err := range []error{
		nil,
		errors.New("remote error: tls: bad certificate"),
		fmt.Errorf("handshake: %w", tls.AlertError(42)),
		&net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")},
		&net.OpError{Op: "dial", Err: errors.New("connection refused")},
	} {
		if a, ok := tlsalert.Received(err); ok {
			t.Errorf("%v: alert %v", err, a)
		}
	}
	var rec *tlsalert.Record
	if rec.Err() != nil {
		t.Error("a nil record holds an error")
	}
}

// A gRPC call to a server that refuses the client's certificate fails
// UNAVAILABLE with the alert in words only; the credentials' Explain puts
// the alert back, typed, and changes nothing else.
func TestCredentialsExplainACallRefusedByAnAlert(t *testing.T) {
	serverCert, serverX := selfSigned(t, "journal.test")
	clientCert, _ := selfSigned(t, "node.test")
	roots := x509.NewCertPool()
	roots.AddCert(serverX)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{serverCert},
		ClientAuth: tls.RequireAnyClientCert,
		VerifyPeerCertificate: func([][]byte, [][]*x509.Certificate) error {
			return errors.New("not a journal of this domain")
		},
	})))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	creds := tlsalert.NewCredentials(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "journal.test",
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &clientCert, nil },
	}))
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("call: %v, want UNAVAILABLE", err)
	}
	if _, ok := tlsalert.Received(err); ok {
		t.Fatal("gRPC's own error carries the alert typed: Explain is not needed")
	}
	got := creds.Explain(err)
	if a, ok := tlsalert.Received(got); !ok || a != tlsalert.BadCertificate {
		t.Errorf("explained %v: alert %v, %v; want bad_certificate", got, a, ok)
	}
	if ended, _, alert := creds.Latest(); !ended || alert == nil {
		t.Errorf("Latest: ended %v, alert %v; want the alert", ended, alert)
	}
	if got.Error() != err.Error() || status.Convert(got).Message() != status.Convert(err).Message() || status.Code(got) != codes.Unavailable {
		t.Errorf("explained %q (%v %q), want %q unchanged", got, status.Code(got), status.Convert(got).Message(), err)
	}
	// Other codes pass as they are.
	other := status.Error(codes.PermissionDenied, "no")
	if creds.Explain(other) != other {
		t.Error("Explain changed a PERMISSION_DENIED")
	}
}

// Latest reports nothing before a handshake has ended, then the latest
// handshake's error: here the server closed the connection on the
// ClientHello, with no alert.
func TestCredentialsLatestReportsTheHandshake(t *testing.T) {
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
		_ = c.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, c)
		_ = c.Close()
	}()
	raw, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	creds := tlsalert.NewCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, ServerName: "journal.test"}))
	clone := creds.Clone().(*tlsalert.Credentials)
	if ended, herr, alert := creds.Latest(); ended || herr != nil || alert != nil {
		t.Fatalf("before any handshake: %v %v %v", ended, herr, alert)
	}
	if _, _, err := clone.ClientHandshake(context.Background(), "journal.test", raw); !errors.Is(err, io.EOF) {
		t.Fatalf("handshake: %v, want EOF", err)
	}
	// The clone's handshake is the original's latest.
	if ended, herr, alert := creds.Latest(); !ended || !errors.Is(herr, io.EOF) || alert != nil {
		t.Errorf("after the handshake: %v %v %v; want true, EOF, nil", ended, herr, alert)
	}
}
