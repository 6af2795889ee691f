package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/backoff"
	"github.com/pact-hpc/pact/internal/clock"
)

// gate bounds the enrollments a journal works on at once. A caller waits at
// most maxWait for a slot and is then refused with a retry-after, so a boot
// storm queues at the agents (which retry with jitter) rather than in front
// of Raft's heartbeats.
type gate struct {
	slots   chan struct{}
	maxWait time.Duration
	clock   clock.Clock
	jitter  backoff.Jitter // spreads the retry-afters; nil: random
}

func newGate(n int, maxWait time.Duration, c clock.Clock) *gate {
	return &gate{slots: make(chan struct{}, n), maxWait: maxWait, clock: c}
}

func (g *gate) acquire(ctx context.Context) (func(), error) {
	return g.acquireWithin(ctx, g.maxWait)
}

// Bounds of a renewal's wait for a slot (acquireRenewal).
const (
	// renewalServeMargin is what a renewal's deadline must still hold
	// once it has a slot: its CSR check, signing and Raft commit under
	// a storm's load.
	renewalServeMargin = 3 * time.Second
	// maxRenewalWait bounds the wait whatever the caller's deadline.
	maxRenewalWait = 30 * time.Second
)

// acquireRenewal is acquire for a renewal, which waits as long as its
// deadline leaves time to serve it (at least maxWait, at most
// maxRenewalWait). A renewal comes over the agent's open, authenticated
// channel: waiting holds a goroutine and the request, nothing the
// handshake queue would have spared, whereas a refusal sends the agent
// back after its retry-after to make the call again. In a renewal storm
// every agent calls within a second, and with the enrollment's wait
// (2 s) about a third of 10,000 renewals were refused, some more than
// once (docs/benchmarks.md).
func (g *gate) acquireRenewal(ctx context.Context) (func(), error) {
	wait := g.maxWait
	if dl, ok := ctx.Deadline(); ok {
		wait = max(wait, min(dl.Sub(g.clock.Now())-renewalServeMargin, maxRenewalWait))
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

func (g *gate) release() { <-g.slots }

func (g *gate) inFlight() int { return len(g.slots) }
