package journal_test

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	agenttpm "github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/measuredboot/measuredboottest"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/internal/tpmattest"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// attestInterval is the policies' attest interval in these tests; a tick
// of attestTick passes it with any jitter (at most a tenth of it).
const (
	attestInterval = time.Hour
	attestTick     = attestInterval + attestInterval/10 + time.Minute
)

// attestingNode is a TPM node enrolled with a good quote, whose software
// TPM the test can extend.
type attestingNode struct {
	*tpmNode
	a      *agent
	device string
}

func newAttestingNode(t *testing.T, e *env, id, bmc, mac string) *attestingNode {
	t.Helper()
	n, device := registerBootedTPMNode(t, e.admin, id, bmc, mac, goodBoot)
	return &attestingNode{tpmNode: n, a: e.enrollQuoted(t, n, goodBoot.Bytes()), device: device}
}

// changeKernel extends PCR 9 as a kernel other than the policy's would,
// and returns the event log that reproduces the TPM's PCRs since.
func (n *attestingNode) changeKernel(t *testing.T) []byte {
	t.Helper()
	other := measuredboottest.Log{{PCR: 9, Type: measuredboottest.EvIPL, Data: []byte("/vmlinuz 6.1.0-other")}}
	// A software TPM serves one client at a time: the attestor lets go
	// of it, and a new one (with a fresh AK, as pact-agent makes for
	// every attestation) takes it again.
	n.att.Close()
	tr, err := agenttpm.Open(n.device)
	if err != nil {
		t.Fatal(err)
	}
	other.Extend(t, tr)
	tr.Close()
	if tr, err = agenttpm.Open(n.device); err != nil {
		t.Fatal(err)
	}
	if n.att, err = agenttpm.NewAttestor(tr); err != nil {
		t.Fatal(err)
	}
	return append(append(measuredboottest.Log{}, goodBoot...), other...).Bytes()
}

// setAttestingPolicy captures the domain's policy from ref and sets it
// with mode, action, the test's interval and tolerance.
func (e *env) setAttestingPolicy(t *testing.T, ref string, mode pactv1.BootPolicyMode, action pactv1.BootPolicyAction, tolerance uint32) {
	t.Helper()
	c := e.bootPolicies(t)
	cap, err := c.CaptureBootPolicy(callCtx(t), &pactv1.CaptureBootPolicyRequest{NodeId: ref, Mode: mode, Action: action})
	if err != nil {
		t.Fatalf("capture from %s: %v", ref, err)
	}
	p := cap.GetPolicy()
	p.AttestIntervalSeconds = uint32(attestInterval / time.Second)
	p.AttestTolerance = tolerance
	set, err := c.SetBootPolicy(callCtx(t), &pactv1.SetBootPolicyRequest{Policy: p})
	if err != nil {
		t.Fatalf("set: %v", err)
	}
	if set.GetPolicy().GetAttestIntervalSeconds() != 3600 || set.GetPolicy().GetAttestTolerance() != tolerance {
		t.Fatalf("set %v, want the interval and tolerance kept", set.GetPolicy())
	}
}

// subscribeAttesting opens the node's stream as an agent that answers
// boot attestation requests, and reads its first state.
func (e *env) subscribeAttesting(t *testing.T, a *agent) *watch {
	t.Helper()
	return e.subscribeWith(t, a, &pactv1.SubscribeRequest{AnswersBootAttestation: true})
}

// asked ticks past the interval and returns the request the stream
// carries.
func (e *env) asked(t *testing.T, w *watch) *pactv1.AttestBootRequest {
	t.Helper()
	e.tick(t, attestTick)
	ev := w.next(t)
	req := ev.GetAttestBoot()
	if req == nil || len(req.GetNonce()) != 32 || req.GetAnswerWithinMs() <= 0 {
		t.Fatalf("after the interval the stream carried %v, want a boot attestation request with a 32-byte nonce", ev)
	}
	return req
}

// attestRound1 sends round one of the answer to req.
func (e *env) attestRound1(t *testing.T, n *attestingNode, req *pactv1.AttestBootRequest) *pactv1.TpmChallenge {
	t.Helper()
	r1, err := e.agentClient(t, n.a).AttestBoot(callCtx(t), &pactv1.AttestBootRequest{Nonce: req.GetNonce(), Tpm: &pactv1.TpmAttestation{EkPublic: n.att.EKPublic(), AkPublic: n.att.AKPublic()}})
	if err != nil {
		t.Fatalf("attestation round one: %v", err)
	}
	if r1.GetTpmChallenge() == nil || len(r1.GetTpmChallenge().GetQuoteNonce()) != 32 {
		t.Fatalf("attestation round one answered %v, want a challenge with a nonce", r1)
	}
	return r1.GetTpmChallenge()
}

// attestRound2 answers ch with the proof bound to the stream's
// certificate key and quote.
func (e *env) attestRound2(t *testing.T, n *attestingNode, req *pactv1.AttestBootRequest, ch *pactv1.TpmChallenge, quote *pactv1.TpmQuote) (*pactv1.AttestBootResponse, error) {
	t.Helper()
	secret, err := n.att.Activate(ch.GetCredentialBlob(), ch.GetEncryptedSecret())
	if err != nil {
		t.Fatal(err)
	}
	return e.agentClient(t, n.a).AttestBoot(callCtx(t), &pactv1.AttestBootRequest{Nonce: req.GetNonce(), Tpm: &pactv1.TpmAttestation{
		EkPublic: n.att.EKPublic(), AkPublic: n.att.AKPublic(),
		ChallengeId: ch.GetChallengeId(), Proof: tpmattest.Proof(secret, ch.GetChallengeId(), spkiHex(t, n.a.key.CSR)),
		Quote: quote,
	}})
}

// attest answers req as pact-agent does, with log.
func (e *env) attest(t *testing.T, n *attestingNode, req *pactv1.AttestBootRequest, log []byte) (*pactv1.AttestBootResponse, error) {
	t.Helper()
	ch := e.attestRound1(t, n, req)
	return e.attestRound2(t, n, req, ch, quoteOf(t, n.att, ch.GetQuoteNonce(), log))
}

func (e *env) attestations(t *testing.T, result string) float64 {
	t.Helper()
	return must(t, e.h.J.MetricsRegistry(), "pact_journal_attestations_total", "result", result)
}

// waitAttestations waits until pact_journal_attestations_total{result}
// is want: the stream's goroutine counts an unanswered request once it
// sees the deadline pass.
func (e *env) waitAttestations(t *testing.T, result string, want float64) {
	t.Helper()
	eventually(t, "attestations{"+result+"} to reach the count", func() bool { return e.attestations(t, result) == want })
}

// TestAttestBetweenRenewalsFences: a streaming TPM node whose policy has
// an attest interval is asked over its stream once the interval has
// passed, answers with a fresh quote bound to its certificate, and
// passes with no Raft write. Requests are single use: a replayed answer
// and a quote over an earlier nonce are refused. After the node's
// measured kernel changes, the next request's quote fences it at once
// under a fence policy, and its stream ends NODE_FENCED.
func TestAttestBetweenRenewalsFences(t *testing.T) {
	e := newEnv(t)
	n := newAttestingNode(t, e, "n1", "SN1", mac1)
	e.setAttestingPolicy(t, "n1", pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE, 0)
	w := e.subscribeAttesting(t, n.a)

	e.tick(t, attestInterval/2)
	w.quiet(t)
	req := e.asked(t, w)
	before := e.h.J.CommitIndex()
	ch := e.attestRound1(t, n, req)
	firstQuote := quoteOf(t, n.att, ch.GetQuoteNonce(), goodBoot.Bytes())
	resp, err := e.attestRound2(t, n, req, ch, firstQuote)
	if err != nil || !resp.GetMatches() {
		t.Fatalf("a good answer: %v, %v; want it to match", resp, err)
	}
	if after := e.h.J.CommitIndex(); after != before {
		t.Errorf("a matching attestation wrote to Raft: commit index %d -> %d", before, after)
	}
	if got := e.attestations(t, "match"); got != 1 {
		t.Errorf("attestations{match} = %v, want 1", got)
	}
	// The same answer again: the request is spent.
	_, err = e.attestRound2(t, n, req, ch, firstQuote)
	if apierr.FromError(err).Reason != apierr.TPMChallengeUnknown {
		t.Errorf("a replayed answer: %v, want %s", err, apierr.TPMChallengeUnknown)
	}
	// The next request: a quote over the earlier challenge's nonce.
	req2 := e.asked(t, w)
	ch2 := e.attestRound1(t, n, req2)
	_, err = e.attestRound2(t, n, req2, ch2, firstQuote)
	if pe := apierr.FromError(err); pe.Reason != apierr.TPMQuoteRefused || pe.Code != codes.PermissionDenied {
		t.Errorf("a replayed quote: %v, want %s", err, apierr.TPMQuoteRefused)
	}
	if got := e.attestations(t, "refused"); got != 2 {
		t.Errorf("attestations{refused} = %v, want 2 (the replayed answer and quote)", got)
	}
	// The request was spent without a verified answer: counted at its
	// deadline, one miss of the tolerance of 3, nothing fenced.
	e.tick(t, 3*time.Minute)
	e.waitAttestations(t, "unanswered", 1)
	if f := e.node(t, "n1").GetFence(); f != nil {
		t.Fatalf("fenced after one unanswered request: %v", f)
	}

	log := n.changeKernel(t)
	req3 := e.asked(t, w)
	resp, err = e.attest(t, n, req3, log)
	if err != nil || resp.GetMatches() {
		t.Fatalf("an answer after the kernel changed: %v, %v; want a verified mismatch", resp, err)
	}
	f := e.node(t, "n1").GetFence()
	if f == nil {
		t.Fatal("the node is not fenced after its quote stopped matching a fence policy")
	}
	if got := e.attestations(t, "mismatch"); got != 1 {
		t.Errorf("attestations{mismatch} = %v, want 1", got)
	}
	if got := must(t, e.h.J.MetricsRegistry(), "pact_journal_boot_policy_verdicts_total", "verdict", "fenced"); got != 1 {
		t.Errorf("verdicts{fenced} = %v, want 1", got)
	}
	evs, _, err := w.end(t)
	if apierr.FromError(err).Reason != apierr.NodeFenced {
		t.Errorf("the stream ended %v (events %v), want %s", err, evs, apierr.NodeFenced)
	}
}

// TestAttestBetweenRenewalsObserves: under a policy in observe mode the
// same changed kernel is counted and logged, never fenced nor written.
// A stream of an agent that does not answer requests is never sent one;
// the request due on it is counted unanswered at its deadline.
func TestAttestBetweenRenewalsObserves(t *testing.T) {
	e := newEnv(t)
	n := newAttestingNode(t, e, "n1", "SN1", mac1)
	old := newAttestingNode(t, e, "n2", "SN2", mac2)
	e.setAttestingPolicy(t, "n1", pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE, 0)
	w := e.subscribeAttesting(t, n.a)
	wOld := e.subscribe(t, old.a)

	log := n.changeKernel(t)
	req := e.asked(t, w)
	wOld.quiet(t)
	before := e.h.J.CommitIndex()
	observedBefore := must(t, e.h.J.MetricsRegistry(), "pact_journal_boot_policy_verdicts_total", "verdict", "observed")
	resp, err := e.attest(t, n, req, log)
	if err != nil || resp.GetMatches() {
		t.Fatalf("an answer after the kernel changed: %v, %v; want a verified mismatch", resp, err)
	}
	if after := e.h.J.CommitIndex(); after != before {
		t.Errorf("an observed mismatch wrote to Raft: commit index %d -> %d", before, after)
	}
	if f := e.node(t, "n1").GetFence(); f != nil {
		t.Fatalf("fenced under an observe policy: %v", f)
	}
	if got := e.attestations(t, "mismatch"); got != 1 {
		t.Errorf("attestations{mismatch} = %v, want 1", got)
	}
	if got := must(t, e.h.J.MetricsRegistry(), "pact_journal_boot_policy_verdicts_total", "verdict", "observed"); got != observedBefore+1 {
		t.Errorf("verdicts{observed} = %v, want %v", got, observedBefore+1)
	}
	// Asked again an interval later; the stream stays.
	e.asked(t, w)
	w.quiet(t)
	wOld.quiet(t)
	if got := e.attestations(t, "asked"); got != 2 {
		t.Errorf("attestations{asked} = %v, want 2 (n2's agent does not answer, so it is never sent a request)", got)
	}
	if got := e.attestations(t, "unanswered"); got != 1 {
		t.Errorf("attestations{unanswered} = %v, want 1 (the request due on n2's stream, past its deadline)", got)
	}
}

// TestAttestUnansweredIsCounted: a node that never answers is counted at
// each request's deadline, and treated as a mismatch after the policy's
// tolerance: under a fence policy, fenced.
func TestAttestUnansweredIsCounted(t *testing.T) {
	e := newEnv(t)
	n := newAttestingNode(t, e, "n1", "SN1", mac1)
	e.setAttestingPolicy(t, "n1", pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE, 2)
	w := e.subscribeAttesting(t, n.a)

	e.asked(t, w)
	e.tick(t, 3*time.Minute)
	e.waitAttestations(t, "unanswered", 1)
	if f := e.node(t, "n1").GetFence(); f != nil {
		t.Fatalf("fenced after one miss of a tolerance of 2: %v", f)
	}
	e.asked(t, w)
	e.tick(t, 3*time.Minute)
	e.waitAttestations(t, "unanswered", 2)
	e.waitNode(t, "n1", "fenced after two misses", func(n *pactv1.Node) bool { return n.GetFence() != nil })
	if _, _, err := w.end(t); apierr.FromError(err).Reason != apierr.NodeFenced {
		t.Errorf("the stream ended %v, want %s", err, apierr.NodeFenced)
	}
}

// TestAttestCannotBeOptedOut: the agent of a TPM node under a policy
// with an attest interval cannot opt out of being attested between
// renewals. A hostile agent whose stream leaves answers_boot_attestation
// unset (as an agent of an earlier release does) is sent no request, and
// each request due is counted unanswered at its deadline: past the
// tolerance the node is fenced, as one that never answers. A node
// without a TPM under the same policy is never counted.
func TestAttestCannotBeOptedOut(t *testing.T) {
	e := newEnv(t)
	n := newAttestingNode(t, e, "n1", "SN1", mac1)
	plain := e.activate(t, "n2", "SN2", mac2)
	e.setAttestingPolicy(t, "n1", pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE, 2)
	w := e.subscribe(t, n.a) // answers_boot_attestation unset
	wPlain := e.subscribe(t, plain)

	e.tick(t, attestTick)
	w.quiet(t)
	e.tick(t, 3*time.Minute)
	e.waitAttestations(t, "unanswered", 1)
	if f := e.node(t, "n1").GetFence(); f != nil {
		t.Fatalf("fenced after one miss of a tolerance of 2: %v", f)
	}
	e.tick(t, attestTick)
	e.tick(t, 3*time.Minute)
	e.waitAttestations(t, "unanswered", 2)
	f := e.waitNode(t, "n1", "fenced after two requests due on a stream that does not answer", func(n *pactv1.Node) bool { return n.GetFence() != nil }).GetFence()
	if !strings.Contains(f.GetReason(), "no verified answer to 2 attestation requests in a row") {
		t.Errorf("fence reason %q, want the unanswered requests named", f.GetReason())
	}
	evs, _, err := w.end(t)
	if apierr.FromError(err).Reason != apierr.NodeFenced {
		t.Errorf("the stream ended %v, want %s", err, apierr.NodeFenced)
	}
	for _, ev := range evs {
		if ev.GetAttestBoot() != nil {
			t.Errorf("a stream that does not answer was sent a request: %v", ev)
		}
	}
	wPlain.quiet(t)
	if got := e.attestations(t, "asked"); got != 0 {
		t.Errorf("attestations{asked} = %v, want 0", got)
	}
	if got := e.attestations(t, "unanswered"); got != 2 {
		t.Errorf("attestations{unanswered} = %v, want 2 (n1's; n2 has no TPM)", got)
	}
}

// TestAttestStreamCannotBeReopened: a node cannot dodge a request by
// ending its stream and opening another. The request it leaves is
// counted unanswered when the stream ends, and its next stream is asked
// at once: the node is due, whichever stream it opens. At the tolerance
// the node's next stream fences it.
func TestAttestStreamCannotBeReopened(t *testing.T) {
	e := newEnv(t)
	n := newAttestingNode(t, e, "n1", "SN1", mac1)
	e.setAttestingPolicy(t, "n1", pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE, 2)
	w := e.subscribeAttesting(t, n.a)
	e.asked(t, w)
	w.close(t, e)
	e.waitAttestations(t, "unanswered", 1)
	if f := e.node(t, "n1").GetFence(); f != nil {
		t.Fatalf("fenced after one miss of a tolerance of 2: %v", f)
	}

	w = e.subscribeAttesting(t, n.a)
	if ev := w.next(t); ev.GetAttestBoot() == nil {
		t.Fatalf("a new stream of a node that is due carried %v, want a request at once", ev)
	}
	w.close(t, e)
	e.waitAttestations(t, "unanswered", 2)

	w = e.subscribeAttesting(t, n.a)
	e.waitNode(t, "n1", "fenced by its next stream after two requests left by ended streams", func(n *pactv1.Node) bool { return n.GetFence() != nil })
	if _, _, err := w.end(t); apierr.FromError(err).Reason != apierr.NodeFenced {
		t.Errorf("the stream ended %v, want %s", err, apierr.NodeFenced)
	}
}

// TestAttestCannotBeLeftOut: a TPM node under a boot policy gets no
// certificate without a quote. A renewal that leaves out its TPM
// attestation is a renewal that sent no quote: refused under refuse,
// nothing written; an attested renewal still renews. A standby asked for
// with a SPIRE SVID carries no quote either: refused. And an SVID's
// stream cannot answer requests (AttestBoot takes a journal-signed
// certificate), whatever it offers: each one due on it is counted
// unanswered, so past the tolerance the node is treated as a mismatch.
func TestAttestCannotBeLeftOut(t *testing.T) {
	e := newSPIREEnv(t)
	n := newAttestingNode(t, e.env, "n1", "SN1", mac1)
	ek := make([]byte, 32)
	ek[0] = 1
	h := hw("SN2", mac2)
	h.TpmEkHash = hex.EncodeToString(ek)
	if _, err := e.admin.RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: "s1", Hardware: h, SpiffeId: agentID("s1")}); err != nil {
		t.Fatal(err)
	}
	e.setAttestingPolicy(t, "n1", pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE, 1)

	before := e.registry(t)
	_, err := e.renew(t, n.a)
	e.refusedUnwritten(t, before, nil, err, codes.PermissionDenied, apierr.BootPolicyRefused)
	if _, err := e.renewAttested(t, n.tpmNode, n.a, goodBoot.Bytes(), nil); err != nil {
		t.Fatalf("an attested renewal: %v", err)
	}

	now := e.fc.Now()
	s := e.ca.issue(t, now.Add(-time.Minute), now.Add(24*time.Hour), agentID("s1"))
	w := e.subscribeWith(t, s.agent("s1"), &pactv1.SubscribeRequest{AnswersBootAttestation: true})
	before = e.registry(t)
	resp, err := e.agentClient(t, s.agent("s1")).IssueStandby(callCtx(t), &pactv1.IssueStandbyRequest{CsrDer: journaltest.NewKey(t).CSR})
	e.refusedUnwritten(t, before, resp, err, codes.PermissionDenied, apierr.BootPolicyRefused)

	mismatches := must(t, e.h.J.MetricsRegistry(), "pact_journal_boot_policy_verdicts_total", "verdict", "observed")
	e.tick(t, attestTick)
	w.quiet(t)
	e.tick(t, 3*time.Minute)
	e.waitAttestations(t, "unanswered", 1)
	eventually(t, "the SVID stream's unanswered request to count as a mismatch", func() bool {
		return must(t, e.h.J.MetricsRegistry(), "pact_journal_boot_policy_verdicts_total", "verdict", "observed") == mismatches+1
	})
	if got := e.attestations(t, "asked"); got != 0 {
		t.Errorf("attestations{asked} = %v, want 0: an SVID stream is sent no request", got)
	}
}

// TestCaptureAtAnyJournal: pact boot-policy capture works at any journal
// of the quorum. A journal without the node's quote asks the others (the
// one that verified its enrollment answers); a journal holding the node's
// stream asks the node for a fresh quote; a node no journal has a quote
// or stream of is refused NOT_FOUND naming the journals asked and what
// to do.
func TestCaptureAtAnyJournal(t *testing.T) {
	c := startCluster(t, 3)
	envAt := func(i int) *env {
		return &env{h: c.Nodes[i], admin: c.Nodes[i].AdminClient(t), streamed: map[string]bool{}}
	}
	e1, e3 := envAt(0), envAt(2)
	n := newAttestingNode(t, e1, "n1", "SN1", mac1) // enrolled (and quoted) at j1
	capture := func(i int, node string) (*pactv1.CaptureBootPolicyResponse, error) {
		return pactv1.NewBootPolicyServiceClient(c.Nodes[i].Dial(t, &c.Nodes[i].Admin)).CaptureBootPolicy(callCtx(t), &pactv1.CaptureBootPolicyRequest{NodeId: node})
	}
	got, err := capture(1, "n1")
	if err != nil || !strings.Contains(got.GetPolicy().GetComment(), "(journal j1)") || len(got.GetPolicy().GetEvents()) == 0 {
		t.Fatalf("capture at j2 of a node quoted at j1: %v, %v", got, err)
	}

	// The node streams to j3, which has no quote of it: j3 asks the node.
	// (j1 answers too, with the quote it holds, if j3's own capture is
	// not first: j3 asks its stream before the others.)
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		r, err := e3.admin.InspectNode(callCtx(t), &pactv1.InspectNodeRequest{NodeId: "n1"})
		return err == nil && r.GetNode().GetCert().GetSerial() == n.a.serial
	}, "j3 to hold n1's certificate")
	w := e3.subscribeAttesting(t, n.a)
	// The journal registers the stream as one that answers attestation
	// requests just after its first state: a capture before that would
	// find none here and ask the others.
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return e3.h.J.AttestingStreams("n1") == 1 },
		"j3 to hold n1's attesting stream")
	type result struct {
		resp *pactv1.CaptureBootPolicyResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := capture(2, "n1")
		done <- result{resp, err}
	}()
	req := w.next(t).GetAttestBoot()
	if req == nil {
		t.Fatal("a capture at the journal holding the stream did not ask the node for a quote")
	}
	if resp, err := e3.attest(t, n, req, goodBoot.Bytes()); err != nil || !resp.GetMatches() {
		t.Fatalf("the node's answer: %v, %v", resp, err)
	}
	r := <-done
	if r.err != nil || !strings.Contains(r.resp.GetPolicy().GetComment(), "(journal j3)") {
		t.Fatalf("capture at j3 from the node's fresh quote: %v, %v", r.resp, r.err)
	}

	_, err = capture(1, "ghost")
	if pe := apierr.FromError(err); pe.Code != codes.NotFound || !strings.Contains(pe.Message, "asked j2, j") || !strings.Contains(pe.Message, "pact-agent renew-now") {
		t.Fatalf("capture of a node nobody quoted: %v, want NOT_FOUND naming the journals asked and what to do", err)
	}
}
