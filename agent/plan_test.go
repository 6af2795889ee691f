package agent

import (
	"testing"
	"time"
)

// plan decides each step's action from facts alone: these are its
// decisions, one row each, at and around their boundaries.
func TestPlan(t *testing.T) {
	t0 := time.Date(2026, 3, 17, 12, 0, 0, 0, time.UTC)
	// A journal-signed certificate of three hours, renewed at 2/3 of its
	// life without jitter: at t0+2h exactly.
	notBefore, notAfter := t0, t0.Add(3*time.Hour)
	twoThirds := renewalAt(notBefore, notAfter, 2.0/3, 0)
	if !twoThirds.Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("renewalAt(2/3 of 3h) = %v, want t0+2h", twoThirds.Sub(t0))
	}
	renewing := func(f facts) facts {
		f.alive, f.renewing = true, true
		f.renew.at, f.renew.minInterval = twoThirds, time.Minute
		return f
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	backoff := func(attempt int, until time.Time) retry { return retry{attempt: attempt, notBefore: until} }
	var connectDone, renewDone actions
	connectDone.add(actConnect)
	renewDone.add(actRenew)

	for _, tc := range []struct {
		name string
		now  time.Time
		f    facts
		want action
		next time.Time // when want is actNone
	}{
		// No stream: connect, reconnect with backoff.
		{"no stream, connect never tried: connect", at(0), facts{}, actConnect, time.Time{}},
		{"no stream, connect backing off: wait for it", at(0), facts{connect: backoff(2, at(5*time.Second))}, actNone, at(5 * time.Second)},
		{"no stream, connect backoff ends now: reconnect", at(5 * time.Second), facts{connect: backoff(2, at(5*time.Second))}, actConnect, time.Time{}},
		{"no stream, a busy journal named a time: wait for it", at(0), facts{connect: retry{notBefore: at(3 * time.Second), busy: true}}, actNone, at(3 * time.Second)},
		{"connect found nothing to try, no enrollment needed: wait for a signal", at(0), facts{done: connectDone}, actNone, time.Time{}},
		// Enrollment, after connect in the step's order.
		{"nothing to connect with, enrollment due: enroll", at(0), facts{done: connectDone, needEnroll: true}, actEnroll, time.Time{}},
		{"enrollment backing off: wait for it, not for the connect", at(0), facts{done: connectDone, needEnroll: true, enroll: backoff(3, at(time.Minute))}, actNone, at(time.Minute)},
		{"connect and enrollment both backing off: the sooner", at(0), facts{connect: backoff(1, at(20*time.Second)), needEnroll: true, enroll: backoff(1, at(10*time.Second))}, actNone, at(10 * time.Second)},
		// Renewal at 2/3 of the life.
		{"renewal at 55% of the life: not yet", at(99 * time.Minute), renewing(facts{}), actNone, twoThirds},
		{"renewal a nanosecond before 2/3: not yet", twoThirds.Add(-1), renewing(facts{}), actNone, twoThirds},
		{"renewal exactly at 2/3: renew", twoThirds, renewing(facts{}), actRenew, time.Time{}},
		{"renewal past 2/3: renew", at(150 * time.Minute), renewing(facts{}), actRenew, time.Time{}},
		{"renewal jittered 5 minutes past 2/3: not at 2/3", twoThirds,
			func() facts {
				f := renewing(facts{})
				f.renew.at = renewalAt(notBefore, notAfter, 2.0/3, 5*time.Minute)
				return f
			}(), actNone, twoThirds.Add(5 * time.Minute)},
		{"renewal asked for now: renew at once", at(time.Hour), func() facts { f := renewing(facts{}); f.renew.now = true; return f }(), actRenew, time.Time{}},
		{"renewal asked for now, 30s after an attempt: MinRenewInterval", at(time.Hour),
			func() facts {
				f := renewing(facts{})
				f.renew.now, f.renew.last = true, at(time.Hour-30*time.Second)
				return f
			}(), actNone, at(time.Hour + 30*time.Second)},
		{"renewal due, backing off: wait for the backoff", twoThirds,
			func() facts { f := renewing(facts{}); f.renew.retry = backoff(1, twoThirds.Add(time.Minute)); return f }(), actNone, twoThirds.Add(time.Minute)},
		{"renewal done this step: not again, and no time of its own", twoThirds, func() facts { f := renewing(facts{}); f.done = renewDone; return f }(), actNone, time.Time{}},
		{"renewal due but no stream: connect first", twoThirds, func() facts { f := renewing(facts{}); f.alive = false; return f }(), actConnect, time.Time{}},
		// A live stream: no connect, whatever its retry says.
		{"stream alive, connect retry pending: nothing", at(0), facts{alive: true, connect: backoff(1, at(-time.Second))}, actNone, time.Time{}},
		// Moves come before renewals.
		{"better identity and renewal due: move first", twoThirds, func() facts { f := renewing(facts{}); f.moveTo = true; return f }(), actMove, time.Time{}},
		{"move backing off, renewal due: renew", twoThirds, func() facts {
			f := renewing(facts{})
			f.moveTo, f.upgrade = true, backoff(1, twoThirds.Add(time.Second))
			return f
		}(), actRenew, time.Time{}},
		{"move backing off: wait for it", at(0), facts{alive: true, moveTo: true, upgrade: backoff(2, at(4*time.Second))}, actNone, at(4 * time.Second)},
		// The standby on an SVID.
		{"SVID, standby due: obtain it", at(0), facts{alive: true, standby: true}, actStandby, time.Time{}},
		{"SVID, standby later, given up sooner: wake at the give-up", at(0), facts{alive: true, standby: true, standbyAt: at(time.Hour), giveUpAt: at(10 * time.Minute)}, actNone, at(10 * time.Minute)},
		{"SVID, give-up passed: the standby's time only", at(0), facts{alive: true, standby: true, standbyAt: at(time.Hour), giveUpAt: at(-time.Minute)}, actNone, at(time.Hour)},
		// Identity files last.
		{"files pending: write them", at(0), facts{alive: true, files: true}, actFiles, time.Time{}},
		{"files failed: retry at their backoff", at(0), facts{alive: true, files: true, filesRetry: backoff(1, at(2*time.Second))}, actNone, at(2 * time.Second)},
		{"files pending, renewal due: renew first", twoThirds, func() facts { f := renewing(facts{}); f.files = true; return f }(), actRenew, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, next := plan(tc.now, tc.f)
			if got != tc.want {
				t.Fatalf("plan = %v, want %v", got, tc.want)
			}
			if got != actNone {
				if !next.Equal(tc.now) {
					t.Errorf("next = %v for an action, want now", next)
				}
				return
			}
			if !next.Equal(tc.next) {
				t.Errorf("next = %v, want %v", next, tc.next)
			}
		})
	}
}

// The renewal time is fraction of the way through the life plus the
// jitter, never less.
func TestRenewalAt(t *testing.T) {
	t0 := time.Date(2026, 3, 17, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		life     time.Duration
		fraction float64
		jitter   time.Duration
		want     time.Duration
	}{
		{72 * time.Hour, 2.0 / 3, 0, 48 * time.Hour},
		{72 * time.Hour, 2.0 / 3, time.Hour, 49 * time.Hour},
		{3 * time.Hour, 0.5, 0, 90 * time.Minute},
		{time.Hour, 2.0 / 3, 0, 40 * time.Minute},
	} {
		if got := renewalAt(t0, t0.Add(tc.life), tc.fraction, tc.jitter).Sub(t0); got != tc.want {
			t.Errorf("renewalAt(life %v, %v, jitter %v) = t0+%v, want t0+%v", tc.life, tc.fraction, tc.jitter, got, tc.want)
		}
	}
}

// After a stream's end (not a final refusal, which stops the agent), the
// agent reconnects at once the first time, with backoff when the stream
// before did not last either, and not before the time a busy journal
// named for the move the reconnect replaces.
func TestReconnectAfter(t *testing.T) {
	t0 := time.Date(2026, 3, 17, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	backoff := func(attempt int) time.Duration { return time.Duration(attempt) * 2 * time.Second }
	for _, tc := range []struct {
		name     string
		connect  retry
		moveWait time.Time
		want     retry
	}{
		{"first end: at once", retry{}, time.Time{}, retry{attempt: 1, notBefore: t0}},
		{"the stream before did not last: backoff", retry{attempt: 1, notBefore: at(-time.Minute)}, time.Time{}, retry{attempt: 2, notBefore: at(2 * time.Second)}},
		{"third end in a row: the backoff grows", retry{attempt: 2}, time.Time{}, retry{attempt: 3, notBefore: at(4 * time.Second)}},
		{"a busy connect's time is not kept", retry{attempt: 2, notBefore: at(time.Hour), busy: true}, time.Time{}, retry{attempt: 3, notBefore: at(4 * time.Second)}},
		{"a move waiting for a busy journal, later: wait for it", retry{}, at(30 * time.Second), retry{attempt: 1, notBefore: at(30 * time.Second), busy: true}},
		{"a move waiting for a busy journal, sooner than the backoff: the backoff", retry{attempt: 2}, at(time.Second), retry{attempt: 3, notBefore: at(4 * time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			got := reconnectAfter(t0, tc.connect, func(n int) time.Duration { asked = true; return backoff(n) }, tc.moveWait)
			if got != tc.want {
				t.Errorf("reconnectAfter = %+v, want %+v", got, tc.want)
			}
			if asked != (tc.connect.attempt > 0) {
				t.Errorf("backoff asked = %v with %d attempts before: it is drawn only after a stream that did not last", asked, tc.connect.attempt)
			}
		})
	}

	// The connect backoff is forgotten once a channel has lasted the
	// stable time, not a nanosecond sooner.
	if connectSettled(at(time.Minute-1), t0, time.Minute) {
		t.Error("settled a nanosecond before the stable time")
	}
	if !connectSettled(at(time.Minute), t0, time.Minute) {
		t.Error("not settled at the stable time")
	}
}
