package transport

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// The busy answer: what a saturated journal writes on the gRPC port instead
// of a ServerHello, once a client's ClientHello has arrived, before it
// half-closes and closes the connection. It is one short ASCII line:
//
//	pact-journal busy: retry after 1234 ms\n
//
// It is sent before any cryptography, so it costs the journal nothing but
// the write, and the client nothing but a read. Its first byte ('p', 0x70)
// is no TLS record type (20-23): a client that does not know the line fails
// its handshake at once ("first record does not look like a TLS
// handshake") instead of waiting, and a human with nc or openssl s_client
// can read it. It is unauthenticated: a client takes it only as a hint of
// when to try again, never as a reason to give up or to trust anything.
const (
	busyPrefix = "pact-journal busy: retry after "
	busySuffix = " ms\n"
	// MaxBusyLine bounds the line a client reads: the prefix, at most
	// seven digits and the suffix, with room to spare.
	MaxBusyLine = 64
	// MaxBusyRetryAfter bounds the retry-after a client believes, so a
	// forged or mistaken line cannot park an agent for long.
	MaxBusyRetryAfter = 5 * time.Minute
)

// BusyError is a busy answer as the client sees it: the journal was
// saturated and named when to come back. The agent and the CLI find it with
// errors.As in a call's UNAVAILABLE error (agent/channel's
// ClientCredentials puts it there).
type BusyError struct {
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("journal busy: retry after %v", e.RetryAfter)
}

// RetryHint is the retry-after, for internal/apierr, which reads it from
// any error in a chain without importing this package.
func (e *BusyError) RetryHint() time.Duration { return e.RetryAfter }

// ErrBadBusyLine: bytes that begin like a busy answer but are none.
var ErrBadBusyLine = errors.New("transport: malformed busy answer")

// FormatBusy is the busy line for retryAfter, rounded up to a millisecond
// and bounded by MaxBusyRetryAfter.
func FormatBusy(retryAfter time.Duration) []byte {
	retryAfter = min(max(retryAfter, 0), MaxBusyRetryAfter)
	ms := (retryAfter + time.Millisecond - 1) / time.Millisecond
	return []byte(busyPrefix + strconv.FormatInt(int64(ms), 10) + busySuffix)
}

// ParseBusy reads a busy line (the whole of it, newline included). It is
// strict: anything but the exact form, or a number of more than seven
// digits, is ErrBadBusyLine. The retry-after is capped at
// MaxBusyRetryAfter.
func ParseBusy(line []byte) (time.Duration, error) {
	if len(line) > MaxBusyLine || len(line) < len(busyPrefix)+len(busySuffix) || !bytes.HasPrefix(line, []byte(busyPrefix)) || !bytes.HasSuffix(line, []byte(busySuffix)) {
		return 0, ErrBadBusyLine
	}
	digits := line[len(busyPrefix) : len(line)-len(busySuffix)]
	if len(digits) == 0 || len(digits) > 7 {
		return 0, ErrBadBusyLine
	}
	var ms int64
	for _, d := range digits {
		if d < '0' || d > '9' {
			return 0, ErrBadBusyLine
		}
		ms = ms*10 + int64(d-'0')
	}
	return min(time.Duration(ms)*time.Millisecond, MaxBusyRetryAfter), nil
}

// BusyAware wraps a client's raw connection before its TLS handshake: if
// the server's first byte begins a busy answer, the first Read reads the
// line and returns a *BusyError; otherwise every byte passes through
// untouched, and after the first read the wrapper only forwards.
func BusyAware(c net.Conn) net.Conn { return &busyConn{Conn: c} }

type busyConn struct {
	net.Conn
	checked bool   // the first byte has been seen
	pending []byte // bytes read while checking, not yet returned
}

func (c *busyConn) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	if c.checked || len(b) == 0 {
		return c.Conn.Read(b)
	}
	n, err := c.Conn.Read(b)
	if n == 0 {
		return n, err
	}
	c.checked = true
	if b[0] != busyPrefix[0] {
		return n, err // a TLS record (or garbage TLS will report)
	}
	// Read the rest of the line, bounded: the server sends it and closes.
	line := append(make([]byte, 0, MaxBusyLine), b[:n]...)
	for err == nil && len(line) < MaxBusyLine && bytes.IndexByte(line, '\n') < 0 {
		var m int
		m, err = c.Conn.Read(line[len(line):MaxBusyLine])
		line = line[:len(line)+m]
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		if ra, perr := ParseBusy(line[:i+1]); perr == nil {
			return 0, &BusyError{RetryAfter: ra}
		}
	}
	// Not a busy answer: hand back what was read, as it was, for the TLS
	// layer to refuse as it would have.
	c.pending = line[copy(b, line):]
	return min(len(line), len(b)), nil
}
