package raftfsm

import (
	"errors"
	"fmt"
	"strings"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
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
	// ceremony (docs/ceremony.md). It is a kind of ErrInvalidCommand, with
	// a code of its own (refinements).
	ErrJournalCARevoked = fmt.Errorf("%w: journal CA revoked", ErrInvalidCommand)
	// ErrJournalCANotBound: a journal published an intermediate under a
	// journal CA that is not the one the quorum binds its journal id to
	// (superseded, another key, or a legacy intermediate of a journal that
	// has one). A journal CA with a new key is bound by an operator (pact
	// journal add, pact journal record-ca). A refinement of
	// ErrInvalidCommand, like ErrJournalCARevoked.
	ErrJournalCANotBound = fmt.Errorf("%w: journal CA not bound to its journal", ErrInvalidCommand)
)

// code is the wire code of an ApplyError value: its name without the
// prefix. ApplyError is the one list of the codes.
func code(v pactv1.ApplyError) string { return strings.TrimPrefix(v.String(), "APPLY_ERROR_") }

// errorCodes ties each rule error to its wire form so a replica's result can
// be carried in a forwarded response without losing its type. Their codes
// never change: every release reads them.
var errorCodes = []struct {
	err  error
	code string
}{
	{ErrNodeNotEnrolled, code(pactv1.ApplyError_APPLY_ERROR_NODE_NOT_ENROLLED)},
	{ErrNodeAlreadyEnrolled, code(pactv1.ApplyError_APPLY_ERROR_NODE_ALREADY_ENROLLED)},
	{ErrHardwareIdentityConflict, code(pactv1.ApplyError_APPLY_ERROR_HARDWARE_IDENTITY_CONFLICT)},
	{ErrNodeRevoked, code(pactv1.ApplyError_APPLY_ERROR_NODE_REVOKED)},
	{ErrAlreadyActive, code(pactv1.ApplyError_APPLY_ERROR_ALREADY_ACTIVE)},
	{ErrStaleCertificate, code(pactv1.ApplyError_APPLY_ERROR_STALE_CERTIFICATE)},
	{ErrInvalidCommand, code(pactv1.ApplyError_APPLY_ERROR_INVALID_ARGUMENT)},
	{ErrVClusterChanged, code(pactv1.ApplyError_APPLY_ERROR_VCLUSTER_CHANGED)},
	{ErrNodeFenced, code(pactv1.ApplyError_APPLY_ERROR_NODE_FENCED)},
	{ErrJoinTokenRequired, code(pactv1.ApplyError_APPLY_ERROR_JOIN_TOKEN_REQUIRED)},
	{ErrJoinTokenInvalid, code(pactv1.ApplyError_APPLY_ERROR_JOIN_TOKEN_INVALID)},
	{ErrKeyInUse, code(pactv1.ApplyError_APPLY_ERROR_KEY_IN_USE)},
	{ErrOperatorRevoked, code(pactv1.ApplyError_APPLY_ERROR_OPERATOR_REVOKED)},
	{ErrNotFound, code(pactv1.ApplyError_APPLY_ERROR_NOT_FOUND)},
	{ErrQuorumVersion, code(pactv1.ApplyError_APPLY_ERROR_QUORUM_VERSION)},
}

// refinements are the rule errors that are a kind of one in errorCodes
// (they wrap it), each with a code of its own. A forwarded result carries
// a refinement's code beside the code of the error it refines (BaseCode),
// which a journal that does not know the refinement reads instead
// (ProposeResponse.exact_error_code, error_code).
var refinements = []struct {
	err  error
	code string
}{
	{ErrJournalCARevoked, code(pactv1.ApplyError_APPLY_ERROR_JOURNAL_CA_REVOKED)},
	{ErrJournalCANotBound, code(pactv1.ApplyError_APPLY_ERROR_JOURNAL_CA_NOT_BOUND)},
}

// ErrorCode returns the stable code of a rule error, a refinement's own
// for a refinement, or "" if err is none.
func ErrorCode(err error) string {
	for _, r := range refinements {
		if errors.Is(err, r.err) {
			return r.code
		}
	}
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return ""
}

// BaseCode returns the code of the rule error a refinement's code refines,
// and any other code unchanged: the code a journal that may not know the
// refinement reads (ProposeResponse.error_code).
func BaseCode(c string) string {
	for _, r := range refinements {
		if r.code != c {
			continue
		}
		for _, e := range errorCodes {
			if errors.Is(r.err, e.err) {
				return e.code
			}
		}
	}
	return c
}

// ErrorFromCode rebuilds a rule error carried across the wire by its code,
// so errors.Is works on a forwarded result: the message is the one the
// replica wrote, and the code alone says what it is. Unknown codes return
// nil.
func ErrorFromCode(c, msg string) error {
	for _, r := range refinements {
		if r.code == c {
			return &remoteError{kind: r.err, msg: msg}
		}
	}
	for _, e := range errorCodes {
		if e.code == c {
			return &remoteError{kind: e.err, msg: msg}
		}
	}
	return nil
}

// previousReleaseRefinements are the refinements release 0.1.0 has. It
// sends them with the code of the error they refine, and no code of their
// own; only its text, which starts with the refinement's, tells one.
var previousReleaseRefinements = []error{ErrJournalCARevoked}

// ErrorFromPreviousRelease rebuilds a rule error from a result forwarded by
// a journal of release 0.1.0, which carries no exact code: as
// ErrorFromCode, and a result of INVALID_ARGUMENT whose message starts
// with ErrJournalCARevoked's text is that refinement. A journal of this
// release forwarding to a 0.1.0 leader meets it in a quorum still mixed
// at feature level 1: its publish under a journal CA revoked after the
// leader's peer check let the request in. It needs the refinement to stop
// publishing in vain, and to answer JOURNAL_CA_REVOKED. It is the one
// place a rule error's kind is told by its text, for the one refinement
// 0.1.0 has (ErrJournalCANotBound came after it, at feature level 2, which
// no 0.1.0 journal joins); it goes when 0.1.0 is no longer an adjacent
// release (docs/upgrade.md).
func ErrorFromPreviousRelease(c, msg string) error {
	for _, r := range previousReleaseRefinements {
		if c == BaseCode(ErrorCode(r)) && strings.HasPrefix(msg, r.Error()+": ") {
			return &remoteError{kind: r, msg: msg}
		}
	}
	return ErrorFromCode(c, msg)
}

// remoteError is a rule error rebuilt from the wire: the message as the
// replica that applied the command wrote it, of the kind its code names.
type remoteError struct {
	kind error
	msg  string
}

func (e *remoteError) Error() string {
	if e.msg == "" {
		return e.kind.Error()
	}
	return e.msg
}

func (e *remoteError) Unwrap() error { return e.kind }
