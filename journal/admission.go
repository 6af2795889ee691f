package journal

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/backoff"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/journal/ratelimit"
)

// admission decides which Enroll calls are evaluated while the shared
// failure budgets are short: someone is guessing hardware identities from
// many addresses, and every unknown source would otherwise be refused
// until the flood stops, a booting node included.
//
// A source that is not known good spends, when it fails, one of two
// budgets shared by all sources (ratelimit): the fresh budget for its
// first failure on record, the global budget for later ones. Every call
// from such a source reserves a failure of its budget while it is
// evaluated, and no more are evaluated at once than the budget could pay
// for if all of them failed: a burst of guesses cannot overdraw it and
// shut everyone out. A success spends nothing and gives its reservation
// back at once; a failure spends it. Failures evaluated therefore stay
// bounded by the two refill rates however many addresses take part.
//
// While a budget lasts nothing waits here. When it is short, calls wait
// (up to the enroll queue wait) and the budget's next failure goes to the
// best waiter of its tier:
//
//   - fresh sources in the order they were first seen: a flood's fresh
//     addresses are each evaluated once, in turn, and then compete only
//     for the global budget, so a node that boots during a flood from A
//     addresses waits at most for the fresh ones seen before it, about
//     A*FreshRefill;
//   - sources with failures, the one whose last failure is oldest first.
//
// An attacker with an endless supply of fresh addresses (IPv6) spends the
// fresh budget at its refill rate and delays booting nodes by as many
// addresses as it brought before them; docs/registry.md says so.
type admission struct {
	lim        *ratelimit.Limiter
	clock      clock.Clock
	jitter     backoff.Jitter // spreads the retry-afters; nil: random
	maxWaiters int
	maxWait    time.Duration

	mu      sync.Mutex
	waiters []*waiter
	// reserved counts, per tier (fresh: true), the calls being evaluated
	// that would spend from that tier's budget if they failed.
	reserved map[bool]int
	seq      uint64
	seen     map[string]*sourceHistory
}

// maxSourceHistory bounds the sources whose priority is remembered. A
// forgotten source only loses its place in the order.
const maxSourceHistory = 1 << 16

type sourceHistory struct {
	firstSeen   time.Time
	lastFailure time.Time // zero: none seen here
}

type waiter struct {
	source string
	fresh  bool // its failure would spend the fresh budget
	hist   sourceHistory
	seq    uint64
	done   chan error // nil: granted a reservation
}

func newAdmission(lim *ratelimit.Limiter, maxWaiters int, maxWait time.Duration, c clock.Clock) *admission {
	return &admission{lim: lim, clock: c, maxWaiters: maxWaiters, maxWait: maxWait, reserved: map[bool]int{}, seen: map[string]*sourceHistory{}}
}

// before reports whether a goes before b. Fresh waiters come before the
// others (their budgets are separate; the order only matters for which
// waiter is dropped when the queue is full).
func (a *waiter) before(b *waiter) bool {
	switch {
	case a.fresh != b.fresh:
		return a.fresh
	case a.fresh && !a.hist.firstSeen.Equal(b.hist.firstSeen):
		return a.hist.firstSeen.Before(b.hist.firstSeen)
	case !a.fresh && !a.hist.lastFailure.Equal(b.hist.lastFailure):
		return a.hist.lastFailure.Before(b.hist.lastFailure)
	}
	return a.seq < b.seq
}

// admit returns when an Enroll from source may be evaluated; release must
// be called once its outcome has been recorded with the limiter (so the
// next waiter sees the budget it left).
func (a *admission) admit(ctx context.Context, source string) (release func(), err error) {
	now := a.clock.Now()
	a.mu.Lock()
	hist, v, release, err := a.tryLocked(source, now)
	if release != nil || err != nil {
		a.mu.Unlock()
		return release, err
	}
	a.seq++
	w := &waiter{source: source, fresh: v.Fresh, hist: *hist, seq: a.seq, done: make(chan error, 1)}
	if len(a.waiters) >= a.maxWaiters {
		worst := 0
		for i, o := range a.waiters {
			if a.waiters[worst].before(o) {
				worst = i
			}
		}
		if !w.before(a.waiters[worst]) {
			a.mu.Unlock()
			return nil, a.journalLimited(a.nextToken(v.Fresh, now))
		}
		a.waiters[worst].done <- a.journalLimited(a.nextToken(a.waiters[worst].fresh, now))
		a.removeLocked(a.waiters[worst])
	}
	a.waiters = append(a.waiters, w)
	a.dispatchLocked(now)
	a.mu.Unlock()

	deadline := a.clock.NewTimer(a.maxWait)
	defer deadline.Stop()
	for {
		// Hand on what the budget holds now, then wake when it regains a
		// failure.
		a.mu.Lock()
		now := a.clock.Now()
		a.dispatchLocked(now)
		next := a.nextToken(w.fresh, now)
		a.mu.Unlock()
		tick := a.clock.NewTimer(max(next, time.Millisecond))
		select {
		case err := <-w.done:
			tick.Stop()
			if err != nil {
				return nil, err
			}
			return a.releaser(w.fresh), nil
		case <-deadline.C():
			tick.Stop()
			return nil, a.abandon(w, a.journalLimited(a.retryAfter(w)))
		case <-ctx.Done():
			tick.Stop()
			return nil, a.abandon(w, ctx.Err())
		case <-tick.C():
		}
	}
}

// tryAdmit is admit without the wait: it returns a nil release and no
// error when the call would have to wait for its budget.
func (a *admission) tryAdmit(source string) (release func(), err error) {
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	_, _, release, err = a.tryLocked(source, now)
	return release, err
}

// tryLocked admits source now if it can: a source over its own budget is
// refused, a known good one admitted, any other given a reservation while
// its tier's budget has one unreserved and no one waits for it. Otherwise
// release and err are nil, and v and hist say where it would wait.
func (a *admission) tryLocked(source string, now time.Time) (hist *sourceHistory, v ratelimit.Verdict, release func(), err error) {
	hist = a.historyLocked(source, now)
	v = a.lim.Check(source, now)
	switch {
	case v.Scope == ratelimit.ScopeSource:
		return hist, v, nil, sourceLimited(source, v.RetryAfter)
	case !v.NeedsGlobal:
		// Known good: its failures are bounded by its own budget.
		return hist, v, func() {}, nil
	}
	if tokens, _ := a.lim.Tokens(v.Fresh, now); !a.waitingLocked(v.Fresh) && a.reserved[v.Fresh] < tokens {
		a.reserved[v.Fresh]++
		return hist, v, a.releaser(v.Fresh), nil
	}
	return hist, v, nil, nil
}

// retryAfter sizes a waiter's retry-after from the queue and the rate: the
// time until its budget has paid for every waiter of its tier before it
// (at most a minute).
// A source keeps its place while it is away (the order is by first seen or
// last failure, not by arrival), so coming back early costs it nothing.
func (a *admission) retryAfter(w *waiter) time.Duration {
	a.mu.Lock()
	ahead := 0
	for _, o := range a.waiters {
		if o != w && o.fresh == w.fresh && o.before(w) {
			ahead++
		}
	}
	a.mu.Unlock()
	return min(a.nextToken(w.fresh, a.clock.Now())+time.Duration(ahead)*a.lim.Refill(w.fresh), time.Minute)
}

func (a *admission) nextToken(fresh bool, now time.Time) time.Duration {
	_, next := a.lim.Tokens(fresh, now)
	return next
}

func (a *admission) waitingLocked(fresh bool) bool {
	for _, w := range a.waiters {
		if w.fresh == fresh {
			return true
		}
	}
	return false
}

// abandon takes w out of the queue, unless it was granted (or refused) in
// the meantime, in which case a grant is handed on.
func (a *admission) abandon(w *waiter, err error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case got := <-w.done:
		if got == nil {
			a.reserved[w.fresh]--
			a.dispatchLocked(a.clock.Now())
		}
		return err
	default:
	}
	a.removeLocked(w)
	return err
}

// releaser ends an evaluation; it runs after a failure has been recorded
// with the limiter, so the budget already shows the spending.
func (a *admission) releaser(fresh bool) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.reserved[fresh]--
			a.dispatchLocked(a.clock.Now())
		})
	}
}

// dispatchLocked grants reservations to the best waiters of each tier
// while its budget has failures left that no evaluation has reserved.
func (a *admission) dispatchLocked(now time.Time) {
	for _, fresh := range []bool{true, false} {
		tokens, _ := a.lim.Tokens(fresh, now)
		for a.reserved[fresh] < tokens {
			var best *waiter
			for _, o := range a.waiters {
				if o.fresh == fresh && (best == nil || o.before(best)) {
					best = o
				}
			}
			if best == nil {
				break
			}
			a.removeLocked(best)
			if v := a.lim.Check(best.source, now); v.Scope == ratelimit.ScopeSource {
				best.done <- sourceLimited(best.source, v.RetryAfter)
				continue
			}
			a.reserved[fresh]++
			best.done <- nil
		}
	}
}

func (a *admission) removeLocked(w *waiter) {
	for i, o := range a.waiters {
		if o == w {
			a.waiters = append(a.waiters[:i], a.waiters[i+1:]...)
			return
		}
	}
}

// historyLocked returns source's history, remembering when it was first
// seen.
func (a *admission) historyLocked(source string, now time.Time) *sourceHistory {
	h, ok := a.seen[source]
	if !ok {
		if len(a.seen) >= maxSourceHistory {
			for k := range a.seen { // any one: map order is random
				delete(a.seen, k)
				break
			}
		}
		h = &sourceHistory{firstSeen: now}
		a.seen[source] = h
	}
	return h
}

// failed records a failed evaluation from source.
func (a *admission) failed(source string) {
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.historyLocked(source, now).lastFailure = now
}

func sourceLimited(source string, after time.Duration) error {
	return &retryAfterError{
		err:   fmt.Errorf("%w: too many failed enrollments from this address (%s); retry after %v", ErrOverloaded, source, after),
		after: after, limit: apierr.LimitSource,
	}
}

// journalLimited is the refusal of a caller that waited for, or could not
// queue for, a shared budget, with jitter so refused callers do not return
// together; after is at least a second, the agents' own backoff floor.
func (a *admission) journalLimited(after time.Duration) error {
	after = max(after, time.Second) + a.jitter.Draw(time.Second)
	return &retryAfterError{
		err:   fmt.Errorf("%w: this journal's budget for failed enrollments from all addresses together is spent (someone may be guessing hardware identities); your address is not the cause; retry after %v", ErrOverloaded, after.Round(100*time.Millisecond)),
		after: after, limit: apierr.LimitJournal,
	}
}
