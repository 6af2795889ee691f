package journal

import (
	"context"

	"github.com/pact-hpc/pact/journal/v1rpc"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// rpcConfig is what the handlers of journal/v1rpc see of this journal:
// the registry, one proposer, one confirmer and the few facts they need,
// each behind the small interface v1rpc defines.
func (j *Journal) rpcConfig() v1rpc.Config {
	cfg := v1rpc.DefaultConfig()
	deps := rpcDeps{j}
	cfg.JournalID = j.cfg.NodeID
	cfg.Registry = j.fsm
	cfg.Proposer = deps
	cfg.Confirmer = deps
	cfg.Streams = deps
	cfg.Claims = deps
	cfg.Levels = deps
	cfg.Boot = deps
	cfg.NodeTrustDomain = j.nodeTrustDomain
	cfg.ToStatus = toStatus
	cfg.DigestInterval = j.cfg.DigestInterval
	cfg.Clock = j.cfg.Clock
	cfg.Logger = j.log
	return cfg
}

// rpcDeps adapts the journal to v1rpc's interfaces.
type rpcDeps struct{ j *Journal }

func (d rpcDeps) Propose(ctx context.Context, cmd *pactv1.Command) (*raftfsm.Result, error) {
	return d.j.propose(ctx, cmd)
}

func (d rpcDeps) ReadBarrier(ctx context.Context) error { return d.j.readBarrier(ctx) }

func (d rpcDeps) ConfirmFinal(ctx context.Context, decide func() error) error {
	return d.j.confirm(ctx, decide, isFinal)
}

func (d rpcDeps) ConfirmRule(ctx context.Context, decide func() error) error {
	return d.j.confirm(ctx, decide, isRuleError)
}

func (d rpcDeps) StreamCount(nodeID string) int { return d.j.hub.streamCount(nodeID) }

func (d rpcDeps) AlsoActive(n *pactv1.Node) []string { return d.j.alsoActive(n) }

func (d rpcDeps) RequireLevel(ctx context.Context, need uint32, feature string) error {
	return d.j.requireLevel(ctx, need, feature)
}

func (d rpcDeps) CaptureBootPolicy(ctx context.Context, req *pactv1.CaptureBootPolicyRequest) (*pactv1.CaptureBootPolicyResponse, error) {
	return d.j.captureBootPolicy(ctx, req)
}

// nodeTrustDomain is the SPIRE trust domain whose SPIFFE IDs map to nodes:
// the configured one, or the pact domain.
func (j *Journal) nodeTrustDomain() string {
	if td := j.auth.SPIRETrustDomain(); td != "" {
		return td
	}
	if td := j.cfg.SPIRETrustDomain; td != "" {
		return td
	}
	return j.ca.Domain()
}
