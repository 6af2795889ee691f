// Package agent is the pact node agent: it reads the node's hardware
// identity, gets an mTLS identity (a SPIRE SVID, the certificate a journal
// signs for a key made in RAM, or the image's bootstrap certificate, best
// first), holds an mTLS Subscribe stream to a journal (its liveness), and
// rotates: it renews the journal-signed certificate at 2/3 of its life and
// moves to a better identity as soon as one appears, each time building and
// health-checking a new channel before it lets go of the old one
// (channel.Rotator).
//
// When something goes wrong the agent keeps the identity and channel it
// has, retries with backoff, and says why in one of a few reasons
// (classify), in its log, its metrics and `pact-agent status`.
//
// Many agents can run in one process (the boot-storm benchmark runs
// thousands): what only a process of its own should have (the status
// socket, the /metrics listener and the process's runtime metrics,
// identity files, the tmpfs key file, SPIRE, the TPM) is off with its
// Config field's zero value, every agent has its own Prometheus registry
// (built only when something reads it: /metrics), logger and clock, and
// OnAttempt and OnStream let the process watch each one.
//
// This package must never import raft, bbolt or the journal: a test keeps
// the agent binary free of them.
package agent

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/agent/hwinfo"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/spire"
	"github.com/pact-hpc/pact/identity/static"
	"github.com/pact-hpc/pact/internal/backoff"
	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/logkey"
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
	cfg     Config
	log     *slog.Logger
	roots   []*x509.Certificate
	hw      hwid.Identity
	jp      *identity.JournalProvider
	static  *static.Provider // nil without bootstrap files
	rot     *channel.Rotator
	files   identityFiles
	metrics *metrics
	// clk is cfg.Clock: the node's clock plus the offset to the journal's
	// it has learned (skew.go).
	clk *skewClock
	// backoff is the retry policy for every kind of attempt.
	backoff backoff.Policy
	// renewNow holds the serial a journal told to renew at once (its
	// intermediate is being retired); wake tells the loop.
	renewNow atomic.Value // string
	wake     chan struct{}

	next int // index of the next journal to enroll with; Run's goroutine only
	// enrollKey and enrollCSR are the key an enrollment asks a journal to
	// sign, kept across retries until one is signed (Run's goroutine
	// only): a retry after an answer that was lost (a deadline, leadership
	// lost while committing) then gets the committed certificate back,
	// where a fresh key would be refused ALREADY_ACTIVE for the takeover
	// window. A renewal whose outcome is unknown leaves its key here for
	// the same reason.
	enrollKey crypto.Signer
	enrollCSR []byte
	// renewUnknown is the serial of the certificate whose renewal's
	// outcome is unknown (its answer lost): enrollKey holds that
	// renewal's key, the next renewal asks again with it, and a stream's
	// word that the certificate was replaced does not end the stream
	// meanwhile (superseded). Empty when there is none.
	renewUnknown atomic.Value // string
	// tpmAttested: the journal challenged this node's TPM at its last
	// enrollment, so its renewals attest with the TPM too (a fresh quote
	// of its boot each time).
	tpmAttested atomic.Bool

	mu            sync.Mutex
	running       bool
	cascade       *identity.Cascade // ranks the identity providers; set by Run
	spire         *spire.Provider   // nil without SPIRE; set by Run
	standby       string            // serial of the journal identity the registry holds as this SPIRE node's standby
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
	sources       map[identity.Source]*sourceRecord // each source's last look and given-up identity (sources.go)
	failureWarned time.Time                         // when a failure was last logged as a warning
	busySeries    bool                              // the latest attempt was answered busy (busy.go)
	// activeIn is the federated domain whose claim refused the latest
	// enrollment (ACTIVE_IN_ANOTHER_DOMAIN): the agent waits for it to
	// end. Empty once an enrollment is answered otherwise.
	activeIn string
	// attestation is the latest boot attestation between renewals
	// (attest.go); nil until a journal asks for one.
	attestation *AttestationStatus
	// renewing is closed when the RenewCert in flight, if any, has its
	// answer (or none): a stream's word that its certificate was replaced
	// is judged after it (superseded).
	renewing chan struct{}
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
	// Every node of a site boots the same image and so lists the journals
	// in the same order; starting each agent at a random one spreads a boot
	// storm's first attempts over the quorum instead of all on the first.
	start := rand.IntN(len(cfg.JournalAddrs))
	cfg.JournalAddrs = append(slices.Clone(cfg.JournalAddrs[start:]), cfg.JournalAddrs[:start]...)
	cfg.DialOptions = append([]grpc.DialOption(nil), cfg.DialOptions...)
	if cfg.Dialer != nil {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithContextDialer(cfg.Dialer))
	}
	// Every certificate decision runs on the journal's time as far as the
	// agent knows it; timers are the node's own.
	clk := &skewClock{base: cfg.Clock}
	cfg.Clock = clk
	roots, err := loadRoots(cfg.CAFile)
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
	cfg.Logger.Info("hardware identity", logkey.MACs, hw.MACs, logkey.BMCSerial, hw.BMCSerial, logkey.Report, report)
	a := &Agent{
		wake:    make(chan struct{}, 1),
		clk:     clk,
		cfg:     cfg,
		log:     cfg.Logger,
		roots:   roots,
		hw:      hw,
		jp:      identity.NewJournalProvider(cfg.Clock),
		static:  sp,
		files:   identityFiles{dir: cfg.IdentityDir, keyOut: cfg.KeyOut},
		backoff: backoff.Policy{Min: cfg.MinBackoff, Max: cfg.MaxBackoff},
	}
	rc := channel.DefaultConfig()
	rc.Targets = cfg.JournalAddrs
	rc.Roots = roots
	rc.MaxClockSkew = cfg.MaxClockSkew
	rc.CallTimeout = cfg.CallTimeout
	rc.HandshakeQueueWait = cfg.HandshakeQueueWait
	rc.DrainTimeout = cfg.DrainTimeout
	rc.OnEvent = a.onEvent
	rc.Subscribe = a.subscribeRequest
	rc.DialOptions = cfg.DialOptions
	rc.KeyExchange = cfg.KeyExchange
	rc.Clock = cfg.Clock
	rc.Logger = cfg.Logger
	if a.rot, err = channel.New(rc); err != nil {
		return nil, err
	}
	a.metrics = newMetrics(a)
	return a, nil
}

// trustPool is what a certificate a journal issues this agent (Enroll,
// RenewCert, IssueStandby) must chain to: the --ca roots and the roots
// the latest trust bundle streamed added (channel.Rotator.LearnBundle), so
// a running agent renews onto a new domain root during a rollover. It is
// built for each answer rather than kept: it is used that seldom.
func (a *Agent) trustPool() *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range a.rot.Roots() { // the --ca roots, then the learned ones
		pool.AddCert(c)
	}
	return pool
}

// Conn is the agent's live channel to the journal, for other components in
// the same process: calls through it always take the current channel, and a
// unary call caught by a certificate renewal is retried once on the new one
// (see channel.Rotator).
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
	cascade, err := a.useProviders(providers...)
	if err != nil {
		return err
	}
	defer cascade.Close()
	a.mu.Lock()
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
			a.log.Info("status socket open", logkey.Path, a.cfg.StatusSocket)
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
	a.log.Info("node released: a restart enrolls at once", logkey.NodeID, ch.NodeID(), logkey.Released, resp.GetReleased())
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

// RenewNow asks the agent to renew the journal-signed certificate its
// live channel presents at once, through the same step as the renewal at
// RenewAt of its life (and as a journal's RenewNow notice): a fresh key,
// RenewCert over the live channel, a new channel with the new certificate.
// MinRenewInterval still applies after an earlier renewal attempt. It
// returns false, and does nothing, when the live channel presents no
// journal-signed identity. The outcome reaches OnAttempt and OnStream.
func (a *Agent) RenewNow() bool {
	ch := a.rot.Active()
	if ch == nil || ch.Identity().Source != identity.SourceJournal {
		return false
	}
	a.renewNow.Store(ch.Identity().Serial())
	select {
	case a.wake <- struct{}{}:
	default:
	}
	return true
}

// attempted tells OnAttempt how an attempt ended.
func (a *Agent) attempted(op string, err error) {
	if a.cfg.OnAttempt != nil {
		a.cfg.OnAttempt(op, err)
	}
}

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

// useProviders makes the cascade of providers, in any order, the agent's
// one ranking of identities (SPIRE SVID, then the journal-signed
// certificate, then the bootstrap certificate). Close it when done.
func (a *Agent) useProviders(providers ...identity.Provider) (*identity.Cascade, error) {
	cc := identity.DefaultCascadeConfig()
	cc.Providers, cc.Clock, cc.Logger = providers, a.cfg.Clock, a.log
	cascade, err := identity.NewCascade(cc)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.cascade = cascade
	a.mu.Unlock()
	return cascade, nil
}

// offers is every provider's answer now, best first (the cascade's
// ranking); none before Run has made the cascade.
func (a *Agent) offers(ctx context.Context) []identity.Offer {
	a.mu.Lock()
	c := a.cascade
	a.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Offers(ctx)
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
		ActiveInDomain:    a.activeIn,
		LastAttestation:   a.attestation,
		Now:               now,
	}
	a.mu.Unlock()
	st.Sources = a.sourceStatus(context.Background())
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

func vclusterLabel(v string) string {
	if v == "" {
		return "(maintenance mode)"
	}
	return v
}
