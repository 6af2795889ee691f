package agent

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/identity/spire/spiretest"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// cascadeSite is a real journal and a pact-agent on one fake clock, the
// journal trusting a SPIRE CA made here, and the project's Workload API fake
// (spiretest) standing in for the node's SPIRE agent: a real SPIRE server
// and agent cannot run in a unit test.
type cascadeSite struct {
	h     *journaltest.Harness
	fc    *fakeclock.Clock
	ca    *identitytest.CA
	spire *spiretest.Server
	logs  *syncBuffer
	cfg   Config
}

const (
	testLostGrace    = 10 * time.Second
	testExpiryMargin = 30 * time.Second
)

func newCascadeSite(t *testing.T, mutate ...func(*journal.Config)) *cascadeSite {
	t.Helper()
	fc := fakeclock.New(time.Now())
	ca := identitytest.NewCA("pact.local", fc.Now())
	jcfg := journaltest.Config(t.TempDir())
	jcfg.Clock = fc
	jcfg.MetricsListen = "127.0.0.1:0"
	for _, m := range mutate {
		m(&jcfg)
	}
	jcfg.SPIREBundleFile = filepath.Join(t.TempDir(), "spire-bundle.pem")
	if err := os.WriteFile(jcfg.SPIREBundleFile, identitytest.CertsPEM(ca.Cert), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &cascadeSite{h: journaltest.Start(t, jcfg), fc: fc, ca: ca, spire: spiretest.New(t), logs: &syncBuffer{}}
	s.h.Register(t, "n1", "SN1", mac1)
	s.cfg = agentConfig(s.h, fc, "SN1", mac1)
	s.cfg.SPIRESocket = s.spire.Addr()
	s.cfg.SPIRELostGrace, s.cfg.SPIREExpiryMargin = testLostGrace, testExpiryMargin
	s.cfg.Logger = slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return s
}

// svid issues an SVID for n1 valid for life from now on the shared clock.
func (s *cascadeSite) svid(life time.Duration) *identity.Identity {
	now := s.fc.Now()
	return s.ca.Issue(identity.SourceSPIRE, "spiffe://pact.local/pact-agent/n1", now.Add(-time.Minute), now.Add(life))
}

func (s *cascadeSite) node(t *testing.T) *pactv1.Node { t.Helper(); return inspect(t, s.h, "n1") }

// journalMetric reads one series of the journal's /metrics (0 if absent).
func (s *cascadeSite) journalMetric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.h.J.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return parseMetrics(string(body))[series]
}

// waitLog waits until the agent has logged a line containing what, after
// the first skip bytes of the log.
func (s *cascadeSite) waitLog(t *testing.T, skip int, what string) {
	t.Helper()
	eventually(t, "the agent logs "+what, func() bool {
		l := s.logs.String()
		return len(l) > skip && strings.Contains(l[skip:], what)
	})
}

// transition is one measured move of the agent's channel.
type transition struct {
	name    string
	trigger time.Time // wall time of the event that made SPIRE stop (or start) serving
	rec     channel.SwapRecord
}

// The cascade never leaves the node dark. With SPIRE at boot the agent
// streams on its SVID and holds a journal-signed standby obtained over that
// channel (no enrollment); it follows SPIRE's rotation; when SPIRE goes away
// past its grace, when its registration entry is deleted, and when the SVID
// nears its end without a new one, it swaps to the standby with the
// dual-channel swap; when SPIRE comes back it swaps back. At no moment does
// the journal hold no stream of the node (its drop count never moves), and
// the agent never opens the new stream after closing the old one. It never
// enrolls with its hardware identity, and never presents a certificate the
// journal has replaced.
//
// The wall-clock figures it logs (go test -run TestCascadeNeverDark -v) are
// the ones docs/spire.md quotes; they are measured, not asserted.
func TestCascadeNeverDark(t *testing.T) {
	s := newCascadeSite(t)
	svid1 := s.svid(time.Hour)
	s.spire.SetSVID(svid1)
	s.spire.Start()
	r := runAgent(t, s.cfg)
	eventually(t, "n1 streams on its SVID and holds a standby", func() bool {
		st := r.Status()
		sb := s.node(t).GetStandbyCert()
		id, err := r.jp.Current(t.Context())
		return st.Ready && st.Source == "spire" && st.Serial == svid1.Serial() && err == nil && sb.GetSerial() == id.Serial()
	})
	if c := s.node(t).GetCert(); c.GetSerial() != svid1.Serial() || c.GetIssuerSerial() != "spire" {
		t.Fatalf("the registry holds %v, want the SVID %s", c, svid1.Serial())
	}
	standby, _ := r.jp.Current(t.Context())
	if st := r.Status(); st.StandbySerial != standby.Serial() || !st.StandbyNotAfter.Equal(standby.NotAfter) {
		t.Errorf("status shows standby %q until %v, want %s until %v", st.StandbySerial, st.StandbyNotAfter, standby.Serial(), standby.NotAfter)
	}
	var shown strings.Builder
	if err := PrintStatus(&shown, r.Status()); err != nil || !strings.Contains(shown.String(), "standby:") || !strings.Contains(shown.String(), standby.Serial()) {
		t.Errorf("pact-agent status does not show the standby (%v):\n%s", err, shown.String())
	}
	if standby.Chain[0].Subject.CommonName != "pact-service-agent/n1@pact.local" {
		t.Errorf("standby subject %q, want a journal-signed agent certificate", standby.Chain[0].Subject.CommonName)
	}
	drops := s.h.J.StreamDrops("n1")
	var moves []transition

	// swapped waits for the channel to move to an identity of src (serial,
	// if given) and checks the move left no gap.
	swapped := func(t *testing.T, name string, trigger time.Time, src identity.Source, serial string) {
		t.Helper()
		before, _ := r.rot.LastSwap()
		eventually(t, name+": the channel moves to "+string(src), func() bool {
			rec, ok := r.rot.LastSwap()
			if !ok || rec.To == before.To {
				return false
			}
			id := rec.To.Identity()
			return id.Source == src && (serial == "" || id.Serial() == serial) && r.Status().Ready
		})
		rec, _ := r.rot.LastSwap()
		if rec.From == nil || rec.From != before.To {
			t.Errorf("%s: the swap did not start from the previous channel", name)
		}
		if gap := rec.StreamGap(); gap != 0 {
			t.Errorf("%s: %v without a stream on the agent's side", name, gap)
		}
		eventually(t, name+": the old stream ends", func() bool { return s.h.J.OpenStreams("n1") == 1 })
		if d := s.h.J.StreamDrops("n1"); d != drops {
			t.Errorf("%s: the journal held no stream of n1 %d times", name, d-drops)
		}
		moves = append(moves, transition{name: name, trigger: trigger, rec: rec})
	}

	// Rotation: SPIRE pushes a new SVID.
	svid2 := s.svid(time.Hour)
	trigger := time.Now()
	s.spire.SetSVID(svid2)
	swapped(t, "rotation", trigger, identity.SourceSPIRE, svid2.Serial())

	// SPIRE down: the SPIRE agent dies; after the grace the agent moves to
	// its standby, which the journal then records as current.
	mark := len(s.logs.String())
	s.spire.Stop()
	s.waitLog(t, mark, "SPIRE Workload API stream lost")
	trigger = time.Now()
	s.fc.Advance(testLostGrace)
	swapped(t, "SPIRE down", trigger, identity.SourceJournal, standby.Serial())
	if c := s.node(t).GetCert(); c.GetSerial() != standby.Serial() {
		t.Errorf("after SPIRE went down the registry holds %s, want the standby %s", c.GetSerial(), standby.Serial())
	}

	// SPIRE back: the agent returns to its SVID; the journal certificate
	// becomes the standby again.
	svid3 := s.svid(time.Hour)
	s.spire.SetSVID(svid3)
	trigger = time.Now()
	s.spire.Start()
	swapped(t, "SPIRE back", trigger, identity.SourceSPIRE, svid3.Serial())
	if n := s.node(t); n.GetCert().GetSerial() != svid3.Serial() || n.GetStandbyCert().GetSerial() != standby.Serial() {
		t.Errorf("after SPIRE came back: current %s, standby %s; want %s and %s", n.GetCert().GetSerial(), n.GetStandbyCert().GetSerial(), svid3.Serial(), standby.Serial())
	}

	// Entry deleted: SPIRE answers "no identity issued"; no grace.
	trigger = time.Now()
	s.spire.SetSVID(nil)
	swapped(t, "entry deleted", trigger, identity.SourceJournal, standby.Serial())

	// SVID near its end without a new one: given up ExpiryMargin before.
	svid4 := s.svid(3 * time.Minute)
	s.spire.SetSVID(svid4)
	swapped(t, "SPIRE back (short SVID)", time.Now(), identity.SourceSPIRE, svid4.Serial())
	giveUp := svid4.NotAfter.Add(-testExpiryMargin)
	trigger = time.Now()
	s.fc.Advance(giveUp.Sub(s.fc.Now()))
	swapped(t, "SVID near expiry", trigger, identity.SourceJournal, standby.Serial())

	st := r.Status()
	for _, reason := range allReasons {
		if n := failures(t, r.Agent, reason); n != 0 {
			t.Errorf("pact_agent_cert_renewal_failures_total{reason=%q} = %v; last failure %s during %s: %s", reason, n, st.LastFailureReason, st.LastFailureOp, st.LastFailure)
		}
	}
	for _, series := range []string{
		`pact_journal_enroll_total{result="ok"}`, `pact_journal_enroll_total{result="takeover"}`, `pact_journal_enroll_total{result="refused"}`,
		`pact_journal_auth_refused_total{reason="STALE_CERTIFICATE"}`,
	} {
		if v := s.journalMetric(t, series); v != 0 {
			t.Errorf("journal %s = %v, want 0: the agent enrolled or presented a replaced certificate", series, v)
		}
	}
	resp, err := s.h.AdminClient(t).ListAudit(context.Background(), &pactv1.ListAuditRequest{NodeId: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range resp.GetEntries() {
		if e.GetAction() == "takeover" || (e.GetAction() == "enroll" && e.GetDetail() != "SPIRE SVID") {
			t.Errorf("audit %v: the node enrolled with its hardware identity", e)
		}
	}

	for _, m := range moves {
		t.Logf("transition %-24s from the trigger to the new stream live: %8v (swap itself %8v; from %s to %s)",
			m.name, m.rec.Published.Sub(m.trigger).Round(time.Microsecond), m.rec.Duration().Round(time.Microsecond),
			m.rec.From.Identity().Source, m.rec.To.Identity().Source)
	}
}

// The standby is kept renewed over the SVID channel (at 2/3 of its life,
// for a fresh key): the journal records the new one and refuses the old,
// and the agent drops the old one at once, so when SPIRE then goes away it
// swaps to the new standby and never presents the replaced certificate.
func TestStandbyRenewedOverTheSVIDChannel(t *testing.T) {
	s := newCascadeSite(t, func(c *journal.Config) { c.CertLifetime = 30 * time.Minute })
	s.spire.SetSVID(s.svid(2 * time.Hour))
	s.spire.Start()
	r := runAgent(t, s.cfg)
	var first *identity.Identity
	eventually(t, "n1 streams on its SVID and holds a standby", func() bool {
		id, err := r.jp.Current(t.Context())
		if err != nil || !r.Status().Ready || s.node(t).GetStandbyCert().GetSerial() != id.Serial() {
			return false
		}
		first = id
		return true
	})
	// Past 2/3 of the standby's life plus the largest jitter, a minute at a
	// time so the journal's liveness loops keep up: each step waits until
	// every timer that fired has been set again.
	due := first.Chain[0].NotBefore.Add(first.NotAfter.Sub(first.Chain[0].NotBefore) * 2 / 3).Add(first.NotAfter.Sub(first.Chain[0].NotBefore) / 20)
	for steps := due.Sub(s.fc.Now())/time.Minute + 1; steps > 0; steps-- {
		advanceAndSettle(t, s.fc, time.Minute)
	}
	var renewed *identity.Identity
	eventually(t, "the standby is renewed", func() bool {
		id, err := r.jp.Current(t.Context())
		if err != nil || id.Serial() == first.Serial() || s.node(t).GetStandbyCert().GetSerial() != id.Serial() {
			return false
		}
		renewed = id
		return true
	})
	if renewed.Key == first.Key || identity.KeyMatches(renewed.Chain[0], first.Key) {
		t.Error("the renewed standby is for the old key")
	}
	if st := r.Status(); st.Source != "spire" || !st.Ready {
		t.Errorf("status %+v: the renewal disturbed the SVID channel", st)
	}
	// The journal no longer takes the old standby.
	old := first.TLSCertificate()
	_, err := pactv1.NewEnrollmentServiceClient(s.h.Dial(t, &old)).Ping(context.Background(), &pactv1.PingRequest{})
	if got := apierrReason(err); got != "STALE_CERTIFICATE" {
		t.Fatalf("Ping with the replaced standby: %v, want STALE_CERTIFICATE", err)
	}
	staleBefore := s.journalMetric(t, `pact_journal_auth_refused_total{reason="STALE_CERTIFICATE"}`)

	drops := s.h.J.StreamDrops("n1")
	mark := len(s.logs.String())
	s.spire.Stop()
	s.waitLog(t, mark, "SPIRE Workload API stream lost")
	s.fc.Advance(testLostGrace)
	eventually(t, "the agent falls back to the renewed standby", func() bool {
		st := r.Status()
		return st.Ready && st.Source == "journal" && st.Serial == renewed.Serial()
	})
	if d := s.h.J.StreamDrops("n1"); d != drops {
		t.Errorf("the journal held no stream of n1 %d times during the fall-back", d-drops)
	}
	if v := s.journalMetric(t, `pact_journal_auth_refused_total{reason="STALE_CERTIFICATE"}`); v != staleBefore {
		t.Errorf("the agent presented a replaced certificate: %v stale refusals, want %v", v, staleBefore)
	}
	if n := failures(t, r.Agent, ReasonCertReplaced); n != 0 {
		t.Errorf("%v cert_replaced failures", n)
	}
}

func apierrReason(err error) string { return string(apierr.FromError(err).Reason) }
