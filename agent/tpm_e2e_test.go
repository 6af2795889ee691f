package agent

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/swtpmtest"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// registerWithEK registers a node with a TPM EK hash.
func registerWithEK(t *testing.T, h *journaltest.Harness, id, bmc, ekHash string, macs ...string) {
	t.Helper()
	_, err := h.AdminClient(t).RegisterNode(context.Background(), &pactv1.RegisterNodeRequest{
		NodeId: id, Hardware: &pactv1.HardwareIdentity{Macs: macs, BmcSerial: bmc, TpmEkHash: ekHash},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func ekHashOf(t *testing.T, device string) string {
	t.Helper()
	_, h, err := tpm.ReadEK(device)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// End to end: a real journal, the agent's real enrollment path, a real
// software TPM. Registered with the TPM's EK hash, the node proves it by
// credential activation and enrolls.
func TestAgentEnrollsWithTPM(t *testing.T) {
	sw := swtpmtest.Start(t)
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	registerWithEK(t, h, "n1", "SN1", ekHashOf(t, sw.Device), mac1)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.TPMDevice = sw.Device
	runAgent(t, cfg)
	eventually(t, "n1 is active with one stream", func() bool {
		return inspect(t, h, "n1").GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && h.J.OpenStreams("n1") == 1
	})
}

// The refusals an operator sees from pact-agent when the TPM does not
// prove the node: each is final (the agent stops with exit code 5,
// "credential refused", and a hint), and the node stays Registered.
func TestAgentTPMRefusals(t *testing.T) {
	sw := swtpmtest.Start(t)
	otherTPM := swtpmtest.Start(t)
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	registerWithEK(t, h, "n1", "SN1", ekHashOf(t, sw.Device), mac1)

	tests := []struct {
		name   string
		device string
		ekFlag string
		reason apierr.Reason
		hint   string
	}{
		{"another machine's TPM (wrong EK)", otherTPM.Device, "", apierr.TPMEKMismatch, "not the one registered"},
		{"no TPM", "", "", apierr.TPMRequired, "registered with a TPM"},
		{"no TPM device on the node", "/nonexistent/tpmrm0", "", apierr.TPMRequired, "registered with a TPM"},
		{"no TPM, the registered hash claimed with --tpm-ek-hash", "", ekHashOf(t, sw.Device), apierr.TPMRequired, "registered with a TPM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
			cfg.TPMDevice = tt.device
			cfg.Hardware.TPMEKHash = tt.ekFlag
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = a.Run(ctx)
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("Run = %v, want ErrRefused", err)
			}
			if got := apierr.FromError(err).Reason; got != tt.reason {
				t.Errorf("reason %q, want %q (%v)", got, tt.reason, err)
			}
			// A credential refused: exit 5, like a join token refusal.
			if got := ExitCode(err); got != ExitRevoked {
				t.Errorf("exit code %d, want %d", got, ExitRevoked)
			}
			if !strings.Contains(err.Error(), tt.hint) {
				t.Errorf("error %q does not tell the operator %q", err, tt.hint)
			}
			if got := a.Status().LastFailureReason; got != ReasonTPMRefused {
				t.Errorf("status reason %q, want %q", got, ReasonTPMRefused)
			}
		})
	}
	if n := inspect(t, h, "n1"); n.GetState() != pactv1.NodeState_NODE_STATE_REGISTERED {
		t.Errorf("n1 is %v after the refusals, want still registered", n.GetState())
	}
	// And the right TPM still enrolls it.
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.TPMDevice = sw.Device
	runAgent(t, cfg)
	eventually(t, "n1 is active", func() bool { return h.J.OpenStreams("n1") == 1 })
}

// A TPM that exists but fails (here: a socket nothing listens on) does not
// stop a node registered without one; a node registered with one is not
// refused for good either: the agent reports tpm_unavailable and retries.
func TestAgentWithAFailingTPM(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	dead := "unix:" + t.TempDir() + "/tpm.sock"
	if err := os.WriteFile(strings.TrimPrefix(dead, "unix:"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.Register(t, "plain", "SN1", mac1)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.TPMDevice = dead
	runAgent(t, cfg)
	eventually(t, "the node without a registered TPM is active", func() bool { return h.J.OpenStreams("plain") == 1 })

	sw := swtpmtest.Start(t)
	registerWithEK(t, h, "tpm", "SN2", ekHashOf(t, sw.Device), "52:54:00:00:00:02")
	cfg = agentConfig(h, clock.Real{}, "SN2", "52:54:00:00:00:02")
	cfg.TPMDevice = dead
	a := runAgent(t, cfg)
	eventually(t, "the agent reports its TPM failing", func() bool { return a.Status().LastFailureReason == ReasonTPMUnavailable })
	select {
	case err := <-a.done:
		t.Fatalf("the agent gave up: %v", err)
	default:
	}
}
