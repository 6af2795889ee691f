package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/agent/hwinfo"
	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/identity/spire"
	"github.com/pact-hpc/pact/identity/static"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/transport"
)

// DefaultStatusSocket is where the agent serves its status by default.
const DefaultStatusSocket = "/run/pact/agent.sock"

// Config configures a node agent.
type Config struct {
	// JournalAddrs are the journals to use, tried in turn from one picked
	// at random.
	JournalAddrs []string
	// CAFile is the domain root certificate baked into the node image.
	CAFile string
	// Hardware says where the hardware identity comes from.
	Hardware hwinfo.Config
	// CallTimeout bounds one Enroll or RenewCert call.
	CallTimeout time.Duration
	// HandshakeQueueWait is how long a journal may hold a new
	// connection's ClientHello in its handshake queue before it answers
	// busy (the journal's --handshake-queue-wait, 8 s by default): a new
	// connection's handshake (Enroll's, a channel's) is allowed it on top
	// of CallTimeout, so a node does not give up on a journal that is
	// still keeping its promise (channel.Config.HandshakeQueueWait).
	HandshakeQueueWait time.Duration
	// MinBackoff and MaxBackoff bound the retry delay (internal/backoff:
	// exponential with full jitter, honouring a journal's retry-after).
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// ReconnectMaxBackoff caps MaxBackoff for a failure no journal spent
	// work on: no connection could be made to it (refused, unreachable;
	// channel.ErrNoConnection) or it answered NO_LEADER (a restart or an
	// election). Such a failure cost the journal at most one TLS handshake,
	// and its handshake queue answers busy with a retry-after when many
	// come at once; so an agent whose journal restarts comes back within
	// about this long of the journal serving again, instead of waiting out
	// a backoff grown to MaxBackoff while it was away. A stream that lasted
	// this long also counts as stable: its end is retried at once.
	ReconnectMaxBackoff time.Duration
	// RenewAt is the fraction of a certificate's lifetime after which it is
	// renewed.
	RenewAt float64
	// MinRenewInterval is the least time between two renewal attempts, so a
	// failing renewal never loops.
	MinRenewInterval time.Duration
	// MaxClockSkew is how far the agent's clock may be from a journal's (as
	// its Ping answers) before the channel fails its health check with
	// clock_skew.
	MaxClockSkew time.Duration
	// ClockBridge is how far off the agent's clock may be and still be
	// bridged: the agent then uses the journal's time (learned from its
	// answers) for every certificate decision, and warns. Beyond it the
	// agent refuses with reason clock_skew.
	ClockBridge time.Duration
	// DrainTimeout bounds how long a replaced channel waits for its
	// in-flight calls before it is closed.
	DrainTimeout time.Duration

	// SPIRESocket is the SPIRE agent's Workload API (--spire-socket); empty
	// disables SPIRE.
	SPIRESocket string
	// SPIREWait is how long the agent waits at start for a first SVID (or
	// for SPIRE to say it has none) before it enrolls with the journal.
	SPIREWait time.Duration
	// SPIRELostGrace is how long the last SVID is still used after the
	// Workload API stream breaks (a restarting SPIRE agent); SPIREExpiryMargin
	// gives an SVID up that long before its end when SPIRE has not rotated
	// it. Either way the agent then swaps to its journal-signed standby.
	SPIRELostGrace    time.Duration
	SPIREExpiryMargin time.Duration
	// BootstrapCert, BootstrapKey and BootstrapBundle are the static
	// bootstrap identity baked into the image (--bootstrap-*); empty
	// BootstrapCert means none. It is held in memory only and never written
	// anywhere.
	BootstrapCert   string
	BootstrapKey    string
	BootstrapBundle string

	// JoinTokenFile holds a single-use join token (pact node token create)
	// that the agent presents with its CSR at Enroll, for nodes registered
	// with --require-token. It is read at every enrollment, so a new token
	// dropped in place is picked up; the token is never logged.
	JoinTokenFile string

	// StatusSocket is the Unix socket `pact-agent status` reads (mode
	// 0600); empty disables it.
	StatusSocket string
	// MetricsListen, if set, serves /metrics, /healthz and /readyz over
	// plain HTTP on this address.
	MetricsListen string
	// IdentityDir, if set, receives chain.pem and bundle.pem (atomically
	// replaced) whenever the active identity or its bundle changes, for
	// other services on the node. The bootstrap identity is never written.
	IdentityDir string
	// KeyOut, if set, receives the active identity's private key (key.pem,
	// mode 0600). It must be on a tmpfs: New refuses any other filesystem.
	KeyOut string

	// TPMDevice is the TPM the agent proves the node with when it is
	// registered with a TPM EK hash (docs/tpm.md): a character device
	// (/dev/tpmrm0, the default) or unix:PATH for a software TPM. When the
	// device does not exist the agent enrolls without a TPM; empty disables
	// the TPM altogether.
	TPMDevice string
	// TPMEventLog is the TCG event log the agent sends with its TPM quote
	// (docs/tpm.md, "Measured boot"); a missing file sends none.
	TPMEventLog string
	// TPMIMALog is IMA's runtime measurement list, sent with the quote
	// when the node's boot policy reads it (docs/tpm.md, "IMA").
	TPMIMALog string
	// OpenTPM, if set, replaces TPMDevice: it gives the node's TPM for
	// one enrollment or renewal, with a fresh attestation key. The
	// boot-storm benchmark (integration/bench/stormbench, -tpm) gives
	// each of its thousands of simulated nodes a TPM simulated in
	// software this way, since no machine runs 10,000 software TPMs;
	// pact-agent never sets it.
	OpenTPM func() (TPMAttestor, error)

	// DialOptions are added to every channel to a journal (keepalive
	// tuning; tests inject faults with an interceptor). A dialer among
	// them applies to the channels only: set Dialer for every connection.
	DialOptions []grpc.DialOption
	// Dialer, if set, opens every TCP connection to a journal (the
	// enrollment's and the channels'); nil uses a net.Dialer. The
	// boot-storm benchmark gives each simulated node a source address of
	// its own with it.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// KeyExchange is the TLS key exchange the agent offers journals
	// (internal/transport: X25519 by default, or the post-quantum hybrid).
	KeyExchange transport.KeyExchange

	// OnReady, if set, is called once, the first time the agent is ready
	// (an unexpired identity and an open stream, what /readyz answers):
	// pact-agent tells systemd READY=1 there (Type=notify).
	OnReady func()

	// OnAttempt, if set, is told the outcome of every attempt the agent
	// makes to get an identity or move its channel (what
	// pact_agent_cert_renewal_attempts_total counts): op is "enroll",
	// "connect", "upgrade", "fallback", "move" (to a renewed or rotated
	// certificate of the channel's source, after the renewal's own new
	// channel failed), "renew" or "standby", err nil on success. OnStream, if set, is told each time a new channel goes live,
	// that is once its Subscribe stream has delivered its first event. Both
	// run on the agent's own goroutine and must not block; they let a
	// process that runs many agents (the boot-storm benchmark) watch each
	// one's own path without polling Status. pact-agent sets neither.
	OnAttempt func(op string, err error)
	OnStream  func(ch *channel.Channel)

	Logger *slog.Logger
	Clock  clock.Clock
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Hardware:            hwinfo.DefaultConfig(),
		KeyExchange:         transport.Classical,
		CallTimeout:         15 * time.Second,
		HandshakeQueueWait:  8 * time.Second,
		MinBackoff:          250 * time.Millisecond,
		MaxBackoff:          30 * time.Second,
		ReconnectMaxBackoff: 4 * time.Second,
		RenewAt:             2.0 / 3.0,
		MinRenewInterval:    30 * time.Second,
		MaxClockSkew:        5 * time.Minute,
		ClockBridge:         time.Hour,
		DrainTimeout:        10 * time.Second,
		SPIRESocket:         spire.DefaultSocket,
		SPIREWait:           2 * time.Second,
		SPIRELostGrace:      spire.DefaultConfig().LostGrace,
		SPIREExpiryMargin:   spire.DefaultConfig().ExpiryMargin,
		StatusSocket:        DefaultStatusSocket,
		TPMDevice:           tpm.DefaultDevice,
		TPMEventLog:         tpm.DefaultEventLog,
		TPMIMALog:           tpm.DefaultIMALog,
		Logger:              slog.Default(),
		Clock:               clock.Real{},
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if err := c.KeyExchange.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("agent: --key-exchange: %w", err))
	}
	if len(c.JournalAddrs) == 0 {
		errs = append(errs, errors.New("agent: no journal address (--journal host:port)"))
	}
	for _, a := range c.JournalAddrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("agent: journal address %q: want host:port", a))
		}
	}
	if c.CAFile == "" {
		errs = append(errs, errors.New("agent: no domain root certificate (--ca FILE)"))
	}
	if err := c.Hardware.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.CallTimeout <= 0 {
		errs = append(errs, errors.New("agent: CallTimeout must be positive"))
	}
	if c.HandshakeQueueWait < 0 {
		errs = append(errs, errors.New("agent: HandshakeQueueWait must not be negative"))
	}
	if c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff {
		errs = append(errs, errors.New("agent: need 0 < MinBackoff <= MaxBackoff"))
	}
	if c.ReconnectMaxBackoff <= 0 {
		errs = append(errs, fmt.Errorf("agent: ReconnectMaxBackoff %v must be positive", c.ReconnectMaxBackoff))
	}
	if c.RenewAt <= 0 || c.RenewAt >= 1 {
		errs = append(errs, fmt.Errorf("agent: RenewAt %v must be between 0 and 1", c.RenewAt))
	}
	if c.MinRenewInterval <= 0 {
		errs = append(errs, errors.New("agent: MinRenewInterval must be positive"))
	}
	if c.ClockBridge < 0 {
		errs = append(errs, errors.New("agent: ClockBridge must not be negative"))
	}
	if c.MaxClockSkew <= 0 {
		errs = append(errs, errors.New("agent: MaxClockSkew must be positive"))
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, errors.New("agent: DrainTimeout must be positive"))
	}
	if c.SPIREWait < 0 {
		errs = append(errs, errors.New("agent: SPIREWait must not be negative"))
	}
	if c.SPIRESocket != "" {
		sc := spire.DefaultConfig()
		sc.Socket, sc.LostGrace, sc.ExpiryMargin = c.SPIRESocket, c.SPIRELostGrace, c.SPIREExpiryMargin
		if err := sc.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if (c.BootstrapCert == "") != (c.BootstrapKey == "") {
		errs = append(errs, errors.New("agent: --bootstrap-cert and --bootstrap-key go together"))
	}
	if c.BootstrapBundle != "" && c.BootstrapCert == "" {
		errs = append(errs, errors.New("agent: --bootstrap-bundle needs --bootstrap-cert and --bootstrap-key"))
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			errs = append(errs, fmt.Errorf("agent: --metrics-listen %q: want host:port", c.MetricsListen))
		}
	}
	if c.KeyOut != "" && (strings.HasSuffix(c.KeyOut, "/") || filepath.Base(c.KeyOut) == ".") {
		errs = append(errs, fmt.Errorf("agent: --key-out %q must name a file, not a directory", c.KeyOut))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("agent: Logger is required"))
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("agent: Clock is required"))
	}
	return errors.Join(errs...)
}

// Preflight reads what New reads from disk before it starts, and reports
// every problem at once, each with what to do: the domain root (--ca),
// --key-out's directory (a tmpfs), the join token file and the bootstrap
// identity's files. It creates and writes nothing, so pact-agent
// --check-config calls valid only what a start would start with.
func (c Config) Preflight() error {
	var errs []error
	if c.CAFile != "" {
		if _, err := loadRoots(c.CAFile); err != nil {
			errs = append(errs, err)
		}
	}
	if c.KeyOut != "" {
		if err := checkKeyOut(c.KeyOut); err != nil {
			errs = append(errs, err)
		}
	}
	if c.JoinTokenFile != "" {
		if _, err := readJoinToken(c.JoinTokenFile); err != nil {
			errs = append(errs, err)
		}
	}
	if c.BootstrapCert != "" && c.BootstrapKey != "" {
		sc := static.DefaultConfig()
		sc.CertFile, sc.KeyFile, sc.BundleFile, sc.Clock = c.BootstrapCert, c.BootstrapKey, c.BootstrapBundle, c.Clock
		if _, err := static.New(sc); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrBadConfig, err))
		}
	}
	return errors.Join(errs...)
}

// loadRoots reads the domain root certificate(s) of --ca.
func loadRoots(path string) ([]*x509.Certificate, error) {
	_, roots, err := pki.LoadCertPool(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --ca %s: %w: give the domain root certificate (ca.pem) the node image carries", ErrBadConfig, path, err)
	}
	return roots, nil
}
