package connlimit_test

import (
	"errors"
	"net"
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
// is within the target; the next is answered busy at once, told to come
// back when the queue ahead of it should be done.
func TestAdmitQueuesShortWaitsAndAnswersBusyBeyond(t *testing.T) {
	fc := fakeclock.New(time.Unix(1e9, 0))
	l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.HandshakeQueueTarget = 500 * ms })
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
	// The sixth would wait 600 ms: busy, come back in 600 ms.
	_, err = l.Admit()
	if ra := busyAfter(t, err); ra != 600*ms {
		t.Fatalf("retry-after %v, want 600ms (six handshakes at 10/s)", ra)
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
	l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.HandshakeQueueTarget = 0 })
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
	l := admitLimiter(t, fc, highest, func(c *connlimit.Config) { c.HandshakeQueueTarget = 0 })
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

// A queued client that reaches the hard bound (HandshakeQueueWait) is
// answered busy, not closed silently.
func TestAdmitHardBoundAnswersBusy(t *testing.T) {
	fc := fakeclock.New(time.Unix(1e9, 0))
	l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) {
		c.HandshakeQueueTarget, c.HandshakeQueueWait = time.Second, 2*time.Second
	})
	held, err := l.Admit()
	if err != nil {
		t.Fatal(err)
	}
	defer held()
	got := make(chan error, 1)
	go func() {
		_, err := l.Admit()
		got <- err
	}()
	if !fc.WaitForTimers(1, 30*time.Second) {
		t.Fatal("the client did not queue")
	}
	fc.Advance(2 * time.Second)
	if ra := busyAfter(t, <-got); ra != 100*ms {
		t.Fatalf("retry-after %v, want 100ms (the queue is empty again; one handshake at 10/s)", ra)
	}
	if st := l.Stats(); st.Queued != 0 || st.Deferred != 1 || st.RefusedBusy != 0 {
		t.Fatalf("stats %+v, want one busy answer and nothing queued or closed", st)
	}
}

// The rate is measured in windows during which clients waited, and only
// then: an idle journal's rate says nothing about its capacity.
func TestAdmitMeasuresTheRateWhileSaturated(t *testing.T) {
	fc := fakeclock.New(time.Unix(1e9, 0))
	l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.HandshakeQueueTarget = 0 })
	r, err := l.Admit()
	if err != nil {
		t.Fatal(err)
	}
	// Someone waits: this window measures.
	if _, err := l.Admit(); err == nil {
		t.Fatal("a second client got the only slot")
	}
	// Five handshakes in the window, 150 ms each; the sixth, as the window
	// closes, counts in the next.
	for range 5 {
		fc.Advance(150 * ms)
		r()
		if r, err = l.Admit(); err != nil {
			t.Fatal(err)
		}
	}
	fc.Advance(250 * ms)
	r()
	// 10/s before, 5/s measured: (10 + 3*5)/4.
	if st := l.Stats(); st.Rate != 6.25 {
		t.Fatalf("rate %v, want 6.25", st.Rate)
	}
	// A window in which nobody waited leaves the rate alone.
	for range 10 {
		fc.Advance(150 * ms)
		r, err := l.Admit()
		if err != nil {
			t.Fatal(err)
		}
		r()
	}
	if st := l.Stats(); st.Rate != 6.25 {
		t.Fatalf("rate %v after an unsaturated window, want 6.25 still", st.Rate)
	}
	// The measured rate sizes the answers: one handshake at 6.25/s.
	r, _ = l.Admit()
	defer r()
	fc.Advance(10 * time.Second) // past the old schedule
	if _, err := l.Admit(); busyAfter(t, err) != 160*ms {
		t.Fatalf("retry-after %v, want 160ms", err)
	}
}

// A source that has just enrolled (Favor) queues for a predicted wait up
// to the hard bound instead of the target, once per enrollment, for a few
// seconds; others, and it again, are answered busy.
func TestAdmitFavorsASourceThatJustEnrolled(t *testing.T) {
	fc := fakeclock.New(time.Unix(1e9, 0))
	l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) {
		c.HandshakeQueueTarget, c.HandshakeQueueWait = 0, 2*time.Second
	})
	agent := &net.TCPAddr{IP: net.ParseIP("10.0.0.7"), Port: 40000}
	stranger := &net.TCPAddr{IP: net.ParseIP("10.0.0.8"), Port: 40000}
	held, err := l.Admit()
	if err != nil {
		t.Fatal(err)
	}
	l.Favor(&net.TCPAddr{IP: net.ParseIP("10.0.0.7"), Port: 39999}) // its Enroll's connection
	if _, err := l.AdmitFrom(stranger); err == nil {
		t.Fatal("a stranger was queued with a queue target of 0")
	} else {
		busyAfter(t, err)
	}
	// The agent's channel connection queues and gets the slot freed.
	got := make(chan error, 1)
	go func() {
		r, err := l.AdmitFrom(agent)
		if err == nil {
			r()
		}
		got <- err
	}()
	if !fc.WaitForTimers(1, 30*time.Second) {
		t.Fatalf("the enrolled source was not queued: %+v", l.Stats())
	}
	held()
	if err := <-got; err != nil {
		t.Fatalf("the enrolled source: %v", err)
	}
	// Spent: its next connection is answered busy like any other.
	held, err = l.Admit()
	if err != nil {
		t.Fatal(err)
	}
	defer held()
	if _, err := l.AdmitFrom(agent); err == nil {
		t.Fatal("one enrollment favoured two connections")
	}
	// A favour lasts a few seconds.
	l.Favor(agent)
	fc.Advance(6 * time.Second)
	if _, err := l.AdmitFrom(agent); err == nil {
		t.Fatal("a favour outlived its window")
	}
	// And never beyond the hard bound: a predicted wait past it is
	// answered busy, keeping the favour.
	l2 := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) {
		c.HandshakeQueueTarget, c.HandshakeQueueWait = 0, 50*ms // below one handshake at 10/s
	})
	r2, err := l2.Admit()
	if err != nil {
		t.Fatal(err)
	}
	defer r2()
	l2.Favor(agent)
	if _, err := l2.AdmitFrom(agent); err == nil {
		t.Fatal("favoured past the hard bound")
	}
	if st := l.Stats(); st.Favored != 1 {
		t.Fatalf("stats %+v, want one favoured client", st)
	}
}
