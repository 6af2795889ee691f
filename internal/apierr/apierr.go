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
	AlreadyActive            Reason = "ALREADY_ACTIVE"
	RateLimited              Reason = "RATE_LIMITED"
	InvalidCSR               Reason = "INVALID_CSR"
	InvalidArgument          Reason = "INVALID_ARGUMENT"
	Unauthenticated          Reason = "UNAUTHENTICATED"
	PermissionDenied         Reason = "PERMISSION_DENIED"
	StaleCertificate         Reason = "STALE_CERTIFICATE"
	NodeStreaming            Reason = "NODE_STREAMING"
	VClusterChanged          Reason = "VCLUSTER_CHANGED"
	NoLeader                 Reason = "NO_LEADER"
	NotFound                 Reason = "NOT_FOUND"
	MembershipRefused        Reason = "MEMBERSHIP_REFUSED"
	OutcomeUnknown           Reason = "OUTCOME_UNKNOWN"
	Internal                 Reason = "INTERNAL"
)

var codeOf = map[Reason]codes.Code{
	NodeNotEnrolled:          codes.NotFound,
	NodeAlreadyEnrolled:      codes.AlreadyExists,
	HardwareIdentityConflict: codes.AlreadyExists,
	NodeRevoked:              codes.PermissionDenied,
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
	Internal:                 codes.Internal,
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
	st := status.New(r.Code(), string(r)+": "+msg)
	info := &errdetails.ErrorInfo{Reason: string(r), Domain: Domain}
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
				prefix := v.GetReason() + ": "
				if len(out.Message) >= len(prefix) && out.Message[:len(prefix)] == prefix {
					out.Message = out.Message[len(prefix):]
				}
			}
		case *errdetails.RetryInfo:
			out.RetryAfter = v.GetRetryDelay().AsDuration()
		}
	}
	return out
}
