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
	k := &checks{}
	k.renewEnds([2]float64{3, 0}, [2]float64{3, 100}, false)
	if !k.pass() {
		t.Fatalf("100 handovers and no drop failed: %s", k.reason())
	}
	k = &checks{}
	k.renewEnds([2]float64{3, 0}, [2]float64{4, 99}, false)
	if k.pass() {
		t.Fatal("a dropped stream passed with the grace on")
	}
	k = &checks{}
	k.renewEnds([2]float64{0, 0}, [2]float64{100, 0}, true)
	if !k.pass() {
		t.Fatalf("drops with the grace off failed: %s", k.reason())
	}
}
