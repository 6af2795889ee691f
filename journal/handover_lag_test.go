package journal_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// In a renewal storm an agent renews through one journal, streams there
// with its new certificate, and closes its old channel on another journal
// whose copy of the registry has not applied the renewal yet. That old
// stream is a handover, not a drop: the journal confirms its copy with the
// leader before it counts one.
func TestHandoverSeenByAJournalThatLagsTheRenewal(t *testing.T) {
	c := startCluster(t, 3, func(cfg *journal.Config) { cfg.RenewalStreamGrace = 10 * time.Minute })
	leader := c.Nodes[c.Leader(t)]
	lag := c.Nodes[(c.Leader(t)+1)%3]
	reg := lag.J.MetricsRegistry()

	leader.Register(t, "n1", "SN1", mac(1))
	key := journaltest.NewKey(t)
	first, err := leader.Enroll(t, key, "SN1", mac(1))
	if err != nil {
		t.Fatal(err)
	}
	firstCert := key.TLSCert(first.GetCertChainDer())
	inspectOn(t, lag, "n1")
	subscribe := func(h *journaltest.Harness, cert *tls.Certificate) context.CancelFunc {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		st, err := pactv1.NewEnrollmentServiceClient(h.Dial(t, cert)).Subscribe(ctx, &pactv1.SubscribeRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("first state: %v", err)
		}
		return cancel
	}
	closeOld := subscribe(lag, &firstCert)

	release := lag.J.HoldApply(t)
	defer release()
	newKey := journaltest.NewKey(t)
	renewed, err := pactv1.NewEnrollmentServiceClient(leader.Dial(t, &firstCert)).RenewCert(context.Background(),
		&pactv1.RenewCertRequest{CurrentSerial: first.GetSerial(), CsrDer: newKey.CSR})
	if err != nil {
		t.Fatal(err)
	}
	newCert := newKey.TLSCert(renewed.GetCertChainDer())
	subscribe(leader, &newCert)
	// The agent closes its old channel; the lagging journal has not
	// applied the renewal, so its copy still names the old certificate.
	waiting := lag.J.WaitingApplied(t)
	closeOld()
	drops := func() (n float64) {
		for _, r := range dropReasons {
			n += must(t, reg, "pact_journal_stream_drops_total", "reason", r)
		}
		return n
	}
	// The old stream confirms the copy with the leader before it counts a
	// drop: it waits for the renewal to be applied here. (Without the
	// barrier it counts the drop at once and never waits.)
	polltest.Until(t, pollTimeout, pollEvery, func() bool { return waiting() > 0 || drops() != 0 },
		"the old stream neither waited for this journal's copy nor counted a drop")
	if n := drops(); n != 0 {
		t.Fatalf("drops = %v while this journal's copy lags the renewal, want 0", n)
	}
	release()
	eventually(t, "the old stream to end", func() bool { return lag.J.OpenStreams("n1") == 0 })
	if got := must(t, reg, "pact_journal_stream_handovers_total"); got != 1 {
		t.Errorf("handovers = %v, want 1", got)
	}
	if n := drops(); n != 0 {
		t.Errorf("drops = %v, want 0", n)
	}
}
