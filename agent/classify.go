package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/apierr"
)

// Failure reasons: why the agent could not enroll, renew, move its channel
// or write its identity files. They label
// pact_agent_cert_renewal_failures_total and show in `pact-agent status`.
const (
	// ReasonEndpointUnreachable: no journal answered (connection refused,
	// timed out, reset).
	ReasonEndpointUnreachable = "endpoint_unreachable"
	// ReasonServerTLSUntrusted: a journal answered with a server
	// certificate that does not chain to the domain root (--ca): wrong
	// endpoint, or a stale CA file. Verification is never turned off.
	ReasonServerTLSUntrusted = "server_tls_untrusted"
	// ReasonCertExpired: the identity the agent holds has expired; only a
	// new enrollment (or SPIRE) gives it one again.
	ReasonCertExpired = "cert_expired"
	// ReasonRevokedOrFenced: the journal refuses the identity: the node
	// was decommissioned, its certificate superseded, or the identity is
	// not one the journal trusts for this node.
	ReasonRevokedOrFenced = "identity_revoked_or_fenced"
	// ReasonClockSkew: the agent's clock differs from the journal's by more
	// than MaxClockSkew.
	ReasonClockSkew = "clock_skew"
	// ReasonDiskFull: writing the identity files failed for lack of space.
	ReasonDiskFull = "disk_full"
	// ReasonRateLimited: the journal is overloaded and asked the agent to
	// come back later.
	ReasonRateLimited = "rate_limited"
	// ReasonJournalUnavailable: a journal answered but could not serve the
	// call (no Raft leader, a commit that timed out).
	ReasonJournalUnavailable = "journal_unavailable"
	// ReasonEnrollmentRefused: the journal refused this node's enrollment
	// (not registered, hardware conflict, already active elsewhere).
	ReasonEnrollmentRefused = "enrollment_refused"
	// ReasonOther: anything else; the log and the status say what.
	ReasonOther = "other"
)

// classify names why an operation failed. It is the agent's one place that
// turns errors into reasons. id is the identity the operation used (nil if
// none); an identity expired at now makes the reason cert_expired whatever
// else went wrong, because nothing but a new identity fixes that.
func classify(err error, id *identity.Identity, now time.Time) string {
	if err == nil {
		return ""
	}
	var (
		verr    *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		host    x509.HostnameError
	)
	pe := apierr.FromError(err)
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return ReasonDiskFull
	case errors.Is(err, identity.ErrClockSkew):
		return ReasonClockSkew
	case errors.Is(err, identity.ErrExpired), id != nil && id.Expired(now):
		return ReasonCertExpired
	case errors.As(err, &verr), errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &host):
		return ReasonServerTLSUntrusted
	case errors.Is(err, identity.ErrWrongNode):
		return ReasonRevokedOrFenced
	}
	switch pe.Reason {
	case apierr.NodeRevoked, apierr.StaleCertificate:
		return ReasonRevokedOrFenced
	case apierr.RateLimited:
		return ReasonRateLimited
	case apierr.NoLeader, apierr.OutcomeUnknown:
		return ReasonJournalUnavailable
	case apierr.NodeNotEnrolled, apierr.HardwareIdentityConflict, apierr.AlreadyActive, apierr.NodeAlreadyEnrolled:
		return ReasonEnrollmentRefused
	}
	switch pe.Code {
	case codes.PermissionDenied, codes.Unauthenticated:
		return ReasonRevokedOrFenced
	case codes.ResourceExhausted:
		return ReasonRateLimited
	case codes.Unavailable, codes.DeadlineExceeded:
		return ReasonEndpointUnreachable
	}
	return ReasonOther
}

// refusal reports whether err is a final answer about this node's
// enrollment (apierr.Error.Final).
func refusal(err error) bool { return apierr.FromError(err).Final() }

// revoked reports whether the journal said the node was decommissioned:
// the agent fails closed and never tries to recover on its own.
func revoked(err error) bool { return apierr.FromError(err).Reason == apierr.NodeRevoked }
