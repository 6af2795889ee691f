// A journal's busy answer: saturated with TLS handshakes, it turned the
// connection away before any cryptography and named when to come back
// (internal/transport). That is no failure: the agent returns to the same
// journal at the time it named, plus a small jitter, and its backoff does
// not grow, because the journal's retry-after is already spread over the
// rate at which it can serve (journal/connlimit's reservation schedule).

package agent

import (
	"errors"
	"time"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/transport"
)

const (
	// maxBusyWait caps how long a busy answer parks the agent: a journal
	// names at most about a minute; a longer wait says the line is forged
	// or mistaken.
	maxBusyWait = 2 * time.Minute
	// minBusyJitter is the least jitter added to a busy answer's wait.
	minBusyJitter = 10 * time.Millisecond
)

// busyOf finds a journal's busy answer in err.
func busyOf(err error) (*transport.BusyError, bool) {
	var busy *transport.BusyError
	if errors.As(err, &busy) {
		return busy, true
	}
	return nil, false
}

// busyWait is how long to stay away from a journal that answered busy:
// its retry-after, capped, plus a jitter of up to 5 % (at least 10 ms).
func (a *Agent) busyWait(b *transport.BusyError) time.Duration {
	d := min(max(b.RetryAfter, 0), maxBusyWait)
	n := max(d/20, minBusyJitter)
	return d + a.backoff.Rand.Draw(n)
}

// deferred schedules the next attempt after a busy answer, keeping the
// attempt count: the exponential backoff does not grow.
func (r *retry) deferred(a *Agent, b *transport.BusyError) {
	r.notBefore = a.cfg.Clock.Now().Add(a.busyWait(b))
	r.busy = true
}

// journalBusy counts a busy answer from addr and logs the first of a
// series at info, the rest at debug: a boot storm would otherwise log one
// line per node per try.
func (a *Agent) journalBusy(op string, err error, b *transport.BusyError) {
	a.metrics.busy.Add(1)
	a.mu.Lock()
	first := !a.busySeries
	a.busySeries = true
	a.mu.Unlock()
	log := a.log.Debug
	if first {
		log = a.log.Info
	}
	log("journal busy; coming back when it asked", logkey.Op, op, logkey.RetryAfter, b.RetryAfter, logkey.Err, err)
}

// notBusy ends a series of busy answers: the next one is logged at info.
func (a *Agent) notBusy() {
	a.mu.Lock()
	a.busySeries = false
	a.mu.Unlock()
}
