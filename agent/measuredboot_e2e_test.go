package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/measuredboot/measuredboottest"
	"github.com/pact-hpc/pact/internal/swtpmtest"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// bootedTPM starts a software TPM whose PCRs boot extended, and writes
// the event log an agent reads (--tpm-event-log) as log.
func bootedTPM(t *testing.T, boot, log measuredboottest.Log) (sw *swtpmtest.TPM, logPath string) {
	t.Helper()
	sw = swtpmtest.Start(t)
	tr, err := tpm.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	boot.Extend(t, tr)
	tr.Close()
	logPath = filepath.Join(t.TempDir(), "binary_bios_measurements")
	if err := os.WriteFile(logPath, log.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return sw, logPath
}

// End to end: the agent quotes its boot with the journal's nonce and sends
// its event log; the journal verifies both and the node enrolls. An event
// log that does not reproduce the quoted PCRs is refused for good: the
// agent stops with exit code 5 and a hint, it does not retry in a loop.
func TestAgentEnrollsWithQuote(t *testing.T) {
	boot := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))

	sw, logPath := bootedTPM(t, boot, boot)
	registerWithEK(t, h, "n1", "SN1", ekHashOf(t, sw.Device), mac1)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.TPMDevice, cfg.TPMEventLog = sw.Device, logPath
	runAgent(t, cfg)
	eventually(t, "n1 is active", func() bool { return h.J.OpenStreams("n1") == 1 })

	// The log of another kernel than the TPM measured.
	sw2, badLog := bootedTPM(t, boot, measuredboottest.Boot("6.1.0-other", "root=nfs quiet"))
	registerWithEK(t, h, "n2", "SN2", ekHashOf(t, sw2.Device), "52:54:00:00:00:02")
	cfg = agentConfig(h, clock.Real{}, "SN2", "52:54:00:00:00:02")
	cfg.TPMDevice, cfg.TPMEventLog = sw2.Device, badLog
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = a.Run(ctx)
	if !errors.Is(err, ErrRefused) || apierr.FromError(err).Reason != apierr.TPMQuoteRefused {
		t.Fatalf("Run = %v, want ErrRefused with %s", err, apierr.TPMQuoteRefused)
	}
	if got := ExitCode(err); got != ExitRevoked {
		t.Errorf("exit code %d, want %d", got, ExitRevoked)
	}
	if !strings.Contains(err.Error(), "--tpm-event-log") {
		t.Errorf("error %q does not point the operator at the event log", err)
	}
	if got := a.Status().LastFailureReason; got != ReasonTPMRefused {
		t.Errorf("status reason %q, want %q", got, ReasonTPMRefused)
	}
	if n := inspect(t, h, "n2"); n.GetState() != pactv1.NodeState_NODE_STATE_REGISTERED {
		t.Errorf("n2 is %v, want still registered", n.GetState())
	}
}
