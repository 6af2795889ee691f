package journal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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

// captureBootPolicy captures from the node's quote this journal holds
// (or asks its stream here for), else from another journal of the quorum
// that does (pact boot-policy capture; v1rpc.BootPolicies).
func (j *Journal) captureBootPolicy(ctx context.Context, req *pactv1.CaptureBootPolicyRequest) (*pactv1.CaptureBootPolicyResponse, error) {
	resp, err := j.captureLocal(ctx, req)
	if errors.Is(err, errNoBootEvidence) {
		return j.captureAtPeers(ctx, req, err)
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
