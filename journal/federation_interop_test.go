package journal_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/federation"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/pact-hpc/pact/internal/polltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// spiffeCA is a SPIFFE trust domain's root as a SPIRE server keeps it: a
// self-signed CA naming the trust domain, which signs X.509-SVIDs.
type spiffeCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newSPIFFECA(t *testing.T, td spiffeid.TrustDomain, serial int64) spiffeCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{Organization: []string{"SPIFFE"}, CommonName: td.String() + " root"},
		URIs:                  []*url.URL{td.ID().URL()},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return spiffeCA{cert: cert, key: key}
}

// svid is an X.509-SVID of id signed by the CA, as a TLS server
// certificate.
func (ca spiffeCA) svid(t *testing.T, id spiffeid.ID) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		URIs:         []*url.URL{id.URL()},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// bundleSourceFunc is a spiffebundle.Source of a function.
type bundleSourceFunc func(spiffeid.TrustDomain) (*spiffebundle.Bundle, error)

func (f bundleSourceFunc) GetBundleForTrustDomain(td spiffeid.TrustDomain) (*spiffebundle.Bundle, error) {
	return f(td)
}

func sha256Hex(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// The other way round from TestBundleEndpointFederationClient: go-spiffe's
// federation handler (the reference bundle endpoint server, what a SPIRE
// server serves) is the federated domain's endpoint, and pact's refresh
// fetches from it over the https_spiffe profile, authenticating the
// endpoint's SVID by its SPIFFE ID against the bootstrap bundle: the
// bundle, its sequence and its refresh hint reach Raft, and a rollover the
// handler serves next (a second root, a higher sequence) replaces it.
func TestRefreshFetchesFromGoSPIFFEFederationHandler(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("spire.example")
	root := newSPIFFECA(t, td, 1)
	endpointID := spiffeid.RequireFromPath(td, "/spire/server")

	var mu sync.Mutex
	served := spiffebundle.New(td)
	served.SetX509Authorities([]*x509.Certificate{root.cert})
	served.SetSequenceNumber(42)
	served.SetRefreshHint(time.Second)
	source := bundleSourceFunc(func(got spiffeid.TrustDomain) (*spiffebundle.Bundle, error) {
		mu.Lock()
		defer mu.Unlock()
		return served.GetBundleForTrustDomain(got)
	})
	h, err := federation.NewHandler(td, source)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{root.svid(t, endpointID)}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	// go-spiffe's own client agrees the endpoint serves the bundle.
	if got, err := federation.FetchBundle(callCtxFed(t), td, srv.URL, federation.WithSPIFFEAuth(served, endpointID)); err != nil {
		t.Fatalf("go-spiffe's FetchBundle from its own handler: %v", err)
	} else if seq, _ := got.SequenceNumber(); seq != 42 {
		t.Fatalf("go-spiffe's FetchBundle from its own handler: sequence %d, want 42", seq)
	}

	b := startDomain(t, "b.example")
	admin := b.AdminClient(t)
	ctx := callCtxFed(t)
	rootPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.cert.Raw})
	if _, err := admin.FederateDomain(ctx, &pactv1.FederateDomainRequest{
		Name: td.Name(), Endpoints: []string{srv.URL + "/"}, EndpointSpiffeId: endpointID.String(),
		X509Authorities: [][]byte{rootPEM},
	}); err != nil {
		t.Fatalf("FederateDomain with a go-spiffe bundle endpoint: %v", err)
	}
	view := func() *pactv1.FederatedDomainView {
		l, err := admin.ListFederatedDomains(ctx, &pactv1.ListFederatedDomainsRequest{})
		if err != nil || len(l.GetDomains()) != 1 {
			return nil
		}
		return l.GetDomains()[0]
	}
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		v := view()
		return v != nil && v.GetSequence() == 42 && v.GetRefreshHintSeconds() == 1
	}, "B never recorded the bundle go-spiffe's handler serves (sequence 42, hint 1s): %v", view())
	if v := view(); !slices.Equal(v.GetAuthoritiesSha256(), []string{sha256Hex(root.cert.Raw)}) {
		t.Fatalf("authorities %v, want the handler's root", v.GetAuthoritiesSha256())
	}

	// The handler serves a rollover: a second root and a higher sequence.
	next := newSPIFFECA(t, td, 2)
	mu.Lock()
	served = spiffebundle.New(td)
	served.SetX509Authorities([]*x509.Certificate{root.cert, next.cert})
	served.SetSequenceNumber(43)
	served.SetRefreshHint(time.Second)
	mu.Unlock()
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		v := view()
		return v != nil && v.GetSequence() == 43 &&
			slices.Equal(v.GetAuthoritiesSha256(), []string{sha256Hex(root.cert.Raw), sha256Hex(next.cert.Raw)})
	}, "B never took the rollover go-spiffe's handler serves: %v", view())
	if n := testutil.ToFloat64(b.J.FederationFailures(td.Name())); n != 0 {
		t.Errorf("pact_journal_federation_refresh_failures_total{domain=%q} = %v, want 0", td.Name(), n)
	}

	// The https_spiffe profile authenticates the endpoint: the same
	// handler behind an SVID of another SPIFFE ID is refused, and the
	// bundle held stays.
	impostor := httptest.NewUnstartedServer(h)
	impostor.TLS = &tls.Config{Certificates: []tls.Certificate{root.svid(t, spiffeid.RequireFromPath(td, "/workload/web"))}, MinVersion: tls.VersionTLS12}
	impostor.StartTLS()
	t.Cleanup(impostor.Close)
	if _, err := admin.FederateDomain(ctx, &pactv1.FederateDomainRequest{
		Name: td.Name(), Endpoints: []string{impostor.URL + "/"}, EndpointSpiffeId: endpointID.String(),
		X509Authorities: [][]byte{rootPEM},
	}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		return testutil.ToFloat64(b.J.FederationFailures(td.Name())) > 0
	}, "B never tried the endpoint presenting another SPIFFE ID")
	if v := view(); v.GetSequence() != 0 || len(v.GetAuthoritiesSha256()) != 1 {
		t.Fatalf("after fetching from an endpoint with the wrong SPIFFE ID: %v, want the bootstrap bundle only", v)
	}
}
