package journal

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/measuredboot"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Attestation between renewals (docs/tpm.md, "Attestation between
// renewals"): the journal a TPM node streams to asks it, over its
// Subscribe stream, for a fresh quote once the boot policy's attest
// interval has passed since its last one. The agent answers with
// AttestBoot, the two rounds of a renewal's TPM attestation bound to the
// certificate of its stream. Verdicts are kept in memory; only a changed
// verdict whose action is fence writes to Raft.

const (
	// attestAnswerWithin is how long a node has to answer a request.
	attestAnswerWithin = 2 * time.Minute
	// attestDefaultTolerance is a policy's attest_tolerance when 0.
	attestDefaultTolerance = 3
	// attestJitterDivisor: each request is asked up to interval/10 after
	// the interval has passed, so a fleet that renewed together is not
	// asked together.
	attestJitterDivisor = 10
	// maxAttestRequests bounds the requests outstanding on one journal
	// (one per stream at most).
	maxAttestRequests = 65536
)

// Results of pact_journal_attestations_total{result}.
const (
	attestMatch      = "match"      // a verified quote matched the policy
	attestMismatch   = "mismatch"   // a verified quote did not match it
	attestRefused    = "refused"    // an answer that did not verify (TPM, quote, event log)
	attestUnanswered = "unanswered" // no verified answer within attestAnswerWithin
	attestAsked      = "asked"      // a request sent on a stream
)

var attestResults = []string{attestAsked, attestMatch, attestMismatch, attestRefused, attestUnanswered}

// attestRequest is one outstanding request.
type attestRequest struct {
	node, serial string
	deadline     time.Time
	// spent: round two came (whatever it proved); answered: it verified,
	// at answeredAt.
	spent, answered bool
	answeredAt      time.Time
}

// attestNode is what this journal knows of a node's attestations.
type attestNode struct {
	// misses counts requests in a row left without a verified answer.
	misses int
	// mismatch is the last verdict (false: matched, or never decided).
	mismatch bool
}

// attestations holds the outstanding requests (by hex nonce) and the
// per-node verdicts, in memory.
type attestations struct {
	mu    sync.Mutex
	reqs  map[string]*attestRequest
	nodes map[string]*attestNode
	// waiters are woken when a node's request is answered (a capture
	// waiting for a fresh quote).
	waiters map[string][]chan struct{}
}

func newAttestations() *attestations {
	return &attestations{reqs: map[string]*attestRequest{}, nodes: map[string]*attestNode{}, waiters: map[string][]chan struct{}{}}
}

func (a *attestations) add(key string, r *attestRequest) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.reqs) >= maxAttestRequests {
		return false
	}
	a.reqs[key] = r
	return true
}

// take finds the request key of node and serial, pending and not past its
// deadline; round two spends it.
func (a *attestations) take(key, node, serial string, now time.Time, roundTwo bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.reqs[key]
	if !ok || r.spent || r.node != node || r.serial != serial || !now.Before(r.deadline) {
		return false
	}
	if roundTwo {
		r.spent = true
	}
	return true
}

// answered records a verified answer to key: the node's misses start over.
func (a *attestations) answered(key, node string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.reqs[key]; ok {
		r.answered, r.answeredAt = true, now
	}
	a.node(node).misses = 0
	for _, w := range a.waiters[node] {
		close(w)
	}
	delete(a.waiters, node)
}

// status reports whether key was answered, and when, and forgets it if
// so.
func (a *attestations) status(key string) (at time.Time, answered bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.reqs[key]
	if ok && r.answered {
		delete(a.reqs, key)
		return r.answeredAt, true
	}
	return time.Time{}, false
}

func (a *attestations) drop(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.reqs, key)
}

// missed counts a request of node left unanswered and returns the misses
// in a row.
func (a *attestations) missed(node string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.node(node)
	n.misses++
	return n.misses
}

// verdict records node's verdict and reports whether it changed.
func (a *attestations) verdict(node string, mismatch bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.node(node)
	changed := n.mismatch != mismatch
	n.mismatch = mismatch
	return changed
}

// wait returns a channel closed at node's next verified answer.
func (a *attestations) wait(node string) chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := make(chan struct{})
	a.waiters[node] = append(a.waiters[node], c)
	return c
}

func (a *attestations) node(id string) *attestNode {
	n, ok := a.nodes[id]
	if !ok {
		n = &attestNode{}
		a.nodes[id] = n
	}
	return n
}

// streamAttest is one Subscribe stream's side of it: when to ask next,
// and the request outstanding. Only the stream's goroutine uses it.
type streamAttest struct {
	j            *Journal
	node, serial string
	// base is when the node last quoted here (or the stream opened);
	// jitter, a fraction of the interval in [0, 1/attestJitterDivisor).
	base   time.Time
	jitter float64
	// pending is the hex nonce of the outstanding request ("" none).
	pending  string
	deadline time.Time
	// askNow is signalled by a capture that needs a fresh quote; forced
	// is the stream's note of it.
	askNow chan struct{}
	forced bool
}

// asked is the channel a capture signals (nil, never ready, for a
// stream that is not asked).
func (s *streamAttest) asked() chan struct{} {
	if s == nil {
		return nil
	}
	return s.askNow
}

// newStreamAttest is nil for a stream whose agent does not answer
// requests (an agent of an earlier release, or without its TPM) and for
// SVID streams.
func (j *Journal) newStreamAttest(p *principal, req *pactv1.SubscribeRequest) *streamAttest {
	if p.SVID || !req.GetAnswersBootAttestation() {
		return nil
	}
	s := &streamAttest{j: j, node: p.ID.Name, serial: p.Serial, base: j.cfg.Clock.Now(), jitter: j.attestJitterFraction(), askNow: make(chan struct{}, 1)}
	if r, ok := j.boot.get(p.ID.Name); ok && r.at.After(s.base.Add(-24*time.Hour)) && r.at.Before(s.base) {
		s.base = r.at
	}
	j.attestStreams.Store(s, struct{}{})
	return s
}

// attestJitter is a fraction of the interval in [0, 1/attestJitterDivisor),
// drawn from the journal's jitter source (backoff.Jitter, which a test
// injects: Journal.attestJitter).
func (j *Journal) attestJitterFraction() float64 {
	const scale = 1 << 20
	return float64(j.attestJitter.Draw(scale)) / scale / attestJitterDivisor
}

// close forgets the stream's outstanding request: a node whose stream
// ends is asked again by the journal of its next stream.
func (s *streamAttest) close() {
	if s == nil {
		return
	}
	s.j.attestStreams.Delete(s)
	if s.pending != "" {
		s.j.attest.drop(s.pending)
	}
}

// interval is the attest interval of the policy in force for the node
// (0: none), and the policy.
func (s *streamAttest) interval() (time.Duration, *pactv1.BootPolicy) {
	n, ok := s.j.fsm.Node(s.node)
	if !ok || n.GetHardware().GetTpmEkHash() == "" {
		return 0, nil
	}
	p, ok := s.j.fsm.BootPolicyFor(n.GetVcluster())
	if !ok {
		return 0, nil
	}
	return time.Duration(p.GetAttestIntervalSeconds()) * time.Second, p
}

// next is when the stream must next wake for attestation (zero: never).
func (s *streamAttest) next() time.Time {
	if s.pending != "" {
		return s.deadline
	}
	iv, _ := s.interval()
	if iv <= 0 {
		return time.Time{}
	}
	return s.base.Add(iv + time.Duration(s.jitter*float64(iv)))
}

// wait shortens the stream's wait to its next attestation event.
func (s *streamAttest) wait(now time.Time, wait time.Duration) time.Duration {
	if s == nil {
		return wait
	}
	if t := s.next(); !t.IsZero() {
		return min(wait, max(t.Sub(now), 0))
	}
	return wait
}

// step runs at every wake-up of the stream: it notes an answer, counts a
// request left unanswered (past the policy's tolerance, a mismatch), and
// sends a request when one is due (or a capture wants one).
func (s *streamAttest) step(ctx context.Context, stream pactv1.EnrollmentService_SubscribeServer) error {
	if s == nil {
		return nil
	}
	j := s.j
	now := j.cfg.Clock.Now()
	forced := s.forced
	s.forced = false
	if s.pending != "" {
		// The next request is an interval after the answer (or the
		// deadline), whenever this goroutine gets to see it.
		at, answered := j.attest.status(s.pending)
		switch {
		case answered:
			s.pending, s.base, s.jitter = "", at, j.attestJitterFraction()
		case !now.Before(s.deadline):
			j.attest.drop(s.pending)
			s.pending, s.base, s.jitter = "", s.deadline, j.attestJitterFraction()
			j.metrics.attestations.WithLabelValues(attestUnanswered).Inc()
			misses := j.attest.missed(s.node)
			_, p := s.interval()
			tolerance := cmp.Or(int(p.GetAttestTolerance()), attestDefaultTolerance)
			j.log.Warn("no answer to a boot attestation request", logkey.NodeID, s.node, logkey.Serial, s.serial, logkey.Failures, misses)
			if p != nil && misses >= tolerance {
				j.attestVerdict(ctx, s.node, nil, fmt.Sprintf("no verified answer to %d attestation requests in a row", misses))
			}
		default:
			return nil
		}
	}
	if !forced {
		t := s.next()
		if t.IsZero() || now.Before(t) {
			return nil
		}
	}
	nonce := make([]byte, measuredboot.NonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	key := hex.EncodeToString(nonce)
	deadline := now.Add(attestAnswerWithin)
	if !j.attest.add(key, &attestRequest{node: s.node, serial: s.serial, deadline: deadline}) {
		s.base = now // full: try again an interval later
		return nil
	}
	if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_AttestBoot{AttestBoot: &pactv1.AttestBootRequest{
		Nonce: nonce, AnswerWithinMs: attestAnswerWithin.Milliseconds(),
	}}}); err != nil {
		j.attest.drop(key)
		return err
	}
	s.pending, s.deadline = key, deadline
	j.metrics.attestations.WithLabelValues(attestAsked).Inc()
	j.log.Info("boot attestation requested", logkey.NodeID, s.node, logkey.Serial, s.serial)
	return nil
}

// AttestBoot is the agent's answer to a request of its stream: round one
// (EK and a fresh AK) gets a TPM challenge, round two (the proof bound to
// the stream certificate's key, and a quote over the challenge's nonce)
// is verified exactly as a renewal's and decided against the policy.
func (s *enrollmentServer) AttestBoot(ctx context.Context, req *pactv1.AttestBootRequest) (*pactv1.AttestBootResponse, error) {
	j := s.j
	p := principalFrom(ctx)
	if p.SVID {
		return nil, fmt.Errorf("%w: SVID-authenticated agents are not asked for boot attestation", ErrPermission)
	}
	id := p.ID.Name
	att := req.GetTpm()
	roundTwo := att.GetChallengeId() != "" || len(att.GetProof()) > 0
	key := hex.EncodeToString(req.GetNonce())
	if !j.attest.take(key, id, p.Serial, j.cfg.Clock.Now(), roundTwo) {
		if roundTwo {
			j.metrics.attestations.WithLabelValues(attestRefused).Inc()
		}
		return nil, fmt.Errorf("%w: this journal has no pending boot attestation request with that nonce for this certificate (answered already, expired, or asked by another journal): requests are single use", ErrTPMChallengeUnknown)
	}
	n, ok := j.fsm.Node(id)
	if !ok || n.GetHardware().GetTpmEkHash() == "" {
		return nil, fmt.Errorf("%w: node %s is not registered with a TPM", ErrTPMRequired, id)
	}
	if att == nil || len(att.GetEkPublic()) == 0 {
		return nil, fmt.Errorf("%w: the answer carries no TPM attestation", ErrTPMRequired)
	}
	ch, ev, proved, err := j.tpmVerify(n, n.GetHardware().GetTpmEkHash(), fingerprint(p.Leaf.RawSubjectPublicKeyInfo), att)
	if err != nil {
		if roundTwo {
			j.metrics.attestations.WithLabelValues(attestRefused).Inc()
			j.log.Warn("boot attestation refused", logkey.NodeID, id, logkey.Err, err)
		}
		return nil, err
	}
	if ch != nil || !proved {
		return &pactv1.AttestBootResponse{TpmChallenge: ch}, nil
	}
	matches := j.attestVerdict(ctx, id, ev, "")
	j.attest.answered(key, id, j.cfg.Clock.Now())
	// Wake the stream to note the answer and schedule the next request.
	j.hub.notify(raftfsm.Event{NodeIDs: []string{id}})
	return &pactv1.AttestBootResponse{Matches: matches}, nil
}

// attestVerdict decides a node's verified quote (ev; nil: none) against
// the boot policy in force, or a failure to answer (reason), between
// renewals. It reports whether the node matches. Only a changed verdict
// is logged at warn; a mismatch under an enforced fence policy fences the
// node through Raft (once: a fenced node's streams end). Under refuse
// nothing is refused now: the node's next renewal quotes again and is
// refused then (a measured boot does not change back until the node
// reboots, and a rebooted node enrolls with a quote).
func (j *Journal) attestVerdict(ctx context.Context, id string, ev *measuredboot.BootEvidence, reason string) bool {
	decide := func() (*pactv1.BootPolicy, []string, pactv1.BootPolicyAction) {
		n, _ := j.fsm.Node(id)
		p, ok := j.fsm.BootPolicyFor(n.GetVcluster())
		if !ok {
			return nil, nil, 0
		}
		diff := measuredboot.Evaluate(p, ev)
		if reason != "" {
			diff = []string{reason}
		}
		action := p.GetAction()
		if p.GetMode() != pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE {
			action = pactv1.BootPolicyAction_BOOT_POLICY_ACTION_OBSERVE
		}
		return p, diff, action
	}
	p, diff, action := decide()
	if p == nil || len(diff) == 0 {
		if reason == "" {
			j.metrics.attestations.WithLabelValues(attestMatch).Inc()
		}
		if p != nil {
			j.metrics.bootVerdicts.WithLabelValues(bootMatch).Inc()
		}
		if j.attest.verdict(id, false) {
			j.log.Warn("boot policy matches again", logkey.NodeID, id, logkey.VCluster, p.GetVcluster(), logkey.PolicyVersion, p.GetVersion())
		} else {
			j.log.Info("boot attested", logkey.NodeID, id)
		}
		return true
	}
	if reason == "" {
		j.metrics.attestations.WithLabelValues(attestMismatch).Inc()
	}
	what := strings.Join(diff, "; ")
	changed := j.attest.verdict(id, true)
	lvl := j.log.Info
	if changed {
		lvl = j.log.Warn
	}
	lvl("boot policy mismatch between renewals", logkey.NodeID, id, logkey.VCluster, p.GetVcluster(), logkey.PolicyVersion, p.GetVersion(),
		logkey.Mode, strings.ToLower(strings.TrimPrefix(p.GetMode().String(), "BOOT_POLICY_MODE_")),
		logkey.Action, strings.ToLower(strings.TrimPrefix(action.String(), "BOOT_POLICY_ACTION_")), logkey.Reason, what)
	if action != pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE {
		j.metrics.bootVerdicts.WithLabelValues(bootObserved).Inc()
		return false
	}
	// Only the leader's word is final: confirm the policy (and the node's
	// vCluster) before fencing.
	if err := j.readBarrier(ctx); err != nil {
		j.metrics.unconfirmed.Inc()
		j.attest.verdict(id, false) // decided again at the next answer
		j.log.Warn("cannot confirm the boot policy with the leader; the node is not fenced now", logkey.NodeID, id, logkey.Err, err)
		return false
	}
	if p, diff, action = decide(); p == nil || len(diff) == 0 || action != pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE {
		return p == nil || len(diff) == 0
	}
	if n, _ := j.fsm.Node(id); n.GetFence() != nil {
		return false
	}
	policy := fmt.Sprintf("boot policy version %d of %s", p.GetVersion(), cmp.Or(p.GetVcluster(), "the domain"))
	fence := fmt.Sprintf("%s (between renewals): %s", policy, strings.Join(diff, "; "))
	if len(fence) > 400 {
		fence = fence[:400] + "…"
	}
	if _, err := j.propose(ctx, &pactv1.Command{Actor: "journal/" + j.cfg.NodeID + " (boot policy)", Op: &pactv1.Command_Fence{Fence: &pactv1.FenceOp{
		NodeId: id, Fenced: true, Reason: fence,
	}}}); err != nil {
		j.attest.verdict(id, false) // decided again at the next answer
		j.log.Warn("fencing a node the boot policy refuses failed", logkey.NodeID, id, logkey.Err, err)
		return false
	}
	j.metrics.bootVerdicts.WithLabelValues(bootFenced).Inc()
	j.log.Warn("node fenced by the boot policy between renewals", logkey.NodeID, id, logkey.Reason, fence)
	return false
}

// captureWait bounds how long a capture waits for a streaming node's
// fresh quote.
const captureWait = 30 * time.Second

// freshQuote asks the node, over its stream here, for a quote now, and
// waits for it (pact boot-policy capture at a journal that holds no quote
// of the node). ok is false when no stream here answers requests.
func (j *Journal) freshQuote(ctx context.Context, node string) (rec bootRecord, ok bool, err error) {
	var s *streamAttest
	j.attestStreams.Range(func(k, _ any) bool {
		if k.(*streamAttest).node == node {
			s = k.(*streamAttest)
			return false
		}
		return true
	})
	if s == nil {
		return bootRecord{}, false, nil
	}
	done := j.attest.wait(node)
	select {
	case s.askNow <- struct{}{}:
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, captureWait)
	defer cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return bootRecord{}, true, fmt.Errorf("%w: node %s streams to this journal and did not answer a request for a fresh quote (%w): check its agent's log, or renew it (pact-agent renew-now) and capture again", ErrNotFound, node, ctx.Err())
	}
	rec, ok = j.boot.get(node)
	return rec, ok, nil
}

// captureAtPeers asks the other journals of the quorum, in parallel, to
// capture from the node's quote they hold or ask its stream for (pact
// boot-policy capture at a journal that has neither); the first capture
// wins. local is this journal's own not-found.
func (j *Journal) captureAtPeers(ctx context.Context, req *pactv1.CaptureBootPolicyRequest, local error) (*pactv1.CaptureBootPolicyResponse, error) {
	peers, err := j.raft.PeerClients()
	if err != nil {
		return nil, fmt.Errorf("%w; and the other journals cannot be listed: %w", local, err)
	}
	ctx, cancel := context.WithTimeout(ctx, captureWait+5*time.Second)
	defer cancel()
	type answer struct {
		id   string
		resp *pactv1.BootEvidenceResponse
		err  error
	}
	answers := make(chan answer, len(peers))
	for _, p := range peers {
		go func() {
			resp, err := p.Client.BootEvidence(ctx, &pactv1.BootEvidenceRequest{Capture: req})
			answers <- answer{p.ID, resp, err}
		}()
	}
	asked := []string{j.cfg.NodeID}
	var failed []string
	for range peers {
		a := <-answers
		if a.err == nil && a.resp.GetCapture().GetPolicy() != nil {
			j.log.Info("boot policy captured at another journal", logkey.NodeID, req.GetNodeId(), logkey.JournalID, a.id)
			return a.resp.GetCapture(), nil
		}
		asked = append(asked, a.id)
		if st, ok := status.FromError(a.err); a.err != nil && (!ok || st.Code() != codes.NotFound) {
			failed = append(failed, a.id+": "+st.Message())
		}
	}
	msg := fmt.Sprintf("no journal of the quorum holds a verified TPM quote of node %q or a stream of it that answers boot attestation (asked %s)", req.GetNodeId(), strings.Join(asked, ", "))
	if len(failed) > 0 {
		msg += "; not answered by " + strings.Join(failed, "; ")
	}
	return nil, fmt.Errorf("%w: %s; renew the node (pact-agent renew-now) or restart its agent so that it quotes again, then capture again (journals keep quotes in memory: a restarted journal has none)", ErrNotFound, msg)
}

// BootEvidence is another journal's pact boot-policy capture: captured
// from what this journal holds, or asks of the node's stream here.
func (s *peerServer) BootEvidence(ctx context.Context, req *pactv1.BootEvidenceRequest) (*pactv1.BootEvidenceResponse, error) {
	resp, err := s.j.captureLocal(ctx, req.GetCapture())
	if err != nil {
		return nil, err
	}
	return &pactv1.BootEvidenceResponse{Capture: resp}, nil
}
