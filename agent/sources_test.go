package agent

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/identity"
)

// An SVID that SPIRE does not rotate (its server down) is given up
// ExpiryMargin before its end, and the agent moves to its journal-signed
// standby. Issue 38: it did so without a word. The agent warns once, with
// the SVID's expiry and what it falls back to, and `pact-agent status`
// (text and JSON) shows the give-up as the last failure, with its time,
// and per identity source.
func TestSVIDGivenUpNearExpiryIsLoggedAndShown(t *testing.T) {
	s := newCascadeSite(t)
	svid := s.svid(3 * time.Minute)
	s.spire.SetSVID(svid)
	s.spire.Start()
	r := runAgent(t, s.cfg)
	eventually(t, "n1 streams on its SVID and holds a standby", func() bool {
		st := r.Status()
		_, err := r.jp.Current(t.Context())
		return st.Ready && st.Source == "spire" && err == nil && st.StandbySerial != ""
	})
	standby, _ := r.jp.Current(t.Context())
	if st := r.Status(); st.LastFailureReason != "" {
		t.Fatalf("a failure before the test's: %s during %s: %s", st.LastFailureReason, st.LastFailureOp, st.LastFailure)
	}

	mark := len(s.logs.String())
	giveUp := svid.NotAfter.Add(-testExpiryMargin)
	s.fc.Advance(giveUp.Sub(s.fc.Now()))
	eventually(t, "the channel moves to the standby", func() bool {
		st := r.Status()
		return st.Ready && st.Source == "journal" && st.Serial == standby.Serial()
	})

	notAfter := svid.NotAfter.UTC().Format(time.RFC3339)
	var warned string
	for _, l := range strings.Split(s.logs.String()[mark:], "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "spire identity given up") {
			if warned != "" {
				t.Errorf("warned twice:\n%s\n%s", warned, l)
			}
			warned = l
		}
	}
	for _, want := range []string{svid.Serial(), "identity.not_after=" + notAfter, "fallback=\"journal serial " + standby.Serial(), "SPIRE has not rotated it"} {
		if !strings.Contains(warned, want) {
			t.Errorf("the warning does not say %q:\n%s", want, warned)
		}
	}

	st := r.Status()
	if st.LastFailureReason != ReasonIdentityGivenUp || st.LastFailureOp != "identity spire" || !st.LastFailureAt.Equal(giveUp) ||
		!strings.Contains(st.LastFailure, svid.Serial()) || !strings.Contains(st.LastFailure, notAfter) {
		t.Errorf("status last failure: %s during %s at %v: %s; want %s during identity spire at %v naming %s and %s",
			st.LastFailureReason, st.LastFailureOp, st.LastFailureAt, st.LastFailure, ReasonIdentityGivenUp, giveUp, svid.Serial(), notAfter)
	}
	bySource := map[string]SourceStatus{}
	for _, src := range st.Sources {
		bySource[src.Source] = src
	}
	if sp := bySource[string(identity.SourceSPIRE)]; sp.LastFailureSerial != svid.Serial() || !sp.LastFailureAt.Equal(giveUp) || sp.Serial != "" || sp.Unavailable == "" {
		t.Errorf("status's spire source: %+v; want the SVID %s given up at %v, nothing offered now", sp, svid.Serial(), giveUp)
	}
	if j := bySource[string(identity.SourceJournal)]; j.Serial != standby.Serial() || j.LastFailure != "" {
		t.Errorf("status's journal source: %+v; want the standby %s and no failure", j, standby.Serial())
	}

	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back Status
	if err := json.Unmarshal(raw, &back); err != nil || len(back.Sources) != len(st.Sources) || back.LastFailureReason != ReasonIdentityGivenUp {
		t.Errorf("status JSON does not carry the sources and the failure (%v):\n%s", err, raw)
	}
	var shown bytes.Buffer
	if err := PrintStatus(&shown, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"last failure:", ReasonIdentityGivenUp, "source spire:", "gave up " + svid.Serial(), "source journal:", standby.Serial()} {
		if !strings.Contains(shown.String(), want) {
			t.Errorf("pact-agent status does not show %q:\n%s", want, shown.String())
		}
	}
	t.Logf("the warning:\n%s\npact-agent status:\n%s", warned, shown.String())
}
