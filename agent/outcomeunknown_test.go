package agent

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
)

// A renewal's key is kept for asking again only when the call may have
// committed; a refusal wrote nothing, and a stream told of a replacement
// then ends at once.
func TestOutcomeUnknown(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true},
		{"connection lost", status.Error(codes.Unavailable, "connection reset"), true},
		{"outcome unknown", apierr.Status(apierr.OutcomeUnknown, 0, "forwarded, no answer").Err(), true},
		{"no leader", apierr.Status(apierr.NoLeader, 0, "no leader").Err(), true},
		{"rate limited", apierr.Status(apierr.RateLimited, 0, "too many").Err(), false},
		{"stale", apierr.Status(apierr.StaleCertificate, 0, "replaced").Err(), false},
		{"revoked", apierr.Status(apierr.NodeRevoked, 0, "decommissioned").Err(), false},
		{"invalid CSR", apierr.Status(apierr.InvalidCSR, 0, "bad").Err(), false},
		{"not a status", errors.New("key generation failed"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outcomeUnknown(tc.err); got != tc.want {
				t.Fatalf("outcomeUnknown(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
