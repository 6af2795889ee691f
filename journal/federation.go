package journal

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"

	"github.com/pact-hpc/pact/internal/logkey"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Federation with other domains (docs/domains.md). An operator federates
// this quorum with another domain by name, bundle endpoints and a
// bootstrap bundle; the record is in Raft (quorum feature level 3). The
// leader fetches each federated domain's bundle as its refresh hint says
// and records what it fetched, so every journal holds the same bundles and
// exports the same age. Federation grants nothing by itself: no path of
// this journal that authenticates nodes or operators consults a federated
// bundle (journal/auth knows nothing of them).

// Bounds of the refresh: a hint below the floor (a hostile or mistaken
// endpoint asking to be fetched every second) is raised to it, one above
// the ceiling lowered; a failed fetch is tried again after the retry.
const (
	federationRefreshFloor   = 30 * time.Second
	federationRefreshCeiling = time.Hour
	federationRetry          = 30 * time.Second
	federationFetchTimeout   = 10 * time.Second
	maxBundleDocument        = 1 << 20
)

// ClaimPolicies are the values of pact_journal_enroll_claimed_elsewhere_total's
// policy label.
var ClaimPolicies = []string{raftfsm.PolicyWarn, raftfsm.PolicyRefuse}

// refreshInterval is how often the leader fetches d's bundle: its hint,
// within floor and federationRefreshCeiling.
func refreshInterval(d *pactv1.FederatedDomain, floor time.Duration) time.Duration {
	hint := time.Duration(d.GetRefreshHintSeconds()) * time.Second
	if hint <= 0 {
		hint = DefaultBundleRefreshHint
	}
	return min(max(hint, floor), federationRefreshCeiling)
}

// fedRefresher is the leader's refresh of the federated bundles, and
// every journal's poll of their claim feeds.
type fedRefresher struct {
	j    *Journal
	kick chan struct{}
	mu   sync.Mutex
	// retryAt: a domain's incarnation -> earliest next attempt after a
	// failure (a domain federated again is fetched at once).
	retryAt map[fedKey]time.Time
	// seen: the incarnation of each domain the last pass saw; when it ends,
	// the domain's metric series go (sweep).
	seen map[string]uint64
	// passes counts the loop's passes over the federated domains (tests
	// wait on it); passMu is held by each pass in a testhooks build, and
	// by a test that holds the loop (HoldFederationLoop).
	passes atomic.Uint64
	passMu sync.Mutex
	// floor is the shortest refresh interval (federationRefreshFloor; the
	// tests lower it).
	floor atomic.Int64
	// failures counts failed fetches by domain.
	failures *prometheus.CounterVec
	// feedRefused counts claim feed calls refused; claimsDropped the
	// claims of a federated domain dropped at MaxClaimsPerDomain.
	feedRefused   prometheus.Counter
	claimsDropped *prometheus.CounterVec
	// refusedLog samples the claim feed's refusal log lines.
	refusedLog *sampledLog
	// claimed counts enrollments of hardware a federated domain holds
	// Active, by policy (warn: enrolled; refuse: refused).
	claimed *prometheus.CounterVec
}

func newFederation(j *Journal) *fedRefresher {
	f := &fedRefresher{
		j: j, kick: make(chan struct{}, 1), retryAt: map[fedKey]time.Time{}, seen: map[string]uint64{},
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_federation_refresh_failures_total",
			Help: "Failed fetches of a federated domain's bundle by this journal (as leader), by domain; the last good bundle is kept.",
		}, []string{"domain"}),
		feedRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pact_journal_federation_claim_feed_refused_total",
			Help: "Calls of this journal's claim feed refused: no client certificate, or none of a journal of a federated domain.",
		}),
		claimsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_federation_claims_dropped_total",
			Help: "Claims of a federated domain not held because it claimed more than the bound (200,000 nodes), by domain.",
		}, []string{"domain"}),
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pact_journal_enroll_claimed_elsewhere_total",
			Help: "Enrollments of hardware a federated domain holds Active, by that domain's policy (warn: enrolled and logged; refuse: refused, retryable); the log names the domain.",
		}, []string{"policy"}),
	}
	for _, p := range ClaimPolicies {
		// Every series from the start, so the first one counts.
		f.claimed.WithLabelValues(p)
	}
	f.refusedLog = newSampledLog(j.cfg.Clock, time.Minute)
	f.floor.Store(int64(federationRefreshFloor))
	return f
}

// wake makes the loop look at once (a new federation is fetched without
// waiting for the next tick).
func (f *fedRefresher) wake() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// loop refreshes due bundles while this journal leads, until it stops.
func (f *fedRefresher) loop(tick time.Duration) {
	j := f.j
	for {
		t := j.cfg.Clock.NewTimer(tick)
		select {
		case <-j.stop:
			t.Stop()
			return
		case <-t.C():
		case <-f.kick:
			t.Stop()
		}
		if j.raft.QuorumLevel() < raftfsm.LevelFederation {
			continue
		}
		f.federationPass(func() {
			// One read of the federated domains per pass: what the pass
			// counts by domain (failures, claims dropped) is of the
			// incarnations sweep saw.
			domains := j.fsm.FederatedDomains()
			f.sweep(domains)
			if j.raft.IsLeader() {
				f.refreshDue(domains)
			}
			f.pollClaims(domains)
		})
		f.passes.Add(1)
	}
}

// sweep forgets what the refresher keeps of the incarnations that ended
// since the last pass (domains is this pass's): their retry times and
// their metric series (pact_journal_federation_refresh_failures_total,
// pact_journal_federation_claims_dropped_total), so a domain removed
// leaves no series and one federated again starts from none.
func (f *fedRefresher) sweep(domains []*pactv1.FederatedDomain) {
	live := make(map[string]uint64, len(domains))
	for _, d := range domains {
		live[d.GetName()] = d.GetAddedAtIndex()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.retryAt {
		if inc, ok := live[k.name]; !ok || inc != k.incarnation {
			delete(f.retryAt, k)
		}
	}
	for name, inc := range f.seen {
		if cur, ok := live[name]; !ok || cur != inc {
			f.failures.DeleteLabelValues(name)
			f.claimsDropped.DeleteLabelValues(name)
			delete(f.seen, name)
		}
	}
	for name, inc := range live {
		f.seen[name] = inc
	}
}

// refreshDue fetches every federated bundle of domains that is due, one
// at a time.
func (f *fedRefresher) refreshDue(domains []*pactv1.FederatedDomain) {
	j := f.j
	now := j.cfg.Clock.Now()
	floor := time.Duration(f.floor.Load())
	for _, d := range domains {
		fetched := time.Unix(0, d.GetFetchedAtUnixNano())
		f.mu.Lock()
		retry := f.retryAt[keyOf(d)]
		f.mu.Unlock()
		// A federation just made holds the operator's bootstrap bundle
		// (fetched_at = added_at): fetch it at once.
		fresh := d.GetFetchedAtUnixNano() == d.GetAddedAtUnixNano()
		if (!fresh && now.Sub(fetched) < refreshInterval(d, floor)) || now.Before(retry) {
			continue
		}
		if err := f.refresh(d); err != nil {
			f.failures.WithLabelValues(d.GetName()).Inc()
			f.mu.Lock()
			f.retryAt[keyOf(d)] = now.Add(min(federationRetry, refreshInterval(d, floor)))
			f.mu.Unlock()
			j.log.Warn("federated domain's bundle not refreshed: keeping the last good one", logkey.OtherDomain, d.GetName(), logkey.Err, err,
				logkey.BundleAge, now.Sub(fetched).Round(time.Second).String())
			continue
		}
		f.mu.Lock()
		delete(f.retryAt, keyOf(d))
		f.mu.Unlock()
	}
}

// refresh fetches d's bundle from its endpoints in order and records it.
func (f *fedRefresher) refresh(d *pactv1.FederatedDomain) error {
	j := f.j
	var errs []error
	for _, url := range d.GetEndpoints() {
		b, err := fetchFederatedBundle(d, url, j.cfg.Clock.Now)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", url, err))
			continue
		}
		op := &pactv1.UpdateFederatedBundleOp{Name: d.GetName(), ExpectAddedAtIndex: d.GetAddedAtIndex(), FetchedAtUnixNano: j.cfg.Clock.Now().UnixNano()}
		for _, c := range b.X509Authorities() {
			op.X509Authorities = append(op.X509Authorities, c.Raw)
		}
		if seq, ok := b.SequenceNumber(); ok {
			op.Sequence = seq
		}
		if hint, ok := b.RefreshHint(); ok {
			op.RefreshHintSeconds = int64(hint / time.Second)
		}
		ctx, cancel := context.WithTimeout(context.Background(), j.cfg.ApplyTimeout)
		_, err = j.propose(ctx, &pactv1.Command{Actor: "journal/" + j.cfg.NodeID, Op: &pactv1.Command_UpdateFederatedBundle{UpdateFederatedBundle: op}})
		cancel()
		if err != nil {
			return fmt.Errorf("record the bundle fetched from %s: %w", url, err)
		}
		return nil
	}
	return errors.Join(errs...)
}

// fetchFederatedBundle fetches d's bundle from url over the https_spiffe
// profile: the endpoint must present an X.509-SVID that chains to d's
// bundle held now and names d's endpoint SPIFFE ID (any journal of d when
// none is recorded).
func fetchFederatedBundle(d *pactv1.FederatedDomain, url string, now func() time.Time) (*spiffebundle.Bundle, error) {
	td, err := spiffeid.TrustDomainFromString(d.GetName())
	if err != nil {
		return nil, err
	}
	var roots []*x509.Certificate
	for _, der := range d.GetX509Authorities() {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("held bundle: %w", err)
		}
		roots = append(roots, c)
	}
	authz := tlsconfig.AuthorizeIDPrefix(spiffeid.RequireFromPath(td, "/pact-journal"))
	if id := d.GetEndpointSpiffeId(); id != "" {
		eid, err := spiffeid.FromString(id)
		if err != nil {
			return nil, err
		}
		authz = tlsconfig.AuthorizeID(eid)
	}
	tcfg := tlsconfig.TLSClientConfig(x509bundle.FromX509Authorities(td, roots), authz)
	tcfg.MinVersion = tls.VersionTLS12
	tcfg.Time = now
	client := &http.Client{Timeout: federationFetchTimeout, Transport: &http.Transport{TLSClientConfig: tcfg, DisableKeepAlives: true, Proxy: nil}}
	ctx, cancel := context.WithTimeout(context.Background(), federationFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bundle endpoint answered %s", resp.Status)
	}
	b, err := spiffebundle.Read(td, io.LimitReader(resp.Body, maxBundleDocument))
	if err != nil {
		return nil, err
	}
	if len(b.X509Authorities()) == 0 {
		return nil, errors.New("the bundle holds no X.509 authority")
	}
	return b, nil
}

// federationCollector exports each federated bundle's age.
type federationCollector struct{ j *Journal }

var federatedAgeDesc = prometheus.NewDesc("pact_journal_federated_bundle_age_seconds",
	"Seconds since the bundle held for a federated domain was fetched from its endpoint (or given at pact domain federate), by domain.",
	[]string{"domain"}, nil)

func (c federationCollector) Describe(ch chan<- *prometheus.Desc) { ch <- federatedAgeDesc }

func (c federationCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.j.cfg.Clock.Now()
	for _, d := range c.j.fsm.FederatedDomains() {
		age := now.Sub(time.Unix(0, d.GetFetchedAtUnixNano())).Seconds()
		ch <- prometheus.MustNewConstMetric(federatedAgeDesc, prometheus.GaugeValue, max(age, 0), d.GetName())
	}
}
