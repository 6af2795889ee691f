package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// hookLog records what OnAttempt and OnStream report, and signals each
// new stream.
type hookLog struct {
	mu       sync.Mutex
	attempts []string
	errs     []error // each failed attempt's error
	serials  []string
	streams  chan string
}

func (l *hookLog) attempt(op string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attempts = append(l.attempts, fmt.Sprintf("%s:%v", op, err == nil))
	if err != nil {
		l.errs = append(l.errs, err)
	}
}

func (l *hookLog) stream(ch *channel.Channel) {
	l.mu.Lock()
	l.serials = append(l.serials, ch.Identity().Serial())
	l.mu.Unlock()
	l.streams <- ch.Identity().Serial()
}

func (l *hookLog) nextStream(t *testing.T) string {
	t.Helper()
	select {
	case s := <-l.streams:
		return s
	case <-time.After(30 * time.Second): // a hang guard only
		t.Fatal("no new stream")
		return ""
	}
}

// The hooks a process running many agents watches them with: the
// enrollment and the first channel, then RenewNow renewing through the
// agent's own rotation (RenewCert over the live channel, a new channel).
func TestHooksAndRenewNow(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	log := &hookLog{streams: make(chan string, 4)}
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.OnAttempt, cfg.OnStream = log.attempt, log.stream
	a := runAgent(t, cfg)

	first := log.nextStream(t)
	if got := inspect(t, h, "n1").GetCert().GetSerial(); !strings.EqualFold(got, first) {
		t.Fatalf("OnStream reported serial %s, the registry holds %s", first, got)
	}
	if !a.RenewNow() {
		t.Fatal("RenewNow refused on a live journal-signed channel")
	}
	second := log.nextStream(t)
	if second == first {
		t.Fatalf("the stream after RenewNow presents the old serial %s", first)
	}
	if got := inspect(t, h, "n1").GetCert().GetSerial(); !strings.EqualFold(got, second) {
		t.Fatalf("after RenewNow OnStream reported %s, the registry holds %s", second, got)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	want := "[enroll:true connect:true renew:true]"
	if got := fmt.Sprint(log.attempts); got != want {
		t.Errorf("attempts %s, want %s", got, want)
	}
}

// Without a journal-signed channel there is nothing to renew.
func TestRenewNowWithoutChannel(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	a, err := New(agentConfig(h, clock.Real{}, "SN1", mac1))
	if err != nil {
		t.Fatal(err)
	}
	if a.RenewNow() {
		t.Error("RenewNow accepted with no channel")
	}
}

// An Enroll whose answer is lost after the journal committed it (a
// deadline) is retried with the same key, and the journal hands back the
// committed certificate: with a fresh key the retry would be refused
// ALREADY_ACTIVE for the takeover window.
func TestEnrollRetryAfterLostAnswerKeepsTheKey(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	var enrolls atomic.Int64
	log := &hookLog{streams: make(chan string, 4)}
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.OnAttempt, cfg.OnStream = log.attempt, log.stream
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if method == pactv1.EnrollmentService_Enroll_FullMethodName && enrolls.Add(1) == 1 && err == nil {
				return status.Error(codes.DeadlineExceeded, "injected: the answer was lost")
			}
			return err
		})}
	runAgent(t, cfg)

	serial := log.nextStream(t)
	if got := inspect(t, h, "n1").GetCert().GetSerial(); !strings.EqualFold(got, serial) {
		t.Fatalf("the agent streams with serial %s, the registry holds %s", serial, got)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if want := "[enroll:false enroll:true connect:true]"; fmt.Sprint(log.attempts) != want {
		t.Errorf("attempts %v, want %s", log.attempts, want)
	}
}

// A RenewCert whose answer is lost after the journal committed it leaves
// the channel's certificate stale. The stream is told so and serves on,
// and the agent's next renewal asks again over the live channel with the
// same key: the journal answers with the certificate that committed, so
// the node neither enrolls again (a new connection and a second channel
// in the storm that lost the answer) nor loses its stream.
func TestRenewalAfterLostAnswerAsksAgainWithItsKey(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	var renewals atomic.Int64
	log := &hookLog{streams: make(chan string, 4)}
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.MinRenewInterval = 200 * time.Millisecond
	cfg.OnAttempt, cfg.OnStream = log.attempt, log.stream
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if method == pactv1.EnrollmentService_RenewCert_FullMethodName && renewals.Add(1) == 1 && err == nil {
				return status.Error(codes.DeadlineExceeded, "injected: the answer was lost")
			}
			return err
		})}
	a := runAgent(t, cfg)

	first := log.nextStream(t)
	if !a.RenewNow() {
		t.Fatal("RenewNow refused on a live journal-signed channel")
	}
	second := log.nextStream(t)
	registered := inspect(t, h, "n1").GetCert().GetSerial()
	if second == first || !strings.EqualFold(registered, second) {
		t.Fatalf("after the lost renewal the agent streams with %s (first %s), the registry holds %s", second, first, registered)
	}
	if n := renewals.Load(); n != 2 {
		t.Errorf("%d RenewCert calls, want 2: the lost one, and the one asking again", n)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if want := "[enroll:true connect:true renew:false renew:true]"; fmt.Sprint(log.attempts) != want {
		t.Errorf("attempts %v, want %s (no enrollment again)", log.attempts, want)
	}
	// The failed renewal says, typed, that it failed at RenewCert, and
	// reads as it always did.
	var rc *RenewCertError
	if len(log.errs) != 1 || !errors.As(log.errs[0], &rc) || rc.Journal == "" || status.Code(rc) != codes.DeadlineExceeded {
		t.Fatalf("failed attempts %v, want one RenewCertError (DEADLINE_EXCEEDED)", log.errs)
	}
	if want := "agent: RenewCert at " + rc.Journal + ": " + rc.Err.Error(); rc.Error() != want {
		t.Errorf("%q, want %q", rc, want)
	}
}
