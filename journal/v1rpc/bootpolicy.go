package v1rpc

import (
	"context"
	"fmt"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/measuredboot"
	"github.com/pact-hpc/pact/journal/auth"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// BootPolicies is pact boot-policy (docs/tpm.md, "Boot policies").
type BootPolicies struct {
	pactv1.UnimplementedBootPolicyServiceServer
	cfg Config
}

// NewBootPolicies returns the boot policy handlers over cfg's dependencies.
func NewBootPolicies(cfg Config) (*BootPolicies, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &BootPolicies{cfg: cfg}, nil
}

func (s *BootPolicies) SetBootPolicy(ctx context.Context, req *pactv1.SetBootPolicyRequest) (*pactv1.SetBootPolicyResponse, error) {
	p := req.GetPolicy()
	if err := measuredboot.ValidatePolicy(p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if err := validateAttest(p); err != nil {
		return nil, err
	}
	if err := s.cfg.Confirmer.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	if err := s.cfg.Levels.RequireLevel(ctx, raftfsm.LevelBootPolicies, "pact boot-policy set"); err != nil {
		return nil, err
	}
	actor := s.actor(ctx)
	if _, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: actor, Op: &pactv1.Command_SetBootPolicy{SetBootPolicy: &pactv1.SetBootPolicyOp{
		Policy: p, ExpectVersion: req.GetExpectVersion(),
	}}}); err != nil {
		return nil, err
	}
	set, _ := s.cfg.Registry.BootPolicy(p.GetVcluster())
	s.cfg.Logger.Warn("boot policy set", logkey.VCluster, p.GetVcluster(), logkey.PolicyVersion, set.GetVersion(),
		logkey.Mode, p.GetMode().String(), logkey.Action, p.GetAction().String(), logkey.Actor, actor)
	return &pactv1.SetBootPolicyResponse{Policy: set}, nil
}

// validateAttest checks a policy's attestation between renewals: an
// interval of 0 (off) or 60 s to 30 days, a tolerance of at most 100.
func validateAttest(p *pactv1.BootPolicy) error {
	if s := p.GetAttestIntervalSeconds(); s != 0 && (s < 60 || s > 30*24*3600) {
		return fmt.Errorf("%w: attest interval of %ds: 0 (off) or 60s to 720h", ErrInvalidArgument, s)
	}
	if t := p.GetAttestTolerance(); t > 100 {
		return fmt.Errorf("%w: attest tolerance %d: at most 100", ErrInvalidArgument, t)
	}
	return nil
}

func (s *BootPolicies) ListBootPolicies(context.Context, *pactv1.ListBootPoliciesRequest) (*pactv1.ListBootPoliciesResponse, error) {
	return &pactv1.ListBootPoliciesResponse{Policies: s.cfg.Registry.BootPolicies()}, nil
}

func (s *BootPolicies) RemoveBootPolicy(ctx context.Context, req *pactv1.RemoveBootPolicyRequest) (*pactv1.RemoveBootPolicyResponse, error) {
	if err := s.cfg.Confirmer.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	if err := s.cfg.Levels.RequireLevel(ctx, raftfsm.LevelBootPolicies, "pact boot-policy remove"); err != nil {
		return nil, err
	}
	before, ok := s.cfg.Registry.BootPolicy(req.GetVcluster())
	if !ok {
		return nil, fmt.Errorf("%w: no boot policy for vCluster %q (pact boot-policy list)", ErrNotFound, req.GetVcluster())
	}
	actor := s.actor(ctx)
	if _, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: actor, Op: &pactv1.Command_RemoveBootPolicy{RemoveBootPolicy: &pactv1.RemoveBootPolicyOp{Vcluster: req.GetVcluster()}}}); err != nil {
		return nil, err
	}
	s.cfg.Logger.Warn("boot policy removed", logkey.VCluster, req.GetVcluster(), logkey.PolicyVersion, before.GetVersion(), logkey.Actor, actor)
	return &pactv1.RemoveBootPolicyResponse{Policy: before}, nil
}

// CaptureBootPolicy captures from the node's quote this journal holds
// (or asks its stream here for), else from another journal of the quorum
// that does.
func (s *BootPolicies) CaptureBootPolicy(ctx context.Context, req *pactv1.CaptureBootPolicyRequest) (*pactv1.CaptureBootPolicyResponse, error) {
	if n, ok := s.cfg.Registry.Node(req.GetNodeId()); ok && n.GetHardware().GetTpmEkHash() == "" {
		// No journal will ever hold a quote of it: say so, rather than
		// ask every journal and suggest a renewal.
		return nil, fmt.Errorf("%w: node %q is registered without a TPM EK hash: it enrolls without its TPM and never quotes its boot; capture from a node registered with --tpm-ek-hash (docs/tpm.md)", ErrInvalidArgument, req.GetNodeId())
	}
	return s.cfg.Boot.CaptureBootPolicy(ctx, req)
}

// actor is who the audit names for a change: the caller, or this journal
// for what it does itself.
func (s *BootPolicies) actor(ctx context.Context) string {
	if p := auth.FromContext(ctx); p != nil {
		return p.Actor()
	}
	return "journal/" + s.cfg.JournalID
}
