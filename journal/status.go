package journal

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/raftnode"
	"github.com/pact-hpc/pact/journal/v1rpc"
	"github.com/pact-hpc/pact/raftfsm"
)

// retryAfterError carries a retry-after hint with an overload error.
type retryAfterError struct {
	err   error
	after time.Duration
	// limit says what a rate-limit refusal limits (apierr.Limit).
	limit apierr.Limit
	// otherDomain names the federated domain of an
	// ErrActiveInAnotherDomain refusal.
	otherDomain string
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// reasons maps every sentinel a handler can return to its wire reason. It is
// the one place journal errors become gRPC statuses.
var reasons = []struct {
	err    error
	reason apierr.Reason
}{
	{raftfsm.ErrNodeNotEnrolled, apierr.NodeNotEnrolled},
	{raftfsm.ErrNodeAlreadyEnrolled, apierr.NodeAlreadyEnrolled},
	{raftfsm.ErrHardwareIdentityConflict, apierr.HardwareIdentityConflict},
	{raftfsm.ErrNodeRevoked, apierr.NodeRevoked},
	{raftfsm.ErrAlreadyActive, apierr.AlreadyActive},
	{raftfsm.ErrStaleCertificate, apierr.StaleCertificate},
	// A kind of ErrInvalidCommand: named first.
	{raftfsm.ErrJournalCARevoked, apierr.JournalCARevoked},
	{raftfsm.ErrInvalidCommand, apierr.InvalidArgument},
	{raftfsm.ErrVClusterChanged, apierr.VClusterChanged},
	{raftfsm.ErrNodeFenced, apierr.NodeFenced},
	{raftfsm.ErrJoinTokenRequired, apierr.JoinTokenRequired},
	{raftfsm.ErrJoinTokenInvalid, apierr.JoinTokenInvalid},
	{raftfsm.ErrKeyInUse, apierr.KeyInUse},
	{raftfsm.ErrOperatorRevoked, apierr.OperatorRevoked},
	{raftfsm.ErrNotFound, apierr.NotFound},
	{raftfsm.ErrQuorumVersion, apierr.QuorumVersion},
	{ca.ErrInvalidRole, apierr.InvalidArgument},
	{ca.ErrInvalidLifetime, apierr.InvalidArgument},
	{v1rpc.ErrNodeStreaming, apierr.NodeStreaming},
	{v1rpc.ErrRevokesOwnCredential, apierr.RevokesOwnCredential},
	{ca.ErrCSRTooLarge, apierr.InvalidCSR},
	{ca.ErrCSRMalformed, apierr.InvalidCSR},
	{ca.ErrCSRSignature, apierr.InvalidCSR},
	{ca.ErrKeyPolicy, apierr.InvalidCSR},
	{ca.ErrCSRExtensions, apierr.InvalidCSR},
	{hwid.ErrInvalidMAC, apierr.InvalidArgument},
	{hwid.ErrInvalidBMCSerial, apierr.InvalidArgument},
	{hwid.ErrInvalidEKHash, apierr.InvalidArgument},
	{hwid.ErrEmpty, apierr.InvalidArgument},
	{hwid.ErrTooMany, apierr.InvalidArgument},
	{pki.ErrInvalidName, apierr.InvalidArgument},
	{ErrInvalidArgument, apierr.InvalidArgument},
	// The specific authentication refusals come before the generic
	// ErrUnauthenticated and ErrPermission they wrap.
	{auth.ErrForeignTrustDomain, apierr.TrustDomainNotAccepted},
	{auth.ErrSVIDUntrusted, apierr.SPIREBundleUntrusted},
	{auth.ErrSPIFFEUnmapped, apierr.SPIFFEIDUnmapped},
	{auth.ErrNotYetValid, apierr.CertNotYetValid},
	{auth.ErrOperatorNotIssued, apierr.OperatorNotIssued},
	// A journal whose own peer rights the records withdrew: it learns so
	// from this reason (raftnode: cut off).
	{raftnode.ErrPeerRemoved, apierr.PeerRemoved},
	{raftnode.ErrPeerIntermediateRevoked, apierr.PeerWithdrawn},
	{raftnode.ErrPeerNotBound, apierr.PeerWithdrawn},
	{ErrUnauthenticated, apierr.Unauthenticated},
	// A journal's forward before its new intermediate is published:
	// retryable for it (raftnode's forward answers NO_LEADER).
	{errUnpublishedPeer, apierr.Unauthenticated},
	{ErrPermission, apierr.PermissionDenied},
	{ErrOverloaded, apierr.RateLimited},
	{ErrTooManyStreams, apierr.TooManyStreams},
	{ErrNoLeader, apierr.NoLeader},
	{ErrOperatorNotFound, apierr.OperatorNotFound},
	{ErrNotFound, apierr.NotFound},
	{ErrOutcomeUnknown, apierr.OutcomeUnknown},
	{errMembership, apierr.MembershipRefused},
	{ErrTPMRequired, apierr.TPMRequired},
	{ErrTPMEKMismatch, apierr.TPMEKMismatch},
	{ErrTPMAKRefused, apierr.TPMAKRefused},
	{ErrTPMAttestationFailed, apierr.TPMAttestationFailed},
	{ErrTPMChallengeExpired, apierr.TPMChallengeExpired},
	{ErrTPMChallengeUnknown, apierr.TPMChallengeUnknown},
	{ErrTPMQuoteRefused, apierr.TPMQuoteRefused},
	{ErrBootPolicyRefused, apierr.BootPolicyRefused},
	{errHalted, apierr.JournalHalted},
	{ErrJournalCARevoked, apierr.JournalCARevoked},
	{ErrActiveInAnotherDomain, apierr.ActiveInAnotherDomain},
}

// toStatus converts a handler error to a gRPC status error. Errors that are
// already statuses pass through; unknown errors become INTERNAL with a
// generic message, so no internal detail (or secret) reaches the caller.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrOutcomeUnknown):
		return apierr.Status(apierr.OutcomeUnknown, time.Second, "the journal could not commit in time; the change may or may not have been made: check before retrying").Err()
	}
	var after time.Duration
	var limit apierr.Limit
	var other string
	var ra *retryAfterError
	if errors.As(err, &ra) {
		after, limit, other = ra.after, ra.limit, ra.otherDomain
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			// The reason code already names the sentinel; keep the detail.
			return apierr.StatusOf(r.reason, after, limit, other, detail(err.Error())).Err()
		}
	}
	return apierr.Status(apierr.Internal, 0, "internal error; see the journal log").Err()
}

// detail strips the sentinels' own texts ("journal: unauthenticated: ...")
// from the front of an error message: the wire reason names them already.
func detail(msg string) string {
	for again := true; again; {
		again = false
		for _, r := range reasons {
			if rest, ok := strings.CutPrefix(msg, r.err.Error()+": "); ok {
				msg, again = rest, true
			}
		}
	}
	return msg
}
