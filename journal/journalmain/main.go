// Package journalmain is the pact-journal command: its flags, environment
// and configuration file (internal/settings), its subcommands, signals and
// exit codes. Package journal is the library and knows none of them.
package journalmain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/atomicfile"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/cmdline"
	"github.com/pact-hpc/pact/internal/duration"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/sdnotify"
	"github.com/pact-hpc/pact/internal/settings"
	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/internal/version"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/raftfsm"
)

const journalUsage = `pact-journal runs one node of the pact journal: the enrollment registry,
the revocation set and a local CA that signs node agents' certificates.

Usage:
  pact-journal [--config FILE] [flags]   run a journal
  pact-journal init --dir DIR --domain D a root, its key and an admin credential in one directory,
                                         for trials and the legacy layout (a site: pact ca init)
  pact-journal admin issue [flags]       issue an operator credential with a root key file
                                         (a site: pact ca issue-admin, then pact admin issue)
  pact-journal ca-request [flags]        make this journal's CA key and a request for pact ca sign-journal
  pact-journal restore [flags]           seed a journal of a new quorum from a snapshot file
  pact-journal recover [flags]           make a survivor of a lost majority a new quorum
  pact-journal --version                 print the version

Quick start (one development journal, state in ./.pact):
  pact-journal --dev --data-dir ./.pact --listen 127.0.0.1:7443

A quorum of three (run each line on its own host). The domain root is made
offline (pact ca init) and only its certificate, ca.pem, goes to the
journal hosts; each journal has a journal CA of its own, its key in the
host's TPM, an HSM token or a 0600 file, its certificate signed in the
ceremony (pact-journal ca-request, then pact ca sign-journal;
docs/ceremony.md):
  pact-journal --node-id j1 --data-dir /var/lib/pact --listen 10.0.0.1:7443 \
      --raft-listen 10.0.0.1:7500 --root-cert /etc/pact/ca.pem \
      --journal-ca-cert /etc/pact/j1-ca.pem --journal-ca-key tpm:/etc/pact/journal-ca.tpmkey \
      --initial-cluster j1=10.0.0.1:7500,j2=10.0.0.2:7500,j3=10.0.0.3:7500
  (j2 and j3 the same, with their own --node-id, journal CA and addresses)
A journal of the layout before journal CAs signs with the root key
(--root-key); it still runs, and warns: docs/migration.md moves it.

A SPIRE site lets node agents authenticate with their SPIRE X.509-SVIDs
by giving the journal the SPIRE trust bundle (docs/spire.md):
  pact-journal ... --spire-bundle /etc/pact/spire-bundle.pem
  pact-journal ... --spire-socket unix:///run/spire/agent.sock

Settings: every flag below can also be set through the environment
variable named in its description, and in a YAML configuration file
(--config FILE or PACT_JOURNAL_CONFIG) under the flag's name without the
dashes, e.g.
  node-id: j1
  raft-listen: 10.0.0.1:7500
  initial-cluster: [j1=10.0.0.1:7500, j2=10.0.0.2:7500, j3=10.0.0.3:7500]
  cert-lifetime: 72h
A flag wins over its variable, which wins over the file. An unknown key or
a bad value anywhere is reported with its line, all at once, and nothing
starts. The packages install an example, /etc/pact/journal.yaml
(docs/configuration.md).

Before a start (and before a restart after an edit), as the journal's user:
  pact-journal --config /etc/pact/journal.yaml --check-config
checks the settings and what they name on disk without starting: the root
certificate, the journal CA (certificate and key present, readable, a pair,
signed by the root for this journal and every name it serves under), the
data directory (writable or creatable, not removed), every address, the
SPIRE bundle and the audit log; every problem at once, each saying what to
do (exit 2). A start makes the same checks first and exits 2 on them. A
TPM that is busy or out of object memory is no configuration problem:
both say so, and how to free it, and exit 1 (the unit restarts a start).

As a service: the packages install pact-journal.service (Type=notify:
READY=1 once serving) reading /etc/pact/journal.yaml, with overrides in
/etc/pact/journal.env; SIGHUP (systemctl reload) re-reads the
--spire-bundle file at once.

Flags:
`

// Settings declares every setting of pact-journal over cfg (whose values
// are the defaults) and log. The names are the flags and the keys of the
// configuration file; configFile receives --config.
func Settings(cfg *journal.Config, log *cmdline.Logging, configFile *string) *settings.Set {
	s := settings.New("pact-journal")
	s.ConfigFile(configFile, "config", "PACT_JOURNAL_CONFIG", "YAML configuration file: the settings below by name, e.g. \"raft-listen: 10.0.0.1:7500\"; flags and variables win over it")
	s.String(&cfg.NodeID, "node-id", "PACT_NODE_ID", "this journal's id")
	s.String(&cfg.DataDir, "data-dir", "PACT_DATA_DIR", "directory for Raft state and, with --dev, the root and admin credentials")
	s.String(&cfg.ListenAddr, "listen", "PACT_LISTEN", "gRPC listen address host:port")
	s.Bool(&cfg.Dev, "dev", "PACT_DEV", "development set-up: create a domain root and admin credential in --data-dir on first start, and a journal CA for this journal from that root (the root key stays in --data-dir: development only)")
	s.String(&cfg.Domain, "domain", "PACT_DOMAIN", "domain id for a --dev root; otherwise read from the root certificate")
	s.String(&cfg.RootCertFile, "root-cert", "PACT_ROOT_CERT", "domain root certificate, or two roots of the domain during a root rollover (default DATA_DIR/ca.pem)")
	s.String(&cfg.JournalCACertFile, "journal-ca-cert", "PACT_JOURNAL_CA_CERT", "this journal's journal CA certificate, from pact ca sign-journal; re-read at each re-key, so a renewed one is taken without a restart (default DATA_DIR/journal-ca.pem)")
	s.String(&cfg.JournalCAKey, "journal-ca-key", "PACT_JOURNAL_CA_KEY", "where the journal CA's key is: tpm:PATH (a key blob only this host's TPM loads), a pkcs11: URI (an HSM token; pin-source=file:PATH), or file:PATH (mode 0600); with --dev default file:DATA_DIR/journal-ca-key.pem")
	s.String(&cfg.TPMDevice, "tpm-device", "PACT_TPM_DEVICE", "the TPM holding a tpm: --journal-ca-key: a device, or unix:PATH for a software TPM's socket (default /dev/tpmrm0)")
	s.Duration(&cfg.TPMTimeout, "tpm-timeout", "PACT_TPM_TIMEOUT", "how long a tpm: --journal-ca-key's TPM may take to open and to answer each command (at start, --check-config and every re-key) before the journal gives up, naming the device and what holds it")
	s.String(&cfg.RootKeyFile, "root-key", "PACT_ROOT_KEY", "LEGACY: the domain root key on this host (mode 0600) signs the intermediates itself; without --journal-ca-key and --dev it defaults to DATA_DIR/ca-key.pem; excludes --journal-ca-cert and --journal-ca-key; move it offline: docs/migration.md")
	s.Duration(&cfg.CertLifetime, "cert-lifetime", "PACT_CERT_LIFETIME", "validity of agent certificates, e.g. 3d or 72h")
	s.List(&cfg.ServerNames, "server-names", "PACT_SERVER_NAMES", "extra comma-separated DNS names for the server certificate")
	s.String(&cfg.RaftListen, "raft-listen", "PACT_RAFT_LISTEN", "Raft address host:port for a journal in a quorum; empty runs a single journal")
	initial := cfg.InitialCluster
	s.FuncList("initial-cluster", "PACT_INITIAL_CLUSTER", "every voter of a NEW quorum as id=raft-host:port,...; the same on every journal", "",
		func(items []string) error {
			peers, err := journal.ParsePeers(strings.Join(items, ","))
			cfg.InitialCluster = peers
			return err
		}, func() { cfg.InitialCluster = initial })
	s.Bool(&cfg.Join, "join", "PACT_JOIN", "start empty and wait to be added to a running quorum with pact journal add")
	s.String(&cfg.AdvertiseGRPC, "advertise", "PACT_ADVERTISE", "gRPC address other journals use to reach this one (default: --listen)")
	s.String(&cfg.AdvertiseRaft, "advertise-raft", "PACT_ADVERTISE_RAFT", "Raft address other journals use (default: --raft-listen)")
	s.Uint64(&cfg.RaftSnapshotThreshold, "raft-snapshot-threshold", "PACT_RAFT_SNAPSHOT_THRESHOLD", "take a Raft snapshot after this many new log entries")
	s.Uint64(&cfg.RaftTrailingLogs, "raft-trailing-logs", "PACT_RAFT_TRAILING_LOGS", "log entries kept after a snapshot, so a briefly lagging journal catches up without one")
	s.Duration(&cfg.RaftSnapshotInterval, "raft-snapshot-interval", "PACT_RAFT_SNAPSHOT_INTERVAL", "how often Raft checks whether --raft-snapshot-threshold is reached (0: hashicorp/raft's default, 2m with jitter)")
	kx := cfg.KeyExchange
	s.Func("key-exchange", "PACT_KEY_EXCHANGE", "TLS key exchange the gRPC listener prefers: x25519, or x25519mlkem768 for the post-quantum hybrid", "string", string(kx),
		func(v string) (err error) { cfg.KeyExchange, err = transport.ParseKeyExchange(v); return err },
		func() { cfg.KeyExchange = kx })
	s.Int(&cfg.MaxConcurrentEnrollments, "max-concurrent-enrollments", "PACT_MAX_CONCURRENT_ENROLLMENTS", "enrollments, renewals and standbys worked on at once; more wait while their call's deadline leaves 3s to serve them (at least --enroll-queue-wait, at most 30s), then get a retry-after")
	s.Duration(&cfg.EnrollQueueWait, "enroll-queue-wait", "PACT_ENROLL_QUEUE_WAIT", "the least an enrollment or renewal waits for a slot (longer while its call's deadline allows), and how long an enrollment may wait for the shared failure budget during a guessing flood, before it is refused with a retry-after")
	s.Duration(&cfg.RaftTimeout, "raft-timeout", "PACT_RAFT_TIMEOUT", "Raft heartbeat, election and lease timeout (0: 2s each, twice hashicorp/raft's heartbeat and election timeouts and a lease as long, so a boot storm that saturates the journals' CPU does not depose the leader; shorter: a crashed leader is replaced sooner, at the risk of needless elections under load)")
	s.Duration(&cfg.RaftWriteTimeout, "raft-write-timeout", "PACT_RAFT_WRITE_TIMEOUT", "a leader whose Raft store write (raft.db) has not finished after this long, while its disk does not answer a probe (a page written and synced beside raft.db), stops sending Raft messages, so the others elect a leader, and serves nothing until the write finishes; while the disk answers, or the journal's goroutines wait a tenth of this or more to run (short of CPU), after three times this long (at least 1s)")
	s.Duration(&cfg.NodeLivenessTimeout, "heartbeat-timeout", "PACT_HEARTBEAT_TIMEOUT", "mark an Active node Inactive after this long without a stream on any journal")
	s.Duration(&cfg.RenewalStreamGrace, "renewal-stream-grace", "PACT_RENEWAL_STREAM_GRACE", "keep a renewed node's old stream open until its new stream opens, at most this long, so a renewal never leaves a node without a stream (0: end it when the renewal commits); calls with the old certificate are refused from the commit on, and a revocation or fence ends it at once")
	s.Duration(&cfg.TakeoverWindow, "takeover-window", "PACT_TAKEOVER_WINDOW", "let a rebooted node (new key) enroll again once its stream has been gone this long")
	s.Duration(&cfg.DigestInterval, "digest-interval", "PACT_DIGEST_INTERVAL", "how often this journal reports the streams it holds")
	s.String(&cfg.AuditLog, "audit-log", "PACT_AUDIT_LOG", "append every committed audit entry as a JSON line to this file, or - for stdout")
	s.String(&cfg.MetricsListen, "metrics-listen", "PACT_METRICS_LISTEN", "serve /metrics, /healthz and /readyz over HTTP on host:port")
	s.String(&cfg.BundleEndpointListen, "bundle-endpoint-listen", "PACT_BUNDLE_ENDPOINT_LISTEN", "serve the domain's trust bundle as a SPIFFE bundle endpoint (https_spiffe profile) on host:port, for federated domains and SPIRE servers (docs/domains.md)")
	s.Duration(&cfg.BundleRefreshHint, "bundle-refresh-hint", "PACT_BUNDLE_REFRESH_HINT", "the spiffe_refresh_hint the bundle endpoint announces: how often federated domains fetch the bundle again")
	s.String(&cfg.SPIREBundleFile, "spire-bundle", "PACT_SPIRE_BUNDLE", "accept node agents' SPIRE X.509-SVIDs: PEM file of the SPIRE trust domain's X.509 bundle, re-read when it changes")
	s.String(&cfg.SPIRESocket, "spire-socket", "PACT_SPIRE_SOCKET", "accept SPIRE X.509-SVIDs, with the bundle from this host's SPIRE agent Workload API, e.g. unix:///run/spire/agent.sock")
	s.String(&cfg.SPIRETrustDomain, "spire-trust-domain", "PACT_SPIRE_TRUST_DOMAIN", "SPIRE trust domain whose SVIDs map to nodes (default: the pact domain)")
	s.Duration(&cfg.OperatorLifetime, "operator-lifetime", "PACT_OPERATOR_LIFETIME", "validity of operator credentials issued through the journal (pact admin issue|renew) when none is asked for")
	s.Duration(&cfg.MaxOperatorLifetime, "max-operator-lifetime", "PACT_MAX_OPERATOR_LIFETIME", "the longest operator credential the journal issues")
	s.Duration(&cfg.RetireGrace, "retire-grace", "PACT_RETIRE_GRACE", "how long a retired intermediate stays trusted so its agents can renew, unless the operator names a grace")
	s.Int(&cfg.Connections.MaxConnsPerSource, "max-conns-per-source", "PACT_MAX_CONNS_PER_SOURCE", "connections one source address may hold open on the gRPC port, and again on the Raft port; more are closed before their TLS handshake")
	s.Int(&cfg.Connections.MaxConns, "max-conns", "PACT_MAX_CONNS", "connections open at once on each port from all sources; keep it below the open-files limit (ulimit -n)")
	s.Int(&cfg.Connections.MaxHandshakes, "max-handshakes", "PACT_MAX_HANDSHAKES", "TLS handshakes worked on at once per port; a client whose ClientHello arrives when all are busy queues for one, unless even the journal's fastest recent rate could not serve it within --handshake-queue-wait: then it is answered busy with a retry-after")
	s.Duration(&cfg.Connections.HandshakeTimeout, "handshake-timeout", "PACT_HANDSHAKE_TIMEOUT", "time a new connection has to send its ClientHello and finish the TLS handshake (gRPC port: the handshake gets it again from when it leaves the --handshake-queue-wait queue)")
	s.Duration(&cfg.Connections.HandshakeQueueWait, "handshake-queue-wait", "PACT_HANDSHAKE_QUEUE_WAIT", "the longest a client whose ClientHello has arrived waits for a handshake slot; then (or at once, if the journal predicts a longer wait) it is answered busy with a retry-after (gRPC port) or closed (Raft port)")
	s.Duration(&cfg.Connections.MaxRetryAfter, "max-retry-after", "PACT_MAX_RETRY_AFTER", "the latest return a busy answer on the gRPC port names (up to 2m): a node answered busy more than --near-busy-answers times in a row, in a boot storm several times what the queue carries, is booked past --handshake-queue-wait at four times the rate the journal served while clients queued, instead of bouncing every few seconds; 0 names no later than the queue wait (docs/security.md)")
	s.Int(&cfg.Connections.NearAnswers, "near-busy-answers", "PACT_NEAR_BUSY_ANSWERS", "busy answers in a row an address gets that name no later than --handshake-queue-wait before its return may be booked later (up to --max-retry-after); a handshake slot starts the count again; 0 books from the first answer")
	s.Duration(&cfg.IdleTimeout, "idle-timeout", "PACT_IDLE_TIMEOUT", "close a gRPC connection that has carried no call for this long; an agent's stream keeps its connection busy")
	s.Int(&cfg.MaxStreamsPerCert, "max-streams-per-cert", "PACT_MAX_STREAMS_PER_CERT", "streams one certificate may hold open on this journal; the next is refused with TOO_MANY_STREAMS")
	s.Int(&cfg.RateLimit.PerSourceBurst, "enroll-failures-per-source", "PACT_ENROLL_FAILURES_PER_SOURCE", "failed enrollments one source address may make before it is refused")
	s.Duration(&cfg.RateLimit.PerSourceRefill, "enroll-failure-refill-per-source", "PACT_ENROLL_FAILURE_REFILL_PER_SOURCE", "a source regains one failed enrollment this often")
	s.Int(&cfg.RateLimit.GlobalBurst, "enroll-failures-global", "PACT_ENROLL_FAILURES_GLOBAL", "failed enrollments all sources together may make before unknown sources queue")
	s.Duration(&cfg.RateLimit.GlobalRefill, "enroll-failure-refill-global", "PACT_ENROLL_FAILURE_REFILL_GLOBAL", "the journal regains one failed enrollment for all sources this often: the bound on hardware guesses it evaluates")
	s.Int(&cfg.RateLimit.FreshBurst, "enroll-failures-fresh", "PACT_ENROLL_FAILURES_FRESH", "first failed enrollments of addresses with none on record that all together may make before they queue; 0 makes them spend the global budget")
	s.Duration(&cfg.RateLimit.FreshRefill, "enroll-failure-refill-fresh", "PACT_ENROLL_FAILURE_REFILL_FRESH", "the journal regains one first failure of a fresh address this often: a node booting during a flood from A addresses waits about A times this")
	s.Int(&cfg.MaxEnrollWaiters, "max-enroll-waiters", "PACT_MAX_ENROLL_WAITERS", "enrollments that may wait for the global failure budget while it is spent")
	s.Int(&cfg.ActivationBatchMax, "activation-batch-max", "PACT_ACTIVATION_BATCH_MAX", "most enrollment activations and renewals in one Raft entry; those arriving while this journal's previous batch commits go together in the next, 1 sends each alone")
	s.Duration(&cfg.ActivationBatchWindow, "activation-batch-window", "PACT_ACTIVATION_BATCH_WINDOW", "longest an activation waits behind a batch still committing before it is sent beside it; one that finds none in flight goes at once")
	s.Bool(&cfg.AcceptPeersWithoutQuorumID, "accept-peers-without-quorum-id", "PACT_ACCEPT_PEERS_WITHOUT_QUORUM_ID", "upgrade mode, only while a journal of a release before quorum ids is still a member: admit peers that prove no quorum id (by their certificate, Raft's records and membership alone); off, a journal with a quorum id refuses them (docs/quorum.md, \"Rolling upgrades\")")
	log.Declare(s)
	return s
}

// Main runs the pact-journal command and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return run(args, os.LookupEnv, stdout, stderr)
}

func run(args []string, env settings.Env, stdout, stderr io.Writer) int {
	return cmdline.Execute(rootCommand(env, stdout, stderr), args, stdout, stderr)
}

// rootCommand is pact-journal: a journal, and its offline subcommands.
func rootCommand(env settings.Env, stdout, stderr io.Writer) *cobra.Command {
	cfg := journal.DefaultConfig()
	var log cmdline.Logging
	var configFile string
	var showVersion, check bool
	s := Settings(&cfg, &log, &configFile)
	root := cmdline.Command("pact-journal", "run one node of the pact journal", journalUsage, s, func(cmd *cobra.Command) int {
		if !cmdline.Resolve(cmd, s, env) {
			return 2
		}
		if showVersion {
			fmt.Fprintln(stdout, version.Line("pact-journal"))
			return 0
		}
		return serve(cfg, log, check, stdout, stderr)
	})
	root.Flags().BoolVar(&showVersion, "version", false, "print pact-journal's version and exit")
	root.Flags().BoolVar(&check, "check-config", false, "check the settings (file, environment and flags) and what they name on disk (root certificate and key, data directory, SPIRE bundle, audit log) without starting, and exit: 0 if pact-journal would start with them; 2, with every problem, if not; 1 if a tpm: key's TPM cannot be used now (busy, or out of object memory)")
	cmdline.Subcommands(root)
	root.AddCommand(initCommand(stdout, stderr), adminCommand(env, stdout, stderr), caRequestCommand(env, stdout, stderr),
		restoreCommand(stdout, stderr), recoverCommand(env, stdout, stderr))
	return root
}

// serve runs a journal with the resolved settings (or, with check, only
// checks them) and returns its exit code.
func serve(cfg journal.Config, log cmdline.Logging, check bool, stdout, stderr io.Writer) int {
	logger, err := log.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal: %v\n", err)
		return 2
	}
	cfg.Logger = logger
	if chaosClock != nil {
		cfg.Clock = chaosClock(cfg.Clock, cfg.NodeID, logger)
	}
	// What a start would meet on disk is checked with the settings, so a
	// missing root or an unwritable data directory is a configuration
	// problem (exit 2, which the unit does not restart), reported with
	// every other at once, before anything is created.
	notes, problems := splitPreflight(cfg.Preflight())
	if w := tpmDeviceWarning(cfg); w != "" && check {
		fmt.Fprintf(stdout, "pact-journal: note: %s\n", w)
	} else if w != "" {
		logger.Warn(w)
	}
	// A TPM that is busy or full is not a configuration problem: exit 1,
	// which the unit restarts (docs/ca-keys.md).
	tpmTransient, problems := splitTPMTransient(problems)
	if err := errors.Join(cfg.Validate(), problems); err != nil {
		cmdline.ReportProblems(stderr, "pact-journal", err)
		if tpmTransient != nil {
			reportTPMTransient(stderr, check, tpmTransient)
		}
		if errors.Is(err, journal.ErrRemoved) {
			return ExitRemoved
		}
		return 2
	}
	if tpmTransient != nil {
		reportTPMTransient(stderr, check, tpmTransient)
		return 1
	}
	if check {
		for _, n := range notes {
			kind := "note"
			if errors.Is(n, journal.ErrNameNotInCertificate) {
				kind = "warning"
			}
			fmt.Fprintf(stdout, "pact-journal: %s: %v\n", kind, n)
		}
		if os.Geteuid() == 0 && !cfg.Dev {
			fmt.Fprintln(stdout, "pact-journal: note: checked as root, who reads every file: run the check as the journal's user (sudo -u pact ...) to know that it can read them")
		}
		fmt.Fprintln(stdout, "pact-journal: the settings are valid, and the files and directories they name are usable")
		return 0
	}
	for _, n := range notes {
		if errors.Is(n, journal.ErrNameNotInCertificate) {
			logger.Warn("clients that dial this name will fail the TLS handshake", logkey.Err, n)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP reloads (below); caught from the start so an early one never
	// kills the journal.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	j, err := journal.NewContext(ctx, cfg)
	if err != nil {
		logger.Error("cannot start", logkey.Err, err)
		switch {
		case errors.Is(err, journal.ErrRemoved):
			return ExitRemoved
		case errors.Is(err, journal.ErrBootstrapRefused):
			return ExitBootstrapRefused
		case errors.Is(err, journal.ErrNoCluster):
			return 2
		case errors.Is(err, raftfsm.ErrQuorumVersion):
			return ExitBinaryTooOld
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
		logger.Error("cannot start", logkey.Err, err)
		_ = j.Close()
		if isRemoved(j) {
			return ExitRemoved
		}
		return 1
	}
	if cfg.Dev {
		printDevBanner(stdout, cfg, j.Addr(), j.Domain(), pki.CertFingerprint(j.Root()), j.NodeCount(), j.HasNode(devExampleNode))
	}
	notify := sdnotify.FromEnv()
	if err := notify.Notify(sdnotify.Ready, "STATUS=serving on "+j.Addr()); err != nil {
		logger.Warn("cannot tell systemd the journal is ready", logkey.Err, err)
	}
	code := 0
	for ctx.Err() == nil && code == 0 {
		select {
		case <-ctx.Done():
		case <-j.Removed():
			logger.Info("shutting down: removed from the quorum", logkey.ExitCode, ExitRemoved)
			code = ExitRemoved
		case <-hup:
			_ = notify.Notify(sdnotify.Reloading)
			if err := j.Reload(); err != nil {
				logger.Error("reload failed; keeping the previous settings", logkey.Err, err)
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
		logger.Error("shutdown", logkey.Err, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// splitPreflight separates what only a running journal causes (its data
// directory in use: a restart stops it first) and what a start survives
// but clients will not (a name they dial not in the certificate) from the
// problems a start would fail on. A start meets the former in NewContext, and says so.
func splitPreflight(err error) (notes []error, problems error) {
	if err == nil {
		return nil, nil
	}
	var errs []error
	parts := []error{err}
	for len(parts) > 0 {
		e := parts[0]
		parts = parts[1:]
		// Into errors.Join only, as cmdline.ReportProblems.
		if j, ok := e.(interface{ Unwrap() []error }); ok && isJoin(e, j.Unwrap()) {
			parts = append(j.Unwrap(), parts...)
			continue
		}
		if errors.Is(e, journal.ErrDataDirInUse) || errors.Is(e, journal.ErrNameNotInCertificate) {
			notes = append(notes, e)
		} else {
			errs = append(errs, e)
		}
	}
	return notes, errors.Join(errs...)
}

func isJoin(e error, parts []error) bool {
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = p.Error()
	}
	return len(parts) > 0 && e.Error() == strings.Join(texts, "\n")
}

// Exit codes of pact-journal (docs/exit-codes.md).
const (
	// ExitRemoved: the journal was removed from its quorum (now or
	// before); it must not be restarted from the same data directory.
	ExitRemoved = 3
	// ExitBootstrapRefused: an empty journal was to bootstrap a new
	// quorum, but a journal it lists belongs to one already; restarting
	// it as it is would refuse again.
	ExitBootstrapRefused = 4
	// ExitQuorumAnswers: pact-journal recover refused, because the
	// survivor's quorum runs on (a majority answers); nothing changed.
	ExitQuorumAnswers = 5
	// ExitBinaryTooOld: the journal's registry is at a quorum feature
	// level its binary does not speak (a downgrade); it needs the release
	// the message names. Restarting the same binary would refuse again.
	ExitBinaryTooOld = 6
)

func isRemoved(j *journal.Journal) bool {
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

This is the offline way of the legacy layout (the root key in a file, as
pact-journal init makes it), for the first credential or when no journal is
up. A site whose root is offline issues its first credential with "pact ca
issue-admin" (docs/ceremony.md). The journal records the credential in Raft at its
first use, and "pact admin revoke NAME" revokes it even before that. With a
running journal prefer "pact admin issue" (the key never leaves the
operator's machine and the credential is recorded at once). Credentials live
7 days unless --lifetime says otherwise; renew with "pact admin renew".

Example:
  pact-journal admin issue --data-dir ./.pact --name alice --role viewer \
      --cert-out alice.pem --key-out alice-key.pem

Flags:
`

// adminCommand is pact-journal admin, which holds issue.
func adminCommand(env settings.Env, stdout, stderr io.Writer) *cobra.Command {
	admin := cmdline.Command("admin", "operator credentials signed with a root key file", adminIssueUsage, nil, nil)
	cmdline.Group(admin)
	admin.AddCommand(adminIssueCommand(env, stdout, stderr))
	return admin
}

func adminIssueCommand(env settings.Env, stdout, stderr io.Writer) *cobra.Command {
	var dataDir, rootCert, rootKey string
	var name, role, certOut, keyOut string
	var lifetime time.Duration
	s := settings.New("pact-journal admin issue")
	s.String(&dataDir, "data-dir", "PACT_DATA_DIR", "journal data directory holding ca.pem and ca-key.pem")
	s.String(&rootCert, "root-cert", "PACT_ROOT_CERT", "domain root certificate (default DATA_DIR/ca.pem)")
	s.String(&rootKey, "root-key", "PACT_ROOT_KEY", "domain root key (default DATA_DIR/ca-key.pem)")
	cmd := cmdline.Command("issue", "issue an operator credential with a root key file", adminIssueUsage, s, func(cmd *cobra.Command) int {
		if !cmdline.Resolve(cmd, s, env) {
			return 2
		}
		return adminIssue(dataDir, rootCert, rootKey, name, role, certOut, keyOut, lifetime, stdout, stderr)
	})
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "operator name (goes into the certificate)")
	f.StringVar(&role, "role", "", "platform-admin, viewer or pact-ops-{vcluster}")
	f.StringVar(&certOut, "cert-out", "", "where to write the certificate")
	f.StringVar(&keyOut, "key-out", "", "where to write the private key (mode 0600)")
	f.Var(duration.NewValue(&lifetime, ca.DefaultOperatorLifetime), "lifetime", "validity of the credential, e.g. 7d or 36h (short: renew with pact admin renew)")
	return cmd
}

func adminIssue(dataDir, rootCert, rootKey, name, role, certOut, keyOut string, lifetime time.Duration, stdout, stderr io.Writer) int {
	var missing []string
	for flagName, v := range map[string]string{"--name": name, "--role": role, "--cert-out": certOut, "--key-out": keyOut} {
		if v == "" {
			missing = append(missing, flagName)
		}
	}
	if dataDir == "" && (rootCert == "" || rootKey == "") {
		missing = append(missing, "--data-dir (or --root-cert and --root-key)")
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "pact-journal admin issue: missing %s (see --help)\n", strings.Join(missing, ", "))
		return 2
	}
	if rootCert == "" {
		rootCert = filepath.Join(dataDir, ca.RootCertFile)
	}
	if rootKey == "" {
		rootKey = filepath.Join(dataDir, ca.RootKeyFile)
	}
	auth, err := ca.LoadKeyFileAuthority(rootCert, rootKey)
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal admin issue: %v\n", err)
		return 1
	}
	certPEM, keyPEM, err := ca.IssueAdmin(auth, name, role, lifetime, clock.Real{}.Now())
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal admin issue: %v\n", err)
		return 2
	}
	if err := writeNew(keyOut, keyPEM, 0o600); err != nil {
		fmt.Fprintf(stderr, "pact-journal admin issue: %v\n", err)
		return 1
	}
	if err := writeNew(certOut, certPEM, 0o644); err != nil {
		fmt.Fprintf(stderr, "pact-journal admin issue: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "issued %s credential for %s, valid %v: %s, %s (recorded by the journal at its first use)\n", role, name, lifetime, certOut, keyOut)
	return 0
}

// writeNew refuses to overwrite, so an existing credential is never lost.
func writeNew(path string, data []byte, mode os.FileMode) error {
	err := atomicfile.WriteNew(path, data, mode)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s already exists; remove it or choose another path", path)
	}
	return err
}

// devExampleNode is the node the dev banner registers and starts an
// agent for.
const devExampleNode = "node-001"

// printDevBanner tells a developer what to do next with the dev journal:
// point the CLI at it, and (once) register node-001, start an agent for it
// and look. A registry that holds nodes already (a second make run) gets
// no hint to register node-001 again.
func printDevBanner(w io.Writer, cfg journal.Config, addr, domain, rootFP string, nodes int, hasExample bool) {
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		dir = cfg.DataDir
	}
	fmt.Fprintf(w, `
pact dev journal %s is serving on %s (domain %s, state in %s).
Its root was made for it alone (SHA-256 fingerprint %s);
another --dev journal's %s is another domain.

In another terminal, point the CLI at it:

  export PACT_JOURNAL=%s
  export PACT_CA=%s
  export PACT_CERT=%s
  export PACT_KEY=%s

`, cfg.NodeID, addr, domain, dir, rootFP, domain,
		addr, filepath.Join(dir, ca.RootCertFile), filepath.Join(dir, ca.AdminCertFile), filepath.Join(dir, ca.AdminKeyFile))
	agent := fmt.Sprintf("  bin/pact-agent --journal %s --ca %s --mac 52:54:00:00:00:01 --bmc-serial SN-0001\n", addr, filepath.Join(dir, ca.RootCertFile))
	switch {
	case nodes == 0:
		fmt.Fprintf(w, "Register a node by its hardware identity, start an agent for it, and look:\n\n  bin/pact node enroll %s --mac 52:54:00:00:00:01 --bmc-serial SN-0001\n%s  bin/pact node inspect %s\n", devExampleNode, agent, devExampleNode)
	case hasExample:
		fmt.Fprintf(w, "The registry holds %s already, %s among them: list them, or start %s's agent again:\n\n  bin/pact node list\n%s", plural(nodes, "node"), devExampleNode, devExampleNode, agent)
	default:
		fmt.Fprintf(w, "The registry holds %s already: list them with\n\n  bin/pact node list\n", plural(nodes, "node"))
	}
	fmt.Fprintf(w, "\nStop with Ctrl-C; the registry stays in %s.\n", dir)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

const initUsage = `pact-journal init creates a domain root CA and a platform-admin credential
in one directory, the root key beside them: for trying pact out, for
tests, and for the legacy layout, in which every journal host holds the
root key (--root-key). It is not how a site makes its root.

For a site, make the root offline and give each journal a journal CA of its
own, so that the root key is never on a journal host (docs/ceremony.md,
docs/quorum.md "Forming a quorum on real hosts"):
  pact ca init --dir /media/root-ca --domain hpc.example.org     (offline)
  pact-journal ca-request --journal-id j1 --key tpm:... --out j1.csr   (each journal host)
  pact ca sign-journal ... ; pact ca issue-admin ...             (offline)
A quorum already running with the root key on its hosts moves to journal
CAs without downtime: docs/migration.md.

Usage:
  pact-journal init --dir DIR --domain DOMAIN

It writes DIR/ca.pem (give it to every node image and operator),
DIR/ca-key.pem (mode 0600: the root key; whoever reads it can mint any
identity of the domain), DIR/admin.pem and DIR/admin-key.pem, and prints
the root's SHA-256 fingerprint. It never overwrites an existing root.

--domain is the domain's name: the SPIFFE trust domain every journal,
agent and operator certificate of the site carries, e.g. hpc.example.org
(a DNS name the site owns; it cannot change later). There is no default:
each root is a domain of its own, and giving two the same name only makes
them look alike. What tells roots apart is the fingerprint: record it with
the site's backups (pact-journal restore takes a snapshot only under the
root it was taken under; openssl x509 -noout -fingerprint -sha256 -in
DIR/ca.pem prints it again).

Flags:
`

func initCommand(stdout, stderr io.Writer) *cobra.Command {
	var dir, domain string
	cmd := cmdline.Command("init", "a root, its key and an admin credential in one directory", initUsage, nil, func(*cobra.Command) int {
		return initMain(dir, domain, stdout, stderr)
	})
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the root and admin credential")
	cmd.Flags().StringVar(&domain, "domain", "", "the domain's name, required: the SPIFFE trust domain of the site, e.g. hpc.example.org")
	return cmd
}

func initMain(dir, domain string, stdout, stderr io.Writer) int {
	var missing []string
	if dir == "" {
		missing = append(missing, "--dir is required: the directory for the root and the admin credential")
	}
	if domain == "" {
		missing = append(missing, "--domain is required: name the domain after the site, e.g. --domain hpc.example.org (every certificate carries it and it cannot change later; see --help)")
	}
	if domain != "" {
		if err := pki.ValidateDomain(domain); err != nil {
			missing = append(missing, fmt.Sprintf("--domain: %v", err))
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "pact-journal init: %s\n", strings.Join(missing, "\n  "))
		return 2
	}
	return asDirOwner("pact-journal init", dir, stdout, stderr, func() int { return initDir(dir, domain, stdout, stderr) })
}

func initDir(dir, domain string, stdout, stderr io.Writer) int {
	rootPath := filepath.Join(dir, ca.RootCertFile)
	created, err := ca.InitDev(dir, domain, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal init: %v\n", err)
		return 1
	}
	auth, err := ca.LoadKeyFileAuthority(rootPath, filepath.Join(dir, ca.RootKeyFile))
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal init: %v\n", err)
		return 1
	}
	have, _ := ca.DomainOf(auth.Root())
	fp := pki.CertFingerprint(auth.Root())
	if !created {
		if have != domain {
			fmt.Fprintf(stderr, "pact-journal init: %s already holds the root of domain %s (SHA-256 fingerprint %s), not %s; nothing changed: give another --dir for a new root\n", rootPath, have, fp, domain)
			return 1
		}
		fmt.Fprintf(stdout, "%s already holds the root of domain %s (SHA-256 fingerprint %s); nothing changed\n", rootPath, have, fp)
		return 0
	}
	fmt.Fprintf(stdout, "created domain %s: root %s (key %s, mode 0600), admin credential %s\nroot SHA-256 fingerprint %s\n(record it with the site's backups: pact-journal restore takes a snapshot only under this root)\nThe root key is in %s: fine for a trial; a site makes its root offline with pact ca init and gives each journal a journal CA (docs/ceremony.md).\n", domain,
		rootPath, filepath.Join(dir, ca.RootKeyFile), filepath.Join(dir, ca.AdminCertFile), fp, dir)
	return 0
}
