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
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/ratelimit"
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
	if ok, after := j.limiter.Allow(source, j.cfg.Clock.Now()); !ok {
		j.metrics.enroll.WithLabelValues("rate_limited").Inc()
		return nil, &retryAfterError{err: fmt.Errorf("%w: too many failed enrollments from %s; retry after %v", ErrOverloaded, source, after), after: after}
	}
	release, err := j.gate.acquire(ctx)
	if err != nil {
		j.metrics.enroll.WithLabelValues("rate_limited").Inc()
		return nil, err
	}
	defer release()
	resp, outcome, err := j.enroll(ctx, req)
	if err == nil {
		j.limiter.RecordSuccess(source, j.cfg.Clock.Now())
		j.metrics.enroll.WithLabelValues(outcome).Inc()
		return resp, nil
	}
	if outcome == "refused" {
		j.enrollRefused(ctx, req, source, err)
	}
	j.metrics.enroll.WithLabelValues(outcome).Inc()
	return nil, err
}

// enroll does the work of Enroll and says how it ended: ok, retry (same
// key, same certificate), takeover, refused (the caller's fault: counted and
// rate limited) or error (ours).
func (j *Journal) enroll(ctx context.Context, req *pactv1.EnrollRequest) (*pactv1.EnrollResponse, string, error) {
	rep, err := hwid.Normalize(req.GetHardware().GetMacs(), req.GetHardware().GetBmcSerial(), req.GetHardware().GetTpmEkHash())
	if err != nil {
		return nil, "refused", err
	}
	res := j.fsm.Resolve(rep)
	if res.Err != nil && !j.IsLeader() && (errors.Is(res.Err, raftfsm.ErrNodeNotEnrolled) || errors.Is(res.Err, raftfsm.ErrHardwareIdentityConflict)) {
		// This journal's copy may lag a registration that just committed:
		// catch up with the leader before refusing a booting node for good.
		if err := j.linearizableRead(ctx); err == nil {
			res = j.fsm.Resolve(rep)
		}
	}
	if res.Err != nil {
		if res.Mismatch != "" {
			// Only the journal's log learns why; the caller gets the code.
			j.log.Info("enrollment hardware mismatch", logkey.Reason, string(res.Mismatch), logkey.NodeID, res.Node.GetNodeId())
		}
		return nil, "refused", res.Err
	}
	node := res.Node
	csr, err := ca.ParseCSR(req.GetCsrDer())
	if err != nil {
		return nil, "refused", err
	}
	var takeover int64
	if node.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE {
		if node.GetCert().GetSpkiSha256() == fingerprint(csr.SPKI) {
			// A retry of an enrollment that already committed: same key,
			// same certificate, no new write.
			resp, err := j.enrollResponse(node)
			return resp, "retry", err
		}
		if takeover, err = j.takeoverCutoff(node); err != nil {
			return nil, "refused", err
		}
	}
	issued, err := j.ca.SignAgent(csr, node.GetNodeId())
	if err != nil {
		return nil, "error", err
	}
	result, err := j.propose(ctx, &pactv1.Command{
		Actor: "agent/" + node.GetNodeId(),
		Op: &pactv1.Command_Activate{Activate: &pactv1.ActivateOp{
			NodeId:   node.GetNodeId(),
			Reported: hardwareProto(rep),
			Cert:     certInfo(issued),

			TakeoverCutoffUnixNano: takeover,
		}},
	})
	if err != nil {
		// The signed certificate never leaves: its activation did not commit.
		if raftfsm.ErrorCode(err) != "" {
			return nil, "refused", err
		}
		return nil, "error", err
	}
	outcome := "ok"
	if takeover != 0 {
		outcome = "takeover"
	}
	j.log.Info("node enrolled", logkey.NodeID, node.GetNodeId(), logkey.Serial, result.Node.GetCert().GetSerial(),
		logkey.NotAfter, time.Unix(result.Node.GetCert().GetNotAfterUnix(), 0).UTC().Format(time.RFC3339),
		logkey.Source, peerAddr(ctx), "takeover", takeover != 0)
	resp, err := j.enrollResponse(result.Node)
	if result.Idempotent {
		outcome = "retry"
	}
	return resp, outcome, err
}

// takeoverCutoff decides whether an Active node's hardware may enroll with a
// new key: only when no journal has seen its stream for TakeoverWindow (it
// rebooted and lost its key). While the node streams it is refused for good
// (a second agent, or a spoofed identity); when it merely went quiet, the
// refusal carries a retry-after for when the takeover becomes possible.
func (j *Journal) takeoverCutoff(n *pactv1.Node) (int64, error) {
	now := j.cfg.Clock.Now()
	lastSeen := time.Unix(0, j.fsm.LastSeen(n.GetNodeId()))
	if j.hub.streamCount(n.GetNodeId()) > 0 {
		return 0, fmt.Errorf("%w: node %s is active with another key and streaming to this journal", raftfsm.ErrAlreadyActive, n.GetNodeId())
	}
	if ago := now.Sub(lastSeen); ago < 2*j.cfg.DigestInterval {
		return 0, fmt.Errorf("%w: node %s is active with another key; a journal saw its stream %s ago", raftfsm.ErrAlreadyActive, n.GetNodeId(), ago.Round(time.Second))
	}
	if quiet := now.Sub(lastSeen); quiet < j.cfg.TakeoverWindow {
		wait := j.cfg.TakeoverWindow - quiet
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
	}, nil
}

func (j *Journal) chainFor(c *pactv1.CertificateInfo) (chain, bundle [][]byte, err error) {
	tb := j.bundle.get()
	inter, ok := tb.live[c.GetIssuerSerial()]
	if !ok {
		return nil, nil, fmt.Errorf("journal: intermediate %s of certificate %s is not in the trust bundle", c.GetIssuerSerial(), c.GetSerial())
	}
	return [][]byte{c.GetDer(), inter}, tb.der, nil
}

func (s *enrollmentServer) RenewCert(ctx context.Context, req *pactv1.RenewCertRequest) (resp *pactv1.RenewCertResponse, err error) {
	j := s.j
	// A renewal storm (or every agent of a restarted journal reconnecting)
	// is bounded like an enrollment storm.
	release, err := j.gate.acquire(ctx)
	if err != nil {
		j.metrics.renew.WithLabelValues("rate_limited").Inc()
		return nil, err
	}
	defer release()
	defer func() {
		result := "ok"
		if err != nil {
			result = "refused"
		}
		j.metrics.renew.WithLabelValues(result).Inc()
	}()
	p := principalFrom(ctx)
	if p.svid {
		return nil, fmt.Errorf("%w: SVID-authenticated agents renew through SPIRE, not the journal", ErrPermission)
	}
	if req.GetCurrentSerial() != p.serial {
		return nil, fmt.Errorf("%w: current_serial %q is not the serial of the certificate this call was made with", ErrInvalidArgument, req.GetCurrentSerial())
	}
	csr, err := ca.ParseCSR(req.GetCsrDer())
	if err != nil {
		return nil, err
	}
	issued, err := j.ca.SignAgent(csr, p.id.Name)
	if err != nil {
		return nil, err
	}
	result, err := j.propose(ctx, &pactv1.Command{
		Actor: "agent/" + p.id.Name,
		Op: &pactv1.Command_Renew{Renew: &pactv1.RenewOp{
			NodeId:         p.id.Name,
			PreviousSerial: p.serial,
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
	j.log.Info("certificate renewed", logkey.NodeID, n.GetNodeId(), logkey.Serial, n.GetCert().GetSerial(), "previous_serial", p.serial)
	return &pactv1.RenewCertResponse{
		NodeId:         n.GetNodeId(),
		CertChainDer:   chain,
		TrustBundleDer: bundle,
		Vcluster:       n.GetVcluster(),
		Serial:         n.GetCert().GetSerial(),
		NotAfterUnix:   n.GetCert().GetNotAfterUnix(),
	}, nil
}

// Subscribe holds the agent's stream. It sends the assignment and the trust
// bundle first, then whatever changes, and re-checks the caller's binding on
// every wake-up and at least every StreamRecheckInterval.
func (s *enrollmentServer) Subscribe(_ *pactv1.SubscribeRequest, stream pactv1.EnrollmentService_SubscribeServer) error {
	j := s.j
	ctx := stream.Context()
	p := principalFrom(ctx)
	if p.svid {
		// The registry follows the SVID (Registered or Inactive → Active,
		// or SPIRE's rotation) before the stream counts as the node's.
		if err := j.recordSVID(ctx, p); err != nil {
			return err
		}
	}
	w := j.hub.register(p.id.Name)
	defer j.hub.unregister(w)
	j.log.Info("agent stream opened", logkey.NodeID, p.id.Name, logkey.Serial, p.serial, logkey.Source, peerAddr(ctx), "identity_source", p.identitySource())
	defer j.log.Info("agent stream closed", logkey.NodeID, p.id.Name, logkey.Serial, p.serial)

	var sentVCluster string
	var sentBundle uint64
	sendState := func(first bool) error {
		if now := j.cfg.Clock.Now(); now.After(p.leaf.NotAfter) {
			return fmt.Errorf("%w: the stream's certificate %s expired at %s; renew or re-enroll", ErrUnauthenticated, p.serial, p.leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if err := j.checkBinding(p); err != nil {
			if errors.Is(err, raftfsm.ErrNodeRevoked) {
				// Tell the agent why before the stream ends; a stale
				// certificate (after a renewal) just ends the stream.
				_ = stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_Revoked{Revoked: &pactv1.Revoked{Reason: apierr.FromError(toStatus(err)).Message}}})
			}
			return err
		}
		n, _ := j.fsm.Node(p.id.Name)
		if first || n.GetVcluster() != sentVCluster {
			if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_Assignment{
				Assignment: &pactv1.Assignment{NodeId: n.GetNodeId(), Vcluster: n.GetVcluster()},
			}}); err != nil {
				return err
			}
			sentVCluster = n.GetVcluster()
		}
		tb := j.bundle.get()
		if first || tb.version != sentBundle {
			if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_TrustBundle{
				TrustBundle: &pactv1.TrustBundle{Der: tb.der},
			}}); err != nil {
				return err
			}
			sentBundle = tb.version
		}
		return nil
	}
	if err := sendState(true); err != nil {
		return err
	}
	for {
		// Wake at the next recheck, or just after the certificate expires.
		wait := j.cfg.StreamRecheckInterval
		if untilExpiry := p.leaf.NotAfter.Sub(j.cfg.Clock.Now()) + time.Millisecond; untilExpiry < wait {
			wait = max(untilExpiry, 0)
		}
		t := j.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-j.stop:
			t.Stop()
			return fmt.Errorf("%w: journal shutting down", ErrNoLeader)
		case <-w.node:
		case <-w.bundle:
		case <-t.C():
		}
		t.Stop()
		if err := sendState(false); err != nil {
			return err
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
	j.log.Warn("enrollment refused", logkey.Reason, reason, logkey.Err, err,
		logkey.MACs, hw.GetMacs(), logkey.BMCSerial, hw.GetBmcSerial(), logkey.Source, peerAddr(ctx))
	if warn {
		j.metrics.identityWarnings.Inc()
		j.log.Warn("repeated enrollment failures for one hardware identity", logkey.MACs, hw.GetMacs(), logkey.BMCSerial, hw.GetBmcSerial(), "failures", count)
	}
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
func (s *enrollmentServer) Ping(ctx context.Context, _ *pactv1.PingRequest) (*pactv1.PingResponse, error) {
	p := principalFrom(ctx)
	return &pactv1.PingResponse{
		NodeId:             p.id.Name,
		Serial:             p.serial,
		IdentitySource:     p.identitySource(),
		JournalId:          s.j.cfg.NodeID,
		ServerTimeUnixNano: s.j.cfg.Clock.Now().UnixNano(),
	}, nil
}
