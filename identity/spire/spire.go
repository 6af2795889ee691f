// Package spire gets the node's identity from the local SPIRE agent: an
// X.509-SVID over the SPIFFE Workload API, followed as SPIRE rotates it, and
// given up when the agent goes away. It is the best-ranked source of a pact
// identity and never a hard dependency: without a SPIRE agent, New still
// succeeds and Current says why there is no SVID.
package spire

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/jitter"
	"github.com/pact-hpc/pact/internal/logkey"
)

// DefaultSocket is where the SPIRE agent serves the Workload API by default.
const DefaultSocket = "unix:///run/spire/agent.sock"

// Config configures the SPIRE provider.
type Config struct {
	// Socket is the SPIRE agent's Workload API address, unix:///path or
	// tcp://ip:port (--spire-socket).
	Socket string
	// LostGrace is how long the last SVID is still served after the
	// Workload API stream breaks, so a restarting SPIRE agent does not make
	// the node fall back and upgrade again. Zero gives it up at once.
	LostGrace time.Duration
	// ExpiryMargin gives an SVID up this long before its not_after when
	// SPIRE has not rotated it by then, so the node moves to its standby
	// identity while the SVID's channel still stands, rather than after the
	// journal has closed it. SPIRE rotates at half an SVID's life, so an SVID
	// this close to its end means SPIRE is not doing its job.
	ExpiryMargin time.Duration
	// RetryMin and RetryMax bound the delay between attempts to reach the
	// SPIRE agent (exponential, jittered). RetryMax is also how late an
	// agent that appears, or a registration entry created again (the
	// Workload API answered PermissionDenied meanwhile), is noticed at
	// worst. The SPIRE agent is local: a retry costs it next to nothing,
	// so RetryMax is short (1 s; BenchmarkSVIDBack).
	RetryMin time.Duration
	RetryMax time.Duration
	// SocketPoll is how often, while the Workload API stream is down, the
	// provider looks at a unix:// socket's file. When a new file appears
	// there (a SPIRE agent that restarted makes a new socket), it connects
	// again at once, without waiting out the retry backoff of go-spiffe and
	// of gRPC, which together can outlast LostGrace. A poll is one stat of
	// a local file, so it is frequent (50 ms). Zero disables it (a
	// tcp:// address has no file and is never polled).
	SocketPoll time.Duration
	// Picker chooses among several SVIDs; nil takes the first, the Workload
	// API's default.
	Picker func([]*x509svid.SVID) *x509svid.SVID

	Clock  clock.Clock
	Logger *slog.Logger
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Socket:       DefaultSocket,
		LostGrace:    10 * time.Second,
		ExpiryMargin: 30 * time.Second,
		RetryMin:     500 * time.Millisecond,
		RetryMax:     time.Second,
		SocketPoll:   50 * time.Millisecond,
		Clock:        clock.Real{},
		Logger:       slog.Default(),
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if err := workloadapi.ValidateAddress(c.Socket); err != nil {
		errs = append(errs, fmt.Errorf("identity/spire: --spire-socket %q: %v (want unix:///path/to/agent.sock)", c.Socket, err))
	}
	if c.LostGrace < 0 {
		errs = append(errs, fmt.Errorf("identity/spire: LostGrace %v must not be negative", c.LostGrace))
	}
	if c.ExpiryMargin < 0 {
		errs = append(errs, fmt.Errorf("identity/spire: ExpiryMargin %v must not be negative", c.ExpiryMargin))
	}
	if c.SocketPoll < 0 {
		errs = append(errs, fmt.Errorf("identity/spire: SocketPoll %v must not be negative", c.SocketPoll))
	}
	if c.RetryMin <= 0 || c.RetryMax < c.RetryMin {
		errs = append(errs, fmt.Errorf("identity/spire: need 0 < RetryMin (%v) <= RetryMax (%v)", c.RetryMin, c.RetryMax))
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("identity/spire: Clock is required"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("identity/spire: Logger is required"))
	}
	return errors.Join(errs...)
}

// Provider follows the SPIRE agent's Workload API. It is an
// identity.Provider and an identity.Watcher; Close it when done.
type Provider struct {
	cfg     Config
	log     *slog.Logger
	path    string          // the socket's file, for a unix:// address
	ctx     context.Context // ended by Close
	cancel  context.CancelFunc
	done    chan struct{}  // closed when the watch loop has ended
	wg      sync.WaitGroup // grace timers and socket polls
	changes chan struct{}

	closeOnce sync.Once
	closeErr  error // the last client's Close, set by run before done

	mu        sync.Mutex
	id        *identity.Identity // the last SVID, kept while the stream is lost
	lostAt    time.Time          // when the stream broke; zero while it is up
	recovered chan struct{}      // closed when the stream comes back or the SVID is given up
	up        chan struct{}      // while the stream is down: closed when an SVID arrives again
	lastErr   error              // the last Workload API error
	told      codes.Code         // the condition logged at info/warn since the last SVID (codes.OK: none)
	sock      os.FileInfo        // the socket file when the current connection was made or last served
	redial    context.CancelFunc // ends the current watch so that run connects again
}

// New starts watching the Workload API in the background and returns at
// once: a missing SPIRE agent never blocks the caller. Until an SVID
// arrives, Current says why there is none.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Provider{
		cfg:     cfg,
		log:     cfg.Logger,
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
		changes: make(chan struct{}, 1),
	}
	if path, ok := strings.CutPrefix(cfg.Socket, "unix://"); ok && cfg.SocketPoll > 0 {
		p.path = path
	}
	client, err := p.dial()
	if err != nil {
		cancel()
		return nil, err
	}
	go p.run(client)
	return p, nil
}

// dial makes a Workload API client; gRPC starts connecting at once.
func (p *Provider) dial() (*workloadapi.Client, error) {
	p.noteSocket()
	client, err := workloadapi.New(p.ctx,
		workloadapi.WithAddr(p.cfg.Socket),
		workloadapi.WithBackoffStrategy(backoffStrategy{min: p.cfg.RetryMin, max: p.cfg.RetryMax}),
		// gRPC's own reconnect backoff grows to two minutes; keep it
		// within RetryMax so an agent that appears is found quickly.
		workloadapi.WithDialOptions(grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: p.cfg.RetryMin, Multiplier: 1.6, Jitter: 0.2, MaxDelay: p.cfg.RetryMax},
			MinConnectTimeout: 10 * time.Second,
		})),
	)
	if err != nil {
		return nil, fmt.Errorf("identity/spire: Workload API client for %s: %w", p.cfg.Socket, err)
	}
	return client, nil
}

// Source returns identity.SourceSPIRE.
func (p *Provider) Source() identity.Source { return identity.SourceSPIRE }

// Current returns the latest SVID, unless none has arrived, the Workload API
// stream has been broken for longer than LostGrace, or the SVID expired
// without SPIRE rotating it.
func (p *Provider) Current(context.Context) (*identity.Identity, error) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	id, lostAt, lastErr := p.id, p.lostAt, p.lastErr
	p.mu.Unlock()
	switch {
	case p.ctx.Err() != nil:
		return nil, identity.Unavailable(identity.SourceSPIRE, nil, "provider closed")
	case id == nil && lastErr == nil:
		return nil, identity.Unavailable(identity.SourceSPIRE, nil, "no SVID yet (waiting for the SPIRE agent at %s)", p.cfg.Socket)
	case id == nil:
		return nil, identity.Unavailable(identity.SourceSPIRE, lastErr, "no SVID (%s)", p.explain(lastErr))
	case !lostAt.IsZero() && now.Sub(lostAt) >= p.cfg.LostGrace:
		return nil, identity.Unavailable(identity.SourceSPIRE, lastErr, "SVID serial %s given up: Workload API stream lost at %s (%s)",
			id.Serial(), lostAt.UTC().Format(time.RFC3339), p.explain(lastErr))
	case id.Expired(now):
		return nil, identity.Unavailable(identity.SourceSPIRE, identity.ErrExpired,
			"SVID serial %s expired at %s and SPIRE has not rotated it; check spire-agent at %s and its link to spire-server",
			id.Serial(), id.NotAfter.UTC().Format(time.RFC3339), p.cfg.Socket)
	case !now.Before(p.GiveUpAt(id)):
		return nil, identity.Unavailable(identity.SourceSPIRE, nil,
			"SVID serial %s expires at %s and SPIRE has not rotated it; given up %v before its end. Check spire-agent at %s and its link to spire-server",
			id.Serial(), id.NotAfter.UTC().Format(time.RFC3339), p.cfg.ExpiryMargin, p.cfg.Socket)
	}
	return id, nil
}

// GiveUpAt is when Current stops serving id if SPIRE has not rotated it
// by then: ExpiryMargin before its not_after. The agent wakes at that time.
func (p *Provider) GiveUpAt(id *identity.Identity) time.Time {
	return id.NotAfter.Add(-p.cfg.ExpiryMargin)
}

// Changes signals when an SVID arrives or rotates, and when the provider
// gives its SVID up. See identity.Watcher.
func (p *Provider) Changes() <-chan struct{} { return p.changes }

// Close stops watching and closes the Workload API client. Current is
// unavailable afterwards.
func (p *Provider) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		<-p.done
		p.wg.Wait()
		p.signal()
	})
	return p.closeErr
}

// explain turns a Workload API error into what is wrong and what to do.
func (p *Provider) explain(err error) string {
	msg := status.Convert(err).Message()
	switch status.Code(err) {
	case codes.Unavailable:
		return fmt.Sprintf("agent socket %s not reachable: %s; start spire-agent there or set --spire-socket", p.cfg.Socket, msg)
	case codes.PermissionDenied:
		return fmt.Sprintf("the SPIRE agent at %s has no registration entry for this process: %s; register pact-agent with spire-server entry create", p.cfg.Socket, msg)
	}
	return fmt.Sprintf("Workload API at %s failed: %s", p.cfg.Socket, msg)
}

// run watches the Workload API until Close, with a new client whenever a
// socket poll finds the SPIRE agent's socket made anew (redial).
func (p *Provider) run(client *workloadapi.Client) {
	defer close(p.done)
	defer func() { p.closeErr = client.Close() }()
	for {
		wctx, redial := context.WithCancel(p.ctx)
		p.mu.Lock()
		p.redial = redial
		p.mu.Unlock()
		err := client.WatchX509Context(wctx, watcher{p: p, ctx: wctx})
		redialed := wctx.Err() != nil
		redial()
		if p.ctx.Err() != nil {
			return
		}
		if redialed {
			next, err := p.dial()
			if err == nil {
				_ = client.Close()
				client = next
				continue
			}
			p.log.Warn("cannot make a new SPIRE Workload API client; keeping the old one", logkey.Addr, p.cfg.Socket, logkey.Err, err)
			continue
		}
		// go-spiffe stops watching for good when SPIRE calls the request
		// itself invalid. SPIRE may be upgraded or fixed: keep trying.
		p.log.Warn("SPIRE Workload API refused the watch; retrying", logkey.Addr, p.cfg.Socket, logkey.Err, err, logkey.RetryIn, p.cfg.RetryMax)
		t := p.cfg.Clock.NewTimer(p.cfg.RetryMax)
		select {
		case <-p.ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// watcher receives go-spiffe's callbacks, keeping them off Provider's API.
// ctx is its watch's: once it ends (a redial, Close) the callbacks are
// about a stream the provider ended itself, and are ignored.
type watcher struct {
	p   *Provider
	ctx context.Context
}

func (w watcher) OnX509ContextUpdate(x *workloadapi.X509Context) {
	if w.ctx.Err() == nil {
		w.p.update(x)
	}
}

func (w watcher) OnX509ContextWatchError(err error) {
	if w.ctx.Err() == nil {
		w.p.watchError(err)
	}
}

func (p *Provider) update(x *workloadapi.X509Context) {
	id, err := p.convert(x)
	if err != nil {
		p.log.Warn("SPIRE sent an SVID pact cannot use; keeping the previous one", logkey.Addr, p.cfg.Socket, logkey.Err, err)
		return
	}
	if p.ctx.Err() != nil {
		return
	}
	p.noteSocket()
	p.mu.Lock()
	back := p.id == nil || !p.lostAt.IsZero()
	p.id, p.lostAt, p.lastErr, p.told = id, time.Time{}, nil, codes.OK
	if p.recovered != nil {
		close(p.recovered)
		p.recovered = nil
	}
	if p.up != nil {
		close(p.up)
		p.up = nil
	}
	p.mu.Unlock()
	if back {
		p.log.Info("SPIRE SVID received", logkey.Identity, id, logkey.Addr, p.cfg.Socket)
	} else {
		p.log.Debug("SPIRE SVID rotated", logkey.Identity, id)
	}
	p.signal()
}

// convert takes the chosen SVID, its key and its trust domain's bundle.
func (p *Provider) convert(x *workloadapi.X509Context) (*identity.Identity, error) {
	if x == nil || len(x.SVIDs) == 0 {
		return nil, errors.New("no SVID in the response")
	}
	svid := x.DefaultSVID()
	if p.cfg.Picker != nil {
		if svid = p.cfg.Picker(x.SVIDs); svid == nil {
			return nil, fmt.Errorf("the Picker chose none of %d SVIDs", len(x.SVIDs))
		}
	}
	var anchors []*x509.Certificate
	if x.Bundles != nil {
		if b, ok := x.Bundles.Get(svid.ID.TrustDomain()); ok {
			anchors = b.X509Authorities()
		}
	}
	return identity.New(identity.SourceSPIRE, svid.Certificates, svid.PrivateKey, anchors)
}

func (p *Provider) watchError(err error) {
	if p.ctx.Err() != nil {
		return
	}
	if _, fromStream := status.FromError(err); !fromStream {
		// go-spiffe could not parse a response; the stream is still up.
		p.log.Warn("SPIRE sent an SVID response pact cannot use; keeping the previous SVID", logkey.Addr, p.cfg.Socket, logkey.Err, err)
		return
	}
	code := status.Code(err)
	p.mu.Lock()
	same := p.lastErr != nil && p.lastErr.Error() == err.Error()
	p.lastErr = err
	var up chan struct{}
	if p.up == nil && p.path != "" {
		// The stream is down from now until an SVID arrives: watch the
		// socket's file for a restarted SPIRE agent.
		up = make(chan struct{})
		p.up = up
	}
	// PERMISSION_DENIED is a SPIRE agent that is up and says it has no
	// identity for this process any more (its entry was deleted): not a
	// restart to ride out, so the SVID is given up at once.
	if code == codes.PermissionDenied && p.id != nil {
		p.id, p.lostAt, p.told = nil, time.Time{}, code
		if p.recovered != nil {
			close(p.recovered)
			p.recovered = nil
		}
		p.mu.Unlock()
		p.poll(up)
		p.log.Warn("SPIRE issues no identity for this process any more (registration entry deleted?); giving its SVID up",
			logkey.Addr, p.cfg.Socket, logkey.Err, err)
		p.signal()
		return
	}
	lost := p.id != nil && p.lostAt.IsZero()
	var grace clock.Timer
	var recovered chan struct{}
	if lost {
		p.lostAt = p.cfg.Clock.Now()
		if p.cfg.LostGrace > 0 {
			recovered = make(chan struct{})
			p.recovered = recovered
			grace = p.cfg.Clock.NewTimer(p.cfg.LostGrace)
		}
	}
	// Without an SVID, each condition is told once: no agent, an agent
	// with no entry for pact-agent, another failure.
	tell := p.id == nil && p.told != code
	if tell {
		p.told = code
	}
	p.mu.Unlock()

	if grace != nil {
		p.wg.Add(1)
		go p.graceTimer(grace, recovered)
	}
	p.poll(up)
	switch {
	case lost:
		p.log.Warn("SPIRE Workload API stream lost", logkey.Addr, p.cfg.Socket, logkey.Err, err, logkey.Grace, p.cfg.LostGrace)
		if p.cfg.LostGrace == 0 {
			p.signal()
		}
	case tell && code == codes.Unavailable:
		p.log.Info("no SPIRE agent answers at the socket; going on without SPIRE, and taking an SVID as soon as one is served there (--spire-socket \"\" turns SPIRE off)",
			logkey.Addr, p.cfg.Socket, logkey.Err, status.Convert(err).Message())
	case tell:
		p.log.Warn("no SVID from SPIRE; the node uses its other identities meanwhile", logkey.Addr, p.cfg.Socket, logkey.Reason, p.explain(err))
	case !same:
		p.log.Debug("SPIRE Workload API still not reachable", logkey.Err, err)
	}
}

// graceTimer signals when LostGrace has passed without the stream coming
// back, which is when Current stops serving the last SVID.
func (p *Provider) graceTimer(t clock.Timer, recovered <-chan struct{}) {
	defer p.wg.Done()
	select {
	case <-t.C():
		p.log.Warn("SPIRE did not come back within the grace; giving its SVID up", logkey.Addr, p.cfg.Socket, logkey.Grace, p.cfg.LostGrace)
		p.signal()
	case <-recovered:
		t.Stop()
	case <-p.ctx.Done():
		t.Stop()
	}
}

// poll starts a socket poll that lasts until up is closed; a nil up starts
// nothing.
func (p *Provider) poll(up chan struct{}) {
	if up == nil {
		return
	}
	p.wg.Add(1)
	go p.pollSocket(up)
}

// pollSocket looks at the socket's file every SocketPoll while the stream
// is down, and connects again as soon as the file is another than the one
// the current connection was made to: a SPIRE agent that restarts removes
// its socket and makes a new one, and the Workload API client would
// otherwise find it only after its backoff.
func (p *Provider) pollSocket(up <-chan struct{}) {
	defer p.wg.Done()
	for {
		t := p.cfg.Clock.NewTimer(p.cfg.SocketPoll)
		select {
		case <-t.C():
		case <-up:
			t.Stop()
			return
		case <-p.ctx.Done():
			t.Stop()
			return
		}
		fi, err := os.Stat(p.path)
		if err != nil {
			continue
		}
		p.mu.Lock()
		renewed := p.sock == nil || !sameFile(p.sock, fi)
		redial := p.redial
		p.mu.Unlock()
		if renewed && redial != nil {
			p.log.Info("SPIRE agent socket made anew; connecting again", logkey.Addr, p.cfg.Socket)
			redial()
		}
	}
}

// noteSocket remembers the socket's file as it is now (nil: none).
func (p *Provider) noteSocket() {
	if p.path == "" {
		return
	}
	fi, err := os.Stat(p.path)
	if err != nil {
		fi = nil
	}
	p.mu.Lock()
	p.sock = fi
	p.mu.Unlock()
}

// sameFile: the same inode, not made again since (an inode number can be
// reused once the file is removed).
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime())
}

func (p *Provider) signal() {
	select {
	case p.changes <- struct{}{}:
	default:
	}
}

// backoffStrategy is go-spiffe's retry delay: exponential from min to max,
// each delay jittered down by up to half (jitter: nil is random).
type backoffStrategy struct {
	min, max time.Duration
	jitter   jitter.Jitter
}

func (s backoffStrategy) NewBackoff() workloadapi.Backoff {
	return &spiffeBackoff{min: s.min, max: s.max, jitter: s.jitter}
}

type spiffeBackoff struct {
	min, max, next time.Duration
	jitter         jitter.Jitter
}

func (b *spiffeBackoff) Next() time.Duration {
	if b.next == 0 {
		b.next = b.min
	}
	d := b.next
	b.next = min(2*b.next, b.max)
	return d/2 + b.jitter.Draw(d/2+1)
}

func (b *spiffeBackoff) Reset() { b.next = 0 }
