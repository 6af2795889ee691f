package journal

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/jointoken"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Enrollment credentials beside the hardware match: the journal's half of
// the seam described in raftfsm/credentials.go.
//
// Enroll resolves the node by its hardware, refuses it if fenced, parses the
// CSR and refuses a key bound to another node; then every enrollCredential
// in j.credentials whose policy field the node sets verifies what the
// request presents, before anything is signed or proposed. A credential
// whose validity is replicated state writes what the FSM must re-check into
// the activation's PresentedCredentials.

// enrollCredential is one credential beside the hardware match.
type enrollCredential interface {
	// kind names it in logs and metrics ("join_token", "tpm").
	kind() string
	// required reports whether node n's policy asks for it.
	required(n *pactv1.Node) bool
	// verify checks what the request presents for a.node and the CSR's
	// key, at the journal's clock, and records in proof what the FSM must
	// re-check at commit. A refusal is a typed error whose message never
	// holds a secret. Refusals that depend on replicated state are made
	// final by the caller only after a linearizable read (confirmed).
	verify(ctx context.Context, a *enrollAttempt, proof *pactv1.PresentedCredentials) error
}

// enrollAttempt is what a credential may look at.
type enrollAttempt struct {
	node *pactv1.Node
	req  *pactv1.EnrollRequest
	csr  *ca.CSR
}

// defaultCredentials are the credentials every journal checks.
func (j *Journal) defaultCredentials() []enrollCredential {
	// TPM attestation comes last: its round one answers with a challenge
	// only once every other credential has passed.
	return []enrollCredential{joinTokenCredential{j}, tpmCredential{j}}
}

// checkCredentials runs every credential node n's policy requires. Only the
// leader's word is final: a refusal from this journal's copy is re-checked
// after a linearizable read (the token may have been created a moment ago
// through another journal); cut off from the leader, the answer is
// retryable.
func (j *Journal) checkCredentials(ctx context.Context, n *pactv1.Node, req *pactv1.EnrollRequest, csr *ca.CSR) (*pactv1.PresentedCredentials, error) {
	var proof *pactv1.PresentedCredentials
	refusedBy := ""
	err := j.confirm(ctx, func() error {
		refusedBy = ""
		cur, ok := j.fsm.Node(n.GetNodeId())
		if !ok {
			cur = n
		}
		proof = &pactv1.PresentedCredentials{}
		a := &enrollAttempt{node: cur, req: req, csr: csr}
		for _, c := range j.credentials {
			if !c.required(cur) {
				continue
			}
			if err := c.verify(ctx, a, proof); err != nil {
				refusedBy = c.kind()
				return err
			}
		}
		return nil
	}, isRuleError)
	if err != nil && refusedBy != "" && !tpmChallengeError(err) {
		j.metrics.credentialRefusals.WithLabelValues(refusedBy).Inc()
	}
	if err == nil && proto.Size(proof) == 0 {
		// Nothing to re-check at commit: the activation entry stays as
		// small as a hardware-only one.
		proof = nil
	}
	return proof, err
}

// checkAdmission refuses, before any signing, an enrollment or renewal of a
// fenced node or for a key that is another node's current key.
func (j *Journal) checkAdmission(ctx context.Context, nodeID, spki string) error {
	return j.confirm(ctx, func() error {
		n, ok := j.fsm.Node(nodeID)
		if ok && n.GetFence() != nil {
			return fencedError(nodeID)
		}
		if owner := j.fsm.KeyOwner(spki, nodeID); owner != "" {
			return fmt.Errorf("%w: the CSR's public key is the current key of another node; make a fresh key", raftfsm.ErrKeyInUse)
		}
		return nil
	}, isRuleError)
}

// fencedError is the refusal of a fenced node (auth.FencedError).
func fencedError(nodeID string) error { return auth.FencedError(nodeID) }

// joinTokenCredential is the single-use join token (pact node token create,
// pact-agent --join-token-file). The token is checked here against this
// journal's copy and consumed by the FSM in the activation's own entry.
type joinTokenCredential struct{ j *Journal }

func (joinTokenCredential) kind() string { return "join_token" }

func (joinTokenCredential) required(n *pactv1.Node) bool { return raftfsm.RequiresJoinToken(n) }

func (c joinTokenCredential) verify(_ context.Context, a *enrollAttempt, proof *pactv1.PresentedCredentials) error {
	tok := a.req.GetCredentials().GetJoinToken()
	if tok == "" {
		return fmt.Errorf("%w: node %s enrolls only with a join token: create one with pact node token create %s and give it to the agent (--join-token-file)", raftfsm.ErrJoinTokenRequired, a.node.GetNodeId(), a.node.GetNodeId())
	}
	sum, err := jointoken.Parse(tok)
	if err != nil {
		return err
	}
	if err := c.j.fsm.CheckJoinToken(a.node.GetNodeId(), sum, c.j.cfg.Clock.Now().UnixNano()); err != nil {
		return err
	}
	proof.JoinTokenSha256 = sum
	return nil
}

// fingerprint is a key's SPKI fingerprint as the registry records it.
func fingerprint(spki []byte) string { return pki.SPKIFingerprintRaw(spki) }
