// Package backoff is pact's one retry policy: exponential backoff with
// full jitter, never shorter than a retry-after the journal asked for plus
// up to half of it again. pact-agent, the CLI's batch registration and the
// boot-storm benchmark all wait with it, so the benchmark measures the
// agent's real behaviour and a change to the policy reaches all three.
//
// The jitter matters more than the exponent: thousands of nodes that boot
// together and are refused together must not come back together. The
// extra half of a retry-after spreads a crowd the journal told to wait the
// same time.
package backoff

import (
	"errors"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/jitter"
)

// maxShift caps the exponent so Min<<attempt cannot overflow into a
// negative duration after very many attempts.
const maxShift = 16

// Jitter is pact's one source of jitter (internal/jitter): backoff's
// policies draw through it, and callers that must not depend on backoff
// (identity, which speaks no journal protocol) use internal/jitter itself.
type Jitter = jitter.Jitter

// Policy is one retry policy. The zero Rand draws from math/rand/v2.
type Policy struct {
	// Min is the first ceiling of the jitter; the n-th retry (0-based)
	// waits Min/2 plus a uniform draw below min(Min<<n, Max).
	Min time.Duration
	// Max caps the jitter's ceiling.
	Max time.Duration
	// Rand returns a uniform duration in [0, n) for n > 0. Tests inject a
	// deterministic one; nil uses math/rand/v2.
	Rand Jitter
}

// Default is pact-agent's policy (agent.DefaultConfig's MinBackoff and
// MaxBackoff).
func Default() Policy {
	return Policy{Min: 250 * time.Millisecond, Max: 30 * time.Second}
}

// ErrInvalid is wrapped by Validate's errors.
var ErrInvalid = errors.New("backoff: invalid policy")

// Validate reports a policy Delay cannot use.
func (p Policy) Validate() error {
	if p.Min <= 0 || p.Max < p.Min {
		return errors.Join(ErrInvalid, errors.New("backoff: need 0 < Min <= Max"))
	}
	return nil
}

// Delay is how long to wait after the attempt-th failure (0 for the first),
// given the retry-after the journal asked for (0: none). It lies in
// [Min/2, Min/2 + min(Min<<attempt, Max)), and with a retry-after in
// [retryAfter, 1.5*retryAfter) when that is longer.
func (p Policy) Delay(attempt int, retryAfter time.Duration) time.Duration {
	ceiling := p.Min << min(max(attempt, 0), maxShift)
	if ceiling > p.Max || ceiling <= 0 {
		ceiling = p.Max
	}
	d := p.Min/2 + p.draw(ceiling)
	if retryAfter > 0 {
		d = max(d, retryAfter+p.draw(retryAfter/2))
	}
	return d
}

// After is Delay for a failure err: a journal's retry-after on it (an
// apierr status) is honoured.
func (p Policy) After(attempt int, err error) time.Duration {
	var ra time.Duration
	if pe := apierr.FromError(err); pe != nil {
		ra = pe.RetryAfter
	}
	return p.Delay(attempt, ra)
}

// draw is a uniform duration in [0, n), 0 when n <= 0.
func (p Policy) draw(n time.Duration) time.Duration { return p.Rand.Draw(n) }
