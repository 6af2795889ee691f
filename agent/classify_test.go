package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// metricValue reads one series from the agent's registry (labels as
// name=value pairs); ok is false when there is no such series.
func metricValue(t *testing.T, a *Agent, name string, labels ...string) (v float64, ok bool) {
	t.Helper()
	mfs, err := a.metrics.registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func failures(t *testing.T, a *Agent, reason string) float64 {
	t.Helper()
	v, _ := metricValue(t, a, "pact_agent_cert_renewal_failures_total", "reason", reason)
	return v
}

func attempts(t *testing.T, a *Agent) float64 {
	t.Helper()
	v, _ := metricValue(t, a, "pact_agent_cert_renewal_attempts_total")
	return v
}

// waitFailure waits until the agent's last failure has the reason.
func waitFailure(t *testing.T, a *Agent, reason string) Status {
	t.Helper()
	var st Status
	eventually(t, "the last failure is "+reason, func() bool {
		st = a.Status()
		return st.LastFailureReason == reason
	})
	if failures(t, a, reason) < 1 {
		t.Errorf("pact_agent_cert_renewal_failures_total{reason=%q} is 0", reason)
	}
	if st.LastFailure == "" || st.LastFailureAt.IsZero() || st.LastFailureOp == "" {
		t.Errorf("status lacks the failure's details: %+v", st)
	}
	return st
}

// Each way of failing against a journal gets its own reason, and the agent
// keeps what it has and retries (or, for a decommissioned node, fails
// closed).
func TestFailureClassification(t *testing.T) {
	t.Run("journal down: endpoint_unreachable", func(t *testing.T) {
		h := journaltest.Start(t, journaltest.Config(t.TempDir()))
		cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
		cfg.JournalAddrs = []string{journaltest.FreeAddr(t)}
		r := runAgent(t, cfg)
		st := waitFailure(t, r.Agent, ReasonEndpointUnreachable)
		if st.LastFailureOp != "enroll" {
			t.Errorf("failed op %q, want enroll", st.LastFailureOp)
		}
		// It keeps retrying with backoff.
		n := attempts(t, r.Agent)
		eventually(t, "the agent retries", func() bool { return attempts(t, r.Agent) > n })
	})

	t.Run("journal with a certificate from another CA: server_tls_untrusted", func(t *testing.T) {
		ours := journaltest.Start(t, journaltest.Config(t.TempDir()))
		foreign := journaltest.Start(t, journaltest.Config(t.TempDir()))
		// Were verification ever skipped, this journal would enroll the node.
		foreign.Register(t, "n1", "SN1", mac1)
		cfg := agentConfig(ours, clock.Real{}, "SN1", mac1)
		cfg.JournalAddrs = []string{foreign.Addr}
		r := runAgent(t, cfg)
		waitFailure(t, r.Agent, ReasonServerTLSUntrusted)
		if s := inspect(t, foreign, "n1").GetState(); s != pactv1.NodeState_NODE_STATE_REGISTERED {
			t.Errorf("the untrusted journal saw the node enroll: %v", s)
		}
	})

	t.Run("expired identity: cert_expired", func(t *testing.T) {
		h := journaltest.Start(t, journaltest.Config(t.TempDir()))
		h.Register(t, "n1", "SN1", mac1)
		fc := fakeclock.New(time.Now())
		r := runAgent(t, agentConfig(h, fc, "SN1", mac1))
		eventually(t, "n1 streams", func() bool { return r.Status().Ready })
		notAfter := r.Status().NotAfter
		if err := h.J.Close(); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the stream is lost", func() bool { return !r.Status().StreamConnected })
		fc.Advance(notAfter.Sub(fc.Now()) + time.Hour)
		st := waitFailure(t, r.Agent, ReasonCertExpired)
		if st.Ready {
			t.Errorf("ready with an expired identity: %+v", st)
		}
	})

	t.Run("decommissioned node: node_revoked", func(t *testing.T) {
		h := journaltest.Start(t, journaltest.Config(t.TempDir()))
		h.Register(t, "n1", "SN1", mac1)
		a, err := New(agentConfig(h, clock.Real{}, "SN1", mac1))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Run(context.Background()) }()
		eventually(t, "n1 streams", func() bool { return a.Status().Ready })
		if _, err := h.AdminClient(t).DecommissionNode(context.Background(), &pactv1.DecommissionNodeRequest{NodeId: "n1", Force: true}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, ErrRefused) || ExitCode(err) != ExitRevoked {
				t.Fatalf("Run = %v (exit %d), want a refusal with exit code %d", err, ExitCode(err), ExitRevoked)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("the agent did not stop after its node was decommissioned")
		}
		if got := a.Status().LastFailureReason; got != ReasonRevoked {
			t.Errorf("last failure %q, want %q", got, ReasonRevoked)
		}
	})

	t.Run("clock two hours ahead: clock_skew", func(t *testing.T) {
		// Ten minutes is bridged (skew_test.go); two hours is beyond it.
		h := journaltest.Start(t, journaltest.Config(t.TempDir()))
		h.Register(t, "n1", "SN1", mac1)
		cfg := agentConfig(h, fakeclock.New(time.Now().Add(2*time.Hour)), "SN1", mac1)
		cfg.MaxClockSkew = 5 * time.Minute
		r := runAgent(t, cfg)
		st := waitFailure(t, r.Agent, ReasonClockSkew)
		if st.Ready {
			t.Errorf("status %+v, want not ready", st)
		}
	})

	t.Run("identity dir on a full disk: disk_full", func(t *testing.T) {
		full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
		if err != nil {
			t.Skipf("no /dev/full to stand in for a full disk: %v", err)
		}
		defer full.Close()
		h := journaltest.Start(t, journaltest.Config(t.TempDir()))
		h.Register(t, "n1", "SN1", mac1)
		cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
		cfg.IdentityDir = t.TempDir()
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		a.files.sink = func(*os.File) io.Writer { return full }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		st := waitFailure(t, a, ReasonDiskFull)
		if !st.Ready || st.LastFailureOp != "write identity files" {
			t.Errorf("status %+v: want the agent ready, the failure in writing its files", st)
		}
		cancel()
		<-done
		if left, _ := os.ReadDir(cfg.IdentityDir); len(left) != 0 {
			t.Errorf("failed writes left files behind: %v", left)
		}
	})
}

func TestClassify(t *testing.T) {
	now := time.Now()
	ca := identitytest.NewCA("pact.local", now)
	valid := ca.Issue(identity.SourceJournal, "spiffe://pact.local/pact-agent/n1", now.Add(-time.Hour), now.Add(time.Hour))
	expired := ca.Issue(identity.SourceJournal, "spiffe://pact.local/pact-agent/n1", now.Add(-2*time.Hour), now.Add(-time.Hour))
	unavailable := status.Error(codes.Unavailable, "connection refused")
	tests := []struct {
		name string
		err  error
		id   *identity.Identity
		want string
	}{
		{"no space", &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}, nil, ReasonDiskFull},
		{"skew", fmt.Errorf("wrapped: %w", &channel.ClockSkewError{Skew: 10 * time.Minute}), valid, ReasonClockSkew},
		{"expired identity, unreachable journal", unavailable, expired, ReasonCertExpired},
		{"no identity left", fmt.Errorf("x: %w", identity.ErrExpired), nil, ReasonCertExpired},
		{"unreachable", unavailable, valid, ReasonEndpointUnreachable},
		{"deadline", status.Error(codes.DeadlineExceeded, "slow"), valid, ReasonEndpointUnreachable},
		{"revoked", apierr.Status(apierr.NodeRevoked, 0, "gone").Err(), valid, ReasonRevoked},
		{"fenced", apierr.Status(apierr.NodeFenced, 0, "quarantined").Err(), valid, ReasonFenced},
		{"stale", apierr.Status(apierr.StaleCertificate, 0, "old").Err(), valid, ReasonCertReplaced},
		{"SPIRE bundle", apierr.Status(apierr.SPIREBundleUntrusted, 0, "forged").Err(), valid, ReasonSPIREBundleUntrusted},
		{"trust domain", apierr.Status(apierr.TrustDomainNotAccepted, 0, "example.org").Err(), valid, ReasonTrustDomainNotAccepted},
		{"unmapped SPIFFE ID", apierr.Status(apierr.SPIFFEIDUnmapped, 0, "ghost").Err(), valid, ReasonSPIFFEIDUnmapped},
		{"not valid yet at the journal", apierr.Status(apierr.CertNotYetValid, 0, "clocks").Err(), valid, ReasonClockSkew},
		{"unauthenticated", apierr.Status(apierr.Unauthenticated, 0, "who").Err(), valid, ReasonIdentityRefused},
		{"permission denied", apierr.Status(apierr.PermissionDenied, 0, "who").Err(), valid, ReasonIdentityRefused},
		{"wrong node", fmt.Errorf("x: %w", channel.ErrWrongNode), valid, ReasonIdentityRefused},
		// A journal's refusal of the certificate is read from the alert
		// itself (tlsalert, TestBootstrapIdentityThenJournal), never from
		// the words of an error.
		{"an alert in words only", status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: remote error: tls: bad certificate"`), valid, ReasonEndpointUnreachable},
		{"rate limited", apierr.Status(apierr.RateLimited, time.Second, "busy").Err(), nil, ReasonRateLimited},
		{"no leader", apierr.Status(apierr.NoLeader, 0, "election").Err(), nil, ReasonJournalUnavailable},
		{"not enrolled", apierr.Status(apierr.NodeNotEnrolled, 0, "who").Err(), nil, ReasonEnrollmentRefused},
		{"TPM required", apierr.Status(apierr.TPMRequired, 0, "no TPM").Err(), nil, ReasonTPMRefused},
		{"TPM EK mismatch", apierr.Status(apierr.TPMEKMismatch, 0, "other EK").Err(), nil, ReasonTPMRefused},
		{"TPM AK refused", apierr.Status(apierr.TPMAKRefused, 0, "weak AK").Err(), nil, ReasonTPMRefused},
		{"TPM answer wrong", apierr.Status(apierr.TPMAttestationFailed, 0, "proof").Err(), nil, ReasonTPMRefused},
		{"TPM answer late", apierr.Status(apierr.TPMChallengeExpired, 0, "late").Err(), nil, ReasonTPMRefused},
		{"the local TPM failed", fmt.Errorf("x: %w", ErrTPM), nil, ReasonTPMUnavailable},
		{"join token required", apierr.Status(apierr.JoinTokenRequired, 0, "token").Err(), nil, ReasonEnrollmentRefused},
		{"join token invalid", apierr.Status(apierr.JoinTokenInvalid, 0, "used").Err(), nil, ReasonEnrollmentRefused},
		{"key in use", apierr.Status(apierr.KeyInUse, 0, "key").Err(), nil, ReasonEnrollmentRefused},
		{"anything else", errors.New("boom"), nil, ReasonOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.err, tt.id, now); got != tt.want {
				t.Errorf("classify(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

// An agent whose certificate expired while no journal was reachable says
// so, and recovers on its own once a journal is back: it enrolls again
// (a takeover of its own quiet identity) and streams.
func TestRecoversAfterExpiry(t *testing.T) {
	fc := fakeclock.New(time.Now())
	jcfg := journaltest.Config(t.TempDir())
	jcfg.Clock = fc
	h := journaltest.Start(t, jcfg)
	h.Register(t, "n1", "SN1", mac1)
	r := runAgent(t, agentConfig(h, fc, "SN1", mac1))
	eventually(t, "n1 streams", func() bool { return r.Status().Ready })
	first := r.Status()
	addr := h.Addr
	if err := h.J.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stream is lost", func() bool { return !r.Status().StreamConnected })
	fc.Advance(first.NotAfter.Sub(fc.Now()) + time.Hour)
	waitFailure(t, r.Agent, ReasonCertExpired)

	jcfg.ListenAddr = addr // where the agent looks for it
	journaltest.Start(t, jcfg)
	eventually(t, "the agent enrolls again and streams", func() bool {
		fc.Advance(50 * time.Millisecond) // the agent's backoff runs on its clock
		st := r.Status()
		return st.Ready && st.Serial != first.Serial
	})
	// (The harness's admin client checks the journal's certificate at the
	// real time, days behind the fake one: ask through the agent.)
	resp, err := pactv1.NewEnrollmentServiceClient(r.Conn()).Ping(t.Context(), &pactv1.PingRequest{})
	if err != nil || resp.GetSerial() != r.Status().Serial || resp.GetNodeId() != "n1" {
		t.Errorf("Ping through the agent = %v, %v; want n1 with serial %s", resp, err, r.Status().Serial)
	}
}
