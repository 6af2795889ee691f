package journal

import (
	"context"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/journal/auth"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The journal's side of journal/auth: what authentication reads of the
// registry, the bundle and Raft, and the interceptors around its own.

func newAuthenticator(j *Journal) (*auth.Authenticator, error) {
	cfg := auth.DefaultConfig()
	cfg.Domain = j.ca.Domain()
	cfg.Roots = j.ca.Roots()
	cfg.Clock = j.cfg.Clock
	cfg.ClockSkewTolerance = j.cfg.ClockSkewTolerance
	cfg.SPIREBundleFile = j.cfg.SPIREBundleFile
	cfg.SPIRESocket = j.cfg.SPIRESocket
	cfg.SPIRETrustDomain = j.cfg.SPIRETrustDomain
	cfg.Log = j.log
	cfg.Registry = j.fsm
	cfg.Bundle = j.bundle
	cfg.Quorum = authQuorum{j}
	cfg.PeerVerifier = j.peerAuth
	cfg.Peers = authPeers{j}
	cfg.Serving = j.serving
	cfg.Reason = func(err error) string { return string(apierr.FromError(toStatus(err)).Reason) }
	cfg.Refused = func(reason string) { j.metrics.authRefused.WithLabelValues(reason).Inc() }
	cfg.NoLeader = ErrNoLeader
	return auth.New(cfg)
}

// newPeerVerifier authenticates the other journals of the quorum, on the
// Raft port and the peer service, against the domain's roots and Raft's
// records (journal/auth's PeerVerifier): the Raft node is given it
// (startRaft), and so is the authenticator, for the peer service.
func newPeerVerifier(j *Journal) (*auth.PeerVerifier, error) {
	return auth.NewPeerVerifier(auth.PeerConfig{Domain: j.ca.Domain(), Roots: j.ca.Roots(), Records: j.fsm, Clock: j.cfg.Clock})
}

// LiveIntermediates implements auth.Bundle.
func (b *bundleCache) LiveIntermediates() auth.Intermediates {
	t := b.get()
	return auth.Intermediates{Version: t.version, Pool: t.intermediates, Certs: t.parsed}
}

// authQuorum is the Raft side of authentication (auth.Quorum).
type authQuorum struct{ j *Journal }

func (q authQuorum) IsLeader() bool { return q.j.IsLeader() }

func (q authQuorum) LinearizableRead(ctx context.Context) error { return q.j.readBarrier(ctx) }

func (q authQuorum) ConfirmFinal(ctx context.Context, decide func() error) error {
	return q.j.confirm(ctx, decide, isFinal)
}

func (q authQuorum) Confirm(ctx context.Context, decide func() error, needs func(error) bool) error {
	return q.j.confirm(ctx, decide, needs)
}

func (q authQuorum) RecordOperator(ctx context.Context, actor string, op *pactv1.Operator) error {
	_, err := q.j.propose(ctx, &pactv1.Command{Actor: actor, Op: &pactv1.Command_RecordOperator{RecordOperator: &pactv1.RecordOperatorOp{Operator: op}}})
	return err
}

// authPeers is the Raft node's side of the peer service's authentication
// (auth.Peers): the caller's quorum and membership, and the count of
// refused peers.
type authPeers struct{ j *Journal }

func (p authPeers) RefusedPeer(name string, err error) {
	p.j.raft.CountPeerRefusal("peer service", name, err)
}

// errUnpublishedPeer: a peer call other than the publish from a journal
// whose intermediate Raft has not published (auth.ErrPeerUnpublished).
var errUnpublishedPeer = auth.ErrPeerUnpublished

func (p authPeers) CheckPeerCall(ctx context.Context, name string, member bool) error {
	return p.j.raft.CheckPeerCall(ctx, name, member)
}

func (p authPeers) RemovedPeer(ctx context.Context, name string, refused error) error {
	return p.j.raft.RemovedPeer(ctx, name, refused)
}
