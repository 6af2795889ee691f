package journal_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pact-hpc/pact/journal/v1rpc"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// streamEnds checks a journal's stream handovers and drops by reason.
func streamEnds(t testing.TB, reg prometheus.Gatherer, step string, handovers float64, drops map[string]float64) {
	t.Helper()
	if got := must(t, reg, "pact_journal_stream_handovers_total"); got != handovers {
		t.Errorf("after %s: handovers = %v, want %v", step, got, handovers)
	}
	for _, r := range v1rpc.DropReasons {
		if got := must(t, reg, "pact_journal_stream_drops_total", "reason", r); got != drops[r] {
			t.Errorf("after %s: drops{reason=%q} = %v, want %v", step, r, got, drops[r])
		}
	}
}

// A SPIRE site's normal rotation is no drop: a stream replaced by the same
// node's next stream is handed over, whatever identity either presents —
// the journal certificate replaced by an SVID (kept as the standby), an
// SVID SPIRE rotated, the SVID replaced by the journal standby and back.
// Only the node's last stream ending, the node left with none, is a drop.
func TestSPIREStreamMovesAreHandovers(t *testing.T) {
	e := newSPIREEnv(t)
	reg := e.h.J.MetricsRegistry()
	closeOld := func(w *watch) {
		t.Helper()
		w.cancel()
		<-w.done
		eventually(t, "the journal to hold n1's new stream only", func() bool { return e.h.J.OpenStreams("n1") == 1 })
	}
	a := e.activate(t, "n1", "SN1", mac1)
	wj := e.subscribe(t, a)

	// The journal certificate → an SVID (the certificate becomes the
	// standby).
	s1 := e.svidFor(t, agentID("n1"))
	w1 := e.subscribe(t, s1.agent("n1"))
	e.checkSVIDActive(t, "n1", s1, "renew", "SPIRE SVID replaces journal certificate "+a.serial+" (kept as standby)")
	closeOld(wj)
	streamEnds(t, reg, "the journal certificate replaced by an SVID", 1, nil)

	// SPIRE rotates the SVID.
	e.tick(t, 30*time.Minute)
	now := e.fc.Now()
	s2 := e.ca.issue(t, now.Add(-time.Minute), now.Add(time.Hour), agentID("n1"))
	w2 := e.subscribe(t, s2.agent("n1"))
	e.checkSVIDActive(t, "n1", s2, "renew", "SPIRE rotation")
	closeOld(w1)
	streamEnds(t, reg, "an SVID rotation", 2, nil)

	// SPIRE stops serving the node: the agent swaps to its standby.
	ws := e.subscribe(t, a)
	if n := e.node(t, "n1"); n.GetCert().GetSerial() != a.serial {
		t.Fatalf("node %v: want the standby %s current", n, a.serial)
	}
	closeOld(w2)
	streamEnds(t, reg, "the SVID replaced by the journal standby", 3, nil)

	// SPIRE is back: the agent swaps to a new SVID.
	e.tick(t, time.Minute)
	now = e.fc.Now()
	s3 := e.ca.issue(t, now.Add(-time.Minute), now.Add(time.Hour), agentID("n1"))
	w3 := e.subscribe(t, s3.agent("n1"))
	closeOld(ws)
	streamEnds(t, reg, "the standby replaced by an SVID", 4, nil)

	// The node's last stream ends: the node has none, a drop.
	w3.close(t, e.env)
	streamEnds(t, reg, "the node's last stream closed", 4, map[string]float64{"client_gone": 1})
}

// The node's next stream may be at another journal: this one holds no
// other stream of the node then, but its registry names the rotated SVID
// (a stream of it recorded it, wherever that is), so the old stream's end
// is a handover. Here the new stream reaches this journal but has not
// streamed yet: to the old stream, as good as elsewhere.
func TestSVIDRotationStreamedElsewhereIsAHandover(t *testing.T) {
	e := newSPIREEnv(t)
	reg := e.h.J.MetricsRegistry()
	e.register(t, "n1", "SN1", mac1)
	s1 := e.svidFor(t, agentID("n1"))
	w1 := e.subscribe(t, s1.agent("n1"))

	e.tick(t, 30*time.Minute)
	now := e.fc.Now()
	s2 := e.ca.issue(t, now.Add(-time.Minute), now.Add(time.Hour), agentID("n1"))
	arrived, clear := e.h.J.HoldFirstState(t, s2.serial())
	defer clear()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := e.agentClient(t, s2.agent("n1")).Subscribe(ctx, &pactv1.SubscribeRequest{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(pollTimeout):
		t.Fatal("the rotated SVID's stream never reached the journal")
	}
	if got := e.node(t, "n1").GetCert().GetSerial(); got != s2.serial() {
		t.Fatalf("recorded serial %s, want the rotated SVID %s", got, s2.serial())
	}
	w1.cancel()
	<-w1.done
	eventually(t, "the old stream to end", func() bool { return e.h.J.OpenStreams("n1") == 1 })
	streamEnds(t, reg, "an SVID rotation streamed elsewhere", 1, nil)
}
