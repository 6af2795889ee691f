package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/transport"
)

// An Enroll attempt that fails before its call reads exactly as gRPC's
// own report of the failure did (status, code, message), and keeps the
// failure's error typed.
func TestConnErrorReadsAsGRPCsAndStaysTyped(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	busy := &transport.BusyError{RetryAfter: 3 * time.Second}
	for _, tt := range []struct {
		stage, words string
		err          error
		is           func(error) bool
	}{
		{stageDial, "error while dialing", refused, func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }},
		{stageHandshake, "authentication handshake failed", busy, func(err error) bool { _, ok := busyOf(err); return ok }},
	} {
		got := fmt.Errorf("agent: enroll at j1: %w", &connError{stage: tt.stage, err: tt.err})
		want := fmt.Errorf("agent: enroll at j1: %w", status.Errorf(codes.Unavailable, "connection error: desc = \"transport: %s: %v\"", tt.words, tt.err))
		if got.Error() != want.Error() {
			t.Errorf("%s: %q, want %q", tt.stage, got, want)
		}
		if g, w := apierr.FromError(got), apierr.FromError(want); g.Code != codes.Unavailable || g.Message != w.Message {
			t.Errorf("%s: status %v %q, want UNAVAILABLE %q", tt.stage, g.Code, g.Message, w.Message)
		}
		if !tt.is(got) {
			t.Errorf("%s: %v lost its typed error", tt.stage, got)
		}
	}
}
