package apierr

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type hinted struct{ d time.Duration }

func (h hinted) Error() string            { return "busy" }
func (h hinted) RetryHint() time.Duration { return h.d }

// A retry-after given before any gRPC status (a journal's busy answer to
// the ClientHello, wrapped into the call's UNAVAILABLE error) is read back
// like one from RetryInfo; RetryInfo wins when both are there.
func TestFromErrorReadsARetryHint(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "connection error")
	for _, tc := range []struct {
		name string
		err  error
		want time.Duration
	}{
		{"hint", fmt.Errorf("%w (TLS handshake: %w)", unavailable, hinted{2 * time.Second}), 2 * time.Second},
		{"none", unavailable, 0},
		{"retry info wins", fmt.Errorf("%w (%w)", Status(NoLeader, time.Second, "x").Err(), hinted{5 * time.Second}), time.Second},
	} {
		e := FromError(tc.err)
		if e.RetryAfter != tc.want || (tc.name == "hint" && e.Code != codes.Unavailable) {
			t.Errorf("%s: %+v, want retry-after %v", tc.name, e, tc.want)
		}
	}
}
