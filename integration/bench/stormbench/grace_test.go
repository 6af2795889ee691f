package main

import (
	"strings"
	"testing"
)

func TestRenewalGraceOff(t *testing.T) {
	for _, tc := range []struct {
		args, env string
		off       bool
	}{
		{"", "", false},
		{"--renewal-stream-grace=0", "", true},
		{"-renewal-stream-grace=0s", "", true},
		{"--renewal-stream-grace 0", "", true},
		{"--renewal-stream-grace=10m", "", false},
		{"--renewal-stream-grace 2m --raft-timeout 5s", "", false},
		{"--raft-timeout 0 --admission=false", "", false},
		{"", "PACT_RENEWAL_STREAM_GRACE=0", true},
		{"", "GOGC=200 PACT_RENEWAL_STREAM_GRACE=30s", false},
		{"--renewal-stream-grace=5m", "PACT_RENEWAL_STREAM_GRACE=0", false}, // the flag wins
	} {
		if got := renewalGraceOff(strings.Fields(tc.args), strings.Fields(tc.env)); got != tc.off {
			t.Errorf("renewalGraceOff(%q, %q) = %v, want %v", tc.args, tc.env, got, tc.off)
		}
	}
}

func TestRenewEndsFailsOnADropUnlessTheGraceIsOff(t *testing.T) {
	ends := func(handovers float64, drops map[string]float64) streamEnds {
		return streamEnds{drops: drops, handovers: handovers}
	}
	k := &checks{}
	k.renewEnds(ends(0, map[string]float64{"client_gone": 3}), ends(100, map[string]float64{"client_gone": 3}), false)
	if !k.pass() || k.renewHandovers != 100 || k.renewDrops != 0 {
		t.Fatalf("100 handovers and no drop: pass %v (%s), %v handovers, %v drops", k.pass(), k.reason(), k.renewHandovers, k.renewDrops)
	}
	k = &checks{}
	k.renewEnds(ends(0, map[string]float64{"client_gone": 3}), ends(99, map[string]float64{"client_gone": 4, "superseded": 2}), false)
	if k.pass() {
		t.Fatal("dropped streams passed with the grace on")
	}
	if k.renewDrops != 3 || k.renewDropsBy["client_gone"] != 1 || k.renewDropsBy["superseded"] != 2 {
		t.Fatalf("drops %v by reason %v, want 3: client_gone 1, superseded 2", k.renewDrops, k.renewDropsBy)
	}
	k = &checks{}
	k.renewEnds(ends(0, map[string]float64{}), ends(0, map[string]float64{"superseded": 100}), true)
	if !k.pass() {
		t.Fatalf("drops with the grace off failed: %s", k.reason())
	}
}

func TestMetricByLabel(t *testing.T) {
	text := `# HELP pact_journal_stream_drops_total Subscribe streams ...
# TYPE pact_journal_stream_drops_total counter
pact_journal_stream_drops_total{reason="client_gone"} 7
pact_journal_stream_drops_total{reason="superseded"} 2
pact_journal_stream_drops_total_other{reason="client_gone"} 100
pact_journal_stream_handovers_total 5
`
	got := metricByLabel(text, "pact_journal_stream_drops_total", "reason")
	if len(got) != 2 || got["client_gone"] != 7 || got["superseded"] != 2 {
		t.Fatalf("metricByLabel = %v", got)
	}
}
