// The rotator: the live channel, and the swap that moves it to a new
// identity (a renewed certificate, a better source) without a gap.

package channel

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/transport"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Rotator errors. Match them with errors.Is.
var (
	// ErrNoChannel: the rotator has not established a channel yet.
	ErrNoChannel = errors.New("channel: no channel to the journal yet")
	// ErrRotatorClosed: the rotator was closed.
	ErrRotatorClosed = errors.New("channel: rotator closed")
	// ErrWrongNode: the journal's health check answered for another node
	// or another certificate than the channel was built with.
	ErrWrongNode = errors.New("channel: the journal authenticated another identity")
	// ErrClockSkew: the journal's clock differs from ours by more than
	// MaxClockSkew. Errors wrapping it are *ClockSkewError.
	ErrClockSkew = errors.New("channel: clock skew with the journal")
	// ErrNoConnection: no connection to the journal got as far as a TLS
	// handshake (refused, unreachable, timed out): the journal is down or
	// restarting, and spent no work on the attempt.
	ErrNoConnection = errors.New("channel: no connection to the journal")
	// ErrReplaced: a call reached a channel that a newer one has
	// replaced and that is draining; the call was not sent. Calls made
	// through the Rotator itself are moved to the new channel instead.
	ErrReplaced = errors.New("channel: replaced by a newer one; use the rotator's current channel")
	// errStreamStopped ends a stream the rotator stopped itself.
	errStreamStopped = errors.New("channel: stream stopped after the channel was replaced")
)

// Config configures a Rotator.
type Config struct {
	// Targets are the journal addresses (host:port). A swap keeps the
	// active channel's journal while its stream is up and moves to the next
	// one, round robin, when it is not.
	Targets []string
	// Roots are the domain roots (--ca) the journal's server certificate
	// must chain to. Each channel trusts them plus its identity's Bundle's
	// roots and the roots the latest trust bundle added (LearnBundle).
	// TLS verification is never turned off.
	Roots []*x509.Certificate
	// NodeID, if set, is the node every channel's health check must
	// answer for. Empty: the first successful health check decides, and
	// every later one must agree with it.
	NodeID string
	// MaxClockSkew fails a health check whose journal clock differs from
	// ours by more than this.
	MaxClockSkew time.Duration
	// CallTimeout bounds the health check and the wait for a new stream's
	// first event.
	CallTimeout time.Duration
	// HandshakeQueueWait is how long a journal may hold a new channel's
	// ClientHello in its handshake queue before it answers busy (the
	// journal's --handshake-queue-wait, 8 s by default). The health check
	// of a new channel, which makes its connection, allows it on top of
	// CallTimeout: a check that gives up while the journal is still
	// serving its queue wastes the handshake it then does, on both sides,
	// and the next try queues again (in a 10,000-node renewal storm a
	// third of the renewed certificates' first channels did: benchmarks.md,
	// twelfth round).
	HandshakeQueueWait time.Duration
	// DrainTimeout bounds how long a replaced channel waits for its
	// in-flight calls before it is closed anyway.
	DrainTimeout time.Duration
	// OnEvent, if set, sees every event of every stream (a new channel's
	// first event arrives before the channel goes live). An error ends that
	// stream with the error; on a new channel's first event it fails the
	// swap.
	OnEvent func(ch *Channel, ev *pactv1.SubscribeResponse) error
	// Subscribe, if set, makes each stream's SubscribeRequest (what the
	// agent answers: boot attestation requests).
	Subscribe func() *pactv1.SubscribeRequest
	// DialOptions are added to every channel's.
	DialOptions []grpc.DialOption
	// KeyExchange is the TLS key exchange every channel offers.
	KeyExchange transport.KeyExchange

	// Clock is the time TLS verification and the skew check use.
	Clock  clock.Clock
	Logger *slog.Logger
}

// DefaultConfig returns the defaults; Targets and Roots are empty.
func DefaultConfig() Config {
	return Config{
		MaxClockSkew:       5 * time.Minute,
		CallTimeout:        15 * time.Second,
		HandshakeQueueWait: 8 * time.Second,
		DrainTimeout:       10 * time.Second,
		Clock:              clock.Real{},
		Logger:             slog.Default(),
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.Targets) == 0 {
		errs = append(errs, errors.New("channel: the rotator needs at least one journal address"))
	}
	for _, t := range c.Targets {
		if _, _, err := net.SplitHostPort(t); err != nil {
			errs = append(errs, fmt.Errorf("channel: journal address %q: want host:port", t))
		}
	}
	if len(c.Roots) == 0 {
		errs = append(errs, errors.New("channel: the rotator needs the domain root to verify journals"))
	}
	if c.MaxClockSkew <= 0 {
		errs = append(errs, fmt.Errorf("channel: MaxClockSkew %v must be positive", c.MaxClockSkew))
	}
	if c.CallTimeout <= 0 {
		errs = append(errs, fmt.Errorf("channel: CallTimeout %v must be positive", c.CallTimeout))
	}
	if c.HandshakeQueueWait < 0 {
		errs = append(errs, fmt.Errorf("channel: HandshakeQueueWait %v must not be negative", c.HandshakeQueueWait))
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("channel: DrainTimeout %v must be positive", c.DrainTimeout))
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("channel: Clock is required"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("channel: Logger is required"))
	}
	return errors.Join(errs...)
}

// Rotator holds one live mTLS channel to a journal and moves it to a new
// identity without a gap: a swap builds a passive channel with the new
// identity, health-checks it (Ping must answer for the expected node, with
// a clock close to ours), opens the Subscribe stream on it and waits for its
// first event, and only then publishes it. The old channel's stream is
// stopped after that, and the old channel is closed once its in-flight unary
// calls have finished (at most DrainTimeout). A swap that fails anywhere
// leaves the active channel as it was.
//
// A Rotator is a grpc.ClientConnInterface: calls made through it go to the
// active channel, and a unary call that the journal refused with
// STALE_CERTIFICATE while a rotation was under way is retried once on the
// new channel. That refusal comes before the journal runs the method, so the
// retry never repeats a call: it exists because a journal renewal makes the
// old certificate stale the moment it commits, a little before the new
// channel can be published. Streams are not retried.
//
// All methods are safe for concurrent use; swaps are serialised.
type Rotator struct {
	cfg   Config
	log   *slog.Logger
	ctx   context.Context // ended by Close; parents every stream
	stop  context.CancelFunc
	rotMu sync.Mutex // serialises Rotate
	wg    sync.WaitGroup

	active  atomic.Pointer[Channel]
	retries atomic.Int64
	roots   *rootSet

	mu       sync.Mutex
	rotating chan struct{} // closed when the rotation under way ends; nil when none
	next     int           // next target when a swap cannot stay on the active journal
	nodeID   string
	last     SwapRecord
	closed   bool
}

// New returns a rotator with no channel; the first Swap makes one.
func New(cfg Config) (*Rotator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Targets = append([]string(nil), cfg.Targets...)
	cfg.Roots = append([]*x509.Certificate(nil), cfg.Roots...)
	cfg.DialOptions = append([]grpc.DialOption(nil), cfg.DialOptions...)
	ctx, stop := context.WithCancel(context.Background())
	return &Rotator{cfg: cfg, log: cfg.Logger, ctx: ctx, stop: stop, nodeID: cfg.NodeID, roots: newRootSet(cfg.Roots)}, nil
}

// SwapRecord describes the latest successful swap, for status and tests.
// Times are wall-clock readings (with a monotonic part), not the injected
// clock: they measure, they decide nothing.
type SwapRecord struct {
	// Started is when the rotation began (before the new identity was
	// fetched, for Rotate); Published is when the new channel went live.
	Started, Published time.Time
	// From is the replaced channel (nil for the first), To the new one.
	From, To *Channel
}

// Duration is how long the rotation took until the new channel went live.
func (s SwapRecord) Duration() time.Duration { return s.Published.Sub(s.Started) }

// StreamGap is how long no stream was open across the swap: from the end of
// the old channel's stream to the first event of the new one, zero when
// they overlapped (or there was no old channel).
func (s SwapRecord) StreamGap() time.Duration {
	if s.From == nil || s.To == nil {
		return 0
	}
	_, _, closed := s.From.StreamTimes()
	first, _, _ := s.To.StreamTimes()
	if closed.IsZero() || first.Before(closed) {
		return 0
	}
	return first.Sub(closed)
}

// Active returns the live channel, or nil before the first swap.
func (r *Rotator) Active() *Channel { return r.active.Load() }

// Conn returns the active channel's connection, or nil before the first
// swap. A caller that keeps it past a swap keeps using the old channel until
// it is drained and closed; calls made through the Rotator itself always
// take the current one.
func (r *Rotator) Conn() *grpc.ClientConn {
	if ch := r.active.Load(); ch != nil {
		return ch.conn
	}
	return nil
}

// Retries is how many unary calls were retried on a new channel after the
// journal refused them as stale during a rotation.
func (r *Rotator) Retries() int64 { return r.retries.Load() }

// LastSwap returns the latest successful swap; ok is false before the first.
func (r *Rotator) LastSwap() (rec SwapRecord, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.last.To != nil
}

// NodeID is the node the journal's health checks answered for ("" before
// the first successful one, unless configured).
func (r *Rotator) NodeID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodeID
}

// Swap moves the live channel to id (see Rotator). It returns once the new
// channel is live, or with the reason it could not be, leaving the active
// channel unchanged.
func (r *Rotator) Swap(ctx context.Context, id *identity.Identity) error {
	if id == nil {
		return errors.New("channel: Swap needs an identity")
	}
	return r.Rotate(ctx, func(context.Context, *Channel) (*identity.Identity, error) { return id, nil })
}

// Rotate is Swap with an identity obtained by fetch, which is called with
// the active channel (nil before the first swap) once the rotation has
// begun: a journal renewal calls RenewCert on it. Calls that the journal
// refuses as stale from then on wait for the rotation and are retried on the
// new channel. fetch returning a nil identity and no error ends the rotation
// without a swap.
func (r *Rotator) Rotate(ctx context.Context, fetch func(ctx context.Context, active *Channel) (*identity.Identity, error)) error {
	r.rotMu.Lock()
	defer r.rotMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.ctx, cancel)()

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrRotatorClosed
	}
	done := make(chan struct{})
	r.rotating = done
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.rotating = nil
		r.mu.Unlock()
		close(done)
	}()

	started := time.Now()
	id, err := fetch(ctx, r.active.Load())
	if err != nil || id == nil {
		return err
	}
	return r.swap(ctx, id, started)
}

func (r *Rotator) swap(ctx context.Context, id *identity.Identity, started time.Time) error {
	old := r.active.Load()
	target := r.target(old)
	ch, err := r.dial(id, target)
	if err != nil {
		return err
	}
	if err := r.check(ctx, ch); err != nil {
		ch.close()
		var busy *transport.BusyError
		if errors.As(err, &busy) {
			r.stay(target)
		}
		return err
	}
	if err := r.openStream(ctx, ch); err != nil {
		ch.close()
		return err
	}

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		ch.close()
		return ErrRotatorClosed
	}
	ch.published = time.Now()
	r.active.Store(ch)
	r.last = SwapRecord{Started: started, Published: ch.published, From: old, To: ch}
	r.mu.Unlock()

	r.log.Info("channel swapped", logkey.Identity, id, logkey.Addr, target, logkey.JournalID, ch.journalID,
		logkey.Previous, old.identityOrNil(), logkey.Duration, ch.published.Sub(started))
	if old != nil {
		// Draining before the stream stops: whoever sees the old stream
		// end finds the old channel refusing new calls already.
		idle := old.startDraining()
		old.stopStream()
		r.wg.Add(1)
		go r.drain(old, idle)
	}
	return nil
}

// target picks the journal for a new channel: the active one's while its
// stream is up, otherwise the next in turn.
func (r *Rotator) target(active *Channel) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if active != nil && active.StreamAlive() {
		return active.target
	}
	t := r.cfg.Targets[r.next%len(r.cfg.Targets)]
	r.next++
	return t
}

// stay makes the next new channel go to target again: it answered busy
// (internal/transport) and named when to come back, and coming back there keeps
// the place its reservation schedule gave this node. The caller waits.
func (r *Rotator) stay(target string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, t := range r.cfg.Targets {
		if t == target {
			r.next = i
			return
		}
	}
}

func (r *Rotator) dial(id *identity.Identity, target string) (*Channel, error) {
	ch := &Channel{id: id, target: target, done: make(chan struct{}), first: make(chan struct{})}
	ch.creds = NewClientCredentials(r.cfg.KeyExchange.Apply(ClientTLSConfig(r.roots.all(), id, r.cfg.Clock.Now)))
	opts := append(transport.ClientOptions(),
		grpc.WithTransportCredentials(ch.creds),
		grpc.WithChainUnaryInterceptor(ch.countCalls))
	opts = append(opts, r.cfg.DialOptions...)
	conn, err := grpc.NewClient("passthrough:///"+target, opts...)
	if err != nil {
		return nil, fmt.Errorf("channel: new channel to %s: %w", target, err)
	}
	ch.conn = conn
	return ch, nil
}

// drain closes a replaced channel (draining: idle is closed when its
// in-flight calls are done) once those calls are done, or after
// DrainTimeout, or at Close.
func (r *Rotator) drain(ch *Channel, idle <-chan struct{}) {
	defer r.wg.Done()
	t := time.NewTimer(r.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
		r.log.Warn("closing a replaced channel with calls still in flight", logkey.Addr, ch.target,
			logkey.Identity, ch.id, logkey.InFlight, ch.InFlight(), logkey.DrainTimeout, r.cfg.DrainTimeout)
	case <-r.ctx.Done():
	}
	_ = ch.conn.Close()
	<-ch.done
}

// Close stops every stream and closes every channel; in-flight calls fail.
// Later swaps fail with ErrRotatorClosed.
func (r *Rotator) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.stop()
	// A rotation under way ends quickly (its context is ended): wait for it.
	r.rotMu.Lock()
	//lint:ignore SA2001 the empty critical section only waits for a rotation holding rotMu
	r.rotMu.Unlock()
	if ch := r.active.Load(); ch != nil {
		ch.stopStream()
		ch.startDraining()
		_ = ch.conn.Close()
		<-ch.done
	}
	r.wg.Wait()
	return nil
}
