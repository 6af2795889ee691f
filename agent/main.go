package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/pact-hpc/pact/agent/hwinfo"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/cmdutil"
	"github.com/pact-hpc/pact/internal/sdnotify"
	"github.com/pact-hpc/pact/internal/version"
	"github.com/pact-hpc/pact/internal/wire"
)

// Exit codes of pact-agent.
const (
	ExitOK            = 0
	ExitError         = 1
	ExitUsage         = 2
	ExitNotEnrolled   = 3
	ExitConflict      = 4
	ExitRevoked       = 5
	ExitAlreadyActive = 6
	// ExitNotReady: pact-agent status found the agent not ready (no
	// unexpired identity with an open stream).
	ExitNotReady = 9
)

const agentUsage = `pact-agent gives this node its identity: it reads the node's hardware
identity, makes a key in memory, enrolls with a pact journal, and keeps an
mTLS stream to it, renewing its certificate before it expires.

Usage:
  pact-agent --journal HOST:PORT[,HOST:PORT...] --ca CA.pem [flags]
  pact-agent status [--status-socket PATH] [-o table|json]

The node must be registered first (pact node enroll). In containers and
tests, --mac and --bmc-serial replace what is read from /sys.

Identity sources, best first: an X.509-SVID from the local SPIRE agent
(--spire-socket), the certificate the journal signs at enrollment, and a
bootstrap certificate baked into the image (--bootstrap-cert/--bootstrap-key,
kept in memory only). The agent moves to a better source as soon as it
appears, and renews the journal-signed certificate at 2/3 of its lifetime,
always by building and health-checking a new channel before it lets go of
the old one.

Other services on the node can use the identity: --identity-dir receives
chain.pem and bundle.pem on every change (replaced atomically). The private
key is written only with --key-out, only to a file on a tmpfs (the agent
refuses any other filesystem), with mode 0600. The bootstrap identity is
never written.

Example:
  pact-agent --journal 127.0.0.1:7443 --ca .pact/ca.pem \
      --mac 52:54:00:00:00:01 --bmc-serial SN-0001

A node registered with --require-token also needs a join token:
--join-token-file FILE (created with pact node token create NODE --out FILE).
Each token enrolls once; the file is read at every enrollment.

As a service: the packages install pact-agent.service (Type=notify:
READY=1 once enrolled with an open stream), settings in
/etc/pact/agent.env; docs/diskless.md puts it in a boot image.

Exit codes: 0 stopped by a signal, 1 error, 2 bad usage, 3 hardware not
registered (NODE_NOT_ENROLLED), 4 hardware identity conflict or key bound to
another node (KEY_IN_USE), 5 node revoked, fenced (NODE_FENCED) or credential
refused (JOIN_TOKEN_REQUIRED, JOIN_TOKEN_INVALID; TPM_REQUIRED,
TPM_EK_MISMATCH, TPM_AK_REFUSED, TPM_ATTESTATION_FAILED: docs/tpm.md), 6 node
already active (ALREADY_ACTIVE).

A node registered with a TPM EK hash proves it holds that TPM at every
enrollment (credential activation through --tpm-device). Print the hash to
register with: pact-agent tpm-ek [--tpm-device DEV].

Flags (each also read from the environment variable named):
`

type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

func newFlagSet(name string, stderr io.Writer, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	return fs
}

// parseFlags parses args; when it returns ok false, the command ends with
// code.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK, false
		}
		return ExitUsage, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q (see %s --help)\n", fs.Name(), fs.Arg(0), fs.Name())
		return ExitUsage, false
	}
	return ExitOK, true
}

// envOrDefault is the environment variable key if it is set, even to the
// empty string, and def otherwise.
func envOrDefault(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// Main runs the pact-agent command and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "status" {
		return statusMain(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "tpm-ek" {
		return tpmEKMain(args[1:], stdout, stderr)
	}
	cfg := DefaultConfig()
	fs := newFlagSet("pact-agent", stderr, agentUsage)
	journals := fs.String("journal", os.Getenv("PACT_JOURNAL"), "comma-separated journal addresses host:port (PACT_JOURNAL)")
	fs.StringVar(&cfg.CAFile, "ca", os.Getenv("PACT_CA"), "domain root certificate, PEM (PACT_CA)")
	var macs stringList
	fs.Var(&macs, "mac", "use this MAC instead of reading /sys/class/net; repeat for several (PACT_AGENT_MACS, comma-separated)")
	fs.StringVar(&cfg.Hardware.BMCSerial, "bmc-serial", os.Getenv("PACT_AGENT_BMC_SERIAL"), "use this BMC serial instead of reading DMI (PACT_AGENT_BMC_SERIAL)")
	fs.StringVar(&cfg.Hardware.TPMEKHash, "tpm-ek-hash", os.Getenv("PACT_AGENT_TPM_EK_HASH"), "report this TPM EK hash when the agent has no TPM device; with a TPM the agent reports the TPM's own (PACT_AGENT_TPM_EK_HASH)")
	fs.StringVar(&cfg.TPMDevice, "tpm-device", envOrDefault("PACT_AGENT_TPM_DEVICE", cfg.TPMDevice), "TPM that proves the node when it is registered with a TPM (docs/tpm.md): a device, or unix:PATH for a software TPM; a missing device means no TPM; empty disables it (PACT_AGENT_TPM_DEVICE)")
	fs.StringVar(&cfg.Hardware.SysRoot, "sys-root", cfg.Hardware.SysRoot, "where sysfs is mounted")
	fs.StringVar(&cfg.SPIRESocket, "spire-socket", envOrDefault("PACT_SPIRE_SOCKET", cfg.SPIRESocket), "SPIRE agent Workload API, unix:///path; empty disables SPIRE (PACT_SPIRE_SOCKET)")
	fs.StringVar(&cfg.BootstrapCert, "bootstrap-cert", os.Getenv("PACT_BOOTSTRAP_CERT"), "bootstrap certificate chain from the image, PEM; held in memory only (PACT_BOOTSTRAP_CERT)")
	fs.StringVar(&cfg.BootstrapKey, "bootstrap-key", os.Getenv("PACT_BOOTSTRAP_KEY"), "the bootstrap certificate's private key, PEM (PACT_BOOTSTRAP_KEY)")
	fs.StringVar(&cfg.BootstrapBundle, "bootstrap-bundle", os.Getenv("PACT_BOOTSTRAP_BUNDLE"), "trust bundle that goes with the bootstrap certificate, PEM (PACT_BOOTSTRAP_BUNDLE)")
	fs.StringVar(&cfg.JoinTokenFile, "join-token-file", os.Getenv("PACT_AGENT_JOIN_TOKEN_FILE"), "file holding a single-use join token (pact node token create) to present at enrollment; needed for nodes registered with --require-token (PACT_AGENT_JOIN_TOKEN_FILE)")
	fs.StringVar(&cfg.StatusSocket, "status-socket", envOrDefault("PACT_AGENT_STATUS_SOCKET", cfg.StatusSocket), "Unix socket (mode 0600, root only) that \"pact-agent status\" reads; empty disables it (PACT_AGENT_STATUS_SOCKET)")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", os.Getenv("PACT_AGENT_METRICS_LISTEN"), "host:port to serve /metrics, /healthz and /readyz (200 only with an unexpired identity and an open stream) over plain HTTP (PACT_AGENT_METRICS_LISTEN)")
	fs.StringVar(&cfg.IdentityDir, "identity-dir", os.Getenv("PACT_AGENT_IDENTITY_DIR"), "directory that receives chain.pem and bundle.pem, replaced atomically on every change (PACT_AGENT_IDENTITY_DIR)")
	fs.StringVar(&cfg.KeyOut, "key-out", os.Getenv("PACT_AGENT_KEY_OUT"), "also write the private key to this file, mode 0600; it MUST be on a tmpfs (e.g. /run/pact/key.pem): the agent refuses any other filesystem (PACT_AGENT_KEY_OUT)")
	keyExchange := fs.String("key-exchange", envOrDefault("PACT_KEY_EXCHANGE", string(cfg.KeyExchange)), "TLS key exchange offered to journals: x25519, or x25519mlkem768 for the post-quantum hybrid (PACT_KEY_EXCHANGE)")
	fs.DurationVar(&cfg.ClockBridge, "clock-bridge", cfg.ClockBridge, "how far off this node's clock may be and still be bridged with the journal's time (a warning and pact_agent_clock_skew_seconds); beyond it the agent refuses with reason clock_skew; 0 disables bridging")
	logFormat := fs.String("log-format", cmdutil.EnvOr("PACT_LOG_FORMAT", "text"), "text or json (PACT_LOG_FORMAT)")
	logLevel := fs.String("log-level", cmdutil.EnvOr("PACT_LOG_LEVEL", "info"), "debug, info, warn or error (PACT_LOG_LEVEL)")
	showVersion := fs.Bool("version", false, "print pact-agent's version and exit")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.Line("pact-agent"))
		return ExitOK
	}
	if *journals != "" {
		cfg.JournalAddrs = strings.Split(*journals, ",")
	}
	kx, err := wire.ParseKeyExchange(*keyExchange)
	if err != nil {
		fmt.Fprintf(stderr, "pact-agent: --key-exchange: %v\n", err)
		return ExitUsage
	}
	cfg.KeyExchange = kx
	cfg.Hardware.MACs = macs
	if len(macs) == 0 {
		if env := os.Getenv("PACT_AGENT_MACS"); env != "" {
			cfg.Hardware.MACs = strings.Split(env, ",")
		}
	}
	logger, err := cmdutil.NewLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "pact-agent: %v\n", err)
		return ExitUsage
	}
	cfg.Logger = logger
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "pact-agent: invalid configuration:\n%v\n", err)
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	notify := sdnotify.FromEnv()
	cfg.OnReady = func() {
		if err := notify.Notify(sdnotify.Ready, "STATUS=enrolled, stream open"); err != nil {
			logger.Warn("cannot tell systemd the agent is ready", "err", err)
		}
	}
	defer func() { _ = notify.Notify(sdnotify.Stopping) }()
	a, err := New(cfg)
	if err != nil {
		logger.Error("cannot start", "err", err)
		if errors.Is(err, hwinfo.ErrNoHardwareIdentity) || errors.Is(err, ErrBadConfig) {
			return ExitUsage
		}
		return ExitError
	}
	if err := a.Run(ctx); err != nil {
		logger.Error("stopping", "err", err)
		return exitCode(err)
	}
	return ExitOK
}

func exitCode(err error) int {
	if !errors.Is(err, ErrRefused) {
		return ExitError
	}
	switch apierr.FromError(err).Reason {
	case apierr.NodeNotEnrolled:
		return ExitNotEnrolled
	case apierr.HardwareIdentityConflict, apierr.KeyInUse:
		return ExitConflict
	case apierr.AlreadyActive:
		return ExitAlreadyActive
	}
	return ExitRevoked
}
