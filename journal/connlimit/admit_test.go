package connlimit_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/connlimit"
)

const ms = time.Millisecond

func noJitter(time.Duration) time.Duration { return 0 }

// admitLimiter is a limiter on a fake clock with one handshake slot
// (initial rate: 10 handshakes a second, 100 ms each).
// Its cleanup moves the clock past any queue wait, so a failed test's
// queued clients are answered and end rather than deadlock its bubble.
func admitLimiter(t *testing.T, fc *fakeclock.Clock, jitter func(time.Duration) time.Duration, mutate func(*connlimit.Config)) *connlimit.Limiter {
	t.Cleanup(func() { fc.Advance(time.Hour) })
	return newLimiter(t, func(c *connlimit.Config) {
		c.MaxHandshakes = 1
		c.Clock, c.Jitter = fc, jitter
		mutate(c)
	})
}

func busyAfter(t *testing.T, err error) time.Duration {
	t.Helper()
	var busy *connlimit.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, connlimit.ErrHandshakesBusy) {
		t.Fatalf("Admit: %v, want a BusyError", err)
	}
	return busy.RetryAfter
}

// queued says that, once every goroutine of the test's synctest bubble is
// blocked, exactly n clients wait in the queue, each on its queue-wait
// timer: all have queued, and none has been let through or turned away.
func queued(t *testing.T, fc *fakeclock.Clock, l *connlimit.Limiter, n int) {
	t.Helper()
	synctest.Wait()
	if got, st := fc.Timers(), l.Stats(); got != n || st.Queued != n {
		t.Fatalf("%d timers pending, stats %+v; want %d clients queued", got, st, n)
	}
}

// A client queues unless even the fastest rate of the last minute could
// not serve it within HandshakeQueueWait; the next is answered busy at
// once, told to come back (at the present rate) when the queue ahead of it
// should be down to half of HandshakeQueueWait, and no later than
// HandshakeQueueWait.
func TestAdmitQueuesWhatItCouldServeAtItsFastest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := fakeclock.New(time.Unix(1e9, 0))
		l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.HandshakeQueueWait = time.Second })
		// One slow handshake, 1.7 s: the moving mean goes from 100 ms to
		// 200 ms (5/s); the fastest of the last minute stays 100 ms (10/s).
		slow, err := l.Admit()
		if err != nil {
			t.Fatal(err)
		}
		fc.Advance(1700 * ms)
		slow()
		held, err := l.Admit()
		if err != nil {
			t.Fatal(err)
		}
		// At 10/s ten clients could be served within 1 s: they queue.
		got := make(chan error, 10)
		for range 10 {
			go func() {
				r, err := l.Admit()
				if err == nil {
					r()
				}
				got <- err
			}()
		}
		queued(t, fc, l, 10)
		if st := l.Stats(); st.Queued != 10 || st.Deferred != 0 || st.Rate != 5 {
			t.Fatalf("stats %+v, want 10 queued, none answered busy, a rate of 5/s", st)
		}
		// The eleventh could not be served within 1 s even at 10/s: busy.
		// At 5/s it would wait 2.2 s; less half the queue wait, 1.7 s; no
		// later than the queue wait: 1 s.
		_, err = l.Admit()
		if ra := busyAfter(t, err); ra != time.Second {
			t.Fatalf("retry-after %v, want 1s (the queue wait)", ra)
		}
		// The slot freed goes to the queue, one after another.
		held()
		for range 10 {
			if err := <-got; err != nil {
				t.Fatalf("a queued client: %v", err)
			}
		}
		if st := l.Stats(); st.Queued != 0 || st.Handshakes != 0 || st.Deferred != 1 {
			t.Fatalf("stats %+v, want nothing queued or in progress, one busy answer", st)
		}
	})
}

// The fastest rate counts for a minute: after that the present one
// decides who queues.
func TestAdmitForgetsTheFastestRateAfterAMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := fakeclock.New(time.Unix(1e9, 0))
		l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.HandshakeQueueWait = time.Second })
		slow, err := l.Admit()
		if err != nil {
			t.Fatal(err)
		}
		fc.Advance(1700 * ms)
		slow() // mean 200 ms, fastest 100 ms
		fc.Advance(time.Minute)
		r, err := l.Admit()
		if err != nil {
			t.Fatal(err)
		}
		fc.Advance(200 * ms)
		r() // mean 200 ms still; the fastest of the last minute is that
		held, err := l.Admit()
		if err != nil {
			t.Fatal(err)
		}
		defer held()
		// At 5/s five clients could be served within 1 s.
		for range 5 {
			go func() {
				if r, err := l.Admit(); err == nil {
					r()
				}
			}()
		}
		queued(t, fc, l, 5)
		if _, err := l.Admit(); err == nil {
			t.Fatal("a sixth client got a slot")
		} else {
			busyAfter(t, err)
		}
		fc.Advance(time.Second) // the five are answered busy and return
	})
}

// Busy answers book places in a reservation schedule one handshake time
// (1/rate) apart, so the clients told to wait come back spread at the rate
// the journal serves; past the horizon (a minute where nobody queues) they
// are spread uniformly over its second half.
func TestAdmitReservationScheduleSpreadsReturnsUpToTheHorizon(t *testing.T) {
	fc := fakeclock.New(time.Unix(1e9, 0))
	l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.HandshakeQueueWait = 0 })
	held, err := l.Admit()
	if err != nil {
		t.Fatal(err)
	}
	defer held()
	prev := time.Duration(0)
	beyond := 0
	for i := range 700 {
		_, err := l.Admit()
		ra := busyAfter(t, err)
		switch {
		case ra == 30*time.Second && i >= 600:
			beyond++
		case i == 0 && ra != 100*ms:
			t.Fatalf("first answer %v, want 100ms (one handshake at 10/s)", ra)
		case i > 0 && ra-prev != 100*ms:
			t.Fatalf("answer %d: %v after %v, want the returns 100ms apart", i, ra, prev)
		}
		prev = ra
	}
	// 0.1 s, 0.2 s ... 60 s, then the horizon's second half (its lowest
	// draw, with no jitter) from the 601st on.
	if beyond != 100 {
		t.Fatalf("%d answers beyond the horizon, want 100", beyond)
	}
	// The schedule is in time, not in answers: a second later the next
	// place is still where it was, a second nearer.
	fc.Advance(time.Second)
	if _, err := l.Admit(); busyAfter(t, err) != 59100*ms {
		t.Fatalf("a second later: %v, want 59.1s", err)
	}
	if st := l.Stats(); st.Deferred != 701 {
		t.Fatalf("stats %+v, want 701 busy answers", st)
	}
}

// The jitter is drawn below max(5 % of the retry-after, 20 ms), or over
// the horizon's second half.
func TestAdmitJitterBounds(t *testing.T) {
	var asked []time.Duration
	highest := func(n time.Duration) time.Duration { asked = append(asked, n); return n - 1 }
	fc := fakeclock.New(time.Unix(1e9, 0))
	l := admitLimiter(t, fc, highest, func(c *connlimit.Config) { c.HandshakeQueueWait = 0 })
	held, err := l.Admit()
	if err != nil {
		t.Fatal(err)
	}
	defer held()
	for i := range 650 {
		_, err := l.Admit()
		ra := busyAfter(t, err)
		base, bound := time.Duration(i+1)*100*ms, max(time.Duration(i+1)*5*ms, 20*ms)
		if i >= 600 { // past the horizon: uniform over its second half
			base, bound = 30*time.Second, 30*time.Second
		}
		if asked[i] != bound || ra != base+bound-1 {
			t.Fatalf("answer %d: %v with jitter drawn below %v, want %v + below %v", i, ra, asked[i], base, bound)
		}
	}
}

// A queued client that reaches HandshakeQueueWait is answered busy, not
// closed silently, and told to come back when half a queue wait is left
// ahead of the back of the queue.
func TestAdmitQueueWaitAnswersBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := fakeclock.New(time.Unix(1e9, 0))
		l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.HandshakeQueueWait = 2 * time.Second })
		held, err := l.Admit()
		if err != nil {
			t.Fatal(err)
		}
		defer held()
		got := make(chan error, 20)
		for range 20 {
			go func() {
				_, err := l.Admit()
				got <- err
			}()
		}
		queued(t, fc, l, 20)
		fc.Advance(2 * time.Second)
		// The slot was never freed: all twenty are answered. The first to be
		// answered sees 19 behind it (2 s at 10/s): back in 1 s, when 1 s of
		// queue is left; the next ten are booked 100 ms apart after it, up to
		// the horizon (2 s); the last nine are drawn over 1-2 s (the lowest
		// draw here, no jitter).
		var ras []time.Duration
		for range 20 {
			ras = append(ras, busyAfter(t, <-got))
		}
		slices.Sort(ras)
		var want []time.Duration
		for range 9 {
			want = append(want, time.Second)
		}
		for i := range 11 {
			want = append(want, time.Second+time.Duration(i)*100*ms)
		}
		if !slices.Equal(ras, want) {
			t.Fatalf("answers %v, want %v", ras, want)
		}
		if st := l.Stats(); st.Queued != 0 || st.Deferred != 20 || st.RefusedBusy != 0 {
			t.Fatalf("stats %+v, want twenty busy answers and nothing queued or closed", st)
		}
	})
}

// The rate is Little's law over the slots: MaxHandshakes over the moving
// mean of how long a handshake held its slot (1/16 per handshake).
func TestAdmitRateFromHowLongHandshakesHoldTheirSlot(t *testing.T) {
	fc := fakeclock.New(time.Unix(1e9, 0))
	l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.HandshakeQueueWait = 0 })
	if st := l.Stats(); st.Rate != 10 {
		t.Fatalf("rate before any handshake %v, want 10 (one slot, 100 ms)", st.Rate)
	}
	r, err := l.Admit()
	if err != nil {
		t.Fatal(err)
	}
	fc.Advance(1700 * ms)
	r()
	r() // a second release counts nothing
	// 100 ms + (1700 - 100) ms / 16 = 200 ms: 5 a second.
	if st := l.Stats(); st.Rate != 5 {
		t.Fatalf("rate %v, want 5", st.Rate)
	}
	// The rate sizes the answers: one handshake at 5/s.
	r, _ = l.Admit()
	defer r()
	if _, err := l.Admit(); busyAfter(t, err) != 200*ms {
		t.Fatalf("retry-after %v, want 200ms", err)
	}
	// Fast handshakes raise it again, down to a floor of 1 ms each.
	l2 := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.HandshakeQueueWait = 0 })
	for range 200 {
		r, err := l2.Admit()
		if err != nil {
			t.Fatal(err)
		}
		r()
	}
	if st := l2.Stats(); st.Rate != 1000 {
		t.Fatalf("rate after instant handshakes %v, want 1000 (the 1 ms floor)", st.Rate)
	}
}

// serveQueued queues n clients behind the slot released by release and
// serves them one after another, each holding the slot for each: the port
// is saturated throughout. ok says whether the i-th handshake succeeded. It
// returns the release of the last, which still holds the slot.
func serveQueued(t *testing.T, fc *fakeclock.Clock, l *connlimit.Limiter, release func(bool), n int, each time.Duration, ok func(i int) bool) func(bool) {
	t.Helper()
	slots := make(chan func(bool), n)
	for range n {
		go func() {
			r, err := l.AdmitReporting()
			if err != nil {
				t.Errorf("a queued client: %v", err)
				return
			}
			slots <- r
		}()
	}
	queued(t, fc, l, n)
	for i := range n {
		fc.Advance(each)
		release(ok(i))
		release = <-slots
	}
	return release
}

func always(int) bool { return true }

// servedAt20WithAFullQueue makes l (one slot, a 12 s queue wait) serve 110
// queued handshakes of 50 ms each, five seconds of 20 a second, then queues
// as many clients as the fastest handshake of the last minute (50 ms)
// serves within the wait (239), so that the next is answered busy at once.
// It returns the release of the slot still held and the stats after the
// 110.
func servedAt20WithAFullQueue(t *testing.T, fc *fakeclock.Clock, l *connlimit.Limiter) (func(bool), connlimit.Stats) {
	t.Helper()
	held, err := l.AdmitReporting()
	if err != nil {
		t.Fatal(err)
	}
	held = serveQueued(t, fc, l, held, 110, 50*ms, always)
	st := l.Stats()
	if st.ServedRate != 20 {
		t.Fatalf("stats %+v, want a served rate of 20/s", st)
	}
	for range 239 {
		go func() {
			if r, err := l.Admit(); err == nil {
				r()
			}
		}()
	}
	queued(t, fc, l, 239)
	return held, st
}

// Past HandshakeQueueWait, returns are booked at four times the best rate
// the port served while clients queued (here 20 a second: 12.5 ms apart),
// up to MaxRetryAfter; past that, over its second half.
func TestAdmitBooksPastTheQueueWaitAtFourTimesTheServedRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := fakeclock.New(time.Unix(1e9, 0))
		l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) {
			c.HandshakeQueueWait = 12 * time.Second
			c.MaxRetryAfter = 30 * time.Second
		})
		held, st := servedAt20WithAFullQueue(t, fc, l)
		defer held(true)
		near := time.Duration(float64(time.Second) / st.Rate)
		var ras []time.Duration
		for range 1800 {
			_, err := l.Admit()
			ras = append(ras, busyAfter(t, err))
		}
		const tolerance, far = time.Microsecond, 12500 * time.Microsecond
		pastNear, beyond := 0, 0
		for i := 1; i < len(ras); i++ {
			prev, ra := ras[i-1], ras[i]
			switch {
			case beyond > 0 || (ra == 15*time.Second && prev >= 30*time.Second-far):
				if ra != 15*time.Second {
					t.Fatalf("answer %d: %v past the horizon, want 15s (the lowest draw over its second half)", i, ra)
				}
				beyond++
			case prev < 12*time.Second:
				if d := ra - prev; d < near-tolerance || d > near+tolerance {
					t.Fatalf("answer %d: %v after %v, want %v apart (the present rate) within the queue wait", i, ra, prev, near)
				}
			default:
				pastNear++
				if d := ra - prev; d < far-tolerance || d > far+tolerance {
					t.Fatalf("answer %d: %v after %v, want %v apart (four times the served rate) past the queue wait", i, ra, prev, far)
				}
			}
		}
		// From the first place past 12 s to 30 s at 12.5 ms: about 1,440
		// places, then the horizon's second half.
		if pastNear < 1434 || pastNear > 1440 || beyond == 0 || ras[len(ras)-1] != 15*time.Second {
			t.Fatalf("%d answers booked past the queue wait, %d beyond the horizon (last %v); want about 1440, then 15s", pastNear, beyond, ras[len(ras)-1])
		}
		fc.Advance(12 * time.Second) // the queued are answered busy and return
	})
}

// A source's first NearAnswers busy answers in a row name no more than
// the queue wait, wherever the schedule stands: a storm the queue carries
// is not booked ahead on a rate measured in its first seconds. Its next
// answer takes the next place past the queue wait; a slot starts its count
// again.
func TestAdmitBooksPastTheQueueWaitOnlyAfterNearAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := fakeclock.New(time.Unix(1e9, 0))
		l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) {
			c.HandshakeQueueWait = 12 * time.Second
			c.MaxRetryAfter = 30 * time.Second
			c.NearAnswers = 2
		})
		held, _ := servedAt20WithAFullQueue(t, fc, l)
		// Fill the schedule up to the queue wait with first answers, each
		// from a source of its own: none is booked past it.
		addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }
		for i := range 400 {
			_, err := l.AdmitFrom(addr(i))
			if ra := busyAfter(t, err); ra > 12*time.Second {
				t.Fatalf("a first answer (%d): %v, past the 12s queue wait", i, ra)
			}
		}
		node := netip.MustParseAddr("10.9.9.9")
		for i := range 2 {
			_, err := l.AdmitFrom(node)
			if ra := busyAfter(t, err); ra != 6*time.Second {
				t.Fatalf("answer %d to one source: %v, want 6s (the schedule is full: the lowest draw over the queue wait's second half)", i+1, ra)
			}
		}
		_, err := l.AdmitFrom(node)
		third := busyAfter(t, err)
		if third <= 12*time.Second || third > 12*time.Second+100*ms {
			t.Fatalf("third answer in a row: %v, want the first place past the 12s queue wait", third)
		}
		_, err = l.AdmitFrom(node)
		if ra := busyAfter(t, err); ra != third+12500*time.Microsecond {
			t.Fatalf("fourth answer: %v, want the next place, 12.5ms (four times the served rate) after %v", ra, third)
		}
		if n := l.BusyInARow(node); n != 4 {
			t.Fatalf("%d busy answers in a row counted, want 4", n)
		}
		// Served: the count starts again.
		held(true)
		synctest.Wait() // the 239 queued take the slot in turn and leave
		r, err := l.AdmitFrom(node)
		if err != nil {
			t.Fatalf("a free slot: %v", err)
		}
		r()
		if n := l.BusyInARow(node); n != 0 {
			t.Fatalf("%d busy answers in a row counted after a slot, want 0", n)
		}
	})
}

// With MaxRetryAfter 0 nothing is booked past the queue wait, a
// served rate or not: past it, answers are drawn over its second half.
func TestAdmitBooksNothingPastTheQueueWaitByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := fakeclock.New(time.Unix(1e9, 0))
		l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) {
			c.HandshakeQueueWait = 12 * time.Second
			c.MaxRetryAfter = 0
		})
		held, _ := servedAt20WithAFullQueue(t, fc, l)
		defer held(true)
		for i := range 600 {
			_, err := l.Admit()
			if ra := busyAfter(t, err); ra > 12*time.Second {
				t.Fatalf("answer %d: %v, past the 12s queue wait", i, ra)
			}
		}
		if _, err := l.Admit(); busyAfter(t, err) != 6*time.Second {
			t.Fatalf("answer past the schedule: %v, want 6s (the lowest draw over the queue wait's second half)", err)
		}
		fc.Advance(12 * time.Second)
	})
}

// The served rate counts only handshakes that succeeded, over five
// seconds in which clients queued whenever one ended, and is forgotten a
// minute after it was last matched.
func TestAdmitServedRateOnlyFromSuccessesWhileClientsQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := fakeclock.New(time.Unix(1e9, 0))
		l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.HandshakeQueueWait = 14 * time.Second })
		// 200 handshakes of 40 ms, one after another, nobody waiting: the
		// clients' pace, not the CPU's.
		for range 200 {
			r, err := l.Admit()
			if err != nil {
				t.Fatal(err)
			}
			fc.Advance(40 * ms)
			r()
		}
		if st := l.Stats(); st.ServedRate != 0 {
			t.Fatalf("stats %+v, want no served rate without a queue", st)
		}
		// 300 handshakes of 40 ms with clients queued, every other one
		// failing (a client that gave up while it queued): about 12.5
		// served a second (63 in the one whole window of five seconds),
		// not 25.
		held, err := l.AdmitReporting()
		if err != nil {
			t.Fatal(err)
		}
		held = serveQueued(t, fc, l, held, 300, 40*ms, func(i int) bool { return i%2 == 0 })
		fc.Advance(40 * ms)
		held(true)
		if st := l.Stats(); st.ServedRate < 12 || st.ServedRate > 13 {
			t.Fatalf("stats %+v, want a served rate of about 12.5/s", st)
		}
		fc.Advance(fastestWindow + time.Second)
		if st := l.Stats(); st.ServedRate != 0 {
			t.Fatalf("stats %+v a minute later, want the served rate forgotten", st)
		}
	})
}

const fastestWindow = time.Minute
