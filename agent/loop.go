// The run loop: one goroutine decides, each time round, whether the node
// must enroll, renew, move to a better identity or just wait, and backs off
// on failures (retry, classify).

package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/backoff"
	"github.com/pact-hpc/pact/internal/logkey"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// retry is the backoff state of one kind of attempt.
type retry struct {
	attempt   int
	notBefore time.Time
	busy      bool // notBefore is a journal's busy answer (deferred), not a backoff
}

func (r *retry) due(now time.Time) bool { return !now.Before(r.notBefore) }

func (r *retry) failed(a *Agent, err error, atLeast time.Duration) {
	r.backedOff(a, a.policyFor(err, false), err, atLeast)
}

func (r *retry) backedOff(a *Agent, p backoff.Policy, err error, atLeast time.Duration) {
	r.notBefore = a.cfg.Clock.Now().Add(max(p.After(r.attempt, err), atLeast))
	r.attempt++
	r.busy = false
}

// policyFor is the backoff after err: the agent's policy, its ceiling
// capped at ReconnectMaxBackoff when no journal spent work on the attempt
// (journalAway), so that an agent notices a journal back from a restart
// within about that long rather than after a backoff that grew to
// MaxBackoff while it was away. streamEnd says err ended a stream.
func (a *Agent) policyFor(err error, streamEnd bool) backoff.Policy {
	p := a.backoff
	if journalAway(err, streamEnd) && a.cfg.ReconnectMaxBackoff < p.Max {
		p.Max = a.cfg.ReconnectMaxBackoff
		p.Min = min(p.Min, p.Max)
	}
	return p
}

// journalAway reports whether err says the journal is away rather than
// refusing: no connection reached a TLS handshake (channel.ErrNoConnection:
// the journal is stopped or restarting), or it answered NO_LEADER (it is
// shutting down, starting, or electing), or, for a stream's end, the
// connection broke without an answer (the journal's process died). None
// of these cost a journal more than one handshake, which its handshake
// queue paces with busy answers when many come at once. A journal that
// answered with a reason of its own (rate limited, refused, a commit timed
// out under load) is not away: the full backoff applies.
func journalAway(err error, streamEnd bool) bool {
	if errors.Is(err, channel.ErrNoConnection) {
		return true
	}
	pe := apierr.FromError(err)
	switch {
	case pe == nil:
		return false
	case pe.Reason == apierr.NoLeader:
		return true
	case streamEnd && pe.Reason == "" && pe.Code == codes.Unavailable:
		return true
	}
	return false
}

// loopState is what the loop remembers between steps. Only Run's goroutine
// touches it.
type loopState struct {
	connect, enroll, upgrade, renew, files retry
	standby                                retry
	standbyAt                              time.Time        // when the standby is renewed
	standbyFor                             string           // serial standbyAt was chosen for
	upgradeKey                             string           // the identity upgrade retries are for
	ended                                  *channel.Channel // whose stream end was handled
	renewFor                               string           // serial renewAt was chosen for
	renewAt                                time.Time        // when renewFor is due
	lastRenew                              time.Time        // the latest renewal attempt
	written                                string           // what the identity files hold
}

// rebased forgets the retry deadlines and the last renewal attempt, which
// were taken on the clock before the agent bridged to the journal's time:
// they may lie far in the new clock's future.
func (s *loopState) rebased() {
	for _, r := range []*retry{&s.connect, &s.enroll, &s.upgrade, &s.renew, &s.files} {
		r.notBefore = time.Time{}
	}
	s.lastRenew = time.Time{}
}

// loop runs step until ctx ends or the journal refuses the node, waking on
// the step's next deadline, a cascade change, or the stream's end.
func (a *Agent) loop(ctx context.Context, cascade *identity.Cascade) error {
	var s loopState
	readyTold := a.cfg.OnReady == nil
	for {
		next, err := a.step(ctx, &s)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if !readyTold && a.Status().Ready {
			readyTold = true
			a.cfg.OnReady()
		}
		now := a.cfg.Clock.Now()
		if !next.IsZero() && !next.After(now) {
			continue // a step made progress: look again at once
		}
		var lost <-chan struct{}
		if ch := a.rot.Active(); ch != nil && ch.StreamAlive() {
			lost = ch.StreamDone()
		}
		var tick <-chan time.Time
		var timer interface{ Stop() bool }
		if !next.IsZero() {
			// Read the clock again: a fake clock advanced since now was
			// read would otherwise set the timer that much past next.
			t := a.cfg.Clock.NewTimer(next.Sub(a.cfg.Clock.Now()))
			tick, timer = t.C(), t
		}
		select {
		case <-ctx.Done():
		case <-cascade.Changes():
		case <-lost:
		case <-tick:
		case <-a.wake:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// step does whatever is due now. It notices a stream that ended, then
// gathers the facts (facts), asks plan what is due, acts on it (do), and
// asks again for what remains: connect when there is no live stream,
// enroll when there is no identity worth having, move to a better
// identity, keep a standby on SPIRE, renew the journal-signed
// certificate, write the identity files, in that order. It returns when
// to look again (zero: only on a signal; not after now: at once) or a
// final refusal. Each action applies the same ladder to its attempt's
// result (outcomeOf); the first to end the step early (a verdict) ends it.
func (a *Agent) step(ctx context.Context, s *loopState) (time.Time, error) {
	r := &round{ctx: ctx, s: s, now: a.cfg.Clock.Now(), act: a.rot.Active()}
	a.noteSources(ctx, r.act, r.now)
	if err := a.stepStreamEnd(r); err != nil {
		return r.next.t, err
	}
	r.alive = r.act != nil && r.act.StreamAlive()
	if r.alive {
		a.stepStreamAlive(r)
	}
	var done actions
	for {
		act, next := plan(r.now, a.facts(r, done))
		if act == actNone {
			if !next.IsZero() {
				r.next.at(next)
			}
			return r.next.t, nil
		}
		done.add(act)
		if v := a.do(r, act); v != nil {
			if v.err != nil {
				return r.next.t, v.err
			}
			return v.at, nil
		}
	}
}

// round is one step: what its actions share.
type round struct {
	ctx   context.Context
	s     *loopState
	now   time.Time        // taken once, at the step's start
	act   *channel.Channel // the active channel at the step's start
	alive bool             // act's stream lived after its end was noticed
	next  soonest          // when to look again, as the actions taken set it

	want        *identity.Identity  // what actMove moves to (facts)
	filesKey    string              // what the identity files should hold (facts)
	filesBundle []*x509.Certificate // the bundle they should hold
}

// facts gathers what plan decides from, for the actions not done yet in
// this step. It keeps the per-certificate choices (the renewal and
// standby times, the move's retry) in the loop state, and tells the
// status when the next renewal is due.
func (a *Agent) facts(r *round, done actions) facts {
	s, act := r.s, r.act
	f := facts{done: done, alive: r.alive, connect: s.connect, enroll: s.enroll, filesRetry: s.files}
	if !done.has(actEnroll) {
		f.needEnroll = a.needEnroll(r.ctx, act, r.alive)
	}
	if !done.has(actMove) && r.alive {
		r.want = a.wanted(r.ctx, act.Identity())
		if r.want != nil {
			if key := idKey(r.want); key != s.upgradeKey {
				s.upgradeKey, s.upgrade = key, retry{}
			}
			f.moveTo = true
		}
		f.upgrade = s.upgrade
	}
	if !done.has(actStandby) && r.alive && act.Identity().Source == identity.SourceSPIRE {
		f.standby = true
		if sp := a.spireProvider(); sp != nil {
			f.giveUpAt = sp.GiveUpAt(act.Identity())
		}
		f.standbyAt, _ = a.standbyDue(r.ctx, s, r.now)
	}
	if !done.has(actRenew) {
		a.setNextRenewal(a.renewalFacts(r, &f))
	}
	if !done.has(actFiles) && act != nil && a.files.enabled() && act.Identity().Source != identity.SourceStatic {
		id := act.Identity()
		bundle, gen := a.publishedBundle(id)
		r.filesKey, r.filesBundle = fmt.Sprintf("%s/%d", idKey(id), gen), bundle
		f.files = r.filesKey != s.written
	}
	return f
}

// renewalFacts fills f's facts about renewing the journal-signed
// certificate the live channel presents, and returns when that renewal is
// next due (zero: not on one).
func (a *Agent) renewalFacts(r *round, f *facts) time.Time {
	s, act := r.s, r.act
	if !r.alive || act.Identity().Source != identity.SourceJournal {
		return time.Time{}
	}
	id := act.Identity()
	if held := a.renewedAhead(r.ctx, id); held != nil {
		// The renewal is done: what is pending is the move onto its
		// certificate (actMove, paced like a connect). Renewing the
		// channel's certificate again would be refused as stale.
		if s.renewFor != held.Serial() {
			s.renewFor, s.renewAt = held.Serial(), renewalTimeWith(held, a.cfg.RenewAt, a.backoff.Rand)
		}
		return s.renewAt
	}
	if s.renewFor != id.Serial() {
		s.renewFor, s.renewAt = id.Serial(), renewalTimeWith(id, a.cfg.RenewAt, a.backoff.Rand)
	}
	told, _ := a.renewNow.Load().(string) // the journal asked: its intermediate is being retired
	f.renewing = true
	f.renew = renewFacts{at: s.renewAt, now: told == id.Serial(), last: s.lastRenew, minInterval: a.cfg.MinRenewInterval, retry: s.renew}
	return f.renew.due(r.now)
}

// do takes the action plan chose and judges its outcome: a verdict ends
// the step; nil goes on to what plan finds next, the action having noted
// when it wants to be tried again (r.next).
func (a *Agent) do(r *round, act action) *verdict {
	switch act {
	case actConnect:
		return a.doConnect(r)
	case actEnroll:
		return a.doEnroll(r)
	case actMove:
		return a.doMove(r)
	case actStandby:
		return a.doStandby(r)
	case actRenew:
		return a.doRenew(r)
	case actFiles:
		a.doFiles(r)
	}
	return nil
}

// soonest is the earliest of the times a step's phases want to look again
// (zero: none).
type soonest struct{ t time.Time }

func (n *soonest) at(t time.Time) {
	if n.t.IsZero() || t.Before(n.t) {
		n.t = t
	}
}

// verdict ends a step early: look again at at (not after now: at once),
// or stop with err.
type verdict struct {
	at  time.Time
	err error
}

func again(at time.Time) *verdict { return &verdict{at: at} }
func stop(err error) *verdict     { return &verdict{err: err} }

// onNewClock is the verdict after the agent bridged to the journal's
// time: the retry deadlines forgotten, again at once (on the new clock:
// the step's now was taken on the old one).
func (a *Agent) onNewClock(s *loopState) *verdict {
	s.rebased()
	return again(a.cfg.Clock.Now())
}

// stepStreamEnd notices, once, that the active channel's stream ended: a
// final refusal stops the agent; otherwise the agent reconnects, at once
// the first time, with backoff when the previous stream did not last.
func (a *Agent) stepStreamEnd(r *round) error {
	act, s := r.act, r.s
	if act == nil || act.StreamAlive() || s.ended == act {
		return nil
	}
	s.ended = act
	err := act.StreamErr()
	a.fail("stream", err, act.Identity())
	if outcomeOf(err, nil) == outRefused {
		return refusedBy("stream closed", err)
	}
	a.dropRefusedJournalIdentity(act.Identity(), err)
	var moveWait time.Time
	if held := a.renewedAhead(r.ctx, act.Identity()); held != nil && s.upgradeKey == idKey(held) && s.upgrade.busy {
		// The move onto a renewed certificate was waiting for the time a
		// busy journal named: the connect with that certificate, which
		// takes the move's place, waits for it too.
		moveWait = s.upgrade.notBefore
	}
	p := a.policyFor(err, true)
	s.connect = reconnectAfter(r.now, s.connect, func(attempt int) time.Duration { return p.After(attempt, err) }, moveWait)
	return nil
}

// stepStreamAlive notes a live stream, and forgets the connect backoff
// once the channel has lasted ReconnectMaxBackoff (MaxBackoff if shorter):
// a journal restarted again later is retried at once, not after the
// backoff the previous outage grew.
func (a *Agent) stepStreamAlive(r *round) {
	a.sawStream(r.now)
	a.mu.Lock()
	wentLive := a.lastRotation
	a.mu.Unlock()
	if connectSettled(r.now, wentLive, min(a.cfg.MaxBackoff, a.cfg.ReconnectMaxBackoff)) {
		r.s.connect = retry{}
	}
}

// doConnect: there is no live stream; connect with the best identity
// that works.
func (a *Agent) doConnect(r *round) *verdict {
	s := r.s
	err := a.connect(r.ctx)
	switch outcomeOf(err, a.bridge) {
	case outProgressed:
		return again(r.now)
	case outRefused:
		return stop(refusedBy("", err))
	case outNothingYet:
		// No identity to connect with: an enrollment (actEnroll, on its
		// own retry) or a provider's change (the cascade's signal)
		// brings one. Waking at this retry's deadline, which has passed,
		// would spin the loop until then: a node whose journal identity
		// was dropped and whose enrollment backs off burned a core
		// (found by the 30,000-agent renewal storm: its load generator
		// spent half its CPU here).
		return nil
	case outRebase:
		return a.onNewClock(s)
	default:
		// connect dropped a refused journal identity itself.
		s.connect.retryAfter(a, err, 0)
	}
	if s.connect.attempt > 0 || s.connect.busy {
		r.next.at(s.connect.notBefore)
	}
	return nil
}

// doEnroll: no journal-signed identity, and no live SVID channel.
func (a *Agent) doEnroll(r *round) *verdict {
	s := r.s
	// enroll bridges the clock itself (errBridged).
	err := a.enroll(r.ctx)
	switch outcomeOf(err, nil) {
	case outProgressed:
		s.enroll, s.connect = retry{}, retry{}
		return again(r.now)
	case outRefused:
		return stop(refusedBy("", err))
	case outRebase:
		return a.onNewClock(s)
	default:
		s.enroll.retryAfter(a, err, 0)
	}
	r.next.at(s.enroll.notBefore)
	return nil
}

// doMove moves the live channel to a better identity, a rotated one (a
// renewed certificate whose own swap failed: doRenew scheduled this
// retry), or away from one its provider no longer offers (r.want). A
// failed move is retried as a connect is (moveFailed).
func (a *Agent) doMove(r *round) *verdict {
	s, act, want := r.s, r.act, r.want
	op := "upgrade"
	switch {
	case want.Source == act.Identity().Source:
		op = "move" // a renewed or rotated certificate of the same source
	case want.Source.Rank() < act.Identity().Source.Rank():
		op = "fallback"
	}
	err := a.swapTo(r.ctx, op, want)
	switch outcomeOf(err, a.bridge) {
	case outProgressed:
		s.upgrade = retry{}
		if act.Identity().Source == identity.SourceJournal && want.Source == identity.SourceSPIRE {
			// The SVID's first stream made the journal certificate this
			// channel held the node's standby (raftfsm svidSeen): no
			// need to ask for another.
			a.setStandby(act.Identity().Serial())
		}
		return again(r.now)
	case outRefused:
		return stop(refusedBy("", err))
	case outRebase:
		return a.onNewClock(s)
	default:
		a.moveFailed(s, want, err)
	}
	r.next.at(s.upgrade.notBefore)
	return nil
}

// moveFailed schedules the next move onto want after one failed, as a
// connect's retry is: at the time a busy journal named, the backoff not
// grown, or with backoff. A journal-signed identity the journal no longer
// takes is dropped.
func (a *Agent) moveFailed(s *loopState, want *identity.Identity, err error) {
	if key := idKey(want); key != s.upgradeKey {
		s.upgradeKey, s.upgrade = key, retry{}
	}
	a.dropRefusedJournalIdentity(want, err)
	s.upgrade.retryAfter(a, err, 0)
}

// renewedAhead returns the journal-signed certificate the agent holds
// when it is newer than cur, the journal-signed certificate its channel
// presents: a renewal was answered and the move onto its certificate is
// not done. Nil otherwise.
func (a *Agent) renewedAhead(ctx context.Context, cur *identity.Identity) *identity.Identity {
	if cur == nil || cur.Source != identity.SourceJournal {
		return nil
	}
	held, err := a.jp.Current(ctx)
	if err != nil || held.Serial() == cur.Serial() || held.Chain[0].NotBefore.Before(cur.Chain[0].NotBefore) {
		return nil
	}
	return held
}

// doStandby: on SPIRE, hold a journal-signed standby, obtained and
// renewed over the SVID channel.
func (a *Agent) doStandby(r *round) *verdict {
	s, act := r.s, r.act
	// Asked over the live channel: no clock to bridge, and any failure,
	// busy or not, backs off.
	err := a.obtainStandby(r.ctx, act)
	switch outcomeOf(err, nil) {
	case outProgressed:
		s.standby = retry{}
	case outRefused:
		return stop(refusedBy("standby", err))
	default:
		s.standby.failed(a, err, 0)
	}
	return again(r.now)
}

// doRenew renews the journal-signed certificate the live channel
// presents.
func (a *Agent) doRenew(r *round) *verdict {
	s, act := r.s, r.act
	id := act.Identity()
	s.lastRenew = r.now
	err := a.renew(r.ctx, act)
	switch o := outcomeOf(err, a.bridge); o {
	case outProgressed:
		s.renew = retry{}
	case outRefused:
		return stop(refusedBy("renewal", err))
	case outRebase:
		return a.onNewClock(s)
	default:
		if held := a.renewedAhead(r.ctx, id); held != nil {
			// RenewCert answered; the new channel failed (a busy
			// journal, a health check or first event past its
			// deadline). The renewal is done; the move onto its
			// certificate is retried by doMove as a connect would
			// be: at the time a busy journal named, or with backoff,
			// while the old channel keeps streaming.
			s.renew = retry{}
			a.moveFailed(s, held, err)
			return again(r.now)
		}
		a.dropRefusedJournalIdentity(id, err)
		atLeast := a.cfg.MinRenewInterval
		if o == outBusy || apierr.FromError(err).RetryAfter > 0 {
			// The new channel's journal answered busy: back at the
			// time it named, the backoff not grown. Or the journal said
			// when to come back (it is busy, or rate-limits this
			// source): its retry-after, with the backoff's jitter and
			// growth, paces the next attempt, not MinRenewInterval, or
			// a renewal storm would stall every refused node for
			// MinRenewInterval.
			s.lastRenew = time.Time{}
			atLeast = 0
		}
		s.renew.retryAfter(a, err, atLeast)
	}
	return again(r.now)
}

// doFiles hands the identity to other services on the node.
func (a *Agent) doFiles(r *round) {
	s, id := r.s, r.act.Identity()
	if err := a.files.write(id, r.filesBundle); err != nil {
		a.fail("write identity files", err, nil)
		s.files.failed(a, err, 0)
	} else {
		s.written, s.files = r.filesKey, retry{}
		a.log.Info("identity files written", logkey.Source, id.Source, logkey.Serial, id.Serial(),
			logkey.Dir, a.cfg.IdentityDir, logkey.KeyOut, a.cfg.KeyOut != "")
	}
	if s.written != r.filesKey {
		r.next.at(s.files.notBefore)
	}
}

// errBridged: an operation failed on the agent's clock, and the agent now
// uses the journal's time: retry at once.
var errBridged = errors.New("agent: clock bridged to the journal's; retrying")

func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// errNothingToTry: no provider has an identity to connect with yet.
var errNothingToTry = errors.New("agent: no identity to connect with yet")

// connect makes a live channel with the best identity that works,
// trying them best first.
func (a *Agent) connect(ctx context.Context) error {
	cands, err := a.candidates(ctx)
	if len(cands) == 0 {
		if errors.Is(err, identity.ErrExpired) {
			err = fmt.Errorf("agent: every identity the agent held has expired: %w", err)
			a.fail("connect", err, nil)
			return err
		}
		return errNothingToTry
	}
	var first error
	for _, id := range cands {
		err := a.swapTo(ctx, "connect", id)
		if err == nil {
			return nil
		}
		if revoked(err) {
			return fmt.Errorf("%w: %w", ErrRefused, err)
		}
		if _, ok := busyOf(err); ok {
			// The journal is busy whichever identity comes: the rotator
			// goes back to it, at the time it named (step).
			return err
		}
		a.dropRefusedJournalIdentity(id, err)
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return first
}

// swapTo moves the live channel to id, counting the attempt and recording
// a failure.
func (a *Agent) swapTo(ctx context.Context, op string, id *identity.Identity) error {
	a.metrics.attempts.Add(1)
	if err := a.rot.Swap(ctx, id); err != nil {
		if busy, ok := busyOf(err); ok {
			a.journalBusy(op, err, busy)
		} else if ctx.Err() == nil {
			a.fail(op, err, id)
		}
		a.attempted(op, err)
		return err
	}
	a.attempted(op, nil)
	a.notBusy()
	a.rotated()
	return nil
}

// rotated notes that a new channel went live.
func (a *Agent) rotated() {
	now := a.cfg.Clock.Now()
	a.mu.Lock()
	a.lastRotation, a.streamSeen = now, now
	a.mu.Unlock()
	if ch := a.rot.Active(); ch != nil {
		a.log.Info("stream open", logkey.Addr, ch.Target(), logkey.JournalID, ch.JournalID(), logkey.NodeID, ch.NodeID(), logkey.Identity, ch.Identity())
		if a.cfg.OnStream != nil {
			a.cfg.OnStream(ch)
		}
	}
}

// handleEvent is the rotator's OnEvent: every event of every stream.
func (a *Agent) handleEvent(ch *channel.Channel, ev *pactv1.SubscribeResponse) error {
	a.sawStream(a.cfg.Clock.Now())
	switch e := ev.GetEvent().(type) {
	case *pactv1.SubscribeResponse_Assignment:
		a.mu.Lock()
		changed := a.vcluster != e.Assignment.GetVcluster()
		a.nodeID, a.vcluster = e.Assignment.GetNodeId(), e.Assignment.GetVcluster()
		a.mu.Unlock()
		if changed || ch.Events() == 0 {
			a.log.Info("assignment", logkey.NodeID, e.Assignment.GetNodeId(), logkey.VCluster, vclusterLabel(e.Assignment.GetVcluster()))
		}
	case *pactv1.SubscribeResponse_TrustBundle:
		// Mostly the certificates the agent already holds (its roots,
		// the bundle and chain of its certificate): those are reused.
		parse := a.heldCerts()
		var certs []*x509.Certificate
		for _, d := range e.TrustBundle.GetDer() {
			if c, err := parse.parse(d); err == nil {
				certs = append(certs, c)
			}
		}
		a.mu.Lock()
		if !sameCerts(a.streamBundle, certs) {
			a.streamBundle = certs
			a.bundleGen++
		}
		a.mu.Unlock()
		// Its roots are trusted for the journals' server certificates
		// from now on (a root rollover reaches running agents), and for
		// the certificates a journal issues this agent (trustPool).
		a.rot.LearnBundle(certs)
		a.log.Debug("trust bundle", logkey.Certificates, len(certs))
	case *pactv1.SubscribeResponse_Revoked:
		reason := apierr.NodeRevoked
		if apierr.Reason(e.Revoked.GetCode()) == apierr.NodeFenced {
			reason = apierr.NodeFenced
		}
		return apierr.Status(reason, 0, e.Revoked.GetReason()).Err()
	case *pactv1.SubscribeResponse_Superseded:
		return a.superseded(ch, e.Superseded.GetSerial())
	case *pactv1.SubscribeResponse_RenewNow:
		// Renewed through the usual rotation (step), from a live
		// intermediate, before the retiring one is revoked.
		if id := ch.Identity(); id != nil && id.Source == identity.SourceJournal {
			a.renewNow.Store(id.Serial())
			a.log.Warn("the journal asks for renewal now", logkey.Reason, e.RenewNow.GetReason(),
				logkey.IssuerSerial, e.RenewNow.GetIssuerSerial(), logkey.RevokeAt, unixNano(e.RenewNow.GetRevokeAtUnixNano()).UTC().Format(time.RFC3339))
			select {
			case a.wake <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

// superseded handles a stream's word that the registry replaced its
// certificate by serial. When this agent's own renewal made it, the
// journal holds the old stream open until the new channel streams, and
// the rotator moves over. Otherwise the agent never got that certificate
// (its renewal's answer was lost, or someone else renewed with its key):
// the stream ends here as stale, and the agent drops the certificate and
// enrolls again (stepStreamEnd), as when the journal ended such a stream
// at once. A renewal in flight is waited for first (its call is bounded
// by CallTimeout): its answer says whether the serial is this agent's.
func (a *Agent) superseded(ch *channel.Channel, serial string) error {
	a.mu.Lock()
	inFlight := a.renewing
	a.mu.Unlock()
	if inFlight != nil {
		<-inFlight
	}
	a.mu.Lock()
	known := a.lastJournal != nil && strings.EqualFold(a.lastJournal.Serial(), serial)
	a.mu.Unlock()
	if known {
		return nil
	}
	var held string
	if id := ch.Identity(); id != nil {
		held = id.Serial()
	}
	if pending, _ := a.renewUnknown.Load().(string); pending != "" && pending == held {
		// Most likely this agent's own renewal, its answer lost: the
		// stream serves on (the journal's grace) while the next renewal
		// asks again with the same key; if the certificate is not the
		// one that key was given, that renewal is refused stale and the
		// agent enrolls again then.
		a.log.Info("the certificate was replaced while this agent's renewal had no answer; asking for it again over the live channel", logkey.PreviousSerial, held, logkey.Serial, serial)
		return nil
	}
	return apierr.Status(apierr.StaleCertificate, 0, fmt.Sprintf("certificate %s was replaced by %s, which this agent never received; enrolling again", held, serial)).Err()
}

// publishedBundle is what bundle.pem holds for id: the journal's latest
// trust bundle for a journal-signed identity, the identity's own bundle
// otherwise, the domain root if that is empty. gen changes when it does.
func (a *Agent) publishedBundle(id *identity.Identity) ([]*x509.Certificate, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case id.Source == identity.SourceJournal && len(a.streamBundle) > 0:
		return a.streamBundle, a.bundleGen
	case len(id.Bundle) > 0:
		return id.Bundle, 0
	}
	return a.roots, 0
}

// fail records why op failed: log, metrics, status. It returns the reason.
// A final refusal (the node decommissioned or fenced, its enrollment
// refused for good) is recorded but not logged: the agent stops, Run
// returns it, and its caller says so once (pact-agent's "stopping" line).
func (a *Agent) fail(op string, err error, id *identity.Identity) string {
	now := a.cfg.Clock.Now()
	reason := classify(err, id, now)
	a.metrics.failed(reason)
	a.mu.Lock()
	prev := a.failure
	a.failure = failureRecord{reason: reason, op: op, msg: err.Error(), at: now}
	if final(err) {
		a.mu.Unlock()
		return reason
	}
	// Retry logs are coalesced: a failure that repeats the previous one is
	// logged at debug level, with a warning again every failureLogEvery.
	level := slog.LevelWarn
	if prev.reason == reason && prev.op == op && now.Sub(a.failureWarned) < failureLogEvery {
		level = slog.LevelDebug
	} else {
		a.failureWarned = now
	}
	a.mu.Unlock()
	attrs := []any{logkey.Reason, reason, logkey.Err, err}
	if id != nil {
		attrs = append(attrs, logkey.Identity, id)
	}
	msg := op + " failed; keeping what the agent has and retrying"
	if pe := apierr.FromError(err); reason == ReasonActiveInAnotherDomain {
		// Not a fault here: the site's policy makes the node wait for
		// the other domain to release the hardware.
		msg = op + " refused: the hardware is active in another domain; waiting for it to end there, then enrolling"
		attrs = append(attrs, logkey.Domain, pe.OtherDomain, logkey.RetryAfter, pe.RetryAfter)
	}
	a.log.Log(context.Background(), level, msg, attrs...)
	return reason
}

// failureLogEvery is how often a failure that keeps repeating is logged as
// a warning.
const failureLogEvery = 5 * time.Minute
