package agent

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

const mac1 = "52:54:00:00:00:01"

func agentConfig(h *journaltest.Harness, c clock.Clock, bmc string, macs ...string) Config {
	cfg := DefaultConfig()
	cfg.JournalAddrs = []string{h.Addr}
	cfg.CAFile = filepath.Join(h.Dir, "ca.pem")
	cfg.Hardware.MACs = macs
	cfg.Hardware.BMCSerial = bmc
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.MinBackoff = 10 * time.Millisecond
	cfg.MaxBackoff = 100 * time.Millisecond
	cfg.Clock = c
	cfg.SPIRESocket = ""
	cfg.StatusSocket = ""
	// The host's own event log (a CI machine with a TPM) is not the
	// software TPM's: the measured-boot tests give theirs.
	cfg.TPMEventLog = ""
	// Tests drive the agent's clock days ahead of the journal's to reach
	// renewal time; the skew check has its own test.
	cfg.MaxClockSkew = 365 * 24 * time.Hour
	return cfg
}

type runningAgent struct {
	*Agent
	cancel context.CancelFunc
	done   chan error
}

func runAgent(t *testing.T, cfg Config) *runningAgent {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningAgent{Agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop")
		}
	})
	return r
}

// eventually polls cond; the journal and agent run on real goroutines, so a
// test waits for an observable state rather than for a fixed time.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, 15*time.Second, 10*time.Millisecond, cond, "timed out waiting until %s", what)
}

func inspect(t *testing.T, h *journaltest.Harness, id string) *pactv1.Node {
	t.Helper()
	resp, err := h.AdminClient(t).InspectNode(context.Background(), &pactv1.InspectNodeRequest{NodeId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetNode()
}

func TestAgentEnrollsAndHoldsStream(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	runAgent(t, agentConfig(h, clock.Real{}, "SN1", mac1, "52:54:00:00:00:77"))
	eventually(t, "n1 is active with one stream", func() bool {
		return inspect(t, h, "n1").GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && h.J.OpenStreams("n1") == 1
	})
}

func TestAgentRefusals(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	runAgent(t, agentConfig(h, clock.Real{}, "SN1", mac1))
	eventually(t, "n1 is active", func() bool { return h.J.OpenStreams("n1") == 1 })

	tests := []struct {
		name     string
		bmc      string
		macs     []string
		reason   apierr.Reason
		exitCode int
		hint     string
	}{
		{"unregistered hardware", "SN9", []string{"52:54:00:00:00:09"}, apierr.NodeNotEnrolled, ExitNotEnrolled, "pact node enroll NODE --mac 52:54:00:00:00:09 --bmc-serial SN9"},
		{"second agent on active hardware", "SN1", []string{mac1}, apierr.AlreadyActive, ExitAlreadyActive, "wait for it to turn inactive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(agentConfig(h, clock.Real{}, tt.bmc, tt.macs...))
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
			if got := ExitCode(err); got != tt.exitCode {
				t.Errorf("exit code %d, want %d", got, tt.exitCode)
			}
			if !strings.Contains(err.Error(), tt.hint) {
				t.Errorf("error %q does not tell the operator %q", err, tt.hint)
			}
		})
	}
	if n := inspect(t, h, "n1"); n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || h.J.OpenStreams("n1") != 1 {
		t.Errorf("the refused agents disturbed n1: %v, %d streams", n.GetState(), h.J.OpenStreams("n1"))
	}
}

// Renewal is driven by the agent's clock: advancing it past 2/3 of the
// lifetime makes the agent renew over mTLS, open a stream with the new
// certificate, and drop the old one.
func TestAgentRenewsAtTwoThirds(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	fc := fakeclock.New(time.Now())
	r := runAgent(t, agentConfig(h, fc, "SN1", mac1))
	eventually(t, "n1 is active", func() bool { return h.J.OpenStreams("n1") == 1 })
	first := inspect(t, h, "n1").GetCert()
	notBefore := time.Unix(first.GetNotBeforeUnix(), 0)
	lifetime := time.Unix(first.GetNotAfterUnix(), 0).Sub(notBefore)

	// The renewal timer beside the identity cascade's probe timer.
	eventually(t, "the agent schedules its renewal", func() bool { return !r.Status().NextRenewal.IsZero() && fc.Timers() >= 2 })
	// The renewal is due at 2/3 of the lifetime plus a jitter of up to a
	// twentieth of it (a fleet enrolled at once spreads its renewals).
	due := r.Status().NextRenewal
	earliest, latest := notBefore.Add(lifetime*2/3), notBefore.Add(lifetime*2/3+lifetime/20)
	if due.Before(earliest) || due.After(latest) {
		t.Fatalf("renewal due at %.1f %% of the lifetime, want 2/3 plus at most 5 %%", 100*float64(due.Sub(notBefore))/float64(lifetime))
	}
	// A second before it is due, every timer that fired has run: no renewal.
	advanceAndSettle(t, fc, due.Sub(fc.Now())-time.Second)
	if got := inspect(t, h, "n1").GetCert().GetSerial(); got != first.GetSerial() {
		t.Fatalf("renewed %v before it was due at 2/3 of the lifetime (serial %s -> %s)", due.Sub(fc.Now()), first.GetSerial(), got)
	}
	// At the time it is due, it renews.
	fc.Advance(time.Second)
	eventually(t, "the certificate is renewed", func() bool {
		return inspect(t, h, "n1").GetCert().GetSerial() != first.GetSerial()
	})
	eventually(t, "one stream remains", func() bool { return h.J.OpenStreams("n1") == 1 })
}

// advanceAndSettle advances fc by d and waits, on the fake clock, until
// every timer that fired has been set again: the code those timers woke
// has done its work and waits on the clock once more. A negative check
// after it (nothing renewed) needs no wall-clock sleep.
func advanceAndSettle(t *testing.T, fc *fakeclock.Clock, d time.Duration) {
	t.Helper()
	pending := fc.Timers()
	fc.Advance(d)
	if !fc.WaitForTimers(pending, 10*time.Second) {
		t.Fatalf("after advancing the clock %v, %d of %d timers were not set again", d, pending-fc.Timers(), pending)
	}
}

func TestJournalIdentityNeverPrintsKey(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	key := journaltest.NewKey(t)
	resp, err := h.Enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	id, who, err := journalIdentity(key.Signer, h.Roots, resp.GetCertChainDer(), resp.GetTrustBundleDer(), time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if who.Name != "n1" || id.Source != identity.SourceJournal {
		t.Fatalf("identity of %v from %s, want n1 from journal", who, id.Source)
	}
	d := fmt.Sprintf("%v", key.Signer) // &{{curve X Y} D}
	secret := strings.TrimSuffix(d[strings.LastIndex(d, " ")+1:], "}")
	if len(secret) < 60 {
		t.Fatalf("could not find the private scalar in %q", d)
	}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "identity", id)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "identity", id)
	for _, out := range []string{fmt.Sprintf("%v %+v %#v %s", id, id, id, id), logs.String()} {
		if strings.Contains(out, secret) {
			t.Fatalf("identity output contains the private key: %s", out)
		}
		if !strings.Contains(out, id.Serial()) {
			t.Fatalf("identity output lacks the serial; the redaction test would pass vacuously: %s", out)
		}
	}
}

func TestJournalIdentityRefusesWhatDoesNotBelong(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	key := journaltest.NewKey(t)
	resp, err := h.Enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	other := journaltest.NewKey(t)
	foreign := journaltest.Start(t, journaltest.Config(t.TempDir()))
	tests := []struct {
		name  string
		key   crypto.Signer
		roots *x509.CertPool
		chain [][]byte
		want  string
	}{
		{"no certificate", key.Signer, h.Roots, nil, "no certificate"},
		{"garbage", key.Signer, h.Roots, [][]byte{[]byte("x")}, "unparsable"},
		{"another key", other.Signer, h.Roots, resp.GetCertChainDer(), "another key"},
		{"another domain root", key.Signer, foreign.Roots, resp.GetCertChainDer(), "does not verify"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := journalIdentity(tt.key, tt.roots, tt.chain, nil, time.Now(), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// Config.Dialer opens every connection to a journal: the enrollment's
// (dialled and handshaken before any gRPC channel exists) and the
// channel's.
func TestAgentDialsEveryConnectionWithItsDialer(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	var mu sync.Mutex
	dialled := map[string]int{}
	cfg.Dialer = func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		dialled[addr]++
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	runAgent(t, cfg)
	eventually(t, "n1 is active with one stream", func() bool {
		return inspect(t, h, "n1").GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && h.J.OpenStreams("n1") == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if n := dialled[h.Addr]; n < 2 {
		t.Errorf("the dialer opened %d connections to %s, want one for Enroll and one for the channel at least (%v)", n, h.Addr, dialled)
	}
}
