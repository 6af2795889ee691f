package agent

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// connError is an Enroll attempt's failure before its call: the TCP
// connection or the TLS handshake, which the agent makes itself
// (enrollconn.go) before it builds a gRPC channel. It reads as gRPC reports
// the same failure on a channel of its own (UNAVAILABLE, "connection
// error: desc = ..."), so logs, `pact-agent status` and the failure
// reasons say what they said, and it keeps the failure's own error for
// errors.Is and errors.As (classify, a busy answer, a TLS alert): nothing
// reads its text back.
type connError struct {
	stage string // stageDial or stageHandshake
	err   error
}

// The stages of a connection, in gRPC's words.
const (
	stageDial      = "error while dialing"
	stageHandshake = "authentication handshake failed"
)

func (e *connError) GRPCStatus() *status.Status {
	return status.Newf(codes.Unavailable, "connection error: desc = \"transport: %s: %v\"", e.stage, e.err)
}

func (e *connError) Error() string { return e.GRPCStatus().Err().Error() }

func (e *connError) Unwrap() error { return e.err }
