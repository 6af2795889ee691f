package journal

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/cmdutil"
	"github.com/pact-hpc/pact/internal/sdnotify"
	"github.com/pact-hpc/pact/internal/version"
	"github.com/pact-hpc/pact/internal/wire"
	"github.com/pact-hpc/pact/journal/ca"
)

const journalUsage = `pact-journal runs one node of the pact journal: the enrollment registry,
the revocation set and a local CA that signs node agents' certificates.

Usage:
  pact-journal [flags]                 run a journal
  pact-journal init --dir DIR          create a domain root and a platform-admin credential
  pact-journal admin issue [flags]     issue an operator credential from the root
  pact-journal restore [flags]         seed a journal of a new quorum from a snapshot file
  pact-journal recover [flags]         make a survivor of a lost majority a new quorum

Quick start (one development journal, state in ./.pact):
  pact-journal --dev --data-dir ./.pact --listen 127.0.0.1:7443

A quorum of three (run each line on its own host; the root from init is
copied to every journal host, key mode 0600):
  pact-journal init --dir /etc/pact --domain site.example
  pact-journal --node-id j1 --data-dir /var/lib/pact --listen 10.0.0.1:7443 \
      --raft-listen 10.0.0.1:7500 --root-cert /etc/pact/ca.pem --root-key /etc/pact/ca-key.pem \
      --initial-cluster j1=10.0.0.1:7500,j2=10.0.0.2:7500,j3=10.0.0.3:7500
  (j2 and j3 the same, with their own --node-id and addresses)

A SPIRE site lets node agents authenticate with their SPIRE X.509-SVIDs
by giving the journal the SPIRE trust bundle (docs/spire.md):
  pact-journal ... --spire-bundle /etc/pact/spire-bundle.pem
  pact-journal ... --spire-socket unix:///run/spire/agent.sock

As a service: the packages install pact-journal.service (Type=notify:
READY=1 once serving), settings in /etc/pact/journal.env; SIGHUP
(systemctl reload) re-reads the --spire-bundle file at once.

Every flag can also be set through the environment variable named in
its description; a flag on the command line wins.

Flags:
`

// Main runs the pact-journal command and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "admin" {
		return adminMain(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "init" {
		return initMain(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "restore" {
		return restoreMain(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "recover" {
		return recoverMain(args[1:], stdout, stderr)
	}
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("pact-journal", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, journalUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.NodeID, "node-id", cmdutil.EnvOr("PACT_NODE_ID", cfg.NodeID), "this journal's id (PACT_NODE_ID)")
	fs.StringVar(&cfg.DataDir, "data-dir", cmdutil.EnvOr("PACT_DATA_DIR", ""), "directory for Raft state and, with --dev, the root and admin credentials (PACT_DATA_DIR)")
	fs.StringVar(&cfg.ListenAddr, "listen", cmdutil.EnvOr("PACT_LISTEN", cfg.ListenAddr), "gRPC listen address host:port (PACT_LISTEN)")
	fs.BoolVar(&cfg.Dev, "dev", cmdutil.EnvOr("PACT_DEV", "") == "1" || cmdutil.EnvOr("PACT_DEV", "") == "true", "create a development domain root and admin credential in --data-dir on first start (PACT_DEV)")
	fs.StringVar(&cfg.Domain, "domain", cmdutil.EnvOr("PACT_DOMAIN", cfg.Domain), "domain id for a --dev root; otherwise read from the root certificate (PACT_DOMAIN)")
	fs.StringVar(&cfg.RootCertFile, "root-cert", cmdutil.EnvOr("PACT_ROOT_CERT", ""), "domain root certificate (default DATA_DIR/ca.pem) (PACT_ROOT_CERT)")
	fs.StringVar(&cfg.RootKeyFile, "root-key", cmdutil.EnvOr("PACT_ROOT_KEY", ""), "domain root key, mode 0600 (default DATA_DIR/ca-key.pem) (PACT_ROOT_KEY)")
	lifetime := fs.String("cert-lifetime", cmdutil.EnvOr("PACT_CERT_LIFETIME", cfg.CertLifetime.String()), "validity of agent certificates, e.g. 72h (PACT_CERT_LIFETIME)")
	names := fs.String("server-names", cmdutil.EnvOr("PACT_SERVER_NAMES", ""), "extra comma-separated DNS names for the server certificate (PACT_SERVER_NAMES)")
	fs.StringVar(&cfg.RaftListen, "raft-listen", cmdutil.EnvOr("PACT_RAFT_LISTEN", ""), "Raft address host:port for a journal in a quorum; empty runs a single journal (PACT_RAFT_LISTEN)")
	initial := fs.String("initial-cluster", cmdutil.EnvOr("PACT_INITIAL_CLUSTER", ""), "every voter of a NEW quorum as id=raft-host:port,...; the same on every journal (PACT_INITIAL_CLUSTER)")
	fs.BoolVar(&cfg.Join, "join", cmdutil.EnvOr("PACT_JOIN", "") == "true", "start empty and wait to be added to a running quorum with pact journal add (PACT_JOIN)")
	fs.StringVar(&cfg.AdvertiseGRPC, "advertise", cmdutil.EnvOr("PACT_ADVERTISE", ""), "gRPC address other journals use to reach this one (default: --listen) (PACT_ADVERTISE)")
	fs.StringVar(&cfg.AdvertiseRaft, "advertise-raft", cmdutil.EnvOr("PACT_ADVERTISE_RAFT", ""), "Raft address other journals use (default: --raft-listen) (PACT_ADVERTISE_RAFT)")
	fs.Uint64Var(&cfg.RaftSnapshotThreshold, "raft-snapshot-threshold", cfg.RaftSnapshotThreshold, "take a Raft snapshot after this many new log entries")
	fs.Uint64Var(&cfg.RaftTrailingLogs, "raft-trailing-logs", cfg.RaftTrailingLogs, "log entries kept after a snapshot, so a briefly lagging journal catches up without one")
	fs.DurationVar(&cfg.RaftSnapshotInterval, "raft-snapshot-interval", cfg.RaftSnapshotInterval, "how often Raft checks whether --raft-snapshot-threshold is reached (0: hashicorp/raft's default, 2m with jitter)")
	keyExchange := fs.String("key-exchange", cmdutil.EnvOr("PACT_KEY_EXCHANGE", string(cfg.KeyExchange)), "TLS key exchange the gRPC listener prefers: x25519, or x25519mlkem768 for the post-quantum hybrid (PACT_KEY_EXCHANGE)")
	fs.IntVar(&cfg.MaxConcurrentEnrollments, "max-concurrent-enrollments", envInt("PACT_MAX_CONCURRENT_ENROLLMENTS", cfg.MaxConcurrentEnrollments), "enrollments and renewals worked on at once; more wait up to --enroll-queue-wait, then get a retry-after (PACT_MAX_CONCURRENT_ENROLLMENTS)")
	fs.DurationVar(&cfg.EnrollQueueWait, "enroll-queue-wait", envDuration("PACT_ENROLL_QUEUE_WAIT", cfg.EnrollQueueWait), "how long an enrollment may wait for a slot, or for the shared failure budget during a guessing flood, before it is refused with a retry-after (PACT_ENROLL_QUEUE_WAIT)")
	fs.DurationVar(&cfg.RaftTimeout, "raft-timeout", cfg.RaftTimeout, "Raft heartbeat, election and lease timeout (0: hashicorp/raft's defaults, 1s/1s/500ms)")
	fs.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", envDuration("PACT_HEARTBEAT_TIMEOUT", cfg.HeartbeatTimeout), "mark an Active node Inactive after this long without a stream on any journal (PACT_HEARTBEAT_TIMEOUT)")
	fs.DurationVar(&cfg.TakeoverWindow, "takeover-window", envDuration("PACT_TAKEOVER_WINDOW", cfg.TakeoverWindow), "let a rebooted node (new key) enroll again once its stream has been gone this long (PACT_TAKEOVER_WINDOW)")
	fs.DurationVar(&cfg.DigestInterval, "digest-interval", envDuration("PACT_DIGEST_INTERVAL", cfg.DigestInterval), "how often this journal reports the streams it holds (PACT_DIGEST_INTERVAL)")
	fs.StringVar(&cfg.AuditLog, "audit-log", cmdutil.EnvOr("PACT_AUDIT_LOG", ""), "append every committed audit entry as a JSON line to this file, or - for stdout (PACT_AUDIT_LOG)")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", cmdutil.EnvOr("PACT_METRICS_LISTEN", ""), "serve /metrics, /healthz and /readyz over HTTP on host:port (PACT_METRICS_LISTEN)")
	fs.StringVar(&cfg.SPIREBundleFile, "spire-bundle", cmdutil.EnvOr("PACT_SPIRE_BUNDLE", ""), "accept node agents' SPIRE X.509-SVIDs: PEM file of the SPIRE trust domain's X.509 bundle, re-read when it changes (PACT_SPIRE_BUNDLE)")
	fs.StringVar(&cfg.SPIRESocket, "spire-socket", cmdutil.EnvOr("PACT_SPIRE_SOCKET", ""), "accept SPIRE X.509-SVIDs, with the bundle from this host's SPIRE agent Workload API, e.g. unix:///run/spire/agent.sock (PACT_SPIRE_SOCKET)")
	fs.StringVar(&cfg.SPIRETrustDomain, "spire-trust-domain", cmdutil.EnvOr("PACT_SPIRE_TRUST_DOMAIN", ""), "SPIRE trust domain whose SVIDs map to nodes (default: the pact domain) (PACT_SPIRE_TRUST_DOMAIN)")
	fs.DurationVar(&cfg.OperatorLifetime, "operator-lifetime", envDuration("PACT_OPERATOR_LIFETIME", cfg.OperatorLifetime), "validity of operator credentials issued through the journal (pact admin issue|renew) when none is asked for (PACT_OPERATOR_LIFETIME)")
	fs.DurationVar(&cfg.MaxOperatorLifetime, "max-operator-lifetime", envDuration("PACT_MAX_OPERATOR_LIFETIME", cfg.MaxOperatorLifetime), "the longest operator credential the journal issues (PACT_MAX_OPERATOR_LIFETIME)")
	fs.DurationVar(&cfg.RetireGrace, "retire-grace", envDuration("PACT_RETIRE_GRACE", cfg.RetireGrace), "how long a retired intermediate stays trusted so its agents can renew, unless the operator names a grace (PACT_RETIRE_GRACE)")
	fs.IntVar(&cfg.Connections.MaxConnsPerSource, "max-conns-per-source", envInt("PACT_MAX_CONNS_PER_SOURCE", cfg.Connections.MaxConnsPerSource), "connections one source address may hold open on the gRPC port, and again on the Raft port; more are closed before their TLS handshake (PACT_MAX_CONNS_PER_SOURCE)")
	fs.IntVar(&cfg.Connections.MaxConns, "max-conns", envInt("PACT_MAX_CONNS", cfg.Connections.MaxConns), "connections open at once on each port from all sources; keep it below the open-files limit (ulimit -n) (PACT_MAX_CONNS)")
	fs.IntVar(&cfg.Connections.MaxHandshakes, "max-handshakes", envInt("PACT_MAX_HANDSHAKES", cfg.Connections.MaxHandshakes), "TLS handshakes worked on at once per port; a client whose ClientHello arrives when all are busy waits up to --handshake-queue-wait, then is closed and retries (PACT_MAX_HANDSHAKES)")
	fs.DurationVar(&cfg.Connections.HandshakeTimeout, "handshake-timeout", envDuration("PACT_HANDSHAKE_TIMEOUT", cfg.Connections.HandshakeTimeout), "time a new connection has to send its ClientHello and finish the TLS handshake (PACT_HANDSHAKE_TIMEOUT)")
	fs.DurationVar(&cfg.Connections.HandshakeQueueWait, "handshake-queue-wait", envDuration("PACT_HANDSHAKE_QUEUE_WAIT", cfg.Connections.HandshakeQueueWait), "how long a client whose ClientHello has arrived may wait for a handshake slot before it is closed (PACT_HANDSHAKE_QUEUE_WAIT)")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", envDuration("PACT_IDLE_TIMEOUT", cfg.IdleTimeout), "close a gRPC connection that has carried no call for this long; an agent's stream keeps its connection busy (PACT_IDLE_TIMEOUT)")
	fs.IntVar(&cfg.MaxStreamsPerCert, "max-streams-per-cert", envInt("PACT_MAX_STREAMS_PER_CERT", cfg.MaxStreamsPerCert), "streams one certificate may hold open on this journal; the next is refused with TOO_MANY_STREAMS (PACT_MAX_STREAMS_PER_CERT)")
	fs.IntVar(&cfg.RateLimit.PerSourceBurst, "enroll-failures-per-source", envInt("PACT_ENROLL_FAILURES_PER_SOURCE", cfg.RateLimit.PerSourceBurst), "failed enrollments one source address may make before it is refused (PACT_ENROLL_FAILURES_PER_SOURCE)")
	fs.DurationVar(&cfg.RateLimit.PerSourceRefill, "enroll-failure-refill-per-source", envDuration("PACT_ENROLL_FAILURE_REFILL_PER_SOURCE", cfg.RateLimit.PerSourceRefill), "a source regains one failed enrollment this often (PACT_ENROLL_FAILURE_REFILL_PER_SOURCE)")
	fs.IntVar(&cfg.RateLimit.GlobalBurst, "enroll-failures-global", envInt("PACT_ENROLL_FAILURES_GLOBAL", cfg.RateLimit.GlobalBurst), "failed enrollments all sources together may make before unknown sources queue (PACT_ENROLL_FAILURES_GLOBAL)")
	fs.DurationVar(&cfg.RateLimit.GlobalRefill, "enroll-failure-refill-global", envDuration("PACT_ENROLL_FAILURE_REFILL_GLOBAL", cfg.RateLimit.GlobalRefill), "the journal regains one failed enrollment for all sources this often: the bound on hardware guesses it evaluates (PACT_ENROLL_FAILURE_REFILL_GLOBAL)")
	fs.IntVar(&cfg.RateLimit.FreshBurst, "enroll-failures-fresh", envInt("PACT_ENROLL_FAILURES_FRESH", cfg.RateLimit.FreshBurst), "first failed enrollments of addresses with none on record that all together may make before they queue; 0 makes them spend the global budget (PACT_ENROLL_FAILURES_FRESH)")
	fs.DurationVar(&cfg.RateLimit.FreshRefill, "enroll-failure-refill-fresh", envDuration("PACT_ENROLL_FAILURE_REFILL_FRESH", cfg.RateLimit.FreshRefill), "the journal regains one first failure of a fresh address this often: a node booting during a flood from A addresses waits about A times this (PACT_ENROLL_FAILURE_REFILL_FRESH)")
	fs.IntVar(&cfg.MaxEnrollWaiters, "max-enroll-waiters", envInt("PACT_MAX_ENROLL_WAITERS", cfg.MaxEnrollWaiters), "enrollments that may wait for the global failure budget while it is spent (PACT_MAX_ENROLL_WAITERS)")
	logFormat := fs.String("log-format", cmdutil.EnvOr("PACT_LOG_FORMAT", "text"), "log format: text or json (PACT_LOG_FORMAT)")
	logLevel := fs.String("log-level", cmdutil.EnvOr("PACT_LOG_LEVEL", "info"), "log level: debug, info, warn, error (PACT_LOG_LEVEL)")
	showVersion := fs.Bool("version", false, "print pact-journal's version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.Line("pact-journal"))
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pact-journal: unexpected argument %q (see pact-journal --help)\n", fs.Arg(0))
		return 2
	}
	logger, err := cmdutil.NewLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal: %v\n", err)
		return 2
	}
	cfg.Logger = logger
	d, err := time.ParseDuration(*lifetime)
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal: --cert-lifetime %q: want a duration such as 72h\n", *lifetime)
		return 2
	}
	cfg.CertLifetime = d
	if cfg.KeyExchange, err = wire.ParseKeyExchange(*keyExchange); err != nil {
		fmt.Fprintf(stderr, "pact-journal: --key-exchange: %v\n", err)
		return 2
	}
	peers, err := ParsePeers(*initial)
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal: %v\n", err)
		return 2
	}
	cfg.InitialCluster = peers
	if *names != "" {
		cfg.ServerNames = strings.Split(*names, ",")
	}
	if chaosClock != nil {
		cfg.Clock = chaosClock(cfg.Clock, cfg.NodeID, logger)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "pact-journal: invalid configuration:\n%v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP reloads (below); caught from the start so an early one never
	// kills the journal.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	j, err := New(cfg)
	if err != nil {
		logger.Error("cannot start", "err", err)
		switch {
		case errors.Is(err, ErrRemoved):
			return ExitRemoved
		case errors.Is(err, ErrNoCluster):
			return 2
		}
		return 1
	}
	startTimeout := 60 * time.Second
	if cfg.Join {
		startTimeout = 24 * time.Hour // until an operator adds it
	}
	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	// A journal removed while it waits to start gives up at once.
	go func() {
		select {
		case <-j.Removed():
			cancel()
		case <-startCtx.Done():
		}
	}()
	err = j.Start(startCtx)
	cancel()
	if err != nil {
		logger.Error("cannot start", "err", err)
		_ = j.Close()
		if isRemoved(j) {
			return ExitRemoved
		}
		return 1
	}
	if cfg.Dev {
		printDevBanner(stdout, cfg, j.Addr(), j.Domain())
	}
	notify := sdnotify.FromEnv()
	if err := notify.Notify(sdnotify.Ready, "STATUS=serving on "+j.Addr()); err != nil {
		logger.Warn("cannot tell systemd the journal is ready", "err", err)
	}
	code := 0
	for ctx.Err() == nil && code == 0 {
		select {
		case <-ctx.Done():
		case <-j.Removed():
			logger.Info("shutting down: removed from the quorum", "exit_code", ExitRemoved)
			code = ExitRemoved
		case <-hup:
			_ = notify.Notify(sdnotify.Reloading)
			if err := j.Reload(); err != nil {
				logger.Error("reload failed; keeping the previous settings", "err", err)
			} else {
				logger.Info("reloaded on SIGHUP")
			}
			_ = notify.Notify(sdnotify.Ready)
		}
	}
	_ = notify.Notify(sdnotify.Stopping)
	if code == 0 {
		logger.Info("shutting down")
	}
	if err := j.Close(); err != nil {
		logger.Error("shutdown", "err", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Exit codes of pact-journal (docs/exit-codes.md).
const (
	// ExitRemoved: the journal was removed from its quorum (now or
	// before); it must not be restarted from the same data directory.
	ExitRemoved = 3
)

func isRemoved(j *Journal) bool {
	select {
	case <-j.Removed():
		return true
	default:
		return false
	}
}

const adminIssueUsage = `pact-journal admin issue signs an operator credential with the domain root.

Usage:
  pact-journal admin issue --data-dir DIR --name NAME --role ROLE --cert-out FILE --key-out FILE

Roles: platform-admin (register and decommission nodes), pact-ops-{vcluster}
(assign nodes into and out of that vCluster), viewer (read only).

This is the offline way, for the first credential or when no journal is up:
it needs the root key. The journal records the credential in Raft at its
first use, and "pact admin revoke NAME" revokes it even before that. With a
running journal prefer "pact admin issue" (the key never leaves the
operator's machine and the credential is recorded at once). Credentials live
7 days unless --lifetime says otherwise; renew with "pact admin renew".

Example:
  pact-journal admin issue --data-dir ./.pact --name alice --role viewer \
      --cert-out alice.pem --key-out alice-key.pem

Flags:
`

func adminMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "issue" {
		fmt.Fprint(stderr, adminIssueUsage)
		return 2
	}
	fs := flag.NewFlagSet("pact-journal admin issue", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, adminIssueUsage); fs.PrintDefaults() }
	dataDir := fs.String("data-dir", cmdutil.EnvOr("PACT_DATA_DIR", ""), "journal data directory holding ca.pem and ca-key.pem (PACT_DATA_DIR)")
	rootCert := fs.String("root-cert", cmdutil.EnvOr("PACT_ROOT_CERT", ""), "domain root certificate (default DATA_DIR/ca.pem)")
	rootKey := fs.String("root-key", cmdutil.EnvOr("PACT_ROOT_KEY", ""), "domain root key (default DATA_DIR/ca-key.pem)")
	name := fs.String("name", "", "operator name (goes into the certificate)")
	role := fs.String("role", "", "platform-admin, viewer or pact-ops-{vcluster}")
	certOut := fs.String("cert-out", "", "where to write the certificate")
	keyOut := fs.String("key-out", "", "where to write the private key (mode 0600)")
	lifetime := fs.Duration("lifetime", ca.DefaultOperatorLifetime, "validity of the credential (short: renew with pact admin renew)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var missing []string
	for flagName, v := range map[string]string{"--name": *name, "--role": *role, "--cert-out": *certOut, "--key-out": *keyOut} {
		if v == "" {
			missing = append(missing, flagName)
		}
	}
	if *dataDir == "" && (*rootCert == "" || *rootKey == "") {
		missing = append(missing, "--data-dir (or --root-cert and --root-key)")
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "pact-journal admin issue: missing %s (see --help)\n", strings.Join(missing, ", "))
		return 2
	}
	if *rootCert == "" {
		*rootCert = filepath.Join(*dataDir, ca.RootCertFile)
	}
	if *rootKey == "" {
		*rootKey = filepath.Join(*dataDir, ca.RootKeyFile)
	}
	auth, err := ca.LoadKeyFileAuthority(*rootCert, *rootKey)
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal admin issue: %v\n", err)
		return 1
	}
	certPEM, keyPEM, err := ca.IssueAdmin(auth, *name, *role, *lifetime, clock.Real{}.Now())
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal admin issue: %v\n", err)
		return 2
	}
	if err := writeNew(*keyOut, keyPEM, 0o600); err != nil {
		fmt.Fprintf(stderr, "pact-journal admin issue: %v\n", err)
		return 1
	}
	if err := writeNew(*certOut, certPEM, 0o644); err != nil {
		fmt.Fprintf(stderr, "pact-journal admin issue: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "issued %s credential for %s, valid %v: %s, %s (recorded by the journal at its first use)\n", *role, *name, *lifetime, *certOut, *keyOut)
	return 0
}

// writeNew refuses to overwrite, so an existing credential is never lost.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s already exists; remove it or choose another path", path)
		}
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// printDevBanner tells a first-time user exactly what to type next.
func printDevBanner(w io.Writer, cfg Config, addr, domain string) {
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		dir = cfg.DataDir
	}
	fmt.Fprintf(w, `
pact dev journal %s is serving on %s (domain %s, state in %s).

In another terminal, point the CLI at it:

  export PACT_JOURNAL=%s
  export PACT_CA=%s
  export PACT_CERT=%s
  export PACT_KEY=%s

Register a node by its hardware identity, start an agent for it, and look:

  bin/pact node enroll node-001 --mac 52:54:00:00:00:01 --bmc-serial SN-0001
  bin/pact-agent --journal %s --ca %s --mac 52:54:00:00:00:01 --bmc-serial SN-0001
  bin/pact node inspect node-001

Stop with Ctrl-C; the registry stays in %s.
`, cfg.NodeID, addr, domain, dir,
		addr, filepath.Join(dir, ca.RootCertFile), filepath.Join(dir, ca.AdminCertFile), filepath.Join(dir, ca.AdminKeyFile),
		addr, filepath.Join(dir, ca.RootCertFile), dir)
}

// envInt reads an integer from the environment, falling back to def when
// unset or malformed (Validate then reports the flag's value).
func envInt(key string, def int) int {
	if v := os.Getenv(key); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

// envDuration reads a duration from the environment, falling back to def
// when unset or malformed (Validate then reports the flag's value).
func envDuration(key string, def time.Duration) time.Duration {
	if v := os.Getenv(key); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

const initUsage = `pact-journal init creates a domain root CA and a platform-admin credential.

Usage:
  pact-journal init --dir DIR [--domain DOMAIN]

It writes DIR/ca.pem (give it to every node image and operator),
DIR/ca-key.pem (mode 0600: every journal host needs it to sign its
intermediate; guard it), DIR/admin.pem and DIR/admin-key.pem. It never
overwrites an existing root.

Flags:
`

func initMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pact-journal init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, initUsage); fs.PrintDefaults() }
	dir := fs.String("dir", "", "directory for the root and admin credential")
	domain := fs.String("domain", "pact.local", "domain id (the SPIFFE trust domain)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "pact-journal init: --dir is required (see --help)")
		return 2
	}
	created, err := ca.InitDev(*dir, *domain, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal init: %v\n", err)
		return 1
	}
	if !created {
		fmt.Fprintf(stdout, "%s already holds a root; nothing changed\n", filepath.Join(*dir, ca.RootCertFile))
		return 0
	}
	fmt.Fprintf(stdout, "created domain %s: root %s (key %s, mode 0600), admin credential %s\n", *domain,
		filepath.Join(*dir, ca.RootCertFile), filepath.Join(*dir, ca.RootKeyFile), filepath.Join(*dir, ca.AdminCertFile))
	return 0
}
