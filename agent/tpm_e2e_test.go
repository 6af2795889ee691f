package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

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
	ek := ekHashOf(t, sw.Device)
	registerWithEK(t, h, "n1", "SN1", ek, mac1)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.TPMDevice = sw.Device
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	// Both rounds go over one connection: one TLS handshake per attested
	// enrollment, to the journal that holds the challenge.
	var mu sync.Mutex
	enrollConns := map[*grpc.ClientConn]int{}
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == pactv1.EnrollmentService_Enroll_FullMethodName {
				mu.Lock()
				enrollConns[cc]++
				mu.Unlock()
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})}
	runAgent(t, cfg)
	eventually(t, "n1 is active with one stream", func() bool {
		return inspect(t, h, "n1").GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && h.J.OpenStreams("n1") == 1
	})
	mu.Lock()
	var calls []int
	for _, n := range enrollConns {
		calls = append(calls, n)
	}
	mu.Unlock()
	if len(calls) != 1 || calls[0] != 2 {
		t.Errorf("Enroll calls per connection %v, want both rounds (2) over one connection", calls)
	}
	// The log says, once, that the TPM proved the node, and which TPM.
	enrolled := logLines(logs.String(), "msg=enrolled")
	if len(enrolled) != 1 || !strings.Contains(enrolled[0], "level=INFO") || !strings.Contains(enrolled[0], " tpm=attested tpm_ek_hash="+ek[:16]+"\n") {
		t.Errorf("enrolled lines %q; want one at INFO with tpm=attested tpm_ek_hash=%s", enrolled, ek[:16])
	}

	// A node with a TPM (another one: an EK hash belongs to one node)
	// registered without an EK hash enrolls on its hardware alone, and the
	// log says the TPM was not asked for.
	sw2 := swtpmtest.Start(t)
	ek2 := ekHashOf(t, sw2.Device)
	h.Register(t, "n2", "SN2", "52:54:00:00:00:02")
	cfg = agentConfig(h, clock.Real{}, "SN2", "52:54:00:00:00:02")
	cfg.TPMDevice = sw2.Device
	var logs2 syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs2, &slog.HandlerOptions{Level: slog.LevelDebug}))
	runAgent(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("n2 agent log:\n%s", logs2.String())
		}
	})
	eventually(t, "n2 is active", func() bool { return h.J.OpenStreams("n2") == 1 })
	if enrolled := logLines(logs2.String(), "msg=enrolled"); len(enrolled) != 1 || !strings.Contains(enrolled[0], " tpm=not_required tpm_ek_hash="+ek2[:16]) {
		t.Errorf("enrolled lines %q; want one with tpm=not_required", enrolled)
	}
}

// logLines are the lines of out that contain what, each with its newline.
func logLines(out, what string) []string {
	var got []string
	for _, l := range strings.SplitAfter(out, "\n") {
		if strings.Contains(l, what) {
			got = append(got, l)
		}
	}
	return got
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
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
