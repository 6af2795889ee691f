package journal_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// startDomain starts a one-journal quorum of its own domain with a bundle
// endpoint, under a root of its own.
func startDomain(t *testing.T, domain string) *journaltest.Harness {
	t.Helper()
	dir := t.TempDir()
	if domain != journaltest.Domain {
		if _, err := ca.InitDev(dir, domain, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	cfg := journaltest.Config(dir)
	cfg.BundleEndpointListen = "127.0.0.1:0"
	cfg.BundleRefreshHint = time.Second
	// The refresh looks at the federated bundles at every digest interval.
	cfg.DigestInterval = 50 * time.Millisecond
	h := journaltest.Start(t, cfg)
	h.J.SetFederationRefreshFloor(time.Second)
	if h.J.Domain() != domain {
		t.Fatalf("domain %s, want %s", h.J.Domain(), domain)
	}
	return h
}

func rootPEM(t *testing.T, h *journaltest.Harness) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.Dir, ca.RootCertFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func callCtxFed(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Domain B federates with domain A: the record is in B's Raft, the leader
// fetches A's bundle from A's endpoint at once, keeps it when A is gone,
// and exports its age; removing the federation ends it.
func TestFederateDomainRefreshesAndKeepsTheLastGoodBundle(t *testing.T) {
	a := startDomain(t, journaltest.Domain)
	b := startDomain(t, "b.example")
	admin := b.AdminClient(t)
	ctx := callCtxFed(t)

	resp, err := admin.FederateDomain(ctx, &pactv1.FederateDomainRequest{
		Name: journaltest.Domain, Endpoints: []string{"https://" + a.J.BundleEndpointAddr() + "/"},
		X509Authorities: [][]byte{rootPEM(t, a)},
	})
	if err != nil {
		t.Fatalf("FederateDomain: %v", err)
	}
	if d := resp.GetDomain(); d.GetPolicy() != "warn" || len(d.GetAuthoritiesSha256()) != 1 || d.GetAddedBy() == "" {
		t.Fatalf("federated %v: want policy warn (the default), one root, who added it", d)
	}
	var fetched *pactv1.FederatedDomainView
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		l, err := admin.ListFederatedDomains(ctx, &pactv1.ListFederatedDomainsRequest{})
		if err != nil || len(l.GetDomains()) != 1 {
			return false
		}
		fetched = l.GetDomains()[0]
		return fetched.GetSequence() > 0 && fetched.GetRefreshHintSeconds() == 1
	}, "B never recorded the bundle it fetched from A's endpoint")
	audit, err := admin.ListAudit(ctx, &pactv1.ListAuditRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range audit.GetEntries() {
		actions = append(actions, e.GetAction())
	}
	if !strings.Contains(strings.Join(actions, " "), "domain-federate") {
		t.Errorf("audit %v: no domain-federate entry", actions)
	}

	// A goes away: B keeps the last good bundle, its fetches fail, and the
	// age grows past the refresh hint.
	if err := a.J.Close(); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		return testutil.ToFloat64(b.J.FederationFailures(journaltest.Domain)) > 0
	}, "B never tried A's endpoint after A stopped")
	l, err := admin.ListFederatedDomains(ctx, &pactv1.ListFederatedDomainsRequest{})
	if err != nil || len(l.GetDomains()) != 1 || l.GetDomains()[0].GetSequence() != fetched.GetSequence() {
		t.Fatalf("after A stopped: %v, %v: want the last good bundle kept", l, err)
	}
	if n, err := testutil.GatherAndCount(b.J.MetricsRegistry(), "pact_journal_federated_bundle_age_seconds"); err != nil || n != 1 {
		t.Fatalf("pact_journal_federated_bundle_age_seconds: %d series, %v; want 1", n, err)
	}

	if _, err := admin.RemoveFederatedDomain(ctx, &pactv1.RemoveFederatedDomainRequest{Name: journaltest.Domain}); err != nil {
		t.Fatalf("RemoveFederatedDomain: %v", err)
	}
	if l, _ := admin.ListFederatedDomains(ctx, &pactv1.ListFederatedDomainsRequest{}); len(l.GetDomains()) != 0 {
		t.Fatalf("after remove: %v", l.GetDomains())
	}
	if _, err := admin.RemoveFederatedDomain(ctx, &pactv1.RemoveFederatedDomainRequest{Name: journaltest.Domain}); status.Code(err) != codes.NotFound {
		t.Fatalf("removing it again: %v, want NotFound", err)
	}
}

// What an operator gets wrong is refused before any Raft write.
func TestFederateDomainRefusals(t *testing.T) {
	a := startDomain(t, journaltest.Domain)
	b := startDomain(t, "b.example")
	admin := b.AdminClient(t)
	ctx := callCtxFed(t)
	ep := []string{"https://" + a.J.BundleEndpointAddr() + "/"}
	for _, tc := range []struct {
		name string
		req  *pactv1.FederateDomainRequest
	}{
		{"its own domain", &pactv1.FederateDomainRequest{Name: "b.example", Endpoints: ep, X509Authorities: [][]byte{rootPEM(t, b)}}},
		{"a bundle of another domain", &pactv1.FederateDomainRequest{Name: "c.example", Endpoints: ep, X509Authorities: [][]byte{rootPEM(t, a)}}},
		{"no bundle", &pactv1.FederateDomainRequest{Name: journaltest.Domain, Endpoints: ep}},
		{"no endpoint", &pactv1.FederateDomainRequest{Name: journaltest.Domain, X509Authorities: [][]byte{rootPEM(t, a)}}},
		{"a plain-HTTP endpoint", &pactv1.FederateDomainRequest{Name: journaltest.Domain, Endpoints: []string{"http://" + a.J.BundleEndpointAddr() + "/"}, X509Authorities: [][]byte{rootPEM(t, a)}}},
		{"an unknown policy", &pactv1.FederateDomainRequest{Name: journaltest.Domain, Endpoints: ep, X509Authorities: [][]byte{rootPEM(t, a)}, Policy: "ignore"}},
		{"an endpoint id of another domain", &pactv1.FederateDomainRequest{Name: journaltest.Domain, Endpoints: ep, X509Authorities: [][]byte{rootPEM(t, a)}, EndpointSpiffeId: "spiffe://b.example/pact-journal/j1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := admin.FederateDomain(ctx, tc.req); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("FederateDomain: %v, want InvalidArgument", err)
			}
		})
	}
	if l, _ := admin.ListFederatedDomains(ctx, &pactv1.ListFederatedDomainsRequest{}); len(l.GetDomains()) != 0 {
		t.Fatalf("refused federations recorded: %v", l.GetDomains())
	}
}

// Federation grants nothing: a journal certificate of a domain B federates
// with (its server certificate, key and all) is refused on B's operator
// path and on its agent path.
func TestFederatedJournalCertificateAuthenticatesNothing(t *testing.T) {
	a := startDomain(t, journaltest.Domain)
	b := startDomain(t, "b.example")
	ctx := callCtxFed(t)
	if _, err := b.AdminClient(t).FederateDomain(ctx, &pactv1.FederateDomainRequest{
		Name: journaltest.Domain, Endpoints: []string{"https://" + a.J.BundleEndpointAddr() + "/"}, X509Authorities: [][]byte{rootPEM(t, a)},
	}); err != nil {
		t.Fatal(err)
	}
	hostile := a.J.ServerCertificate()
	conn := b.Dial(t, hostile)
	if _, err := pactv1.NewAdminServiceClient(conn).ListNodes(ctx, &pactv1.ListNodesRequest{}); err == nil {
		t.Fatal("B answered ListNodes to A's journal certificate")
	} else if c := status.Code(err); c != codes.Unauthenticated && c != codes.PermissionDenied && c != codes.Unavailable {
		t.Fatalf("ListNodes as A's journal: %v, want a refusal", err)
	}
	if _, err := pactv1.NewAdminServiceClient(conn).ListFederatedDomains(ctx, &pactv1.ListFederatedDomainsRequest{}); err == nil {
		t.Fatal("B answered ListFederatedDomains to A's journal certificate")
	}
	stream, err := pactv1.NewEnrollmentServiceClient(conn).Subscribe(ctx, &pactv1.SubscribeRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if err == nil {
		t.Fatal("B opened an agent stream to A's journal certificate")
	}
	// Nor does it renew or release as an agent: with a well-formed CSR,
	// refused for who it is. (A's journal certificate names
	// spiffe://pact.local/pact-journal/..., a node of no domain here.)
	if _, err := pactv1.NewEnrollmentServiceClient(conn).RenewCert(ctx, &pactv1.RenewCertRequest{CsrDer: journaltest.NewKey(t).CSR}); err == nil {
		t.Fatal("B renewed a certificate for A's journal certificate")
	} else if c := status.Code(err); c != codes.Unauthenticated && c != codes.PermissionDenied && c != codes.Unavailable {
		t.Fatalf("RenewCert as A's journal: %v, want a refusal of the caller", err)
	}
	if _, err := pactv1.NewEnrollmentServiceClient(conn).Release(ctx, &pactv1.ReleaseRequest{}); err == nil {
		t.Fatal("B took a release from A's journal certificate")
	}
}
