// The one ladder every attempt's result goes down: refused → clock bridge
// → busy → backoff (loop.go's phases apply it to connect, enroll, the move
// to a better identity, the standby, renewal and a stream's end).

package agent

import (
	"errors"
	"fmt"
	"time"
)

// outcome is what the loop does after an attempt.
type outcome int

const (
	// outProgressed: the attempt worked; look again at once.
	outProgressed outcome = iota
	// outRefused: the journal's final answer (the node refused,
	// decommissioned or fenced): the agent stops (refusedBy).
	outRefused
	// outRebase: the agent now runs on the journal's time; the retry
	// deadlines were taken on the old clock (loopState.rebased): again at
	// once, on the new clock.
	outRebase
	// outNothingYet: no identity to try yet; wait for a change, no backoff.
	outNothingYet
	// outBusy: the journal asked to be left alone until a time it named: back
	// then, the backoff not grown (retry.deferred).
	outBusy
	// outBackoff: any other failure: retry with backoff (retry.failed).
	outBackoff
)

// outcomeOf classifies an attempt's result, in this order: success, a
// final refusal, nothing to try, the clock bridged, the journal busy, any
// other failure. bridge learns the journal's time from a failure
// (Agent.bridge, which may move the agent's clock); it is asked only when
// the failure is neither final nor "nothing to try", and is nil for an
// attempt that bridges on its own (enroll, which returns errBridged) or
// whose failures say nothing about the journal's time (over a live
// channel: the standby, a stream's end).
func outcomeOf(err error, bridge func(error) bool) outcome {
	switch {
	case err == nil:
		return outProgressed
	case final(err):
		return outRefused
	case errors.Is(err, errNothingToTry):
		return outNothingYet
	case errors.Is(err, errBridged), bridge != nil && bridge(err):
		return outRebase
	}
	if _, ok := busyOf(err); ok {
		return outBusy
	}
	return outBackoff
}

// refusedBy is the error that stops the agent after a final refusal to
// what (empty: said by err alone): err itself if it already wraps
// ErrRefused.
func refusedBy(what string, err error) error {
	switch {
	case errors.Is(err, ErrRefused):
		return err
	case what == "":
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrRefused, what, err)
}

// retryAfter schedules r's next attempt after a failure that is not final:
// at the time a busy journal named, the backoff not grown, or with backoff,
// at least atLeast away.
func (r *retry) retryAfter(a *Agent, err error, atLeast time.Duration) {
	if b, ok := busyOf(err); ok {
		r.deferred(a, b)
		return
	}
	r.failed(a, err, atLeast)
}
