package v1rpc

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/journal/auth"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Federation with other domains (docs/domains.md): the operator's calls.
// The journal's refresher fetches the bundles and polls the claim feeds.

// FederationRecords is the registry's record of the federated domains
// (raftfsm.FSM).
type FederationRecords interface {
	FederatedDomain(name string) (*pactv1.FederatedDomain, bool)
	FederatedDomains() []*pactv1.FederatedDomain
}

// FederationWaker has the journal's refresher look at the federated
// domains again now (a domain federated or changed).
type FederationWaker interface {
	WakeFederation()
}

// FederateDomain federates this quorum with another domain, or replaces
// the endpoints, bootstrap bundle and policy of one it federates with.
func (q *Quorum) FederateDomain(ctx context.Context, req *pactv1.FederateDomainRequest) (*pactv1.FederateDomainResponse, error) {
	name := req.GetName()
	if name == q.cfg.Domain {
		return nil, fmt.Errorf("%w: %s is this quorum's own domain: federate with another domain's name", ErrInvalidArgument, name)
	}
	auths, err := parseAuthorities(name, req.GetX509Authorities())
	if err != nil {
		return nil, err
	}
	policy := req.GetPolicy()
	if policy == "" {
		policy = raftfsm.PolicyWarn
	}
	d := &pactv1.FederatedDomain{
		Name:             name,
		Endpoints:        req.GetEndpoints(),
		EndpointSpiffeId: req.GetEndpointSpiffeId(),
		X509Authorities:  auths,
		Policy:           policy,
	}
	if err := raftfsm.CheckFederatedDomain(d); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if d.GetEndpointSpiffeId() != "" {
		if _, err := spiffeid.FromString(d.GetEndpointSpiffeId()); err != nil {
			return nil, fmt.Errorf("%w: endpoint SPIFFE ID %q: %v", ErrInvalidArgument, d.GetEndpointSpiffeId(), err)
		}
	}
	if err := q.cfg.Confirmer.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	if err := q.cfg.Levels.RequireLevel(ctx, raftfsm.LevelFederation, "pact domain federate"); err != nil {
		return nil, err
	}
	if _, err := q.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: q.actor(ctx), Op: &pactv1.Command_FederateDomain{FederateDomain: &pactv1.FederateDomainOp{Domain: d}}}); err != nil {
		return nil, err
	}
	q.cfg.Logger.Warn("federated with a domain", logkey.OtherDomain, name, logkey.Actor, q.actor(ctx))
	q.cfg.Federation.WakeFederation()
	rec, _ := q.cfg.Federations.FederatedDomain(name)
	return &pactv1.FederateDomainResponse{Domain: federatedView(rec)}, nil
}

// ListFederatedDomains lists the domains this quorum federates with.
func (q *Quorum) ListFederatedDomains(context.Context, *pactv1.ListFederatedDomainsRequest) (*pactv1.ListFederatedDomainsResponse, error) {
	out := &pactv1.ListFederatedDomainsResponse{}
	for _, d := range q.cfg.Federations.FederatedDomains() {
		out.Domains = append(out.Domains, federatedView(d))
	}
	return out, nil
}

// RemoveFederatedDomain ends the federation with a domain.
func (q *Quorum) RemoveFederatedDomain(ctx context.Context, req *pactv1.RemoveFederatedDomainRequest) (*pactv1.RemoveFederatedDomainResponse, error) {
	if err := q.cfg.Confirmer.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	if err := q.cfg.Levels.RequireLevel(ctx, raftfsm.LevelFederation, "pact domain remove"); err != nil {
		return nil, err
	}
	before, ok := q.cfg.Federations.FederatedDomain(req.GetName())
	if !ok {
		return nil, fmt.Errorf("%w: this quorum does not federate with domain %q (pact domain list)", ErrNotFound, req.GetName())
	}
	if _, err := q.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: q.actor(ctx), Op: &pactv1.Command_RemoveFederatedDomain{RemoveFederatedDomain: &pactv1.RemoveFederatedDomainOp{Name: req.GetName()}}}); err != nil {
		return nil, err
	}
	q.cfg.Logger.Warn("federation with a domain removed", logkey.OtherDomain, req.GetName(), logkey.Actor, q.actor(ctx))
	return &pactv1.RemoveFederatedDomainResponse{Domain: federatedView(before)}, nil
}

// actor is who the audit names for a change: the caller, or this journal
// for what it does itself.
func (q *Quorum) actor(ctx context.Context) string {
	if p := auth.FromContext(ctx); p != nil {
		return p.Actor()
	}
	return "journal/" + q.cfg.JournalID
}

// parseAuthorities reads a bootstrap bundle (PEM or DER certificates) and
// returns each authority's DER. Each must be a CA certificate, and one
// that names a SPIFFE trust domain must name this one: a bundle file of
// the wrong domain is the likeliest mistake.
func parseAuthorities(name string, in [][]byte) ([][]byte, error) {
	var ders [][]byte
	for _, b := range in {
		if strings.Contains(string(b), "-----BEGIN") {
			rest := b
			for {
				var blk *pem.Block
				blk, rest = pem.Decode(rest)
				if blk == nil {
					break
				}
				if blk.Type == "CERTIFICATE" {
					ders = append(ders, blk.Bytes)
				}
			}
			continue
		}
		ders = append(ders, b)
	}
	if len(ders) == 0 {
		return nil, fmt.Errorf("%w: the bootstrap bundle holds no certificate: give the other domain's ca.pem (or its SPIRE bundle in PEM)", ErrInvalidArgument)
	}
	for i, der := range ders {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("%w: bootstrap bundle certificate %d does not parse: %v", ErrInvalidArgument, i+1, err)
		}
		if !c.IsCA {
			return nil, fmt.Errorf("%w: bootstrap bundle certificate %d (%s) is not a CA certificate", ErrInvalidArgument, i+1, c.Subject)
		}
		for _, u := range c.URIs {
			if u.Scheme == "spiffe" && u.Host != name {
				return nil, fmt.Errorf("%w: bootstrap bundle certificate %d is trust domain %s's, not %s's", ErrInvalidArgument, i+1, u.Host, name)
			}
		}
	}
	return ders, nil
}

func federatedView(d *pactv1.FederatedDomain) *pactv1.FederatedDomainView {
	v := &pactv1.FederatedDomainView{
		Name:               d.GetName(),
		Endpoints:          d.GetEndpoints(),
		EndpointSpiffeId:   d.GetEndpointSpiffeId(),
		Policy:             d.GetPolicy(),
		Sequence:           d.GetSequence(),
		RefreshHintSeconds: d.GetRefreshHintSeconds(),
		FetchedAtUnixNano:  d.GetFetchedAtUnixNano(),
		AddedAtUnixNano:    d.GetAddedAtUnixNano(),
		AddedBy:            d.GetAddedBy(),
	}
	for _, der := range d.GetX509Authorities() {
		sum := sha256.Sum256(der)
		v.AuthoritiesSha256 = append(v.AuthoritiesSha256, hex.EncodeToString(sum[:]))
	}
	return v
}
