package connlimit

import (
	"time"
)

// Admission on the gRPC port: the queue carries a storm; a busy answer,
// with a retry-after from a reservation schedule, goes only to a client the
// queue cannot serve in time.
//
// A queue is closed-loop: a freed slot is taken at once by the next
// client, so the CPU never waits for a client that is not there. A
// retry-after is open-loop: it is a forecast, and a client told to come
// back too late leaves the CPU idle meanwhile (measured: a journal that
// answered busy whenever the predicted wait passed 1 s took twice as long
// to carry 10,000 agents as one that only queued, docs/benchmarks.md). So
// a client is answered busy only when the queue would have closed it
// anyway: its predicted wait is past HandshakeQueueWait, or it has waited
// that long. It is told to come back when the queue ahead of it should be
// down to half of HandshakeQueueWait, so it returns to a queue that still
// holds work for the CPU: the forecast may be wrong by that much in
// either direction and the journal neither idles nor closes it again.
//
// The rate is Little's law over the handshake slots: MaxHandshakes over
// the moving mean of how long a handshake holds its slot. It needs no
// window and cannot be talked down by the busy answers themselves (a
// count of handshakes finished per second, tried first, measured the
// journal's own throttle once busy answers paced the clients). While the
// slots are not all taken the mean is a pure handshake's time and the rate
// too high; that errs towards queueing, the safe side.
//
// The reservation schedule spreads the clients told to come back: each
// busy answer books the next free place, no earlier than its forecast, and
// moves the schedule on by one handshake time (1/rate). A thousand clients
// answered in the same second come back over the seconds the journal needs
// to serve them, not all at once.

const (
	// initialHeld is the first guess at how long a handshake holds its
	// slot, before any has finished: short, so that the first clients of
	// a storm queue rather than bounce.
	initialHeld = 100 * time.Millisecond
	// heldWeight is the moving mean's weight for the newest handshake:
	// 1/heldWeight.
	heldWeight = 16
	// maxRetryAfter caps a retry-after: a client told more would be
	// better off trying another journal, and a returning crowd beyond it
	// is spread by jitter and the clients' own turn to other journals.
	maxRetryAfter = 60 * time.Second
	// minJitter is the least jitter added to a retry-after, so clients
	// booked into the same place do not return in the same millisecond.
	minJitter = 20 * time.Millisecond
	// jitterShare is the jitter's share of a longer retry-after.
	jitterShare = 20 // 1/20: 5 %
)

// Admit takes a handshake slot for a client whose ClientHello has arrived:
// at once if one is free, else after a wait in the queue if its predicted
// wait is at most HandshakeQueueWait. A client predicted to wait longer,
// or that has waited that long, gets a *BusyError with the retry-after to
// answer. release gives the slot back when the handshake is over.
func (l *Limiter) Admit() (release func(), err error) {
	select {
	case l.handshakes <- struct{}{}:
		return l.releaser(l.clock.Now()), nil
	default:
	}
	now := l.clock.Now()
	l.qmu.Lock()
	wait := l.waitLocked(l.queued + 1)
	if l.cfg.HandshakeQueueWait <= 0 || wait > l.cfg.HandshakeQueueWait {
		busy := l.deferLocked(now, wait)
		l.qmu.Unlock()
		return nil, busy
	}
	l.queued++
	l.qmu.Unlock()

	t := l.clock.NewTimer(l.cfg.HandshakeQueueWait)
	defer t.Stop()
	select {
	case l.handshakes <- struct{}{}:
		l.qmu.Lock()
		l.queued--
		l.qmu.Unlock()
		return l.releaser(l.clock.Now()), nil
	case <-t.C():
	}
	now = l.clock.Now()
	l.qmu.Lock()
	defer l.qmu.Unlock()
	l.queued--
	return nil, l.deferLocked(now, l.waitLocked(l.queued+1))
}

// finished counts a handshake that held its slot for held.
func (l *Limiter) finished(held time.Duration) {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	l.held += (held - l.held) / heldWeight
	if l.held < time.Millisecond {
		l.held = time.Millisecond
	}
}

// rateLocked is the handshakes per second the slots serve.
func (l *Limiter) rateLocked() float64 {
	return float64(l.cfg.MaxHandshakes) / l.held.Seconds()
}

// waitLocked predicts how long the n-th client in the queue waits.
func (l *Limiter) waitLocked(n int) time.Duration {
	return time.Duration(float64(n) / l.rateLocked() * float64(time.Second))
}

// deferLocked answers a client whose predicted wait is wait: it books the
// next free place in the reservation schedule no earlier than when the
// queue ahead of it should be down to half of HandshakeQueueWait.
func (l *Limiter) deferLocked(now time.Time, wait time.Duration) *BusyError {
	l.deferred.Add(1)
	at := now.Add(max(wait-l.cfg.HandshakeQueueWait/2, 0))
	if l.nextReturn.After(at) {
		at = l.nextReturn
	}
	retry := at.Sub(now)
	if retry >= maxRetryAfter {
		// Past the cap the schedule is not moved on: these clients are
		// beyond what the journal can promise, spread by jitter alone.
		retry = maxRetryAfter
	} else {
		l.nextReturn = at.Add(time.Duration(float64(time.Second) / l.rateLocked()))
	}
	return &BusyError{RetryAfter: retry + l.jitter(max(retry/jitterShare, minJitter))}
}
