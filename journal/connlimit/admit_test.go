package connlimit_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/connlimit"
)

const ms = time.Millisecond

func noJitter(time.Duration) time.Duration { return 0 }

// admitLimiter is a limiter on a fake clock with one handshake slot
// (initial rate: 10 handshakes a second, 100 ms each).
func admitLimiter(t *testing.T, fc *fakeclock.Clock, jitter func(time.Duration) time.Duration, mutate func(*connlimit.Config)) *connlimit.Limiter {
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

// A client queues while its predicted wait (clients ahead over the rate)
// is within HandshakeQueueWait; the next is answered busy at once, told to
// come back when the queue ahead of it should be down to half of
// HandshakeQueueWait.
func TestAdmitQueuesWhatItCanServeAndAnswersBusyBeyond(t *testing.T) {
	fc := fakeclock.New(time.Unix(1e9, 0))
	l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.HandshakeQueueWait = 500 * ms })
	held, err := l.Admit()
	if err != nil {
		t.Fatal(err)
	}
	// At 10/s, 100 ms each: five clients fit in 500 ms.
	got := make(chan error, 5)
	for range 5 {
		go func() {
			r, err := l.Admit()
			if err == nil {
				r()
			}
			got <- err
		}()
	}
	if !fc.WaitForTimers(5, 30*time.Second) {
		t.Fatalf("five clients did not queue: %+v", l.Stats())
	}
	if st := l.Stats(); st.Queued != 5 || st.Deferred != 0 {
		t.Fatalf("stats %+v, want 5 queued, none answered busy", st)
	}
	// The sixth would wait 600 ms: busy, come back when 250 ms of queue
	// (half the wait) is left ahead of it.
	_, err = l.Admit()
	if ra := busyAfter(t, err); ra != 350*ms {
		t.Fatalf("retry-after %v, want 350ms (six handshakes at 10/s, less half the queue wait)", ra)
	}
	// The slot freed goes to the queue, one after another.
	held()
	for range 5 {
		if err := <-got; err != nil {
			t.Fatalf("a queued client: %v", err)
		}
	}
	if st := l.Stats(); st.Queued != 0 || st.Handshakes != 0 || st.Deferred != 1 {
		t.Fatalf("stats %+v, want nothing queued or in progress, one busy answer", st)
	}
}

// Busy answers book places in a reservation schedule one handshake time
// (1/rate) apart, so the clients told to wait come back spread at the rate
// the journal serves; past the cap every answer is the cap.
func TestAdmitReservationScheduleSpreadsReturnsAndIsCapped(t *testing.T) {
	fc := fakeclock.New(time.Unix(1e9, 0))
	l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.HandshakeQueueWait = 0 })
	held, err := l.Admit()
	if err != nil {
		t.Fatal(err)
	}
	defer held()
	prev := time.Duration(0)
	capped := 0
	for i := range 700 {
		_, err := l.Admit()
		ra := busyAfter(t, err)
		switch {
		case ra == 60*time.Second:
			capped++
		case capped > 0:
			t.Fatalf("answer %d: %v after the cap was reached", i, ra)
		case i == 0 && ra != 100*ms:
			t.Fatalf("first answer %v, want 100ms (one handshake at 10/s)", ra)
		case i > 0 && ra-prev != 100*ms:
			t.Fatalf("answer %d: %v after %v, want the returns 100ms apart", i, ra, prev)
		}
		prev = ra
	}
	// 0.1 s, 0.2 s ... 59.9 s, then the cap from the 600th on.
	if capped != 101 {
		t.Fatalf("%d answers at the cap, want 101", capped)
	}
	// The schedule is in time, not in answers: a second later the next
	// place is still where it was, a second nearer.
	fc.Advance(time.Second)
	if _, err := l.Admit(); busyAfter(t, err) != 59*time.Second {
		t.Fatalf("a second later: %v, want 59s", err)
	}
	if st := l.Stats(); st.Deferred != 701 {
		t.Fatalf("stats %+v, want 701 busy answers", st)
	}
}

// The jitter is drawn below max(5 % of the retry-after, 20 ms).
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
		base := min(time.Duration(i+1)*100*ms, 60*time.Second)
		if bound := max(base/20, 20*ms); asked[i] != bound || ra != base+bound-1 {
			t.Fatalf("answer %d: %v with jitter drawn below %v, want %v + below %v", i, ra, asked[i], base, bound)
		}
	}
}

// A queued client that reaches HandshakeQueueWait is answered busy, not
// closed silently, and told to come back when half a queue wait is left
// ahead of the back of the queue.
func TestAdmitQueueWaitAnswersBusy(t *testing.T) {
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
	if !fc.WaitForTimers(20, 30*time.Second) {
		t.Fatalf("the clients did not queue: %+v", l.Stats())
	}
	fc.Advance(2 * time.Second)
	// The slot was never freed: all twenty are answered. The first to be
	// answered sees 19 behind it (2 s at 10/s): back in 1 s, when 1 s of
	// queue is left; the rest are booked 100 ms apart after it.
	var ras []time.Duration
	for range 20 {
		ras = append(ras, busyAfter(t, <-got))
	}
	slices.Sort(ras)
	for i, ra := range ras {
		if want := time.Second + time.Duration(i)*100*ms; ra != want {
			t.Fatalf("answers %v: answer %d is %v, want %v", ras, i, ra, want)
		}
	}
	if st := l.Stats(); st.Queued != 0 || st.Deferred != 20 || st.RefusedBusy != 0 {
		t.Fatalf("stats %+v, want twenty busy answers and nothing queued or closed", st)
	}
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
