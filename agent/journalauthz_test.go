package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// countingJournal counts the Enroll calls that got past the handshake.
type countingJournal struct {
	pactv1.UnimplementedEnrollmentServiceServer
	enrolls atomic.Int32
}

func (c *countingJournal) Enroll(context.Context, *pactv1.EnrollRequest) (*pactv1.EnrollResponse, error) {
	c.enrolls.Add(1)
	return nil, context.Canceled // any answer: the test asks whether one came
}

// serveAs serves EnrollmentService on loopback with leaf and returns its
// address.
func serveAs(t *testing.T, leaf *tls.Certificate, srv pactv1.EnrollmentServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*leaf}})))
	pactv1.RegisterEnrollmentServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// serverCert is a leaf under a journal intermediate of the domain, with
// serverAuth and 127.0.0.1, carrying who's SPIFFE ID. With a node's ID it
// is what a node's certificate would be if it named the journal's address
// (its intermediate key read out of a journal's memory, or a
// leaf-issuance bug).
func serverCert(t *testing.T, in journaltest.Intermediate, who pki.Identity) *tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := pki.NewSerial()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: who.CommonName()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		URIs:        []*url.URL{who.SPIFFEID()},
	}, in.Cert, key.Public(), in.Key)
	if err != nil {
		t.Fatal(err)
	}
	chain := [][]byte{der, in.Cert.Raw}
	if in.JournalCA != nil {
		chain = append(chain, in.JournalCA.Raw)
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: key}
}

// A server whose certificate chains to the domain root and names the
// journal's address, but carries a node's SPIFFE ID, is refused as a
// journal: the enrollment never reaches it, the failure is
// server_tls_untrusted, and the status says it is no journal. The same
// server with a journal's certificate from the same intermediate gets the
// call: the SPIFFE ID alone made the difference.
func TestAgentRefusesANodeServingAsJournal(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	in := journaltest.NewIntermediateUnder(t, h.Cfg)

	t.Run("node certificate", func(t *testing.T) {
		fake := &countingJournal{}
		cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
		cfg.JournalAddrs = []string{serveAs(t, serverCert(t, in, pki.Identity{Kind: pki.KindAgent, Name: "n2", Domain: journaltest.Domain}), fake)}
		r := runAgent(t, cfg)
		st := waitFailure(t, r.Agent, ReasonServerTLSUntrusted)
		if want := "the server is not a journal: its certificate verifies against the domain roots but carries spiffe://pact.local/pact-agent/n2, not spiffe://pact.local/pact-journal/ID"; !strings.Contains(st.LastFailure, want) {
			t.Errorf("last failure %q does not say %q", st.LastFailure, want)
		}
		if n := fake.enrolls.Load(); n != 0 {
			t.Errorf("%d enrollments reached a node serving as a journal", n)
		}
	})

	t.Run("journal certificate", func(t *testing.T) {
		fake := &countingJournal{}
		cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
		cfg.JournalAddrs = []string{serveAs(t, serverCert(t, in, pki.Identity{Kind: pki.KindJournal, Name: "j9", Domain: journaltest.Domain}), fake)}
		runAgent(t, cfg)
		eventually(t, "an enrollment reaches the journal", func() bool { return fake.enrolls.Load() > 0 })
	})
}
