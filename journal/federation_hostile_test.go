package journal_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// hostileEndpoint is a federated domain's bundle endpoint turned hostile:
// a TLS server presenting cert (a journal certificate of that domain, key
// and all, which a hostile domain holds of its own journals) and answering
// the claim feed with feed(n), n counting the feed requests from 1.
type hostileEndpoint struct {
	url        string
	feeds      atomic.Int64
	handshakes atomic.Int64
}

func startHostileEndpoint(t *testing.T, cert *tls.Certificate, feed func(n int64, r *http.Request) *journal.ClaimFeed) *hostileEndpoint {
	t.Helper()
	e := &hostileEndpoint{}
	mux := http.NewServeMux()
	mux.HandleFunc(journal.ClaimsPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(feed(e.feeds.Add(1), r))
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			e.handshakes.Add(1)
			return nil, nil
		}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	e.url = srv.URL + "/"
	return e
}

// federateWith makes b federate domain name at endpoint url with root's
// bundle and policy.
func federateWith(t *testing.T, b *journaltest.Harness, name, url string, root []byte, policy string) {
	t.Helper()
	if _, err := b.AdminClient(t).FederateDomain(callCtxFed(t), &pactv1.FederateDomainRequest{
		Name: name, Endpoints: []string{url}, X509Authorities: [][]byte{root}, Policy: policy,
	}); err != nil {
		t.Fatalf("%s federates %s: %v", b.J.Domain(), name, err)
	}
}

// A federated domain claims every node of ours (it registered our MACs,
// or guessed them: a MAC has little entropy). With warn our nodes enroll
// all the same (each counted); with refuse they wait, which is what
// refuse grants a federated domain; removing the federation ends it at
// once: its claims are dropped, and its feed, served with a certificate
// that only the removed bundle verified, counts for nothing.
func TestHostileDomainClaimingEveryNodeOfOurs(t *testing.T) {
	a := startDomain(t, journaltest.Domain)
	b := startDomain(t, "b.example")
	var ours []*pactv1.Node
	for i := range 4 {
		ours = append(ours, b.Register(t, fmt.Sprintf("n%d", i), fmt.Sprintf("BMC-%d", i), fmt.Sprintf("02:00:00:00:43:%02x", i)))
	}
	hostile := startHostileEndpoint(t, a.J.ServerCertificate(), func(_ int64, _ *http.Request) *journal.ClaimFeed {
		feed := &journal.ClaimFeed{Domain: journaltest.Domain, Revision: 1, Full: true}
		for _, n := range ours {
			feed.Claims = append(feed.Claims, journal.Claim{
				NodeID: "stolen-" + n.GetNodeId(), Active: true, Since: time.Now().UnixNano(),
				HW: []string{journal.ClaimDigest("mac", n.GetHardware().GetMacs()[0]), journal.ClaimDigest("bmc", n.GetHardware().GetBmcSerial())},
			})
		}
		return feed
	})
	federateWith(t, b, journaltest.Domain, hostile.url, rootPEM(t, a), "warn")
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return b.J.HeldClaimCount(journaltest.Domain) == len(ours) },
		"B never held the hostile domain's %d claims (holds %d)", len(ours), b.J.HeldClaimCount(journaltest.Domain))

	// warn: every node of ours enrolls; each is counted.
	for i := range 3 {
		if _, err := b.Enroll(t, journaltest.NewKey(t), fmt.Sprintf("BMC-%d", i), fmt.Sprintf("02:00:00:00:43:%02x", i)); err != nil {
			t.Fatalf("enroll n%d with warn while the hostile domain claims it: %v", i, err)
		}
	}
	if n := testutil.ToFloat64(b.J.ClaimedCounter("warn")); n != 3 {
		t.Errorf("pact_journal_enroll_claimed_elsewhere_total{policy=warn} = %v, want 3", n)
	}

	// refuse: the claimed node waits (retryable), naming the domain. (A
	// federation made again starts from nothing: B reads the feed again.)
	federateWith(t, b, journaltest.Domain, hostile.url, rootPEM(t, a), "refuse")
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return b.J.HeldClaimCount(journaltest.Domain) == len(ours) },
		"B never read the hostile domain's claims again once federated again")
	_, err := b.Enroll(t, journaltest.NewKey(t), "BMC-3", "02:00:00:00:43:03")
	if pe := apierr.FromError(err); pe.Reason != apierr.ActiveInAnotherDomain || pe.Final() || pe.OtherDomain != journaltest.Domain {
		t.Fatalf("enroll n3 with refuse: %v, want a retryable ACTIVE_IN_ANOTHER_DOMAIN naming %s", err, journaltest.Domain)
	}

	// The operator removes the federation: the claims go, and the feed,
	// which keeps answering, is not read again.
	if _, err := b.AdminClient(t).RemoveFederatedDomain(callCtxFed(t), &pactv1.RemoveFederatedDomainRequest{Name: journaltest.Domain}); err != nil {
		t.Fatal(err)
	}
	if n := b.J.HeldClaimCount(journaltest.Domain); n != 0 {
		t.Errorf("%d claims of a domain B no longer federates with count", n)
	}
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return b.J.HeldClaimIncarnations() == 0 },
		"B still holds the claims of a domain it no longer federates with")
	if _, err := b.Enroll(t, journaltest.NewKey(t), "BMC-3", "02:00:00:00:43:03"); err != nil {
		t.Fatalf("enroll n3 once the federation is removed: %v", err)
	}
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		in, err := b.AdminClient(t).InspectNode(callCtxFed(t), &pactv1.InspectNodeRequest{NodeId: "n3"})
		return err == nil && in.GetNode().GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && len(in.GetAlsoActive()) == 0
	}, "n3 is not Active in B with no other domain named")
	// B reads the feed no more (each poll, and each refresh, is a TLS
	// handshake here): once a pass has ended since the removal was seen
	// (what was under way then), three more passes over the federated
	// domains connect to it no more.
	p := b.J.FederationPasses()
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return b.J.FederationPasses() > p },
		"B's federation loop ran no pass after the removal")
	before := hostile.handshakes.Load()
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return b.J.FederationPasses() >= p+4 },
		"B's federation loop ran no three passes after the removal")
	if got := hostile.handshakes.Load(); got != before {
		t.Errorf("B connected to the removed domain's endpoint %d more times in three passes after the removal", got-before)
	}
	// Nor does it export the removed domain's series (its refreshes
	// failed: the endpoint serves no bundle).
	for _, m := range []string{"pact_journal_federation_refresh_failures_total", "pact_journal_federation_claims_held"} {
		if n, err := testutil.GatherAndCount(b.J.MetricsRegistry(), m); err != nil || n != 0 {
			t.Errorf("%s: %d series of a removed domain, %v; want none", m, n, err)
		}
	}
}

// A federated domain removed and federated again before B's next poll
// (the operator's new endpoint serves another feed, which does not claim
// what the first did) starts from nothing: the claims held from its first
// incarnation refuse no enrollment, its new feed is read in full rather
// than from the first one's cursor, and nothing of the first is held once
// a pass has run. The second incarnation's own claims count.
func TestReFederatedDomainKeepsNoClaimOfItsEarlierIncarnation(t *testing.T) {
	a := startDomain(t, journaltest.Domain)
	b := startDomain(t, "b.example")
	const mac1, mac2 = "02:00:00:00:46:01", "02:00:00:00:46:02"
	b.Register(t, "n1", "BMC-R1", mac1)
	b.Register(t, "n2", "BMC-R2", mac2)
	claimOn := func(id, mac string) []journal.Claim {
		return []journal.Claim{{NodeID: id, Active: true, Since: time.Now().UnixNano(), HW: []string{journal.ClaimDigest("mac", mac)}}}
	}
	// Each feed is at revision 7 and answers a caller at it that nothing
	// changed since.
	feedOf := func(claims []journal.Claim) func(int64, *http.Request) *journal.ClaimFeed {
		return func(_ int64, r *http.Request) *journal.ClaimFeed {
			if r.URL.Query().Has("since") {
				return &journal.ClaimFeed{Domain: journaltest.Domain, Revision: 7}
			}
			return &journal.ClaimFeed{Domain: journaltest.Domain, Revision: 7, Full: true, Claims: claims}
		}
	}
	first := startHostileEndpoint(t, a.J.ServerCertificate(), feedOf(claimOn("first-n1", mac1)))
	federateWith(t, b, journaltest.Domain, first.url, rootPEM(t, a), "refuse")
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return b.J.HeldClaimCount(journaltest.Domain) == 1 },
		"B never held the first incarnation's claim")

	var firstAskedSince atomic.Int32 // 1: B's first call named a revision; 2: it did not
	secondFeed := feedOf(claimOn("second-n2", mac2))
	second := startHostileEndpoint(t, a.J.ServerCertificate(), func(n int64, r *http.Request) *journal.ClaimFeed {
		if n == 1 {
			firstAskedSince.Store(map[bool]int32{true: 1, false: 2}[r.URL.Query().Has("since")])
		}
		return secondFeed(n, r)
	})
	// Within one poll: no pass of B's federation loop runs from the
	// removal to the enrollment.
	release := b.J.HoldFederationLoop(t)
	if _, err := b.AdminClient(t).RemoveFederatedDomain(callCtxFed(t), &pactv1.RemoveFederatedDomainRequest{Name: journaltest.Domain}); err != nil {
		t.Fatal(err)
	}
	federateWith(t, b, journaltest.Domain, second.url, rootPEM(t, a), "refuse")
	if got := b.J.HeldClaimDomains(&pactv1.HardwareIdentity{Macs: []string{mac1}}); len(got) != 0 {
		t.Errorf("claims counted on n1's hardware after the federation was made again: %v, want none", got)
	}
	if _, err := b.Enroll(t, journaltest.NewKey(t), "BMC-R1", mac1); err != nil {
		t.Fatalf("enroll n1, claimed only by the removed incarnation: %v", err)
	}
	release()

	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return b.J.HeldClaimCount(journaltest.Domain) == 1 },
		"B never held the second incarnation's claim (its first call named a revision: %v)", firstAskedSince.Load() == 1)
	if firstAskedSince.Load() != 2 {
		t.Errorf("B's first call of the new feed named the revision of the removed one's: want a full listing")
	}
	_, err := b.Enroll(t, journaltest.NewKey(t), "BMC-R2", mac2)
	if pe := apierr.FromError(err); pe.Reason != apierr.ActiveInAnotherDomain || pe.OtherDomain != journaltest.Domain {
		t.Fatalf("enroll n2, claimed by the second incarnation with refuse: %v, want ACTIVE_IN_ANOTHER_DOMAIN", err)
	}
	p := b.J.FederationPasses()
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return b.J.FederationPasses() > p },
		"B's federation loop ran no pass")
	if n := b.J.HeldClaimIncarnations(); n != 1 {
		t.Errorf("B holds claims of %d incarnations of %s, want only the current one's", n, journaltest.Domain)
	}
}

// A federated domain floods its feed: page after page of claims, far more
// than it could hold Active. B holds at most MaxClaimsPerDomain, counts
// the rest as dropped, and enrolls its own unclaimed node meanwhile.
func TestHostileClaimFloodOverTheWireIsBounded(t *testing.T) {
	a := startDomain(t, journaltest.Domain)
	b := startDomain(t, "b.example")
	const page = 5000
	floodPages := int64(journal.MaxClaimsPerDomain/page + 1) // past the bound
	hostile := startHostileEndpoint(t, a.J.ServerCertificate(), func(n int64, r *http.Request) *journal.ClaimFeed {
		feed := &journal.ClaimFeed{Domain: journaltest.Domain, Revision: 1}
		if n > floodPages {
			// The flood is over: nothing changed since.
			return feed
		}
		feed.Full, feed.More = true, n < floodPages
		for i := range page {
			id := fmt.Sprintf("flood-%03d-%05d", n, i)
			feed.Claims = append(feed.Claims, journal.Claim{NodeID: id, Active: true, HW: []string{fmt.Sprintf("%064x", n*page+int64(i))}})
		}
		feed.After = feed.Claims[len(feed.Claims)-1].NodeID
		return feed
	})
	federateWith(t, b, journaltest.Domain, hostile.url, rootPEM(t, a), "refuse")
	polltest.Until(t, 60*time.Second, 50*time.Millisecond, func() bool {
		return hostile.feeds.Load() > floodPages && testutil.ToFloat64(b.J.ClaimsDropped(journaltest.Domain)) > 0
	}, "the flood never ended with claims dropped (%d feed requests, %v dropped)", hostile.feeds.Load(), testutil.ToFloat64(b.J.ClaimsDropped(journaltest.Domain)))
	if n := b.J.HeldClaimCount(journaltest.Domain); n != journal.MaxClaimsPerDomain {
		t.Fatalf("B holds %d claims of the flooding domain, want the bound %d", n, journal.MaxClaimsPerDomain)
	}
	if d := testutil.ToFloat64(b.J.ClaimsDropped(journaltest.Domain)); d != float64(floodPages*page-journal.MaxClaimsPerDomain) {
		t.Errorf("dropped %v claims, want %d", d, floodPages*page-journal.MaxClaimsPerDomain)
	}
	b.Register(t, "own", "BMC-OWN", "02:00:00:00:44:01")
	if _, err := b.Enroll(t, journaltest.NewKey(t), "BMC-OWN", "02:00:00:00:44:01"); err != nil {
		t.Fatalf("enroll of B's own node during the flood: %v", err)
	}
}

// A claim feed served by a domain B does not federate with, at the
// endpoint B has for one it does (DNS or routing turned hostile), counts
// for nothing: its certificate does not verify against the bundle B holds
// for the domain, so B never reads it.
func TestClaimFeedOfANonFederatedDomainIsNeverRead(t *testing.T) {
	a := startDomain(t, journaltest.Domain)
	b := startDomain(t, "b.example")
	c := startDomain(t, "c.example")
	b.Register(t, "n1", "BMC-N1", "02:00:00:00:45:01")
	impostor := startHostileEndpoint(t, c.J.ServerCertificate(), func(_ int64, _ *http.Request) *journal.ClaimFeed {
		return &journal.ClaimFeed{Domain: journaltest.Domain, Revision: 1, Full: true, Claims: []journal.Claim{
			{NodeID: "stolen", Active: true, HW: []string{journal.ClaimDigest("mac", "02:00:00:00:45:01")}},
		}}
	})
	federateWith(t, b, journaltest.Domain, impostor.url, rootPEM(t, a), "refuse")
	// A bundle refresh and then a claim poll each open a connection; a
	// third handshake means a poll was tried.
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return impostor.handshakes.Load() >= 3 },
		"B never tried the endpoint (%d handshakes)", impostor.handshakes.Load())
	if n := impostor.feeds.Load(); n != 0 {
		t.Fatalf("B read the impostor's feed %d times: c.example's certificate must not pass for %s's", n, journaltest.Domain)
	}
	if n := b.J.HeldClaimCount(journaltest.Domain); n != 0 {
		t.Fatalf("B holds %d claims from an endpoint presenting c.example's certificate", n)
	}
	if _, err := b.Enroll(t, journaltest.NewKey(t), "BMC-N1", "02:00:00:00:45:01"); err != nil {
		t.Fatalf("enroll n1 (claimed only by the impostor): %v", err)
	}
	if strings.Contains(fmt.Sprint(b.J.HeldClaimDomains(&pactv1.HardwareIdentity{Macs: []string{"02:00:00:00:45:01"}})), "stolen") {
		t.Fatal("B holds the impostor's claim")
	}
}
