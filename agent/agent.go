// Package agent is the pact node agent: it reads the node's hardware
// identity, gets an mTLS identity (a SPIRE SVID, the certificate a journal
// signs for a key made in RAM, or the image's bootstrap certificate, best
// first), holds an mTLS Subscribe stream to a journal (its liveness), and
// rotates: it renews the journal-signed certificate at 2/3 of its life and
// moves to a better identity as soon as one appears, each time building and
// health-checking a new channel before it lets go of the old one
// (identity.Rotator).
//
// When something goes wrong the agent keeps the identity and channel it
// has, retries with backoff, and says why in one of a few reasons
// (classify), in its log, its metrics and `pact-agent status`.
//
// This package must never import raft, bbolt or the journal: a test keeps
// the agent binary free of them.
package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/agent/hwinfo"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/spire"
	"github.com/pact-hpc/pact/identity/static"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/wire"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Sentinel errors.
var (
	// ErrRefused wraps a journal's final answer to this node (not
	// enrolled, already active, revoked...): retrying would not change it.
	ErrRefused = errors.New("agent: refused by the journal")
	// ErrBadConfig wraps a configuration New cannot use (bootstrap files,
	// --key-out off a tmpfs).
	ErrBadConfig = errors.New("agent: bad configuration")
)

// Agent is one node agent. New prepares it; Run runs it, once.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	roots    []*x509.Certificate
	rootPool *x509.CertPool
	hw       hwid.Identity
	jp       *identity.JournalProvider
	static   *static.Provider // nil without bootstrap files
	rot      *identity.Rotator
	files    identityFiles
	metrics  *metrics
	// clk is cfg.Clock: the node's clock plus the offset to the journal's
	// it has learned (skew.go).
	clk *skewClock
	// renewNow holds the serial a journal told to renew at once (its
	// intermediate is being retired); wake tells the loop.
	renewNow atomic.Value // string
	wake     chan struct{}

	next int // index of the next journal to enroll with; Run's goroutine only

	mu            sync.Mutex
	running       bool
	providers     []identity.Provider // best first; set by Run
	spire         *spire.Provider     // nil without SPIRE; set by Run
	standby       string              // serial of the journal identity the registry holds as this SPIRE node's standby
	metricsAddr   string
	nodeID        string
	vcluster      string
	lastJournal   *identity.Identity  // the latest journal-signed identity, even once expired
	streamBundle  []*x509.Certificate // the latest trust bundle from a stream
	bundleGen     int                 // counts streamBundle updates
	nextRenewal   time.Time
	lastRotation  time.Time
	streamSeen    time.Time // the agent's clock when a stream was last seen open
	failure       failureRecord
	failureWarned time.Time // when a failure was last logged as a warning
}

type failureRecord struct {
	reason, op, msg string
	at              time.Time
}

// New reads the hardware identity, the domain root and the bootstrap files,
// and checks --key-out. It starts nothing.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.JournalAddrs = append([]string(nil), cfg.JournalAddrs...)
	cfg.DialOptions = append([]grpc.DialOption(nil), cfg.DialOptions...)
	// Every certificate decision runs on the journal's time as far as the
	// agent knows it; timers are the node's own.
	clk := &skewClock{base: cfg.Clock}
	cfg.Clock = clk
	pool, roots, err := pki.LoadCertPool(cfg.CAFile)
	if err != nil {
		return nil, err
	}
	if cfg.KeyOut != "" {
		if err := checkKeyOut(cfg.KeyOut); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
	}
	if cfg.JoinTokenFile != "" {
		// Fail fast on a path that cannot be read; the token is read
		// again at every enrollment.
		if _, err := readJoinToken(cfg.JoinTokenFile); err != nil {
			return nil, err
		}
	}
	var sp *static.Provider
	if cfg.BootstrapCert != "" {
		sc := static.DefaultConfig()
		sc.CertFile, sc.KeyFile, sc.BundleFile, sc.Clock = cfg.BootstrapCert, cfg.BootstrapKey, cfg.BootstrapBundle, cfg.Clock
		if sp, err = static.New(sc); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
	}
	hw, report, err := hwinfo.Read(cfg.Hardware)
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("hardware identity", logkey.MACs, hw.MACs, logkey.BMCSerial, hw.BMCSerial, "report", report)
	a := &Agent{
		wake:     make(chan struct{}, 1),
		clk:      clk,
		cfg:      cfg,
		log:      cfg.Logger,
		roots:    roots,
		rootPool: pool,
		hw:       hw,
		jp:       identity.NewJournalProvider(cfg.Clock),
		static:   sp,
		files:    identityFiles{dir: cfg.IdentityDir, keyOut: cfg.KeyOut},
	}
	rc := identity.DefaultRotatorConfig()
	rc.Targets = cfg.JournalAddrs
	rc.Roots = roots
	rc.MaxClockSkew = cfg.MaxClockSkew
	rc.CallTimeout = cfg.CallTimeout
	rc.DrainTimeout = cfg.DrainTimeout
	rc.OnEvent = a.handleEvent
	rc.DialOptions = cfg.DialOptions
	rc.KeyExchange = cfg.KeyExchange
	rc.Clock = cfg.Clock
	rc.Logger = cfg.Logger
	if a.rot, err = identity.NewRotator(rc); err != nil {
		return nil, err
	}
	a.metrics = newMetrics(a)
	return a, nil
}

// Conn is the agent's live channel to the journal, for other components in
// the same process: calls through it always take the current channel, and a
// unary call caught by a certificate renewal is retried once on the new one
// (see identity.Rotator).
func (a *Agent) Conn() grpc.ClientConnInterface { return a.rot }

// MetricsAddr is the address /metrics is served on, once Run has started
// serving it ("" otherwise).
func (a *Agent) MetricsAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.metricsAddr
}

// Run gets the node an identity and keeps it, with its stream, until ctx
// ends. It returns nil on ctx's end and an error wrapping ErrRefused when
// the journal refuses this node for good (not registered, decommissioned).
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		return errors.New("agent: Run called twice")
	}
	a.running = true
	a.mu.Unlock()
	defer a.rot.Close()

	var providers []identity.Provider
	var sp *spire.Provider
	if a.cfg.SPIRESocket != "" {
		sc := spire.DefaultConfig()
		sc.Socket, sc.Clock, sc.Logger = a.cfg.SPIRESocket, a.cfg.Clock, a.log
		sc.LostGrace, sc.ExpiryMargin = a.cfg.SPIRELostGrace, a.cfg.SPIREExpiryMargin
		var err error
		if sp, err = spire.New(sc); err != nil {
			return err
		}
		defer sp.Close()
		providers = append(providers, sp)
	}
	providers = append(providers, a.jp)
	if a.static != nil {
		providers = append(providers, a.static)
	}
	cc := identity.DefaultCascadeConfig()
	cc.Providers, cc.Clock, cc.Logger = providers, a.cfg.Clock, a.log
	cascade, err := identity.NewCascade(cc)
	if err != nil {
		return err
	}
	defer cascade.Close()
	a.mu.Lock()
	a.providers = providers
	a.spire = sp
	a.mu.Unlock()

	if a.cfg.StatusSocket != "" {
		if lis, err := listenStatus(a.cfg.StatusSocket); err != nil {
			if classify(err, nil, a.cfg.Clock.Now()) == ReasonDiskFull {
				a.fail("status socket", err, nil)
			}
			a.log.Warn("no status socket; pact-agent status will not work", logkey.Err, err)
		} else {
			defer serve(lis, a.handler(false))()
		}
	}
	if a.cfg.MetricsListen != "" {
		lis, err := net.Listen("tcp", a.cfg.MetricsListen)
		if err != nil {
			return fmt.Errorf("agent: --metrics-listen: %w", err)
		}
		a.mu.Lock()
		a.metricsAddr = lis.Addr().String()
		a.mu.Unlock()
		defer serve(lis, a.handler(true))()
	}
	if sp != nil {
		a.waitForSPIRE(ctx, sp, cascade)
	}
	if err := a.loop(ctx, cascade); err != nil {
		return err
	}
	a.release()
	return nil
}

// releaseTimeout bounds the Release call on a clean stop, well inside the
// unit's TimeoutStopSec.
const releaseTimeout = 3 * time.Second

// release tells the journal this agent stops on purpose (Run's context
// ended: SIGTERM), so the node restarting with a new key enrolls at once
// instead of waiting for the takeover window. Only a journal-signed
// certificate is released; a crash never gets here, and then the journal
// waits for the window as before. A failure is logged, not returned: the
// stop goes on, and the restart waits for the window.
func (a *Agent) release() {
	ch := a.rot.Active()
	if ch == nil || ch.Identity().Source != identity.SourceJournal {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	resp, err := pactv1.NewEnrollmentServiceClient(ch.Conn()).Release(ctx, &pactv1.ReleaseRequest{})
	if err != nil {
		a.log.Warn("could not release the node; a restart waits for the journal's takeover window", logkey.Err, err)
		return
	}
	a.log.Info("node released: a restart enrolls at once", logkey.NodeID, ch.NodeID(), "released", resp.GetReleased())
}

// waitForSPIRE gives a local SPIRE agent a moment to hand over an SVID, so
// a node that has one does not enroll with the journal for nothing. It
// returns as soon as there is an SVID or the Workload API has said why
// there is none.
func (a *Agent) waitForSPIRE(ctx context.Context, sp *spire.Provider, cascade *identity.Cascade) {
	deadline := time.Now().Add(a.cfg.SPIREWait)
	for {
		_, err := sp.Current(ctx)
		var pe *identity.ProviderError
		if err == nil || (errors.As(err, &pe) && pe.Err != nil) || !time.Now().Before(deadline) {
			return
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-cascade.Changes():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			return
		}
	}
}

// retry is the backoff state of one kind of attempt.
type retry struct {
	attempt   int
	notBefore time.Time
}

func (r *retry) due(now time.Time) bool { return !now.Before(r.notBefore) }

func (r *retry) failed(a *Agent, err error, atLeast time.Duration) {
	r.notBefore = a.cfg.Clock.Now().Add(max(a.backoff(r.attempt, err), atLeast))
	r.attempt++
}

// loopState is what the loop remembers between steps. Only Run's goroutine
// touches it.
type loopState struct {
	connect, enroll, upgrade, renew, files retry
	standby                                retry
	standbyAt                              time.Time         // when the standby is renewed
	standbyFor                             string            // serial standbyAt was chosen for
	upgradeKey                             string            // the identity upgrade retries are for
	ended                                  *identity.Channel // whose stream end was handled
	renewFor                               string            // serial renewAt was chosen for
	renewAt                                time.Time         // when renewFor is due
	lastRenew                              time.Time         // the latest renewal attempt
	written                                string            // what the identity files hold
}

// rebased forgets the retry deadlines and the last renewal attempt, which
// were taken on the clock before the agent bridged to the journal's time:
// they may lie far in the new clock's future. It returns true for the
// caller's switch.
func (s *loopState) rebased() bool {
	for _, r := range []*retry{&s.connect, &s.enroll, &s.upgrade, &s.renew, &s.files} {
		r.notBefore = time.Time{}
	}
	s.lastRenew = time.Time{}
	return true
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

// step does whatever is due now, in order: notice a stream that ended,
// connect when there is no live stream, enroll when there is no identity
// worth having, move to a better identity, renew the journal-signed
// certificate, write the identity files. It returns when to look again
// (zero: only on a signal; not after now: at once) or a final refusal.
func (a *Agent) step(ctx context.Context, s *loopState) (time.Time, error) {
	now := a.cfg.Clock.Now()
	var next time.Time
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}

	act := a.rot.Active()
	if act != nil && !act.StreamAlive() && s.ended != act {
		s.ended = act
		err := act.StreamErr()
		a.fail("stream", err, act.Identity())
		if revoked(err) {
			return next, fmt.Errorf("%w: stream closed: %w", ErrRefused, err)
		}
		a.dropRefusedJournalIdentity(act.Identity(), err)
		if s.connect.attempt == 0 {
			s.connect = retry{attempt: 1, notBefore: now} // reconnect at once
		} else {
			s.connect.failed(a, err, 0) // the previous stream did not last: do not hammer
		}
	}
	alive := act != nil && act.StreamAlive()
	if alive {
		a.sawStream(now)
		a.mu.Lock()
		stable := now.Sub(a.lastRotation) >= a.cfg.MaxBackoff
		a.mu.Unlock()
		if stable {
			s.connect = retry{}
		}
	}

	// Connect: there is no live stream.
	if !alive {
		if s.connect.due(now) {
			switch err := a.connect(ctx); {
			case err == nil:
				return now, nil
			case errors.Is(err, ErrRefused):
				return next, err
			case errors.Is(err, errNothingToTry):
			case a.bridge(err) && s.rebased():
				// The agent now runs on the journal's time: again, at once
				// (on the new clock: now was taken on the old one).
				return a.cfg.Clock.Now(), nil
			default:
				s.connect.failed(a, err, 0)
			}
		}
		if s.connect.attempt > 0 {
			later(s.connect.notBefore)
		}
	}

	// Enroll: no journal-signed identity, and no live SVID channel.
	if a.needEnroll(ctx, act, alive) {
		if s.enroll.due(now) {
			if err := a.enroll(ctx); err != nil {
				if errors.Is(err, ErrRefused) {
					return next, err
				}
				if errors.Is(err, errBridged) && s.rebased() {
					return a.cfg.Clock.Now(), nil
				}
				s.enroll.failed(a, err, 0)
			} else {
				s.enroll, s.connect = retry{}, retry{}
				return now, nil
			}
		}
		later(s.enroll.notBefore)
	}

	// Move to a better identity, a rotated one, or away from one its
	// provider no longer offers.
	if alive {
		if want := a.wanted(ctx, act.Identity()); want != nil {
			key := idKey(want)
			if key != s.upgradeKey {
				s.upgradeKey, s.upgrade = key, retry{}
			}
			if s.upgrade.due(now) {
				op := "upgrade"
				if want.Source.Rank() < act.Identity().Source.Rank() {
					op = "fallback"
				}
				err := a.swapTo(ctx, op, want)
				switch {
				case err == nil:
					s.upgrade = retry{}
					if act.Identity().Source == identity.SourceJournal && want.Source == identity.SourceSPIRE {
						// The SVID's first stream made the journal
						// certificate this channel held the node's standby
						// (raftfsm svidSeen): no need to ask for another.
						a.setStandby(act.Identity().Serial())
					}
					return now, nil
				case revoked(err):
					return next, fmt.Errorf("%w: %w", ErrRefused, err)
				case a.bridge(err) && s.rebased():
					return a.cfg.Clock.Now(), nil
				}
				a.dropRefusedJournalIdentity(want, err)
				s.upgrade.failed(a, err, 0)
			}
			later(s.upgrade.notBefore)
		}
	}

	// On SPIRE: hold a journal-signed standby, obtained and renewed over
	// the SVID channel, and wake when the SVID is to be given up.
	if alive && act.Identity().Source == identity.SourceSPIRE {
		if sp := a.spireProvider(); sp != nil && sp.GiveUpAt(act.Identity()).After(now) {
			// Past it, the fall-back above is under way, on its own retry.
			later(sp.GiveUpAt(act.Identity()))
		}
		due, ok := a.standbyDue(ctx, s, now)
		if ok {
			if err := a.obtainStandby(ctx, act); err != nil {
				if revoked(err) {
					return next, fmt.Errorf("%w: standby: %w", ErrRefused, err)
				}
				s.standby.failed(a, err, 0)
			} else {
				s.standby = retry{}
			}
			return now, nil
		}
		later(due)
	}

	// Renew the journal-signed certificate the live channel presents.
	if alive && act.Identity().Source == identity.SourceJournal {
		id := act.Identity()
		if s.renewFor != id.Serial() {
			s.renewFor, s.renewAt = id.Serial(), renewalTime(id, a.cfg.RenewAt)
		}
		due := s.renewAt
		if told, _ := a.renewNow.Load().(string); told == id.Serial() {
			due = now // the journal asked: its intermediate is being retired
		}
		if !s.lastRenew.IsZero() {
			due = latest(due, s.lastRenew.Add(a.cfg.MinRenewInterval), s.renew.notBefore)
		}
		a.setNextRenewal(due)
		if !now.Before(due) {
			s.lastRenew = now
			if err := a.renew(ctx, act); err != nil {
				if revoked(err) {
					return next, fmt.Errorf("%w: renewal: %w", ErrRefused, err)
				}
				if a.bridge(err) && s.rebased() {
					return a.cfg.Clock.Now(), nil
				}
				a.dropRefusedJournalIdentity(id, err)
				s.renew.failed(a, err, a.cfg.MinRenewInterval)
			} else {
				s.renew = retry{}
			}
			return now, nil
		}
		later(due)
	} else {
		a.setNextRenewal(time.Time{})
	}

	// Hand the identity to other services on the node.
	if act != nil && a.files.enabled() && act.Identity().Source != identity.SourceStatic {
		id := act.Identity()
		bundle, gen := a.publishedBundle(id)
		key := fmt.Sprintf("%s/%d", idKey(id), gen)
		if key != s.written {
			if s.files.due(now) {
				if err := a.files.write(id, bundle); err != nil {
					a.fail("write identity files", err, nil)
					s.files.failed(a, err, 0)
				} else {
					s.written, s.files = key, retry{}
					a.log.Info("identity files written", logkey.Source, id.Source, logkey.Serial, id.Serial(),
						"dir", a.cfg.IdentityDir, "key_out", a.cfg.KeyOut != "")
				}
			}
			if s.written != key {
				later(s.files.notBefore)
			}
		}
	}
	return next, nil
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
	a.metrics.attempts.Inc()
	if err := a.rot.Swap(ctx, id); err != nil {
		if ctx.Err() == nil {
			a.fail(op, err, id)
		}
		return err
	}
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
		a.log.Info("stream open", logkey.Addr, ch.Target(), logkey.JournalID, ch.JournalID(), logkey.NodeID, ch.NodeID(), "identity", ch.Identity())
	}
}

// renew exchanges the live channel's journal-signed certificate for one
// for a fresh key (RenewCert over that channel) and swaps to it. From the
// moment the renewal commits the journal takes the old certificate for
// stale, so the swap follows at once, within the same rotation (calls the
// journal refuses as stale meanwhile are retried on the new channel).
func (a *Agent) renew(ctx context.Context, act *identity.Channel) error {
	a.metrics.attempts.Inc()
	err := a.rot.Rotate(ctx, func(ctx context.Context, cur *identity.Channel) (*identity.Identity, error) {
		if cur != act {
			return nil, nil // the channel changed meanwhile; look again
		}
		key, csr, err := newKey()
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
		resp, err := pactv1.NewEnrollmentServiceClient(cur.Conn()).RenewCert(cctx, &pactv1.RenewCertRequest{
			CurrentSerial: cur.Identity().Serial(),
			CsrDer:        csr,
		})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("agent: RenewCert at %s: %w", cur.Target(), err)
		}
		if _, err := a.observeJournalTime(unixNano(resp.GetServerTimeUnixNano())); err != nil {
			return nil, err
		}
		id, who, err := journalIdentity(key, a.rootPool, resp.GetCertChainDer(), resp.GetTrustBundleDer(), a.cfg.Clock.Now())
		if err != nil {
			return nil, err
		}
		a.adopt(id, who, resp.GetVcluster())
		a.log.Info("certificate renewed", "identity", id, "previous", cur.Identity())
		return id, nil
	})
	if err != nil {
		if ctx.Err() == nil {
			a.fail("renew", err, act.Identity())
		}
		return err
	}
	a.rotated()
	return nil
}

// standbyDue reports whether the agent, on a live SVID channel, should ask
// for a standby now: it has none the registry holds (or it expired), its
// standby is due for renewal, and no retry is pending. Otherwise it returns
// when to look again.
func (a *Agent) standbyDue(ctx context.Context, s *loopState, now time.Time) (time.Time, bool) {
	id, err := a.jp.Current(ctx)
	if err != nil || id.Serial() != a.standbySerial() {
		return s.standby.notBefore, s.standby.due(now)
	}
	if s.standbyFor != id.Serial() {
		s.standbyFor, s.standbyAt = id.Serial(), renewalTime(id, a.cfg.RenewAt)
	}
	due := latest(s.standbyAt, s.standby.notBefore)
	return due, !now.Before(due)
}

// obtainStandby asks the journal, over the live SVID channel, to sign a
// journal certificate for a fresh key and record it as the node's standby,
// and makes it the journal provider's identity: the one the agent swaps to
// when SPIRE stops serving it. The previous standby is dropped: the
// journal no longer takes it.
func (a *Agent) obtainStandby(ctx context.Context, act *identity.Channel) error {
	a.metrics.attempts.Inc()
	key, csr, err := newKey()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
	resp, err := pactv1.NewEnrollmentServiceClient(act.Conn()).IssueStandby(cctx, &pactv1.IssueStandbyRequest{CsrDer: csr})
	cancel()
	if err == nil {
		var id *identity.Identity
		var who pki.Identity
		if id, who, err = journalIdentity(key, a.rootPool, resp.GetCertChainDer(), resp.GetTrustBundleDer(), a.cfg.Clock.Now()); err == nil {
			prev := a.latestJournal()
			a.adopt(id, who, resp.GetVcluster())
			a.setStandby(id.Serial())
			a.log.Info("standby certificate obtained", "identity", id, "previous", prev, logkey.Addr, act.Target())
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	err = fmt.Errorf("agent: IssueStandby at %s: %w", act.Target(), err)
	a.fail("standby", err, act.Identity())
	return err
}

func (a *Agent) setStandby(serial string) {
	a.mu.Lock()
	a.standby = serial
	a.mu.Unlock()
}

func (a *Agent) standbySerial() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.standby
}

func (a *Agent) spireProvider() *spire.Provider {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.spire
}

// enroll makes a fresh key and asks the next journal to sign it on the
// strength of the node's hardware identity.
func (a *Agent) enroll(ctx context.Context) error {
	a.metrics.attempts.Inc()
	key, csr, err := newKey()
	if err != nil {
		return err
	}
	// A TPM that exists but fails does not stop a node that needs none
	// (most nodes of a site may have a TPM and be registered without
	// one): the agent enrolls without it, and only if the journal then
	// asks for a TPM is the failure reported, as a retryable one.
	att, tpmErr := a.openTPM()
	if tpmErr != nil {
		a.log.Warn("cannot use the TPM; enrolling without TPM attestation", "tpm_device", a.cfg.TPMDevice, logkey.Err, tpmErr)
	}
	if att != nil {
		defer att.Close()
	}
	req := &pactv1.EnrollRequest{
		Hardware: &pactv1.HardwareIdentity{Macs: a.hw.MACs, BmcSerial: a.hw.BMCSerial, TpmEkHash: a.hw.EKHash},
		CsrDer:   csr,
	}
	if a.cfg.JoinTokenFile != "" {
		tok, err := readJoinToken(a.cfg.JoinTokenFile)
		if err != nil {
			a.fail("enroll", err, a.latestJournal())
			return err
		}
		req.Credentials = &pactv1.EnrollCredentials{JoinToken: tok}
	}
	if att != nil {
		// The EK hash the node reports is its TPM's, whatever
		// --tpm-ek-hash says: the journal checks the two agree.
		req.Hardware.TpmEkHash = att.EKHash()
		if req.Credentials == nil {
			req.Credentials = &pactv1.EnrollCredentials{}
		}
		req.Credentials.Tpm = &pactv1.TpmAttestation{EkPublic: att.EKPublic(), AkPublic: att.AKPublic()}
	}
	addr := a.pick()
	resp, err := a.callEnroll(ctx, addr, req)
	if err == nil && resp.GetTpmChallenge() != nil {
		resp, err = a.answerTPM(ctx, addr, req, key, att, resp.GetTpmChallenge())
	}
	if err != nil && a.bridge(err) {
		return errBridged // the journal's certificate is good on the journal's time
	}
	if err == nil {
		_, err = a.observeJournalTime(unixNano(resp.GetServerTimeUnixNano()))
	}
	if err == nil {
		var id *identity.Identity
		var who pki.Identity
		if id, who, err = journalIdentity(key, a.rootPool, resp.GetCertChainDer(), resp.GetTrustBundleDer(), a.cfg.Clock.Now()); err == nil {
			a.adopt(id, who, resp.GetVcluster())
			a.log.Info("enrolled", "identity", id, logkey.NodeID, who.Name, logkey.VCluster, vclusterLabel(resp.GetVcluster()), logkey.Addr, addr)
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if tpmErr != nil && apierr.FromError(err).Reason == apierr.TPMRequired {
		// The node needs its TPM and the TPM failed here: not the
		// journal's final word, retry.
		err = fmt.Errorf("%w (the journal answered %s)", tpmErr, apierr.TPMRequired)
	}
	// ALREADY_ACTIVE is final for an agent that never held this node's
	// identity (a second agent on the same hardware). One that did is
	// re-enrolling after losing it (expired, superseded, SPIRE gone): the
	// active identity is its own, and the journal will take it over once
	// the node has been quiet long enough.
	if refusal(err) && !(apierr.FromError(err).Reason == apierr.AlreadyActive && a.heldIdentity()) {
		err = a.explainRefusal(err)
	}
	a.fail("enroll", fmt.Errorf("agent: enroll at %s: %w", addr, err), a.latestJournal())
	return err
}

func (a *Agent) callEnroll(ctx context.Context, addr string, req *pactv1.EnrollRequest) (*pactv1.EnrollResponse, error) {
	creds := identity.NewClientCredentials(a.cfg.KeyExchange.Apply(identity.ClientTLSConfig(a.roots, nil, a.cfg.Clock.Now)))
	opts := append(wire.ClientOptions(), grpc.WithTransportCredentials(creds))
	conn, err := grpc.NewClient("passthrough:///"+addr, append(opts, a.cfg.DialOptions...)...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
	defer cancel()
	resp, err := pactv1.NewEnrollmentServiceClient(conn).Enroll(cctx, req)
	return resp, creds.Explain(err)
}

// adopt makes a journal-signed identity the journal provider's.
func (a *Agent) adopt(id *identity.Identity, who pki.Identity, vcluster string) {
	a.mu.Lock()
	a.lastJournal, a.nodeID, a.vcluster = id, who.Name, vcluster
	a.mu.Unlock()
	a.jp.Set(id)
}

// dropRefusedJournalIdentity forgets the journal-signed identity when the
// journal no longer takes it (superseded by another certificate, or not
// authenticated: its intermediate revoked, say), so the agent enrolls
// again. A decommissioned node is handled by the caller: it fails closed.
func (a *Agent) dropRefusedJournalIdentity(id *identity.Identity, err error) {
	if id == nil || id.Source != identity.SourceJournal {
		return
	}
	pe := apierr.FromError(err)
	// Replaced, or not authenticated (its intermediate revoked, say). A
	// certificate that is merely not valid yet at the journal's clock is
	// kept: that is clock skew, and a new one would fare no better.
	if pe.Reason != apierr.StaleCertificate && (pe.Code != codes.Unauthenticated || pe.Reason == apierr.CertNotYetValid || pe.Reason == "") {
		return
	}
	cur, _ := a.jp.Current(context.Background())
	if cur == nil || cur.Serial() != id.Serial() {
		return
	}
	a.log.Warn("the journal no longer accepts this node's certificate; enrolling again", logkey.Serial, id.Serial(), logkey.Err, err)
	a.jp.Clear(fmt.Sprintf("certificate serial %s no longer accepted by the journal (%s); enrolling again", id.Serial(), pe.Reason))
}

// candidates are the identities the providers have now, best first. When
// there is none, err says why (it wraps identity.ErrExpired if one expired).
func (a *Agent) candidates(ctx context.Context) ([]*identity.Identity, error) {
	var out []*identity.Identity
	var errs []error
	for _, p := range a.providerList() {
		id, err := p.Current(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, id)
	}
	if len(out) == 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// wanted is the identity the live channel should move to, or nil: a better
// source that has one, a newer identity from the same source (a renewal, an
// SVID rotation), or, when the active source has none any more (SPIRE went
// away), the best that has.
func (a *Agent) wanted(ctx context.Context, cur *identity.Identity) *identity.Identity {
	for _, p := range a.providerList() {
		id, err := p.Current(ctx)
		if err != nil {
			continue
		}
		switch {
		case id.Source.Rank() > cur.Source.Rank():
			return id
		case id.Source == cur.Source:
			if id.Serial() != cur.Serial() {
				return id
			}
			return nil
		default:
			if id.Source != identity.SourceStatic {
				return id
			}
			return nil // never fall back to the bootstrap identity while a better channel lives
		}
	}
	return nil
}

// needEnroll: there is no journal-signed identity, and no live channel
// other than one on the bootstrap identity. While any other channel lives
// the journal would refuse the enrollment anyway (the node is active and
// streaming: it is this agent); the agent enrolls once that channel is gone.
func (a *Agent) needEnroll(ctx context.Context, act *identity.Channel, alive bool) bool {
	if _, err := a.jp.Current(ctx); err == nil {
		return false
	}
	return !alive || act.Identity().Source == identity.SourceStatic
}

// handleEvent is the rotator's OnEvent: every event of every stream.
func (a *Agent) handleEvent(ch *identity.Channel, ev *pactv1.SubscribeResponse) error {
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
		var certs []*x509.Certificate
		for _, d := range e.TrustBundle.GetDer() {
			if c, err := x509.ParseCertificate(d); err == nil {
				certs = append(certs, c)
			}
		}
		a.mu.Lock()
		if !sameCerts(a.streamBundle, certs) {
			a.streamBundle = certs
			a.bundleGen++
		}
		a.mu.Unlock()
		a.log.Debug("trust bundle", "certificates", len(certs))
	case *pactv1.SubscribeResponse_Revoked:
		reason := apierr.NodeRevoked
		if apierr.Reason(e.Revoked.GetCode()) == apierr.NodeFenced {
			reason = apierr.NodeFenced
		}
		return apierr.Status(reason, 0, e.Revoked.GetReason()).Err()
	case *pactv1.SubscribeResponse_RenewNow:
		// Renewed through the usual rotation (step), from a live
		// intermediate, before the retiring one is revoked.
		if id := ch.Identity(); id != nil && id.Source == identity.SourceJournal {
			a.renewNow.Store(id.Serial())
			a.log.Warn("the journal asks for renewal now", logkey.Reason, e.RenewNow.GetReason(),
				logkey.IssuerSerial, e.RenewNow.GetIssuerSerial(), "revoke_at", unixNano(e.RenewNow.GetRevokeAtUnixNano()).UTC().Format(time.RFC3339))
			select {
			case a.wake <- struct{}{}:
			default:
			}
		}
	}
	return nil
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
func (a *Agent) fail(op string, err error, id *identity.Identity) string {
	now := a.cfg.Clock.Now()
	reason := classify(err, id, now)
	a.metrics.failures.WithLabelValues(reason).Inc()
	a.mu.Lock()
	prev := a.failure
	a.failure = failureRecord{reason: reason, op: op, msg: err.Error(), at: now}
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
		attrs = append(attrs, "identity", id)
	}
	a.log.Log(context.Background(), level, op+" failed; keeping what the agent has and retrying", attrs...)
	return reason
}

// failureLogEvery is how often a failure that keeps repeating is logged as
// a warning.
const failureLogEvery = 5 * time.Minute

func (a *Agent) sawStream(now time.Time) {
	a.mu.Lock()
	a.streamSeen = now
	a.mu.Unlock()
}

// lastStream is when the agent last held an open stream: now while it does.
func (a *Agent) lastStream() time.Time {
	if ch := a.rot.Active(); ch != nil && ch.StreamAlive() {
		return a.cfg.Clock.Now()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.streamSeen
}

func (a *Agent) setNextRenewal(t time.Time) {
	a.mu.Lock()
	a.nextRenewal = t
	a.mu.Unlock()
}

// heldIdentity reports whether the agent has had a live channel for its
// node, or a journal-signed certificate, since it started.
func (a *Agent) heldIdentity() bool {
	return a.latestJournal() != nil || a.rot.NodeID() != ""
}

func (a *Agent) latestJournal() *identity.Identity {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastJournal
}

func (a *Agent) providerList() []identity.Provider {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.providers
}

// Status reports the agent's identity, channel and last failure. It never
// includes key material.
func (a *Agent) Status() Status {
	now := a.cfg.Clock.Now()
	a.mu.Lock()
	st := Status{
		NodeID:            a.nodeID,
		VCluster:          a.vcluster,
		NextRenewal:       a.nextRenewal,
		LastRotation:      a.lastRotation,
		LastFailureReason: a.failure.reason,
		LastFailure:       a.failure.msg,
		LastFailureOp:     a.failure.op,
		LastFailureAt:     a.failure.at,
		Now:               now,
	}
	a.mu.Unlock()
	if st.NodeID == "" {
		st.NodeID = a.rot.NodeID()
	}
	if ch := a.rot.Active(); ch != nil {
		id := ch.Identity()
		st.Source, st.Serial, st.NotAfter, st.SPIFFEID = string(id.Source), id.Serial(), id.NotAfter, id.SPIFFEID
		st.StreamConnected = ch.StreamAlive()
		st.Journal, st.JournalID = ch.Target(), ch.JournalID()
		st.Ready = st.StreamConnected && !id.Expired(now)
		if sb, err := a.jp.Current(context.Background()); err == nil && id.Source == identity.SourceSPIRE && sb.Serial() == a.standbySerial() {
			st.StandbySerial, st.StandbyNotAfter = sb.Serial(), sb.NotAfter
		}
	}
	return st
}

// pick returns the next journal address, round robin.
func (a *Agent) pick() string {
	addr := a.cfg.JournalAddrs[a.next%len(a.cfg.JournalAddrs)]
	a.next++
	return addr
}

// backoff is exponential with full jitter, and never shorter than a
// retry-after the journal asked for.
func (a *Agent) backoff(attempt int, err error) time.Duration {
	ceiling := a.cfg.MinBackoff << min(attempt, 16)
	if ceiling > a.cfg.MaxBackoff || ceiling <= 0 {
		ceiling = a.cfg.MaxBackoff
	}
	d := a.cfg.MinBackoff/2 + rand.N(ceiling)
	if pe := apierr.FromError(err); pe != nil && pe.RetryAfter > 0 {
		d = max(d, pe.RetryAfter+jitter(pe.RetryAfter/2))
	}
	return d
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

func idKey(id *identity.Identity) string { return string(id.Source) + "/" + id.Serial() }

func sameCerts(a, b []*x509.Certificate) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

func (a *Agent) explainRefusal(err error) error {
	pe := apierr.FromError(err)
	hint := ""
	switch pe.Reason {
	case apierr.NodeNotEnrolled:
		hint = fmt.Sprintf("; register this node first: pact node enroll NODE %s", registerFlags(a.hw))
	case apierr.AlreadyActive:
		hint = "; another agent holds this node's identity. If this node rebooted, wait for it to turn inactive; otherwise investigate a spoofed identity"
	case apierr.NodeRevoked:
		hint = "; the node was decommissioned: an operator must register it again"
	case apierr.HardwareIdentityConflict:
		hint = "; the reported MACs/BMC serial belong to more than one registered node: fix the registry (pact node inspect)"
	case apierr.NodeFenced:
		hint = "; an operator fenced (quarantined) this node: restart the agent after pact node unfence"
	case apierr.JoinTokenRequired:
		// The journal's message says how to make one and pass it.
	case apierr.JoinTokenInvalid:
		hint = "; put a new token (pact node token create NODE --out FILE) into --join-token-file"
	case apierr.KeyInUse:
		hint = "; the new key is already another node's: this should not happen with a fresh key; investigate"
	case apierr.TPMRequired:
		hint = fmt.Sprintf("; the node is registered with a TPM: run pact-agent where it can open the TPM (--tpm-device, now %q; see docs/tpm.md)", a.cfg.TPMDevice)
	case apierr.TPMEKMismatch:
		hint = "; this TPM's endorsement key is not the one registered: if this is the right machine, re-register it with the hash `pact-agent tpm-ek` prints; otherwise investigate (docs/tpm.md)"
	case apierr.TPMAKRefused, apierr.TPMAttestationFailed:
		hint = "; the TPM could not prove it holds the registered endorsement key (docs/tpm.md)"
	}
	return fmt.Errorf("%w: %w%s", ErrRefused, pe, hint)
}

func registerFlags(hw hwid.Identity) string {
	s := ""
	for _, m := range hw.MACs {
		s += " --mac " + m
	}
	if hw.BMCSerial != "" {
		s += " --bmc-serial " + hw.BMCSerial
	}
	return s[min(1, len(s)):]
}

func vclusterLabel(v string) string {
	if v == "" {
		return "(maintenance mode)"
	}
	return v
}
