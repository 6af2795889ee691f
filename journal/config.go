package journal

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/connlimit"
	"github.com/pact-hpc/pact/journal/raftnode"
	"github.com/pact-hpc/pact/journal/ratelimit"
	"github.com/pact-hpc/pact/journal/tpmchallenge"
)

// Config configures one journal node.
type Config struct {
	// Settings are the journal's Raft node's (NodeID, DataDir, RaftListen,
	// AdvertiseRaft, InitialCluster, Join, ApplyTimeout, the Raft timeouts
	// and compaction, activation batching), given to it as they are.
	// DataDir also holds, with Dev, the root and admin credentials.
	raftnode.Settings
	// ListenAddr is the gRPC address (host:port). Port 0 picks a free one.
	ListenAddr string
	// AdvertiseGRPC is the address other journals use to reach this one's
	// gRPC port; it defaults to ListenAddr.
	AdvertiseGRPC string
	// Dev creates a development set-up in DataDir: a domain root and an
	// admin credential on first start, and a journal CA for this journal
	// (again whenever the one there no longer fits the journal's names).
	Dev bool
	// Domain is the domain id used when Dev creates a root; otherwise the
	// domain is read from the root certificate.
	Domain string
	// RootCertFile holds the domain root, or two roots of the domain during
	// a root rollover; default DataDir/ca.pem.
	RootCertFile string
	// RootKeyFile is the legacy layout: the domain root's key on this host
	// signs the intermediates itself (docs/migration.md moves it offline).
	// Without JournalCAKey and Dev it defaults to DataDir/ca-key.pem; it
	// excludes JournalCACertFile and JournalCAKey.
	RootKeyFile string
	// JournalCACertFile is this journal's journal CA certificate (made by
	// the ceremony, docs/ceremony.md), default DataDir/journal-ca.pem. It is
	// read again at each re-key, so a renewed one is taken without a
	// restart.
	JournalCACertFile string
	// JournalCAKey is where the journal CA's key is (internal/keystore:
	// tpm:PATH, a pkcs11: URI or file:PATH); no default but with Dev
	// (file:DataDir/journal-ca-key.pem).
	JournalCAKey string
	// TPMDevice is the TPM holding a tpm: journal CA key: a device
	// (/dev/tpmrm0 when empty) or unix:PATH for a software TPM.
	TPMDevice string
	// TPMTimeout bounds each TPM operation of a tpm: journal CA key:
	// opening the TPM until it answers, and each command after (the
	// start, --check-config and every re-key): a TPM that another program
	// holds, or that never answers, fails naming it instead of hanging
	// the journal (internal/keystore).
	TPMTimeout time.Duration
	// CertLifetime is the validity of agent certificates.
	CertLifetime time.Duration
	// ServerNames are extra DNS names for the server certificate.
	ServerNames []string
	// MaxConcurrentEnrollments bounds the CSR checks, signings and Raft
	// proposals in flight, so a boot storm cannot starve Raft.
	MaxConcurrentEnrollments int
	// EnrollQueueWait is the least an enrollment, renewal or standby waits
	// for a slot before it is refused with RESOURCE_EXHAUSTED and a
	// retry-after (a call waits longer while its deadline leaves 3 s to
	// serve it, at most 30 s: gate.go), and how long an enrollment may
	// wait for a shared failure budget.
	EnrollQueueWait time.Duration
	// StreamRecheckInterval is how often an open Subscribe stream re-checks
	// its certificate against the registry even when nothing changed.
	StreamRecheckInterval time.Duration
	// RenewalStreamGrace is how long the stream of a certificate a
	// renewal replaced stays open while the node's stream with its new
	// certificate has not opened here (its new channel may wait in the
	// handshake queue of a renewal storm): the old channel serves until
	// the new one streams (the dual-channel swap). It ends as handed over
	// when the new stream opens here or the agent closes it, and a
	// revocation or fence still ends it at once; every call with the old
	// certificate is refused as stale from the commit on. Zero ends it
	// when the renewal commits, as before the grace: a renewal storm then
	// leaves nodes without a stream until their new channel is through
	// the handshake queue (docs/benchmarks.md, seventh round).
	RenewalStreamGrace time.Duration
	// NodeLivenessTimeout is how long an Active node may go unseen (no
	// Subscribe stream from its agent on any journal) before the leader
	// marks it Inactive. It is node liveness, not Raft's heartbeat (that
	// is RaftTimeout); operators set it as --heartbeat-timeout,
	// PACT_HEARTBEAT_TIMEOUT or heartbeat-timeout in the file.
	NodeLivenessTimeout time.Duration
	// TakeoverWindow is how long an Active node must have gone unseen
	// before a fresh Enroll from its hardware (a reboot that lost the key)
	// may replace its certificate.
	TakeoverWindow time.Duration
	// ClockSkewTolerance is how far ahead of this journal's clock a client
	// certificate's not_before may be and still be accepted: another
	// journal whose clock runs ahead (or this one's, behind) signed it.
	// Beyond it the call is refused CERT_NOT_YET_VALID.
	ClockSkewTolerance time.Duration
	// DigestInterval is how often each journal reports the streams it holds
	// (one Raft write per journal per interval) and the leader looks for
	// nodes to mark Inactive.
	DigestInterval time.Duration
	// AuditLog, if set, receives every committed audit entry as a JSON line
	// ("-" for stdout).
	AuditLog string
	// RateLimit bounds failed enrollments per source and globally.
	RateLimit ratelimit.Config
	// TPMChallenges bounds the TPM credential-activation challenges this
	// journal keeps between the two rounds of an Enroll, and how long an
	// agent has to answer one (docs/tpm.md).
	TPMChallenges tpmchallenge.Config
	// MetricsListen, if set, serves /metrics, /healthz and /readyz over
	// plain HTTP on this address.
	MetricsListen string
	// BundleEndpointListen, if set, serves the domain's trust bundle over
	// HTTPS on this address as a SPIFFE bundle endpoint (the https_spiffe
	// profile: the journal's own server certificate, an X.509-SVID of
	// spiffe://DOMAIN/pact-journal/ID). Other quorums and SPIRE servers
	// federate with the domain through it (docs/domains.md).
	BundleEndpointListen string
	// BundleRefreshHint is the spiffe_refresh_hint the bundle endpoint
	// announces: how often a federated domain should fetch the bundle again.
	BundleRefreshHint time.Duration
	// SPIREBundleFile is a PEM file holding the X.509 bundle of the SPIRE
	// trust domain (spire-server bundle show). With it the journal accepts
	// X.509-SVIDs of that trust domain from node agents. The file is
	// re-read when it changes (looked at every 10s at most), so a SPIRE CA
	// rotation is picked up.
	SPIREBundleFile string
	// SPIRESocket is the Workload API address of the journal host's own
	// SPIRE agent (unix:///run/spire/agent.sock): the bundle is fetched and
	// followed from there instead of a file. While the agent does not
	// answer, SVIDs are refused.
	SPIRESocket string
	// SPIRETrustDomain is the SPIRE trust domain whose bundle is trusted
	// and whose SPIFFE IDs map to nodes; empty means the pact domain.
	SPIRETrustDomain string
	// KeyExchange is the TLS key exchange the gRPC listener prefers
	// (internal/transport: X25519 by default, or the post-quantum hybrid).
	KeyExchange transport.KeyExchange
	// OperatorLifetime is the validity of an operator credential issued
	// through the journal (pact admin issue/renew) when none is asked for;
	// MaxOperatorLifetime caps what may be asked.
	OperatorLifetime    time.Duration
	MaxOperatorLifetime time.Duration
	// RetireGrace is how long a retired intermediate stays in the trust
	// bundle so the agents holding its certificates can renew, when the
	// operator names no grace.
	RetireGrace time.Duration
	// Connections bounds unauthenticated connections: per source address,
	// in all, TLS handshakes in progress, and the time to finish a
	// handshake. The gRPC port and the Raft port each count their own.
	Connections connlimit.Config
	// IdleTimeout closes a gRPC connection that has carried no call for
	// this long (an agent's open stream keeps its connection busy).
	IdleTimeout time.Duration
	// MaxStreamsPerCert bounds the streams (Subscribe, and any other
	// streaming call) one certificate may hold open on this journal at
	// once: enough for a certificate swap's overlap and a reconnect whose
	// old stream the journal has not yet seen die.
	MaxStreamsPerCert int
	// MaxEnrollWaiters bounds the Enroll calls that may wait for the
	// global failed-enrollment budget while it is spent (see
	// docs/registry.md, "Rate limits"); the lowest-priority waiter is
	// refused first.
	MaxEnrollWaiters int

	Logger *slog.Logger
	Clock  clock.Clock

	// watchdogClock times the Raft store writes for the write watchdog
	// (raftnode/watchdog.go); nil is the system clock, whose readings are
	// monotonic. Not Clock: a step of the domain's clock (or a test's fake
	// one jumping an hour) must not make a write look stuck. A test sets
	// it (export_test.go).
	watchdogClock clock.Clock
}

// Peer is one journal of an initial cluster.
type Peer = raftnode.Peer

// ParsePeers reads "id=host:port,id=host:port".
func ParsePeers(s string) ([]Peer, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []Peer
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("journal: initial cluster entry %q: want id=host:port", part)
		}
		out = append(out, Peer{ID: id, RaftAddr: addr})
	}
	return out, nil
}

// MaxActivationBatch bounds ActivationBatchMax (raftnode.MaxActivationBatch).
const MaxActivationBatch = raftnode.MaxActivationBatch

// DefaultRaftWriteTimeout is Config.RaftWriteTimeout's default: several
// election timeouts, and hundreds of times a normal fsync.
const DefaultRaftWriteTimeout = 5 * time.Second

// MinRaftWriteTimeout bounds Config.RaftWriteTimeout from below: a busy
// disk's fsync may take a good part of a second.
const MinRaftWriteTimeout = time.Second

// DefaultConfig returns a single-node configuration with the defaults.
func DefaultConfig() Config {
	// The Raft node's own defaults, so the two never disagree.
	rn := raftnode.DefaultSettings()
	rn.NodeID = "j1"
	rn.RaftWriteTimeout = DefaultRaftWriteTimeout
	return Config{
		Settings:                 rn,
		ListenAddr:               "127.0.0.1:7443",
		Domain:                   "pact.local",
		CertLifetime:             ca.DefaultConfig().LeafLifetime,
		MaxConcurrentEnrollments: 16 * runtime.GOMAXPROCS(0),
		EnrollQueueWait:          2 * time.Second,
		StreamRecheckInterval:    30 * time.Second,
		RenewalStreamGrace:       10 * time.Minute,
		RateLimit:                ratelimit.DefaultConfig(),
		TPMChallenges:            tpmchallenge.DefaultConfig(),
		NodeLivenessTimeout:      5 * time.Minute,
		OperatorLifetime:         ca.DefaultOperatorLifetime,
		MaxOperatorLifetime:      90 * 24 * time.Hour,
		RetireGrace:              15 * time.Minute,
		BundleRefreshHint:        DefaultBundleRefreshHint,
		TakeoverWindow:           60 * time.Second,
		ClockSkewTolerance:       5 * time.Minute,
		DigestInterval:           10 * time.Second,
		TPMTimeout:               keystore.DefaultTPMTimeout,
		KeyExchange:              transport.Classical,
		Connections:              grpcConnections(),
		IdleTimeout:              5 * time.Minute,
		MaxStreamsPerCert:        3,
		MaxEnrollWaiters:         256,
		Logger:                   slog.Default(),
		Clock:                    clock.Real{},
	}
}

// grpcConnections is connlimit's defaults with ProveWithin: the gRPC port
// reports its calls (vouchUnary); the Raft port sets it to 0.
func grpcConnections() connlimit.Config {
	c := connlimit.DefaultConfig()
	c.ProveWithin = connlimit.DefaultProveWithin
	return c
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if err := pki.ValidateName("journal id", c.NodeID); err != nil {
		errs = append(errs, err)
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("journal: a data directory is required (--data-dir)"))
	}
	addr := func(setting, a string, dialed bool) {
		if err := checkAddr(setting, a, dialed); err != nil {
			errs = append(errs, err)
		}
	}
	addr("--listen", c.ListenAddr, false)
	for _, a := range []struct {
		setting, addr string
		dialed        bool
	}{
		{"--raft-listen", c.RaftListen, false},
		{"--advertise", c.AdvertiseGRPC, true},
		{"--advertise-raft", c.AdvertiseRaft, true},
		{"--metrics-listen", c.MetricsListen, false},
		{"--bundle-endpoint-listen", c.BundleEndpointListen, false},
	} {
		if a.addr != "" {
			addr(a.setting, a.addr, a.dialed)
		}
	}
	for _, p := range c.InitialCluster {
		addr("--initial-cluster "+p.ID, p.RaftAddr, true)
	}
	if c.RaftListen == "" && (len(c.InitialCluster) > 0 || c.Join) {
		errs = append(errs, errors.New("journal: --initial-cluster and --join need --raft-listen"))
	}
	if c.Join && len(c.InitialCluster) > 0 {
		errs = append(errs, errors.New("journal: --join and --initial-cluster exclude each other"))
	}
	if len(c.InitialCluster) > 0 {
		self := false
		seen := map[string]bool{}
		for _, p := range c.InitialCluster {
			if err := pki.ValidateName("journal id", p.ID); err != nil {
				errs = append(errs, err)
			}
			if seen[p.ID] {
				errs = append(errs, fmt.Errorf("journal: %s appears twice in the initial cluster", p.ID))
			}
			seen[p.ID] = true
			self = self || p.ID == c.NodeID
		}
		if !self {
			errs = append(errs, fmt.Errorf("journal: the initial cluster does not list this journal (%s)", c.NodeID))
		}
	}
	if c.Dev {
		if err := pki.ValidateDomain(c.Domain); err != nil {
			errs = append(errs, err)
		}
	}
	if c.RootKeyFile != "" && (c.JournalCAKey != "" || c.JournalCACertFile != "") {
		errs = append(errs, errors.New("journal: --root-key and --journal-ca-cert/--journal-ca-key exclude each other: a journal signs its intermediates with its journal CA, or (the legacy layout) with the domain root key; drop --root-key once the journal CA is in place (docs/migration.md)"))
	}
	if c.JournalCAKey != "" {
		if _, err := keystore.Parse(c.JournalCAKey); err != nil {
			errs = append(errs, fmt.Errorf("journal: --journal-ca-key: %w", err))
		}
	}
	if c.CertLifetime < 10*time.Minute {
		errs = append(errs, fmt.Errorf("journal: certificate lifetime %v is shorter than 10m", c.CertLifetime))
	}
	if c.CertLifetime > 365*24*time.Hour {
		errs = append(errs, fmt.Errorf("journal: certificate lifetime %v is longer than a year", c.CertLifetime))
	}
	if c.MaxConcurrentEnrollments < 1 {
		errs = append(errs, errors.New("journal: MaxConcurrentEnrollments must be at least 1"))
	}
	if c.EnrollQueueWait < 0 {
		errs = append(errs, errors.New("journal: EnrollQueueWait must not be negative"))
	}
	if c.OperatorLifetime < time.Minute || c.OperatorLifetime > c.MaxOperatorLifetime {
		errs = append(errs, fmt.Errorf("journal: operator credential lifetime %v must lie between 1m and the maximum %v", c.OperatorLifetime, c.MaxOperatorLifetime))
	}
	if c.BundleEndpointListen != "" && (c.BundleRefreshHint < time.Second || c.BundleRefreshHint > 24*time.Hour) {
		errs = append(errs, fmt.Errorf("journal: --bundle-refresh-hint %v: want 1s to 24h (federated domains fetch the bundle that often)", c.BundleRefreshHint))
	}
	if c.RetireGrace < 0 {
		errs = append(errs, errors.New("journal: RetireGrace must not be negative"))
	}
	if c.RenewalStreamGrace < 0 {
		errs = append(errs, errors.New("journal: RenewalStreamGrace must not be negative"))
	}
	if c.StreamRecheckInterval <= 0 {
		errs = append(errs, errors.New("journal: StreamRecheckInterval must be positive"))
	}
	if c.DigestInterval <= 0 {
		errs = append(errs, errors.New("journal: DigestInterval must be positive"))
	}
	if c.ClockSkewTolerance < 0 {
		errs = append(errs, errors.New("journal: ClockSkewTolerance must not be negative"))
	}
	if c.TakeoverWindow < 2*c.DigestInterval {
		errs = append(errs, fmt.Errorf("journal: takeover window %v must be at least twice the digest interval %v, or a streaming node could be taken over", c.TakeoverWindow, c.DigestInterval))
	}
	if c.NodeLivenessTimeout < c.TakeoverWindow {
		errs = append(errs, fmt.Errorf("journal: heartbeat timeout %v must not be shorter than the takeover window %v", c.NodeLivenessTimeout, c.TakeoverWindow))
	}
	if err := c.KeyExchange.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("journal: %w", err))
	}
	if c.TPMTimeout <= 0 {
		errs = append(errs, fmt.Errorf("journal: tpm timeout %v: give a positive duration, e.g. %v, how long a tpm: key's TPM may take to open and to answer each command (--tpm-timeout)", c.TPMTimeout, keystore.DefaultTPMTimeout))
	}
	// The Raft node's own rules, as the Raft node checks them.
	for _, err := range c.Settings.Problems() {
		errs = append(errs, fmt.Errorf("journal: %w", err))
	}
	if c.RaftWriteTimeout < MinRaftWriteTimeout {
		errs = append(errs, fmt.Errorf("journal: raft write timeout %v is shorter than %v: a busy disk's fsync would make the leader step down", c.RaftWriteTimeout, MinRaftWriteTimeout))
	}
	if err := c.TPMChallenges.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.RateLimit.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Connections.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.IdleTimeout < time.Second {
		errs = append(errs, fmt.Errorf("journal: idle timeout %v must be at least 1s", c.IdleTimeout))
	}
	if c.MaxStreamsPerCert < 2 {
		errs = append(errs, fmt.Errorf("journal: MaxStreamsPerCert %d must be at least 2, or an agent reconnecting before this journal saw its old stream die would be refused", c.MaxStreamsPerCert))
	}
	if c.MaxEnrollWaiters < 1 {
		errs = append(errs, fmt.Errorf("journal: MaxEnrollWaiters %d must be at least 1", c.MaxEnrollWaiters))
	}
	errs = append(errs, c.validateSPIRE()...)
	if c.Logger == nil {
		errs = append(errs, errors.New("journal: Logger is required"))
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("journal: Clock is required"))
	}
	return errors.Join(errs...)
}

func (c Config) rootCertFile() string {
	if c.RootCertFile != "" {
		return c.RootCertFile
	}
	return filepath.Join(c.DataDir, ca.RootCertFile)
}

func (c Config) rootKeyFile() string {
	if c.RootKeyFile != "" {
		return c.RootKeyFile
	}
	return filepath.Join(c.DataDir, ca.RootKeyFile)
}

// legacyLayout reports whether the domain root key on this host signs the
// intermediates (--root-key, or no journal CA key given outside --dev).
func (c Config) legacyLayout() bool {
	switch {
	case c.JournalCAKey != "" || c.JournalCACertFile != "":
		return false
	case c.RootKeyFile != "":
		return true
	}
	return !c.Dev
}

func (c Config) journalCACertFile() string {
	if c.JournalCACertFile != "" {
		return c.JournalCACertFile
	}
	return filepath.Join(c.DataDir, ca.JournalCACertFile)
}

// devJournalCAKeyFile is where --dev keeps its journal CA key.
func (c Config) devJournalCAKeyFile() string { return filepath.Join(c.DataDir, ca.JournalCAKeyFile) }

// journalCAKey is the journal CA key's location (JournalCAKey, or --dev's
// file); ok is false when none is given.
func (c Config) journalCAKey() (spec keystore.Spec, ok bool) {
	if c.JournalCAKey == "" {
		if c.Dev {
			return keystore.Spec{Backend: keystore.BackendFile, Location: c.devJournalCAKeyFile()}, true
		}
		return keystore.Spec{}, false
	}
	spec, err := keystore.Parse(c.JournalCAKey)
	return spec, err == nil
}

// devJournalCA reports whether --dev makes (and remakes) the journal CA:
// with Dev, unless the journal CA certificate or key is given.
func (c Config) devJournalCA() bool {
	return c.Dev && !c.legacyLayout() && c.JournalCACertFile == "" && c.JournalCAKey == ""
}

func (c Config) validateSPIRE() []error {
	var errs []error
	if c.SPIREBundleFile != "" && c.SPIRESocket != "" {
		errs = append(errs, errors.New("journal: --spire-bundle and --spire-socket exclude each other: take the SPIRE bundle from a file or from this host's SPIRE agent"))
	}
	if c.SPIRESocket != "" {
		if err := workloadapi.ValidateAddress(c.SPIRESocket); err != nil {
			errs = append(errs, fmt.Errorf("journal: --spire-socket %q: %v (want unix:///path/to/agent.sock)", c.SPIRESocket, err))
		}
	}
	if td := c.SPIRETrustDomain; td != "" {
		if c.SPIREBundleFile == "" && c.SPIRESocket == "" {
			errs = append(errs, errors.New("journal: --spire-trust-domain needs --spire-bundle or --spire-socket"))
		}
		if parsed, err := spiffeid.TrustDomainFromString(td); err != nil || parsed.Name() != td {
			errs = append(errs, fmt.Errorf("journal: --spire-trust-domain %q is not a trust domain name (lower-case letters, digits, '.', '-' and '_', e.g. example.org)", td))
		}
	}
	return errs
}
