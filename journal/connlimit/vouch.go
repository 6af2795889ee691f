package connlimit

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Vouching: the limiter sees no certificate (the handshake is verified
// above it, and the calls are authenticated above that), so the caller
// tells it, after each call it authenticated as a principal of the domain
// (an agent bound to its registry certificate, a recorded operator, a
// peer journal by Raft's records), where the call came from. Only then is
// "this address proved itself" safe to reward: a handshake without a
// certificate, which anyone can complete, buys nothing.

// Vouch records that a call from addr (a connection's remote address, as
// gRPC's peer.Addr gives it) was authenticated, at the limiter's clock:
// the connection is proven (never evicted), and its source address is
// vouched for, for VouchFor.
func (l *Limiter) Vouch(addr net.Addr) {
	if l.cfg.VouchFor > 0 {
		l.vouches.add(sourceOf(addr), l.clock.Now())
	}
	key := addrPortOf(addr)
	if !key.IsValid() {
		return
	}
	l.mu.Lock()
	if c := l.byAddr[key]; c != nil {
		l.untrackLocked(c)
	}
	l.mu.Unlock()
}

// Call tells the limiter of a call on the connection from addr:
// authenticated (a principal of the domain; Vouch), or not (a public
// call, Enroll). A connection with a call under way is not idle; done,
// called when the call is over, starts its idle time again.
//
// The connection's first call is timed from its accept (Timings.FirstCall).
func (l *Limiter) Call(addr net.Addr, authenticated bool) (done func()) {
	if key := addrPortOf(addr); key.IsValid() {
		l.mu.Lock()
		l.firstCallLocked(key)
		l.mu.Unlock()
	}
	if authenticated {
		l.Vouch(addr)
		return func() {}
	}
	key := addrPortOf(addr)
	if !key.IsValid() || l.cfg.ProveWithin <= 0 {
		return func() {}
	}
	l.mu.Lock()
	c := l.byAddr[key]
	if c == nil {
		l.mu.Unlock()
		return func() {}
	}
	if c.list == &l.idle {
		l.idle.remove(c)
	}
	c.calls++
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			now := l.clock.Now()
			l.mu.Lock()
			defer l.mu.Unlock()
			if c.calls--; c.calls == 0 && c.tracked && c.list == nil {
				c.idleSince = now
				l.idle.push(c)
			}
		})
	}
}

// vouched reports whether src is vouched for now.
func (l *Limiter) vouched(src netip.Addr) bool {
	if l.cfg.VouchFor <= 0 {
		return false
	}
	return l.vouches.has(src, l.clock.Now(), l.cfg.VouchFor)
}

// vouches are the addresses vouched for and when, in two generations: an
// address is added to the newer, moving from the older if it is there;
// when the newer holds half of MaxVouched, it becomes the older and the older is
// dropped. So at most MaxVouched are held, and the least recently vouched go
// first, without a list threaded through the entries (an entry costs a
// map slot: about 48 bytes).
type vouches struct {
	mu       sync.Mutex
	cur, old map[netip.Addr]int64 // Unix nanoseconds at the vouch
	half     int
}

func newVouches(most int) vouches {
	return vouches{cur: map[netip.Addr]int64{}, old: map[netip.Addr]int64{}, half: max(most/2, 1)}
}

func (v *vouches) add(src netip.Addr, now time.Time) {
	at := now.UnixNano()
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.cur[src]; ok {
		v.cur[src] = at
		return
	}
	delete(v.old, src)
	if len(v.cur) >= v.half {
		v.old, v.cur = v.cur, make(map[netip.Addr]int64, len(v.cur))
	}
	v.cur[src] = at
}

func (v *vouches) has(src netip.Addr, now time.Time, vouchFor time.Duration) bool {
	since := now.Add(-vouchFor).UnixNano()
	v.mu.Lock()
	defer v.mu.Unlock()
	at, ok := v.cur[src]
	if !ok {
		at, ok = v.old[src]
	}
	return ok && at > since
}

// live counts the addresses vouched for now: a pass over every entry, for
// metrics.
func (v *vouches) live(now time.Time, vouchFor time.Duration) int {
	if vouchFor <= 0 {
		return 0
	}
	since := now.Add(-vouchFor).UnixNano()
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, m := range []map[netip.Addr]int64{v.cur, v.old} {
		for _, at := range m {
			if at > since {
				n++
			}
		}
	}
	return n
}
