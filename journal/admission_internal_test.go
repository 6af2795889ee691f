package journal

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/ratelimit"
)

func newTestAdmission(t *testing.T, burst int) (*admission, *ratelimit.Limiter, *fakeclock.Clock) {
	t.Helper()
	fc := fakeclock.New(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	cfg := ratelimit.DefaultConfig()
	cfg.PerSourceBurst = 2
	cfg.GlobalBurst, cfg.GlobalRefill = max(burst, 2), time.Second
	cfg.FreshBurst, cfg.FreshRefill = burst, time.Second
	lim, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return newAdmission(lim, 8, 10*time.Second, fc), lim, fc
}

// fail is an evaluated guess from src: admitted, recorded, released.
func fail(t *testing.T, a *admission, lim *ratelimit.Limiter, fc *fakeclock.Clock, src string) {
	t.Helper()
	release, err := a.admit(context.Background(), src)
	if err != nil {
		t.Fatalf("admit %s: %v", src, err)
	}
	lim.RecordFailure(src, "", fc.Now())
	a.failed(src)
	release()
}

func limitOf(err error) apierr.Limit {
	return apierr.FromError(toStatus(err)).Limit
}

type admitted struct {
	src     string
	release func()
	err     error
}

// admitAsync admits src on its own goroutine, until ctx ends: a test's
// t.Context(), so a failed test leaves no waiter blocked in its bubble.
func admitAsync(ctx context.Context, a *admission, src string, got chan<- admitted) {
	go func() {
		r, err := a.admit(ctx, src)
		got <- admitted{src, r, err}
	}()
}

// waiting says that, once every goroutine of the test's synctest bubble
// is blocked, exactly n timers are pending on fc: the waiters have all
// queued, and none has been let through or given up.
func waiting(t *testing.T, fc *fakeclock.Clock, n int, what string) {
	t.Helper()
	synctest.Wait()
	if got := fc.Timers(); got != n {
		t.Fatalf("%d timers pending, want %d: %s", got, n, what)
	}
}

// While the budget lasts, calls go straight through, and no more are
// evaluated at once than the budget could pay for: a burst of guesses
// admitted together cannot overdraw it.
func TestAdmissionReservesTheBudget(t *testing.T) {
	a, _, _ := newTestAdmission(t, 2)
	r1, err := a.admit(context.Background(), "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.admit(context.Background(), "10.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	// Both failures are reserved: a third must wait, and gives up when
	// its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.admit(ctx, "10.0.0.3"); !errors.Is(err, context.Canceled) {
		t.Fatalf("third admission with both failures reserved: %v, want it to wait", err)
	}
	// Two successes give their reservations back without spending.
	r1()
	r2()
	r1() // a second release changes nothing
	for _, src := range []string{"10.0.0.3", "10.0.0.4"} {
		r, err := a.admit(context.Background(), src)
		if err != nil {
			t.Fatalf("after two successes, %s: %v", src, err)
		}
		defer r()
	}
}

// Once the fresh budget is spent, fresh sources are served in the order
// they were first seen, each failure spending it again; sources that have
// failed draw on the global budget and do not stand in their way.
func TestAdmissionServesFreshSourcesInTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, lim, fc := newTestAdmission(t, 1)
		fail(t, a, lim, fc, "10.0.0.5") // the fresh budget is spent
		a.mu.Lock()
		a.historyLocked("10.0.0.2", fc.Now()) // a flood address, seen first
		a.mu.Unlock()
		fc.Advance(100 * time.Millisecond)
		got := make(chan admitted, 2)
		admitAsync(t.Context(), a, "10.0.0.9", got) // the booting node
		admitAsync(t.Context(), a, "10.0.0.2", got)
		waiting(t, fc, 4, "both waiters hold a deadline and a refill timer")
		// A source that has failed is not fresh: the global budget admits it
		// at once, though fresh sources wait.
		r, err := a.admit(context.Background(), "10.0.0.5")
		if err != nil {
			t.Fatalf("a failed source with the global budget whole: %v", err)
		}
		r()

		fc.Advance(time.Second) // one fresh failure's worth comes back
		first := <-got
		if first.src != "10.0.0.2" || first.err != nil {
			t.Fatalf("first admitted: %s (%v), want 10.0.0.2, seen first", first.src, first.err)
		}
		// It fails: the fresh budget is spent again, the node waits on.
		lim.RecordFailure(first.src, "", fc.Now())
		a.failed(first.src)
		first.release()
		waiting(t, fc, 2, "the node's waiter holds its deadline and a new refill timer")
		select {
		case g := <-got:
			t.Fatalf("%s admitted with the fresh budget spent", g.src)
		default:
		}
		fc.Advance(time.Second)
		second := <-got
		if second.src != "10.0.0.9" || second.err != nil {
			t.Fatalf("second admitted: %s (%v), want the booting node", second.src, second.err)
		}
		second.release()
		// An address past its own budget (2) is told so at once.
		fail(t, a, lim, fc, "10.0.0.5")
		if _, err := a.admit(context.Background(), "10.0.0.5"); limitOf(err) != apierr.LimitSource {
			t.Fatalf("an address past its own budget: %v, want RATE_LIMITED for the source", err)
		}
	})
}

// A waiter that the budget cannot serve within the wait is refused for the
// journal's limit, with a retry-after, never for its own address.
func TestAdmissionRefusesForTheJournalAfterTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, lim, fc := newTestAdmission(t, 1)
		a.maxWait = 500 * time.Millisecond
		fail(t, a, lim, fc, "10.0.0.1")
		lim.RecordFailure("10.0.0.5", "", fc.Now()) // fresh budget in debt: 2 s to a failure
		errc := make(chan error, 1)
		go func() {
			_, err := a.admit(t.Context(), "10.0.0.9")
			errc <- err
		}()
		waiting(t, fc, 2, "the caller holds a deadline and a refill timer")
		fc.Advance(500 * time.Millisecond)
		err := <-errc
		pe := apierr.FromError(toStatus(err))
		if pe.Reason != apierr.RateLimited || pe.Limit != apierr.LimitJournal || pe.RetryAfter <= 0 || strings.Contains(pe.Message, "this address") {
			t.Fatalf("refusal %+v, want RATE_LIMITED for the journal with a retry-after", pe)
		}
	})
}

// A refused waiter's retry-after grows with the waiters of its tier ahead
// of it: the time the budget needs to pay for them.
func TestAdmissionRetryAfterGrowsWithTheQueue(t *testing.T) {
	a, lim, fc := newTestAdmission(t, 1)
	fail(t, a, lim, fc, "10.0.0.1") // the fresh budget is spent
	a.mu.Lock()
	ws := make([]*waiter, 5)
	for i := range ws {
		a.seq++
		ws[i] = &waiter{source: "10.0.1." + string(rune('1'+i)), fresh: true, hist: sourceHistory{firstSeen: fc.Now().Add(time.Duration(i) * time.Millisecond)}, seq: a.seq, done: make(chan error, 1)}
		a.waiters = append(a.waiters, ws[i])
	}
	a.mu.Unlock()
	first, last := a.retryAfter(ws[0]), a.retryAfter(ws[4])
	if want := first + 4*lim.Refill(true); last != want {
		t.Fatalf("retry-after of the fifth waiter %v, want the first's %v plus four refills (%v)", last, first, want)
	}
}

// The journal's refusal spreads its retry-after with the injected jitter:
// at least a second, plus a draw below a second.
func TestJournalLimitedDrawsFromTheJitter(t *testing.T) {
	a := &admission{jitter: func(n time.Duration) time.Duration { return n - 1 }}
	pe := apierr.FromError(toStatus(a.journalLimited(300 * time.Millisecond)))
	if want := 2*time.Second - 1; pe.RetryAfter.Round(time.Millisecond) != want.Round(time.Millisecond) {
		t.Fatalf("retry-after %v, want the one-second floor plus the longest draw (%v)", pe.RetryAfter, want)
	}
}
