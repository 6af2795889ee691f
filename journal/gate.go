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
	select {
	case g.slots <- struct{}{}:
		return g.release, nil
	default:
	}
	t := g.clock.NewTimer(g.maxWait)
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
