package raftfsm

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Federation (docs/domains.md): the other domains this quorum federates
// with, each with the SPIFFE bundle last fetched from its bundle endpoint.
// The state is bounded and per domain, never per node: a federated
// domain's enrollment claims are never written here.

// Bounds of the federation state, checked by Apply.
const (
	MaxFederatedDomains     = 32
	MaxFederationEndpoints  = 4
	MaxFederatedAuthorities = 8
	MaxAuthorityBytes       = 16 << 10
	maxEndpointLen          = 512
)

// Federation policies: what an enrollment of hardware a federated domain
// claims does.
const (
	PolicyWarn   = "warn"
	PolicyRefuse = "refuse"
)

// federationLevel is the quorum feature level that knows federation.
const federationLevel = LevelFederation

func (a *applier) requireFederation(feature string) *Result {
	if a.atLeast(federationLevel) {
		return nil
	}
	return fail(&QuorumVersionError{Feature: feature, Need: federationLevel, Have: a.s.level()})
}

// checkBundle checks the bounds of a bundle's authorities (their content
// was checked by the proposer: Apply does not parse certificates).
func checkBundle(auths [][]byte) error {
	if len(auths) == 0 || len(auths) > MaxFederatedAuthorities {
		return fmt.Errorf("%w: a federated bundle holds 1 to %d X.509 authorities, not %d", ErrInvalidCommand, MaxFederatedAuthorities, len(auths))
	}
	for i, der := range auths {
		if len(der) == 0 || len(der) > MaxAuthorityBytes {
			return fmt.Errorf("%w: X.509 authority %d is %d bytes (1 to %d)", ErrInvalidCommand, i+1, len(der), MaxAuthorityBytes)
		}
	}
	return nil
}

// CheckFederatedDomain checks what Apply checks of a federation: the
// proposer calls it first for an operator's message.
func CheckFederatedDomain(d *pactv1.FederatedDomain) error {
	if err := pki.ValidateDomain(d.GetName()); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidCommand, err)
	}
	if n := len(d.GetEndpoints()); n == 0 || n > MaxFederationEndpoints {
		return fmt.Errorf("%w: a federated domain has 1 to %d bundle endpoints, not %d", ErrInvalidCommand, MaxFederationEndpoints, n)
	}
	for _, e := range d.GetEndpoints() {
		u, err := url.Parse(e)
		if err != nil || len(e) > maxEndpointLen || u.Scheme != "https" || u.Host == "" || u.User != nil {
			return fmt.Errorf("%w: bundle endpoint %q: want an https:// URL of at most %d characters", ErrInvalidCommand, e, maxEndpointLen)
		}
	}
	if id := d.GetEndpointSpiffeId(); id != "" && !strings.HasPrefix(id, "spiffe://"+d.GetName()+"/") {
		return fmt.Errorf("%w: endpoint SPIFFE ID %q is not in trust domain %s", ErrInvalidCommand, id, d.GetName())
	}
	switch d.GetPolicy() {
	case PolicyWarn, PolicyRefuse:
	default:
		return fmt.Errorf("%w: policy %q: want %s or %s", ErrInvalidCommand, d.GetPolicy(), PolicyWarn, PolicyRefuse)
	}
	return checkBundle(d.GetX509Authorities())
}

func (a *applier) federateDomain(op *pactv1.FederateDomainOp) *Result {
	if r := a.requireFederation("pact domain federate"); r != nil {
		return r
	}
	d := op.GetDomain()
	if err := CheckFederatedDomain(d); err != nil {
		return fail(err)
	}
	prev, had := a.s.federated[d.GetName()]
	if !had && len(a.s.federated) >= MaxFederatedDomains {
		return fail(fmt.Errorf("%w: this quorum federates with %d domains already, the most it keeps: remove one first (pact domain remove)", ErrInvalidCommand, MaxFederatedDomains))
	}
	rec := proto.Clone(d).(*pactv1.FederatedDomain)
	rec.AddedAtUnixNano = a.at()
	rec.AddedBy = a.cmd.GetActor()
	rec.AddedAtIndex = a.index
	if rec.GetFetchedAtUnixNano() == 0 {
		rec.FetchedAtUnixNano = a.at()
	}
	a.s.federated[d.GetName()] = rec
	what := "federated with"
	if had {
		what = fmt.Sprintf("federation replaced (was policy %s, endpoints %s)", prev.GetPolicy(), strings.Join(prev.GetEndpoints(), " "))
	}
	a.record("domain-federate", "", "", fmt.Sprintf("%s domain %s: endpoints %s, endpoint id %s, policy %s, %d X.509 authorities",
		what, d.GetName(), strings.Join(d.GetEndpoints(), " "), orAnyJournal(d), d.GetPolicy(), len(d.GetX509Authorities())))
	a.ev.FederationChanged = true
	return &Result{}
}

func orAnyJournal(d *pactv1.FederatedDomain) string {
	if id := d.GetEndpointSpiffeId(); id != "" {
		return id
	}
	return "spiffe://" + d.GetName() + "/pact-journal/*"
}

func (a *applier) removeFederatedDomain(op *pactv1.RemoveFederatedDomainOp) *Result {
	if r := a.requireFederation("pact domain remove"); r != nil {
		return r
	}
	if _, ok := a.s.federated[op.GetName()]; !ok {
		return fail(fmt.Errorf("%w: this quorum does not federate with domain %q (pact domain list)", ErrNotFound, op.GetName()))
	}
	delete(a.s.federated, op.GetName())
	a.record("domain-remove", "", "", "federation with domain "+op.GetName()+" removed: its bundle authenticates nothing from now on")
	a.ev.FederationChanged = true
	return &Result{}
}

func (a *applier) updateFederatedBundle(op *pactv1.UpdateFederatedBundleOp) *Result {
	if r := a.requireFederation("a federated bundle refresh"); r != nil {
		return r
	}
	cur, ok := a.s.federated[op.GetName()]
	if !ok || cur.GetAddedAtIndex() != op.GetExpectAddedAtIndex() {
		// Removed, or federated again, since the fetch began.
		return &Result{Idempotent: true}
	}
	if err := checkBundle(op.GetX509Authorities()); err != nil {
		return fail(err)
	}
	if op.GetSequence() < cur.GetSequence() {
		return fail(fmt.Errorf("%w: domain %s's endpoint served bundle sequence %d, older than the %d held: kept the one held", ErrInvalidCommand, op.GetName(), op.GetSequence(), cur.GetSequence()))
	}
	if op.GetFetchedAtUnixNano() <= cur.GetFetchedAtUnixNano() {
		return &Result{Idempotent: true}
	}
	rec := proto.Clone(cur).(*pactv1.FederatedDomain)
	changed := op.GetSequence() != cur.GetSequence() || !sameDER(op.GetX509Authorities(), cur.GetX509Authorities())
	rec.X509Authorities = op.GetX509Authorities()
	rec.Sequence = op.GetSequence()
	rec.RefreshHintSeconds = op.GetRefreshHintSeconds()
	rec.FetchedAtUnixNano = op.GetFetchedAtUnixNano()
	a.s.federated[op.GetName()] = rec
	if changed {
		a.record("domain-bundle", "", "", fmt.Sprintf("domain %s's bundle changed: sequence %d (was %d), %d X.509 authorities (were %d)",
			op.GetName(), op.GetSequence(), cur.GetSequence(), len(op.GetX509Authorities()), len(cur.GetX509Authorities())))
		a.ev.FederationChanged = true
	}
	return &Result{}
}

func sameDER(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i]) != string(b[i]) {
			return false
		}
	}
	return true
}

// FederatedDomains returns copies of the federated domains, by name.
func (f *FSM) FederatedDomains() []*pactv1.FederatedDomain {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]*pactv1.FederatedDomain, 0, len(f.st.federated))
	for _, d := range f.st.federated {
		out = append(out, proto.Clone(d).(*pactv1.FederatedDomain))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// DomainPolicy is a federated domain's name, its claim policy and its
// incarnation: the Raft index that federated it (added_at_index), which
// changes whenever the domain is federated again (removed and added, or
// replaced). Claims held from a domain count only for the incarnation
// whose feed they were read from.
type DomainPolicy struct {
	Name, Policy string
	Incarnation  uint64
}

// FederatedPolicies returns each federated domain's name, claim policy
// and incarnation, by name: what an enrollment's claim check reads,
// without copying the domains' bundles.
func (f *FSM) FederatedPolicies() []DomainPolicy {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]DomainPolicy, 0, len(f.st.federated))
	for _, d := range f.st.federated {
		out = append(out, DomainPolicy{Name: d.GetName(), Policy: d.GetPolicy(), Incarnation: d.GetAddedAtIndex()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// FederatedDomain returns a copy of one federated domain.
func (f *FSM) FederatedDomain(name string) (*pactv1.FederatedDomain, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	d, ok := f.st.federated[name]
	if !ok {
		return nil, false
	}
	return proto.Clone(d).(*pactv1.FederatedDomain), true
}

// maxClaimsChecked bounds the claims note an activation carries
// (ActivateOp.claims_checked): at most MaxFederatedDomains short lines.
const maxClaimsChecked = 4096

// truncate cuts s to at most n bytes, at a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
