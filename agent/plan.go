// The loop's decision, apart from its actions: plan is a pure function of
// now and the facts a step gathered (step, loop.go), as SPIRE's rotation
// decisions are. The step acts on what plan chose, judges the outcome
// (outcomeOf), and asks plan again for what remains, until plan says
// nothing is due.

package agent

import "time"

// action is one kind of attempt a step makes, in the order a step
// considers them; actNone is none.
type action uint8

const (
	// actNone: nothing is due; look again at next (zero: only on a
	// signal: a provider's change, the stream's end, a wake).
	actNone action = iota
	// actConnect: no stream lives: connect with the best identity that
	// works.
	actConnect
	// actEnroll: no journal-signed identity, and no live channel but one
	// on the bootstrap identity: enroll.
	actEnroll
	// actMove: move the live channel to a better, renewed or rotated
	// identity, or away from one its provider gave up.
	actMove
	// actStandby: on an SVID, obtain or renew the journal-signed standby.
	actStandby
	// actRenew: renew the journal-signed certificate the live channel
	// presents.
	actRenew
	// actFiles: write the identity files.
	actFiles
)

func (a action) String() string {
	switch a {
	case actConnect:
		return "connect"
	case actEnroll:
		return "enroll"
	case actMove:
		return "move"
	case actStandby:
		return "standby"
	case actRenew:
		return "renew"
	case actFiles:
		return "files"
	}
	return "none"
}

// actions is a set of actions.
type actions uint8

func (s actions) has(a action) bool { return s&(1<<a) != 0 }
func (s *actions) add(a action)     { *s |= 1 << a }

// facts is what plan decides from, as the step found it. A zero time is
// "none".
type facts struct {
	// done are the actions this step took already: plan does not choose
	// them again, nor look at when they are due (the step noted that
	// itself after acting).
	done actions

	// alive: the active channel's stream lives.
	alive bool
	// connect is the connect retry, for when no stream lives.
	connect retry

	// needEnroll: there is no journal-signed identity, and no live
	// channel but one on the bootstrap identity (needEnroll).
	needEnroll bool
	enroll     retry

	// moveTo: an identity the live channel should move to exists
	// (wanted); upgrade is that move's retry.
	moveTo  bool
	upgrade retry

	// standby: the live channel presents an SVID, so the agent keeps a
	// journal-signed standby, due at standbyAt (zero: at once).
	standby   bool
	standbyAt time.Time
	// giveUpAt is when the SVID is to be given up, if still ahead.
	giveUpAt time.Time

	// renewing: the live channel presents a journal-signed certificate
	// whose renewal has not been answered yet.
	renewing bool
	renew    renewFacts

	// files: the identity files do not hold the live identity yet.
	files      bool
	filesRetry retry
}

// renewFacts are what decides when the live journal-signed certificate
// is renewed.
type renewFacts struct {
	// at is the certificate's renewal time: RenewAt of its life, plus its
	// jitter (renewalTime), chosen once per certificate.
	at time.Time
	// now: a journal (its intermediate is being retired) or RenewNow
	// asked for a renewal at once.
	now bool
	// last is the latest renewal attempt (zero: none since the agent
	// started or rebased its clock); minInterval keeps attempts that far
	// apart.
	last        time.Time
	minInterval time.Duration
	// retry is the renewal's backoff.
	retry retry
}

// due is when the renewal is due: at its time (at once when asked), but
// not within minInterval of the previous attempt, nor before its backoff
// ends.
func (r renewFacts) due(now time.Time) time.Time {
	due := r.at
	if r.now {
		due = now
	}
	if !r.last.IsZero() {
		due = latest(due, r.last.Add(r.minInterval))
	}
	return latest(due, r.retry.notBefore)
}

// renewalAt is fraction of the way from notBefore to notAfter, plus
// jitter: when a certificate of that life is renewed.
func renewalAt(notBefore, notAfter time.Time, fraction float64, jitter time.Duration) time.Time {
	return notBefore.Add(time.Duration(float64(notAfter.Sub(notBefore))*fraction) + jitter)
}

// plan decides what a step does now: the first action, in the step's
// order, that applies, is not done and is due. When none is, it returns
// actNone and when the first of those that apply comes due (zero: none
// has a time; only a signal wakes the loop). A connect that never failed
// has no time to wait for: it waits for an identity (an enrollment, a
// provider's change).
func plan(now time.Time, f facts) (action, time.Time) {
	var next soonest
	if !f.done.has(actConnect) && !f.alive {
		if f.connect.due(now) {
			return actConnect, now
		}
		if f.connect.attempt > 0 || f.connect.busy {
			next.at(f.connect.notBefore)
		}
	}
	if !f.done.has(actEnroll) && f.needEnroll {
		if f.enroll.due(now) {
			return actEnroll, now
		}
		next.at(f.enroll.notBefore)
	}
	if !f.done.has(actMove) && f.alive && f.moveTo {
		if f.upgrade.due(now) {
			return actMove, now
		}
		next.at(f.upgrade.notBefore)
	}
	if !f.done.has(actStandby) && f.alive && f.standby {
		if f.giveUpAt.After(now) {
			// Past it, the fall-back (actMove) is under way, on its own
			// retry.
			next.at(f.giveUpAt)
		}
		if !now.Before(f.standbyAt) {
			return actStandby, now
		}
		next.at(f.standbyAt)
	}
	if !f.done.has(actRenew) && f.alive && f.renewing {
		due := f.renew.due(now)
		if !now.Before(due) {
			return actRenew, now
		}
		next.at(due)
	}
	if !f.done.has(actFiles) && f.files {
		if f.filesRetry.due(now) {
			return actFiles, now
		}
		next.at(f.filesRetry.notBefore)
	}
	return actNone, next.t
}

// reconnectAfter is the connect retry after the live channel's stream
// ended without a final refusal (which stops the agent): at once the
// first time (a journal restarted: come straight back), after the
// backoff (delay, asked only then) when the stream before did not last
// either, and not before moveWait, the time a busy journal named for a
// move onto a renewed certificate that the reconnect, with that
// certificate, replaces (zero: none).
func reconnectAfter(now time.Time, connect retry, delay func(attempt int) time.Duration, moveWait time.Time) retry {
	next := retry{attempt: 1, notBefore: now}
	if connect.attempt > 0 {
		// The previous stream did not last: do not hammer.
		next = retry{attempt: connect.attempt + 1, notBefore: now.Add(max(delay(connect.attempt), 0))}
	}
	if moveWait.After(next.notBefore) {
		next.notBefore, next.busy = moveWait, true
	}
	return next
}

// connectSettled reports whether a channel that went live at wentLive has
// lasted long enough (stable) for the connect backoff to be forgotten: a
// journal restarted again later is retried at once, not after the
// backoff the previous outage grew.
func connectSettled(now, wentLive time.Time, stable time.Duration) bool {
	return now.Sub(wentLive) >= stable
}
