package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/backoff"
	"github.com/pact-hpc/pact/internal/clock"
)

// gate bounds the enrollments, renewals and standbys a journal works on at
// once. A caller waits for a slot while its deadline allows (acquire) and
// is then refused with a retry-after, so what the journal works on at once
// stays bounded and a storm queues in front of the gate rather than in
// front of Raft's heartbeats.
type gate struct {
	slots   chan struct{}
	maxWait time.Duration
	clock   clock.Clock
	jitter  backoff.Jitter // spreads the retry-afters; nil: random
}

func newGate(n int, maxWait time.Duration, c clock.Clock) *gate {
	return &gate{slots: make(chan struct{}, n), maxWait: maxWait, clock: c}
}

// Bounds of a call's wait for a slot (acquire).
const (
	// serveMargin is what a call's deadline must still hold once it has a
	// slot: its CSR check, signing and Raft commit under a storm's load.
	serveMargin = 3 * time.Second
	// maxCallWait bounds the wait whatever the caller's deadline.
	maxCallWait = 30 * time.Second
)

// acquire takes a slot, waiting as long as the call's deadline leaves
// time to serve it (at least maxWait, at most maxCallWait; maxWait for a
// call without a deadline). Every caller that reaches the gate has paid
// for its connection: a renewal or a standby comes over the agent's open,
// authenticated channel, an enrollment over a connection whose TLS
// handshake is done. Waiting holds a goroutine and the request; a refusal
// sends the caller back after its retry-after to make the call again, an
// enrollment with a new connection and a second handshake. With the
// gate's 2 s for all, about a third of 10,000 renewals were refused in a
// renewal storm, some more than once, and at 30,000 agents 8,405-11,029
// enrollments were refused after their handshake (docs/benchmarks.md).
// How many callers can wait is bounded before the gate: by the
// handshake admission and the connection limits (journal/connlimit) and,
// for enrollments, by the failure budgets (admission.go).
func (g *gate) acquire(ctx context.Context) (func(), error) {
	wait := g.maxWait
	if dl, ok := ctx.Deadline(); ok {
		wait = max(wait, min(dl.Sub(g.clock.Now())-serveMargin, maxCallWait))
	}
	return g.acquireWithin(ctx, wait)
}

func (g *gate) acquireWithin(ctx context.Context, maxWait time.Duration) (func(), error) {
	select {
	case g.slots <- struct{}{}:
		return g.release, nil
	default:
	}
	t := g.clock.NewTimer(maxWait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return g.release, nil
	case <-t.C():
		// Spread the retries so refused callers do not return together.
		after := time.Second + g.jitter.Draw(2*time.Second)
		return nil, &retryAfterError{err: fmt.Errorf("%w; retry after %v", ErrOverloaded, after.Round(time.Millisecond)), after: after, limit: apierr.LimitJournal}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// tryAcquire takes a slot if one is free now.
func (g *gate) tryAcquire() (func(), bool) {
	select {
	case g.slots <- struct{}{}:
		return g.release, true
	default:
		return nil, false
	}
}

// admitEnrollment takes an Enroll from source through the failure budget
// (admission.go) and a slot of the gate. A reservation of the budget is
// held only with a slot: a call that finds none free gives its
// reservation back while it waits for one, and takes one again with the
// slot. The budget bounds the enrollments evaluated at once, not those
// queued; held in the gate's queue, the reservations of a boot storm's
// first few hundred agents (one fresh source each) used up the fresh
// budget, and the storm's later calls, refused after the budget's wait,
// were told someone may be guessing hardware identities (9,007 such
// refusals at 30,000 agents, each sending its agent to a new connection
// and handshake: docs/benchmarks.md). When the budget has run short by
// the time the slot comes (a guessing flood), the call frees the slot and
// waits for the budget without it, so guesses do not hold the slots the
// renewals need.
func admitEnrollment(ctx context.Context, adm *admission, g *gate, source string) (admitted, release func(), err error) {
	for {
		if admitted, err = adm.admit(ctx, source); err != nil {
			return nil, nil, err
		}
		if release, ok := g.tryAcquire(); ok {
			return admitted, release, nil
		}
		admitted()
		if release, err = g.acquire(ctx); err != nil {
			return nil, nil, err
		}
		admitted, err = adm.tryAdmit(source)
		switch {
		case err != nil:
			release()
			return nil, nil, err
		case admitted != nil:
			return admitted, release, nil
		}
		// The budget ran short while this call waited (a guessing flood):
		// wait for it without the slot.
		release()
	}
}

func (g *gate) release() { <-g.slots }

func (g *gate) inFlight() int { return len(g.slots) }
