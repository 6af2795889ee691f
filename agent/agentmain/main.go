// Package agentmain is the pact-agent command: its flags, environment and
// configuration file (internal/settings), its subcommands, signals and
// exit codes. Package agent is the library and knows none of them.
package agentmain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/agent"
	"github.com/pact-hpc/pact/agent/hwinfo"
	"github.com/pact-hpc/pact/internal/cmdline"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/sdnotify"
	"github.com/pact-hpc/pact/internal/settings"
	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/internal/version"
)

const agentUsage = `pact-agent gives this node its identity: it reads the node's hardware
identity, makes a key in memory, enrolls with a pact journal, and keeps an
mTLS stream to it, renewing its certificate before it expires.

Usage:
  pact-agent --journal HOST:PORT[,HOST:PORT...] --ca CA.pem [flags]
  pact-agent --config FILE [flags]
  pact-agent status [--status-socket PATH] [-o table|json]
  pact-agent tpm-ek [--tpm-device DEV] [-o text|json]
  pact-agent --version

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

Settings: every flag below can also be set through the environment
variable named in its description, and in a YAML configuration file
(--config FILE or PACT_AGENT_CONFIG) under the flag's name without the
dashes, e.g.
  journal: [10.0.0.1:7443, 10.0.0.2:7443]
  ca: /etc/pact/ca.pem
A flag wins over its variable, which wins over the file. An unknown key or
a bad value anywhere is reported with its line, all at once, and nothing
starts. The packages install an example, /etc/pact/agent.yaml
(docs/configuration.md).

As a service: the packages install pact-agent.service (Type=notify:
READY=1 once enrolled with an open stream), settings in
/etc/pact/agent.env (PACT_AGENT_CONFIG=/etc/pact/agent.yaml there reads
the file); docs/diskless.md puts it in a boot image.

Exit codes: 0 stopped by a signal, 1 error, 2 bad usage, 3 hardware not
registered (NODE_NOT_ENROLLED), 4 hardware identity conflict or key bound to
another node (KEY_IN_USE), 5 node revoked, fenced (NODE_FENCED) or credential
refused (JOIN_TOKEN_REQUIRED, JOIN_TOKEN_INVALID; TPM_REQUIRED,
TPM_EK_MISMATCH, TPM_AK_REFUSED, TPM_ATTESTATION_FAILED, TPM_QUOTE_REFUSED,
BOOT_POLICY_REFUSED: docs/tpm.md), 6 node already active (ALREADY_ACTIVE).

A node registered with a TPM EK hash proves it holds that TPM at every
enrollment (credential activation through --tpm-device). Print the hash to
register with: pact-agent tpm-ek [--tpm-device DEV].

Flags:
`

// Settings declares every setting of pact-agent over cfg (whose values are
// the defaults) and log. The names are the flags and the keys of the
// configuration file; configFile receives --config.
func Settings(cfg *agent.Config, log *cmdline.Logging, configFile *string) *settings.Set {
	s := settings.New("pact-agent")
	s.ConfigFile(configFile, "config", "PACT_AGENT_CONFIG", "YAML configuration file: the settings below by name, e.g. \"ca: /etc/pact/ca.pem\"; flags and variables win over it")
	s.List(&cfg.JournalAddrs, "journal", "PACT_JOURNAL", "comma-separated journal addresses host:port (the agent starts at one picked at random and tries the others in turn)")
	s.String(&cfg.CAFile, "ca", "PACT_CA", "domain root certificate, PEM")
	s.List(&cfg.Hardware.MACs, "mac", "PACT_AGENT_MACS", "use these MACs instead of reading /sys/class/net: comma-separated, or repeat the flag")
	s.String(&cfg.Hardware.BMCSerial, "bmc-serial", "PACT_AGENT_BMC_SERIAL", "use this BMC serial instead of reading DMI")
	s.String(&cfg.Hardware.TPMEKHash, "tpm-ek-hash", "PACT_AGENT_TPM_EK_HASH", "report this TPM EK hash when the agent has no TPM device; with a TPM the agent reports the TPM's own")
	s.String(&cfg.TPMDevice, "tpm-device", "PACT_AGENT_TPM_DEVICE", "TPM that proves the node when it is registered with a TPM (docs/tpm.md): a device, or unix:PATH for a software TPM; a missing device means no TPM; empty disables it")
	s.String(&cfg.TPMEventLog, "tpm-event-log", "PACT_AGENT_TPM_EVENT_LOG", "TCG event log sent with the TPM quote of the node's boot (docs/tpm.md, \"Measured boot\"); a missing file sends none")
	s.String(&cfg.TPMIMALog, "tpm-ima-log", "PACT_AGENT_TPM_IMA_LOG", "IMA runtime measurement list sent, with PCR 10 quoted, when the node's boot policy reads it (docs/tpm.md, \"IMA\")")
	s.String(&cfg.Hardware.SysRoot, "sys-root", "PACT_AGENT_SYS_ROOT", "where sysfs is mounted")
	s.String(&cfg.SPIRESocket, "spire-socket", "PACT_SPIRE_SOCKET", "SPIRE agent Workload API, unix:///path; empty disables SPIRE")
	s.String(&cfg.BootstrapCert, "bootstrap-cert", "PACT_BOOTSTRAP_CERT", "bootstrap certificate chain from the image, PEM; held in memory only")
	s.String(&cfg.BootstrapKey, "bootstrap-key", "PACT_BOOTSTRAP_KEY", "the bootstrap certificate's private key, PEM")
	s.String(&cfg.BootstrapBundle, "bootstrap-bundle", "PACT_BOOTSTRAP_BUNDLE", "trust bundle that goes with the bootstrap certificate, PEM")
	s.String(&cfg.JoinTokenFile, "join-token-file", "PACT_AGENT_JOIN_TOKEN_FILE", "file holding a single-use join token (pact node token create) to present at enrollment; needed for nodes registered with --require-token")
	s.String(&cfg.StatusSocket, "status-socket", "PACT_AGENT_STATUS_SOCKET", "Unix socket (mode 0600) that \"pact-agent status\" reads; empty disables it. Default: /run/pact/agent.sock for root, $XDG_RUNTIME_DIR/pact/agent.sock for another user")
	s.String(&cfg.MetricsListen, "metrics-listen", "PACT_AGENT_METRICS_LISTEN", "host:port to serve /metrics, /healthz and /readyz (200 only with an unexpired identity and an open stream) over plain HTTP")
	s.String(&cfg.IdentityDir, "identity-dir", "PACT_AGENT_IDENTITY_DIR", "directory that receives chain.pem and bundle.pem, replaced atomically on every change")
	s.String(&cfg.KeyOut, "key-out", "PACT_AGENT_KEY_OUT", "also write the private key to this file, mode 0600; it MUST be on a tmpfs (e.g. /run/pact/key.pem): the agent refuses any other filesystem")
	kx := cfg.KeyExchange
	s.Func("key-exchange", "PACT_KEY_EXCHANGE", "TLS key exchange offered to journals: x25519, or x25519mlkem768 for the post-quantum hybrid", "string", string(kx),
		func(v string) (err error) { cfg.KeyExchange, err = transport.ParseKeyExchange(v); return err },
		func() { cfg.KeyExchange = kx })
	s.Duration(&cfg.MaxClockSkew, "max-clock-skew", "PACT_AGENT_MAX_CLOCK_SKEW", "how far this node's clock may be from a journal's (as its Ping answers) before a new channel fails its health check with reason clock_skew, where the clock is not bridged")
	s.Duration(&cfg.ClockBridge, "clock-bridge", "PACT_AGENT_CLOCK_BRIDGE", "how far off this node's clock may be and still be bridged with the journal's time (a warning and pact_agent_clock_skew_seconds); beyond it the agent refuses with reason clock_skew; 0 disables bridging")
	log.Declare(s)
	return s
}

// defaultConfig is agent.DefaultConfig with the status socket this user
// can serve (defaultStatusSocket).
func defaultConfig(env settings.Env) agent.Config {
	cfg := agent.DefaultConfig()
	cfg.StatusSocket = defaultStatusSocket(getuid(), env)
	return cfg
}

// getuid is os.Getuid; a test plays another user with it.
var getuid = os.Getuid

// defaultStatusSocket is where pact-agent serves its status, and where
// pact-agent status looks, when --status-socket is not given: the
// packaged path, /run/pact/agent.sock, for root; for another user, who
// cannot create /run/pact, $XDG_RUNTIME_DIR/pact/agent.sock, so an agent
// started by hand from a checkout (the README's walkthrough) answers
// pact-agent status from the same shell. The packaged unit names the path
// itself.
func defaultStatusSocket(uid int, env settings.Env) string {
	if uid != 0 {
		if dir, ok := env("XDG_RUNTIME_DIR"); ok && filepath.IsAbs(dir) {
			return filepath.Join(dir, "pact", "agent.sock")
		}
	}
	return agent.DefaultStatusSocket
}

// Main runs the pact-agent command and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return run(args, os.LookupEnv, stdout, stderr)
}

func run(args []string, env settings.Env, stdout, stderr io.Writer) int {
	return cmdline.Execute(rootCommand(env, stdout, stderr), args, stdout, stderr)
}

// rootCommand is pact-agent: the agent, and its status and tpm-ek.
func rootCommand(env settings.Env, stdout, stderr io.Writer) *cobra.Command {
	cfg := defaultConfig(env)
	var log cmdline.Logging
	var configFile string
	var showVersion, check bool
	s := Settings(&cfg, &log, &configFile)
	root := cmdline.Command("pact-agent", "the pact node agent", agentUsage, s, func(cmd *cobra.Command) int {
		if !cmdline.Resolve(cmd, s, env) {
			return agent.ExitUsage
		}
		if showVersion {
			fmt.Fprintln(stdout, version.Line("pact-agent"))
			return agent.ExitOK
		}
		return serve(cfg, log, check, stdout, stderr)
	})
	root.Flags().BoolVar(&showVersion, "version", false, "print pact-agent's version and exit")
	root.Flags().BoolVar(&check, "check-config", false, "check the settings (file, environment and flags) and exit: 0 if pact-agent would start with them; 2, with every problem, if not")
	cmdline.Subcommands(root)
	root.AddCommand(statusCommand(env, stdout, stderr), tpmEKCommand(env, stdout, stderr))
	return root
}

// serve runs the agent with the resolved settings (or, with check, only
// checks them) and returns its exit code.
func serve(cfg agent.Config, log cmdline.Logging, check bool, stdout, stderr io.Writer) int {
	logger, err := log.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "pact-agent: %v\n", err)
		return agent.ExitUsage
	}
	cfg.Logger = logger
	// What a start reads from disk is checked with the settings, so a
	// missing --ca is a configuration problem (exit 2, which the unit does
	// not restart), reported with every other at once.
	if err := errors.Join(cfg.Validate(), cfg.Preflight()); err != nil {
		cmdline.ReportProblems(stderr, "pact-agent", err)
		return agent.ExitUsage
	}
	if check {
		fmt.Fprintln(stdout, "pact-agent: the settings are valid")
		return agent.ExitOK
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	notify := sdnotify.FromEnv()
	cfg.OnReady = func() {
		if err := notify.Notify(sdnotify.Ready, "STATUS=enrolled, stream open"); err != nil {
			logger.Warn("cannot tell systemd the agent is ready", logkey.Err, err)
		}
	}
	defer func() { _ = notify.Notify(sdnotify.Stopping) }()
	a, err := agent.New(cfg)
	if err != nil {
		logger.Error("cannot start", logkey.Err, err)
		if errors.Is(err, hwinfo.ErrNoHardwareIdentity) || errors.Is(err, agent.ErrBadConfig) {
			return agent.ExitUsage
		}
		return agent.ExitError
	}
	if err := a.Run(ctx); err != nil {
		logger.Error("stopping", logkey.Err, err)
		return agent.ExitCode(err)
	}
	return agent.ExitOK
}
