package journal

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/pact-hpc/pact/internal/logkey"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Cross-domain enrollment claims (docs/domains.md, ADR-008). A domain
// publishes, to the domains it federates with, which hardware it holds
// Active: one claim per Active, unfenced node, naming the node, since when
// and until when (its certificate's end), and the hardware as digests of
// each normalised identifier, never the MACs and serials themselves. The
// feed is served on the bundle endpoint's listener at ClaimsPath, to the
// journals of federated domains only (mTLS: their X.509-SVID verified
// against the bundle Raft holds for their domain), and is incremental:
// a caller names the revision it has (a Raft index) and gets the claims
// that changed since. Claims held from other domains live in memory: they
// are never written to this domain's Raft.

// ClaimsPath is the claim feed's path on the bundle endpoint.
const ClaimsPath = "/pact/v1/claims"

// Bounds of the claim feed and of the claims held.
const (
	// claimLogCap bounds the changes a journal remembers for incremental
	// feeds; a caller further behind gets a full listing.
	claimLogCap = 1 << 18
	// claimPage is the most claims one answer carries.
	claimPage = 5000
	// MaxClaimsPerDomain bounds the claims held from one federated domain:
	// a domain claiming more (a flood, or every node of ours) is cut at it.
	MaxClaimsPerDomain = 200000
	maxClaimDocument   = 16 << 20
	maxClaimDigests    = 16
)

// claimDigest is the digest of one normalised identifier, as claims carry
// it: SHA-256 over a label, the kind and the value.
func claimDigest(kind, value string) string {
	sum := sha256.Sum256([]byte("pact-claim-v1\x00" + kind + "\x00" + value))
	return hex.EncodeToString(sum[:])
}

// hardwareDigests are the digests of every identifier of h (already
// normalised in the registry).
func hardwareDigests(h *pactv1.HardwareIdentity) []string {
	var out []string
	for _, m := range h.GetMacs() {
		out = append(out, claimDigest("mac", m))
	}
	if s := h.GetBmcSerial(); s != "" {
		out = append(out, claimDigest("bmc", s))
	}
	if s := h.GetTpmEkHash(); s != "" {
		out = append(out, claimDigest("ek", s))
	}
	return out
}

// Claim is one node's claim as the feed carries it. Active false ends a
// claim (the node went Inactive, was released, fenced, revoked or
// removed).
type Claim struct {
	NodeID string   `json:"node_id"`
	HW     []string `json:"hw,omitempty"`
	Active bool     `json:"active"`
	// Since is when the node became Active (Unix nanoseconds); Until when
	// its certificate ends (Unix seconds).
	Since int64 `json:"since,omitempty"`
	Until int64 `json:"until,omitempty"`
}

// ClaimFeed is one answer of the claim feed.
type ClaimFeed struct {
	Domain string `json:"domain"`
	// Revision is what to ask from next (since=Revision).
	Revision uint64 `json:"revision"`
	// Full: the answer lists every current claim (from After on); the
	// caller drops what it held of this domain before the first page.
	Full bool `json:"full"`
	// More: another page follows (ask again with since=Revision, and
	// after=After for a full listing).
	More   bool    `json:"more"`
	After  string  `json:"after,omitempty"`
	Claims []Claim `json:"claims"`
}

// claimOf is node n's claim.
func claimOf(n *pactv1.Node) Claim {
	c := Claim{NodeID: n.GetNodeId()}
	if n.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && n.GetFence() == nil && !raftfsm.Released(n) {
		c.Active = true
		c.HW = hardwareDigests(n.GetHardware())
		c.Since = n.GetActivatedAtUnixNano()
		c.Until = n.GetCert().GetNotAfterUnix()
	}
	return c
}

// claimLog remembers which nodes changed at which Raft index, for the
// incremental feed. It is filled on Raft's apply goroutine and never
// blocks it for long.
type claimLog struct {
	mu      sync.Mutex
	entries []claimChange
	// floor: a caller whose revision is below it gets a full listing.
	floor    uint64
	restores uint64
	last     uint64
}

type claimChange struct {
	index uint64
	node  string
}

func (l *claimLog) note(ev raftfsm.Event, restores uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if restores != l.restores {
		// A snapshot replaced the registry: what changed is unknown.
		l.restores, l.entries, l.floor = restores, l.entries[:0], ev.Index+1
	}
	if ev.Index > l.last {
		l.last = ev.Index
	}
	for _, id := range ev.NodeIDs {
		l.entries = append(l.entries, claimChange{index: ev.Index, node: id})
	}
	if len(l.entries) > claimLogCap {
		drop := len(l.entries) / 2
		l.floor = l.entries[drop-1].index + 1
		l.entries = append(l.entries[:0], l.entries[drop:]...)
	}
}

// since returns the nodes changed after rev (each once; about limit of
// them, a page ending where an index ends), the revision to ask from next
// and whether more follow; full is set when rev is not in the log.
func (l *claimLog) since(rev uint64, limit int) (nodes []string, next uint64, more, full bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rev < l.floor || rev > l.last {
		// Older than the log, or one this journal never served (another
		// journal's, ahead of this one, or from before a restore): list
		// everything.
		return nil, l.last, false, true
	}
	i := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].index > rev })
	seen := map[string]bool{}
	var lastIdx uint64
	for ; i < len(l.entries); i++ {
		e := l.entries[i]
		if len(nodes) >= limit && !seen[e.node] && e.index != lastIdx {
			return nodes, lastIdx, true, false
		}
		if !seen[e.node] {
			seen[e.node] = true
			nodes = append(nodes, e.node)
		}
		lastIdx = e.index
	}
	return nodes, l.last, false, false
}

// current is the newest index the log has seen.
func (l *claimLog) current() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// serveClaims answers the claim feed to a journal of a federated domain.
func (j *Journal) serveClaims(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "method is not allowed", http.StatusMethodNotAllowed)
		return
	}
	caller, err := j.federatedCaller(r)
	if err != nil {
		j.federation.feedRefused.Inc()
		// A domain polls every few seconds: one line a minute at most
		// (pact_journal_federation_claim_feed_refused_total counts all).
		if ok, suppressed := j.federation.refusedLog.allow(); ok {
			j.log.Warn("claim feed refused", logkey.Addr, r.RemoteAddr, logkey.Err, err, logkey.Suppressed, suppressed)
		}
		http.Error(w, "claim feed refused: "+err.Error(), http.StatusForbidden)
		return
	}
	q := r.URL.Query()
	rev, _ := strconv.ParseUint(q.Get("since"), 10, 64)
	after := q.Get("after")
	feed := ClaimFeed{Domain: j.ca.Domain(), Claims: []Claim{}}
	full := q.Get("since") == "" || after != ""
	var nodes []string
	var next uint64
	var more bool
	if !full {
		nodes, next, more, full = j.claims.since(rev, claimPage)
	}
	if full {
		// A full listing is consistent from the revision its first page
		// names: later changes come in the next incremental answers.
		feed.Full, feed.Revision = true, j.claims.current()
		if after != "" {
			feed.Revision = rev
		}
		all := j.fsm.Nodes(raftfsm.Filter{State: pactv1.NodeState_NODE_STATE_ACTIVE})
		sort.Slice(all, func(a, b int) bool { return all[a].GetNodeId() < all[b].GetNodeId() })
		start := sort.Search(len(all), func(i int) bool { return all[i].GetNodeId() > after })
		for _, n := range all[start:] {
			c := claimOf(n)
			if !c.Active {
				continue
			}
			if len(feed.Claims) == claimPage {
				feed.More, feed.After = true, feed.Claims[len(feed.Claims)-1].NodeID
				break
			}
			feed.Claims = append(feed.Claims, c)
		}
	} else {
		feed.Revision, feed.More = next, more
		for _, id := range nodes {
			n, ok := j.fsm.Node(id)
			if !ok {
				feed.Claims = append(feed.Claims, Claim{NodeID: id})
				continue
			}
			feed.Claims = append(feed.Claims, claimOf(n))
		}
	}
	j.log.Debug("claim feed served", logkey.Caller, caller.String(), logkey.Claims, len(feed.Claims), logkey.Full, feed.Full)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(feed)
}

// federatedCaller authenticates a claim feed call: an X.509-SVID of a
// journal (spiffe://NAME/pact-journal/ID) of a domain this quorum
// federates with, verified against the bundle Raft holds for NAME.
func (j *Journal) federatedCaller(r *http.Request) (spiffeid.ID, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return spiffeid.ID{}, errors.New("no client certificate: only the journals of a federated domain may read claims")
	}
	set := x509bundle.NewSet()
	for _, d := range j.fsm.FederatedDomains() {
		td, err := spiffeid.TrustDomainFromString(d.GetName())
		if err != nil {
			continue
		}
		var roots []*x509.Certificate
		for _, der := range d.GetX509Authorities() {
			if c, err := x509.ParseCertificate(der); err == nil {
				roots = append(roots, c)
			}
		}
		set.Add(x509bundle.FromX509Authorities(td, roots))
	}
	id, _, err := x509svid.Verify(r.TLS.PeerCertificates, set, x509svid.WithTime(j.cfg.Clock.Now()))
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("the client certificate is no X.509-SVID of a domain this quorum federates with: %w", err)
	}
	if !strings.HasPrefix(id.Path(), "/pact-journal/") {
		return spiffeid.ID{}, fmt.Errorf("%s is not a journal of %s: only journals read claims", id, id.TrustDomain())
	}
	return id, nil
}

// heldClaim is a claim held from a federated domain's incarnation, with
// that domain's policy.
type heldClaim struct {
	Domain, Policy string
	from           fedKey
	Claim
}

// fedKey is one incarnation of a federated domain: its name and the Raft
// index that federated it (added_at_index), which changes whenever the
// domain is federated again: removed and added (even within one poll), or
// replaced (another bundle, other endpoints, another policy). What a
// journal keeps of a federated domain outside Raft (the claims held, the
// feed's cursor, when it was read, a failed refresh's retry time, the
// per-domain metric series) is kept by incarnation, so nothing of one
// counts for the next: a domain federated again starts from nothing and
// reads its feed in full.
type fedKey struct {
	name        string
	incarnation uint64
}

func keyOf(d *pactv1.FederatedDomain) fedKey { return fedKey{d.GetName(), d.GetAddedAtIndex()} }

func policyKey(d raftfsm.DomainPolicy) fedKey { return fedKey{d.Name, d.Incarnation} }

// claimHolder keeps the claims of the federated domains, in memory, by
// incarnation.
type claimHolder struct {
	mu       sync.RWMutex
	byDomain map[fedKey]*domainClaims
}

type domainClaims struct {
	revision uint64
	after    string // a full listing under way: the last node id read
	nodes    map[string]Claim
	byHW     map[string]string // digest -> node id
	polled   time.Time         // last answer
	full     bool              // a full listing is under way
}

func newClaimHolder() *claimHolder { return &claimHolder{byDomain: map[fedKey]*domainClaims{}} }

// lookup returns the claims held that name any identifier of h, of the
// federated domains (FSM.FederatedPolicies, by name) only, each read from
// the incarnation domains names: claims held from an incarnation that
// ended (a domain removed, or federated again since) count for nothing,
// whether or not a poll has dropped them yet.
func (c *claimHolder) lookup(h *pactv1.HardwareIdentity, domains []raftfsm.DomainPolicy) []heldClaim {
	digests := hardwareDigests(h)
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []heldClaim
	for _, fd := range domains {
		dc := c.byDomain[policyKey(fd)]
		if dc == nil {
			continue
		}
		for _, d := range digests {
			if id, ok := dc.byHW[d]; ok {
				out = append(out, heldClaim{Domain: fd.Name, Policy: fd.Policy, from: policyKey(fd), Claim: dc.nodes[id]})
				break
			}
		}
	}
	return out
}

// apply takes one answer of the feed of a domain's incarnation; it
// returns how many claims were dropped at the bound.
func (c *claimHolder) apply(domain fedKey, feed *ClaimFeed, now time.Time, first bool) (dropped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dc := c.byDomain[domain]
	if dc == nil || (feed.Full && first) {
		// A full listing's first page replaces what was held.
		dc = &domainClaims{nodes: map[string]Claim{}, byHW: map[string]string{}}
		c.byDomain[domain] = dc
	}
	for _, cl := range feed.Claims {
		if prev, ok := dc.nodes[cl.NodeID]; ok {
			for _, d := range prev.HW {
				if dc.byHW[d] == cl.NodeID {
					delete(dc.byHW, d)
				}
			}
			delete(dc.nodes, cl.NodeID)
		}
		if !cl.Active {
			continue
		}
		if len(dc.nodes) >= MaxClaimsPerDomain || len(cl.HW) > maxClaimDigests {
			dropped++
			continue
		}
		dc.nodes[cl.NodeID] = cl
		for _, d := range cl.HW {
			dc.byHW[d] = cl.NodeID
		}
	}
	dc.revision, dc.after, dc.full = feed.Revision, feed.After, feed.Full && feed.More
	dc.polled = now
	return dropped
}

// forget drops the claims (and the feed cursor) of every incarnation not
// in keep: domains no longer federated, and the earlier incarnations of
// ones federated again.
func (c *claimHolder) forget(keep map[fedKey]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.byDomain {
		if !keep[k] {
			delete(c.byDomain, k)
		}
	}
}

func (c *claimHolder) cursor(domain fedKey) (rev uint64, after string, known bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	dc := c.byDomain[domain]
	if dc == nil {
		return 0, "", false
	}
	if dc.full {
		return dc.revision, dc.after, true
	}
	return dc.revision, "", true
}

// polledAt is when the feed of domain's incarnation last answered (zero:
// never).
func (c *claimHolder) polledAt(domain fedKey) time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if dc := c.byDomain[domain]; dc != nil {
		return dc.polled
	}
	return time.Time{}
}

// count is how many claims are held from domain's incarnation.
func (c *claimHolder) count(domain fedKey) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if dc := c.byDomain[domain]; dc != nil {
		return len(dc.nodes)
	}
	return 0
}

// pollClaims reads the claim feed of every federated domain of domains
// (this pass's) once (each journal does: each decides enrollments on its
// own), then drops what is held of every incarnation no longer federated,
// as Raft holds them now: one that ended during the polls goes too.
func (f *fedRefresher) pollClaims(domains []*pactv1.FederatedDomain) {
	j := f.j
	for _, d := range domains {
		if err := f.pollDomain(d); err != nil {
			j.log.Debug("claim feed not read", logkey.OtherDomain, d.GetName(), logkey.Err, err)
		}
	}
	keep := map[fedKey]bool{}
	for _, d := range j.fsm.FederatedPolicies() {
		keep[policyKey(d)] = true
	}
	j.heldClaims.forget(keep)
}

// federated says whether k is still a federated domain's incarnation.
func (f *fedRefresher) federated(k fedKey) bool {
	d, ok := f.j.fsm.FederatedDomain(k.name)
	return ok && keyOf(d) == k
}

// pollDomain reads d's feed until it has no more pages (bounded), and
// stops once d's incarnation ends (removed or federated again): its
// endpoints and bundle are no longer this quorum's word.
func (f *fedRefresher) pollDomain(d *pactv1.FederatedDomain) error {
	j := f.j
	key := keyOf(d)
	client, err := f.claimClient(d)
	if err != nil {
		return err
	}
	for page := 0; page < MaxClaimsPerDomain/claimPage+2; page++ {
		if !f.federated(key) {
			return errors.New("the federation ended or was made again while its feed was read: stopped")
		}
		rev, after, known := j.heldClaims.cursor(key)
		var lastErr error
		var feed *ClaimFeed
		for _, ep := range d.GetEndpoints() {
			u, err := url.Parse(ep)
			if err != nil {
				continue
			}
			u.Path, u.RawQuery = ClaimsPath, ""
			qs := url.Values{}
			if known {
				qs.Set("since", strconv.FormatUint(rev, 10))
			}
			if after != "" {
				qs.Set("after", after)
			}
			u.RawQuery = qs.Encode()
			feed, lastErr = getClaims(client, u.String())
			if lastErr == nil {
				break
			}
		}
		if feed == nil {
			return lastErr
		}
		if feed.Domain != d.GetName() {
			return fmt.Errorf("the feed is domain %q's, not %s's", feed.Domain, d.GetName())
		}
		if n := j.heldClaims.apply(key, feed, j.cfg.Clock.Now(), after == ""); n > 0 {
			f.claimsDropped.WithLabelValues(d.GetName()).Add(float64(n))
			j.log.Warn("claims from a federated domain dropped at the bound", logkey.OtherDomain, d.GetName(), logkey.Dropped, n, logkey.Bound, MaxClaimsPerDomain)
		}
		if !feed.More {
			return nil
		}
	}
	return nil
}

func getClaims(client *http.Client, u string) (*ClaimFeed, error) {
	ctx, cancel := context.WithTimeout(context.Background(), federationFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, http.NoBody)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("claim feed answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var feed ClaimFeed
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxClaimDocument)).Decode(&feed); err != nil {
		return nil, fmt.Errorf("claim feed: %w", err)
	}
	if len(feed.Claims) > 2*claimPage {
		return nil, fmt.Errorf("claim feed: %d claims in one answer (at most %d)", len(feed.Claims), 2*claimPage)
	}
	return &feed, nil
}

// claimClient is an mTLS client to d's journals: this journal's server
// certificate (an X.509-SVID of its own domain) as client certificate, d's
// journal verified against d's bundle held in Raft.
func (f *fedRefresher) claimClient(d *pactv1.FederatedDomain) (*http.Client, error) {
	j := f.j
	td, err := spiffeid.TrustDomainFromString(d.GetName())
	if err != nil {
		return nil, err
	}
	var roots []*x509.Certificate
	for _, der := range d.GetX509Authorities() {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		roots = append(roots, c)
	}
	tcfg := tlsconfig.TLSClientConfig(x509bundle.FromX509Authorities(td, roots), tlsconfig.AuthorizeIDPrefix(spiffeid.RequireFromPath(td, "/pact-journal")))
	tcfg.MinVersion = tls.VersionTLS12
	tcfg.Time = j.cfg.Clock.Now
	tcfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return j.ca.ServerCertificate(), nil }
	return &http.Client{Timeout: federationFetchTimeout, Transport: &http.Transport{TLSClientConfig: tcfg, DisableKeepAlives: true}}, nil
}

// claimsCollector exports the claims held from each federated domain.
type claimsCollector struct{ j *Journal }

var claimsHeldDesc = prometheus.NewDesc("pact_journal_federation_claims_held",
	"Enrollment claims held in memory from a federated domain (nodes it holds Active), by domain.", []string{"domain"}, nil)

func (c claimsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- claimsHeldDesc }

func (c claimsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, d := range c.j.fsm.FederatedDomains() {
		ch <- prometheus.MustNewConstMetric(claimsHeldDesc, prometheus.GaugeValue, float64(c.j.heldClaims.count(keyOf(d))), d.GetName())
	}
}

// ErrActiveInAnotherDomain: a federated domain whose policy is refuse holds
// the hardware Active. Retryable (ACTIVE_IN_ANOTHER_DOMAIN, with a
// retry-after): the node enrolls once that domain's claim ends.
var ErrActiveInAnotherDomain = errors.New("journal: hardware active in another domain")

// claimRetryAfter is the retry-after of an enrollment refused by a claim.
const claimRetryAfter = 30 * time.Second

// claimsDecision applies each federated domain's policy to the claims held on
// node's hardware: warn logs and counts, refuse refuses (retryable). It
// uses what is held and never calls the other domain, so an unreachable
// one delays nothing; the answer says how old the claims are, and so does
// the note it returns for the activation (its audit entry and the node's
// record): what it decided on, domain by domain (claimsNote). Only the
// claims read from each domain's current incarnation count: those of a
// domain removed, or removed and federated again, count for nothing.
func (j *Journal) claimsDecision(ctx context.Context, node *pactv1.Node) (string, error) {
	domains := j.fsm.FederatedPolicies()
	held := j.heldClaims.lookup(node.GetHardware(), domains)
	note := j.claimsNote(domains, held)
	if len(held) == 0 {
		return note, nil
	}
	now := j.cfg.Clock.Now()
	for _, c := range held {
		age := now.Sub(j.heldClaims.polledAt(c.from)).Round(time.Second)
		since := time.Unix(0, c.Since).UTC().Format(time.RFC3339)
		j.federation.claimed.WithLabelValues(c.Policy).Inc()
		if c.Policy == raftfsm.PolicyRefuse {
			j.log.Warn("enrollment refused: the hardware is active in another domain", logkey.NodeID, node.GetNodeId(), logkey.OtherDomain, c.Domain,
				logkey.OtherNode, c.NodeID, logkey.Since, since, logkey.ClaimsAge, age.String(), logkey.Source, peerAddr(ctx))
			return note, &retryAfterError{
				err: fmt.Errorf("%w: node %s's hardware is active in domain %s as node %s since %s (claims from %s %s old; its policy here is refuse): it enrolls here once %s releases it",
					ErrActiveInAnotherDomain, node.GetNodeId(), c.Domain, c.NodeID, since, c.Domain, age, c.Domain),
				after:       claimRetryAfter,
				otherDomain: c.Domain,
			}
		}
		j.log.Warn("node enrolling while its hardware is active in another domain", logkey.NodeID, node.GetNodeId(), logkey.OtherDomain, c.Domain,
			logkey.OtherNode, c.NodeID, logkey.Since, since, logkey.ClaimsAge, age.String(), logkey.Source, peerAddr(ctx))
	}
	return note, nil
}

// claimsNote says, for each federated domain, how old the claims held
// from it are and whether one of held names the hardware: "a.example:
// read 3s ago, none on this hardware; c.example: never read". A domain
// whose feed has not answered lately (unreachable, slow) shows its age:
// the enrollment went ahead on what was held. Empty without federated
// domains.
func (j *Journal) claimsNote(domains []raftfsm.DomainPolicy, held []heldClaim) string {
	now := j.cfg.Clock.Now()
	var parts []string
	for _, d := range domains {
		name := d.Name
		polled := j.heldClaims.polledAt(policyKey(d))
		if polled.IsZero() {
			parts = append(parts, name+": never read (its feed has not answered this journal)")
			continue
		}
		part := fmt.Sprintf("%s: read %s ago (%s)", name, now.Sub(polled).Round(time.Second), polled.UTC().Format(time.RFC3339))
		found := false
		for _, c := range held {
			if c.Domain == name {
				part += fmt.Sprintf(", active there as node %s since %s (policy %s)", c.NodeID, time.Unix(0, c.Since).UTC().Format(time.RFC3339), d.Policy)
				found = true
			}
		}
		if !found {
			part += ", none on this hardware"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

// AlsoActive says, for node, in which federated domains its hardware is
// Active by the claims held: "DOMAIN (node NODE) since T" each.
func (j *Journal) alsoActive(n *pactv1.Node) []string {
	var out []string
	for _, c := range j.heldClaims.lookup(n.GetHardware(), j.fsm.FederatedPolicies()) {
		out = append(out, fmt.Sprintf("%s (node %s) since %s", c.Domain, c.NodeID, time.Unix(0, c.Since).UTC().Format(time.RFC3339)))
	}
	return out
}
