package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// moveSite is a journal with a renewal grace behind a busy proxy, and an
// agent on a fake clock whose attempts and RenewCert calls are counted.
type moveSite struct {
	h          *journaltest.Harness
	p          *busyProxy
	fc         *fakeclock.Clock
	a          *runningAgent
	cfg        Config
	renewCalls atomic.Int64
	streams    chan string

	mu       sync.Mutex
	attempts []string // op:ok, in order
	stale    int      // renewals the journal refused as STALE_CERTIFICATE
}

// newMoveSite starts the journal with grace, the proxy answering busy
// (retryAfter) the ClientHellos busy picks (1 is the Enroll, 2 the first
// channel's, 3 on the renewed certificate's channels), and the agent, and
// waits for its first stream.
func newMoveSite(t *testing.T, grace, retryAfter time.Duration, busy func(n int) bool) *moveSite {
	t.Helper()
	return newMoveSiteClosing(t, grace, retryAfter, busy, nil)
}

// newMoveSiteClosing is newMoveSite whose proxy also closes, unanswered,
// the ClientHellos closes picks.
func newMoveSiteClosing(t *testing.T, grace, retryAfter time.Duration, busy, closes func(n int) bool) *moveSite {
	t.Helper()
	jcfg := journaltest.Config(t.TempDir())
	jcfg.RenewalStreamGrace = grace
	s := &moveSite{h: journaltest.Start(t, jcfg), fc: fakeclock.New(time.Now()), streams: make(chan string, 8)}
	s.h.Register(t, "n1", "SN1", mac1)
	var all helloCount
	s.p = startProxy(t, &all, s.h.Addr, retryAfter, busy, closes)
	cfg := agentConfig(s.h, s.fc, "SN1", mac1)
	cfg.JournalAddrs = []string{s.p.addr}
	cfg.OnAttempt = func(op string, err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.attempts = append(s.attempts, fmt.Sprintf("%s:%v", op, err == nil))
		if op == "renew" && apierr.FromError(err).Reason == apierr.StaleCertificate {
			s.stale++
		}
	}
	cfg.OnStream = func(ch *channel.Channel) { s.streams <- ch.Identity().Serial() }
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == pactv1.EnrollmentService_RenewCert_FullMethodName {
				s.renewCalls.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})}
	s.a, s.cfg = runAgent(t, cfg), cfg
	s.nextStream(t)
	return s
}

func (s *moveSite) nextStream(t *testing.T) string {
	t.Helper()
	select {
	case serial := <-s.streams:
		return serial
	case <-time.After(30 * time.Second): // a hang guard only
		t.Fatal("no new stream")
		return ""
	}
}

func (s *moveSite) busy(t *testing.T) float64 {
	t.Helper()
	return float64(s.a.metrics.busy.Load())
}

// failed is how many attempts failed.
func (s *moveSite) failed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.attempts {
		if strings.HasSuffix(a, ":false") {
			n++
		}
	}
	return n
}

func (s *moveSite) record() (attempts string, stale int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.attempts), s.stale
}

// A renewal whose new channel the journal answers busy is done: the
// agent does not renew again while it holds the new certificate. It keeps
// streaming on its old channel (the journal's renewal grace keeps that
// stream open) and moves to the new certificate when the journal said,
// each time it is answered busy, not at once as an upgrade.
func TestRenewedCertificateMovesWhenTheBusyJournalSaid(t *testing.T) {
	const retryAfter = 3 * time.Second
	// The renewed certificate's first three channels are answered busy.
	s := newMoveSite(t, 10*time.Minute, retryAfter, func(n int) bool { return n >= 3 && n <= 5 })
	old := s.a.rot.Active()
	first := old.Identity().Serial()

	if !s.a.RenewNow() {
		t.Fatal("RenewNow refused on a live journal-signed channel")
	}
	for round, hellos := range []int{3, 4, 5} {
		eventually(t, fmt.Sprintf("busy answer %d", round+1), func() bool { return s.busy(t) >= float64(round+1) && s.fc.Timers() > 0 })
		if round == 0 {
			eventually(t, "the registry holds the renewed certificate", func() bool { return inspect(t, s.h, "n1").GetCert().GetSerial() != first })
		}
		// Before the retry-after: no new attempt, no renewal; the old
		// channel streams and the journal holds its stream.
		advanceAndSettle(t, s.fc, retryAfter-500*time.Millisecond)
		attempts, stale := s.record()
		if got := s.p.count(); got != hellos {
			t.Fatalf("round %d: %d ClientHellos before the retry-after, want %d (attempts %s)", round, got, hellos, attempts)
		}
		if n := s.renewCalls.Load(); n != 1 || stale != 0 {
			t.Fatalf("round %d: %d RenewCert calls, %d refused as stale; want 1 and 0 (attempts %s)", round, n, stale, attempts)
		}
		if s.a.rot.Active() != old || !old.StreamAlive() || s.h.J.OpenStreams("n1") != 1 {
			t.Fatalf("round %d: the old channel is not the one streaming (active %v, alive %v, journal streams %d)",
				round, s.a.rot.Active().Identity(), old.StreamAlive(), s.h.J.OpenStreams("n1"))
		}
		if st := s.a.Status(); !st.Ready || st.Serial != first {
			t.Fatalf("round %d: status %+v, want ready on %s", round, st, first)
		}
		// After it (and its jitter): the next move.
		s.fc.Advance(time.Second)
	}
	second := s.nextStream(t)
	if second == first || inspect(t, s.h, "n1").GetCert().GetSerial() != second {
		t.Fatalf("the new stream presents %s; first %s, the registry %s", second, first, inspect(t, s.h, "n1").GetCert().GetSerial())
	}
	eventually(t, "one stream remains", func() bool { return s.h.J.OpenStreams("n1") == 1 && !old.StreamAlive() })
	attempts, stale := s.record()
	if want := "[enroll:true connect:true renew:false move:false move:false move:true]"; attempts != want || stale != 0 || s.renewCalls.Load() != 1 {
		t.Errorf("attempts %s (%d stale renewals, %d RenewCert calls), want %s, 0 and 1", attempts, stale, s.renewCalls.Load(), want)
	}
	if n := s.p.count(); n != 6 {
		t.Errorf("%d ClientHellos, want 6", n)
	}
}

// When the old stream ends while the move waits (the journal's grace ran
// out, or it restarted), the move becomes an ordinary connect with the
// new certificate, still at the time the busy journal named. Without a
// grace (the default) the journal ends the old stream at the renewal's
// commit, and the same holds.
func TestRenewedCertificateConnectsWhenTheOldStreamEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
	}{
		{"grace over", 300 * time.Millisecond},
		{"no grace", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const retryAfter = 3 * time.Second
			s := newMoveSite(t, tc.grace, retryAfter, func(n int) bool { return n == 3 })
			old := s.a.rot.Active()
			first := old.Identity().Serial()

			if !s.a.RenewNow() {
				t.Fatal("RenewNow refused on a live journal-signed channel")
			}
			eventually(t, "the busy answer", func() bool { return s.busy(t) >= 1 })
			// The journal (on its own clock) ends the stream.
			eventually(t, "the old stream ends", func() bool { return !old.StreamAlive() && s.fc.Timers() > 0 })
			advanceAndSettle(t, s.fc, retryAfter-500*time.Millisecond)
			attempts, stale := s.record()
			if got := s.p.count(); got != 3 {
				t.Fatalf("%d ClientHellos before the retry-after, want 3 (attempts %s)", got, attempts)
			}
			if n := s.renewCalls.Load(); n != 1 || stale != 0 {
				t.Fatalf("%d RenewCert calls, %d refused as stale; want 1 and 0 (attempts %s)", n, stale, attempts)
			}
			s.fc.Advance(time.Second)
			second := s.nextStream(t)
			if second == first || inspect(t, s.h, "n1").GetCert().GetSerial() != second {
				t.Fatalf("the new stream presents %s; first %s, the registry %s", second, first, inspect(t, s.h, "n1").GetCert().GetSerial())
			}
			eventually(t, "one stream", func() bool { return s.h.J.OpenStreams("n1") == 1 })
			attempts, stale = s.record()
			if want := "[enroll:true connect:true renew:false connect:true]"; attempts != want || stale != 0 || s.renewCalls.Load() != 1 {
				t.Errorf("attempts %s (%d stale renewals, %d RenewCert calls), want %s, 0 and 1", attempts, stale, s.renewCalls.Load(), want)
			}
		})
	}
}

// A renewal whose new channel keeps failing without a busy answer (the
// journal's handshake queue full: the connection closed unanswered) is
// done too: the agent retries the move with backoff for longer than
// MinRenewInterval and never renews the old certificate again, which the
// journal would refuse as stale.
func TestRenewedCertificateMoveFailsWithoutRenewingAgain(t *testing.T) {
	const failing = 5
	noBusy := func(int) bool { return false }
	s := newMoveSiteClosing(t, 10*time.Minute, 0, noBusy, func(n int) bool { return n >= 3 && n < 3+failing })
	old := s.a.rot.Active()
	first := old.Identity().Serial()
	step := s.cfg.MinRenewInterval / 2

	if !s.a.RenewNow() {
		t.Fatal("RenewNow refused on a live journal-signed channel")
	}
	eventually(t, "the renewal's channel fails", func() bool { return s.failed() >= 1 && s.fc.Timers() > 0 })
	for i := 1; i < failing; i++ {
		// Well past MinRenewInterval over the rounds.
		pending := s.fc.Timers()
		s.fc.Advance(step)
		eventually(t, fmt.Sprintf("attempt %d fails and the agent waits again", i+1), func() bool {
			return s.failed() >= i+1 && s.fc.Timers() >= pending
		})
		attempts, stale := s.record()
		if n := s.renewCalls.Load(); n != 1 || stale != 0 {
			t.Fatalf("after %v: %d RenewCert calls, %d refused as stale; want 1 and 0 (attempts %s)", time.Duration(i)*step, n, stale, attempts)
		}
		if s.a.rot.Active() != old || !old.StreamAlive() || s.h.J.OpenStreams("n1") != 1 {
			t.Fatalf("after %v: the old channel is not the one streaming", time.Duration(i)*step)
		}
	}
	if n := s.p.count(); n != 2+failing {
		t.Fatalf("%d ClientHellos, want %d: one move per round", n, 2+failing)
	}
	s.fc.Advance(step)
	second := s.nextStream(t)
	if second == first || inspect(t, s.h, "n1").GetCert().GetSerial() != second {
		t.Fatalf("the new stream presents %s; first %s, the registry %s", second, first, inspect(t, s.h, "n1").GetCert().GetSerial())
	}
	attempts, stale := s.record()
	if want := "[enroll:true connect:true renew:false move:false move:false move:false move:false move:true]"; attempts != want || stale != 0 || s.renewCalls.Load() != 1 {
		t.Errorf("attempts %s (%d stale renewals, %d RenewCert calls), want %s, 0 and 1", attempts, stale, s.renewCalls.Load(), want)
	}
}
