package journal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/measuredboot"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// maxBootEvidence bounds the nodes whose last verified quote a journal
// keeps (a boot storm of a large site fits).
const maxBootEvidence = 65536

// maxEventData bounds the data kept of each replayed event: enough to name
// a boot loader, kernel or command line, never a whole measured blob.
const maxEventData = 512

// bootRecord is a node's last verified quote, as this journal saw it.
type bootRecord struct {
	at time.Time
	ev *measuredboot.BootEvidence
}

// bootEvidence holds the last verified quote of each node this journal
// attested, in memory: it is evidence for an operator (pact boot-policy
// capture), not state the quorum agrees on.
type bootEvidence struct {
	mu    sync.Mutex
	max   int
	nodes map[string]bootRecord
}

func newBootEvidence(max int) *bootEvidence {
	return &bootEvidence{max: max, nodes: make(map[string]bootRecord)}
}

func (b *bootEvidence) put(node string, ev *measuredboot.BootEvidence, now time.Time) {
	for k := range ev.Events {
		if len(ev.Events[k].Data) > maxEventData {
			ev.Events[k].Data = ev.Events[k].Data[:maxEventData:maxEventData]
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.nodes[node]; !ok && len(b.nodes) >= b.max {
		// Full: forget the oldest.
		oldest, at := "", now
		for n, r := range b.nodes {
			if !r.at.After(at) {
				oldest, at = n, r.at
			}
		}
		delete(b.nodes, oldest)
	}
	b.nodes[node] = bootRecord{at: now, ev: ev}
}

func (b *bootEvidence) get(node string) (bootRecord, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.nodes[node]
	return r, ok
}

// bootPolicyLevel is the quorum feature level that knows boot policies.
const bootPolicyLevel = 3

// bootPolicyServer is pact boot-policy (docs/tpm.md, "Boot policies").
type bootPolicyServer struct {
	pactv1.UnimplementedBootPolicyServiceServer
	j *Journal
}

func (s *bootPolicyServer) SetBootPolicy(ctx context.Context, req *pactv1.SetBootPolicyRequest) (*pactv1.SetBootPolicyResponse, error) {
	j := s.j
	p := req.GetPolicy()
	if err := measuredboot.ValidatePolicy(p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if err := validateAttest(p); err != nil {
		return nil, err
	}
	if err := j.readBarrier(ctx); err != nil {
		return nil, err
	}
	if err := j.requireLevel(ctx, bootPolicyLevel, "pact boot-policy set"); err != nil {
		return nil, err
	}
	if _, err := j.propose(ctx, &pactv1.Command{Actor: actorOf(ctx, j), Op: &pactv1.Command_SetBootPolicy{SetBootPolicy: &pactv1.SetBootPolicyOp{
		Policy: p, ExpectVersion: req.GetExpectVersion(),
	}}}); err != nil {
		return nil, err
	}
	set, _ := j.fsm.BootPolicy(p.GetVcluster())
	j.log.Warn("boot policy set", logkey.VCluster, p.GetVcluster(), logkey.PolicyVersion, set.GetVersion(),
		logkey.Mode, p.GetMode().String(), logkey.Action, p.GetAction().String(), logkey.Actor, actorOf(ctx, j))
	return &pactv1.SetBootPolicyResponse{Policy: set}, nil
}

func (s *bootPolicyServer) ListBootPolicies(context.Context, *pactv1.ListBootPoliciesRequest) (*pactv1.ListBootPoliciesResponse, error) {
	return &pactv1.ListBootPoliciesResponse{Policies: s.j.fsm.BootPolicies()}, nil
}

func (s *bootPolicyServer) RemoveBootPolicy(ctx context.Context, req *pactv1.RemoveBootPolicyRequest) (*pactv1.RemoveBootPolicyResponse, error) {
	j := s.j
	if err := j.readBarrier(ctx); err != nil {
		return nil, err
	}
	if err := j.requireLevel(ctx, bootPolicyLevel, "pact boot-policy remove"); err != nil {
		return nil, err
	}
	before, ok := j.fsm.BootPolicy(req.GetVcluster())
	if !ok {
		return nil, fmt.Errorf("%w: no boot policy for vCluster %q (pact boot-policy list)", ErrNotFound, req.GetVcluster())
	}
	if _, err := j.propose(ctx, &pactv1.Command{Actor: actorOf(ctx, j), Op: &pactv1.Command_RemoveBootPolicy{RemoveBootPolicy: &pactv1.RemoveBootPolicyOp{Vcluster: req.GetVcluster()}}}); err != nil {
		return nil, err
	}
	j.log.Warn("boot policy removed", logkey.VCluster, req.GetVcluster(), logkey.PolicyVersion, before.GetVersion(), logkey.Actor, actorOf(ctx, j))
	return &pactv1.RemoveBootPolicyResponse{Policy: before}, nil
}

// CaptureBootPolicy captures from the node's quote this journal holds
// (or asks its stream here for), else from another journal of the quorum
// that does.
func (s *bootPolicyServer) CaptureBootPolicy(ctx context.Context, req *pactv1.CaptureBootPolicyRequest) (*pactv1.CaptureBootPolicyResponse, error) {
	if n, ok := s.j.fsm.Node(req.GetNodeId()); ok && n.GetHardware().GetTpmEkHash() == "" {
		// No journal will ever hold a quote of it: say so, rather than
		// ask every journal and suggest a renewal.
		return nil, fmt.Errorf("%w: node %q is registered without a TPM EK hash: it enrolls without its TPM and never quotes its boot; capture from a node registered with --tpm-ek-hash (docs/tpm.md)", ErrInvalidArgument, req.GetNodeId())
	}
	resp, err := s.j.captureLocal(ctx, req)
	if errors.Is(err, errNoBootEvidence) {
		return s.j.captureAtPeers(ctx, req, err)
	}
	return resp, err
}

// errNoBootEvidence: this journal holds no verified quote of the node and
// no stream of it that answers boot attestation.
var errNoBootEvidence = fmt.Errorf("%w: no verified TPM quote", ErrNotFound)

// captureLocal captures a policy from the node's last quote this journal
// verified, or a fresh one its stream here answers (errNoBootEvidence
// when neither).
func (j *Journal) captureLocal(ctx context.Context, req *pactv1.CaptureBootPolicyRequest) (*pactv1.CaptureBootPolicyResponse, error) {
	r, ok := j.boot.get(req.GetNodeId())
	if !ok {
		// Not verified here: a node that streams here is asked for a
		// fresh quote (attest.go).
		var err error
		if r, ok, err = j.freshQuote(ctx, req.GetNodeId()); err != nil {
			return nil, err
		}
	}
	if !ok {
		return nil, fmt.Errorf("%w of node %q on journal %s, and no stream of it that answers boot attestation", errNoBootEvidence, req.GetNodeId(), j.cfg.NodeID)
	}
	o := measuredboot.DefaultCapture()
	if len(req.GetPcrs())+len(req.GetEventPcrs()) > 0 {
		o = measuredboot.CaptureOptions{PCRs: ints(req.GetPcrs()), EventPCRs: ints(req.GetEventPcrs())}
	}
	o.IMA = req.GetIma()
	mode, action := req.GetMode(), req.GetAction()
	if mode == 0 {
		mode = pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE
	}
	if action == 0 {
		action = pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE
	}
	p, err := measuredboot.Capture(r.ev, o, mode, action)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	p.Vcluster = req.GetVcluster()
	p.Comment = fmt.Sprintf("captured from node %s's quote of %s (journal %s)", req.GetNodeId(), r.at.UTC().Format(time.RFC3339), j.cfg.NodeID)
	return &pactv1.CaptureBootPolicyResponse{Policy: p, QuotedAtUnixNano: r.at.UnixNano()}, nil
}

func ints(u []uint32) []int {
	out := make([]int, len(u))
	for k, v := range u {
		out[k] = int(v)
	}
	return out
}
