package v1rpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/auth"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// MaxBatch is the most rows one RegisterNodes call may carry.
const MaxBatch = 1000

// The audit entries ListAudit returns when no limit is asked for, and the
// most it returns: the size of the audit ring.
const (
	defaultAuditLimit = 1000
	maxAuditLimit     = raftfsm.DefaultAuditCapacity
)

// NodeAdmin is the AdminService's node registry: register, update, list,
// inspect, decommission, assign, unassign, move, audit, join tokens and
// fences. The journal's server embeds it and adds the AdminService's other
// calls.
type NodeAdmin struct {
	pactv1.UnimplementedAdminServiceServer
	cfg Config
}

// NewNodeAdmin returns the node registry handlers over cfg's dependencies.
func NewNodeAdmin(cfg Config) (*NodeAdmin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &NodeAdmin{cfg: cfg}, nil
}

// registerOp validates one registration request into a command.
func (s *NodeAdmin) registerOp(req *pactv1.RegisterNodeRequest) (*pactv1.RegisterNodeOp, error) {
	var errs []error
	if err := pki.ValidateName("node id", req.GetNodeId()); err != nil {
		errs = append(errs, err)
	}
	if v := req.GetVcluster(); v != "" {
		if err := pki.ValidateName("vcluster", v); err != nil {
			errs = append(errs, err)
		}
	}
	id, err := hwid.Normalize(req.GetHardware().GetMacs(), req.GetHardware().GetBmcSerial(), req.GetHardware().GetTpmEkHash())
	if err != nil {
		errs = append(errs, err)
	}
	if err := hwid.CheckUnicast(id.MACs); err != nil {
		errs = append(errs, err)
	}
	if sid := req.GetSpiffeId(); sid != "" {
		if err := raftfsm.ValidateSPIFFEID(req.GetNodeId(), sid); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidArgument, err))
		} else if td := s.cfg.NodeTrustDomain(); !strings.HasPrefix(sid, "spiffe://"+td+"/") {
			errs = append(errs, fmt.Errorf("%w: spiffe_id %s is not in the SPIRE trust domain %s this journal accepts SVIDs from (--spire-trust-domain)", ErrInvalidArgument, sid, td))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	op := &pactv1.RegisterNodeOp{NodeId: req.GetNodeId(), Hardware: HardwareProto(id), Vcluster: req.GetVcluster(), SpiffeId: req.GetSpiffeId()}
	if c := req.GetCredentials(); c != nil && !proto.Equal(c, &pactv1.CredentialPolicy{}) {
		op.Credentials = c
	}
	return op, nil
}

func (s *NodeAdmin) RegisterNode(ctx context.Context, req *pactv1.RegisterNodeRequest) (*pactv1.RegisterNodeResponse, error) {
	p := auth.FromContext(ctx)
	op, err := s.registerOp(req)
	if err != nil {
		return nil, err
	}
	if n, ok := s.registered(ctx, op); ok {
		return &pactv1.RegisterNodeResponse{Node: s.view(n), Exists: true}, nil
	}
	res, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_RegisterNode{RegisterNode: op}})
	if err != nil {
		if errors.Is(err, raftfsm.ErrNodeAlreadyEnrolled) && res != nil && sameRegistration(res.Node, op) {
			// Registered concurrently with exactly this: the same answer.
			return &pactv1.RegisterNodeResponse{Node: s.view(res.Node), Exists: true}, nil
		}
		return nil, err
	}
	s.cfg.Logger.Info("node registered", logkey.NodeID, req.GetNodeId(), logkey.Actor, p.ID.Name, logkey.MACs, op.GetHardware().GetMacs(), logkey.SPIFFEID, op.GetSpiffeId())
	return &pactv1.RegisterNodeResponse{Node: s.view(res.Node)}, nil
}

// RegisterNodes registers each row independently. Rows are proposed
// concurrently so Raft commits them in batches; each gets its own result.
func (s *NodeAdmin) RegisterNodes(ctx context.Context, req *pactv1.RegisterNodesRequest) (*pactv1.RegisterNodesResponse, error) {
	p := auth.FromContext(ctx)
	rows := req.GetNodes()
	if len(rows) > MaxBatch {
		return nil, fmt.Errorf("%w: %d rows in one call (at most %d)", ErrInvalidArgument, len(rows), MaxBatch)
	}
	results := make([]*pactv1.RegisterNodeResult, len(rows))
	// One read confirmed by the leader makes this journal's copy current,
	// so rows already registered exactly so are answered without a Raft
	// write: re-running a file writes nothing for them.
	current := s.cfg.Confirmer.ReadBarrier(ctx) == nil
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i, row := range rows {
		results[i] = &pactv1.RegisterNodeResult{NodeId: row.GetNodeId()}
		op, err := s.registerOp(row)
		if err != nil {
			s.setResult(results[i], err)
			continue
		}
		if n, ok := s.cfg.Registry.Node(op.GetNodeId()); current && ok && n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED && sameRegistration(n, op) {
			results[i].Outcome = pactv1.RegisterOutcome_REGISTER_OUTCOME_EXISTS
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(r *pactv1.RegisterNodeResult, op *pactv1.RegisterNodeOp) {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_RegisterNode{RegisterNode: op}})
			switch {
			case err == nil:
				r.Outcome = pactv1.RegisterOutcome_REGISTER_OUTCOME_OK
			case errors.Is(err, raftfsm.ErrNodeAlreadyEnrolled) && res != nil && sameRegistration(res.Node, op):
				// A re-run of the same file: nothing to do.
				r.Outcome = pactv1.RegisterOutcome_REGISTER_OUTCOME_EXISTS
			default:
				s.setResult(r, err)
			}
		}(results[i], op)
	}
	wg.Wait()
	return &pactv1.RegisterNodesResponse{Results: results}, nil
}

func (s *NodeAdmin) setResult(r *pactv1.RegisterNodeResult, err error) {
	r.Outcome = pactv1.RegisterOutcome_REGISTER_OUTCOME_ERROR
	pe := apierr.FromError(s.cfg.ToStatus(err))
	r.Reason, r.Message = string(pe.Reason), pe.Message
}

// UpdateNode replaces the hardware identifiers the request sets, after a
// linearizable read so the merge starts from the latest record; the state
// machine re-checks uniqueness and the node's state.
func (s *NodeAdmin) UpdateNode(ctx context.Context, req *pactv1.UpdateNodeRequest) (*pactv1.UpdateNodeResponse, error) {
	p := auth.FromContext(ctx)
	if err := pki.ValidateName("node id", req.GetNodeId()); err != nil {
		return nil, err
	}
	if len(req.GetMacs()) == 0 && req.BmcSerial == nil && req.TpmEkHash == nil {
		return nil, fmt.Errorf("%w: nothing to update: set macs, bmc_serial or tpm_ek_hash", ErrInvalidArgument)
	}
	if err := s.cfg.Confirmer.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	n, err := s.node(req.GetNodeId())
	if err != nil {
		return nil, err
	}
	macs, bmc, ek := n.GetHardware().GetMacs(), n.GetHardware().GetBmcSerial(), n.GetHardware().GetTpmEkHash()
	if len(req.GetMacs()) > 0 {
		macs = req.GetMacs()
	}
	if req.BmcSerial != nil {
		bmc = req.GetBmcSerial()
	}
	if req.TpmEkHash != nil {
		ek = req.GetTpmEkHash()
	}
	id, err := hwid.Normalize(macs, bmc, ek)
	if err == nil {
		err = hwid.CheckUnicast(id.MACs)
	}
	if err != nil {
		return nil, err
	}
	res, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_UpdateNode{UpdateNode: &pactv1.UpdateNodeOp{NodeId: req.GetNodeId(), Hardware: HardwareProto(id)}}})
	if err != nil {
		return nil, err
	}
	if !res.Idempotent {
		s.cfg.Logger.Info("node updated", logkey.NodeID, req.GetNodeId(), logkey.Actor, p.ID.Name, logkey.MACs, id.MACs)
	}
	return &pactv1.UpdateNodeResponse{Node: s.view(res.Node), Unchanged: res.Idempotent}, nil
}

// registered returns the node op would register when it already exists
// exactly so, read after the leader confirmed this journal's copy is
// current. On any doubt (no leader to confirm) it says no, and the write
// goes ahead to the state machine, which gives the final answer.
func (s *NodeAdmin) registered(ctx context.Context, op *pactv1.RegisterNodeOp) (*pactv1.Node, bool) {
	if err := s.cfg.Confirmer.ReadBarrier(ctx); err != nil {
		return nil, false
	}
	n, ok := s.cfg.Registry.Node(op.GetNodeId())
	if !ok || n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED || !sameRegistration(n, op) {
		return nil, false
	}
	return n, true
}

// sameRegistration reports whether an existing record is exactly what op
// would register (so a re-run reports "exists", not an error).
func sameRegistration(n *pactv1.Node, op *pactv1.RegisterNodeOp) bool {
	if n == nil || n.GetVcluster() != op.GetVcluster() || n.GetSpiffeId() != op.GetSpiffeId() ||
		!proto.Equal(n.GetCredentials(), op.GetCredentials()) {
		return false
	}
	a, b := n.GetHardware(), op.GetHardware()
	if a.GetBmcSerial() != b.GetBmcSerial() || a.GetTpmEkHash() != b.GetTpmEkHash() || len(a.GetMacs()) != len(b.GetMacs()) {
		return false
	}
	for i := range a.GetMacs() {
		if a.GetMacs()[i] != b.GetMacs()[i] {
			return false
		}
	}
	return true
}

func (s *NodeAdmin) ListNodes(_ context.Context, req *pactv1.ListNodesRequest) (*pactv1.ListNodesResponse, error) {
	if v := req.GetVcluster(); v != "" && req.GetUnassigned() {
		return nil, fmt.Errorf("%w: --vcluster and --unassigned exclude each other", ErrInvalidArgument)
	}
	fl := raftfsm.Filter{State: req.GetState(), VCluster: req.GetVcluster(), Unassigned: req.GetUnassigned(),
		Fenced: req.GetFenced(), Released: req.GetReleased()}
	var errs []error
	if m := req.GetMac(); m != "" {
		var err error
		if fl.MAC, err = hwid.NormalizeMAC(m); err != nil {
			errs = append(errs, fmt.Errorf("%w: mac: %w", ErrInvalidArgument, err))
		}
	}
	if b := req.GetBmcSerial(); b != "" {
		var err error
		if fl.BMCSerial, err = hwid.NormalizeBMCSerial(b); err != nil {
			errs = append(errs, fmt.Errorf("%w: bmc serial: %w", ErrInvalidArgument, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// The applied index is read first: the nodes listed are at least that
	// fresh.
	applied := s.cfg.Registry.AppliedIndex()
	out, next, err := listPage(s.cfg.Registry.Nodes(fl), s.view, req.GetPageToken(), req.GetPageSize(), listPageBytes)
	if err != nil {
		return nil, err
	}
	resp := &pactv1.ListNodesResponse{Nodes: out, ServedBy: s.cfg.JournalID, AppliedIndex: applied, NextPageToken: next}
	for _, n := range out {
		if also := s.cfg.Claims.AlsoActive(n); len(also) > 0 {
			if resp.AlsoActive == nil {
				resp.AlsoActive = map[string]string{}
			}
			resp.AlsoActive[n.GetNodeId()] = strings.Join(also, "; ")
		}
	}
	return resp, nil
}

func (s *NodeAdmin) InspectNode(ctx context.Context, req *pactv1.InspectNodeRequest) (*pactv1.InspectNodeResponse, error) {
	if err := s.cfg.Confirmer.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	n, err := s.node(req.GetNodeId())
	if err != nil {
		return nil, err
	}
	v := s.view(n)
	// Inspect alone says which claims the latest activation decided on
	// (lists stay lean: a line per federated domain per node).
	v.ClaimsChecked = n.GetClaimsChecked()
	return &pactv1.InspectNodeResponse{Node: v, AlsoActive: s.cfg.Claims.AlsoActive(n)}, nil
}

func (s *NodeAdmin) node(id string) (*pactv1.Node, error) {
	n, ok := s.cfg.Registry.Node(id)
	if !ok {
		return nil, fmt.Errorf("%w: no node %q in the registry", raftfsm.ErrNodeNotEnrolled, id)
	}
	return n, nil
}

// DecommissionNode revokes a node. While the node is streaming (to any
// journal, as far as the liveness digests tell) it refuses unless forced.
func (s *NodeAdmin) DecommissionNode(ctx context.Context, req *pactv1.DecommissionNodeRequest) (*pactv1.DecommissionNodeResponse, error) {
	p := auth.FromContext(ctx)
	var n *pactv1.Node
	err := s.cfg.Confirmer.ConfirmFinal(ctx, func() (err error) {
		if n, err = s.node(req.GetNodeId()); err != nil {
			return err
		}
		if !req.GetForce() {
			if streaming, ago := s.streaming(n); streaming {
				return fmt.Errorf("%w: node %s is running (stream seen %s ago); decommissioning cuts it off: re-run with --force", ErrNodeStreaming, n.GetNodeId(), ago.Round(time.Second))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_Decommission{Decommission: &pactv1.DecommissionOp{NodeId: n.GetNodeId()}}})
	if err != nil {
		return nil, err
	}
	s.cfg.Logger.Info("node decommissioned", logkey.NodeID, n.GetNodeId(), logkey.Actor, p.ID.Name, logkey.Serial, n.GetCert().GetSerial(), logkey.Forced, req.GetForce())
	return &pactv1.DecommissionNodeResponse{Node: s.view(res.Node)}, nil
}

// streaming reports whether the node holds a stream here, or a journal
// reported one within two digest intervals.
func (s *NodeAdmin) streaming(n *pactv1.Node) (bool, time.Duration) {
	if s.cfg.Streams.StreamCount(n.GetNodeId()) > 0 {
		return true, 0
	}
	if n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
		return false, 0
	}
	ago := s.cfg.Clock.Now().Sub(time.Unix(0, s.cfg.Registry.LastSeen(n.GetNodeId())))
	return ago < 2*s.cfg.DigestInterval, ago
}

func (s *NodeAdmin) AssignNode(ctx context.Context, req *pactv1.AssignNodeRequest) (*pactv1.AssignNodeResponse, error) {
	if req.GetVcluster() == "" {
		return nil, fmt.Errorf("%w: a vCluster is required; to put a node into maintenance use unassign", ErrInvalidArgument)
	}
	n, _, err := s.setVCluster(ctx, req.GetNodeId(), req.GetVcluster(), func(from string) bool { return from == "" })
	if err != nil {
		return nil, err
	}
	return &pactv1.AssignNodeResponse{Node: n}, nil
}

func (s *NodeAdmin) UnassignNode(ctx context.Context, req *pactv1.UnassignNodeRequest) (*pactv1.UnassignNodeResponse, error) {
	n, prev, err := s.setVCluster(ctx, req.GetNodeId(), "", nil)
	if err != nil {
		return nil, err
	}
	return &pactv1.UnassignNodeResponse{Node: n, PreviousVcluster: prev}, nil
}

func (s *NodeAdmin) MoveNode(ctx context.Context, req *pactv1.MoveNodeRequest) (*pactv1.MoveNodeResponse, error) {
	if req.GetToVcluster() == "" {
		return nil, fmt.Errorf("%w: a target vCluster is required; to put a node into maintenance use unassign", ErrInvalidArgument)
	}
	n, prev, err := s.setVCluster(ctx, req.GetNodeId(), req.GetToVcluster(), func(from string) bool { return from != "" })
	if err != nil {
		return nil, err
	}
	return &pactv1.MoveNodeResponse{Node: n, PreviousVcluster: prev}, nil
}

// setVCluster authorises and commits a vCluster change in one Raft write.
// The command carries the assignment the decision was made on, so it cannot
// apply to a node that moved in between.
func (s *NodeAdmin) setVCluster(ctx context.Context, nodeID, to string, fromOK func(string) bool) (*pactv1.Node, string, error) {
	p := auth.FromContext(ctx)
	if to != "" {
		if err := pki.ValidateName("vcluster", to); err != nil {
			return nil, "", err
		}
	}
	var from string
	err := s.cfg.Confirmer.ConfirmFinal(ctx, func() error {
		n, err := s.node(nodeID)
		if err != nil {
			return err
		}
		from = n.GetVcluster()
		if own := auth.OpsVCluster(p.Role); own != "" {
			// pact-ops-V may only move nodes into and out of V: every
			// vCluster the change touches must be V. Checked first, so a
			// role learns nothing about nodes outside its vCluster.
			for _, v := range []string{from, to} {
				if v != "" && v != own {
					return fmt.Errorf("%w: role %s may only move nodes into and out of %s; %s touches %s", auth.ErrPermission, p.Role, own, nodeID, v)
				}
			}
		}
		if fromOK != nil && !fromOK(from) {
			if from == "" {
				return fmt.Errorf("%w: %s is in maintenance (no vCluster); use assign", raftfsm.ErrVClusterChanged, nodeID)
			}
			return fmt.Errorf("%w: %s is already in %s; use move", raftfsm.ErrVClusterChanged, nodeID, from)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	res, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_Assign{Assign: &pactv1.AssignOp{
		NodeId: nodeID, Vcluster: to, ExpectVcluster: from,
	}}})
	if err != nil {
		return nil, "", err
	}
	s.cfg.Logger.Info("node assignment changed", logkey.NodeID, nodeID, logkey.Actor, p.ID.Name, logkey.From, from, logkey.To, to)
	return s.view(res.Node), from, nil
}

func (s *NodeAdmin) ListAudit(_ context.Context, req *pactv1.ListAuditRequest) (*pactv1.ListAuditResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = defaultAuditLimit
	case limit < 0 || limit > maxAuditLimit:
		// Capping silently would look like the whole history.
		return nil, fmt.Errorf("%w: audit limit %d: ask for 1 to %d entries (the most the audit keeps), or 0 for %d", ErrInvalidArgument, limit, maxAuditLimit, defaultAuditLimit)
	}
	return &pactv1.ListAuditResponse{Entries: s.cfg.Registry.Audit(req.GetNodeId(), req.GetSinceUnixNano(), limit)}, nil
}

// view returns a copy of n for operators: without the certificate DER (they
// see serial, key fingerprint and expiry) and with its last sighting.
func (s *NodeAdmin) view(n *pactv1.Node) *pactv1.Node {
	if n == nil {
		return nil
	}
	out := &pactv1.Node{
		NodeId:               n.GetNodeId(),
		Hardware:             n.GetHardware(),
		State:                n.GetState(),
		Vcluster:             n.GetVcluster(),
		RegisteredAtUnixNano: n.GetRegisteredAtUnixNano(),
		RegisteredBy:         n.GetRegisteredBy(),
		UpdatedAtUnixNano:    n.GetUpdatedAtUnixNano(),
		ActivatedAtUnixNano:  n.GetActivatedAtUnixNano(),
		LastSeenUnixNano:     s.cfg.Registry.LastSeen(n.GetNodeId()),
		RevokedAtUnixNano:    n.GetRevokedAtUnixNano(),
		RevokedBy:            n.GetRevokedBy(),
		SpiffeId:             n.GetSpiffeId(),
		Credentials:          n.GetCredentials(),
		Fence:                n.GetFence(),
	}
	out.Cert = certSummary(n.GetCert())
	out.StandbyCert = certSummary(n.GetStandbyCert())
	if raftfsm.Released(n) {
		// Only while it means something: the agent of the current
		// certificate stopped cleanly, and the node may enroll at once.
		out.ReleasedSerial = n.GetReleasedSerial()
	}
	return out
}

// certSummary is a certificate's record without its DER, or nil.
func certSummary(c *pactv1.CertificateInfo) *pactv1.CertificateInfo {
	if c == nil {
		return nil
	}
	return &pactv1.CertificateInfo{
		Serial:        c.GetSerial(),
		SpkiSha256:    c.GetSpkiSha256(),
		NotBeforeUnix: c.GetNotBeforeUnix(),
		NotAfterUnix:  c.GetNotAfterUnix(),
		IssuerSerial:  c.GetIssuerSerial(),
	}
}

// HardwareProto is a normalised hardware identity as the registry holds it.
func HardwareProto(id hwid.Identity) *pactv1.HardwareIdentity {
	return &pactv1.HardwareIdentity{Macs: id.MACs, BmcSerial: id.BMCSerial, TpmEkHash: id.EKHash}
}
