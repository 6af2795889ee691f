package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/tlsalert"
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
	// ReasonRevoked: the node was decommissioned (or the certificate's
	// serial revoked); the agent stops. An operator must register it again.
	ReasonRevoked = "node_revoked"
	// ReasonFenced: an operator fenced (quarantined) the node: it keeps its
	// registration but may not enroll or renew until unfenced.
	ReasonFenced = "node_fenced"
	// ReasonCertReplaced: the journal holds a newer certificate for this
	// node than the one presented (a renewal or a new standby replaced
	// it); the agent drops it and uses the newer one, or enrolls again.
	ReasonCertReplaced = "cert_replaced"
	// ReasonSPIREBundleUntrusted: the journal does not verify the SVID
	// with the SPIRE bundle it trusts (another SPIRE CA, a forged one of
	// the same name, or the journal has no bundle loaded yet).
	ReasonSPIREBundleUntrusted = "spire_bundle_untrusted"
	// ReasonTrustDomainNotAccepted: the SVID is of a trust domain the
	// journal does not accept (--spire-trust-domain on the journal).
	ReasonTrustDomainNotAccepted = "trust_domain_not_accepted"
	// ReasonSPIFFEIDUnmapped: the SVID is valid but its SPIFFE ID maps to
	// no registered node (pact node enroll ... --spiffe-id).
	ReasonSPIFFEIDUnmapped = "spiffe_id_unmapped"
	// ReasonIdentityRefused: the journal refused the identity for another
	// reason it did not name (no certificate of this domain, a journal
	// that answers for another node).
	ReasonIdentityRefused = "identity_refused"
	// ReasonRevokedOrFenced is no longer reported: revocation, fencing,
	// replaced certificates and SPIRE refusals each have a reason of their
	// own. Kept so that code written against it still compiles.
	ReasonRevokedOrFenced = "identity_revoked_or_fenced"
	// ReasonClockSkew: the agent's clock differs from the journal's by more
	// than MaxClockSkew, or the journal found the agent's certificate not
	// valid yet at its clock.
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
	// (not registered, hardware conflict, already active elsewhere, a
	// join token missing or refused, a key bound to another node).
	ReasonEnrollmentRefused = "enrollment_refused"
	// ReasonActiveInAnotherDomain: a federated domain holds the node's
	// hardware Active and this domain's policy for it is refuse
	// (docs/domains.md): the agent waits, retrying as the journal's
	// retry-after says, and enrolls once that domain's claim ends. Status
	// names the domain (active_in_another_domain).
	ReasonActiveInAnotherDomain = "active_in_another_domain"
	// ReasonTPMRefused: the journal refused the node's TPM proof (no TPM
	// where one is registered, another EK, a refused attestation key, a
	// wrong answer).
	ReasonTPMRefused = "tpm_attestation_refused"
	// ReasonTPMUnavailable: the node's TPM exists but failed, or the
	// journal challenged a TPM the agent does not have.
	ReasonTPMUnavailable = "tpm_unavailable"
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
	case errors.Is(err, channel.ErrClockSkew), pe.Reason == apierr.CertNotYetValid:
		return ReasonClockSkew
	case errors.Is(err, identity.ErrExpired), id != nil && id.Expired(now):
		return ReasonCertExpired
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		// A journal's certificate not valid at the agent's time, beyond
		// what the agent bridges (skew.go): the clocks, not the trust.
		return ReasonClockSkew
	case refusedCertificate(err):
		// The journal refused this identity's certificate in the TLS
		// handshake (a chain to no authority it trusts).
		return ReasonIdentityRefused
	case errors.As(err, &verr), errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &host):
		return ReasonServerTLSUntrusted
	case errors.Is(err, channel.ErrWrongNode):
		return ReasonIdentityRefused
	case errors.Is(err, ErrTPM):
		return ReasonTPMUnavailable
	}
	switch pe.Reason {
	case apierr.NodeRevoked:
		return ReasonRevoked
	case apierr.NodeFenced:
		return ReasonFenced
	case apierr.StaleCertificate:
		return ReasonCertReplaced
	case apierr.SPIREBundleUntrusted:
		return ReasonSPIREBundleUntrusted
	case apierr.TrustDomainNotAccepted:
		return ReasonTrustDomainNotAccepted
	case apierr.SPIFFEIDUnmapped:
		return ReasonSPIFFEIDUnmapped
	case apierr.RateLimited:
		return ReasonRateLimited
	case apierr.ActiveInAnotherDomain:
		return ReasonActiveInAnotherDomain
	case apierr.NoLeader, apierr.OutcomeUnknown:
		return ReasonJournalUnavailable
	case apierr.NodeNotEnrolled, apierr.HardwareIdentityConflict, apierr.AlreadyActive, apierr.NodeAlreadyEnrolled,
		apierr.JoinTokenRequired, apierr.JoinTokenInvalid, apierr.KeyInUse:
		return ReasonEnrollmentRefused
	case apierr.TPMRequired, apierr.TPMEKMismatch, apierr.TPMAKRefused, apierr.TPMAttestationFailed,
		apierr.TPMChallengeExpired, apierr.TPMChallengeUnknown, apierr.TPMQuoteRefused, apierr.BootPolicyRefused:
		return ReasonTPMRefused
	}
	switch pe.Code {
	case codes.PermissionDenied, codes.Unauthenticated:
		return ReasonIdentityRefused
	case codes.ResourceExhausted:
		return ReasonRateLimited
	case codes.Unavailable, codes.DeadlineExceeded:
		return ReasonEndpointUnreachable
	}
	return ReasonOther
}

// refusedCertificate reports whether the journal refused the agent's
// certificate with the bad_certificate alert: in the handshake, or (TLS
// 1.3) on the first read after it. The alert crosses gRPC as text only;
// the channel's credentials put it back, typed (channel.ClientCredentials,
// tlsalert).
func refusedCertificate(err error) bool {
	a, ok := tlsalert.Received(err)
	return ok && a == tlsalert.BadCertificate
}

// refusal reports whether err is a final answer about this node's
// enrollment (apierr.Error.Final).
func refusal(err error) bool { return apierr.FromError(err).Final() }

// final reports whether err ends the agent: a refusal the agent does not
// retry (ErrRefused), or the node decommissioned or fenced, which the loop
// turns into one wherever it meets it.
func final(err error) bool { return errors.Is(err, ErrRefused) || revoked(err) }

// revoked reports whether the journal said the node was decommissioned or
// fenced: the agent fails closed and never tries to recover on its own (a
// fenced node is restarted once an operator unfences it).
func revoked(err error) bool {
	r := apierr.FromError(err).Reason
	return r == apierr.NodeRevoked || r == apierr.NodeFenced
}
