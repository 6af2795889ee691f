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
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/raftfsm"
)

// retryAfterError carries a retry-after hint with an overload error.
type retryAfterError struct {
	err   error
	after time.Duration
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
	{raftfsm.ErrInvalidCommand, apierr.InvalidArgument},
	{raftfsm.ErrVClusterChanged, apierr.VClusterChanged},
	{errNodeStreaming, apierr.NodeStreaming},
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
	{ErrUnauthenticated, apierr.Unauthenticated},
	{ErrPermission, apierr.PermissionDenied},
	{ErrOverloaded, apierr.RateLimited},
	{ErrNoLeader, apierr.NoLeader},
	{ErrNotFound, apierr.NotFound},
	{ErrOutcomeUnknown, apierr.OutcomeUnknown},
	{errMembership, apierr.MembershipRefused},
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
	var ra *retryAfterError
	if errors.As(err, &ra) {
		after = ra.after
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			// The reason code already names the sentinel; keep the detail.
			msg := strings.TrimPrefix(err.Error(), r.err.Error()+": ")
			return apierr.Status(r.reason, after, msg).Err()
		}
	}
	return apierr.Status(apierr.Internal, 0, "internal error; see the journal log").Err()
}
