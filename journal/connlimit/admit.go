package connlimit

import (
	"net"
	"net/netip"
	"time"
)

// Admission on the gRPC port: queue for a short predicted wait, or answer
// busy with a retry-after from a reservation schedule.
//
// The rate is measured, not configured: handshakes finished per second in
// windows during which some client waited for a slot (an idle journal's
// rate says nothing about what it can do). It starts optimistic, so the
// first clients of a storm queue rather than bounce; a queue that then
// outlasts its prediction is cut off by HandshakeQueueWait, and the
// measurement of the first busy window corrects the rate.
//
// The reservation schedule spreads the clients told to come back: each
// busy answer books the next free place, no earlier than the predicted end
// of the present queue, and moves the schedule on by one handshake time
// (1/rate). A thousand clients bounced in the same second come back over
// the seconds the journal needs to serve them, not all at once.

const (
	// rateWindow is how long one rate measurement runs.
	rateWindow = time.Second
	// minRate bounds the rate from below: a journal that finished
	// nothing in a saturated window (all slots held by slow clients)
	// still hands out retry-afters below maxRetryAfter.
	minRate = 1.0
	// maxRetryAfter caps a retry-after: a client told more would be
	// better off trying another journal, and a returning crowd beyond it
	// is spread by jitter and the clients' own turn to other journals.
	maxRetryAfter = 60 * time.Second
	// minJitter is the least jitter added to a retry-after, so clients
	// booked into the same place do not return in the same millisecond.
	minJitter = 20 * time.Millisecond
	// jitterShare is the jitter's share of a longer retry-after.
	jitterShare = 20 // 1/20: 5 %
	// favorWindow is how long a source that enrolled here keeps the
	// favour of its next connection (Favor).
	favorWindow = 5 * time.Second
	// maxFavored bounds the sources remembered as favoured.
	maxFavored = 65536
)

// favor is what Favor granted one source: n connections until until.
type favor struct {
	n     int
	until time.Time
}

// initialRate is the optimistic first estimate: every slot finishing a
// handshake every 100 ms (a loaded journal does 1-5 ms of CPU per
// handshake; the rest is the client's round trips).
func initialRate(slots int) float64 { return float64(slots) * 10 }

// Favor notes that the source of addr has just enrolled here: an agent's
// mTLS channel follows its Enroll at once, and bouncing it would waste the
// enrollment's momentum. Its next connection within a few seconds queues
// for a predicted wait up to HandshakeQueueWait (the hard bound) instead
// of HandshakeQueueTarget. Each Favor is good for one connection, so a
// shared address (NAT, a test's loopback) gains no more than its
// enrollments.
func (l *Limiter) Favor(addr net.Addr) {
	src := sourceOf(addr)
	now := l.clock.Now()
	l.qmu.Lock()
	defer l.qmu.Unlock()
	if l.favored == nil {
		l.favored = map[netip.Addr]favor{}
	}
	f, ok := l.favored[src]
	if !ok && len(l.favored) >= maxFavored {
		for a, f := range l.favored {
			if !now.Before(f.until) {
				delete(l.favored, a)
			}
		}
		if len(l.favored) >= maxFavored {
			return // a flood of sources: favour none more
		}
	}
	if !now.Before(f.until) {
		f.n = 0
	}
	f.n++
	f.until = now.Add(favorWindow)
	l.favored[src] = f
}

// useFavorLocked spends one of src's favours, if it has one.
func (l *Limiter) useFavorLocked(src netip.Addr, now time.Time) bool {
	f, ok := l.favored[src]
	if !ok {
		return false
	}
	if !now.Before(f.until) || f.n <= 0 {
		delete(l.favored, src)
		return false
	}
	if f.n--; f.n == 0 {
		delete(l.favored, src)
	} else {
		l.favored[src] = f
	}
	return true
}

// AdmitFrom is Admit for a connection from addr, honouring Favor.
func (l *Limiter) AdmitFrom(addr net.Addr) (release func(), err error) {
	return l.admit(sourceOf(addr), addr != nil)
}

// Admit takes a handshake slot for a client whose ClientHello has arrived:
// at once if one is free; after a wait if the predicted wait is at most
// HandshakeQueueTarget; otherwise, or if the wait reaches
// HandshakeQueueWait, it returns a *BusyError with the retry-after to
// answer. release gives the slot back when the handshake is over.
func (l *Limiter) Admit() (release func(), err error) { return l.admit(netip.Addr{}, false) }

func (l *Limiter) admit(src netip.Addr, known bool) (release func(), err error) {
	select {
	case l.handshakes <- struct{}{}:
		return l.releaser(), nil
	default:
	}
	now := l.clock.Now()
	l.qmu.Lock()
	l.rollLocked(now)
	l.winWaited = true
	wait := l.waitLocked(l.queued + 1)
	limit := l.cfg.HandshakeQueueTarget
	if known && wait > limit && wait <= l.cfg.HandshakeQueueWait && l.useFavorLocked(src, now) {
		limit = l.cfg.HandshakeQueueWait
		l.favoredQueued.Add(1)
	}
	if l.cfg.HandshakeQueueWait <= 0 || wait > limit {
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
		return l.releaser(), nil
	case <-t.C():
	}
	now = l.clock.Now()
	l.qmu.Lock()
	defer l.qmu.Unlock()
	l.queued--
	l.rollLocked(now)
	return nil, l.deferLocked(now, l.waitLocked(l.queued+1))
}

// finished counts a handshake that gave its slot back.
func (l *Limiter) finished() {
	now := l.clock.Now()
	l.qmu.Lock()
	defer l.qmu.Unlock()
	l.rollLocked(now)
	l.winDone++
}

// rollLocked closes the rate window once it has run: a window in which
// someone waited measures the rate. One that ran far longer than a window
// (the journal was idle for part of it) measures nothing.
func (l *Limiter) rollLocked(now time.Time) {
	el := now.Sub(l.winStart)
	if el < rateWindow {
		return
	}
	if l.winWaited && el < 2*rateWindow {
		measured := max(float64(l.winDone)/el.Seconds(), minRate)
		l.rate = (l.rate + 3*measured) / 4
	}
	l.winStart, l.winDone, l.winWaited = now, 0, l.queued > 0
}

// waitLocked predicts how long the n-th client in the queue waits.
func (l *Limiter) waitLocked(n int) time.Duration {
	return time.Duration(float64(n) / l.rate * float64(time.Second))
}

// deferLocked books the client a place in the reservation schedule and
// returns its busy answer.
func (l *Limiter) deferLocked(now time.Time, wait time.Duration) *BusyError {
	l.deferred.Add(1)
	at := now.Add(wait)
	if l.nextReturn.After(at) {
		at = l.nextReturn
	}
	retry := at.Sub(now)
	if retry >= maxRetryAfter {
		// Past the cap the schedule is not moved on: these clients are
		// beyond what the journal can promise, spread by jitter alone.
		retry = maxRetryAfter
	} else {
		l.nextReturn = at.Add(time.Duration(float64(time.Second) / l.rate))
	}
	return &BusyError{RetryAfter: retry + l.jitter(max(retry/jitterShare, minJitter))}
}
