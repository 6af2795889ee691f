package raftfsm

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Enrollment credentials beside the hardware match (DESIGN.md §4 and §6,
// docs/security.md).
//
// The seam, in three places:
//
//   - the record: Node.credentials (a CredentialPolicy) says which
//     credentials a node must present; it is set at registration;
//   - the request: EnrollRequest.credentials carries what the agent
//     presents; the journal verifies every credential the policy requires
//     before it signs or proposes anything (journal/credentials.go);
//   - the commit: what depends on replicated state (a join token not yet
//     used) travels in ActivateOp.credentials and checkCredentials below
//     re-checks and consumes it in the same Raft entry as the activation,
//     so two journals can never both accept one token.
//
// A credential that the journal alone can judge (a TPM's answer to a
// challenge it made) needs nothing here beyond its policy field; one whose
// validity is replicated state adds a field to PresentedCredentials and a
// case to checkCredentials.

// JoinTokenIDLen is how many hex digits of a token's SHA-256 name it in
// listings and the audit: enough to tell tokens apart, useless for guessing.
const JoinTokenIDLen = 12

// MaxFenceReasonLen bounds the reason an operator gives for a fence.
const MaxFenceReasonLen = 512

// JoinTokenID is the short name of the token whose hex SHA-256 is sum.
func JoinTokenID(sum string) string {
	if len(sum) > JoinTokenIDLen {
		return sum[:JoinTokenIDLen]
	}
	return sum
}

// RequiresJoinToken reports whether n's policy requires a join token.
func RequiresJoinToken(n *pactv1.Node) bool {
	return n.GetCredentials().GetRequireJoinToken()
}

// checkJoinToken applies the join token rule: the token with hex SHA-256
// sum exists, belongs to nodeID, is unused and has not expired at at (Unix
// nanoseconds: the command's timestamp in Apply, the journal's clock
// before a proposal). Messages never hold the token or another node's name.
func (s *state) checkJoinToken(nodeID, sum string, at int64) (*pactv1.JoinToken, error) {
	t, ok := s.joinTokens[sum]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: no such token for node %s (mistyped, revoked, or expired long ago); create one with pact node token create %s", ErrJoinTokenInvalid, nodeID, nodeID)
	case t.GetNodeId() != nodeID:
		return nil, fmt.Errorf("%w: token %s was created for another node, not %s", ErrJoinTokenInvalid, JoinTokenID(sum), nodeID)
	case t.GetUsedAtUnixNano() != 0:
		return nil, fmt.Errorf("%w: token %s was already used at %s; each token enrolls once: create a new one", ErrJoinTokenInvalid, JoinTokenID(sum), stamp(t.GetUsedAtUnixNano()))
	case at >= t.GetExpiresAtUnixNano():
		return nil, fmt.Errorf("%w: token %s expired at %s; create a new one", ErrJoinTokenInvalid, JoinTokenID(sum), stamp(t.GetExpiresAtUnixNano()))
	}
	return t, nil
}

func stamp(unixNano int64) string { return time.Unix(0, unixNano).UTC().Format(time.RFC3339) }

// checkCredentials re-checks, at commit, the credentials of n's policy that
// depend on replicated state. On success it returns what to do when the
// activation is applied (consume the token) and a note for the audit.
func (a *applier) checkCredentials(n *pactv1.Node, pc *pactv1.PresentedCredentials) (commit func(), note string, err error) {
	sum := pc.GetJoinTokenSha256()
	if sum == "" {
		if RequiresJoinToken(n) {
			return nil, "", fmt.Errorf("%w: node %s enrolls only with a join token", ErrJoinTokenRequired, n.GetNodeId())
		}
		return func() {}, "", nil
	}
	t, err := a.s.checkJoinToken(n.GetNodeId(), sum, a.at())
	if err != nil {
		return nil, "", err
	}
	return func() {
		used := proto.Clone(t).(*pactv1.JoinToken)
		used.UsedAtUnixNano = a.at()
		a.s.joinTokens[sum] = used
	}, "join token " + JoinTokenID(sum), nil
}

// keyOwner returns a node other than nodeID whose current (or standby)
// certificate has the key fingerprint spki, or "" (the least id if several, so the answer
// depends on the records alone).
func (s *state) keyOwner(spki, nodeID string) string {
	if spki == "" {
		return ""
	}
	owner := ""
	s.bySPKI.each(spki, func(id string) {
		if id != nodeID && (owner == "" || id < owner) {
			owner = id
		}
	})
	return owner
}

func (a *applier) createJoinToken(op *pactv1.CreateJoinTokenOp) *Result {
	s := a.s
	t := op.GetToken()
	if !isHexSHA256(t.GetSha256()) || t.GetUsedAtUnixNano() != 0 || t.GetExpiresAtUnixNano() <= a.at() {
		return fail(fmt.Errorf("%w: join token without a SHA-256, already used, or expiring before it is created", ErrInvalidCommand))
	}
	n, ok := s.nodes[t.GetNodeId()]
	if !ok {
		return fail(fmt.Errorf("%w: no node %q in the registry", ErrNodeNotEnrolled, t.GetNodeId()))
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		return fail(fmt.Errorf("%w: %s was decommissioned", ErrNodeRevoked, n.GetNodeId()))
	}
	s.pruneJoinTokens(a.at())
	if _, dup := s.joinTokens[t.GetSha256()]; dup {
		return fail(fmt.Errorf("%w: a join token with this hash exists", ErrInvalidCommand))
	}
	stored := &pactv1.JoinToken{
		Sha256:            t.GetSha256(),
		NodeId:            t.GetNodeId(),
		CreatedAtUnixNano: a.at(),
		CreatedBy:         a.cmd.GetActor(),
		ExpiresAtUnixNano: t.GetExpiresAtUnixNano(),
	}
	s.joinTokens[stored.GetSha256()] = stored
	a.record("token-create", n.GetNodeId(), "", "join token "+JoinTokenID(stored.GetSha256())+" expires "+stamp(stored.GetExpiresAtUnixNano()))
	return &Result{Node: n}
}

func (a *applier) revokeJoinTokens(op *pactv1.RevokeJoinTokensOp) *Result {
	s := a.s
	n, ok := s.nodes[op.GetNodeId()]
	if !ok {
		return fail(fmt.Errorf("%w: no node %q in the registry", ErrNodeNotEnrolled, op.GetNodeId()))
	}
	var ids []string
	for sum, t := range s.joinTokens {
		if t.GetNodeId() == op.GetNodeId() && t.GetUsedAtUnixNano() == 0 && strings.HasPrefix(sum, op.GetSha256Prefix()) {
			delete(s.joinTokens, sum)
			ids = append(ids, JoinTokenID(sum))
		}
	}
	if len(ids) == 0 {
		return &Result{Node: n, Idempotent: true}
	}
	sort.Strings(ids)
	a.record("token-revoke", n.GetNodeId(), "", "join tokens "+strings.Join(ids, ","))
	return &Result{Node: n}
}

// pruneJoinTokens drops tokens that expired before at, used or not. It runs
// at a command's timestamp, so every replica drops the same ones.
func (s *state) pruneJoinTokens(at int64) {
	for sum, t := range s.joinTokens {
		if t.GetExpiresAtUnixNano() < at {
			delete(s.joinTokens, sum)
		}
	}
}

// ValidateFenceReason checks an operator's reason for a fence: required,
// printable, at most MaxFenceReasonLen bytes.
func ValidateFenceReason(r string) error {
	switch {
	case strings.TrimSpace(r) == "":
		return fmt.Errorf("%w: a fence needs a reason (--reason), recorded in the audit", ErrInvalidCommand)
	case len(r) > MaxFenceReasonLen:
		return fmt.Errorf("%w: fence reason is %d bytes (at most %d)", ErrInvalidCommand, len(r), MaxFenceReasonLen)
	case !utf8.ValidString(r) || strings.ContainsFunc(r, unicode.IsControl):
		return fmt.Errorf("%w: fence reason must be printable UTF-8 on one line", ErrInvalidCommand)
	}
	return nil
}

// fence quarantines a node or lifts it. Fencing revokes the current
// certificate (its serial joins the revocation set, so every journal ends
// the node's streams on applying this entry) and an Active node becomes
// Inactive: it holds no valid certificate any more. The registration,
// vCluster and hardware stay.
func (a *applier) fence(op *pactv1.FenceOp) *Result {
	s := a.s
	n, ok := s.nodes[op.GetNodeId()]
	if !ok {
		return fail(fmt.Errorf("%w: no node %q in the registry", ErrNodeNotEnrolled, op.GetNodeId()))
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		return fail(fmt.Errorf("%w: %s was decommissioned", ErrNodeRevoked, n.GetNodeId()))
	}
	next := proto.Clone(n).(*pactv1.Node)
	next.UpdatedAtUnixNano = a.at()
	if !op.GetFenced() {
		if n.GetFence() == nil {
			return &Result{Node: n, Idempotent: true}
		}
		next.Fence = nil
		s.put(next)
		a.changed(next.GetNodeId())
		a.record("unfence", next.GetNodeId(), "", "was fenced: "+n.GetFence().GetReason())
		return &Result{Node: next}
	}
	if err := ValidateFenceReason(op.GetReason()); err != nil {
		return fail(err)
	}
	if n.GetFence() != nil {
		return &Result{Node: n, Idempotent: true}
	}
	next.Fence = &pactv1.Fence{Reason: op.GetReason(), AtUnixNano: a.at(), By: a.cmd.GetActor()}
	serial := n.GetCert().GetSerial()
	if serial != "" {
		s.revoked[serial] = n.GetCert().GetNotAfterUnix()
	}
	// A SPIRE node's journal-signed standby authenticates like its current
	// certificate: revoked with it, and forgotten, so an unfence revives
	// neither.
	if sb := n.GetStandbyCert(); sb.GetSerial() != "" {
		s.revoked[sb.GetSerial()] = sb.GetNotAfterUnix()
		next.StandbyCert = nil
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE {
		next.State = pactv1.NodeState_NODE_STATE_INACTIVE
	}
	s.put(next)
	a.changed(next.GetNodeId())
	a.record("fence", next.GetNodeId(), serial, "reason: "+op.GetReason())
	return &Result{Node: next}
}

func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// CheckJoinToken applies the rule Apply uses to a join token presented for
// nodeID at atUnixNano, on this replica's state. A journal calls it before
// it signs; Apply checks again at commit.
func (f *FSM) CheckJoinToken(nodeID, sum string, atUnixNano int64) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, err := f.st.checkJoinToken(nodeID, sum, atUnixNano)
	return err
}

// JoinTokens returns the stored join tokens of nodeID (every node if
// empty), oldest first.
func (f *FSM) JoinTokens(nodeID string) []*pactv1.JoinToken {
	f.mu.RLock()
	var out []*pactv1.JoinToken
	for _, t := range f.st.joinTokens {
		if nodeID == "" || t.GetNodeId() == nodeID {
			out = append(out, t)
		}
	}
	f.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].GetCreatedAtUnixNano() != out[j].GetCreatedAtUnixNano() {
			return out[i].GetCreatedAtUnixNano() < out[j].GetCreatedAtUnixNano()
		}
		return out[i].GetSha256() < out[j].GetSha256()
	})
	return out
}

// KeyOwner returns a node other than nodeID whose current certificate has
// the public key fingerprint spki (hex SHA-256 of the SPKI), or "".
func (f *FSM) KeyOwner(spki, nodeID string) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.keyOwner(spki, nodeID)
}

// fenced is the refusal of a fenced node. It does not carry the operator's
// reason: the node (perhaps the suspect) reads it; the audit keeps it.
func fenced(n *pactv1.Node) error {
	return fmt.Errorf("%w: node %s is fenced by an operator; it may not enroll or renew until pact node unfence %s", ErrNodeFenced, n.GetNodeId(), n.GetNodeId())
}
