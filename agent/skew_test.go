package agent

import (
	"context"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// An agent whose clock is up to an hour off the journal's (the journal on
// the real clock, the agent on an injected one) enrolls and streams on the
// journal's time, and says how far off it is. An hour behind, even the
// journal's server certificate (made a moment ago) is not yet valid on the
// agent's clock: the agent bridges from it to the journal's first answer.
func TestClockSkewBridged(t *testing.T) {
	for _, skew := range []time.Duration{10 * time.Minute, -10 * time.Minute, 55 * time.Minute, -55 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			h := journaltest.Start(t, journaltest.Config(t.TempDir()))
			h.Register(t, "n1", "SN1", mac1)
			cfg := agentConfig(h, fakeclock.New(time.Now().Add(skew)), "SN1", mac1)
			cfg.MaxClockSkew = 5 * time.Minute
			r := runAgent(t, cfg)
			eventually(t, "n1 streams", func() bool {
				return r.Status().Ready && h.J.OpenStreams("n1") == 1
			})
			got, ok := metricValue(t, r.Agent, "pact_agent_clock_skew_seconds")
			if !ok || got < skew.Seconds()-60 || got > skew.Seconds()+60 {
				t.Errorf("pact_agent_clock_skew_seconds = %v (%v), want about %v", got, ok, skew.Seconds())
			}
			if off, _ := metricValue(t, r.Agent, "pact_agent_clock_offset_seconds"); off > -skew.Seconds()+60 || off < -skew.Seconds()-60 {
				t.Errorf("pact_agent_clock_offset_seconds = %v, want about %v", off, -skew.Seconds())
			}
			if st := r.Status(); st.LastFailureReason == ReasonServerTLSUntrusted {
				t.Errorf("a skewed clock was taken for an untrusted journal: %+v", st)
			}
		})
	}
}

// Beyond the bridge the agent refuses, and says it is the clock, whichever
// way it is off.
func TestClockSkewBeyondBridge(t *testing.T) {
	for _, skew := range []time.Duration{2 * time.Hour, -2 * time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			h := journaltest.Start(t, journaltest.Config(t.TempDir()))
			h.Register(t, "n1", "SN1", mac1)
			cfg := agentConfig(h, fakeclock.New(time.Now().Add(skew)), "SN1", mac1)
			cfg.MaxClockSkew = 5 * time.Minute
			r := runAgent(t, cfg)
			st := waitFailure(t, r.Agent, ReasonClockSkew)
			if st.Ready || h.J.OpenStreams("n1") != 0 {
				t.Errorf("status %+v, want not streaming", st)
			}
			if failures(t, r.Agent, ReasonServerTLSUntrusted) != 0 {
				t.Errorf("a skewed clock was counted as server_tls_untrusted")
			}
		})
	}
}

// A journal retiring the intermediate behind the agent's certificate tells
// it on the stream; the agent renews at once through its usual rotation,
// long before its renewal time.
func TestRenewNowOnRetiredIntermediate(t *testing.T) {
	fc := fakeclock.New(time.Now())
	jcfg := journaltest.Config(t.TempDir())
	jcfg.Clock = fc
	h := journaltest.Start(t, jcfg)
	h.Register(t, "n1", "SN1", mac1)
	r := runAgent(t, agentConfig(h, fc, "SN1", mac1))
	eventually(t, "n1 streams", func() bool { return r.Status().Ready })
	first := r.Status()
	old := inspect(t, h, "n1").GetCert().GetIssuerSerial()
	if _, err := h.AdminClient(t).RetireIntermediate(context.Background(), &pactv1.RetireIntermediateRequest{Targets: []string{old}, GraceSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the agent renews onto a live intermediate", func() bool {
		st := r.Status()
		return st.Ready && st.Serial != first.Serial && inspect(t, h, "n1").GetCert().GetIssuerSerial() != old
	})
}

// A clock that jumps after enrollment (a late NTP step) is caught by the
// health check when the agent reconnects, and bridged from Ping's time.
func TestClockSkewBridgedFromHealthCheck(t *testing.T) {
	jc := fakeclock.New(time.Now())
	ac := fakeclock.New(jc.Now())
	jcfg := journaltest.Config(t.TempDir())
	jcfg.Clock = jc
	h := journaltest.Start(t, jcfg)
	h.Register(t, "n1", "SN1", mac1)
	cfg := agentConfig(h, ac, "SN1", mac1)
	cfg.MaxClockSkew = 5 * time.Minute
	r := runAgent(t, cfg)
	eventually(t, "n1 streams", func() bool { return r.Status().Ready })
	if off, _ := metricValue(t, r.Agent, "pact_agent_clock_offset_seconds"); off != 0 {
		t.Fatalf("offset %v with agreeing clocks", off)
	}

	ac.Advance(20 * time.Minute)
	addr := h.Addr
	if err := h.J.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stream is lost", func() bool { return !r.Status().StreamConnected })
	jcfg.ListenAddr = addr
	journaltest.Start(t, jcfg)
	eventually(t, "the agent streams again", func() bool {
		ac.Advance(50 * time.Millisecond) // the agent's backoff runs on its clock
		return r.Status().Ready
	})
	off, _ := metricValue(t, r.Agent, "pact_agent_clock_offset_seconds")
	if want := -20 * time.Minute; off > (want+time.Minute).Seconds() || off < (want-time.Minute).Seconds() {
		t.Errorf("pact_agent_clock_offset_seconds = %v, want about %v", off, want.Seconds())
	}
}
