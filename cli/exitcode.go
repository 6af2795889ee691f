package cli

import (
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
)

// Exit codes of the pact CLI, one per class of failure, so scripts can
// branch without reading messages. docs/exit-codes.md documents them; keep the
// two in step. Codes are never reused for a different meaning.
const (
	ExitOK           = 0 // success
	ExitInternal     = 1 // internal or unknown error, interrupted, journal bug
	ExitUsage        = 2 // bad flag, argument or local file; InvalidArgument
	ExitNotFound     = 3 // NotFound: no such node
	ExitConflict     = 4 // AlreadyExists / Aborted: already registered, hardware in use
	ExitDenied       = 5 // PermissionDenied / Unauthenticated
	ExitPrecondition = 6 // FailedPrecondition: e.g. ALREADY_ACTIVE
	ExitUnavailable  = 7 // Unavailable / DeadlineExceeded / no journal reachable
	ExitRateLimited  = 8 // ResourceExhausted: retry later
)

// ExitCode maps an error returned by a command to the process exit code.
// It is the only place that does so.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var usage *UsageError
	if errors.As(err, &usage) {
		return ExitUsage
	}
	var unreachable *UnreachableError
	if errors.As(err, &unreachable) {
		return ExitUnavailable
	}
	switch apierr.FromError(err).Code {
	case codes.OK:
		// A non-nil error that carries no code is still a failure.
		return ExitInternal
	case codes.InvalidArgument, codes.OutOfRange:
		return ExitUsage
	case codes.NotFound:
		return ExitNotFound
	case codes.AlreadyExists, codes.Aborted:
		return ExitConflict
	case codes.PermissionDenied, codes.Unauthenticated:
		return ExitDenied
	case codes.FailedPrecondition:
		return ExitPrecondition
	case codes.Unavailable, codes.DeadlineExceeded:
		return ExitUnavailable
	case codes.ResourceExhausted:
		return ExitRateLimited
	default: // Unknown, Internal, Unimplemented, DataLoss, Canceled
		return ExitInternal
	}
}
