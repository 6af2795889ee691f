package journal

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/measuredboot"
	"github.com/pact-hpc/pact/internal/tpmattest"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/tpmchallenge"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// TPM refusals of Enroll (docs/tpm.md). Each maps to its own reason in
// status.go.
var (
	// ErrTPMRequired: the node is registered with a TPM EK hash and the
	// agent presented no TPM attestation.
	ErrTPMRequired = errors.New("journal: this node must prove its TPM")
	// ErrTPMEKMismatch: the presented EK is not the registered one (or not
	// an endorsement key at all).
	ErrTPMEKMismatch = errors.New("journal: TPM endorsement key does not match the registration")
	// ErrTPMAKRefused: the attestation key is not a restricted signing key
	// bound to its TPM.
	ErrTPMAKRefused = errors.New("journal: TPM attestation key refused")
	// ErrTPMAttestationFailed: the answer to the challenge is wrong, or was
	// made for another node, EK, AK or CSR key.
	ErrTPMAttestationFailed = errors.New("journal: TPM credential activation failed")
	// ErrTPMChallengeExpired: the answer came after the challenge's TTL.
	ErrTPMChallengeExpired = errors.New("journal: TPM challenge expired")
	// ErrTPMChallengeUnknown: no such pending challenge on this journal
	// (answered already, issued by another journal, or lost in a restart).
	ErrTPMChallengeUnknown = errors.New("journal: unknown TPM challenge")
	// ErrTPMQuoteRefused: the quote of the node's boot does not verify, or
	// its event log does not reproduce the quoted PCRs.
	ErrTPMQuoteRefused = errors.New("journal: TPM quote refused")
	// ErrBootPolicyRefused: the verified quote does not match the boot
	// policy in force, whose action is refuse or fence.
	ErrBootPolicyRefused = errors.New("journal: boot refused by the boot policy")
)

// tpmRefusal reports whether err is one of the TPM refusals (the caller's
// fault: counted by the failure limiter).
func tpmRefusal(err error) bool {
	for _, e := range []error{ErrTPMRequired, ErrTPMEKMismatch, ErrTPMAKRefused, ErrTPMAttestationFailed, ErrTPMChallengeExpired, ErrTPMChallengeUnknown, ErrTPMQuoteRefused, ErrBootPolicyRefused} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// tpmCredential is TPM 2.0 credential activation as an enrollment
// credential (credentials.go). A node registered with a TPM EK hash
// requires it.
type tpmCredential struct{ j *Journal }

func (tpmCredential) kind() string { return "tpm" }

func (tpmCredential) required(n *pactv1.Node) bool { return n.GetHardware().GetTpmEkHash() != "" }

// verify answers round one with a *tpmChallengeIssued (not a refusal: the
// caller turns it into the response) and checks round two's proof. It
// records nothing for the state machine: the EK hash the activation
// reports is the attested one (checked here), and the state machine
// re-checks that against the registration in the activation's entry.
func (c tpmCredential) verify(ctx context.Context, a *enrollAttempt, _ *pactv1.PresentedCredentials) error {
	reported, err := hwid.NormalizeEKHash(a.req.GetHardware().GetTpmEkHash())
	if err != nil {
		return err
	}
	ch, err := c.j.tpmCheck(ctx, a.node, reported, fingerprint(a.csr.SPKI), a.req.GetCredentials().GetTpm())
	if err != nil {
		return err
	}
	if ch != nil {
		return &tpmChallengeIssued{challenge: ch}
	}
	return nil
}

// tpmChallengeIssued carries round one's challenge out of the credential
// check. It never reaches the caller as an error.
type tpmChallengeIssued struct{ challenge *pactv1.TpmChallenge }

func (*tpmChallengeIssued) Error() string { return "journal: TPM challenge issued" }

func tpmChallengeError(err error) bool {
	var c *tpmChallengeIssued
	return errors.As(err, &c)
}

// tpmEKRefusal reports whether err is a TPM refusal that depends on the
// replicated registration (the EK hash), and so is final only once the
// leader has confirmed the state it was read from.
func tpmEKRefusal(err error) bool {
	return errors.Is(err, ErrTPMRequired) || errors.Is(err, ErrTPMEKMismatch)
}

// tpmMismatch turns a hardware match that failed only on the EK hash into
// the TPM refusal it is: the agent then learns its TPM is the problem
// rather than being told the node is unknown.
func tpmMismatch(m hwid.Mismatch, nodeID string) error {
	switch m {
	case hwid.MismatchEKMissing:
		return fmt.Errorf("%w: node %s is registered with a TPM EK hash and the agent reported none", ErrTPMRequired, nodeID)
	case hwid.MismatchEKDiffers:
		return fmt.Errorf("%w: the EK hash this node reports is not the one registered for %s", ErrTPMEKMismatch, nodeID)
	}
	return nil
}

// tpmCheck runs TPM credential activation for a node registered with an EK
// hash, before anything is signed or written. It returns:
//   - nil, nil: the node needs no TPM, or round two proved it;
//   - a challenge: round one; the caller answers it and writes nothing;
//   - an error: a refusal (nothing stored, nothing written).
//
// reportedEKHash is the EK hash of the reported hardware identity (what the
// state machine re-checks at commit, so it must be the attested EK's); spki
// is the hex SHA-256 of the CSR's SubjectPublicKeyInfo.
func (j *Journal) tpmCheck(ctx context.Context, node *pactv1.Node, reportedEKHash, spki string, att *pactv1.TpmAttestation) (*pactv1.TpmChallenge, error) {
	ch, ev, proved, err := j.tpmVerify(node, reportedEKHash, spki, att)
	if err != nil || !proved {
		return ch, err
	}
	return nil, j.checkBootPolicy(ctx, node, ev)
}

// tpmVerify is tpmCheck without the boot policy: proved is set when round
// two proved the registered EK (ev is then the verified quote, nil if the
// agent sent none). Attestation between renewals (attest.go) decides the
// policy its own way.
func (j *Journal) tpmVerify(node *pactv1.Node, reportedEKHash, spki string, att *pactv1.TpmAttestation) (ch *pactv1.TpmChallenge, ev *measuredboot.BootEvidence, proved bool, err error) {
	registered := node.GetHardware().GetTpmEkHash()
	if registered == "" {
		return nil, nil, false, nil
	}
	id := node.GetNodeId()
	if att == nil || len(att.GetEkPublic()) == 0 {
		return nil, nil, false, fmt.Errorf("%w: node %s is registered with a TPM EK hash and the request carries no TPM attestation", ErrTPMRequired, id)
	}
	ek, err := tpmattest.ParseEK(att.GetEkPublic())
	if err != nil {
		return nil, nil, false, fmt.Errorf("%w: %w", ErrTPMEKMismatch, err)
	}
	if err := ek.Check(registered); err != nil {
		return nil, nil, false, fmt.Errorf("%w: node %s: %w", ErrTPMEKMismatch, id, err)
	}
	if reportedEKHash != ek.Hash {
		return nil, nil, false, fmt.Errorf("%w: the reported EK hash is not the hash of the presented EK", ErrTPMEKMismatch)
	}
	ak, err := tpmattest.ParseAK(att.GetAkPublic())
	if err != nil {
		return nil, nil, false, fmt.Errorf("%w: %w", ErrTPMAKRefused, err)
	}
	now := j.cfg.Clock.Now()
	if att.GetChallengeId() == "" && len(att.GetProof()) == 0 {
		ch, secret, err := tpmattest.CreateChallenge(rand.Reader, ek, ak)
		if err != nil {
			return nil, nil, false, err
		}
		nonce := make([]byte, measuredboot.NonceSize)
		if _, err := rand.Read(nonce); err != nil {
			return nil, nil, false, err
		}
		cid, expires, err := j.tpm.Put(now, tpmchallenge.Pending{NodeID: id, EKHash: ek.Hash, AKName: ak.Name, SPKI: spki, Secret: secret, QuoteNonce: nonce})
		if err != nil {
			if errors.Is(err, tpmchallenge.ErrFull) {
				return nil, nil, false, &retryAfterError{err: fmt.Errorf("%w: %w", ErrOverloaded, err), after: max(expires.Sub(now), time.Second)}
			}
			return nil, nil, false, err
		}
		return &pactv1.TpmChallenge{
			ChallengeId:     cid,
			CredentialBlob:  ch.CredentialBlob,
			EncryptedSecret: ch.EncryptedSecret,
			ExpiresInMs:     expires.Sub(now).Milliseconds(),
			QuoteNonce:      nonce,
			// Whether the policy in force reads the IMA list, from this
			// journal's copy: a policy that changes before the answer is
			// evaluated against what the answer carries, and a list asked
			// for in vain is a mismatch the agent's next round fixes.
			QuoteIma: j.fsm.BootPolicyReadsIMA(node.GetVcluster()),
		}, nil, false, nil
	}
	if err := tpmattest.CheckAnswerShape(att.GetChallengeId(), att.GetProof()); err != nil {
		return nil, nil, false, fmt.Errorf("%w: %w", ErrTPMAttestationFailed, err)
	}
	p, err := j.tpm.Take(now, att.GetChallengeId())
	switch {
	case errors.Is(err, tpmchallenge.ErrExpired):
		return nil, nil, false, fmt.Errorf("%w: %w; enroll again from the start", ErrTPMChallengeExpired, err)
	case errors.Is(err, tpmchallenge.ErrUnknown):
		return nil, nil, false, fmt.Errorf("%w: %w (answers go to the journal that issued the challenge, once); enroll again from the start", ErrTPMChallengeUnknown, err)
	case err != nil:
		return nil, nil, false, err
	}
	defer clear(p.Secret)
	switch {
	case p.NodeID != id, p.EKHash != ek.Hash, !bytes.Equal(p.AKName, ak.Name):
		return nil, nil, false, fmt.Errorf("%w: the answer is for another node, EK or attestation key than the challenge", ErrTPMAttestationFailed)
	case p.SPKI != spki:
		return nil, nil, false, fmt.Errorf("%w: the answer comes with another CSR key than the challenge was issued for", ErrTPMAttestationFailed)
	}
	if err := tpmattest.VerifyProof(p.Secret, att.GetChallengeId(), spki, att.GetProof()); err != nil {
		return nil, nil, false, fmt.Errorf("%w: %w", ErrTPMAttestationFailed, err)
	}
	j.log.Info("TPM credential activation proved", logkey.NodeID, id, logkey.TPMEKHash, ek.Hash)
	ev, err = j.checkQuote(id, att, p.QuoteNonce)
	if err != nil {
		return nil, nil, false, err
	}
	return nil, ev, true, nil
}

// checkQuote verifies round two's quote, if the agent sent one, with the
// attestation key that credential activation has just bound to the
// registered EK and the nonce of the challenge it answered, and keeps the
// verified evidence in memory for the node (pact boot-policy capture).
// An agent of a release before measured boot sends none.
func (j *Journal) checkQuote(nodeID string, att *pactv1.TpmAttestation, nonce []byte) (*measuredboot.BootEvidence, error) {
	q := att.GetQuote()
	if q == nil {
		j.log.Info("no TPM quote: the agent predates measured boot or has it off", logkey.NodeID, nodeID)
		return nil, nil
	}
	pcrs := make(map[int][]byte, len(q.GetPcrs()))
	for _, p := range q.GetPcrs() {
		if _, dup := pcrs[int(p.GetIndex())]; dup || p.GetIndex() >= measuredboot.NumPCRs {
			return nil, fmt.Errorf("%w: PCR %d given twice or out of range", ErrTPMQuoteRefused, p.GetIndex())
		}
		pcrs[int(p.GetIndex())] = p.GetDigest()
	}
	if q.GetPcrHashAlg() > 0xffff {
		return nil, fmt.Errorf("%w: PCR bank 0x%x", ErrTPMQuoteRefused, q.GetPcrHashAlg())
	}
	ev, err := measuredboot.VerifyQuote(att.GetAkPublic(), nonce, measuredboot.Quote{
		Quoted:    q.GetQuoted(),
		Signature: q.GetSignature(),
		HashAlg:   uint16(q.GetPcrHashAlg()),
		PCRs:      pcrs,
		EventLog:  q.GetEventLog(),
		IMALog:    q.GetImaLog(),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: node %s: %w", ErrTPMQuoteRefused, nodeID, err)
	}
	j.boot.put(nodeID, ev, j.cfg.Clock.Now())
	j.log.Info("TPM quote verified", logkey.NodeID, nodeID, logkey.PCRs, fmt.Sprint(ev.QuotedPCRs()), logkey.Events, len(ev.Events), logkey.IMAEntries, len(ev.IMA))
	return ev, nil
}

// checkBootPolicy evaluates the boot policy in force for the node's
// vCluster (else the domain's default) against its verified quote (nil:
// it sent none). A match, or no policy, passes. A mismatch is logged; a
// policy in observe mode, or whose action is observe, lets the node
// through; refuse refuses it; fence fences it in Raft (as pact node fence
// does) and refuses it.
func (j *Journal) checkBootPolicy(ctx context.Context, node *pactv1.Node, ev *measuredboot.BootEvidence) error {
	id := node.GetNodeId()
	decide := func(vcluster string) (*pactv1.BootPolicy, []string, pactv1.BootPolicyAction) {
		p, ok := j.fsm.BootPolicyFor(vcluster)
		if !ok {
			return nil, nil, 0
		}
		diff := measuredboot.Evaluate(p, ev)
		action := p.GetAction()
		if p.GetMode() != pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE {
			action = pactv1.BootPolicyAction_BOOT_POLICY_ACTION_OBSERVE
		}
		return p, diff, action
	}
	p, diff, action := decide(node.GetVcluster())
	if len(diff) > 0 && action != pactv1.BootPolicyAction_BOOT_POLICY_ACTION_OBSERVE {
		// Only the leader's word is final: this journal's copy of the
		// policies (or of the node's vCluster) may lag a change an
		// operator made through another journal. Confirm, then decide
		// again.
		if rerr := j.readBarrier(ctx); rerr != nil {
			j.metrics.unconfirmed.Inc()
			return &retryAfterError{
				err:   fmt.Errorf("%w: this journal cannot confirm the boot policy with the leader (%w); retry", ErrNoLeader, rerr),
				after: unconfirmedRetryAfter,
			}
		}
		vc := node.GetVcluster()
		if n, ok := j.fsm.Node(id); ok {
			vc = n.GetVcluster()
		}
		p, diff, action = decide(vc)
	}
	if p == nil {
		return nil
	}
	if len(diff) == 0 {
		j.metrics.bootVerdicts.WithLabelValues(bootMatch).Inc()
		j.log.Info("boot policy matched", logkey.NodeID, id, logkey.VCluster, p.GetVcluster(), logkey.PolicyVersion, p.GetVersion())
		return nil
	}
	what := strings.Join(diff, "; ")
	j.log.Warn("boot policy mismatch", logkey.NodeID, id, logkey.VCluster, p.GetVcluster(), logkey.PolicyVersion, p.GetVersion(),
		logkey.Mode, strings.ToLower(strings.TrimPrefix(p.GetMode().String(), "BOOT_POLICY_MODE_")),
		logkey.Action, strings.ToLower(strings.TrimPrefix(action.String(), "BOOT_POLICY_ACTION_")), logkey.Reason, what)
	policy := fmt.Sprintf("boot policy version %d of %s", p.GetVersion(), cmp.Or(p.GetVcluster(), "the domain"))
	switch action {
	case pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE:
		j.metrics.bootVerdicts.WithLabelValues(bootRefused).Inc()
		return fmt.Errorf("%w: node %s does not match %s: %s", ErrBootPolicyRefused, id, policy, what)
	case pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE:
		reason := fmt.Sprintf("%s: %s", policy, what)
		if len(reason) > 400 {
			reason = reason[:400] + "…"
		}
		if _, err := j.propose(ctx, &pactv1.Command{Actor: "journal/" + j.cfg.NodeID + " (boot policy)", Op: &pactv1.Command_Fence{Fence: &pactv1.FenceOp{
			NodeId: id, Fenced: true, Reason: reason,
		}}}); err != nil {
			return fmt.Errorf("%w: node %s does not match %s (%s), and fencing it failed: %w", ErrBootPolicyRefused, id, policy, what, err)
		}
		j.metrics.bootVerdicts.WithLabelValues(bootFenced).Inc()
		return fmt.Errorf("%w: node %s does not match %s and is fenced (pact node unfence once it boots an allowed image): %s", ErrBootPolicyRefused, id, policy, what)
	}
	j.metrics.bootVerdicts.WithLabelValues(bootObserved).Inc()
	return nil
}

// renewalTPMCheck runs the TPM challenge again at a renewal that carries
// TPM attestation: round one answers a challenge (nothing signed or
// written), round two must prove the registered EK with an AK bound to the
// renewal's CSR key, and its quote is verified as at enrollment. A renewal
// without TPM attestation (an agent of an earlier release) renews as
// before, unless a boot policy applies to the node: then it is a renewal
// that sent no quote, judged as one (unattestedIssue).
func (j *Journal) renewalTPMCheck(ctx context.Context, nodeID string, req *pactv1.RenewCertRequest) (*pactv1.TpmChallenge, error) {
	n, ok := j.fsm.Node(nodeID)
	if !ok || n.GetHardware().GetTpmEkHash() == "" {
		// Nothing to prove it against: the node is registered without an
		// EK hash.
		return nil, nil
	}
	att := req.GetTpm()
	if att == nil {
		return nil, j.unattestedIssue(ctx, n)
	}
	csr, err := ca.ParseCSR(req.GetCsrDer())
	if err != nil {
		return nil, err
	}
	ch, err := j.tpmCheck(ctx, n, n.GetHardware().GetTpmEkHash(), fingerprint(csr.SPKI), att)
	if err != nil {
		return nil, err
	}
	if ch == nil {
		j.log.Info("TPM attested the renewal", logkey.NodeID, nodeID)
	}
	return ch, nil
}

// unattestedIssue judges a certificate about to be issued, without a quote
// of its boot, to a node registered with a TPM (a renewal without TPM
// attestation; a standby for its SPIRE SVID). Under a boot policy that is
// a node that sent no quote, which does not match (docs/tpm.md, "Boot
// policies"): decided by the policy's mode and action as at enrollment,
// so an agent cannot leave its TPM out of a call to escape the policy.
// Without a policy, or for a node registered without a TPM, nothing is
// asked.
func (j *Journal) unattestedIssue(ctx context.Context, n *pactv1.Node) error {
	if n.GetHardware().GetTpmEkHash() == "" {
		return nil
	}
	return j.checkBootPolicy(ctx, n, nil)
}
