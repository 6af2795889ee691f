package connlimit

import (
	"net/netip"
	"time"
)

// Admission on the gRPC port: the queue carries a storm; a busy answer,
// with a retry-after, goes to a client the queue cannot serve in time.
//
// A queue is closed-loop: a freed slot is taken at once by the next
// client, so the CPU never waits for a client that is not there. A
// retry-after is open-loop: it is a forecast, and a client told to come
// back too late leaves the CPU idle meanwhile. Forecasts are worst exactly
// when they are made most: at the start of a storm the journal shares its
// CPU with the storm's other work (a renewal storm's signing and Raft
// writes), handshakes hold their slots for long, and the rate measured
// then is a fraction of what the journal serves a few seconds later.
// Measured: a journal that answered busy whenever the predicted wait
// passed 1 s took twice as long to carry 10,000 agents as one that only
// queued; one that queued up to 8 s but booked returns up to a minute
// ahead carried the renewal storm in 85 s instead of 25 s, the CPU
// idle for half of it (docs/benchmarks.md). So:
//
//   - a client is answered busy at once only if it could not be served
//     within HandshakeQueueWait even at the fastest rate the journal has
//     shown in the last minute: a client the queue would surely close.
//     Every other client queues (measured: answering busy at once beyond
//     twice the wait predicted at the present rate still turned away
//     thousands of renewal channels the queue would have served);
//   - a queued client that has waited HandshakeQueueWait is answered busy
//     (before the busy answer it was closed, to retry with a backoff);
//   - nobody is told to come back later than HandshakeQueueWait: a
//     returning client that finds the queue still long is answered again,
//     which costs a connection and a ClientHello, no cryptography.
//
// The rate is Little's law over the slots: MaxHandshakes over the moving
// mean of how long a handshake holds its slot. It needs no window and
// cannot be talked down by the busy answers themselves (a count of
// handshakes finished per second, tried first, measured the journal's own
// throttle once busy answers paced the clients). While the slots are not
// all taken the mean is a pure handshake's time and the rate too high;
// that errs towards queueing, the safe side.
//
// A reservation schedule spreads the returns: each busy answer books the
// next free place, no earlier than when the queue ahead of it should be
// down to half of HandshakeQueueWait, and moves the schedule on by one
// handshake time (1/rate). A thousand clients answered in the same second
// come back over the seconds the journal needs, not all at once.
//
// Places past HandshakeQueueWait ahead (up to MaxRetryAfter, a minute by
// default) are booked only for a source address answered busy more than
// NearAnswers times in a row (4 by default): a client the queue has not
// turned over in that many returns is in a storm several times what the
// queue carries. Its first answers name no more than the queue wait, so a
// storm the queue carries is not slowed by forecasts made in its first
// seconds, when the rate is a fraction of what it becomes (measured:
// booking every client a minute ahead made a 10,000-agent storm a third
// slower, and with two answers near the renewal storm a fifth slower);
// by a client's fifth answer the rate has been measured in the storm. Such places are booked only at a rate the
// journal has been seen to serve: handshakes that succeeded per second
// over five seconds in which clients queued throughout (the CPU's pace,
// not the clients'), the best such window of the last minute, times four,
// so that the schedule errs towards clients that come back early and queue
// again (a connection and a ClientHello) rather than a CPU that waits for
// them. Such returns go up to MaxRetryAfter ahead; past it, or with no
// such window measured yet, answers are spread uniformly over the second
// half of the horizon. Measured (docs/benchmarks.md, eighth and tenth
// rounds): a 30,000-agent storm that bounced every client every few
// seconds and never finished on a slow evening finished so.

const (
	// initialHeld is the first guess at how long a handshake holds its
	// slot, before any has finished: short, so that the first clients of
	// a storm queue rather than bounce.
	initialHeld = 100 * time.Millisecond
	// heldWeight is the moving mean's weight for the newest handshake:
	// 1/heldWeight.
	heldWeight = 16
	// noQueueHorizon is the horizon of a journal configured to queue
	// nobody (HandshakeQueueWait 0) and no MaxRetryAfter.
	noQueueHorizon = time.Minute
	// servedWindow is how long a window of handshakes counted for the
	// served rate lasts: long enough to smooth the bursts in which a
	// storm's clients, starved of CPU themselves, finish their handshakes.
	servedWindow = 5 * time.Second
	// servedOptimism is how much faster than the best served rate returns
	// past HandshakeQueueWait are booked. Measured: at twice the rate a
	// 10,000-agent storm took 91-103 s against 67 s with no returns
	// booked past the queue wait, the CPU waiting for clients told to come
	// back late (a storm's early rate is a fraction of its later one).
	servedOptimism = 4
	// fastestWindow is how long the fastest rate seen counts as what the
	// journal can do.
	fastestWindow = time.Minute
	// minJitter is the least jitter added to a retry-after, so clients
	// booked into the same place do not return in the same millisecond.
	minJitter = 20 * time.Millisecond
	// jitterShare is the jitter's share of a longer retry-after.
	jitterShare = 20 // 1/20: 5 %
	// bounceMemory is how long a source's busy answers in a row are
	// remembered after its last one: longer than the latest return a busy
	// answer names (MaxRetryAfterLimit) and a queue wait after it.
	bounceMemory = 3 * time.Minute
	// maxBounced bounds the sources remembered; a forgotten one starts
	// again with answers within the queue wait.
	maxBounced = 1 << 16
)

// Admit takes a handshake slot for a client whose ClientHello has arrived:
// at once if one is free, else after a wait in the queue, up to
// HandshakeQueueWait. A client that would wait longer even at the fastest
// rate of the last minute, or that has waited that long, gets a
// *BusyError with the retry-after to answer. release gives the slot back when the handshake is over.
// Every client of Admit counts as one source (AdmitHandshake tells them
// apart by address).
func (l *Limiter) Admit() (release func(), err error) {
	s, err := l.admit(netip.Addr{})
	if err != nil {
		return nil, err
	}
	return l.okReleaser(s), nil
}

// slot is a handshake slot taken at start from ch (handshakes, or the
// reserve of a vouched source).
type slot struct {
	start time.Time
	ch    chan struct{}
}

// admit is Admit for a client from src, returning the slot taken. Its
// wait is timed (Timings.SlotWait).
func (l *Limiter) admit(src netip.Addr) (s slot, err error) {
	asked := l.clock.Now()
	defer func() {
		if err == nil {
			l.slotWait.observe(s.start.Sub(asked))
		}
	}()
	select {
	case l.handshakes <- struct{}{}:
		l.gotSlot(src)
		return slot{l.clock.Now(), l.handshakes}, nil
	default:
	}
	if l.vouched(src) {
		return l.admitVouched(src)
	}
	now := l.clock.Now()
	l.qmu.Lock()
	n := l.queued + 1
	if l.cfg.HandshakeQueueWait <= 0 || l.bestWaitLocked(n) > l.cfg.HandshakeQueueWait {
		busy := l.deferLocked(now, l.waitLocked(n), src)
		l.qmu.Unlock()
		return slot{}, busy
	}
	l.queued++
	l.qmu.Unlock()

	t := l.clock.NewTimer(l.cfg.HandshakeQueueWait)
	defer t.Stop()
	select {
	case l.handshakes <- struct{}{}:
		l.qmu.Lock()
		l.queued--
		delete(l.bounced, src)
		l.qmu.Unlock()
		return slot{l.clock.Now(), l.handshakes}, nil
	case <-t.C():
	}
	now = l.clock.Now()
	l.qmu.Lock()
	defer l.qmu.Unlock()
	l.queued--
	return slot{}, l.deferLocked(now, l.waitLocked(l.queued+1), src)
}

// admitVouched is admit for a client from a vouched address when every
// slot of MaxHandshakes is taken: it takes one of the reserve
// (VouchedHandshakes) if one is free, else the first of either to come
// free within HandshakeQueueWait, ahead of the unvouched clients queued
// for a slot of MaxHandshakes only; it is not answered busy before that
// wait is out. It is not counted as queued: the busy answers to
// unvouched clients forecast their own queue.
func (l *Limiter) admitVouched(src netip.Addr) (slot, error) {
	// A nil reserve is never ready.
	select {
	case l.reserve <- struct{}{}:
		l.gotSlot(src)
		return slot{l.clock.Now(), l.reserve}, nil
	default:
	}
	if l.cfg.HandshakeQueueWait > 0 {
		t := l.clock.NewTimer(l.cfg.HandshakeQueueWait)
		defer t.Stop()
		select {
		case l.reserve <- struct{}{}:
			l.gotSlot(src)
			return slot{l.clock.Now(), l.reserve}, nil
		case l.handshakes <- struct{}{}:
			l.gotSlot(src)
			return slot{l.clock.Now(), l.handshakes}, nil
		case <-t.C():
		}
	}
	now := l.clock.Now()
	l.qmu.Lock()
	defer l.qmu.Unlock()
	return slot{}, l.deferLocked(now, l.waitLocked(l.queued+1), src)
}

// gotSlot forgets src's busy answers: it has a slot.
func (l *Limiter) gotSlot(src netip.Addr) {
	l.qmu.Lock()
	if len(l.bounced) > 0 {
		delete(l.bounced, src)
	}
	l.qmu.Unlock()
}

// bounceLocked counts a busy answer to src and reports whether its return
// may be booked past HandshakeQueueWait: it has had more than NearAnswers
// in a row.
func (l *Limiter) bounceLocked(now time.Time, src netip.Addr) (far bool) {
	b, ok := l.bounced[src]
	if !ok && len(l.bounced) >= maxBounced {
		// Any one (map order is random): a sweep for the stale would cost
		// a pass over every entry on each answer of a flood from fresh
		// addresses, under qmu; a stale entry counts from zero anyway.
		for k := range l.bounced {
			delete(l.bounced, k)
			break
		}
	}
	if now.Sub(b.last) > bounceMemory {
		b.answers = 0
	}
	b.answers++
	b.last = now
	l.bounced[src] = b
	return b.answers > l.cfg.NearAnswers
}

// finished counts a handshake that held its slot for held; ok says it
// succeeded.
func (l *Limiter) finished(held time.Duration, ok bool) {
	now := l.clock.Now()
	l.qmu.Lock()
	defer l.qmu.Unlock()
	l.held += (held - l.held) / heldWeight
	if l.held < time.Millisecond {
		l.held = time.Millisecond
	}
	if l.held <= l.fastest || now.Sub(l.fastestAt) > fastestWindow {
		l.fastest, l.fastestAt = l.held, now
	}
	l.countServedLocked(now, ok)
}

// countServedLocked counts a handshake finished at now into the served
// rate's window, and closes the window once it is servedWindow long: its
// rate counts only if clients queued whenever a handshake ended in it, and
// only handshakes that succeeded count. A client that gave up while it
// queued fails its handshake at once when it reaches a slot: counted, a
// storm's abandoned clients made the rate several times what the journal
// served (measured: 190-473 a second against 18-61).
func (l *Limiter) countServedLocked(now time.Time, ok bool) {
	if ok {
		l.winDone++
	}
	if l.queued == 0 {
		l.winIdle = true
	}
	d := now.Sub(l.winStart)
	if d < servedWindow {
		return
	}
	if !l.winIdle {
		r := float64(l.winDone) / d.Seconds()
		if r >= l.served || now.Sub(l.servedAt) > fastestWindow {
			l.served, l.servedAt = r, now
		}
	}
	l.winStart, l.winDone, l.winIdle = now, 0, false
}

// servedRateLocked is the best served rate of the last minute, or 0.
func (l *Limiter) servedRateLocked(now time.Time) float64 {
	if l.served == 0 || now.Sub(l.servedAt) > fastestWindow {
		return 0
	}
	return l.served
}

// bestWaitLocked predicts how long the n-th client in the queue waits at
// the fastest rate of the last minute: the least it can wait.
func (l *Limiter) bestWaitLocked(n int) time.Duration {
	return time.Duration(n) * l.fastest / time.Duration(l.cfg.MaxHandshakes)
}

// rateLocked is the handshakes per second the slots serve.
func (l *Limiter) rateLocked() float64 {
	return float64(l.cfg.MaxHandshakes) / l.held.Seconds()
}

// waitLocked predicts how long the n-th client in the queue waits.
func (l *Limiter) waitLocked(n int) time.Duration {
	return time.Duration(float64(n) / l.rateLocked() * float64(time.Second))
}

// deferLocked answers a client from src whose predicted wait is wait: it
// books the next free place in the reservation schedule no earlier than
// when the queue ahead of it should be down to half of HandshakeQueueWait.
// Places up to HandshakeQueueWait ahead are one handshake time apart at
// the present rate; places past it (up to MaxRetryAfter, for a source
// answered busy more than NearAnswers times in a row; or only that where
// nobody queues) one at four times the best served rate, if one was
// measured. Past the schedule's horizon, a uniform draw over its second
// half.
func (l *Limiter) deferLocked(now time.Time, wait time.Duration, src netip.Addr) *BusyError {
	l.deferred.Add(1)
	farOK := l.bounceLocked(now, src)
	near, far := l.cfg.HandshakeQueueWait, l.cfg.MaxRetryAfter
	if far == 0 {
		far = near
		if near <= 0 {
			far = noQueueHorizon
		}
	}
	step := time.Duration(float64(time.Second) / l.rateLocked())
	farStep := time.Duration(0)
	if near <= 0 {
		// No queue to come back to: the forecast itself, at the present
		// rate, within MaxRetryAfter.
		near, farStep = far, step
	} else if r := l.servedRateLocked(now); r > 0 && far > near && farOK {
		farStep = time.Duration(float64(time.Second) / (servedOptimism * r))
	}
	horizon := near
	if farStep > 0 {
		horizon = far
	}
	at := now.Add(min(max(wait-l.cfg.HandshakeQueueWait/2, 0), horizon))
	if l.nextReturn.After(at) {
		at = l.nextReturn
	}
	retry := at.Sub(now)
	if retry > horizon {
		return &BusyError{RetryAfter: horizon/2 + l.jitter.Draw(horizon/2)}
	}
	if retry >= near && farStep > 0 {
		step = farStep
	}
	l.nextReturn = at.Add(step)
	return &BusyError{RetryAfter: retry + l.jitter.Draw(max(retry/jitterShare, minJitter))}
}
