package journal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/ratelimit"
	"github.com/pact-hpc/pact/journal/v1rpc"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

type enrollmentServer struct {
	pactv1.UnimplementedEnrollmentServiceServer
	j *Journal
}

// Enroll is the one unauthenticated RPC. It answers only from local state
// until the request has passed every check; a failed attempt is logged
// locally, counted against its source, and never becomes a Raft write.
func (s *enrollmentServer) Enroll(ctx context.Context, req *pactv1.EnrollRequest) (*pactv1.EnrollResponse, error) {
	j := s.j
	source := ratelimit.SourceOf(peerNetAddr(ctx))
	// Admission before cost: refused here, a call has cost a map lookup.
	admitted, err := j.admission.admit(ctx, source)
	if err != nil {
		j.metrics.enroll.WithLabelValues(resultRateLimited).Inc()
		return nil, err
	}
	// Runs after the outcome is recorded below, so the next caller waiting
	// for the failure budget sees what this one spent.
	defer admitted()
	release, err := j.gate.acquire(ctx)
	if err != nil {
		j.metrics.enroll.WithLabelValues(resultRateLimited).Inc()
		return nil, err
	}
	defer release()
	resp, outcome, err := j.enroll(ctx, req)
	if err == nil {
		if outcome != resultTPMChallenge {
			// A challenge is not yet a success: the source has proved
			// nothing.
			j.limiter.RecordSuccess(source, j.cfg.Clock.Now())
		}
		j.metrics.enroll.WithLabelValues(outcome).Inc()
		return resp, nil
	}
	if outcome == resultRefused {
		j.enrollRefused(ctx, req, source, err)
	}
	j.metrics.enroll.WithLabelValues(outcome).Inc()
	return nil, err
}

// enroll does the work of Enroll and says how it ended: ok, retry (same
// key, same certificate), takeover, tpm_challenge (round one of TPM
// attestation), refused (the caller's fault: counted and rate limited) or
// error (ours).
func (j *Journal) enroll(ctx context.Context, req *pactv1.EnrollRequest) (*pactv1.EnrollResponse, string, error) {
	resp, outcome, err := j.enrollOnce(ctx, req)
	if tpmEKRefusal(err) {
		// The refusal rests on the registered EK hash as this journal's
		// copy has it. Only the leader's word is final: confirm the state,
		// then decide again (nothing was stored or written before these
		// refusals, so deciding twice is safe).
		if rerr := j.readBarrier(ctx); rerr != nil {
			return nil, resultError, fmt.Errorf("%w: cannot confirm the node's TPM registration with the leader (%w); retry", ErrNoLeader, rerr)
		}
		return j.enrollOnce(ctx, req)
	}
	return resp, outcome, err
}

func (j *Journal) enrollOnce(ctx context.Context, req *pactv1.EnrollRequest) (*pactv1.EnrollResponse, string, error) {
	rep, err := hwid.Normalize(req.GetHardware().GetMacs(), req.GetHardware().GetBmcSerial(), req.GetHardware().GetTpmEkHash())
	if err != nil {
		return nil, resultRefused, err
	}
	// Everything below reads this journal's copy of the registry, which may
	// lag the leader: a final refusal decided from it stands only once the
	// leader has confirmed the copy (confirm).
	// The CSR is checked once: whether it is valid does not depend on the
	// registry, so its refusal needs no confirmation; it is reported after
	// the hardware resolved, as before.
	csr, csrErr := ca.ParseCSR(req.GetCsrDer())
	var (
		res      raftfsm.Resolution
		takeover int64
		retry    bool
	)
	decide := func() error {
		retry = false
		if res = j.fsm.Resolve(rep); res.Err != nil {
			return res.Err
		}
		if csrErr != nil {
			return csrErr
		}
		if res.Node.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
			return nil
		}
		if res.Node.GetCert().GetSpkiSha256() == fingerprint(csr.SPKI) {
			// A retry of an enrollment that already committed: same key,
			// same certificate, no new write.
			retry = true
		}
		// A new key for an Active node is a takeover, decided below once
		// the node's credentials are proved: a caller without them learns
		// nothing about the takeover window.
		return nil
	}
	// A retry's answer (the committed certificate again) is confirmed too:
	// from a lagging copy it could hand back a certificate since replaced
	// or revoked.
	needs := func(err error) bool {
		return err == nil && retry || isFinal(err) && (csrErr == nil || err != csrErr)
	}
	if err := j.confirm(ctx, decide, needs); err != nil {
		if res.Mismatch != "" {
			// Only the journal's log learns why; the caller gets the code.
			j.log.Info("enrollment hardware mismatch", logkey.Reason, string(res.Mismatch), logkey.NodeID, res.Node.GetNodeId())
		}
		if errors.Is(err, ErrNoLeader) {
			return nil, resultError, err
		}
		if res.Node != nil {
			if terr := tpmMismatch(res.Mismatch, res.Node.GetNodeId()); terr != nil {
				return nil, resultRefused, terr
			}
		}
		return nil, resultRefused, err
	}
	node := res.Node
	// A fenced node, or a key that is another node's, goes no further.
	if err := j.checkAdmission(ctx, node.GetNodeId(), fingerprint(csr.SPKI)); err != nil {
		return nil, outcomeOf(err), err
	}
	if retry {
		// Its credentials were checked (and a join token consumed) the
		// first time; the CSR proves the key.
		resp, err := j.enrollResponse(node)
		return resp, resultRetry, err
	}
	// The credentials beside the hardware match that the node's policy
	// requires, checked before anything is signed (credentials.go).
	proof, err := j.checkCredentials(ctx, node, req, csr)
	var round1 *tpmChallengeIssued
	if errors.As(err, &round1) {
		// Round one of TPM attestation: nothing is signed or written
		// until the TPM answers (tpm.go).
		return &pactv1.EnrollResponse{TpmChallenge: round1.challenge}, resultTPMChallenge, nil
	}
	if err != nil {
		return nil, outcomeOf(err), err
	}
	if node.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE {
		err := j.confirm(ctx, func() error {
			if n, ok := j.fsm.Node(node.GetNodeId()); ok {
				node = n
			}
			var err error
			takeover, err = j.takeoverCutoff(node)
			return err
		}, func(err error) bool {
			// ALREADY_ACTIVE with a retry-after is not final, but an
			// agent honours it for the whole window: decided from a copy
			// that has not applied the revocation of the node's
			// certificate's issuer (a node cut off with its journal) it
			// would keep a freed node dark, so it is confirmed too.
			return isFinal(err) || errors.Is(err, raftfsm.ErrAlreadyActive)
		})
		if errors.Is(err, ErrNoLeader) {
			return nil, resultError, err
		}
		if err != nil {
			return nil, resultRefused, err
		}
	}
	// An Active node not released gets a new key only by a takeover: after
	// the window (takeover != 0), or at once when its certificate was
	// withdrawn (takeoverCutoff).
	replaces := node.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && !raftfsm.Released(node)
	// Hardware a federated domain holds Active: warned, or refused by
	// that domain's policy, from the claims held (never waiting on it).
	claims, err := j.claimsDecision(ctx, node)
	if err != nil {
		return nil, resultRefused, err
	}
	if err := j.checkSigning(); err != nil {
		return nil, resultError, err
	}
	if err := j.awaitLiveIntermediate(ctx); err != nil {
		return nil, resultError, err
	}
	issued, err := j.ca.SignAgent(csr, node.GetNodeId())
	if err != nil {
		return nil, resultError, err
	}
	result, err := j.proposeBatched(ctx, &pactv1.Command{
		Actor: "agent/" + node.GetNodeId(),
		Op: &pactv1.Command_Activate{Activate: &pactv1.ActivateOp{
			NodeId:   node.GetNodeId(),
			Reported: v1rpc.HardwareProto(rep),
			Cert:     certInfo(issued),

			TakeoverCutoffUnixNano: takeover,
			Credentials:            proof,
			ClaimsChecked:          claims,
		}},
	})
	if err != nil {
		// The signed certificate never leaves: its activation did not commit.
		if raftfsm.ErrorCode(err) != "" {
			return nil, resultRefused, err
		}
		return nil, resultError, err
	}
	outcome := resultOK
	if replaces {
		outcome = resultTakeover
	}
	j.log.Info("node enrolled", logkey.NodeID, node.GetNodeId(), logkey.Serial, result.Node.GetCert().GetSerial(),
		logkey.NotAfter, time.Unix(result.Node.GetCert().GetNotAfterUnix(), 0).UTC().Format(time.RFC3339),
		logkey.Source, peerAddr(ctx), logkey.Takeover, replaces)
	resp, err := j.enrollResponse(result.Node)
	if result.Idempotent {
		outcome = resultRetry
	}
	return resp, outcome, err
}

// outcomeOf classes an error of an enrollment check: a rule error is the
// caller's (refused: counted by the failure limiter), anything else (the
// leader could not be reached) is ours.
func outcomeOf(err error) string {
	switch {
	case raftfsm.ErrorCode(err) != "", tpmRefusal(err):
		return resultRefused
	case errors.Is(err, ErrOverloaded):
		return resultRateLimited
	}
	return resultError
}

// unconfirmedRetryAfter is the retry-after of a refusal this journal could
// not confirm with the leader: about an election's time.
const unconfirmedRetryAfter = 2 * time.Second

// confirm is how a service confirms an answer with the leader, the one
// helper around the Raft node's read barrier: it runs decide, which
// answers from this journal's copy of the registry, and an answer needs
// names (isFinal: a final refusal, as apierr.Error.Final and so pact-agent
// see it; isRuleError: any refusal that rests on replicated state) stands
// only if decide still gives it after the barrier. A follower's copy may
// lag a registration, a decommission or an enrollment committed through
// another journal, and a leader cut off from its quorum may not know it
// has been deposed. When the leader cannot be reached, the caller is told
// to retry (NO_LEADER) instead: an agent exits for good on a final
// refusal, so a lagging journal must never give one.
func (j *Journal) confirm(ctx context.Context, decide func() error, needs func(error) bool) error {
	err := decide()
	if !needs(err) {
		return err
	}
	if rerr := j.readBarrier(ctx); rerr != nil {
		j.metrics.unconfirmed.Inc()
		return &retryAfterError{
			err:   fmt.Errorf("%w: this journal cannot confirm its answer with the leader (its copy of the registry may lag): %s; retry, or try another journal", ErrNoLeader, strings.TrimPrefix(rerr.Error(), ErrNoLeader.Error()+": ")),
			after: unconfirmedRetryAfter,
		}
	}
	return decide()
}

// isFinal reports whether err, as the caller will see it, is final.
func isFinal(err error) bool {
	return err != nil && apierr.FromError(toStatus(err)).Final()
}

// isRuleError reports whether err is a rule error: a refusal that depends
// on replicated state.
func isRuleError(err error) bool { return raftfsm.ErrorCode(err) != "" }

// takeoverCutoff decides whether an Active node's hardware may enroll with a
// new key: only when no journal has seen its stream for TakeoverWindow (it
// rebooted and lost its key). While the node streams to this journal it is
// refused for good (a second agent, or a spoofed identity); otherwise the
// refusal can clear by waiting and carries a retry-after for when the
// takeover becomes possible.
func (j *Journal) takeoverCutoff(n *pactv1.Node) (int64, error) {
	if raftfsm.Released(n) {
		// Its agent stopped on purpose (Release): no window to wait for,
		// and the FSM re-checks the release. The stream of the released
		// certificate, if this journal has not noticed its end yet, ends
		// at its next binding check.
		return 0, nil
	}
	now := j.cfg.Clock.Now()
	if j.fsm.CertWithdrawn(n.GetCert(), now.UnixNano()) != "" {
		// Its certificate is refused everywhere by the registry's own
		// records (its issuer or the issuer's journal CA revoked, or the
		// serial itself): its agent enrolls again because it was cut off,
		// and no window protects anything. The FSM decides again at the
		// command's time; a stream of that certificate still open here
		// ends at its next binding check.
		return 0, nil
	}
	lastSeen := time.Unix(0, j.fsm.LastSeen(n.GetNodeId()))
	if j.hub.streamCount(n.GetNodeId()) > 0 {
		return 0, fmt.Errorf("%w: node %s is active with another key and streaming to this journal", raftfsm.ErrAlreadyActive, n.GetNodeId())
	}
	// Not streaming here. Seen lately (perhaps streaming to another
	// journal) or quiet for less than the window, the refusal can clear
	// by waiting: it says when to come back, and the agent honours it
	// instead of retrying blindly. If the node still streams elsewhere,
	// the digests keep it seen and the next try is refused the same way.
	settle := max(j.cfg.TakeoverWindow, 2*j.cfg.DigestInterval)
	if ago := now.Sub(lastSeen); ago < 2*j.cfg.DigestInterval {
		wait := settle - ago
		return 0, &retryAfterError{
			err:   fmt.Errorf("%w: node %s is active with another key; a journal saw its stream %s ago. If this is its own agent after a reboot, it may enroll again in %s", raftfsm.ErrAlreadyActive, n.GetNodeId(), ago.Round(time.Second), wait.Round(time.Second)),
			after: wait,
		}
	}
	if quiet := now.Sub(lastSeen); quiet < settle {
		wait := settle - quiet
		return 0, &retryAfterError{
			err:   fmt.Errorf("%w: node %s was active until %s ago; if it rebooted it may enroll again in %s", raftfsm.ErrAlreadyActive, n.GetNodeId(), quiet.Round(time.Second), wait.Round(time.Second)),
			after: wait,
		}
	}
	// The FSM accepts the takeover only if the node was last seen strictly
	// before the cutoff; quiet for exactly the window is quiet enough.
	return now.Add(-j.cfg.TakeoverWindow).UnixNano() + 1, nil
}

// enrollResponse builds the response from the committed record, never from
// a certificate that was only signed.
func (j *Journal) enrollResponse(n *pactv1.Node) (*pactv1.EnrollResponse, error) {
	chain, bundle, err := j.chainFor(n.GetCert())
	if err != nil {
		return nil, err
	}
	return &pactv1.EnrollResponse{
		NodeId:         n.GetNodeId(),
		DomainId:       j.ca.Domain(),
		CertChainDer:   chain,
		TrustBundleDer: bundle,
		Vcluster:       n.GetVcluster(),
		Serial:         n.GetCert().GetSerial(),
		NotAfterUnix:   n.GetCert().GetNotAfterUnix(),

		ServerTimeUnixNano: j.cfg.Clock.Now().UnixNano(),
	}, nil
}

func (j *Journal) chainFor(c *pactv1.CertificateInfo) (chain, bundle [][]byte, err error) {
	tb := j.bundle.get()
	above, ok := tb.live[c.GetIssuerSerial()]
	if !ok {
		return nil, nil, fmt.Errorf("journal: intermediate %s of certificate %s is not in the trust bundle", c.GetIssuerSerial(), c.GetSerial())
	}
	// The leaf, its intermediate, and the journal CA that signed that.
	return append([][]byte{c.GetDer()}, above...), tb.der, nil
}

func (s *enrollmentServer) RenewCert(ctx context.Context, req *pactv1.RenewCertRequest) (resp *pactv1.RenewCertResponse, err error) {
	j := s.j
	if p := principalFrom(ctx); p.Replaced {
		// Nothing signed or written: not held to the storm's bound.
		return j.renewalRetried(p, req)
	}
	// A renewal storm (or every agent of a restarted journal reconnecting)
	// is bounded like an enrollment storm.
	release, err := j.gate.acquire(ctx)
	if err != nil {
		j.metrics.renew.WithLabelValues(resultRateLimited).Inc()
		return nil, err
	}
	defer release()
	defer func() {
		result := resultOK
		switch {
		case err != nil:
			result = resultRefused
		case resp.GetTpmChallenge() != nil:
			result = resultTPMChallenge
		}
		j.metrics.renew.WithLabelValues(result).Inc()
	}()
	p := principalFrom(ctx)
	if p.SVID {
		return nil, fmt.Errorf("%w: SVID-authenticated agents renew through SPIRE, not the journal", ErrPermission)
	}
	if req.GetCurrentSerial() != p.Serial {
		return nil, fmt.Errorf("%w: current_serial %q is not the serial of the certificate this call was made with", ErrInvalidArgument, req.GetCurrentSerial())
	}
	if ch, err := j.renewalTPMCheck(ctx, p.ID.Name, req); err != nil || ch != nil {
		return &pactv1.RenewCertResponse{TpmChallenge: ch}, err
	}
	issued, err := j.signForNode(ctx, p.ID.Name, req.GetCsrDer())
	if err != nil {
		return nil, err
	}
	// Batched like an activation: a renewal storm's Renew commands share
	// Raft entries (one log write, fsync and replication each) instead of
	// one entry per renewal; the answer still waits for this one's commit.
	result, err := j.proposeBatched(ctx, &pactv1.Command{
		Actor: "agent/" + p.ID.Name,
		Op: &pactv1.Command_Renew{Renew: &pactv1.RenewOp{
			NodeId:         p.ID.Name,
			PreviousSerial: p.Serial,
			Cert:           certInfo(issued),
		}},
	})
	if err != nil {
		return nil, err
	}
	n := result.Node
	chain, bundle, err := j.chainFor(n.GetCert())
	if err != nil {
		return nil, err
	}
	j.log.Info("certificate renewed", logkey.NodeID, n.GetNodeId(), logkey.Serial, n.GetCert().GetSerial(), logkey.PreviousSerial, p.Serial)
	return j.renewAnswer(n, chain, bundle), nil
}

func (j *Journal) renewAnswer(n *pactv1.Node, chain [][]byte, bundle [][]byte) *pactv1.RenewCertResponse {
	return &pactv1.RenewCertResponse{
		NodeId:         n.GetNodeId(),
		CertChainDer:   chain,
		TrustBundleDer: bundle,
		Vcluster:       n.GetVcluster(),
		Serial:         n.GetCert().GetSerial(),
		NotAfterUnix:   n.GetCert().GetNotAfterUnix(),

		ServerTimeUnixNano: j.cfg.Clock.Now().UnixNano(),
	}
}

// renewalRetried answers a RenewCert made with a certificate a renewal
// replaced (the interceptor confirmed that with the leader): the agent's
// renewal committed, its answer was lost (a deadline in a storm), and it
// asks again with the same new key. The caller has proved both keys, the
// old one in the handshake and the new one by the CSR's signature, so it
// gets the certificate that committed once more; nothing is signed or
// written. Without it the agent would have to enroll again, a new
// connection and a new channel in the storm that lost the answer. Any
// other key is refused stale, as every other call from a replaced
// certificate is.
func (j *Journal) renewalRetried(p *auth.Principal, req *pactv1.RenewCertRequest) (*pactv1.RenewCertResponse, error) {
	if req.GetCurrentSerial() != p.Serial {
		return nil, fmt.Errorf("%w: current_serial %q is not the serial of the certificate this call was made with", ErrInvalidArgument, req.GetCurrentSerial())
	}
	csr, err := ca.ParseCSR(req.GetCsrDer())
	if err != nil {
		j.metrics.renew.WithLabelValues(resultRefused).Inc()
		return nil, err
	}
	n, ok := j.fsm.Node(p.ID.Name)
	if cur := n.GetCert(); !ok || cur.GetSerial() == p.Serial || cur.GetSpkiSha256() != fingerprint(csr.SPKI) {
		j.metrics.renew.WithLabelValues(resultRefused).Inc()
		return nil, auth.StaleError(p)
	}
	chain, bundle, err := j.chainFor(n.GetCert())
	if err != nil {
		return nil, err
	}
	j.metrics.renew.WithLabelValues(resultRetried).Inc()
	j.log.Info("renewal answered again: its first answer was lost", logkey.NodeID, n.GetNodeId(), logkey.Serial, n.GetCert().GetSerial(), logkey.PreviousSerial, p.Serial)
	return j.renewAnswer(n, chain, bundle), nil
}

// Subscribe holds the agent's stream. It sends the assignment and the trust
// bundle first, then whatever changes, and re-checks the caller's binding on
// every wake-up and at least every StreamRecheckInterval.
func (s *enrollmentServer) Subscribe(req *pactv1.SubscribeRequest, stream pactv1.EnrollmentService_SubscribeServer) (err error) {
	j := s.j
	ctx := stream.Context()
	p := principalFrom(ctx)
	if p.SVID {
		// The registry follows the SVID (Registered or Inactive → Active,
		// or SPIRE's rotation) before the stream counts as the node's.
		if err := j.recordSVID(ctx, p); err != nil {
			return err
		}
	} else if err := j.activateStandby(ctx, p); err != nil {
		return err
	}
	w := j.hub.register(p.ID.Name, p.Serial)
	defer j.hub.unregister(w)
	// dropped names why the stream ends where the error alone does not
	// (pact_journal_stream_drops_total, monitoring.go). A stream whose
	// certificate a renewal replaced and that ends once the node streams
	// with its new one (here, or its agent closing the old channel) was
	// handed over: no drop.
	var dropped string
	var handedOver, notStreamed bool
	defer func() {
		if notStreamed {
			j.log.Info("agent stream closed", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial, logkey.Reason, "client_gone_before_first_state")
			return
		}
		if handedOver {
			j.metrics.streamHandovers.Inc()
			j.log.Info("agent stream closed", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial, logkey.Reason, "handed_over")
			return
		}
		reason := streamDropReason(dropped, err)
		j.metrics.streamDrops.WithLabelValues(reason).Inc()
		j.log.Info("agent stream closed", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial, logkey.Reason, reason)
	}()
	j.log.Info("agent stream opened", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial, logkey.Source, peerAddr(ctx), logkey.IdentitySource, p.IdentitySource())

	var sentVCluster string
	var sentBundle uint64
	var sentRenewNow bool
	// revokeAt is when the intermediate behind the stream's certificate is
	// revoked (zero: not retiring); the stream ends then.
	var revokeAt time.Time
	// supersededAt is when this journal saw a renewal replace the stream's
	// certificate (zero: it is current). The old channel serves, for at
	// most RenewalStreamGrace, until the node's new stream opens: the new
	// channel may wait in the handshake queue of a renewal storm.
	var supersededAt time.Time
	// sendFailed notes a failed send: the client gone, or a broken send.
	sendFailed := func(err error) error {
		dropped = dropSendFailed
		if ctx.Err() != nil {
			dropped = dropClientGone
		}
		return err
	}
	sendState := func(first bool) error {
		if r := j.raft.Halted(); r != "" {
			// Cut off (or halted) since the stream opened: its agent
			// goes to a journal that serves (onCutOff wakes it).
			dropped = dropJournalHalted
			return fmt.Errorf("%w: journal %s does not serve: %s", errHalted, j.cfg.NodeID, r)
		}
		if now := j.cfg.Clock.Now(); now.After(p.Leaf.NotAfter) {
			dropped = dropCertExpired
			return fmt.Errorf("%w: the stream's certificate %s expired at %s; renew or re-enroll", ErrUnauthenticated, p.Serial, p.Leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if err := j.auth.CheckBinding(p); err != nil {
			if errors.Is(err, raftfsm.ErrNodeRevoked) || errors.Is(err, raftfsm.ErrNodeFenced) {
				// Tell the agent why before the stream ends; a stale
				// certificate (after a renewal) just ends the stream.
				pe := apierr.FromError(toStatus(err))
				_ = stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_Revoked{Revoked: &pactv1.Revoked{Reason: pe.Message, Code: string(pe.Reason)}}})
				return err
			}
			return j.supersededStream(stream, p, err, &supersededAt, &handedOver, &dropped)
		}
		n, _ := j.fsm.Node(p.ID.Name)
		if !p.SVID {
			if in, ok := j.fsm.Intermediate(n.GetCert().GetIssuerSerial()); ok && in.GetRevokeAtUnixNano() != 0 {
				revokeAt = time.Unix(0, in.GetRevokeAtUnixNano())
				if raftfsm.IntermediateRevoked(in, j.cfg.Clock.Now().UnixNano()) {
					dropped = dropIntermediateRevoked
					return fmt.Errorf("%w: certificate %s was signed by intermediate %s, revoked at %s (%s); re-enroll", ErrUnauthenticated, p.Serial, in.GetSerial(), revokeAt.UTC().Format(time.RFC3339), in.GetRetireReason())
				}
				if !sentRenewNow {
					// The agent renews through its usual rotation; the new
					// certificate comes from a live intermediate.
					if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_RenewNow{RenewNow: &pactv1.RenewNow{
						Reason:           "intermediate " + in.GetSerial() + " is being retired: " + in.GetRetireReason(),
						IssuerSerial:     in.GetSerial(),
						RevokeAtUnixNano: in.GetRevokeAtUnixNano(),
					}}}); err != nil {
						return sendFailed(err)
					}
					sentRenewNow = true
					j.log.Info("agent told to renew: its intermediate is retiring", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial, logkey.IssuerSerial, in.GetSerial())
				}
			}
		}
		if first || n.GetVcluster() != sentVCluster {
			if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_Assignment{
				Assignment: &pactv1.Assignment{NodeId: n.GetNodeId(), Vcluster: n.GetVcluster()},
			}}); err != nil {
				return sendFailed(err)
			}
			sentVCluster = n.GetVcluster()
		}
		tb := j.bundle.get()
		if first || tb.version != sentBundle {
			if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_TrustBundle{
				TrustBundle: &pactv1.TrustBundle{Der: tb.der},
			}}); err != nil {
				return sendFailed(err)
			}
			sentBundle = tb.version
		}
		return nil
	}
	j.hub.holdFirstState(ctx, p.Serial)
	// A client that left before this stream sent its first state (gone
	// before the journal got to it, or its send failing for that) never
	// streamed: the node lost nothing here (its old stream, if a renewal
	// replaced it, still serves), so no drop and no handover.
	if ctx.Err() != nil {
		notStreamed = true
		return ctx.Err()
	}
	if err := sendState(true); err != nil {
		notStreamed = dropped == dropClientGone
		return err
	}
	j.hub.streaming(w)
	// Attestation between renewals (attest.go): a node the boot policy
	// says must attest is due its requests on every stream, answered or
	// counted unanswered.
	sa := j.newStreamAttest(p, req)
	defer sa.close()
	for {
		// Wake at the next recheck, or just after the certificate expires.
		wait := j.cfg.StreamRecheckInterval
		if untilExpiry := p.Leaf.NotAfter.Sub(j.cfg.Clock.Now()) + time.Millisecond; untilExpiry < wait {
			wait = max(untilExpiry, 0)
		}
		if !revokeAt.IsZero() {
			if untilRevoked := revokeAt.Sub(j.cfg.Clock.Now()); untilRevoked < wait {
				wait = max(untilRevoked, 0)
			}
		}
		if !supersededAt.IsZero() {
			if untilGraceEnds := supersededAt.Add(j.cfg.RenewalStreamGrace).Sub(j.cfg.Clock.Now()); untilGraceEnds < wait {
				wait = max(untilGraceEnds, 0)
			}
		}
		wait = sa.wait(j.cfg.Clock.Now(), wait)
		t := j.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			select {
			case <-j.stop:
				dropped = dropShutdown
			default:
				// The agent closed the old channel once its new one
				// streamed (wherever that is). The renewal may have
				// committed here before this goroutine saw it: under
				// load the client's leaving and the wake-up arrive
				// together, so ask the registry, not only supersededAt.
				handedOver = !supersededAt.IsZero() || j.replacedStream(w, p)
			}
			return nil
		case <-j.stop:
			t.Stop()
			dropped = dropShutdown
			return fmt.Errorf("%w: journal shutting down", ErrNoLeader)
		case <-w.node:
		case <-w.bundle:
		case <-sa.askedChan():
			sa.forced = true
		case <-t.C():
		}
		t.Stop()
		if err := sendState(false); err != nil {
			return err
		}
		if err := sa.step(ctx, stream); err != nil {
			return sendFailed(err)
		}
	}
}

// enrollRefused logs a refused attempt locally, counts it against its
// source and its hardware identity, and warns when one identity keeps
// failing (someone guessing, or a node whose registration is wrong).
func (j *Journal) enrollRefused(ctx context.Context, req *pactv1.EnrollRequest, source string, err error) {
	reason := string(apierr.FromError(toStatus(err)).Reason)
	j.metrics.enrollFailures.WithLabelValues(reason).Inc()
	hw := req.GetHardware()
	key := strings.Join(hw.GetMacs(), ",") + "|" + hw.GetBmcSerial()
	warn, count := j.limiter.RecordFailure(source, key, j.cfg.Clock.Now())
	j.admission.failed(source)
	j.log.Warn("enrollment refused", logkey.Reason, reason, logkey.Err, err,
		logkey.MACs, hw.GetMacs(), logkey.BMCSerial, hw.GetBmcSerial(), logkey.Source, peerAddr(ctx))
	if warn {
		j.metrics.identityWarnings.Inc()
		j.log.Warn("repeated enrollment failures for one hardware identity", logkey.MACs, hw.GetMacs(), logkey.BMCSerial, hw.GetBmcSerial(), logkey.Failures, count)
	}
}

// supersededStream decides what a stream does whose journal-signed
// certificate is no longer the node's (err, from the binding check): it
// stays open, for at most RenewalStreamGrace from when this journal saw
// the change, until the node streams here with its current certificate;
// then it ends as handed over, or at the grace's end as superseded. On
// entering the grace the stream tells the agent which certificate replaced
// its own: an agent that did not renew (its renewal's answer lost, or
// someone else renewed with its key) ends the stream itself at once. An
// SVID's stream, or any stream with the grace off, ends now.
func (j *Journal) supersededStream(stream pactv1.EnrollmentService_SubscribeServer, p *auth.Principal, err error, supersededAt *time.Time, handedOver *bool, dropped *string) error {
	if !errors.Is(err, raftfsm.ErrStaleCertificate) {
		return err
	}
	now := j.cfg.Clock.Now()
	n, _ := j.fsm.Node(p.ID.Name)
	cur := n.GetCert().GetSerial()
	if p.SVID || j.cfg.RenewalStreamGrace <= 0 {
		// Ends now: handed over if the node streams here with its
		// current certificate already.
		*handedOver = cur != "" && j.hub.hasStream(p.ID.Name, cur)
		return err
	}
	if supersededAt.IsZero() {
		*supersededAt = now
		if serr := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_Superseded{Superseded: &pactv1.Superseded{Serial: cur}}}); serr != nil {
			if stream.Context().Err() != nil {
				*handedOver = true // the agent already closed its old channel
			} else {
				*dropped = dropSendFailed
			}
			return serr
		}
	}
	if cur != "" && j.hub.hasStream(p.ID.Name, cur) {
		*handedOver = true
		return err
	}
	if now.Sub(*supersededAt) >= j.cfg.RenewalStreamGrace {
		*dropped = dropSuperseded
		return err
	}
	return nil
}

// replacedStream reports whether the stream w, whose client has left, was
// replaced by its node's next stream: a handover, not a drop, whatever
// identity either presents (a journal certificate a renewal replaced, an
// SVID SPIRE rotated, a swap between an SVID and its journal standby).
// Only a node left without a stream is a drop. The node is not when
// another stream of it here has sent its first state, or when the
// registry's current certificate of the node is no longer the stream's:
// a renewal replaced it (the handover the grace exists for, seen after
// the fact), or a stream of the newer identity made it current (an SVID is
// recorded, and a standby made current, only by a stream of it, here or
// at another journal).
func (j *Journal) replacedStream(w *streamWaker, p *auth.Principal) bool {
	if j.hub.othersStreaming(w) {
		return true
	}
	n, ok := j.fsm.Node(p.ID.Name)
	if !ok || n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
		return false
	}
	cur := n.GetCert().GetSerial()
	return cur != "" && cur != p.Serial
}

func peerNetAddr(ctx context.Context) net.Addr {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr
	}
	return nil
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// Ping answers an agent's health check with who it is to the journal and
// the journal's clock.
// Release records that the calling agent stops on purpose, so its node's
// next enrollment (same hardware, new key) need not wait for the takeover
// window. The interceptor has bound the caller to the node's current
// certificate; an SVID is not the journal's to release.
func (s *enrollmentServer) Release(ctx context.Context, _ *pactv1.ReleaseRequest) (*pactv1.ReleaseResponse, error) {
	j := s.j
	p := principalFrom(ctx)
	if p.SVID {
		return &pactv1.ReleaseResponse{}, nil
	}
	res, err := j.proposeBatched(ctx, &pactv1.Command{
		Actor: "agent/" + p.ID.Name,
		Op:    &pactv1.Command_Release{Release: &pactv1.ReleaseOp{NodeId: p.ID.Name, Serial: p.Serial}},
	})
	if err != nil {
		return nil, err
	}
	released := res.Node.GetReleasedSerial() == p.Serial
	j.log.Info("node released by its agent", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial, logkey.Released, released)
	return &pactv1.ReleaseResponse{Released: released}, nil
}

func (s *enrollmentServer) Ping(ctx context.Context, _ *pactv1.PingRequest) (*pactv1.PingResponse, error) {
	p := principalFrom(ctx)
	return &pactv1.PingResponse{
		NodeId:             p.ID.Name,
		Serial:             p.Serial,
		IdentitySource:     p.IdentitySource(),
		JournalId:          s.j.cfg.NodeID,
		ServerTimeUnixNano: s.j.cfg.Clock.Now().UnixNano(),
	}, nil
}

// signForNode signs a CSR of an authenticated node (RenewCert,
// IssueStandby): the key must pass the CSR policy and the node's admission
// (not fenced, not another node's key) first. The certificate leaves only
// once the caller's command recording it commits.
func (j *Journal) signForNode(ctx context.Context, nodeID string, csrDER []byte) (*ca.Issued, error) {
	csr, err := ca.ParseCSR(csrDER)
	if err != nil {
		return nil, err
	}
	if err := j.checkAdmission(ctx, nodeID, fingerprint(csr.SPKI)); err != nil {
		return nil, err
	}
	if err := j.checkSigning(); err != nil {
		return nil, err
	}
	if err := j.awaitLiveIntermediate(ctx); err != nil {
		return nil, err
	}
	return j.ca.SignAgent(csr, nodeID)
}
