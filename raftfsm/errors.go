package raftfsm

import (
	"errors"
	"fmt"
	"strings"
)

// Rule errors: the typed results of commands that broke a registry rule.
// Apply returns them inside a *Result; they are never panics.
var (
	ErrNodeNotEnrolled          = errors.New("raftfsm: node not enrolled")
	ErrNodeAlreadyEnrolled      = errors.New("raftfsm: node already enrolled")
	ErrHardwareIdentityConflict = errors.New("raftfsm: hardware identity conflict")
	ErrNodeRevoked              = errors.New("raftfsm: node revoked")
	ErrAlreadyActive            = errors.New("raftfsm: node already active")
	ErrStaleCertificate         = errors.New("raftfsm: certificate is not the node's current one")
	ErrInvalidCommand           = errors.New("raftfsm: invalid command")
	ErrVClusterChanged          = errors.New("raftfsm: vcluster changed")
	// ErrNodeFenced: an operator fenced the node; it may not enroll or
	// renew until unfenced.
	ErrNodeFenced = errors.New("raftfsm: node fenced")
	// ErrJoinTokenRequired: the node's policy requires a join token and
	// none was presented.
	ErrJoinTokenRequired = errors.New("raftfsm: join token required")
	// ErrJoinTokenInvalid: the join token presented is unknown, expired,
	// used, or another node's. The message says which; it never holds the
	// token.
	ErrJoinTokenInvalid = errors.New("raftfsm: join token refused")
	// ErrKeyInUse: the public key is the current key of another node.
	ErrKeyInUse        = errors.New("raftfsm: public key bound to another node")
	ErrOperatorRevoked = errors.New("raftfsm: operator credential revoked")
	ErrNotFound        = errors.New("raftfsm: not found")
	// ErrJournalCARevoked: a journal published an intermediate under a
	// journal CA an operator revoked; it needs a new journal CA from the
	// ceremony (docs/ceremony.md). It is a kind of ErrInvalidCommand, and
	// travels as its code (INVALID_ARGUMENT) until ApplyError has a value
	// of its own: a result forwarded from the leader matches
	// ErrInvalidCommand only.
	ErrJournalCARevoked = fmt.Errorf("%w: journal CA revoked", ErrInvalidCommand)
	// ErrJournalCANotBound: a journal published an intermediate under a
	// journal CA that is not the one the quorum binds its journal id to
	// (superseded, another key, or a legacy intermediate of a journal that
	// has one). A journal CA with a new key is bound by an operator (pact
	// journal add, pact journal record-ca). A refinement of
	// ErrInvalidCommand, like ErrJournalCARevoked.
	ErrJournalCANotBound = fmt.Errorf("%w: journal CA not bound to its journal", ErrInvalidCommand)
)

// errorCodes ties each rule error to its wire form so a replica's result can
// be carried in a forwarded response without losing its type.
var errorCodes = []struct {
	err  error
	code string
}{
	{ErrNodeNotEnrolled, "NODE_NOT_ENROLLED"},
	{ErrNodeAlreadyEnrolled, "NODE_ALREADY_ENROLLED"},
	{ErrHardwareIdentityConflict, "HARDWARE_IDENTITY_CONFLICT"},
	{ErrNodeRevoked, "NODE_REVOKED"},
	{ErrAlreadyActive, "ALREADY_ACTIVE"},
	{ErrStaleCertificate, "STALE_CERTIFICATE"},
	{ErrInvalidCommand, "INVALID_ARGUMENT"},
	{ErrVClusterChanged, "VCLUSTER_CHANGED"},
	{ErrNodeFenced, "NODE_FENCED"},
	{ErrJoinTokenRequired, "JOIN_TOKEN_REQUIRED"},
	{ErrJoinTokenInvalid, "JOIN_TOKEN_INVALID"},
	{ErrKeyInUse, "KEY_IN_USE"},
	{ErrOperatorRevoked, "OPERATOR_REVOKED"},
	{ErrNotFound, "NOT_FOUND"},
	{ErrQuorumVersion, "QUORUM_VERSION"},
}

// ErrorCode returns the stable code of a rule error, or "" if err is none.
func ErrorCode(err error) string {
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return ""
}

// refinements are rule errors that travel as the code of the sentinel they
// wrap (no ApplyError value of their own yet); ErrorFromCode recognises
// them by the start of the message, which is their own text.
var refinements = []error{ErrJournalCARevoked, ErrJournalCANotBound}

// ErrorFromCode rebuilds a rule error carried across the wire by its code,
// so errors.Is works on a forwarded result. Unknown codes return nil.
func ErrorFromCode(code, msg string) error {
	for _, e := range errorCodes {
		if e.code != code {
			continue
		}
		for _, r := range refinements {
			if rest, ok := strings.CutPrefix(msg, r.Error()+": "); ok && errors.Is(r, e.err) {
				return fmt.Errorf("%w: %s", r, rest)
			}
		}
		return fmt.Errorf("%w: %s", e.err, msg)
	}
	return nil
}
