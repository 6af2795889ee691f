package journal_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// federate makes from federate with to (its bundle endpoint and root).
func federate(t *testing.T, from, to *journaltest.Harness, policy string) {
	t.Helper()
	if _, err := from.AdminClient(t).FederateDomain(callCtxFed(t), &pactv1.FederateDomainRequest{
		Name: to.J.Domain(), Endpoints: []string{"https://" + to.J.BundleEndpointAddr() + "/"},
		X509Authorities: [][]byte{rootPEM(t, to)}, Policy: policy,
	}); err != nil {
		t.Fatalf("%s federates with %s: %v", from.J.Domain(), to.J.Domain(), err)
	}
}

// A node Active in domain A is claimed to domain B, which federates with
// A: B holds the claim (found by any identifier of the hardware as B
// registered it) and drops it once A fences the node. Claims are never
// written to B's Raft.
func TestClaimsTravelToFederatedDomains(t *testing.T) {
	a := startDomain(t, journaltest.Domain)
	b := startDomain(t, "b.example")
	federate(t, b, a, "warn")
	federate(t, a, b, "warn")

	a.Register(t, "gpu-1", "BMC-GPU-1", "02:00:00:00:40:01", "02:00:00:00:40:02")
	if _, err := a.Enroll(t, journaltest.NewKey(t), "BMC-GPU-1", "02:00:00:00:40:01", "02:00:00:00:40:02"); err != nil {
		t.Fatalf("enroll in A: %v", err)
	}
	// B registered the same machine by one MAC only.
	asB := &pactv1.HardwareIdentity{Macs: []string{"02:00:00:00:40:02"}}
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		return slices.Equal(b.J.HeldClaimDomains(asB), []string{journaltest.Domain + "/gpu-1"})
	}, "B never held A's claim on gpu-1: %v", b.J.HeldClaimDomains(asB))
	if got := b.J.HeldClaimDomains(&pactv1.HardwareIdentity{Macs: []string{"02:00:00:00:40:99"}}); len(got) != 0 {
		t.Fatalf("other hardware is claimed: %v", got)
	}
	if got := a.J.HeldClaimDomains(asB); len(got) != 0 {
		t.Fatalf("A holds a claim on its own node: %v", got)
	}
	for _, n := range b.J.RegistryForTest() {
		t.Fatalf("B's registry holds %s: claims must never become B's Raft records", n.GetNodeId())
	}

	if _, err := a.AdminClient(t).FenceNode(context.Background(), &pactv1.FenceNodeRequest{NodeId: "gpu-1", Reason: "moved to b.example"}); err != nil {
		t.Fatalf("fence in A: %v", err)
	}
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		return len(b.J.HeldClaimDomains(asB)) == 0
	}, "B still holds A's claim on gpu-1 after A fenced it")
}

// The claim feed answers only the journals of federated domains: not a
// caller without a certificate, not a journal of a domain A does not
// federate with, not an agent of a domain it does.
func TestClaimFeedRefusesAllButFederatedJournals(t *testing.T) {
	a := startDomain(t, journaltest.Domain)
	b := startDomain(t, "b.example")
	c := startDomain(t, "c.example")
	federate(t, a, b, "warn")
	url := "https://" + a.J.BundleEndpointAddr() + journal.ClaimsPath
	get := func(cert *tls.Certificate) (int, string) {
		t.Helper()
		tcfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the test checks the server's refusal, not the server
		if cert != nil {
			tcfg.Certificates = []tls.Certificate{*cert}
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: tcfg}, Timeout: 10 * time.Second}
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get(b.J.ServerCertificate()); code != http.StatusOK {
		t.Fatalf("B's journal: %d %s, want 200", code, body)
	}
	if code, _ := get(nil); code != http.StatusForbidden {
		t.Errorf("no client certificate: %d, want 403", code)
	}
	if code, _ := get(c.J.ServerCertificate()); code != http.StatusForbidden {
		t.Errorf("a journal of c.example, not federated: %d, want 403", code)
	}
	b.Register(t, "node-b", "BMC-B", "02:00:00:00:41:01")
	key := journaltest.NewKey(t)
	resp, err := b.Enroll(t, key, "BMC-B", "02:00:00:00:41:01")
	if err != nil {
		t.Fatal(err)
	}
	agent := key.TLSCert(resp.GetCertChainDer())
	if code, _ := get(&agent); code != http.StatusForbidden {
		t.Errorf("an agent of b.example: %d, want 403", code)
	}
	// Once A removes the federation, B's journal is refused too.
	if _, err := a.AdminClient(t).RemoveFederatedDomain(callCtxFed(t), &pactv1.RemoveFederatedDomainRequest{Name: "b.example"}); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(b.J.ServerCertificate()); code != http.StatusForbidden {
		t.Errorf("B's journal after A removed the federation: %d, want 403", code)
	}
}

// A federated domain claiming more nodes than the bound (a flood, or every
// node of ours) is cut at MaxClaimsPerDomain.
func TestClaimFloodIsBounded(t *testing.T) {
	h := journal.NewClaimHolderForTest()
	feed := &journal.ClaimFeed{Domain: "flood.example", Full: true}
	for i := 0; i < journal.MaxClaimsPerDomain+100; i++ {
		feed.Claims = append(feed.Claims, journal.Claim{NodeID: fmt.Sprint("n", i), Active: true, HW: []string{fmt.Sprint("d", i)}})
	}
	if dropped := h.Apply("flood.example", feed); dropped != 100 {
		t.Fatalf("dropped %d, want 100", dropped)
	}
	if n := h.Count("flood.example"); n != journal.MaxClaimsPerDomain {
		t.Fatalf("held %d, want the bound %d", n, journal.MaxClaimsPerDomain)
	}
}

// Policies: a domain federated with refuse refuses to enroll hardware the
// other domain holds Active (retryable, naming it); once the node is
// released there it enrolls. With warn it enrolls, and inspect and list
// show where else the node is active, on both sides. With A gone, B
// decides from what it holds and waits for nobody.
func TestClaimPolicies(t *testing.T) {
	a := startDomain(t, journaltest.Domain)
	b := startDomain(t, "b.example")
	federate(t, a, b, "warn")
	federate(t, b, a, "refuse")
	const bmc, mac = "BMC-SHARED-1", "02:00:00:00:42:01"
	a.Register(t, "shared-a", bmc, mac)
	b.Register(t, "shared-b", bmc, mac)
	keyA := journaltest.NewKey(t)
	resp, err := a.Enroll(t, keyA, bmc, mac)
	if err != nil {
		t.Fatalf("enroll in A: %v", err)
	}
	hw := &pactv1.HardwareIdentity{Macs: []string{mac}, BmcSerial: bmc}
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return len(b.J.HeldClaimDomains(hw)) == 1 },
		"B never held A's claim")

	// Active in A, boots into B: refused, retryable, naming A.
	_, err = b.Enroll(t, journaltest.NewKey(t), bmc, mac)
	pe := apierr.FromError(err)
	if pe.Reason != apierr.ActiveInAnotherDomain || pe.RetryAfter <= 0 || pe.Final() || !strings.Contains(pe.Message, journaltest.Domain) || pe.OtherDomain != journaltest.Domain {
		t.Fatalf("enroll in B with refuse: %v (reason %s, retry-after %v, final %v, other domain %q), want a retryable ACTIVE_IN_ANOTHER_DOMAIN naming %s",
			err, pe.Reason, pe.RetryAfter, pe.Final(), pe.OtherDomain, journaltest.Domain)
	}
	if n := testutil.ToFloat64(b.J.ClaimedCounter("refuse")); n != 1 {
		t.Errorf("pact_journal_enroll_claimed_elsewhere_total{policy=refuse} = %v, want 1", n)
	}

	// Released in A (its agent stopped cleanly): B enrolls it.
	agentA := keyA.TLSCert(resp.GetCertChainDer())
	ctx := callCtxFed(t)
	if _, err := pactv1.NewEnrollmentServiceClient(a.Dial(t, &agentA)).Release(ctx, &pactv1.ReleaseRequest{}); err != nil {
		t.Fatalf("release in A: %v", err)
	}
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return len(b.J.HeldClaimDomains(hw)) == 0 },
		"B still holds A's claim after A's agent released the node")
	if _, err := b.Enroll(t, journaltest.NewKey(t), bmc, mac); err != nil {
		t.Fatalf("enroll in B once A released the node: %v", err)
	}

	// The same hardware enrolls in A again (A federates B with warn): A
	// enrolls and says so, and both sides show it.
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return len(a.J.HeldClaimDomains(hw)) == 1 },
		"A never held B's claim")
	if _, err := a.Enroll(t, journaltest.NewKey(t), bmc, mac); err != nil {
		t.Fatalf("enroll in A with warn: %v", err)
	}
	in, err := a.AdminClient(t).InspectNode(ctx, &pactv1.InspectNodeRequest{NodeId: "shared-a"})
	if err != nil || len(in.GetAlsoActive()) != 1 || !strings.HasPrefix(in.GetAlsoActive()[0], "b.example (node shared-b) since ") {
		t.Fatalf("inspect in A: %v, %v: want also active in b.example", in.GetAlsoActive(), err)
	}
	// The activation records the claims it decided on, and how old.
	if c := in.GetNode().GetClaimsChecked(); !strings.HasPrefix(c, "b.example: read ") || !strings.Contains(c, "active there as node shared-b since ") || !strings.Contains(c, "(policy warn)") {
		t.Errorf("inspect in A: claims checked %q, want b.example's claim on the hardware, and its age", c)
	}
	list, err := a.AdminClient(t).ListNodes(ctx, &pactv1.ListNodesRequest{})
	if err != nil || !strings.HasPrefix(list.GetAlsoActive()["shared-a"], "b.example") {
		t.Fatalf("list in A: %v, %v", list.GetAlsoActive(), err)
	}
	if n := testutil.ToFloat64(a.J.ClaimedCounter("warn")); n != 1 {
		t.Errorf("A's pact_journal_enroll_claimed_elsewhere_total{policy=warn} = %v, want 1", n)
	}
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		in, err := b.AdminClient(t).InspectNode(ctx, &pactv1.InspectNodeRequest{NodeId: "shared-b"})
		return err == nil && len(in.GetAlsoActive()) == 1 && strings.HasPrefix(in.GetAlsoActive()[0], journaltest.Domain+" (node shared-a)")
	}, "B never showed shared-b also active in %s: active twice is raised on one side only", journaltest.Domain)

	// A goes away: B keeps deciding from what it holds, at once.
	if err := a.J.Close(); err != nil {
		t.Fatal(err)
	}
	b.Register(t, "other-b", "BMC-OTHER", "02:00:00:00:42:02")
	if _, err := b.Enroll(t, journaltest.NewKey(t), "BMC-OTHER", "02:00:00:00:42:02"); err != nil {
		t.Fatalf("enroll of unclaimed hardware in B with A unreachable: %v", err)
	}
	// And says what it decided on: A's claims, read some time ago, none
	// on this hardware (the node's record and its audit entry).
	in, err = b.AdminClient(t).InspectNode(ctx, &pactv1.InspectNodeRequest{NodeId: "other-b"})
	if c := in.GetNode().GetClaimsChecked(); err != nil || !strings.HasPrefix(c, journaltest.Domain+": read ") || !strings.HasSuffix(c, "none on this hardware") {
		t.Fatalf("inspect other-b in B: %q, %v: want %s's claims, their age, none on this hardware", c, err, journaltest.Domain)
	}
	audit, err := b.AdminClient(t).ListAudit(ctx, &pactv1.ListAuditRequest{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range audit.GetEntries() {
		if e.GetAction() == "enroll" && e.GetNodeId() == "other-b" {
			found = strings.Contains(e.GetDetail(), "claims "+journaltest.Domain+": read ")
		}
	}
	if !found {
		t.Errorf("B's audit: no enroll entry for other-b naming the claims it decided on")
	}
}
