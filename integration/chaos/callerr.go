package chaos

import (
	"context"
	"crypto/tls"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/tlsalert"
)

// errNotSent marks a call that never had a connection to send on (the
// dial, the TLS handshake or the wait for either failed): no request left,
// so its failure is definite.
var errNotSent = errors.New("chaos: the call never had a connection to send on")

// explainCalls is the interceptor of every channel dial makes: it gives a
// failed call's error what gRPC reports as text only, typed (its text and
// gRPC status unchanged): errNotSent when the call never had a transport
// stream (grpc.Peer is filled only for a call that had one), and the TLS
// alert the journal sent on the channel's latest connection (creds).
func explainCalls(creds *tlsalert.Credentials) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var p peer.Peer
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
		if err == nil {
			return nil
		}
		err = creds.Explain(err)
		if p.Addr == nil {
			err = &callError{err: err, cause: errNotSent}
		}
		return err
	}
}

// callError is a call's error with a cause attached: it reads as err and
// carries err's gRPC status (a fmt wrapper's status would carry its whole
// text as the message).
type callError struct{ err, cause error }

func (e *callError) Error() string              { return e.err.Error() }
func (e *callError) Unwrap() []error            { return []error{e.err, e.cause} }
func (e *callError) GRPCStatus() *status.Status { return status.Convert(e.err) }

// certificateAlert reports whether a is an alert about a certificate: the
// journal refused the client's.
func certificateAlert(a tls.AlertError) bool {
	switch a {
	case 42, 43, 44, 45, 46, 48, 111, 113, 114, 116: // bad, unsupported, revoked, expired, unknown certificate, unknown CA, unobtainable, bad status response, bad hash value, required
		return true
	}
	return false
}
