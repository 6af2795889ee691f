package journal

import (
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/journal/connlimit"
)

// limitedCreds makes the gRPC port's TLS handshake wait for the client's
// ClientHello without a handshake slot, and take a slot (or answer busy)
// only once it has arrived. gRPC runs ServerHandshake in the connection's
// own goroutine under its ConnectionTimeout deadline, so a silent client
// blocks nobody and is closed when the timeout passes. The admission and
// the busy answer are connlimit's (Limiter.AdmitHandshake).
type limitedCreds struct {
	credentials.TransportCredentials
	lim *connlimit.Limiter
}

func (c *limitedCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	hello, release, err := c.lim.AdmitHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	return c.TransportCredentials.ServerHandshake(hello)
}

func (c *limitedCreds) Clone() credentials.TransportCredentials {
	return &limitedCreds{TransportCredentials: c.TransportCredentials.Clone(), lim: c.lim}
}

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
