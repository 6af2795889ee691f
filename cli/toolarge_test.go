package cli

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
)

// A RESOURCE_EXHAUSTED is a rate limit when a journal says so (its
// reason), and gRPC's message size limit when nothing says so: decided by
// the reason, whatever the words.
func TestTooLargeIsTheResourceExhaustedWithoutAReason(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want int
	}{
		{"gRPC's limit, received", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (7799738 vs. 4194304)"), ExitInternal},
		{"gRPC's limit, sent", status.Error(codes.ResourceExhausted, "grpc: trying to send message larger than max (5000000 vs. 4194304)"), ExitInternal},
		{"no reason, other words", status.Error(codes.ResourceExhausted, "too much"), ExitInternal},
		{"rate limited", apierr.Status(apierr.RateLimited, time.Second, "message larger than max").Err(), ExitRateLimited},
		{"too many streams", apierr.Status(apierr.TooManyStreams, 0, "streams").Err(), ExitRateLimited},
	} {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("%s: exit %d, want %d", tt.name, got, tt.want)
		}
	}
}
