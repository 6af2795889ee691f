package journal

import (
	"context"
	"crypto/x509"
	"errors"
	"time"

	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/raftnode"
	"github.com/pact-hpc/pact/journal/ratelimit"
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

func (d rpcDeps) ProposeBatched(ctx context.Context, cmd *pactv1.Command) (*raftfsm.Result, error) {
	return d.j.proposeBatched(ctx, cmd)
}

func (d rpcDeps) Confirm(ctx context.Context, decide func() error, needs func(error) bool) error {
	return d.j.confirm(ctx, decide, needs)
}

func (d rpcDeps) Final(err error) bool { return isFinal(err) }

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

// enrollConfig is rpcConfig and what Enroll needs beside it.
func (j *Journal) enrollConfig() v1rpc.EnrollConfig {
	deps := rpcDeps{j}
	return v1rpc.EnrollConfig{
		Config: j.rpcConfig(), Admitter: deps, Checks: deps, Signer: deps, Batcher: deps, Chains: deps, Domain: j.ca.Domain(),
		Hub: rpcHub{j}, Attest: deps, Binder: j.auth, Bundle: deps, Meter: deps, Halt: j.raft, Intermediates: j.fsm,
		StreamRecheckInterval: j.cfg.StreamRecheckInterval, RenewalStreamGrace: j.cfg.RenewalStreamGrace,
	}
}

// AdmitEnroll takes the caller's source through the failure budget
// (admission.go) and a slot of the enrollment gate (gate.go,
// admitEnrollment).
func (d rpcDeps) AdmitEnroll(ctx context.Context) (func(*pactv1.EnrollRequest, v1rpc.Outcome, error), error) {
	j := d.j
	source := ratelimit.SourceOf(peerNetAddr(ctx))
	admitted, release, err := admitEnrollment(ctx, j.admission, j.gate, source)
	if err != nil {
		j.metrics.enroll.WithLabelValues(resultRateLimited).Inc()
		return nil, err
	}
	return func(req *pactv1.EnrollRequest, outcome v1rpc.Outcome, err error) {
		// Recorded before the slot and the budget are freed, so the next
		// caller waiting for the failure budget sees what this one spent.
		switch {
		case err == nil && outcome != v1rpc.OutcomeTPMChallenge:
			// A challenge is not yet a success: the source has proved
			// nothing.
			j.limiter.RecordSuccess(source, j.cfg.Clock.Now())
		case err != nil && outcome == v1rpc.OutcomeRefused:
			j.enrollRefused(ctx, req, source, err)
		}
		j.metrics.enroll.WithLabelValues(string(outcome)).Inc()
		release()
		admitted()
	}, nil
}

func (d rpcDeps) CheckKey(ctx context.Context, nodeID, spki string) error {
	return d.j.checkAdmission(ctx, nodeID, spki)
}

func (d rpcDeps) CheckCredentials(ctx context.Context, node *pactv1.Node, req *pactv1.EnrollRequest, csr *ca.CSR) (*pactv1.PresentedCredentials, *pactv1.TpmChallenge, error) {
	proof, err := d.j.checkCredentials(ctx, node, req, csr)
	var round1 *tpmChallengeIssued
	if errors.As(err, &round1) {
		return nil, round1.challenge, nil
	}
	return proof, nil, err
}

func (d rpcDeps) TakeoverCutoff(node *pactv1.Node) (int64, error) { return d.j.takeoverCutoff(node) }

func (d rpcDeps) Claims(ctx context.Context, node *pactv1.Node) (string, error) {
	return d.j.claimsDecision(ctx, node)
}

func (d rpcDeps) ChainFor(c *pactv1.CertificateInfo) (chain, bundle [][]byte, err error) {
	return d.j.chainFor(c)
}

func (d rpcDeps) RenewalTPM(ctx context.Context, nodeID string, req *pactv1.RenewCertRequest) (*pactv1.TpmChallenge, error) {
	return d.j.renewalTPMCheck(ctx, nodeID, req)
}

// AdmitRenewal takes a slot of the enrollment gate; finish counts how the
// renewal ended and frees it.
func (d rpcDeps) AdmitRenewal(ctx context.Context) (func(v1rpc.Outcome), error) {
	release, err := d.j.gate.acquire(ctx)
	if err != nil {
		d.j.metrics.renew.WithLabelValues(resultRateLimited).Inc()
		return nil, err
	}
	return func(o v1rpc.Outcome) {
		d.j.metrics.renew.WithLabelValues(string(o)).Inc()
		release()
	}, nil
}

func (d rpcDeps) CountRenewal(o v1rpc.Outcome) { d.j.metrics.renew.WithLabelValues(string(o)).Inc() }

func (d rpcDeps) EKRefusal(err error) bool { return tpmEKRefusal(err) }

func (d rpcDeps) TPMMismatch(m hwid.Mismatch, nodeID string) error { return tpmMismatch(m, nodeID) }

func (d rpcDeps) TPMRefusal(err error) bool { return tpmRefusal(err) }

// SignAgent signs with the live intermediate: never under a revoked
// journal CA (checkSigning), and after a re-key this journal waits for.
func (d rpcDeps) SignAgent(ctx context.Context, csr *ca.CSR, nodeID string) (*ca.Issued, error) {
	if err := d.j.checkSigning(); err != nil {
		return nil, err
	}
	if err := d.j.awaitLiveIntermediate(ctx); err != nil {
		return nil, err
	}
	return d.j.ca.SignAgent(csr, nodeID)
}

// peerConfig is rpcConfig and what the peer service and the quorum's
// status need beside it.
func (j *Journal) peerConfig() v1rpc.PeerConfig {
	return v1rpc.PeerConfig{Config: j.rpcConfig(), Raft: j.raft, RefusesUnknown: j.refusesUnknown}
}

// quorumConfig is peerConfig and what the AdminService's quorum calls
// need beside it.
func (j *Journal) quorumConfig() v1rpc.QuorumConfig {
	return v1rpc.QuorumConfig{
		Config: j.rpcConfig(), Raft: j.raft, Records: j.fsm, Authority: rpcAuthority{j},
		Federations: j.fsm, Federation: rpcDeps{j}, Snapshots: j.fsm,
		Domain: j.ca.Domain(), GRPCAddr: j.grpcAddr, RaftListen: j.cfg.RaftListen,
		RetireGrace: j.cfg.RetireGrace, OperatorLifetime: j.cfg.OperatorLifetime, MaxOperatorLifetime: j.cfg.MaxOperatorLifetime,
	}
}

// rpcAuthority is the journal's CA as v1rpc.Authority.
type rpcAuthority struct{ j *Journal }

func (a rpcAuthority) Root() *x509.Certificate    { return a.j.ca.Root() }
func (a rpcAuthority) Roots() []*x509.Certificate { return a.j.ca.Roots() }
func (a rpcAuthority) IntermediateSerial() string { return a.j.ca.IntermediateSerial() }
func (a rpcAuthority) SignOperator(csr *ca.CSR, name, role string, lifetime time.Duration) (*x509.Certificate, ca.OperatorIssuer, error) {
	return a.j.ca.SignOperator(csr, name, role, lifetime)
}
func (a rpcAuthority) CheckSigning() error                 { return a.j.checkSigning() }
func (a rpcAuthority) RevokedJournalCA() *pactv1.JournalCA { return a.j.revokedJournalCA() }
func (a rpcAuthority) AwaitLiveIntermediate(ctx context.Context) error {
	return a.j.awaitLiveIntermediate(ctx)
}

func (d rpcDeps) WakeFederation() { d.j.federation.wake() }

func (d rpcDeps) AdmitStandby(ctx context.Context) (func(), error) { return d.j.gate.acquire(ctx) }

func (d rpcDeps) Unattested(ctx context.Context, node *pactv1.Node) error {
	return d.j.unattestedIssue(ctx, node)
}

func (d rpcDeps) CaptureHere(ctx context.Context, req *pactv1.CaptureBootPolicyRequest) (*pactv1.CaptureBootPolicyResponse, error) {
	return d.j.captureLocal(ctx, req)
}

func (d rpcDeps) OpenStream(p *auth.Principal, req *pactv1.SubscribeRequest) v1rpc.AttestStream {
	return d.j.newStreamAttest(p, req)
}

func (d rpcDeps) Answer(ctx context.Context, p *auth.Principal, req *pactv1.AttestBootRequest) (*pactv1.AttestBootResponse, error) {
	return d.j.answerAttestBoot(ctx, p, req)
}

func (d rpcDeps) Current() ([][]byte, uint64) {
	tb := d.j.bundle.get()
	return tb.der, tb.version
}

func (d rpcDeps) StreamHandedOver()           { d.j.metrics.streamHandovers.Inc() }
func (d rpcDeps) StreamDropped(reason string) { d.j.metrics.streamDrops.WithLabelValues(reason).Inc() }

// rpcHub is the journal's stream hub as v1rpc.StreamHub.
type rpcHub struct{ j *Journal }

func (h rpcHub) Register(nodeID, serial string, conn v1rpc.ConnID) v1rpc.Waker {
	return h.j.hub.register(nodeID, serial, conn)
}
func (h rpcHub) Unregister(w v1rpc.Waker) { h.j.hub.unregister(w.(*streamWaker)) }
func (h rpcHub) RenewingOver(conn v1rpc.ConnID, nodeID, serial, renewed string) {
	h.j.hub.renewingOver(conn, nodeID, serial, renewed)
}
func (h rpcHub) HoldFirstState(ctx context.Context, serial string) {
	h.j.hub.holdFirstState(ctx, serial)
}
func (h rpcHub) Streaming(w v1rpc.Waker)              { h.j.hub.streaming(w.(*streamWaker)) }
func (h rpcHub) HasStream(nodeID, serial string) bool { return h.j.hub.hasStream(nodeID, serial) }
func (h rpcHub) OthersStreaming(w v1rpc.Waker) bool   { return h.j.hub.othersStreaming(w.(*streamWaker)) }
func (h rpcHub) Stopping() <-chan struct{}            { return h.j.stop }

// rpcStreamLimits are the per-certificate stream limits as
// v1rpc.StreamLimits.
type rpcStreamLimits struct{ j *Journal }

func (l rpcStreamLimits) Acquire(key, what string) (func(), error) {
	return l.j.streams.acquire(key, what)
}
func (l rpcStreamLimits) Refused() { l.j.metrics.streamsRefused.Inc() }

// adminServer is the AdminService: v1rpc's NodeAdmin (the node registry)
// and Quorum (the quorum's calls).
type adminServer struct {
	*v1rpc.NodeAdmin
	*v1rpc.Quorum
}

// requireLevel refuses a feature new at quorum feature level need while
// the quorum runs below it (docs/upgrade.md), naming the journals still to
// upgrade: it asks every member which level it speaks (the refusal path
// only).
func (j *Journal) requireLevel(ctx context.Context, need uint32, feature string) error {
	have := j.raft.QuorumLevel()
	if have >= need {
		return nil
	}
	return &raftfsm.QuorumVersionError{Feature: feature, Need: need, Have: have, Below: j.membersBelow(ctx, need)}
}

// membersBelow names the members whose binaries speak less than level.
func (j *Journal) membersBelow(ctx context.Context, level uint32) []string {
	members, err := j.raft.Members(ctx)
	if err != nil {
		return nil
	}
	return raftnode.MembersBelow(members, level)
}
