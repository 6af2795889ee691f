package agent

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// load runs workers that call Ping through the agent's channel without a
// pause, counting calls and failures, until stopped.
type load struct {
	calls, failures atomic.Int64
	firstErr        atomic.Value
	stop            chan struct{}
	wg              sync.WaitGroup
}

func startLoad(t *testing.T, a *Agent, workers int) *load {
	t.Helper()
	l := &load{stop: make(chan struct{})}
	client := pactv1.NewEnrollmentServiceClient(a.Conn())
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := client.Ping(ctx, &pactv1.PingRequest{})
				cancel()
				l.calls.Add(1)
				if err != nil {
					l.failures.Add(1)
					l.firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	t.Cleanup(l.end)
	return l
}

func (l *load) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// waitCalls waits until n more calls have completed.
func (l *load) waitCalls(t *testing.T, n int64) {
	t.Helper()
	target := l.calls.Load() + n
	eventually(t, "the load makes progress", func() bool { return l.calls.Load() >= target })
}

// A journal renewal under continuous unary load and an open stream: the
// agent renews over its live channel, swaps to a channel with the new
// certificate and drains the old one. No call fails (those the journal
// refuses as stale in the instant between the renewal's commit and the
// swap are retried on the new channel), the stream gap is no longer than
// the rotation, and one stream remains.
func TestRotationUnderLoad(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	fc := fakeclock.New(time.Now())
	r := runAgent(t, agentConfig(h, fc, "SN1", mac1))
	eventually(t, "n1 streams", func() bool { return h.J.OpenStreams("n1") == 1 && r.Status().Ready })
	first := inspect(t, h, "n1").GetCert()
	lifetime := time.Duration(first.GetNotAfterUnix()-first.GetNotBeforeUnix()) * time.Second
	old := r.rot.Active()

	l := startLoad(t, r.Agent, 8)
	l.waitCalls(t, 200)
	// Past 2/3 of the lifetime plus the largest jitter.
	fc.Advance(lifetime*2/3 + lifetime/20 + time.Hour)
	var renewed string
	eventually(t, "the certificate is renewed and the channel swapped", func() bool {
		renewed = inspect(t, h, "n1").GetCert().GetSerial()
		ch := r.rot.Active()
		return renewed != first.GetSerial() && ch != old && ch.Identity().Serial() == renewed
	})
	l.waitCalls(t, 200)
	l.end()

	if n := l.failures.Load(); n != 0 {
		t.Errorf("%d of %d calls failed during the rotation; first: %v", n, l.calls.Load(), l.firstErr.Load())
	}
	rec, ok := r.rot.LastSwap()
	if !ok || rec.From != old || rec.To.Identity().Serial() != renewed {
		t.Fatalf("last swap %+v is not the renewal from %s to %s", rec, first.GetSerial(), renewed)
	}
	gap, took := rec.StreamGap(), rec.Duration()
	t.Logf("rotation took %v (renewal, health check, new stream); stream gap %v; %d calls, %d retried after a stale refusal", took, gap, l.calls.Load(), r.rot.Retries())
	if gap > took {
		t.Errorf("stream gap %v is longer than the rotation %v", gap, took)
	}
	if _, _, closed := old.StreamTimes(); closed.Before(rec.Started) {
		t.Errorf("the old stream ended at %v, before the rotation began at %v", closed, rec.Started)
	}
	if first, _, _ := rec.To.StreamTimes(); first.After(rec.Published) {
		t.Errorf("the new channel went live at %v before its stream's first event at %v", rec.Published, first)
	}
	eventually(t, "one stream remains and the old channel is closed", func() bool {
		return h.J.OpenStreams("n1") == 1 && old.Conn().GetState() == connectivity.Shutdown
	})
	if st := r.Status(); st.Serial != renewed || !st.Ready || st.LastRotation.IsZero() || st.LastFailureReason != "" {
		t.Errorf("status after the renewal: %+v", st)
	}
}

// A renewal that keeps failing never loops: after each failure the agent
// waits MinRenewInterval (on its clock) before it tries again, counts the
// failure, and keeps its channel.
func TestFailingRenewalDoesNotLoop(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	fc := fakeclock.New(time.Now())
	var renewCalls atomic.Int64
	var broken atomic.Bool
	broken.Store(true)
	cfg := agentConfig(h, fc, "SN1", mac1)
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == pactv1.EnrollmentService_RenewCert_FullMethodName {
				renewCalls.Add(1)
				if broken.Load() {
					return status.Error(codes.Unavailable, "injected: journal unreachable")
				}
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})}
	r := runAgent(t, cfg)
	eventually(t, "n1 streams", func() bool { return r.Status().Ready })
	first := inspect(t, h, "n1").GetCert()
	lifetime := time.Duration(first.GetNotAfterUnix()-first.GetNotBeforeUnix()) * time.Second

	fc.Advance(lifetime*2/3 + lifetime/20 + time.Hour)
	st := waitFailure(t, r.Agent, ReasonEndpointUnreachable)
	if st.LastFailureOp != "renew" || !st.Ready || renewCalls.Load() != 1 {
		t.Fatalf("after a failed renewal: %d RenewCert calls, status %+v", renewCalls.Load(), st)
	}
	// Until MinRenewInterval has passed on the agent's clock, nothing more
	// happens however long the test waits; the next renewal is scheduled
	// exactly then.
	eventually(t, "the next attempt is scheduled", func() bool { return !r.Status().NextRenewal.Before(fc.Now().Add(cfg.MinRenewInterval)) })
	advanceAndSettle(t, fc, cfg.MinRenewInterval/2)
	if n := renewCalls.Load(); n != 1 {
		t.Fatalf("%d RenewCert calls before MinRenewInterval passed", n)
	}
	fc.Advance(cfg.MinRenewInterval)
	eventually(t, "the renewal is tried again", func() bool { return renewCalls.Load() == 2 })
	eventually(t, "the second failure is counted", func() bool { return failures(t, r.Agent, ReasonEndpointUnreachable) == 2 })

	broken.Store(false)
	fc.Advance(cfg.MinRenewInterval + time.Second)
	eventually(t, "the renewal succeeds", func() bool {
		return inspect(t, h, "n1").GetCert().GetSerial() != first.GetSerial() && r.Status().Serial != first.GetSerial()
	})
	if n := failures(t, r.Agent, ReasonEndpointUnreachable); n != 2 {
		t.Errorf("%v failures counted, want 2", n)
	}
}

// A renewal the journal refuses with a retry-after (RATE_LIMITED: busy, or
// this source spent its budget) is tried again after that retry-after and
// the backoff's jitter, not after MinRenewInterval: in a renewal storm a
// refused node must not stall for MinRenewInterval.
func TestRenewalHonoursRetryAfter(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	fc := fakeclock.New(time.Now())
	const retryAfter = 2 * time.Second
	var renewCalls atomic.Int64
	cfg := agentConfig(h, fc, "SN1", mac1)
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == pactv1.EnrollmentService_RenewCert_FullMethodName && renewCalls.Add(1) == 1 {
				return apierr.Status(apierr.RateLimited, retryAfter, "injected: journal busy").Err()
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})}
	if cfg.MinRenewInterval <= 2*retryAfter {
		t.Fatalf("MinRenewInterval %v does not tell a retry-after of %v apart", cfg.MinRenewInterval, retryAfter)
	}
	r := runAgent(t, cfg)
	eventually(t, "n1 streams", func() bool { return r.Status().Ready })
	first := inspect(t, h, "n1").GetCert()
	lifetime := time.Duration(first.GetNotAfterUnix()-first.GetNotBeforeUnix()) * time.Second

	fc.Advance(lifetime*2/3 + lifetime/20 + time.Hour)
	st := waitFailure(t, r.Agent, ReasonRateLimited)
	if st.LastFailureOp != "renew" || renewCalls.Load() != 1 {
		t.Fatalf("after a refused renewal: %d RenewCert calls, status %+v", renewCalls.Load(), st)
	}
	// The next attempt is scheduled within the retry-after and up to half of
	// it again (the backoff's jitter), far before MinRenewInterval.
	refusedAt := fc.Now()
	eventually(t, "the next attempt is scheduled after the retry-after", func() bool {
		next := r.Status().NextRenewal
		return !next.Before(refusedAt.Add(retryAfter)) && !next.After(refusedAt.Add(retryAfter*3/2+time.Second))
	})
	advanceAndSettle(t, fc, retryAfter/2)
	if n := renewCalls.Load(); n != 1 {
		t.Fatalf("%d RenewCert calls before the retry-after passed", n)
	}
	fc.Advance(retryAfter + time.Second)
	eventually(t, "the renewal succeeds", func() bool {
		return inspect(t, h, "n1").GetCert().GetSerial() != first.GetSerial() && r.Status().Serial != first.GetSerial()
	})
	if n := renewCalls.Load(); n != 2 {
		t.Errorf("%d RenewCert calls, want 2", n)
	}
}
