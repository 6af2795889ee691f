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
	"github.com/pact-hpc/pact/journal/auth"
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
//
// The rule: a node registered with a TPM whose boot policy has an attest
// interval is due a verified quote every interval, whatever its agent
// says. Its agent's word (answers_boot_attestation) decides only whether
// the request is sent: a stream whose agent does not offer to answer (an
// agent of an earlier release, one that opted out, or an SVID stream,
// which cannot answer) is counted unanswered at the same deadline as a
// request left unanswered, with the same consequence after the policy's
// tolerance. The schedule is the node's on this journal, not the
// stream's: a stream that ends with a request outstanding leaves it
// unanswered, and a new stream of the node is asked when the node is
// due, not an interval after it opens.

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
	// since is when the node's interval started here: the first stream
	// of it here, then each verified answer or request deadline. A
	// stream's next request is due an interval after it (or after the
	// node's last quote verified here, if later).
	since time.Time
	// owed: a stream that ended with a request outstanding left the
	// node at its tolerance, at owed misses; the next step of a stream
	// of it here decides (a closing stream has no context to fence
	// with).
	owed int
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
	n := a.node(node)
	n.misses = 0
	if now.After(n.since) {
		n.since = now
	}
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

// quotedSince treats a verified quote of node here (at enrollment, a
// renewal or another stream's answer) at or after asked as the answer to
// a request made at asked: the node's misses start over.
func (a *attestations) quotedSince(node string, asked, quoted time.Time) bool {
	if quoted.IsZero() || quoted.Before(asked) {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.node(node)
	n.misses = 0
	if quoted.After(n.since) {
		n.since = quoted
	}
	return true
}

// start returns when node's interval started here, starting it at now
// for a node first seen.
func (a *attestations) start(node string, now time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.node(node)
	if n.since.IsZero() {
		n.since = now
	}
	return n.since
}

// restart starts node's interval over at t (an answer, or a deadline).
func (a *attestations) restart(node string, t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.node(node)
	if t.After(n.since) {
		n.since = t
	}
}

// owe records that node reached its tolerance, at misses, with no
// stream to decide it; takeOwed returns those misses once (0: none owed).
func (a *attestations) owe(node string, misses int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.node(node).owed = misses
}

func (a *attestations) takeOwed(node string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.nodes[node]
	if !ok {
		return 0
	}
	m := n.owed
	n.owed = 0
	return m
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

// streamAttest is one Subscribe stream's side of it: when the node is
// next due, and the request outstanding. Only the stream's goroutine uses
// it.
type streamAttest struct {
	j            *Journal
	node, serial string
	// answers: the agent offered to answer requests
	// (answers_boot_attestation) on a journal-signed certificate's
	// stream. A stream that does not is sent none; each request due on it
	// is counted unanswered at its deadline all the same.
	answers bool
	// opened is when the stream opened (the node's interval starts then
	// if none has here); jitter, a fraction of the interval in [0,
	// 1/attestJitterDivisor).
	opened time.Time
	jitter float64
	// pending is the hex nonce of the outstanding request ("" none);
	// unsent, a request due on a stream that does not answer. asked is
	// when either was made, deadline when it is left unanswered.
	pending         string
	unsent          bool
	asked, deadline time.Time
	// askNow is signalled by a capture that needs a fresh quote; forced
	// is the stream's note of it.
	askNow chan struct{}
	forced bool
	// settings is the node's policy as of the FSM's applied index and
	// restores it was read at.
	settings attestSettings
}

// attestSettings is what the policy in force asks of a node: applies
// (the node is registered with a TPM and a policy applies to it), its
// attest interval (0: none) and tolerance.
type attestSettings struct {
	read            bool
	index, restores uint64
	applies         bool
	interval        time.Duration
	tolerance       int
}

// Asked is the channel a capture signals (nil, never ready, for a
// stream that is not asked).
func (s *streamAttest) Asked() <-chan struct{} {
	if s == nil || !s.answers {
		return nil
	}
	return s.askNow
}

// newStreamAttest follows every stream: a node the policy says must
// attest is due its requests whether its agent answers them or not.
// Only a stream whose agent answers (never an SVID's: AttestBoot takes
// a journal-signed certificate) is sent them, and is the one a capture
// may ask.
func (j *Journal) newStreamAttest(p *auth.Principal, req *pactv1.SubscribeRequest) *streamAttest {
	s := &streamAttest{j: j, node: p.ID.Name, serial: p.Serial, answers: !p.SVID && req.GetAnswersBootAttestation(),
		opened: j.cfg.Clock.Now(), jitter: j.attestJitterFraction(), askNow: make(chan struct{}, 1)}
	if s.answers {
		j.attestStreams.Store(s, struct{}{})
	}
	return s
}

// attestJitter is a fraction of the interval in [0, 1/attestJitterDivisor),
// drawn from the journal's jitter source (backoff.Jitter, which a test
// injects: Journal.attestJitter).
func (j *Journal) attestJitterFraction() float64 {
	const scale = 1 << 20
	return float64(j.attestJitter.Draw(scale)) / scale / attestJitterDivisor
}

// MarkAsked notes that a capture asked for a fresh quote: the next Step
// requests one.
func (s *streamAttest) MarkAsked() {
	if s != nil {
		s.forced = true
	}
}

// Close ends the stream's side. A request still outstanding can no longer
// be answered: unless it was answered, or the node quoted here since, it
// is counted unanswered now (an agent cannot escape a request by ending
// its stream), and a node that reaches its tolerance so is decided at the
// next step of a stream of it here. Its interval does not start over: the
// node's next stream here is asked at once.
func (s *streamAttest) Close() {
	if s == nil {
		return
	}
	j := s.j
	if s.answers {
		j.attestStreams.Delete(s)
	}
	if !s.outstanding() {
		return
	}
	if s.pending != "" {
		if _, answered := j.attest.status(s.pending); answered {
			return
		}
		j.attest.drop(s.pending)
	}
	if s.quoted() {
		return
	}
	// No context to decide with (the stream's is done): the node's next
	// stream here does.
	if misses, judge := s.missed("the stream ended with the request outstanding"); judge {
		j.attest.owe(s.node, misses)
	}
}

// outstanding reports whether a request (sent or not) awaits its answer.
func (s *streamAttest) outstanding() bool { return s.pending != "" || s.unsent }

// quoted reports whether the node quoted here (at enrollment, a renewal or
// another stream's answer) since the outstanding request was made: that
// answers it.
func (s *streamAttest) quoted() bool {
	r, ok := s.j.boot.get(s.node)
	return ok && s.j.attest.quotedSince(s.node, s.asked, r.at)
}

// policy is what the policy in force asks of the node, read again only
// when the FSM has applied something since (a stream wakes far more often
// than policies or registrations change).
func (s *streamAttest) policy() attestSettings {
	f := s.j.fsm
	index, restores := f.AppliedIndex(), f.Restores()
	if s.settings.read && s.settings.index == index && s.settings.restores == restores {
		return s.settings
	}
	st := attestSettings{read: true, index: index, restores: restores}
	if n, ok := f.Node(s.node); ok && n.GetHardware().GetTpmEkHash() != "" {
		if p, ok := f.BootPolicyFor(n.GetVcluster()); ok {
			st.applies = true
			st.interval = time.Duration(p.GetAttestIntervalSeconds()) * time.Second
			st.tolerance = cmp.Or(int(p.GetAttestTolerance()), attestDefaultTolerance)
		}
	}
	s.settings = st
	return st
}

// next is when the stream must next wake for attestation (zero: never).
func (s *streamAttest) next() time.Time {
	if s.outstanding() {
		return s.deadline
	}
	iv := s.policy().interval
	if iv <= 0 {
		return time.Time{}
	}
	base := s.j.attest.start(s.node, s.opened)
	if r, ok := s.j.boot.get(s.node); ok && r.at.After(base) {
		base = r.at
	}
	return base.Add(iv + time.Duration(s.jitter*float64(iv)))
}

// Wait shortens the stream's wait to its next attestation event.
func (s *streamAttest) Wait(now time.Time, wait time.Duration) time.Duration {
	if s == nil {
		return wait
	}
	if t := s.next(); !t.IsZero() {
		return min(wait, max(t.Sub(now), 0))
	}
	return wait
}

// missed counts the outstanding request unanswered (why: how), and
// returns the node's misses in a row and whether they reach the policy's
// tolerance: then the node is treated as a mismatch (unansweredVerdict).
func (s *streamAttest) missed(why string) (misses int, judge bool) {
	j := s.j
	s.pending, s.unsent = "", false
	j.metrics.attestations.WithLabelValues(attestUnanswered).Inc()
	misses = j.attest.missed(s.node)
	st := s.policy()
	j.log.Warn("no answer to a boot attestation request", logkey.NodeID, s.node, logkey.Serial, s.serial, logkey.Failures, misses, logkey.Reason, why)
	return misses, st.applies && misses >= st.tolerance
}

// unansweredVerdict decides a node that left misses requests in a row
// without a verified answer: a mismatch.
func (s *streamAttest) unansweredVerdict(ctx context.Context, misses int) {
	s.j.attestVerdict(ctx, s.node, nil, fmt.Sprintf("no verified answer to %d attestation requests in a row", misses))
}

// Step runs at every wake-up of the stream: it notes an answer, counts a
// request left unanswered (past the policy's tolerance, a mismatch), and
// makes a request when one is due (or a capture wants one): sent to an
// agent that answers, counted at its deadline for one that does not.
func (s *streamAttest) Step(ctx context.Context, stream pactv1.EnrollmentService_SubscribeServer) error {
	if s == nil {
		return nil
	}
	j := s.j
	now := j.cfg.Clock.Now()
	forced := s.forced && s.answers
	s.forced = false
	if misses := j.attest.takeOwed(s.node); misses > 0 && s.policy().applies {
		s.unansweredVerdict(ctx, misses)
	}
	if s.outstanding() {
		// The next request is an interval after the answer (or the
		// deadline), whenever this goroutine gets to see it.
		var at time.Time
		answered := false
		if s.pending != "" {
			at, answered = j.attest.status(s.pending)
		}
		switch {
		case answered:
			s.pending = ""
			j.attest.restart(s.node, at)
		case s.quoted():
			if s.pending != "" {
				j.attest.drop(s.pending)
			}
			s.pending, s.unsent = "", false
		case !now.Before(s.deadline):
			if s.pending != "" {
				j.attest.drop(s.pending)
			}
			j.attest.restart(s.node, s.deadline)
			why := "no verified answer within the deadline"
			if s.unsent {
				why = "the agent does not answer boot attestation requests on this stream (an agent of an earlier release, one that does not offer to, or an SVID stream)"
			}
			if misses, judge := s.missed(why); judge {
				s.unansweredVerdict(ctx, misses)
			}
		default:
			return nil
		}
		s.jitter = j.attestJitterFraction()
	}
	if !forced {
		t := s.next()
		if t.IsZero() || now.Before(t) {
			return nil
		}
	}
	deadline := now.Add(attestAnswerWithin)
	if !s.answers {
		s.unsent, s.asked, s.deadline = true, now, deadline
		j.log.Info("boot attestation due from a stream that does not answer requests: counted unanswered at its deadline unless the node quotes here first",
			logkey.NodeID, s.node, logkey.Serial, s.serial)
		return nil
	}
	nonce := make([]byte, measuredboot.NonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	key := hex.EncodeToString(nonce)
	if !j.attest.add(key, &attestRequest{node: s.node, serial: s.serial, deadline: deadline}) {
		j.attest.restart(s.node, now) // full: try again an interval later
		return nil
	}
	if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_AttestBoot{AttestBoot: &pactv1.AttestBootRequest{
		Nonce: nonce, AnswerWithinMs: attestAnswerWithin.Milliseconds(),
	}}}); err != nil {
		j.attest.drop(key)
		return err
	}
	s.pending, s.asked, s.deadline = key, now, deadline
	j.metrics.attestations.WithLabelValues(attestAsked).Inc()
	j.log.Info("boot attestation requested", logkey.NodeID, s.node, logkey.Serial, s.serial)
	return nil
}

// answerAttestBoot is the agent's answer (AttestBoot, from a journal-signed
// certificate's stream) to a request of its stream: round one
// (EK and a fresh AK) gets a TPM challenge, round two (the proof bound to
// the stream certificate's key, and a quote over the challenge's nonce)
// is verified exactly as a renewal's and decided against the policy.
func (j *Journal) answerAttestBoot(ctx context.Context, p *auth.Principal, req *pactv1.AttestBootRequest) (*pactv1.AttestBootResponse, error) {
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
