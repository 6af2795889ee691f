package journal

import (
	"crypto/tls"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// ServerCertificate is the journal's current server certificate and key:
// what a hostile federated domain holds of its own journals.
func (j *Journal) ServerCertificate() *tls.Certificate { return j.ca.ServerCertificate() }

// FederationFailures is the failed-fetch counter of one federated domain.
func (j *Journal) FederationFailures(domain string) prometheus.Counter {
	return j.federation.failures.WithLabelValues(domain)
}

// SetFederationRefreshFloor lowers the shortest refresh interval of the
// federated bundles (30s) so a test sees several refreshes.
func (j *Journal) SetFederationRefreshFloor(d time.Duration) { j.federation.floor.Store(int64(d)) }

// HeldClaimDomains names the federated domains whose claims (read from
// their current incarnation: what an enrollment's check counts) name any
// identifier of hw, with the node id each claims it as ("DOMAIN/NODE").
func (j *Journal) HeldClaimDomains(hw *pactv1.HardwareIdentity) []string {
	var out []string
	for _, c := range j.heldClaims.lookup(hw, j.fsm.FederatedPolicies()) {
		out = append(out, c.Domain+"/"+c.NodeID)
	}
	return out
}

// HeldClaimCount is how many claims this journal holds from domain's
// current incarnation (0 when it is not federated).
func (j *Journal) HeldClaimCount(domain string) int {
	d, ok := j.fsm.FederatedDomain(domain)
	if !ok {
		return 0
	}
	return j.heldClaims.count(keyOf(d))
}

// HeldClaimIncarnations is how many incarnations of federated domains this
// journal holds claims or a feed cursor of, current or not.
func (j *Journal) HeldClaimIncarnations() int {
	c := j.heldClaims
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.byDomain)
}

// FederationPasses counts the federation loop's passes so far (each one
// refreshes what is due, reads every claim feed, and drops what is held of
// incarnations that ended).
func (j *Journal) FederationPasses() uint64 { return j.federation.passes.Load() }

// HoldFederationLoop keeps the federation loop from starting a pass (a
// pass under way ends first) until release: no bundle refresh, no claim
// poll, nothing dropped, as on a journal between two ticks.
func (j *Journal) HoldFederationLoop(t testing.TB) (release func()) {
	requireRaftHooks(t)
	j.federation.passMu.Lock()
	var once sync.Once
	release = func() { once.Do(j.federation.passMu.Unlock) }
	t.Cleanup(release) // before the journal closes: its loop must end
	return release
}

// ClaimHolderForTest wraps a claim holder for the flood test.
type ClaimHolderForTest struct{ h *claimHolder }

// NewClaimHolderForTest is an empty claim holder.
func NewClaimHolderForTest() ClaimHolderForTest { return ClaimHolderForTest{newClaimHolder()} }

// Apply takes one feed answer (a first page) and returns the claims dropped.
func (c ClaimHolderForTest) Apply(domain string, feed *ClaimFeed) int {
	return c.h.apply(fedKey{name: domain}, feed, time.Now(), true)
}

// Count is how many claims are held from domain.
func (c ClaimHolderForTest) Count(domain string) int { return c.h.count(fedKey{name: domain}) }

// ClaimedCounter is pact_journal_enroll_claimed_elsewhere_total of a
// policy.
func (j *Journal) ClaimedCounter(policy string) prometheus.Counter {
	return j.federation.claimed.WithLabelValues(policy)
}

// ClaimDigest is the digest a claim carries for one normalised identifier
// (what a hostile federated domain computes for hardware it guessed).
func ClaimDigest(kind, value string) string { return claimDigest(kind, value) }

// ClaimsDropped is pact_journal_federation_claims_dropped_total of a
// domain.
func (j *Journal) ClaimsDropped(domain string) prometheus.Counter {
	return j.federation.claimsDropped.WithLabelValues(domain)
}
