package journal

import (
	"fmt"
	"sync"
	"time"

	"github.com/pact-hpc/pact/internal/clock"
)

// streamLimits counts the streams each certificate holds open, so one
// stolen or misbehaving credential cannot open thousands (each a goroutine,
// a timer and HTTP/2 state) on a journal.
type streamLimits struct {
	max int
	mu  sync.Mutex
	m   map[string]int // certificate serial and key fingerprint -> open streams
}

func newStreamLimits(max int) *streamLimits {
	return &streamLimits{max: max, m: map[string]int{}}
}

// streamRetryAfter is the hint a refused stream gets: about how long the
// journal takes to notice a dead connection (keepalive time plus timeout),
// which is why an honest agent could find its old streams still counted.
const streamRetryAfter = 30 * time.Second

// acquire takes a stream place for the certificate key, or refuses with
// ErrTooManyStreams.
func (s *streamLimits) acquire(key, what string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[key] >= s.max {
		return nil, &retryAfterError{
			err:   fmt.Errorf("%w: %s already holds %d open streams on this journal (the most one certificate may); close one, or retry once the journal has noticed a lost connection", ErrTooManyStreams, what, s.max),
			after: streamRetryAfter,
		}
	}
	s.m[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.m[key]--; s.m[key] <= 0 {
				delete(s.m, key)
			}
		})
	}, nil
}

// sampledLog lets one line through per interval and counts the ones it
// held back, so a flood of refused connections cannot flood the log.
type sampledLog struct {
	clock      clock.Clock
	every      time.Duration
	mu         sync.Mutex
	next       time.Time
	suppressed int
}

func newSampledLog(c clock.Clock, every time.Duration) *sampledLog {
	return &sampledLog{clock: c, every: every}
}

// allow reports whether to log now, and how many lines were held back
// since the last one logged.
func (s *sampledLog) allow() (ok bool, suppressed int) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Before(s.next) {
		s.suppressed++
		return false, 0
	}
	s.next = now.Add(s.every)
	n := s.suppressed
	s.suppressed = 0
	return true, n
}
