// Package jitter is pact's one source of jitter: retries, busy answers,
// renewal times, the journal's retry-afters and attestation requests all
// draw through a Jitter, which a test injects where it must know the
// draw. It depends on nothing of pact's, so every package may use it
// (internal/backoff re-exports it as backoff.Jitter).
package jitter

import (
	"math/rand/v2"
	"time"
)

// Jitter draws a uniform duration in [0, n); it is pact's one source of
// jitter (retries, busy answers, renewal times, the journal's
// retry-afters), injectable where a test must know the draw. The nil
// Jitter draws from math/rand/v2.
type Jitter func(n time.Duration) time.Duration

// Draw is a uniform duration in [0, n), 0 when n <= 0.
func (j Jitter) Draw(n time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	if j != nil {
		return j(n)
	}
	return rand.N(n)
}
