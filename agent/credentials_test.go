package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

func registerRequiringToken(t *testing.T, h *journaltest.Harness, id, bmc, mac string) {
	t.Helper()
	if _, err := h.AdminClient(t).RegisterNode(context.Background(), &pactv1.RegisterNodeRequest{
		NodeId: id, Hardware: &pactv1.HardwareIdentity{Macs: []string{mac}, BmcSerial: bmc},
		Credentials: &pactv1.CredentialPolicy{RequireJoinToken: true},
	}); err != nil {
		t.Fatal(err)
	}
}

// runUntilRefused runs an agent until it gives up with a final refusal.
func runUntilRefused(t *testing.T, cfg Config) error {
	t.Helper()
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
	return err
}

// A node that requires a join token: without one the agent is refused
// (and says how to get one); with the file it enrolls, and the token does
// not reach the agent's log.
func TestAgentJoinToken(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	registerRequiringToken(t, h, "n1", "SN1", mac1)

	err := runUntilRefused(t, agentConfig(h, clock.Real{}, "SN1", mac1))
	if pe := apierr.FromError(err); pe.Reason != apierr.JoinTokenRequired || ExitCode(err) != ExitRevoked || !strings.Contains(err.Error(), "--join-token-file") {
		t.Errorf("without a token: %v (exit %d)", err, ExitCode(err))
	}
	if got := classify(err, nil, time.Now()); got != ReasonEnrollmentRefused {
		t.Errorf("classified %q", got)
	}

	created, err := h.AdminClient(t).CreateJoinToken(context.Background(), &pactv1.CreateJoinTokenRequest{NodeId: "n1", TtlSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(created.GetToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.JoinTokenFile = file
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := runAgent(t, cfg)
	eventually(t, "n1 is active with one stream", func() bool {
		return inspect(t, h, "n1").GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && h.J.OpenStreams("n1") == 1
	})
	r.cancel()
	<-r.done
	r.done <- nil // for the cleanup
	if strings.Contains(logs.String(), strings.TrimPrefix(created.GetToken(), "pactjt_")[:16]) {
		t.Error("the agent logged its join token")
	}

	// The token was used: another agent on the same hardware with the same
	// file is refused with JOIN_TOKEN_INVALID.
	err = runUntilRefused(t, cfg)
	if pe := apierr.FromError(err); pe.Reason != apierr.JoinTokenInvalid || !strings.Contains(err.Error(), "pact node token create") {
		t.Errorf("a used token: %v", err)
	}
	if strings.Contains(err.Error(), created.GetToken()) {
		t.Error("the refusal holds the token")
	}
}

func TestAgentJoinTokenFileMissing(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.JoinTokenFile = filepath.Join(t.TempDir(), "nope")
	if _, err := New(cfg); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("New = %v, want ErrBadConfig", err)
	}
}

// A fenced node's agent loses its stream, reports NODE_FENCED and stops:
// it fails closed until an operator unfences it.
func TestAgentFenced(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	a, err := New(agentConfig(h, clock.Real{}, "SN1", mac1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	eventually(t, "n1 is active", func() bool { return h.J.OpenStreams("n1") == 1 })
	if _, err := h.AdminClient(t).FenceNode(context.Background(), &pactv1.FenceNodeRequest{NodeId: "n1", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if !errors.Is(err, ErrRefused) || apierr.FromError(err).Reason != apierr.NodeFenced || ExitCode(err) != ExitRevoked {
		t.Fatalf("Run = %v (exit %d), want ErrRefused NODE_FENCED", err, ExitCode(err))
	}
	if st := a.Status(); st.LastFailureReason != ReasonFenced || !strings.Contains(st.LastFailure, "NODE_FENCED") {
		t.Errorf("status last failure %q: %q, want %s reporting NODE_FENCED", st.LastFailureReason, st.LastFailure, ReasonFenced)
	}
}

// An agent that stops on a final refusal logs no "retrying" on its way
// out: the refusal is recorded (status, metrics) and Run returns it for
// its caller to report once. Before the fix each of these logged
// "... failed; keeping what the agent has and retrying" at WARN just
// before stopping.
func TestFinalRefusalIsNotLoggedAsRetried(t *testing.T) {
	tests := []struct {
		name   string
		bmc    string
		act    func(t *testing.T, h *journaltest.Harness) // nil: the hardware is not registered
		reason string
	}{
		{"unregistered hardware", "SN9", nil, ReasonEnrollmentRefused},
		{"decommissioned", "SN1", func(t *testing.T, h *journaltest.Harness) {
			if _, err := h.AdminClient(t).DecommissionNode(context.Background(), &pactv1.DecommissionNodeRequest{NodeId: "n1", Force: true}); err != nil {
				t.Fatal(err)
			}
		}, ReasonRevoked},
		{"fenced", "SN1", func(t *testing.T, h *journaltest.Harness) {
			if _, err := h.AdminClient(t).FenceNode(context.Background(), &pactv1.FenceNodeRequest{NodeId: "n1", Reason: "INC-42"}); err != nil {
				t.Fatal(err)
			}
		}, ReasonFenced},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := journaltest.Start(t, journaltest.Config(t.TempDir()))
			h.Register(t, "n1", "SN1", mac1)
			var logs syncBuffer
			cfg := agentConfig(h, clock.Real{}, tt.bmc, mac1)
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			if tt.act != nil {
				eventually(t, "n1 streams", func() bool { return a.Status().Ready })
				tt.act(t, h)
			}
			if err := <-done; !errors.Is(err, ErrRefused) {
				t.Fatalf("Run = %v, want ErrRefused", err)
			}
			if got := a.Status().LastFailureReason; got != tt.reason {
				t.Errorf("status reason %q, want %q", got, tt.reason)
			}
			out := logs.String()
			if strings.Contains(out, "retrying") || strings.Contains(out, "level=WARN") {
				t.Errorf("the agent stopped on a final refusal, and its log says otherwise:\n%s", out)
			}
		})
	}
}
