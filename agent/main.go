package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/pact-hpc/pact/internal/cmdutil"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/pact-hpc/pact/agent/hwinfo"
	"github.com/pact-hpc/pact/internal/apierr"
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
)

const agentUsage = `pact-agent gives this node its identity: it reads the node's hardware
identity, makes a key in memory, enrolls with a pact journal, and keeps an
mTLS stream to it, renewing its certificate before it expires.

Usage:
  pact-agent --journal HOST:PORT[,HOST:PORT...] --ca CA.pem [flags]

The node must be registered first (pact node enroll). In containers and
tests, --mac and --bmc-serial replace what is read from /sys.

Example:
  pact-agent --journal 127.0.0.1:7443 --ca .pact/ca.pem \
      --mac 52:54:00:00:00:01 --bmc-serial SN-0001

Exit codes: 0 stopped by a signal, 1 error, 2 bad usage, 3 hardware not
registered (NODE_NOT_ENROLLED), 4 hardware identity conflict, 5 node
revoked or credential refused, 6 node already active (ALREADY_ACTIVE).

Flags (each also read from the environment variable named):
`

type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// Main runs the pact-agent command and returns its exit code.
func Main(args []string, stderr io.Writer) int {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("pact-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, agentUsage); fs.PrintDefaults() }
	journals := fs.String("journal", os.Getenv("PACT_JOURNAL"), "comma-separated journal addresses host:port (PACT_JOURNAL)")
	fs.StringVar(&cfg.CAFile, "ca", os.Getenv("PACT_CA"), "domain root certificate, PEM (PACT_CA)")
	var macs stringList
	fs.Var(&macs, "mac", "use this MAC instead of reading /sys/class/net; repeat for several (PACT_AGENT_MACS, comma-separated)")
	fs.StringVar(&cfg.Hardware.BMCSerial, "bmc-serial", os.Getenv("PACT_AGENT_BMC_SERIAL"), "use this BMC serial instead of reading DMI (PACT_AGENT_BMC_SERIAL)")
	fs.StringVar(&cfg.Hardware.TPMEKHash, "tpm-ek-hash", os.Getenv("PACT_AGENT_TPM_EK_HASH"), "hex SHA-256 of the TPM endorsement key (PACT_AGENT_TPM_EK_HASH)")
	fs.StringVar(&cfg.Hardware.SysRoot, "sys-root", cfg.Hardware.SysRoot, "where sysfs is mounted")
	logFormat := fs.String("log-format", cmdutil.EnvOr("PACT_LOG_FORMAT", "text"), "text or json (PACT_LOG_FORMAT)")
	logLevel := fs.String("log-level", cmdutil.EnvOr("PACT_LOG_LEVEL", "info"), "debug, info, warn or error (PACT_LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pact-agent: unexpected argument %q (see pact-agent --help)\n", fs.Arg(0))
		return ExitUsage
	}
	if *journals != "" {
		cfg.JournalAddrs = strings.Split(*journals, ",")
	}
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
	a, err := New(cfg)
	if err != nil {
		logger.Error("cannot start", "err", err)
		if errors.Is(err, hwinfo.ErrNoHardwareIdentity) {
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
	case apierr.HardwareIdentityConflict:
		return ExitConflict
	case apierr.AlreadyActive:
		return ExitAlreadyActive
	}
	return ExitRevoked
}
