package connlimit

import (
	"net/netip"
	"sort"
	"sync/atomic"
	"time"
)

// TimingBuckets are the upper bounds of the Timings histograms: from
// 100 µs (a free slot) to the handshake deadline (15 s by default), where
// a storm's queue ends.
var TimingBuckets = []time.Duration{
	100 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 15 * time.Second,
}

// durations is a histogram of durations over TimingBuckets, safe for
// concurrent use without a lock.
type durations struct {
	counts [17]atomic.Uint64 // one per bucket, the last past every bound
	sum    atomic.Int64      // nanoseconds
}

func (h *durations) observe(d time.Duration) {
	d = max(d, 0)
	i := sort.Search(len(TimingBuckets), func(i int) bool { return d <= TimingBuckets[i] })
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// Histogram is a snapshot of one of a Limiter's timing histograms, in the
// shape prometheus.MustNewConstHistogram takes: Buckets holds, for each
// upper bound of TimingBuckets in seconds, the observations at most it.
type Histogram struct {
	Count   uint64
	Sum     float64 // seconds
	Buckets map[float64]uint64
}

func (h *durations) snapshot() Histogram {
	s := Histogram{Buckets: make(map[float64]uint64, len(TimingBuckets))}
	for i, b := range TimingBuckets {
		s.Count += h.counts[i].Load()
		s.Buckets[b.Seconds()] = s.Count
	}
	s.Count += h.counts[len(TimingBuckets)].Load()
	s.Sum = time.Duration(h.sum.Load()).Seconds()
	return s
}

// Timings are where a port's connections spend their time before they are
// served, as histograms since the Limiter was made:
//
//   - SlotWait: from the ClientHello (or, on the Raft port, the accepted
//     connection) to the handshake slot, for every client that got one
//     (0 when one was free); clients answered busy are counted in
//     Stats.Deferred and RefusedBusy instead;
//   - Handshake: how long a TLS handshake held its slot, for those that
//     succeeded;
//   - FirstCall: from the accept to the connection's first call (Call),
//     for connections that made one (the gRPC port: Raft makes no calls).
type Timings struct {
	SlotWait, Handshake, FirstCall Histogram
}

// Timings returns the port's timing histograms.
func (l *Limiter) Timings() Timings {
	return Timings{SlotWait: l.slotWait.snapshot(), Handshake: l.handshakeTime.snapshot(), FirstCall: l.firstCall.snapshot()}
}

// firstCallLocked observes the first call of the connection from key, if
// it is open and has made none yet (under l.mu).
func (l *Limiter) firstCallLocked(key netip.AddrPort) {
	c := l.uncalled[key]
	if c == nil {
		return
	}
	delete(l.uncalled, key)
	l.firstCall.observe(l.clock.Now().Sub(c.accepted))
}
