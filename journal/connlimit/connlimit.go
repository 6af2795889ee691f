// Package connlimit bounds what unauthenticated TCP connections may cost a
// journal before any of them has proved anything: how many one source
// address may hold, how many may be open at all, and how many TLS
// handshakes may be worked on at once.
//
// The checks are ordered by what they cost. A connection over the per-source
// cap is closed in Accept, before a goroutine, a buffer or a TLS state is
// spent on it. At the total cap, what has proved least is shed first: a new
// connection takes the place of the oldest silent connection (its client
// has not sent a whole ClientHello), which is closed (evicted); only when
// no connection is silent does it take the place of one whose ClientHello
// has arrived but whose handshake has not finished (the first seen to
// have spoken); only when every open connection has finished its handshake
// is the new one closed instead. A connection has finished its handshake
// once its caller lifts the handshake deadline (SetDeadline with the zero
// time): gRPC does when the TLS handshake and the HTTP/2 preface are done,
// the Raft port when the peer journal is admitted. Such a connection is
// not evicted, with one exception (ProveWithin, below).
//
// Whoever has proved something is served first. The caller tells the
// limiter of every call a connection carries (Call) and of every call
// authenticated as a principal of the domain (Vouch): that connection is
// proven and never evicted, and its source address is vouched for, for
// VouchFor (10 minutes by default; at most MaxVouched addresses are
// remembered). A connection from a vouched address is evicted only to
// make room for another connection from a vouched address, and only when
// no connection from an unvouched one could go; its ClientHello may take
// one of VouchedHandshakes slots kept for vouched addresses when every
// other slot is taken, and it never gets a busy answer ahead of its queue
// wait. With ProveWithin set (the gRPC port), a connection from an
// unvouched address past its handshake that has made no authenticated
// call and has had no call under way for ProveWithin is idle: anyone
// can complete a TLS handshake without a certificate, so at the cap it is
// evicted after the silent connections and before those whose ClientHello
// has arrived (they are still working to prove something; it has had its
// chance). The order at the cap, for a new connection: silent, idle,
// spoken, all from unvouched addresses; then, for a new connection from a
// vouched address only, unvouched ones past their handshake for less
// than ProveWithin, then silent and spoken ones from vouched addresses.
// An attacker holds no vouched address: it cannot make an authenticated
// call.
//
// An honest client sends its ClientHello the moment its TCP handshake is
// done, usually before the journal has even accepted the connection: a
// ClientHello waiting unread in the socket counts (the limiter peeks at a
// silent connection before it evicts it), so a client that completes its
// handshake is not evicted by silent connections, whatever their number,
// their addresses and the speed at which they are re-opened. (Before it
// counted, an honest client had to finish its handshake before MaxConns
// newer connections were accepted: under a fill re-opened as fast as it
// was closed, a fraction of a second on a busy journal.) Speaking is not
// cheap priority: a client that sends a ClientHello enters the handshake
// queue, which bounds how many may wait and how long (HandshakeQueueWait,
// then a busy answer and the close), and a partial ClientHello is silence.
// Evicting costs a few pointer moves and, per connection at most once, a
// non-blocking peek; no memory: the connections not through their
// handshake are two lists in accept order, threaded through the
// connections themselves.
//
// A connection that is let in waits for its client's first TLS record (the
// ClientHello) without holding a handshake slot, so silent or trickling
// clients cost one parked goroutine and a file descriptor each, never
// handshake capacity; the handshake timeout (the caller sets it as the
// connection's deadline) closes them, or eviction at the cap. Only a client
// whose ClientHello has arrived takes a handshake slot (a TLS handshake is
// the largest CPU cost of a connection, PERFORMANCE.md); when every slot
// is taken it waits for one, costing no CPU: the queue is what carries a
// boot storm, handshakes going at the speed of the CPU, in turn. A client
// the queue cannot serve in time (the clients queued ahead of it could not
// be served within HandshakeQueueWait even at the fastest handshake rate
// this limiter has measured in the last minute, or its wait runs out) is
// answered busy: a short line
// naming when to come back (internal/transport), written before any
// cryptography, from a reservation schedule that spreads the returns at
// the rate the journal serves them. A client told to wait holds nothing on
// the journal.
package connlimit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pact-hpc/pact/internal/backoff"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/transport"
)

// Errors. A refused connection is closed; these reach the caller's log.
var (
	// ErrEvicted: the connection was closed before its handshake
	// finished, or idle with no authenticated call (ProveWithin), to make
	// room at MaxConns for a newer one. Reads and writes of an evicted
	// connection fail with it (and net.ErrClosed).
	ErrEvicted = errors.New("connlimit: closed to make room at the connection cap before it proved anything")
	// ErrHandshakesBusy: every handshake slot was taken when the
	// connection's ClientHello arrived.
	ErrHandshakesBusy = errors.New("connlimit: too many TLS handshakes in progress")
	// ErrNotTLS: the first bytes were not a TLS handshake record.
	ErrNotTLS = errors.New("connlimit: the client did not start a TLS handshake")
)

// BusyError is Admit's refusal: no handshake slot soon enough; the client
// is to come back after RetryAfter. errors.Is(err, ErrHandshakesBusy) holds.
type BusyError struct {
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("%v: answered busy, retry after %v", ErrHandshakesBusy, e.RetryAfter)
}

// Is makes a BusyError an ErrHandshakesBusy.
func (e *BusyError) Is(target error) bool { return target == ErrHandshakesBusy }

// Config configures a Limiter.
type Config struct {
	// MaxConnsPerSource bounds the connections one source IP address may
	// hold open (handshaking or established). An agent needs two during a
	// certificate swap; an operator's host a few; a peer journal a handful.
	MaxConnsPerSource int
	// MaxConns bounds the connections open at once from all sources, so
	// file descriptors remain for Raft, the stores and outgoing calls. A
	// new connection at the cap evicts the oldest silent one (no whole
	// ClientHello), else the first seen to have spoken that is still in
	// its handshake; it is refused only if there is none.
	MaxConns int
	// MaxHandshakes bounds the TLS handshakes in progress (ClientHello
	// received, handshake not finished).
	MaxHandshakes int
	// HandshakeTimeout is how long a new connection has to send its
	// ClientHello and finish the handshake; on the gRPC port
	// (AdmitHandshake) the handshake's time starts again when it gets its
	// slot, so a wait in the queue does not eat into it. The caller
	// applies it (gRPC's ConnectionTimeout, a deadline on the Raft port);
	// it is here so the limits are configured and documented together.
	// The caller lifting that deadline (SetDeadline(time.Time{})) is what
	// tells the limiter the handshake is over: from then on the
	// connection is not evicted at MaxConns.
	HandshakeTimeout time.Duration
	// HandshakeQueueWait is how long a client whose ClientHello has
	// arrived may wait for a handshake slot before it is closed. The wait
	// is what carries a boot storm: handshakes go at the speed of the CPU,
	// in turn, while the waiting clients cost no CPU; a client closed
	// instead retries with a backoff that grows with every refusal, and a
	// storm's tail grows with it (docs/benchmarks.md: 10,000 agents took
	// 94 s to all stream with a 1 s wait, 44 s with 8 s). On the gRPC
	// port (Admit) a client that could not be served within it even at
	// the fastest rate of the last minute is answered busy at once, and
	// so is one that has waited this long; a queue
	// shorter than this, tried as a target, paced clients below what the
	// journal could serve (docs/benchmarks.md, the busy answer). On the
	// Raft port (AcquireHandshake) a client waits this long and is then
	// closed. Zero queues nobody.
	HandshakeQueueWait time.Duration
	// MaxRetryAfter, when above HandshakeQueueWait, is the latest a busy
	// answer on the gRPC port tells a client to come back: returns past
	// HandshakeQueueWait ahead are booked, for a source answered busy more
	// than NearAnswers times in a row, at four times the rate the port has
	// shown it serves while clients queue, so that a client of a storm
	// several times what the queue carries is told to come back about when
	// it can be served instead of bouncing every few seconds. Past
	// MaxRetryAfter, answers are spread over its second half. A minute by
	// default. Zero books nothing past HandshakeQueueWait: measured, that
	// left 30,000 agents bouncing every few seconds on a slow evening, few
	// of them ever served (docs/benchmarks.md, eighth and tenth rounds).
	// At most 2 minutes: pact-agent waits no longer for a busy journal.
	// Where HandshakeQueueWait is 0, the horizon of every answer (a minute
	// if zero).
	MaxRetryAfter time.Duration
	// NearAnswers is how many busy answers in a row a source address gets
	// that name no later than HandshakeQueueWait before its returns may be
	// booked past it (MaxRetryAfter); a handshake slot resets the count.
	// A storm the queue carries answers few clients more than four
	// times, and is then not slowed by forecasts made in its first
	// seconds, when the rate measured is a fraction of the later one
	// (measured: booking every client past the queue wait made 10,000
	// agents a third slower; with 2, the 10,000-agent renewal storm a fifth
	// slower). 4 by default; 0 books from the first answer.
	NearAnswers int
	// VouchFor is how long a source address stays vouched for after a
	// call from it was authenticated (Vouch): its connections are evicted
	// at MaxConns only after every unvouched one, and only for another
	// vouched connection. 10 minutes by default; 0 vouches for nobody.
	VouchFor time.Duration
	// MaxVouched bounds the source addresses vouched for at once (an
	// attacker cannot add one, but a fleet is many): past it the least
	// recently vouched are forgotten first. 131,072 by default, about
	// 6 MB; a forgotten address is vouched for again at its next
	// authenticated call.
	MaxVouched int
	// VouchedHandshakes is how many handshake slots, beyond
	// MaxHandshakes, only clients from a vouched address may take: a
	// flood of ClientHellos that stalls holds every other slot until the
	// handshake timeout, not these. 8 by default.
	VouchedHandshakes int
	// ProveWithin, if not zero, makes a connection from an unvouched
	// address past its handshake evictable at MaxConns once it has had no
	// call under way for this long and no authenticated call at all (a
	// handshake without a certificate, then idle). Only for a listener
	// whose caller reports every call (Call): the journal's gRPC port,
	// with DefaultProveWithin. 0 by default (the Raft port, and any
	// listener whose calls are not reported): a connection past its
	// handshake is never evicted.
	ProveWithin time.Duration

	// Clock decides the handshake times the rate is measured from, the
	// queue's hard bound and the retry-afters; nil is the system clock. For tests.
	Clock clock.Clock
	// Jitter draws a uniform duration in [0, n); nil is math/rand. For
	// tests.
	Jitter backoff.Jitter
}

// DefaultConfig returns the defaults: 32 connections per source address,
// 16,384 in all, 64 handshakes in progress, 15 s to finish a handshake,
// of which up to 8 s waiting for a handshake slot, and busy answers that
// name up to that wait, or up to a minute for a source answered busy more
// than four times in a row; an authenticated source vouched for 10
// minutes (131,072 at most), and 8 more handshake slots for vouched
// sources. ProveWithin is 0: a caller that reports its calls sets it
// (DefaultProveWithin).
func DefaultConfig() Config {
	return Config{
		MaxConnsPerSource:  32,
		MaxConns:           16384,
		MaxHandshakes:      64,
		HandshakeTimeout:   15 * time.Second,
		HandshakeQueueWait: 8 * time.Second,
		MaxRetryAfter:      time.Minute,
		NearAnswers:        4,
		VouchFor:           10 * time.Minute,
		MaxVouched:         1 << 17,
		VouchedHandshakes:  8,
	}
}

// DefaultProveWithin is the ProveWithin of a listener whose calls are
// reported (the journal's gRPC port): a client makes its first call a
// round trip after its handshake, and an Enroll under way is a call.
const DefaultProveWithin = 3 * time.Second

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.MaxConnsPerSource < 1 {
		errs = append(errs, fmt.Errorf("connlimit: MaxConnsPerSource %d must be at least 1", c.MaxConnsPerSource))
	}
	if c.MaxConns < c.MaxConnsPerSource {
		errs = append(errs, fmt.Errorf("connlimit: MaxConns %d must be at least MaxConnsPerSource %d", c.MaxConns, c.MaxConnsPerSource))
	}
	if c.MaxHandshakes < 1 {
		errs = append(errs, fmt.Errorf("connlimit: MaxHandshakes %d must be at least 1", c.MaxHandshakes))
	}
	if c.HandshakeTimeout < 100*time.Millisecond || c.HandshakeTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("connlimit: HandshakeTimeout %v must be between 100ms and 1m", c.HandshakeTimeout))
	}
	if c.HandshakeQueueWait < 0 || c.HandshakeQueueWait >= c.HandshakeTimeout {
		errs = append(errs, fmt.Errorf("connlimit: HandshakeQueueWait %v must be at least 0 and shorter than HandshakeTimeout %v", c.HandshakeQueueWait, c.HandshakeTimeout))
	}
	if c.MaxRetryAfter != 0 && (c.MaxRetryAfter < max(c.HandshakeQueueWait, time.Second) || c.MaxRetryAfter > MaxRetryAfterLimit) {
		errs = append(errs, fmt.Errorf("connlimit: MaxRetryAfter %v must be 0 (the queue wait) or between HandshakeQueueWait %v (and 1s) and %v", c.MaxRetryAfter, c.HandshakeQueueWait, MaxRetryAfterLimit))
	}
	if c.NearAnswers < 0 {
		errs = append(errs, fmt.Errorf("connlimit: NearAnswers %d must be at least 0", c.NearAnswers))
	}
	if c.VouchFor != 0 && (c.VouchFor < time.Second || c.VouchFor > 24*time.Hour) {
		errs = append(errs, fmt.Errorf("connlimit: VouchFor %v must be 0 (vouch for nobody) or between 1s and 24h", c.VouchFor))
	}
	if c.MaxVouched < 0 || c.VouchFor != 0 && c.MaxVouched < 2 {
		errs = append(errs, fmt.Errorf("connlimit: MaxVouched %d must be at least 2 (0 only with VouchFor 0)", c.MaxVouched))
	}
	if c.VouchedHandshakes < 0 {
		errs = append(errs, fmt.Errorf("connlimit: VouchedHandshakes %d must be at least 0", c.VouchedHandshakes))
	}
	if c.ProveWithin != 0 && (c.ProveWithin < 100*time.Millisecond || c.ProveWithin > time.Minute) {
		errs = append(errs, fmt.Errorf("connlimit: ProveWithin %v must be 0 (never evict a connection past its handshake) or between 100ms and 1m", c.ProveWithin))
	}
	return errors.Join(errs...)
}

// MaxRetryAfterLimit is the largest MaxRetryAfter: pact-agent caps the
// wait a busy answer names at this.
const MaxRetryAfterLimit = 2 * time.Minute

// Stats counts what a Limiter refused, for metrics.
type Stats struct {
	Open             int     // connections open now
	Handshakes       int     // handshakes in progress now
	RefusedPerSource uint64  // closed in Accept: the source held its cap
	RefusedTotal     uint64  // closed in Accept: MaxConns open, every one of them past its handshake
	Evicted          uint64  // closed before they proved anything, to make room at MaxConns for a newer connection
	EvictedSpoken    uint64  // of Evicted, those whose ClientHello had arrived: only when no silent or idle connection was left
	EvictedIdle      uint64  // of Evicted, those past their handshake with no authenticated call, idle for ProveWithin
	EvictedVouched   uint64  // of Evicted, those from a vouched address (silent or spoken), for a newer one from a vouched address
	Silent           int     // connections open now whose ClientHello has not arrived
	Spoken           uint64  // connections whose ClientHello arrived while they were still silent to the limiter (not past their handshake)
	Unproven         int     // connections open now past their handshake, from an unvouched address, with no authenticated call and no call under way (ProveWithin)
	Vouched          int     // source addresses vouched for now
	RefusedBusy      uint64  // closed at ClientHello: no handshake slot within HandshakeQueueWait (AcquireHandshake, the Raft port)
	Deferred         uint64  // answered busy at ClientHello, with a retry-after (Admit, the gRPC port)
	Queued           int     // clients waiting for a handshake slot now (Admit)
	Rate             float64 // handshakes per second the limiter counts on: MaxHandshakes over the mean time a handshake holds its slot
	ServedRate       float64 // the most successful handshakes per second finished over five seconds during which clients queued throughout, within the last minute; 0 if none
}

// Limiter applies one Config to one listener (and the handshakes of its
// connections). It is safe for concurrent use.
type Limiter struct {
	cfg        Config
	handshakes chan struct{}

	mu        sync.Mutex
	perSource map[netip.Addr]int
	open      int
	// The open connections whose handshake has not finished, oldest
	// first: who is evicted at MaxConns. silent: no complete ClientHello
	// yet, evicted first; spoken: its ClientHello has arrived (the
	// handshake is queued or under way), evicted only when no silent
	// connection is left. vsilent and vspoken: the same, from addresses
	// vouched for when they were accepted. idle: connections past their
	// handshake from unvouched addresses with no authenticated call and
	// no call under way, in the order they became idle (ProveWithin).
	silent, spoken, vsilent, vspoken, idle connList
	// byAddr finds the connections of idle, and those of them with a
	// call under way, by their remote address (Call, Vouch).
	byAddr map[netip.AddrPort]*conn
	// peekBuf, under mu, holds what victimLocked peeks at.
	peekBuf [recordHeaderLen + maxRecordLen]byte

	refusedSource, refusedTotal, refusedBusy, deferred, evicted, evictedSpoken, evictedIdle, evictedVouched, spokenTotal atomic.Uint64

	// reserve holds the VouchedHandshakes slots (nil if none).
	reserve chan struct{}
	// vouches are the source addresses vouched for, under their own lock.
	vouches vouches

	clock  clock.Clock
	jitter backoff.Jitter
	// The admission queue (Admit), under qmu.
	qmu        sync.Mutex
	queued     int           // clients waiting for a slot
	held       time.Duration // moving mean of how long a handshake holds its slot
	fastest    time.Duration // the least held has been within fastestWindow
	fastestAt  time.Time     // when fastest was seen
	nextReturn time.Time     // the next free place in the reservation schedule
	// The rate served while clients queue, counted over windows of
	// servedWindow (see servedLocked).
	winStart time.Time
	winDone  int
	winIdle  bool    // a handshake finished in this window with nobody queued
	served   float64 // the highest served rate within fastestWindow
	servedAt time.Time
	// bounced counts, per source, the busy answers in a row not followed
	// by a slot (NearAnswers).
	bounced map[netip.Addr]bounce

	// The Timings histograms; uncalled, under mu, are the open
	// connections that have made no call yet, by remote address.
	slotWait, handshakeTime, firstCall durations
	uncalled                           map[netip.AddrPort]*conn
}

type bounce struct {
	answers int
	last    time.Time
}

// New returns a Limiter. It copies cfg.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{cfg: cfg, handshakes: make(chan struct{}, cfg.MaxHandshakes), perSource: map[netip.Addr]int{}, bounced: map[netip.Addr]bounce{},
		byAddr: map[netip.AddrPort]*conn{}, uncalled: map[netip.AddrPort]*conn{}, vouches: newVouches(cfg.MaxVouched),
		clock: cfg.Clock, jitter: cfg.Jitter, held: initialHeld, fastest: initialHeld}
	if cfg.VouchedHandshakes > 0 {
		l.reserve = make(chan struct{}, cfg.VouchedHandshakes)
	}
	if l.clock == nil {
		l.clock = clock.Real{}
	}
	l.fastestAt = l.clock.Now()
	l.winStart = l.fastestAt
	return l, nil
}

// Config returns the limiter's configuration.
func (l *Limiter) Config() Config { return l.cfg }

// Stats returns the current counts.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	open, silent, unproven := l.open, l.silent.n+l.vsilent.n, l.idle.n
	l.mu.Unlock()
	vouched := l.vouches.live(l.clock.Now(), l.cfg.VouchFor)
	l.qmu.Lock()
	queued, rate, served := l.queued, l.rateLocked(), l.servedRateLocked(l.clock.Now())
	l.qmu.Unlock()
	return Stats{
		Open:             open,
		Handshakes:       len(l.handshakes) + len(l.reserve),
		RefusedPerSource: l.refusedSource.Load(),
		RefusedTotal:     l.refusedTotal.Load(),
		Evicted:          l.evicted.Load(),
		EvictedSpoken:    l.evictedSpoken.Load(),
		EvictedIdle:      l.evictedIdle.Load(),
		EvictedVouched:   l.evictedVouched.Load(),
		Silent:           silent,
		Spoken:           l.spokenTotal.Load(),
		Unproven:         unproven,
		Vouched:          vouched,
		RefusedBusy:      l.refusedBusy.Load(),
		Deferred:         l.deferred.Load(),
		Queued:           queued,
		Rate:             rate,
		ServedRate:       served,
	}
}

// Listener wraps lis: Accept closes, without handing them on, connections
// over the per-source cap, and at the total cap evicts a connection that
// has proved least to make room (or, if there is none, closes the new
// one). Every connection it returns gives its place back
// when closed.
func (l *Limiter) Listener(lis net.Listener) net.Listener { return &listener{Listener: lis, l: l} }

type listener struct {
	net.Listener
	l *Limiter
}

func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc, evicted := ln.l.take(c)
		if evicted != nil {
			// Its goroutine, blocked reading, fails with ErrEvicted and
			// closes it again, which gives nothing back twice.
			_ = evicted.Conn.Close()
		}
		if lc == nil {
			// Closed before any byte is read: the cheapest refusal there is.
			_ = c.Close()
			continue
		}
		return lc, nil
	}
}

// take admits c, returning it wrapped, and the connection evicted to make
// room if one was; nil if c is refused.
func (l *Limiter) take(c net.Conn) (admitted, evicted *conn) {
	ra := c.RemoteAddr()
	src := sourceOf(ra)
	vouched := l.vouched(src)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perSource[src] >= l.cfg.MaxConnsPerSource {
		l.refusedSource.Add(1)
		return nil, nil
	}
	if l.open >= l.cfg.MaxConns {
		evicted = l.victimLocked(vouched)
		if evicted == nil {
			l.refusedTotal.Add(1)
			return nil, nil
		}
		switch evicted.list {
		case &l.spoken, &l.vspoken:
			l.evictedSpoken.Add(1)
		case &l.idle:
			l.evictedIdle.Add(1)
		}
		if evicted.vouched {
			l.evictedVouched.Add(1)
		}
		evicted.evicted.Store(true)
		l.giveLocked(evicted)
		l.evicted.Add(1)
	}
	l.perSource[src]++
	l.open++
	admitted = &conn{Conn: c, l: l, src: src, key: addrPortOf(ra), vouched: vouched, accepted: l.clock.Now()}
	if admitted.key.IsValid() {
		l.uncalled[admitted.key] = admitted
	}
	if vouched {
		l.vsilent.push(admitted)
	} else {
		l.silent.push(admitted)
	}
	return admitted, evicted
}

// victimLocked picks the connection to evict at MaxConns for a new one,
// from a vouched address if vouched: from unvouched addresses, the oldest
// silent one (no complete ClientHello yet), else the one idle longest
// past its handshake if that is ProveWithin, else the oldest whose
// ClientHello has arrived but whose handshake is not over; then, only for
// a vouched newcomer, the one idle longest past its handshake however
// briefly, then the oldest silent and then spoken one from a vouched
// address. nil if there is none. A silent connection whose ClientHello is
// waiting unread in its socket (its goroutine has not run yet) is not
// silent: it moves to the spoken list, once, and the next oldest is
// looked at.
//
// The idle for less than ProveWithin go for a vouched newcomer: a fill of
// handshakes without a certificate, re-opened as soon as they are closed
// by clients fast enough, holds every connection idle for less than
// ProveWithin, and an operator whose address the journal vouches for was
// refused at every try (TestConnectionFillServesOperatorsAndAgentsInTime
// without the race detector, which had slowed the fill enough to leave
// it silent and spoken connections to give up).
func (l *Limiter) victimLocked(vouched bool) *conn {
	if c := l.silentVictimLocked(&l.silent); c != nil {
		return c
	}
	if c := l.idle.oldest; c != nil && l.cfg.ProveWithin > 0 && l.clock.Now().Sub(c.idleSince) >= l.cfg.ProveWithin {
		return c
	}
	if c := l.spoken.oldest; c != nil || !vouched {
		return c
	}
	if c := l.idle.oldest; c != nil {
		return c
	}
	if c := l.silentVictimLocked(&l.vsilent); c != nil {
		return c
	}
	return l.vspoken.oldest
}

// silentVictimLocked is the oldest connection of silent (l.silent or
// l.vsilent) with no ClientHello waiting in its socket.
func (l *Limiter) silentVictimLocked(silent *connList) *conn {
	for c := silent.oldest; c != nil; c = silent.oldest {
		if !helloWaiting(c.Conn, &l.peekBuf) {
			return c
		}
		l.spokeLocked(c)
	}
	return nil
}

// spokeLocked moves c, silent until now, to the spoken list (of its
// kind): its ClientHello has arrived.
func (l *Limiter) spokeLocked(c *conn) {
	to := &l.spoken
	switch c.list {
	case &l.silent:
	case &l.vsilent:
		to = &l.vspoken
	default:
		return
	}
	c.list.remove(c)
	to.push(c)
	l.spokenTotal.Add(1)
}

// giveLocked gives c's place back, once.
func (l *Limiter) giveLocked(c *conn) {
	if c.closed {
		return
	}
	c.closed = true
	if c.list != nil {
		c.list.remove(c)
	}
	l.untrackLocked(c)
	if l.uncalled[c.key] == c {
		delete(l.uncalled, c.key)
	}
	if l.perSource[c.src]--; l.perSource[c.src] <= 0 {
		delete(l.perSource, c.src)
	}
	l.open--
}

// handshakeOverLocked takes c off the lists of connections in their
// handshake; with ProveWithin, a connection from an address that was not
// vouched for (vouched, looked up by the caller) is idle from now until
// its first call.
func (l *Limiter) handshakeOverLocked(c *conn, vouched bool) {
	if c.closed || c.established {
		return
	}
	c.established = true
	if c.list != nil {
		c.list.remove(c)
	}
	if l.cfg.ProveWithin <= 0 || vouched || !c.key.IsValid() {
		return
	}
	if old := l.byAddr[c.key]; old != nil {
		// Two connections cannot share a remote address on one listener;
		// a test's fake addresses can. The older one is no longer found.
		old.tracked = false
	}
	c.tracked = true
	l.byAddr[c.key] = c
	c.idleSince = l.clock.Now()
	l.idle.push(c)
}

// untrackLocked forgets c as a connection that may yet be found idle: it
// was closed or proven.
func (l *Limiter) untrackLocked(c *conn) {
	if !c.tracked {
		return
	}
	c.tracked = false
	if c.list == &l.idle {
		l.idle.remove(c)
	}
	if l.byAddr[c.key] == c {
		delete(l.byAddr, c.key)
	}
}

// connList is a list of connections in accept order (idle: in the order
// they became idle), threaded through them: one of a limiter's lists,
// under its mu.
type connList struct {
	oldest, newest *conn
	n              int
}

func (q *connList) push(c *conn) {
	c.list, c.older, c.newer = q, q.newest, nil
	if q.newest != nil {
		q.newest.newer = c
	} else {
		q.oldest = c
	}
	q.newest = c
	q.n++
}

func (q *connList) remove(c *conn) {
	if c.older != nil {
		c.older.newer = c.newer
	} else {
		q.oldest = c.newer
	}
	if c.newer != nil {
		c.newer.older = c.older
	} else {
		q.newest = c.older
	}
	c.list, c.older, c.newer = nil, nil, nil
	q.n--
}

// conn gives its place back on the first Close.
type conn struct {
	net.Conn
	l   *Limiter
	src netip.Addr
	key netip.AddrPort // the remote address, for Call and Vouch
	// vouched: its address was vouched for when it was accepted (its
	// lists are vsilent and vspoken).
	vouched bool
	// Under l.mu: closed once the place is given back (a Close or an
	// eviction); list is the limiter's list the connection is in (silent
	// or spoken, of its kind) while its handshake is not over, or idle
	// after it, linked there between older and newer. established: past
	// its handshake; tracked: in byAddr, for calls to be counted (idle, or
	// a call under way) until it is proven or closed; calls: its calls
	// under way; idleSince: when its last call ended (or its handshake).
	closed       bool
	accepted     time.Time // for Timings.FirstCall
	list         *connList
	older, newer *conn
	established  bool
	tracked      bool
	calls        int
	idleSince    time.Time
	// evicted is set under l.mu, and read without it by the
	// connection's own reads and writes when they fail.
	evicted atomic.Bool
	// spoke is set once the first TLS record (the ClientHello) has been
	// read whole; until then the reads count it (hdr, got), in the one
	// goroutine that reads a connection during its handshake.
	spoke atomic.Bool
	hdr   [recordHeaderLen]byte
	got   int
}

func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.giveLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// SetDeadline with the zero time is the caller's word that the handshake
// is over: once it returns nil the connection is never evicted. On a
// connection evicted already it fails with ErrEvicted.
func (c *conn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		vouched := c.vouched || c.l.vouched(c.src)
		c.l.mu.Lock()
		c.l.handshakeOverLocked(c, vouched)
		evicted := c.evicted.Load()
		c.l.mu.Unlock()
		if evicted {
			return fmt.Errorf("%w: %w", ErrEvicted, net.ErrClosed)
		}
	}
	return c.Conn.SetDeadline(t)
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.spoke.Load() {
		c.count(b[:n])
	}
	if err != nil && c.evicted.Load() {
		err = fmt.Errorf("%w: %w", ErrEvicted, err)
	}
	return n, err
}

// count follows the bytes of the first TLS record as they are read; once
// it is whole (a ClientHello, whoever reads it: AwaitHello, or the TLS
// server), the connection is no longer silent. A record that is not a
// handshake's ends the count too: the handshake fails on it at once.
func (c *conn) count(b []byte) {
	if c.got < recordHeaderLen {
		k := copy(c.hdr[c.got:], b)
		c.got += k
		b = b[k:]
		if c.got < recordHeaderLen {
			return
		}
	}
	c.got += len(b)
	if c.got < recordHeaderLen+(int(c.hdr[3])<<8|int(c.hdr[4])) {
		return
	}
	c.spoke.Store(true)
	c.l.mu.Lock()
	c.l.spokeLocked(c)
	c.l.mu.Unlock()
}

func (c *conn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil && c.evicted.Load() {
		err = fmt.Errorf("%w: %w", ErrEvicted, err)
	}
	return n, err
}

// CloseWrite half-closes a TCP connection (the journal does, to deliver a
// handshake refusal before it closes), keeping the place until Close.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// sourceOf is the IP of a remote address without zone, IPv4-mapped
// addresses as IPv4; the zero Addr when there is none (one shared source).
func sourceOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok && ta != nil {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap().WithZone("")
		}
	}
	if ap, err := netip.ParseAddrPort(fmt.Sprint(a)); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

// addrPortOf is the remote address a as sourceOf sees it, with its port;
// the zero AddrPort when there is none.
func addrPortOf(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok && ta != nil {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return netip.AddrPortFrom(ip.Unmap().WithZone(""), uint16(ta.Port))
		}
	}
	if ap, err := netip.ParseAddrPort(fmt.Sprint(a)); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
	}
	return netip.AddrPort{}
}

// TLS record framing: a handshake record is type 22, a two-byte version
// and a two-byte length of at most 2^14 (RFC 8446 section 5.1).
const (
	recordHeaderLen     = 5
	recordTypeHandshake = 22
	maxRecordLen        = 1 << 14
)

// wholeRecord reports whether b starts with a whole TLS handshake record.
func wholeRecord(b []byte) bool {
	if len(b) < recordHeaderLen || b[0] != recordTypeHandshake {
		return false
	}
	n := int(b[3])<<8 | int(b[4])
	return n > 0 && n <= maxRecordLen && len(b) >= recordHeaderLen+n
}

// AwaitHello reads the client's first TLS record (its ClientHello) from c,
// bounded by whatever deadline c carries, and returns a connection that
// replays it before reading on. It holds no handshake slot while it waits.
func AwaitHello(c net.Conn) (net.Conn, error) {
	hdr := make([]byte, recordHeaderLen)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return nil, fmt.Errorf("connlimit: waiting for the ClientHello: %w", err)
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	if hdr[0] != recordTypeHandshake || n == 0 || n > maxRecordLen {
		return nil, ErrNotTLS
	}
	buf := make([]byte, recordHeaderLen+n)
	copy(buf, hdr)
	if _, err := io.ReadFull(c, buf[recordHeaderLen:]); err != nil {
		return nil, fmt.Errorf("connlimit: waiting for the ClientHello: %w", err)
	}
	return &prefixConn{Conn: c, prefix: buf}, nil
}

// AdmitHandshake is the gRPC port's admission of a new connection before
// its TLS handshake: it waits for the client's ClientHello without a slot
// (AwaitHello), then takes one (Admit). A client the queue cannot serve in
// time is answered busy: the line of transport.FormatBusy in place of a
// ServerHello, then a half-close (the client has sent its whole ClientHello
// and sends nothing more until it hears from the server, so it reads the
// line rather than a reset); the caller closes raw and fails the handshake
// with the *BusyError. Otherwise hello replays the ClientHello, and release
// gives the slot back once the handshake is over, saying whether it
// succeeded (only those count towards the rate the port served).
func (l *Limiter) AdmitHandshake(raw net.Conn) (hello net.Conn, release func(ok bool), err error) {
	hello, err = AwaitHello(raw)
	if err != nil {
		return nil, nil, err
	}
	s, err := l.admit(sourceOf(raw.RemoteAddr()))
	var busy *BusyError
	if errors.As(err, &busy) {
		answerBusy(raw, busy.RetryAfter)
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	// The time the client waited in the queue was the journal's, not the
	// client's: its handshake gets HandshakeTimeout from its slot. Counted
	// from the accept (the caller's deadline), a client served after 8-10 s
	// in a saturated journal's queue had 5-7 s left for a handshake that
	// took up to 6 s there, and the journal cut it off once it had done
	// most of the work (docs/benchmarks.md, twelfth round). A silent client
	// is still bounded: by the deadline until its ClientHello, by the
	// queue wait, then by this.
	_ = raw.SetDeadline(time.Now().Add(l.cfg.HandshakeTimeout))
	return hello, l.releaser(s), nil
}

// busyWriteTimeout bounds writing the busy line: a client that does not
// read it is not waited for.
const busyWriteTimeout = time.Second

// answerBusy writes the busy line and half-closes; the caller closes.
func answerBusy(c net.Conn, retryAfter time.Duration) {
	_ = c.SetWriteDeadline(time.Now().Add(busyWriteTimeout))
	if _, err := c.Write(transport.FormatBusy(retryAfter)); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// AcquireHandshake takes a handshake slot, waiting up to
// HandshakeQueueWait for one; release gives it back. A client refused here
// is closed and retries.
func (l *Limiter) AcquireHandshake() (release func(), err error) {
	asked := l.clock.Now()
	got := func() func() {
		now := l.clock.Now()
		l.slotWait.observe(now.Sub(asked))
		return l.okReleaser(slot{now, l.handshakes})
	}
	select {
	case l.handshakes <- struct{}{}:
		return got(), nil
	default:
	}
	if l.cfg.HandshakeQueueWait > 0 {
		t := time.NewTimer(l.cfg.HandshakeQueueWait)
		defer t.Stop()
		select {
		case l.handshakes <- struct{}{}:
			return got(), nil
		case <-t.C:
		}
	}
	l.refusedBusy.Add(1)
	return nil, ErrHandshakesBusy
}

// releaser gives back slot s and counts how long it was held, and
// whether the handshake succeeded.
func (l *Limiter) releaser(s slot) func(ok bool) {
	var once sync.Once
	return func(ok bool) {
		once.Do(func() {
			<-s.ch
			held := l.clock.Now().Sub(s.start)
			if ok {
				l.handshakeTime.observe(held)
			}
			l.finished(held, ok)
		})
	}
}

// okReleaser is a releaser for a caller that does not tell (the Raft
// port, whose rate no busy answer is sized from).
func (l *Limiter) okReleaser(s slot) func() {
	r := l.releaser(s)
	return func() { r(true) }
}

// prefixConn replays bytes already read before reading from the
// connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		if len(c.prefix) == 0 {
			c.prefix = nil
		}
		return n, nil
	}
	return c.Conn.Read(b)
}
