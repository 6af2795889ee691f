package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// rolledRoot is a new domain root, made from the template pact ca init
// uses, and an intermediate under it.
type rolledRoot struct {
	root, inter *x509.Certificate
	interKey    *ecdsa.PrivateKey
}

func newRolledRoot(t *testing.T, domain string) *rolledRoot {
	t.Helper()
	now := time.Now()
	root, rootKey := signCert(t, caprofile.Root(domain, mustSerial(t), now.Add(-time.Hour), now.Add(24*time.Hour)), nil, nil, nil)
	inter, interKey := signCert(t, &x509.Certificate{
		SerialNumber:          mustSerial(t),
		Subject:               pkix.Name{CommonName: "intermediate under the new root"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// An intermediate signs no CA (caprofile.CheckChainShape).
		MaxPathLenZero: true,
	}, root, rootKey, nil)
	return &rolledRoot{root: root, inter: inter, interKey: interKey}
}

// leaf is a certificate the intermediate signs for key (a new one if nil).
func (r *rolledRoot) leaf(t *testing.T, tmpl *x509.Certificate, key *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	tmpl.SerialNumber = mustSerial(t)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	return signCert(t, tmpl, r.inter, r.interKey, key)
}

// signCert signs tmpl with parent's key (self-signed when parent is nil)
// for key (a new P-256 key when nil).
func signCert(t *testing.T, tmpl, parent *x509.Certificate, parentKey, key *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	if key == nil {
		var err error
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			t.Fatal(err)
		}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func mustSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := pki.NewSerial()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// serveUnder runs a gRPC server on loopback whose TLS chain is [server,
// intermediate] under r's root, as a journal re-keyed under a journal CA of
// the new root presents it. It serves no service: a call that gets past
// the handshake is answered UNIMPLEMENTED.
func serveUnder(t *testing.T, r *rolledRoot) string {
	t.Helper()
	leaf, key := r.leaf(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "journal under the new root"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		URIs:        []*url.URL{pki.Identity{Kind: pki.KindJournal, Name: "j9", Domain: r.root.URIs[0].Host}.SPIFFEID()},
	}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Raw, r.inter.Raw}, PrivateKey: key, Leaf: leaf}},
	})))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

func trustBundleEvent(certs ...*x509.Certificate) *pactv1.SubscribeResponse {
	der := make([][]byte, len(certs))
	for i, c := range certs {
		der[i] = c.Raw
	}
	return &pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_TrustBundle{TrustBundle: &pactv1.TrustBundle{Der: der}}}
}

// A running agent learns a new domain root from the trust bundle its
// stream delivers (a root rollover's step 2), and only from the latest
// one: a new channel to a journal under the new root is refused as of
// unknown authority before the bundle brings it, accepted after, refused
// again after a bundle without it, while a new channel under the --ca
// root is accepted throughout. A certificate a journal of the new root
// issues verifies once the bundle brought the root (the renewal of step
// 3). The journal and the agent are real; the new root's journal is a TLS
// server with that chain.
func TestAgentTrustsTheRootsOfTheLatestBundle(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	a := runAgent(t, agentConfig(h, clock.Real{}, "SN1", mac1))
	eventually(t, "n1 streams and has the journal's trust bundle", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return h.J.OpenStreams("n1") == 1 && len(a.streamBundle) > 0
	})
	_, caRoots, err := pki.LoadCertPool(filepath.Join(h.Dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	oldRoot := caRoots[0]
	if got := a.rot.Roots(); len(got) != 1 || !got[0].Equal(oldRoot) {
		t.Fatalf("after the journal's own bundle the agent trusts %d roots, want the --ca root alone", len(got))
	}
	domain := oldRoot.URIs[0].Host
	rolled := newRolledRoot(t, domain)
	addr := serveUnder(t, rolled)
	act := a.rot.Active()

	// enrollHandshake opens a new channel to addr as an enrollment does.
	enrollHandshake := func(addr string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := a.enrollConn(ctx, addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = a.callEnroll(ctx, conn, &pactv1.EnrollRequest{})
		return err
	}
	unknownAuthority := func(when string) {
		t.Helper()
		var ua x509.UnknownAuthorityError
		if err := enrollHandshake(addr); !errors.As(err, &ua) {
			t.Fatalf("%s: a new channel to the journal under the new root: %v, want an x509.UnknownAuthorityError", when, err)
		}
	}
	// A certificate the new root's journal issues this agent, as RenewCert
	// returns it.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	issued, _ := rolled.leaf(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "n1"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{{Scheme: "spiffe", Host: domain, Path: "/" + pki.KindAgent + "/n1"}},
	}, key)
	renewal := func() error {
		_, _, err := journalIdentity(key, a.trustPool(), [][]byte{issued.Raw, rolled.inter.Raw}, nil, time.Now(), nil)
		return err
	}

	unknownAuthority("before the bundle")
	if err := renewal(); err == nil {
		t.Fatal("a certificate under the new root verified before the bundle brought it")
	}

	if err := a.handleEvent(act, trustBundleEvent(oldRoot, rolled.root, rolled.inter)); err != nil {
		t.Fatal(err)
	}
	if err := enrollHandshake(addr); status.Code(err) != codes.Unimplemented {
		t.Fatalf("after a bundle with the new root, a new channel to its journal: %v, want past the handshake (UNIMPLEMENTED)", err)
	}
	if err := renewal(); err != nil {
		t.Fatalf("after a bundle with the new root, a certificate under it: %v", err)
	}

	if err := a.handleEvent(act, trustBundleEvent(oldRoot)); err != nil {
		t.Fatal(err)
	}
	unknownAuthority("after a bundle without the new root")
	if err := renewal(); err == nil {
		t.Fatal("a certificate under the withdrawn root still verifies")
	}
	// The --ca root still works: a new channel to the real journal.
	if err := a.rot.Swap(t.Context(), act.Identity()); err != nil {
		t.Fatalf("a new channel to the journal under the --ca root: %v", err)
	}
	eventually(t, "n1 streams on the new channel", func() bool { return h.J.OpenStreams("n1") == 1 && a.rot.Active().StreamAlive() })
}
