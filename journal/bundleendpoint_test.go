package journal_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/federation"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// TestBundleEndpointFederationClient: go-spiffe's federation client (the
// reference SPIRE uses) fetches the journal's bundle over the https_spiffe
// profile, authenticating the journal's X.509-SVID against the domain root,
// and reads the domain's root, the refresh hint and a sequence number.
func TestBundleEndpointFederationClient(t *testing.T) {
	cfg := journaltest.Config(t.TempDir())
	cfg.BundleEndpointListen = "127.0.0.1:0"
	cfg.BundleRefreshHint = 90 * time.Second
	h := journaltest.Start(t, cfg)

	rootPEM := filepath.Join(cfg.DataDir, ca.RootCertFile)
	_, roots, err := pki.LoadCertPool(rootPEM)
	if err != nil {
		t.Fatal(err)
	}
	td := spiffeid.RequireTrustDomainFromString(journaltest.Domain)
	trust := x509bundle.FromX509Authorities(td, roots)
	endpointID := spiffeid.RequireFromPath(td, "/pact-journal/"+cfg.NodeID)
	url := "https://" + h.J.BundleEndpointAddr() + "/"

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := federation.FetchBundle(ctx, td, url, federation.WithSPIFFEAuth(trust, endpointID))
	if err != nil {
		t.Fatalf("FetchBundle: %v", err)
	}
	if got := b.X509Authorities(); len(got) != 1 || !got[0].Equal(roots[0]) {
		t.Fatalf("x509 authorities: got %d certificates, want the domain root", len(got))
	}
	if hint, ok := b.RefreshHint(); !ok || hint != 90*time.Second {
		t.Fatalf("refresh hint %v (set %v), want 90s", hint, ok)
	}
	if seq, ok := b.SequenceNumber(); !ok || seq == 0 {
		t.Fatalf("sequence %d (set %v), want a positive spiffe_sequence", seq, ok)
	}
	if len(b.JWTAuthorities()) != 0 {
		t.Fatalf("JWT authorities: %d, want none (pact issues no JWT-SVIDs)", len(b.JWTAuthorities()))
	}

	// The profile authenticates the endpoint: another SPIFFE ID, or a
	// client trusting another root, is refused by the client.
	if _, err := federation.FetchBundle(ctx, td, url, federation.WithSPIFFEAuth(trust, spiffeid.RequireFromPath(td, "/pact-journal/j9"))); err == nil {
		t.Fatal("FetchBundle accepted the journal as spiffe://pact.local/pact-journal/j9")
	}
	otherDir := t.TempDir()
	if err := journaltest.NewRoot(otherDir); err != nil {
		t.Fatal(err)
	}
	_, other, err := pki.LoadCertPool(filepath.Join(otherDir, ca.RootCertFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := federation.FetchBundle(ctx, td, url, federation.WithSPIFFEAuth(x509bundle.FromX509Authorities(td, other), endpointID)); err == nil {
		t.Fatal("FetchBundle trusting another root accepted the journal")
	}
}
