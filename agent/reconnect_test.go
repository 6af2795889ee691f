package agent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// stepUntil runs the loop's step on fc, advancing fc to each time the step
// names, until done holds (at most n steps). It returns the waits the
// steps asked for.
func stepUntil(t *testing.T, a *Agent, s *loopState, fc *fakeclock.Clock, n int, done func() bool) []time.Duration {
	t.Helper()
	var waits []time.Duration
	for i := 0; i < n && !done(); i++ {
		now := fc.Now()
		next, err := a.step(context.Background(), s)
		if err != nil {
			t.Fatalf("step: %v", err)
		}
		if next.After(now) {
			waits = append(waits, next.Sub(now))
			fc.Advance(next.Sub(now))
		}
	}
	if !done() {
		t.Fatalf("not done after %d steps (waits %v); last failure %+v", n, waits, a.Status())
	}
	return waits
}

// A journal restarted while its agents stream (issue 38: agents took up
// to 15 s to come back): while it is away every connect fails before any
// handshake, and each retry's backoff grows; it must stop growing at
// ReconnectMaxBackoff, so the agent tries again within about that long of
// the journal serving again, not after a backoff grown towards MaxBackoff
// (30 s). The waits are the loop's own plan on a fake clock, with the
// jitter drawing its longest: before the fix, the sixth failure already
// planned 16 s.
func TestReconnectAfterJournalRestartIsNotALongBackoff(t *testing.T) {
	jcfg := journaltest.Config(t.TempDir())
	jcfg.ListenAddr = journaltest.FreeAddr(t)
	h := journaltest.Start(t, jcfg)
	h.Register(t, "n1", "SN1", mac1)

	fc := fakeclock.New(time.Now())
	cfg := agentConfig(h, fc, "SN1", mac1)
	cfg.MinBackoff, cfg.MaxBackoff, cfg.ReconnectMaxBackoff = 250*time.Millisecond, 30*time.Second, 4*time.Second
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.rot.Close() })
	a.backoff.Rand = func(n time.Duration) time.Duration { return n - 1 } // the longest draw
	cascade, err := a.useProviders(a.jp)                                  // what Run does; the test runs the loop's steps itself
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cascade.Close() })

	streaming := func() bool { ch := a.rot.Active(); return ch != nil && ch.StreamAlive() }
	var s loopState
	stepUntil(t, a, &s, fc, 10, streaming)

	if err := h.J.Close(); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 15*time.Second, 10*time.Millisecond, func() bool { return !streaming() }, "the stream did not end when the journal stopped")

	// Twelve failed connects: the journal is away for a while.
	failures := func(n int) func() bool {
		start := a.metrics.attempts.Load()
		return func() bool { return a.metrics.attempts.Load()-start >= uint64(n) }
	}
	waits := stepUntil(t, a, &s, fc, 40, failures(12))
	longest := cfg.MinBackoff/2 + cfg.ReconnectMaxBackoff - 1
	for i, w := range waits {
		if w > longest {
			t.Fatalf("wait %d after the journal went away is %v, more than MinBackoff/2 + ReconnectMaxBackoff (%v): waits %v", i, w, longest, waits)
		}
	}
	if last := waits[len(waits)-1]; last != longest {
		t.Errorf("the backoff settled at %v, want its cap %v: waits %v", last, longest, waits)
	}
	if st := a.Status(); st.LastFailureReason != ReasonEndpointUnreachable {
		t.Errorf("last failure %q (%s), want %s", st.LastFailureReason, st.LastFailure, ReasonEndpointUnreachable)
	}

	// The journal is back on its address: the next planned connect finds it.
	journaltest.Start(t, jcfg)
	stepUntil(t, a, &s, fc, 3, streaming)
}

// A stream's end is retried with the short cap only when the journal is
// away; a journal that answered with a reason of its own is backed off
// from in full.
func TestJournalAway(t *testing.T) {
	noConn := fmt.Errorf("channel: health check of j1: %w: %w", channel.ErrNoConnection, status.Error(codes.Unavailable, "connection refused"))
	lost := fmt.Errorf("channel: stream to j1: %w", status.Error(codes.Unavailable, "error reading from server: EOF"))
	for _, tc := range []struct {
		name      string
		err       error
		streamEnd bool
		want      bool
	}{
		{"no connection", noConn, false, true},
		{"no connection, at a stream's end", noConn, true, true},
		{"no leader", apierr.Status(apierr.NoLeader, 0, "journal shutting down").Err(), false, true},
		{"connection lost at a stream's end", lost, true, true},
		{"unavailable after a handshake", lost, false, false},
		{"outcome unknown (a commit timed out)", apierr.Status(apierr.OutcomeUnknown, 0, "x").Err(), false, false},
		{"rate limited", apierr.Status(apierr.RateLimited, time.Second, "x").Err(), true, false},
		{"refused certificate", status.Error(codes.PermissionDenied, "x"), true, false},
		{"other", errors.New("boom"), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := journalAway(tc.err, tc.streamEnd); got != tc.want {
				t.Errorf("journalAway(%v, %v) = %v, want %v", tc.err, tc.streamEnd, got, tc.want)
			}
		})
	}
}
