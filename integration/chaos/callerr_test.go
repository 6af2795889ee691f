package chaos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/tlsalert"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// alertFrom runs a TLS 1.3 handshake against a server configured by
// server and returns what this side saw: the handshake's error, or the
// first read's (a client certificate is refused after the client's side
// of the handshake). It carries the alert the server sent, typed.
func alertFrom(t *testing.T, server *tls.Config) error {
	t.Helper()
	root := chaintest.NewRoot("pact.local")
	inter := root.JournalCA("j1", chaintest.Names{}).Intermediate("j1", chaintest.Names{})
	leaf := inter.Server("j1", chaintest.Names{}).TLS()
	server.MinVersion = tls.VersionTLS13
	if server.GetCertificate == nil {
		server.Certificates = []tls.Certificate{leaf}
	}
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		defer b.Close()
		_ = tls.Server(b, server).Handshake()
	}()
	c := tls.Client(a, &tls.Config{
		MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &leaf, nil },
	})
	err := c.Handshake()
	if err == nil {
		_, err = c.Read(make([]byte, 1))
	}
	if _, ok := tlsalert.Received(err); !ok {
		t.Fatalf("%v: no alert received", err)
	}
	return err
}

func badCertificate(t *testing.T) error {
	return alertFrom(t, &tls.Config{
		ClientAuth:            tls.RequireAnyClientCert,
		VerifyPeerCertificate: func([][]byte, [][]*x509.Certificate) error { return errors.New("not of this domain") },
	})
}

func internalError(t *testing.T) error {
	return alertFrom(t, &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, errors.New("no key") },
	})
}

// A real channel from dial: a call refused by a certificate alert, a call
// to a closed port and a call a journal answered UNAVAILABLE itself are
// told apart by how far they got, whatever their words.
func TestDialedCallsSayHowFarTheyGot(t *testing.T) {
	root := chaintest.NewRoot("pact.local")
	local := chaintest.Names{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	inter := root.JournalCA("j1", local).Intermediate("j1", local)
	server := inter.Server("j1", local).TLS()
	client := inter.Server("j2", chaintest.Names{}).TLS()
	roots := chaintest.Pool(root.Cert)
	serve := func(verify func([][]byte, [][]*x509.Certificate) error) string {
		srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
			MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{server},
			ClientAuth: tls.RequireAnyClientCert, VerifyPeerCertificate: verify,
		})), grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
			return status.Error(codes.Unavailable, "going away")
		}))
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		return lis.Addr().String()
	}
	refusing := serve(func([][]byte, [][]*x509.Certificate) error { return errors.New("not of this domain") })
	serving := serve(nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	_ = lis.Close()

	for _, tt := range []struct {
		name, addr string
		want       Output
	}{
		{"refused certificate", refusing, Output{Result: ResultFailed, Reason: ReasonCertRefused}},
		{"closed port", closed, Output{Result: ResultFailed, Reason: "UNREACHABLE"}},
		{"answered UNAVAILABLE", serving, Output{Result: ResultUnknown, Reason: "UNAVAILABLE"}},
	} {
		conn, err := dial(tt.addr, roots, &client, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = pactv1.NewAdminServiceClient(conn).JournalStatus(ctx, &pactv1.JournalStatusRequest{})
		cancel()
		_ = conn.Close()
		if got := Classify(err); got != tt.want {
			t.Errorf("%s: %v classified %+v, want %+v", tt.name, err, got, tt.want)
		}
	}
}
