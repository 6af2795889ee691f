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
	ExitPrecondition = 6 // FailedPrecondition: ALREADY_ACTIVE, NODE_STREAMING, VCLUSTER_CHANGED, REVOKES_OWN_CREDENTIAL
	ExitUnavailable  = 7 // Unavailable / DeadlineExceeded / no journal reachable
	ExitRateLimited  = 8 // ResourceExhausted: retry later

	// pact journal status, for monitoring.
	ExitQuorumNoLeader     = 10 // no leader: writes refused
	ExitQuorumDegraded     = 11 // a voter unreachable, halted or lagging
	ExitQuorumLearnerStuck = 12 // a non-voter not promoted in time
)

// ExitCode maps an error returned by a command to the process exit code.
// It is the only place that does so.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var batch *BatchError
	if errors.As(err, &batch) {
		return batch.Code
	}
	var quorum *QuorumError
	if errors.As(err, &quorum) {
		return quorum.Code
	}
	var usage *UsageError
	if errors.As(err, &usage) {
		return ExitUsage
	}
	var untrusted *UntrustedServerError
	if errors.As(err, &untrusted) {
		return ExitUsage // the local --ca is wrong; the journals are up
	}
	var unreachable *UnreachableError
	if errors.As(err, &unreachable) {
		return ExitUnavailable
	}
	e := apierr.FromError(err)
	if tooLarge(e) {
		return ExitInternal // waiting will not help: a version or a fault
	}
	switch e.Code {
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

// tooLarge reports gRPC's own message size limit, on either side: a
// ResourceExhausted that is no rate limit. A journal's own
// RESOURCE_EXHAUSTED always carries its reason (RATE_LIMITED,
// TOO_MANY_STREAMS, ACTIVE_IN_ANOTHER_DOMAIN: apierr); one without a
// reason is gRPC's, and gRPC says RESOURCE_EXHAUSTED only of a message
// larger than a side's limit.
func tooLarge(e *apierr.Error) bool {
	return e.Code == codes.ResourceExhausted && e.Reason == ""
}

// severity orders exit codes for a batch whose rows failed in different
// ways: the most severe class present decides the exit code. Failures that
// say nothing about one row (a journal fault, a credential, an overloaded
// or leaderless journal) outrank row problems; a file that is wrong
// (usage) outranks a registry that already holds the hardware (conflict).
var severity = map[int]int{
	ExitOK:           0,
	ExitConflict:     1,
	ExitUsage:        2,
	ExitNotFound:     3,
	ExitPrecondition: 4,
	ExitRateLimited:  5,
	ExitUnavailable:  6,
	ExitDenied:       7,
	ExitInternal:     8,
}

// worseExit returns the more severe of two exit codes.
func worseExit(a, b int) int {
	if severity[b] > severity[a] {
		return b
	}
	return a
}

// rowExit is the exit class of one batch row that failed at the journal
// with reason: the class of the gRPC code the reason travels with. A reason
// this CLI does not know is a journal fault.
func rowExit(reason string) int {
	switch RowReason(reason) {
	case ReasonInvalidRow, ReasonDuplicateInFile:
		return ExitUsage
	}
	return ExitCode(&apierr.Error{Code: apierr.Reason(reason).Code(), Reason: apierr.Reason(reason)})
}
