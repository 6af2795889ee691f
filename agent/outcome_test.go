package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/backoff"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/transport"
)

// The ladder every phase of the loop applies to an attempt's result:
// refused, then the clock bridge, then busy, then backoff; the bridge
// (which may move the agent's clock) is asked only of a failure that is
// neither final nor "nothing to try".
func TestOutcomeOf(t *testing.T) {
	busyErr := &transport.BusyError{RetryAfter: 3 * time.Second}
	revokedErr := apierr.Status(apierr.NodeRevoked, 0, "decommissioned").Err()
	fencedErr := apierr.Status(apierr.NodeFenced, 0, "fenced").Err()
	skewErr := &channel.ClockSkewError{Skew: time.Hour, Tolerance: time.Minute}
	for _, tc := range []struct {
		name       string
		err        error
		bridge     *bool // nil: no bridge func; else what it answers
		want       outcome
		wantAsked  bool // whether the bridge func is consulted
		wantRefuse bool // final() agrees
	}{
		{name: "success", err: nil, bridge: ptr(true), want: outProgressed},
		{name: "success without bridge", err: nil, want: outProgressed},
		{name: "refused by enroll", err: fmt.Errorf("%w: not registered", ErrRefused), bridge: ptr(true), want: outRefused, wantRefuse: true},
		{name: "revoked", err: revokedErr, bridge: ptr(true), want: outRefused, wantRefuse: true},
		{name: "fenced", err: fencedErr, bridge: ptr(true), want: outRefused, wantRefuse: true},
		{name: "revoked, wrapped", err: fmt.Errorf("agent: RenewCert at j1: %w", revokedErr), want: outRefused, wantRefuse: true},
		{name: "revoked and busy: refused first", err: errors.Join(revokedErr, busyErr), bridge: ptr(true), want: outRefused, wantRefuse: true},
		{name: "nothing to try", err: errNothingToTry, bridge: ptr(true), want: outNothingYet},
		{name: "enroll bridged itself", err: errBridged, want: outRebase},
		{name: "enroll bridged itself, bridge func not asked", err: errBridged, bridge: ptr(false), want: outRebase},
		{name: "bridge moved the clock", err: skewErr, bridge: ptr(true), want: outRebase, wantAsked: true},
		{name: "clock skew without bridge func", err: skewErr, want: outBackoff},
		{name: "clock skew not bridged", err: skewErr, bridge: ptr(false), want: outBackoff, wantAsked: true},
		{name: "busy", err: busyErr, bridge: ptr(false), want: outBusy, wantAsked: true},
		{name: "busy, wrapped", err: fmt.Errorf("agent: enroll at j1: %w", busyErr), want: outBusy},
		{name: "busy but the clock bridged: bridged first", err: busyErr, bridge: ptr(true), want: outRebase, wantAsked: true},
		{name: "plain failure", err: errors.New("connection reset"), bridge: ptr(false), want: outBackoff, wantAsked: true},
		{name: "journal retry-after is not busy", err: apierr.Status(apierr.RateLimited, 5*time.Second, "slow down").Err(), want: outBackoff},
		{name: "unavailable", err: status.Error(codes.Unavailable, "no leader"), bridge: ptr(false), want: outBackoff, wantAsked: true},
		{name: "stale certificate", err: apierr.Status(apierr.StaleCertificate, 0, "replaced").Err(), want: outBackoff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bridge func(error) bool
			asked := 0
			if tc.bridge != nil {
				bridge = func(err error) bool {
					asked++
					if err != tc.err {
						t.Errorf("bridge asked about %v, want %v", err, tc.err)
					}
					return *tc.bridge
				}
			}
			if got := outcomeOf(tc.err, bridge); got != tc.want {
				t.Errorf("outcomeOf(%v) = %v, want %v", tc.err, got, tc.want)
			}
			if want := map[bool]int{false: 0, true: 1}[tc.wantAsked]; asked != want {
				t.Errorf("bridge asked %d times, want %d", asked, want)
			}
			if tc.err != nil && final(tc.err) != tc.wantRefuse {
				t.Errorf("final(%v) = %v, want %v", tc.err, final(tc.err), tc.wantRefuse)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// The error that stops the agent names what was refused, wraps both
// ErrRefused and the journal's answer, and is the answer itself when that
// already wraps ErrRefused (connect's, enroll's explained refusal).
func TestRefusedBy(t *testing.T) {
	revokedErr := apierr.Status(apierr.NodeRevoked, 0, "decommissioned").Err()
	already := fmt.Errorf("%w: %w; register this node first", ErrRefused, apierr.Status(apierr.NodeNotEnrolled, 0, "unknown").Err())
	for _, tc := range []struct {
		what string
		err  error
		want string
	}{
		{"", revokedErr, ErrRefused.Error() + ": " + revokedErr.Error()},
		{"renewal", revokedErr, ErrRefused.Error() + ": renewal: " + revokedErr.Error()},
		{"standby", revokedErr, ErrRefused.Error() + ": standby: " + revokedErr.Error()},
		{"stream closed", revokedErr, ErrRefused.Error() + ": stream closed: " + revokedErr.Error()},
		{"", already, already.Error()},
		{"renewal", already, already.Error()},
	} {
		got := refusedBy(tc.what, tc.err)
		if got.Error() != tc.want {
			t.Errorf("refusedBy(%q, %v) = %q, want %q", tc.what, tc.err, got, tc.want)
		}
		if !errors.Is(got, ErrRefused) || !errors.Is(got, tc.err) {
			t.Errorf("refusedBy(%q, %v) = %v: does not wrap ErrRefused and the answer", tc.what, tc.err, got)
		}
		if tc.err == already && got != already {
			t.Errorf("refusedBy(%q, refused) wrapped it again: %v", tc.what, got)
		}
	}
}

// After a failure that is not final: a busy journal is come back to when
// it named, the attempt count kept; anything else backs off, at least
// atLeast away, the attempt count grown.
func TestRetryAfter(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		err         error
		atLeast     time.Duration
		wantWait    time.Duration
		wantAttempt int
		wantBusy    bool
		wasBusy     bool // the previous attempt was answered busy
	}{
		// busyWait: the retry-after plus the jitter's draw (0 here).
		{name: "busy", err: &transport.BusyError{RetryAfter: 7 * time.Second}, atLeast: time.Hour, wantWait: 7 * time.Second, wantAttempt: 2, wantBusy: true},
		{name: "busy, wrapped", err: fmt.Errorf("agent: enroll at j1: %w", &transport.BusyError{RetryAfter: time.Second}), wantWait: time.Second, wantAttempt: 2, wantBusy: true},
		// backoff: Min/2 plus the draw (0) for attempt 2.
		{name: "failure", err: errors.New("connection reset"), wantWait: 50 * time.Millisecond, wantAttempt: 3},
		{name: "failure, at least", err: errors.New("connection reset"), atLeast: time.Minute, wantWait: time.Minute, wantAttempt: 3},
		// A failure after a busy answer waits a backoff, and says so.
		{name: "failure after busy", err: errors.New("connection reset"), wasBusy: true, wantWait: 50 * time.Millisecond, wantAttempt: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := fakeclock.New(start)
			a := &Agent{
				cfg:     Config{Clock: clk},
				backoff: backoff.Policy{Min: 100 * time.Millisecond, Max: time.Second, Rand: func(time.Duration) time.Duration { return 0 }},
			}
			r := retry{attempt: 2, busy: tc.wasBusy}
			r.retryAfter(a, tc.err, tc.atLeast)
			if got := r.notBefore.Sub(start); got != tc.wantWait {
				t.Errorf("next attempt in %v, want %v", got, tc.wantWait)
			}
			if r.attempt != tc.wantAttempt || r.busy != tc.wantBusy {
				t.Errorf("attempt %d busy %v, want %d %v", r.attempt, r.busy, tc.wantAttempt, tc.wantBusy)
			}
		})
	}
}

func (o outcome) String() string {
	switch o {
	case outProgressed:
		return "progressed"
	case outRefused:
		return "refused"
	case outRebase:
		return "rebase"
	case outNothingYet:
		return "nothing-yet"
	case outBusy:
		return "busy"
	case outBackoff:
		return "backoff"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}
