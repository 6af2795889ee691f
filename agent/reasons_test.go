package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/identity/spire/spiretest"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Every refusal of an identity names its cause, the same way in the log,
// `pact-agent status` and pact_agent_cert_renewal_failures_total: SPIRE
// bundle not trusted, SPIFFE ID mapped to no node, trust domain not
// accepted, certificate replaced. (Revocation and clock skew are in
// TestFailureClassification; fencing, which no journal on main can do yet,
// and the journal's not-yet-valid refusal in TestClassify.)
func TestRefusalsNameTheirCause(t *testing.T) {
	now := time.Now()
	trusted := identitytest.NewCA("pact.local", now)
	forged := identitytest.NewCA("pact.local", now) // same name, another key
	other := identitytest.NewCA("example.org", now)
	tests := []struct {
		name   string
		svid   *identity.Identity
		reason string
		says   string // in the status's message
	}{
		{"forged SPIRE CA", forged.Issue(identity.SourceSPIRE, "spiffe://pact.local/pact-agent/n1", now.Add(-time.Minute), now.Add(time.Hour)),
			ReasonSPIREBundleUntrusted, "not signed by the SPIRE trust bundle of pact.local"},
		{"SPIFFE ID of no node", trusted.Issue(identity.SourceSPIRE, "spiffe://pact.local/hpc/rack7/slot3", now.Add(-time.Minute), now.Add(time.Hour)),
			ReasonSPIFFEIDUnmapped, "maps to no node"},
		{"foreign trust domain", other.Issue(identity.SourceSPIRE, "spiffe://example.org/pact-agent/n1", now.Add(-time.Minute), now.Add(time.Hour)),
			ReasonTrustDomainNotAccepted, "of trust domain example.org"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jcfg := journaltest.Config(t.TempDir())
			jcfg.SPIREBundleFile = filepath.Join(t.TempDir(), "spire-bundle.pem")
			if err := os.WriteFile(jcfg.SPIREBundleFile, identitytest.CertsPEM(trusted.Cert), 0o644); err != nil {
				t.Fatal(err)
			}
			h := journaltest.Start(t, jcfg)
			h.Register(t, "n1", "SN1", mac1)
			sp := spiretest.New(t)
			sp.SetSVID(tt.svid)
			sp.Start()
			logs := &syncBuffer{}
			cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
			cfg.SPIRESocket = sp.Addr()
			cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
			r := runAgent(t, cfg)
			st := waitFailure(t, r.Agent, tt.reason)
			if !strings.Contains(st.LastFailure, tt.says) {
				t.Errorf("status says %q, want it to say %q", st.LastFailure, tt.says)
			}
			// The agent counts a failure and sets its status before it
			// logs it: wait for the line, bounded.
			waitLogged(t, logs, "reason="+tt.reason)
			// The agent falls back to the journal and keeps the node up.
			eventually(t, "n1 streams with its journal certificate", func() bool {
				st := r.Status()
				return st.Ready && st.Source == "journal"
			})
		})
	}

	t.Run("certificate replaced", func(t *testing.T) {
		h := journaltest.Start(t, journaltest.Config(t.TempDir()))
		h.Register(t, "n1", "SN1", mac1)
		logs := &syncBuffer{}
		cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		r := runAgent(t, cfg)
		eventually(t, "n1 streams", func() bool { return r.Status().Ready })
		// Someone with the agent's key renews behind its back: the
		// certificate the agent holds is replaced.
		id, err := r.jp.Current(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		cert := id.TLSCertificate()
		key := journaltest.NewKey(t)
		if _, err := pactv1.NewEnrollmentServiceClient(h.Dial(t, &cert)).RenewCert(context.Background(), &pactv1.RenewCertRequest{CurrentSerial: id.Serial(), CsrDer: key.CSR}); err != nil {
			t.Fatal(err)
		}
		// The stream ends on the replaced certificate; the agent drops it
		// and enrolls again (refused: its node streamed a moment ago),
		// which then becomes the last failure in the status.
		eventually(t, "a failure counted as cert_replaced", func() bool { return failures(t, r.Agent, ReasonCertReplaced) >= 1 })
		waitLogged(t, logs, "reason="+ReasonCertReplaced, "was replaced")
	})
}

// waitLogged waits, bounded, until the log holds every one of what, and
// fails the test with the log if it never does.
func waitLogged(t *testing.T, logs *syncBuffer, what ...string) {
	t.Helper()
	var last polltest.Last
	polltest.Until(t, 15*time.Second, 10*time.Millisecond, func() bool {
		out := logs.String()
		for _, w := range what {
			if !strings.Contains(out, w) {
				last.Value = fmt.Sprintf("%q:\n%s", w, out)
				return false
			}
		}
		return true
	}, "the log does not say %v", &last)
}

// A refusal that can clear by waiting carries a retry-after, and the agent
// does not ask again before it. Here the node's previous incarnation (its
// key lost in a reboot) was active a moment ago: the journal refuses the new
// agent ALREADY_ACTIVE with a retry-after, the agent waits that long on its
// clock, and then takes the node over.
func TestAgentHonoursRetryAfter(t *testing.T) {
	fc := fakeclock.New(time.Now())
	jcfg := journaltest.Config(t.TempDir())
	jcfg.Clock = fc
	jcfg.MetricsListen = "127.0.0.1:0"
	h := journaltest.Start(t, jcfg)
	h.Register(t, "n1", "SN1", mac1)
	if _, err := h.Enroll(t, journaltest.NewKey(t), "SN1", mac1); err != nil {
		t.Fatal(err)
	}
	site := &cascadeSite{h: h}
	r := runAgent(t, agentConfig(h, fc, "SN1", mac1))
	st := waitFailure(t, r.Agent, ReasonEnrollmentRefused)
	if !strings.Contains(st.LastFailure, string(apierr.AlreadyActive)) || !strings.Contains(st.LastFailure, "may enroll again in") {
		t.Fatalf("last failure %q, want ALREADY_ACTIVE saying when to come back", st.LastFailure)
	}
	refused := `pact_journal_enroll_total{result="refused"}`
	if n := site.journalMetric(t, refused); n != 1 {
		t.Fatalf("%s = %v, want 1", refused, n)
	}
	// Half the retry-after: every timer that is due fires (the agent's
	// backoff alone is at most 100ms here) and has been set again, so the
	// agent has decided and waits on the clock once more; yet it did not ask.
	advanceAndSettle(t, fc, jcfg.TakeoverWindow/2)
	if n := site.journalMetric(t, refused); n != 1 {
		t.Fatalf("%s = %v after half the retry-after: the agent did not wait", refused, n)
	}
	// Past the retry-after and its jitter (up to half of it more).
	eventually(t, "the agent takes the node over", func() bool {
		fc.Advance(time.Second)
		return r.Status().Ready
	})
	if n := site.journalMetric(t, refused); n != 1 {
		t.Errorf("%s = %v, want the one refusal", refused, n)
	}
	if n := site.journalMetric(t, `pact_journal_enroll_total{result="takeover"}`); n != 1 {
		t.Errorf("takeovers %v, want 1", n)
	}
}
