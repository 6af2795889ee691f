package journal_test

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"google.golang.org/grpc/codes"

	agenttpm "github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/measuredboot/measuredboottest"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/internal/swtpmtest"
	"github.com/pact-hpc/pact/internal/tpmattest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// goodBoot is the reference image's boot in these tests.
var goodBoot = measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")

// newBootedTPMNode registers a TPM node whose software TPM measured boot
// (its PCRs extended with boot's events, as firmware does).
func newBootedTPMNode(t *testing.T, e *env, id, bmc, mac string, boot measuredboottest.Log) *tpmNode {
	t.Helper()
	n, _ := registerBootedTPMNode(t, e.admin, id, bmc, mac, boot)
	return n
}

// registerBootedTPMNode is the TPM node set-up of these tests: it starts a
// software TPM, extends its PCRs with boot's events, makes an AK in it and
// registers id with its EK hash through admin. device is the TPM's, for a
// test that extends it later (the node's attestor, n.att, is closed at the
// end of the test, whichever it is then).
func registerBootedTPMNode(t *testing.T, admin pactv1.AdminServiceClient, id, bmc, mac string, boot measuredboottest.Log) (n *tpmNode, device string) {
	t.Helper()
	sw := swtpmtest.Start(t)
	tr, err := agenttpm.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	boot.Extend(t, tr)
	tr.Close()
	tr, err = agenttpm.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	att, err := agenttpm.NewAttestor(tr)
	if err != nil {
		t.Fatal(err)
	}
	n = &tpmNode{id: id, bmc: bmc, mac: mac, att: att, key: journaltest.NewKey(t)}
	t.Cleanup(func() { n.att.Close() })
	h := hw(bmc, mac)
	h.TpmEkHash = att.EKHash()
	if _, err := admin.RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: id, Hardware: h}); err != nil {
		t.Fatal(err)
	}
	return n, sw.Device
}

// enrollQuoted enrolls n with its TPM and a quote whose event log is log,
// and returns its agent.
func (e *env) enrollQuoted(t *testing.T, n *tpmNode, log []byte) *agent {
	t.Helper()
	resp, err := e.enrollReq(t, n.quoted(t, n.challenge(t, e), log))
	if err != nil {
		t.Fatalf("enroll %s with a quote: %v", n.id, err)
	}
	return newAgent(n.id, n.key, resp.GetCertChainDer(), resp.GetSerial())
}

// quoteOf is what pact-agent adds to round two: att's quote of its boot
// PCRs over nonce, and log.
func quoteOf(t *testing.T, att *agenttpm.Attestor, nonce, log []byte) *pactv1.TpmQuote {
	t.Helper()
	q, err := att.Quote(nonce, agenttpm.DefaultQuotePCRs)
	if err != nil {
		t.Fatal(err)
	}
	out := &pactv1.TpmQuote{Quoted: q.Quoted, Signature: q.Signature, PcrHashAlg: uint32(tpm2.TPMAlgSHA256), EventLog: log}
	for _, i := range agenttpm.DefaultQuotePCRs {
		out.Pcrs = append(out.Pcrs, &pactv1.TpmPcr{Index: uint32(i), Digest: q.PCRs[i]})
	}
	return out
}

// quoted is round two with the quote.
func (n *tpmNode) quoted(t *testing.T, ch *pactv1.TpmChallenge, log []byte) *pactv1.EnrollRequest {
	t.Helper()
	req := n.answer(t, ch, n.key)
	req.Credentials.Tpm.Quote = quoteOf(t, n.att, ch.GetQuoteNonce(), log)
	return req
}

// TestEnrollWithQuote: round one carries a fresh nonce; a real TPM's quote
// over it, with an event log that reproduces the quoted PCRs, enrolls the
// node and the journal says it verified it.
func TestEnrollWithQuote(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, func(c *journal.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	n := newBootedTPMNode(t, e, "n1", "SN1", mac1, goodBoot)
	ch := n.challenge(t, e)
	if len(ch.GetQuoteNonce()) != 32 {
		t.Fatalf("quote nonce of %d bytes, want 32", len(ch.GetQuoteNonce()))
	}
	if ch2 := n.challenge(t, e); bytes.Equal(ch2.GetQuoteNonce(), ch.GetQuoteNonce()) {
		t.Fatal("two challenges carry the same nonce")
	}
	resp, err := e.enrollReq(t, n.quoted(t, ch, goodBoot.Bytes()))
	if err != nil || len(resp.GetCertChainDer()) == 0 {
		t.Fatalf("enroll with a good quote: %v, %v", resp, err)
	}
	var line string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, `msg="TPM quote verified"`) {
			line = l
		}
	}
	for _, want := range []string{"node_id=n1 ", `pcrs="[0 1 2 3 4 5 6 7 8 9 14]"`, "events=" + strconv.Itoa(len(goodBoot))} {
		if !strings.Contains(line, want) {
			t.Errorf("the verified-quote line %q lacks %s; log:\n%s", line, want, logs.String())
		}
	}
}

// TestQuoteRefusals: each bad quote is refused TPM_QUOTE_REFUSED, with no
// certificate and nothing written; the challenge is spent; the node's
// TPM then enrolls with a good quote.
func TestQuoteRefusals(t *testing.T) {
	e := newEnv(t)
	n := newBootedTPMNode(t, e, "n1", "SN1", mac1, goodBoot)
	other := newBootedTPMNode(t, e, "n2", "SN2", mac2, goodBoot)
	good := goodBoot.Bytes()
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, ch *pactv1.TpmChallenge, req *pactv1.EnrollRequest)
	}{
		{"replayed quote (an earlier challenge's nonce)", func(t *testing.T, ch *pactv1.TpmChallenge, req *pactv1.EnrollRequest) {
			old := n.challenge(t, e)
			req.Credentials.Tpm.Quote = quoteOf(t, n.att, old.GetQuoteNonce(), good)
		}},
		{"quote from another TPM", func(t *testing.T, ch *pactv1.TpmChallenge, req *pactv1.EnrollRequest) {
			req.Credentials.Tpm.Quote = quoteOf(t, other.att, ch.GetQuoteNonce(), good)
		}},
		{"event log of another kernel", func(t *testing.T, ch *pactv1.TpmChallenge, req *pactv1.EnrollRequest) {
			req.Credentials.Tpm.Quote.EventLog = measuredboottest.Boot("6.1.0-evil", "root=nfs quiet").Bytes()
		}},
		{"truncated event log", func(t *testing.T, ch *pactv1.TpmChallenge, req *pactv1.EnrollRequest) {
			req.Credentials.Tpm.Quote.EventLog = good[:len(good)-9]
		}},
		{"hostile event log", func(t *testing.T, ch *pactv1.TpmChallenge, req *pactv1.EnrollRequest) {
			req.Credentials.Tpm.Quote.EventLog = append(bytes.Clone(good[:60]), bytes.Repeat([]byte{0xff}, 64)...)
		}},
		{"a PCR value not the quoted one", func(t *testing.T, ch *pactv1.TpmChallenge, req *pactv1.EnrollRequest) {
			req.Credentials.Tpm.Quote.Pcrs[9].Digest = make([]byte, 32)
		}},
		{"a PCR given twice", func(t *testing.T, ch *pactv1.TpmChallenge, req *pactv1.EnrollRequest) {
			q := req.Credentials.Tpm.Quote
			q.Pcrs = append(q.Pcrs, q.Pcrs[0])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := n.challenge(t, e)
			req := n.quoted(t, ch, good)
			tc.tamper(t, ch, req)
			before := e.registry(t)
			resp, err := e.enrollReq(t, req)
			e.refusedUnwritten(t, before, resp, err, codes.PermissionDenied, apierr.TPMQuoteRefused)
			// The challenge is spent: the right answer to it now is unknown.
			_, err = e.enrollReq(t, n.quoted(t, ch, good))
			if r := apierr.FromError(err).Reason; r != apierr.TPMChallengeUnknown {
				t.Fatalf("the spent challenge answered again: %v, want %s", err, apierr.TPMChallengeUnknown)
			}
		})
	}
	if _, err := e.enrollReq(t, n.quoted(t, n.challenge(t, e), good)); err != nil {
		t.Fatalf("the node with a good quote: %v", err)
	}
}

// renewAttested renews a's certificate onto a fresh key with n's TPM: round
// one must answer a challenge and write nothing; round two carries the
// proof and a quote with log (tamper changes it before it goes).
func (e *env) renewAttested(t *testing.T, n *tpmNode, a *agent, log []byte, tamper func(*pactv1.TpmAttestation)) (*agent, error) {
	t.Helper()
	key := journaltest.NewKey(t)
	c := e.agentClient(t, a)
	req := &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: key.CSR, Tpm: &pactv1.TpmAttestation{EkPublic: n.att.EKPublic(), AkPublic: n.att.AKPublic()}}
	before := e.h.J.CommitIndex()
	r1, err := c.RenewCert(callCtx(t), req)
	if err != nil {
		t.Fatalf("renewal round one: %v", err)
	}
	ch := r1.GetTpmChallenge()
	if ch == nil || len(r1.GetCertChainDer()) > 0 || len(ch.GetQuoteNonce()) != 32 {
		t.Fatalf("renewal round one answered %v, want a challenge with a nonce and no certificate", r1)
	}
	if after := e.h.J.CommitIndex(); after != before {
		t.Fatalf("renewal round one wrote to Raft: commit index %d -> %d", before, after)
	}
	secret, err := n.att.Activate(ch.GetCredentialBlob(), ch.GetEncryptedSecret())
	if err != nil {
		t.Fatal(err)
	}
	req.Tpm.ChallengeId = ch.GetChallengeId()
	req.Tpm.Proof = tpmattest.Proof(secret, ch.GetChallengeId(), spkiHex(t, key.CSR))
	req.Tpm.Quote = quoteOf(t, n.att, ch.GetQuoteNonce(), log)
	if tamper != nil {
		tamper(req.Tpm)
	}
	resp, err := c.RenewCert(callCtx(t), req)
	if err != nil {
		if len(resp.GetCertChainDer()) > 0 {
			t.Errorf("a refused renewal returned a certificate")
		}
		return nil, err
	}
	return newAgent(a.node, key, resp.GetCertChainDer(), resp.GetSerial()), nil
}

// TestRenewWithQuote: a TPM node's renewal carries a fresh challenge and
// quote. A good one renews; a quote whose log shows another kernel, or
// one made for an earlier nonce, is refused TPM_QUOTE_REFUSED and the
// certificate stays; with no boot policy in force, a renewal without TPM
// attestation (an agent of an earlier release) renews as before (under
// one: TestAttestCannotBeLeftOut).
func TestRenewWithQuote(t *testing.T) {
	e := newEnv(t)
	n := newBootedTPMNode(t, e, "n1", "SN1", mac1, goodBoot)
	a, err := e.renewAttested(t, n, e.enrollQuoted(t, n, goodBoot.Bytes()), goodBoot.Bytes(), nil)
	if err != nil {
		t.Fatalf("renewal with a good quote: %v", err)
	}
	serial := inspectSerial(t, e, "n1")
	if serial != a.serial {
		t.Fatalf("registry serial %s, renewed %s", serial, a.serial)
	}

	evil := measuredboottest.Boot("6.1.0-evil", "root=nfs quiet").Bytes()
	_, err = e.renewAttested(t, n, a, evil, nil)
	if pe := apierr.FromError(err); pe.Reason != apierr.TPMQuoteRefused || pe.Code != codes.PermissionDenied {
		t.Fatalf("renewal with another kernel's log: %v, want %s", err, apierr.TPMQuoteRefused)
	}
	old := n.challenge(t, e)
	_, err = e.renewAttested(t, n, a, goodBoot.Bytes(), func(tp *pactv1.TpmAttestation) {
		tp.Quote = quoteOf(t, n.att, old.GetQuoteNonce(), goodBoot.Bytes())
	})
	if apierr.FromError(err).Reason != apierr.TPMQuoteRefused {
		t.Fatalf("renewal with a replayed quote: %v, want %s", err, apierr.TPMQuoteRefused)
	}
	if got := inspectSerial(t, e, "n1"); got != serial {
		t.Fatalf("a refused renewal changed the registry's serial %s -> %s", serial, got)
	}
	if _, err := e.renew(t, a); err != nil {
		t.Fatalf("a renewal without TPM attestation: %v", err)
	}
}

func inspectSerial(t *testing.T, e *env, id string) string {
	t.Helper()
	n, err := e.admin.InspectNode(callCtx(t), &pactv1.InspectNodeRequest{NodeId: id})
	if err != nil {
		t.Fatal(err)
	}
	return n.GetNode().GetCert().GetSerial()
}

func (e *env) bootPolicies(t *testing.T) pactv1.BootPolicyServiceClient {
	return pactv1.NewBootPolicyServiceClient(e.h.Dial(t, &e.h.Admin))
}

// capturedPolicy captures a policy from the reference node ref's last
// verified quote and sets it with mode and action.
func (e *env) capturedPolicy(t *testing.T, ref string, mode pactv1.BootPolicyMode, action pactv1.BootPolicyAction) *pactv1.BootPolicy {
	t.Helper()
	c := e.bootPolicies(t)
	cap, err := c.CaptureBootPolicy(callCtx(t), &pactv1.CaptureBootPolicyRequest{NodeId: ref, Mode: mode, Action: action})
	if err != nil {
		t.Fatalf("capture from %s: %v", ref, err)
	}
	cur, _ := c.ListBootPolicies(callCtx(t), &pactv1.ListBootPoliciesRequest{})
	var expect uint64
	for _, p := range cur.GetPolicies() {
		if p.GetVcluster() == "" {
			expect = p.GetVersion()
		}
	}
	set, err := c.SetBootPolicy(callCtx(t), &pactv1.SetBootPolicyRequest{Policy: cap.GetPolicy(), ExpectVersion: expect})
	if err != nil {
		t.Fatalf("set: %v", err)
	}
	return set.GetPolicy()
}

// TestBootPolicy: a policy captured from a reference node, enforced with
// each action, at enrollment and at renewal, against real quotes of
// software TPMs whose PCRs were extended with each boot's events.
func TestBootPolicy(t *testing.T) {
	e := newEnv(t)
	good := goodBoot.Bytes()
	ref := newBootedTPMNode(t, e, "ref", "SN0", "52:54:00:00:01:00", goodBoot)
	if _, err := e.bootPolicies(t).CaptureBootPolicy(callCtx(t), &pactv1.CaptureBootPolicyRequest{NodeId: "ref"}); apierr.FromError(err).Code != codes.NotFound {
		t.Fatalf("capture before any quote: %v, want NotFound", err)
	}
	if _, err := e.enrollReq(t, ref.quoted(t, ref.challenge(t, e), good)); err != nil {
		t.Fatal(err)
	}
	p := e.capturedPolicy(t, "ref", pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE)
	if p.GetVersion() != 1 || len(p.GetPcrs()) != 4 || len(p.GetEvents()) != 3 || !strings.Contains(p.GetComment(), "node ref") {
		t.Fatalf("captured and set %v", p)
	}

	// Another node of the image, with its own NIC (PCR 1), enrolls.
	same := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	same[1].Data = []byte("nic 52:54:00:00:00:01")
	n1 := newBootedTPMNode(t, e, "n1", "SN1", mac1, same)
	resp, err := e.enrollReq(t, n1.quoted(t, n1.challenge(t, e), same.Bytes()))
	if err != nil {
		t.Fatalf("a node of the reference image: %v", err)
	}

	// Another kernel: refused, nothing written.
	evilBoot := measuredboottest.Boot("6.1.0-evil", "root=nfs quiet")
	n2 := newBootedTPMNode(t, e, "n2", "SN2", mac2, evilBoot)
	before := e.registry(t)
	r, err := e.enrollReq(t, n2.quoted(t, n2.challenge(t, e), evilBoot.Bytes()))
	pe := e.refusedUnwritten(t, before, r, err, codes.PermissionDenied, apierr.BootPolicyRefused)
	if !strings.Contains(pe.Message, "EV_IPL in PCR 9") || !strings.Contains(pe.Message, "version 1") {
		t.Errorf("the refusal does not say what differs: %s", pe.Message)
	}
	// A quote narrower than the policy (no PCR 8, 9): refused.
	same3 := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	n3 := newBootedTPMNode(t, e, "n3", "SN3", "52:54:00:00:00:03", same3)
	ch := n3.challenge(t, e)
	req := n3.quoted(t, ch, same3.Bytes())
	req.Credentials.Tpm.Quote = narrowQuote(t, n3, ch.GetQuoteNonce(), same3.Bytes())
	_, err = e.enrollReq(t, req)
	if pe := apierr.FromError(err); pe.Reason != apierr.BootPolicyRefused || !strings.Contains(pe.Message, "PCR 9 is not in the quote") {
		t.Errorf("a narrower quote: %v", err)
	}
	// An agent that sends no quote: refused.
	req = n3.answer(t, n3.challenge(t, e), n3.key)
	if _, err := e.enrollReq(t, req); apierr.FromError(err).Reason != apierr.BootPolicyRefused {
		t.Errorf("no quote under an enforced policy: %v", err)
	}

	// Observe mode: the same kernel enrolls (the mismatch is only logged).
	e.capturedPolicy(t, "ref", pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE)
	r, err = e.enrollReq(t, n2.quoted(t, n2.challenge(t, e), evilBoot.Bytes()))
	if err != nil || len(r.GetCertChainDer()) == 0 {
		t.Fatalf("observe mode refused: %v", err)
	}

	// Enforce and fence: n1's kernel measurement changes under it; its
	// next renewal is refused and the node fenced.
	e.capturedPolicy(t, "ref", pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE)
	a := newAgent("n1", n1.key, resp.GetCertChainDer(), resp.GetSerial())
	if a, err = e.renewAttested(t, n1, a, same.Bytes(), nil); err != nil {
		t.Fatalf("a matching renewal: %v", err)
	}
	changed := append(measuredboottest.Log{}, same...)
	extra := measuredboottest.Event{PCR: 9, Type: measuredboottest.EvIPL, Data: []byte("/vmlinuz 6.1.0-other")}
	changed = append(changed, extra)
	measuredboottest.Log{extra}.Extend(t, attTPM(t, n1))
	_, err = e.renewAttested(t, n1, a, changed.Bytes(), nil)
	if pe := apierr.FromError(err); pe.Reason != apierr.BootPolicyRefused || !strings.Contains(pe.Message, "fenced") {
		t.Fatalf("renewal after the kernel changed: %v, want %s and fenced", err, apierr.BootPolicyRefused)
	}
	n, err := e.admin.InspectNode(callCtx(t), &pactv1.InspectNodeRequest{NodeId: "n1"})
	if err != nil || !strings.Contains(n.GetNode().GetFence().GetReason(), "boot policy version 3") {
		t.Fatalf("n1 after the fence: %v, %v", n.GetNode(), err)
	}
	// Every verdict is counted.
	for verdict, want := range map[string]float64{"match": 2, "refused": 3, "observed": 1, "fenced": 1} {
		if got := must(t, e.h.J.MetricsRegistry(), "pact_journal_boot_policy_verdicts_total", "verdict", verdict); got != want {
			t.Errorf("pact_journal_boot_policy_verdicts_total{verdict=%q} = %v, want %v", verdict, got, want)
		}
	}
}

// narrowQuote is a quote of PCRs 0-7 only.
func narrowQuote(t *testing.T, n *tpmNode, nonce, log []byte) *pactv1.TpmQuote {
	t.Helper()
	pcrs := []int{0, 1, 2, 3, 4, 5, 6, 7}
	q, err := n.att.Quote(nonce, pcrs)
	if err != nil {
		t.Fatal(err)
	}
	out := &pactv1.TpmQuote{Quoted: q.Quoted, Signature: q.Signature, PcrHashAlg: uint32(tpm2.TPMAlgSHA256), EventLog: log}
	for _, i := range pcrs {
		out.Pcrs = append(out.Pcrs, &pactv1.TpmPcr{Index: uint32(i), Digest: q.PCRs[i]})
	}
	return out
}

// attTPM is the connection to n's software TPM its attestor holds (swtpm
// serves one at a time).
func attTPM(_ *testing.T, n *tpmNode) transport.TPM { return n.att.TPM() }

// A boot policy refusal is final for the agent, so a journal gives it only
// from a policy the leader has confirmed: cut off from the leader it
// answers NO_LEADER (retryable) instead.
func TestClusterBootPolicyRefusalNeedsTheLeader(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	lone := (leader + 1) % 3
	evilBoot := measuredboottest.Boot("6.1.0-evil", "root=nfs quiet")
	n, _ := registerBootedTPMNode(t, c.Nodes[leader].AdminClient(t), "t1", "SN-T", mac1, evilBoot)
	// The policy allows only the good kernel's and initrd's digests.
	var allowed [][]byte
	for _, e := range goodBoot {
		if e.PCR == 9 {
			allowed = append(allowed, e.Digest())
		}
	}
	policy := &pactv1.BootPolicy{Mode: pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, Action: pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE,
		Events: []*pactv1.BootPolicyEvent{{Name: "kernel", Pcr: 9, EventType: measuredboottest.EvIPL, AllowedDigests: allowed}}}
	if _, err := pactv1.NewBootPolicyServiceClient(c.Nodes[leader].Dial(t, &c.Nodes[leader].Admin)).SetBootPolicy(callCtx(t), &pactv1.SetBootPolicyRequest{Policy: policy}); err != nil {
		t.Fatal(err)
	}
	loneBP := pactv1.NewBootPolicyServiceClient(c.Nodes[lone].Dial(t, &c.Nodes[lone].Admin))
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		l, err := loneBP.ListBootPolicies(callCtx(t), &pactv1.ListBootPoliciesRequest{})
		return err == nil && len(l.GetPolicies()) == 1
	}, "the lone journal never applied the policy")
	enroll := func() error {
		cl := pactv1.NewEnrollmentServiceClient(c.Nodes[lone].Dial(t, nil))
		resp, err := cl.Enroll(callCtx(t), n.request())
		if err != nil {
			t.Fatalf("round one at the lone journal: %v", err)
		}
		ch := resp.GetTpmChallenge()
		req := n.answer(t, ch, n.key)
		req.Credentials.Tpm.Quote = quoteOf(t, n.att, ch.GetQuoteNonce(), evilBoot.Bytes())
		_, err = cl.Enroll(callCtx(t), req)
		return err
	}
	// With a leader, the refusal is final.
	wantReason(t, enroll(), codes.PermissionDenied, apierr.BootPolicyRefused)
	c.StopMember(t, leader)
	c.StopMember(t, (leader+2)%3)
	wantReason(t, enroll(), codes.Unavailable, apierr.NoLeader)
}
