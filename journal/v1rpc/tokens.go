package v1rpc

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/jointoken"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Join token lifetimes: the default when none is asked for, and the
// longest allowed (a bootstrap token is meant to be used soon).
const (
	DefaultJoinTokenTTL = time.Hour
	MaxJoinTokenTTL     = 7 * 24 * time.Hour
)

// CreateJoinToken makes a token for a node. The token leaves this journal
// once, in the answer; Raft, the log and the audit see only its hash (or
// the hash's first digits).
func (s *NodeAdmin) CreateJoinToken(ctx context.Context, req *pactv1.CreateJoinTokenRequest) (*pactv1.CreateJoinTokenResponse, error) {
	p := auth.FromContext(ctx)
	ttl := time.Duration(req.GetTtlSeconds()) * time.Second
	switch {
	case req.GetTtlSeconds() == 0:
		ttl = DefaultJoinTokenTTL
	case req.GetTtlSeconds() < 0 || ttl > MaxJoinTokenTTL:
		return nil, fmt.Errorf("%w: token lifetime %ds: give 1s to %s", ErrInvalidArgument, req.GetTtlSeconds(), MaxJoinTokenTTL)
	}
	var n *pactv1.Node
	if err := s.cfg.Confirmer.ConfirmRule(ctx, func() (err error) { n, err = s.liveNode(req.GetNodeId()); return err }); err != nil {
		return nil, err
	}
	tok, err := jointoken.New()
	if err != nil {
		return nil, err
	}
	now := s.cfg.Clock.Now()
	op := &pactv1.CreateJoinTokenOp{Token: &pactv1.JoinToken{
		Sha256:            tok.Sum(),
		NodeId:            n.GetNodeId(),
		ExpiresAtUnixNano: now.Add(ttl).UnixNano(),
	}}
	if _, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_CreateJoinToken{CreateJoinToken: op}}); err != nil {
		return nil, err
	}
	var info *pactv1.JoinTokenInfo
	for _, t := range s.cfg.Registry.JoinTokens(n.GetNodeId()) {
		if t.GetSha256() == op.GetToken().GetSha256() {
			info = tokenInfo(t)
		}
	}
	if info == nil {
		// Committed and applied here, so only a prune by a later entry
		// stamped past its expiry can have removed it: describe what was
		// asked for.
		info = tokenInfo(op.GetToken())
	}
	s.cfg.Logger.Info("join token created", logkey.NodeID, n.GetNodeId(), logkey.TokenID, info.GetId(), logkey.Actor, p.ID.Name,
		logkey.Expires, time.Unix(0, info.GetExpiresAtUnixNano()).UTC().Format(time.RFC3339))
	if !raftfsm.RequiresJoinToken(n) {
		s.cfg.Logger.Info("join token created for a node that does not require one; the agent's token is ignored until the node is registered with --require-token", logkey.NodeID, n.GetNodeId())
	}
	return &pactv1.CreateJoinTokenResponse{Token: string(tok), Info: info}, nil
}

func tokenInfo(t *pactv1.JoinToken) *pactv1.JoinTokenInfo {
	return &pactv1.JoinTokenInfo{
		Id:                raftfsm.JoinTokenID(t.GetSha256()),
		NodeId:            t.GetNodeId(),
		CreatedAtUnixNano: t.GetCreatedAtUnixNano(),
		CreatedBy:         t.GetCreatedBy(),
		ExpiresAtUnixNano: t.GetExpiresAtUnixNano(),
		UsedAtUnixNano:    t.GetUsedAtUnixNano(),
	}
}

// ListJoinTokens answers from this journal's copy, like ListNodes.
func (s *NodeAdmin) ListJoinTokens(_ context.Context, req *pactv1.ListJoinTokensRequest) (*pactv1.ListJoinTokensResponse, error) {
	out := &pactv1.ListJoinTokensResponse{}
	for _, t := range s.cfg.Registry.JoinTokens(req.GetNodeId()) {
		out.Tokens = append(out.Tokens, tokenInfo(t))
	}
	return out, nil
}

// RevokeJoinTokens deletes a node's unused tokens (all, or the one named).
func (s *NodeAdmin) RevokeJoinTokens(ctx context.Context, req *pactv1.RevokeJoinTokensRequest) (*pactv1.RevokeJoinTokensResponse, error) {
	p := auth.FromContext(ctx)
	id := strings.ToLower(req.GetId())
	if id != "" && (len(id) < 6 || len(id) > 64 || strings.Trim(id, "0123456789abcdef") != "") {
		return nil, fmt.Errorf("%w: token id %q: give the hex id pact node token list shows (at least 6 digits)", ErrInvalidArgument, req.GetId())
	}
	var n *pactv1.Node
	if err := s.cfg.Confirmer.ConfirmRule(ctx, func() (err error) { n, err = s.liveNode(req.GetNodeId()); return err }); err != nil {
		return nil, err
	}
	var revoked []*pactv1.JoinTokenInfo
	for _, t := range s.cfg.Registry.JoinTokens(n.GetNodeId()) {
		if t.GetUsedAtUnixNano() == 0 && strings.HasPrefix(t.GetSha256(), id) {
			revoked = append(revoked, tokenInfo(t))
		}
	}
	if len(revoked) == 0 {
		what := "no unused join token"
		if id != "" {
			what += " with id " + id
		}
		return nil, fmt.Errorf("%w: %s for node %s (pact node token list %s)", ErrNotFound, what, n.GetNodeId(), n.GetNodeId())
	}
	if _, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_RevokeJoinTokens{RevokeJoinTokens: &pactv1.RevokeJoinTokensOp{
		NodeId: n.GetNodeId(), Sha256Prefix: id,
	}}}); err != nil {
		return nil, err
	}
	s.cfg.Logger.Info("join tokens revoked", logkey.NodeID, n.GetNodeId(), logkey.Actor, p.ID.Name, logkey.Count, len(revoked))
	return &pactv1.RevokeJoinTokensResponse{Revoked: revoked}, nil
}

// FenceNode quarantines a node. Its certificate is revoked in the same
// entry, so every journal closes its streams as soon as it applies it.
func (s *NodeAdmin) FenceNode(ctx context.Context, req *pactv1.FenceNodeRequest) (*pactv1.FenceNodeResponse, error) {
	p := auth.FromContext(ctx)
	if err := raftfsm.ValidateFenceReason(req.GetReason()); err != nil {
		return nil, err
	}
	var n *pactv1.Node
	if err := s.cfg.Confirmer.ConfirmRule(ctx, func() (err error) { n, err = s.liveNode(req.GetNodeId()); return err }); err != nil {
		return nil, err
	}
	if already, ok := s.fenceIs(ctx, n.GetNodeId(), true); ok {
		s.cfg.Logger.Info("node already fenced", logkey.NodeID, n.GetNodeId(), logkey.Actor, p.ID.Name)
		return &pactv1.FenceNodeResponse{Node: s.view(already), Unchanged: true}, nil
	}
	res, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_Fence{Fence: &pactv1.FenceOp{
		NodeId: n.GetNodeId(), Fenced: true, Reason: req.GetReason(),
	}}})
	if err != nil {
		return nil, err
	}
	if res.Idempotent {
		s.cfg.Logger.Info("node already fenced", logkey.NodeID, n.GetNodeId(), logkey.Actor, p.ID.Name)
	} else {
		s.cfg.Logger.Warn("node fenced", logkey.NodeID, n.GetNodeId(), logkey.Actor, p.ID.Name, logkey.Reason, req.GetReason(), logkey.Serial, n.GetCert().GetSerial())
	}
	return &pactv1.FenceNodeResponse{Node: s.view(res.Node), Unchanged: res.Idempotent}, nil
}

// fenceIs returns the node when the leader-confirmed registry already has
// it fenced (fenced true) or not fenced (false): fence and unfence then
// answer "unchanged" and write nothing to Raft, as a registration that
// exists does. Without a leader to confirm it says no, and the command goes
// to the state machine, which gives the final answer.
func (s *NodeAdmin) fenceIs(ctx context.Context, id string, fenced bool) (*pactv1.Node, bool) {
	n, ok := s.cfg.Registry.Node(id)
	if !ok || (n.GetFence() != nil) != fenced {
		return nil, false
	}
	if err := s.cfg.Confirmer.ReadBarrier(ctx); err != nil {
		return nil, false
	}
	n, ok = s.cfg.Registry.Node(id)
	if !ok || (n.GetFence() != nil) != fenced || n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		return nil, false
	}
	return n, true
}

// UnfenceNode lifts a fence. The node's old certificate stays revoked: the
// agent enrolls again.
func (s *NodeAdmin) UnfenceNode(ctx context.Context, req *pactv1.UnfenceNodeRequest) (*pactv1.UnfenceNodeResponse, error) {
	p := auth.FromContext(ctx)
	var n *pactv1.Node
	if err := s.cfg.Confirmer.ConfirmRule(ctx, func() (err error) { n, err = s.liveNode(req.GetNodeId()); return err }); err != nil {
		return nil, err
	}
	if notFenced, ok := s.fenceIs(ctx, n.GetNodeId(), false); ok {
		return &pactv1.UnfenceNodeResponse{Node: s.view(notFenced), Unchanged: true}, nil
	}
	res, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{Actor: p.Actor(), Op: &pactv1.Command_Fence{Fence: &pactv1.FenceOp{NodeId: n.GetNodeId()}}})
	if err != nil {
		return nil, err
	}
	if !res.Idempotent {
		s.cfg.Logger.Info("node unfenced", logkey.NodeID, n.GetNodeId(), logkey.Actor, p.ID.Name)
	}
	return &pactv1.UnfenceNodeResponse{Node: s.view(res.Node), Unchanged: res.Idempotent}, nil
}

// liveNode looks a node up in this journal's copy and refuses a
// decommissioned one: fencing or a token would mean nothing for it. Its
// refusals are rule errors, so the callers confirm them
// (ConfirmRule): "no such node" stands only once the leader's state says so
// (the registration may have just committed elsewhere).
func (s *NodeAdmin) liveNode(id string) (*pactv1.Node, error) {
	n, err := s.node(id)
	if err != nil {
		return nil, err
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		return nil, fmt.Errorf("%w: %s was decommissioned; register it again first", raftfsm.ErrNodeRevoked, id)
	}
	return n, nil
}
