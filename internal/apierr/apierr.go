// Package apierr is pact's wire error vocabulary: the reason codes a journal
// puts on a gRPC status (as google.rpc.ErrorInfo) and the one function a
// client uses to read them back. The journal maps its own errors onto these
// in one place (journal/status.go).
package apierr

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Domain is the ErrorInfo domain of every pact reason.
const Domain = "pact.dev"

// Reason is a stable, machine-readable error code.
type Reason string

// Reasons. Their gRPC codes are fixed by Code.
const (
	NodeNotEnrolled          Reason = "NODE_NOT_ENROLLED"
	NodeAlreadyEnrolled      Reason = "NODE_ALREADY_ENROLLED"
	HardwareIdentityConflict Reason = "HARDWARE_IDENTITY_CONFLICT"
	NodeRevoked              Reason = "NODE_REVOKED"
	// NodeFenced: an operator quarantined the node (pact node fence); it
	// keeps its registration but may not enroll or renew until unfenced.
	NodeFenced Reason = "NODE_FENCED"
	// JoinTokenRequired: the node's policy requires a join token
	// (--require-token) and the agent presented none.
	JoinTokenRequired Reason = "JOIN_TOKEN_REQUIRED"
	// JoinTokenInvalid: the join token is unknown, expired, already used,
	// or another node's.
	JoinTokenInvalid Reason = "JOIN_TOKEN_INVALID"
	// KeyInUse: the CSR's public key is the current key of another node.
	KeyInUse          Reason = "KEY_IN_USE"
	AlreadyActive     Reason = "ALREADY_ACTIVE"
	RateLimited       Reason = "RATE_LIMITED"
	InvalidCSR        Reason = "INVALID_CSR"
	InvalidArgument   Reason = "INVALID_ARGUMENT"
	Unauthenticated   Reason = "UNAUTHENTICATED"
	PermissionDenied  Reason = "PERMISSION_DENIED"
	StaleCertificate  Reason = "STALE_CERTIFICATE"
	NodeStreaming     Reason = "NODE_STREAMING"
	VClusterChanged   Reason = "VCLUSTER_CHANGED"
	NoLeader          Reason = "NO_LEADER"
	NotFound          Reason = "NOT_FOUND"
	MembershipRefused Reason = "MEMBERSHIP_REFUSED"
	OutcomeUnknown    Reason = "OUTCOME_UNKNOWN"
	// TooManyStreams: the certificate already holds the most streams a
	// journal allows one certificate; retryable once one has closed.
	TooManyStreams Reason = "TOO_MANY_STREAMS"
	Internal       Reason = "INTERNAL"
	// JournalHalted: this journal stopped serving (removed from the
	// quorum, it met a log entry of a newer version, or its Raft store
	// write is stuck); another journal may serve the call.
	JournalHalted Reason = "JOURNAL_HALTED"
	// JournalCARevoked: an operator revoked this journal's journal CA
	// (pact journal revoke-ca); it signs nothing until it has a new one
	// from the ceremony. Another journal may serve the call.
	JournalCARevoked Reason = "JOURNAL_CA_REVOKED"
	// PeerWithdrawn: a journal's peer rights were withdrawn by Raft's
	// records (its journal CA or intermediate revoked, or its journal id
	// bound to another journal CA): the journal refused as a peer stops
	// serving until the quorum takes it again (docs/quorum.md).
	PeerWithdrawn Reason = "PEER_WITHDRAWN"
	// PeerRemoved: PeerWithdrawn, from a journal that besides no longer
	// lists the caller in its configuration (it knows a leader): the
	// caller was removed from the quorum and exits (docs/quorum.md, "A
	// removed journal stops").
	PeerRemoved Reason = "PEER_REMOVED"
	// OperatorRevoked: the operator credential was revoked (pact admin
	// revoke); get a new one from a platform-admin.
	OperatorRevoked Reason = "OPERATOR_REVOKED"
	// OperatorNotFound: pact admin revoke NAME of a name no recorded
	// operator credential carries; the message names the nearest
	// recorded names.
	OperatorNotFound Reason = "OPERATOR_NOT_FOUND"
	// OperatorNotIssued: an operator credential signed by a journal
	// intermediate that this quorum did not issue (no record of its
	// serial in the registry): get one from a platform-admin (pact admin
	// issue).
	OperatorNotIssued Reason = "OPERATOR_NOT_ISSUED"
	// SPIREBundleUntrusted: an X.509-SVID of the accepted trust domain that
	// the journal's SPIRE bundle does not verify (a CA the journal does not
	// trust, an expired SPIRE intermediate, or no bundle loaded yet).
	SPIREBundleUntrusted Reason = "SPIRE_BUNDLE_UNTRUSTED"
	// TrustDomainNotAccepted: the client certificate carries a SPIFFE ID
	// of a trust domain the journal does not accept (--spire-trust-domain).
	TrustDomainNotAccepted Reason = "TRUST_DOMAIN_NOT_ACCEPTED"
	// SPIFFEIDUnmapped: a valid SVID whose SPIFFE ID maps to no node in the
	// registry.
	SPIFFEIDUnmapped Reason = "SPIFFE_ID_UNMAPPED"
	// CertNotYetValid: the client certificate's not_before is ahead of the
	// journal's clock: one of the two clocks is wrong.
	CertNotYetValid Reason = "CERT_NOT_YET_VALID"
	// RevokesOwnCredential: a journal CA revocation, a retirement with no
	// grace or a removal that retires intermediates would cut off the
	// caller's own operator credential; nothing was done. Renew it first
	// (pact admin renew, from a journal whose chain stays), or confirm
	// with --yes-including-my-credential.
	RevokesOwnCredential Reason = "REVOKES_OWN_CREDENTIAL"

	// TPM attestation refusals of Enroll (docs/tpm.md).

	// TPMRequired: the node is registered with a TPM EK hash and the agent
	// presented no TPM.
	TPMRequired Reason = "TPM_REQUIRED"
	// TPMEKMismatch: the TPM's endorsement key is not the registered one.
	TPMEKMismatch Reason = "TPM_EK_MISMATCH"
	// TPMAKRefused: the attestation key is not a restricted signing key
	// bound to its TPM (fixedTPM, fixedParent).
	TPMAKRefused Reason = "TPM_AK_REFUSED"
	// TPMAttestationFailed: the answer to the credential-activation
	// challenge is wrong or was made for another CSR key.
	TPMAttestationFailed Reason = "TPM_ATTESTATION_FAILED"
	// TPMChallengeExpired: the answer came too late; enroll again from
	// round one (retryable).
	TPMChallengeExpired Reason = "TPM_CHALLENGE_EXPIRED"
	// TPMChallengeUnknown: the journal holds no such challenge (answered
	// already, another journal's, or lost in a restart); enroll again from
	// round one (retryable).
	TPMChallengeUnknown Reason = "TPM_CHALLENGE_UNKNOWN"
	// TPMQuoteRefused: the TPM quote of the node's boot does not verify
	// (not signed by the activated attestation key, not over this
	// challenge's nonce, PCR values that are not the quoted ones), or its
	// event log does not reproduce the quoted PCRs (docs/tpm.md,
	// "Measured boot").
	TPMQuoteRefused Reason = "TPM_QUOTE_REFUSED"
	// BootPolicyRefused: the node's verified quote does not match the
	// boot policy in force for its vCluster, whose action is refuse or
	// fence (docs/tpm.md, "Boot policies"); the message names what
	// differs. Final for the agent: the node must boot an image the
	// policy allows, or an operator must change the policy.
	BootPolicyRefused Reason = "BOOT_POLICY_REFUSED"
	// QuorumVersion: the feature asked for is new at a quorum feature
	// level the quorum has not reached (docs/upgrade.md); the message
	// names the journals still to upgrade. Not retryable as it is: it
	// works once every journal runs a release that speaks the level.
	QuorumVersion Reason = "QUORUM_VERSION"
	// ActiveInAnotherDomain: a federated domain whose policy is refuse
	// holds the node's hardware Active (docs/domains.md); the message
	// names it. Retryable: the node enrolls once that domain's claim ends.
	ActiveInAnotherDomain Reason = "ACTIVE_IN_ANOTHER_DOMAIN"
)

// Limit names what a RATE_LIMITED refusal is about, so a caller (and the
// operator reading its log) knows whether its own address is to blame.
type Limit string

const (
	// LimitSource: this source address spent its own failure budget.
	LimitSource Limit = "source"
	// LimitJournal: the journal's budget for all sources together is spent
	// or busy; the caller's address is not the cause.
	LimitJournal Limit = "journal"
)

// limitKey is the ErrorInfo metadata key carrying a Limit.
const limitKey = "limit"

// otherDomainKey is the ErrorInfo metadata key naming the federated domain
// an ACTIVE_IN_ANOTHER_DOMAIN refusal is about.
const otherDomainKey = "other_domain"

var codeOf = map[Reason]codes.Code{
	NodeNotEnrolled:          codes.NotFound,
	NodeAlreadyEnrolled:      codes.AlreadyExists,
	HardwareIdentityConflict: codes.AlreadyExists,
	NodeRevoked:              codes.PermissionDenied,
	NodeFenced:               codes.PermissionDenied,
	JoinTokenRequired:        codes.PermissionDenied,
	JoinTokenInvalid:         codes.PermissionDenied,
	KeyInUse:                 codes.AlreadyExists,
	AlreadyActive:            codes.FailedPrecondition,
	RateLimited:              codes.ResourceExhausted,
	InvalidCSR:               codes.InvalidArgument,
	InvalidArgument:          codes.InvalidArgument,
	Unauthenticated:          codes.Unauthenticated,
	PermissionDenied:         codes.PermissionDenied,
	StaleCertificate:         codes.PermissionDenied,
	NodeStreaming:            codes.FailedPrecondition,
	VClusterChanged:          codes.FailedPrecondition,
	NoLeader:                 codes.Unavailable,
	NotFound:                 codes.NotFound,
	MembershipRefused:        codes.FailedPrecondition,
	OutcomeUnknown:           codes.DeadlineExceeded,
	TooManyStreams:           codes.ResourceExhausted,
	Internal:                 codes.Internal,
	JournalHalted:            codes.Unavailable,
	JournalCARevoked:         codes.Unavailable,
	PeerWithdrawn:            codes.Unauthenticated,
	PeerRemoved:              codes.Unauthenticated,
	OperatorRevoked:          codes.PermissionDenied,
	OperatorNotFound:         codes.NotFound,
	OperatorNotIssued:        codes.Unauthenticated,
	SPIREBundleUntrusted:     codes.Unauthenticated,
	TrustDomainNotAccepted:   codes.Unauthenticated,
	SPIFFEIDUnmapped:         codes.PermissionDenied,
	CertNotYetValid:          codes.Unauthenticated,
	RevokesOwnCredential:     codes.FailedPrecondition,
	TPMRequired:              codes.FailedPrecondition,
	TPMEKMismatch:            codes.PermissionDenied,
	TPMAKRefused:             codes.InvalidArgument,
	TPMAttestationFailed:     codes.PermissionDenied,
	TPMChallengeExpired:      codes.Aborted,
	TPMChallengeUnknown:      codes.Aborted,
	TPMQuoteRefused:          codes.PermissionDenied,
	BootPolicyRefused:        codes.PermissionDenied,
	QuorumVersion:            codes.FailedPrecondition,
	ActiveInAnotherDomain:    codes.ResourceExhausted,
}

// Code is the gRPC code a reason travels with.
func (r Reason) Code() codes.Code {
	if c, ok := codeOf[r]; ok {
		return c
	}
	return codes.Unknown
}

// Error is a pact error as a client sees it.
type Error struct {
	Code       codes.Code
	Reason     Reason // empty when the server gave none (e.g. a transport error)
	Message    string
	RetryAfter time.Duration
	// Limit says what a RATE_LIMITED refusal limits ("" when not said).
	Limit Limit
	// OtherDomain names the federated domain that holds the hardware
	// Active, for ACTIVE_IN_ANOTHER_DOMAIN ("" when not said).
	OtherDomain string
}

func (e *Error) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s: %s", e.Reason, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Final reports whether e is a final answer about a node's enrollment,
// one that retrying will not change (pact-agent's rule, which the boot-storm
// benchmark follows too). An ALREADY_ACTIVE with a retry-after is not: the
// node's previous incarnation went quiet and the journal will accept a
// takeover after the window.
func (e *Error) Final() bool {
	if e.Reason == AlreadyActive && e.RetryAfter > 0 {
		return false
	}
	switch e.Code {
	case codes.NotFound, codes.AlreadyExists, codes.PermissionDenied, codes.FailedPrecondition, codes.InvalidArgument:
		return true
	}
	return false
}

// Is lets errors.Is(err, &Error{Reason: X}) match on reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Reason != "" && t.Reason == e.Reason
}

// Status builds the gRPC status for a reason. The message must hold no
// secret: it reaches the caller and the logs.
func Status(r Reason, retryAfter time.Duration, msg string) *status.Status {
	return StatusLimit(r, retryAfter, "", msg)
}

// StatusLimit is Status naming what was limited (empty: nothing said).
func StatusLimit(r Reason, retryAfter time.Duration, limit Limit, msg string) *status.Status {
	return StatusOf(r, retryAfter, limit, "", msg)
}

// StatusOf is StatusLimit also naming, for ACTIVE_IN_ANOTHER_DOMAIN, the
// federated domain that holds the hardware Active (empty: none named), so
// that a client reads it without parsing the message.
func StatusOf(r Reason, retryAfter time.Duration, limit Limit, otherDomain, msg string) *status.Status {
	st := status.New(r.Code(), string(r)+": "+msg)
	info := &errdetails.ErrorInfo{Reason: string(r), Domain: Domain}
	if limit != "" || otherDomain != "" {
		info.Metadata = map[string]string{}
	}
	if limit != "" {
		info.Metadata[limitKey] = string(limit)
	}
	if otherDomain != "" {
		info.Metadata[otherDomainKey] = otherDomain
	}
	var err error
	if retryAfter > 0 {
		st, err = st.WithDetails(info, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
	} else {
		st, err = st.WithDetails(info)
	}
	if err != nil {
		return status.New(r.Code(), string(r)+": "+msg)
	}
	return st
}

// FromError reads a pact error back from a gRPC error. Non-status errors
// become codes.Unknown. It returns nil for nil.
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	st, ok := status.FromError(err)
	if !ok {
		return &Error{Code: codes.Unknown, Message: err.Error()}
	}
	out := &Error{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		switch v := d.(type) {
		case *errdetails.ErrorInfo:
			if v.GetDomain() == Domain {
				out.Reason = Reason(v.GetReason())
				out.Limit = Limit(v.GetMetadata()[limitKey])
				out.OtherDomain = v.GetMetadata()[otherDomainKey]
				prefix := v.GetReason() + ": "
				if len(out.Message) >= len(prefix) && out.Message[:len(prefix)] == prefix {
					out.Message = out.Message[len(prefix):]
				}
			}
		case *errdetails.RetryInfo:
			out.RetryAfter = v.GetRetryDelay().AsDuration()
		}
	}
	// A retry-after given before any gRPC status could be: a journal's
	// busy answer to the ClientHello (internal/transport.BusyError), which
	// agent/channel's ClientCredentials.Explain puts into the UNAVAILABLE error.
	var hint interface{ RetryHint() time.Duration }
	if out.RetryAfter == 0 && errors.As(err, &hint) {
		out.RetryAfter = hint.RetryHint()
	}
	return out
}
