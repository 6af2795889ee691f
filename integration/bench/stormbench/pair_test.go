package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// Canned JSON lines, trimmed to what pair reads plus a few fields it must
// ignore, in the shapes storm and storm -floor print.
const (
	pactLine1  = `{"bench":"storm","pass":true,"reason":"ok","agents":10000,"seconds_to_all_streaming":30,"journal_cpu_ms_per_agent":3.0,"ratio_to_ceiling":0.33,"renew_seconds":20,"journal_cpu_ms_per_renew":2.4,"renew_ratio_to_ceiling":0.34,"targets_met":{"failed_0":true}}`
	floorLine1 = `{"bench":"storm-floor","floor_client":"pact","pass":true,"reason":"ok","agents":10000,"seconds_to_all_streaming":24,"journal_cpu_ms_per_agent":2.0,"ratio_to_ceiling":0.4,"renew_seconds":19,"journal_cpu_ms_per_renew":2.0,"renew_ratio_to_ceiling":0.39}`
	pactLine2  = `{"bench":"storm","pass":true,"reason":"ok","agents":10000,"seconds_to_all_streaming":25,"journal_cpu_ms_per_agent":2.2,"ratio_to_ceiling":0.38,"renew_seconds":20,"journal_cpu_ms_per_renew":2.2,"renew_ratio_to_ceiling":0.3}`
	floorLine2 = `{"bench":"storm-floor","pass":true,"reason":"ok","agents":10000,"seconds_to_all_streaming":25,"journal_cpu_ms_per_agent":2.0,"ratio_to_ceiling":0.38,"renew_seconds":18,"journal_cpu_ms_per_renew":2.0,"renew_ratio_to_ceiling":0.4}`
	pactLine3  = `{"bench":"storm","pass":true,"reason":"ok","agents":10000,"seconds_to_all_streaming":20,"journal_cpu_ms_per_agent":2.1,"ratio_to_ceiling":0.45,"renew_seconds":16,"journal_cpu_ms_per_renew":2.0,"renew_ratio_to_ceiling":0.42}`
	floorLine3 = `{"bench":"storm-floor","pass":true,"reason":"ok","agents":10000,"seconds_to_all_streaming":20,"journal_cpu_ms_per_agent":2.0,"ratio_to_ceiling":0.45,"renew_seconds":16,"journal_cpu_ms_per_renew":2.0,"renew_ratio_to_ceiling":0.42}`
	// -renew=false: no renewal figures on either side.
	pactNoRenew  = `{"bench":"storm","pass":true,"reason":"ok","agents":200,"seconds_to_all_streaming":2,"journal_cpu_ms_per_agent":4,"ratio_to_ceiling":0.2}`
	floorNoRenew = `{"bench":"storm-floor","pass":true,"reason":"ok","agents":200,"seconds_to_all_streaming":1,"journal_cpu_ms_per_agent":2,"ratio_to_ceiling":0.4}`
	// A storm whose final check failed still prints its line.
	pactFailed = `{"bench":"storm","pass":false,"reason":"enroll storm: 3 agents failed or were abandoned","agents":10000,"seconds_to_all_streaming":600,"journal_cpu_ms_per_agent":9,"ratio_to_ceiling":0.01}`
)

func canned(t *testing.T, lines ...string) []pairRun {
	t.Helper()
	var runs []pairRun
	for i := 0; i+1 < len(lines); i += 2 {
		var r pairRun
		if err := json.Unmarshal([]byte(lines[i]), &r.pact); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(lines[i+1]), &r.floor); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	return runs
}

func ptr(v float64) *float64 { return &v }

func TestSummarizePairs(t *testing.T) {
	for _, tc := range []struct {
		name        string
		lines       []string
		wantPass    bool
		wantReason  string // a part of it
		wantPassed  int
		wantPerPair []pairFigures
		want        map[string]*spread // by JSON name; nil: absent
		wantTargets map[string]bool
	}{
		{
			name:       "three pairs",
			lines:      []string{pactLine1, floorLine1, pactLine2, floorLine2, pactLine3, floorLine3},
			wantPass:   true,
			wantPassed: 3,
			wantPerPair: []pairFigures{
				// 24/30 s, 3.0/2.0 ms; renewal 19/20 s, 2.4/2.0 ms.
				{Pair: 1, Pass: true, ThroughputVsFloor: 0.8, JournalCPUVsFloor: 1.5, RatioToCeiling: 0.33, FloorRatioToCeiling: 0.4,
					RenewThroughputVsFloor: ptr(0.95), RenewJournalCPUVsFloor: ptr(1.2), RenewRatioToCeiling: ptr(0.34), FloorRenewRatioToCeiling: ptr(0.39)},
				{Pair: 2, Pass: true, ThroughputVsFloor: 1, JournalCPUVsFloor: 1.1, RatioToCeiling: 0.38, FloorRatioToCeiling: 0.38,
					RenewThroughputVsFloor: ptr(0.9), RenewJournalCPUVsFloor: ptr(1.1), RenewRatioToCeiling: ptr(0.3), FloorRenewRatioToCeiling: ptr(0.4)},
				{Pair: 3, Pass: true, ThroughputVsFloor: 1, JournalCPUVsFloor: 1.05, RatioToCeiling: 0.45, FloorRatioToCeiling: 0.45,
					RenewThroughputVsFloor: ptr(1), RenewJournalCPUVsFloor: ptr(1), RenewRatioToCeiling: ptr(0.42), FloorRenewRatioToCeiling: ptr(0.42)},
			},
			want: map[string]*spread{
				"throughput_vs_floor":          {0.8, 1, 1},
				"journal_cpu_vs_floor":         {1.05, 1.1, 1.5},
				"ratio_to_ceiling":             {0.33, 0.38, 0.45},
				"floor_ratio_to_ceiling":       {0.38, 0.4, 0.45},
				"renew_throughput_vs_floor":    {0.9, 0.95, 1},
				"renew_journal_cpu_vs_floor":   {1, 1.1, 1.2},
				"renew_ratio_to_ceiling":       {0.3, 0.34, 0.42},
				"floor_renew_ratio_to_ceiling": {0.39, 0.4, 0.42},
			},
			wantTargets: map[string]bool{"throughput_ge_0.95_floor": true, "journal_cpu_le_1.15_floor": true,
				"renew_throughput_ge_0.95_floor": true, "renew_journal_cpu_le_1.15_floor": true},
		},
		{
			name:       "an even count takes the mean of the middle two; targets missed",
			lines:      []string{pactLine1, floorLine1, pactLine2, floorLine2},
			wantPass:   true,
			wantPassed: 2,
			want: map[string]*spread{
				"throughput_vs_floor":        {0.8, 0.9, 1},
				"journal_cpu_vs_floor":       {1.1, 1.3, 1.5},
				"renew_throughput_vs_floor":  {0.9, 0.925, 0.95},
				"renew_journal_cpu_vs_floor": {1.1, 1.15, 1.2},
			},
			wantTargets: map[string]bool{"throughput_ge_0.95_floor": false, "journal_cpu_le_1.15_floor": false,
				"renew_throughput_ge_0.95_floor": false, "renew_journal_cpu_le_1.15_floor": true},
		},
		{
			name:       "no renewal: no renewal figures or targets",
			lines:      []string{pactNoRenew, floorNoRenew},
			wantPass:   true,
			wantPassed: 1,
			wantPerPair: []pairFigures{
				{Pair: 1, Pass: true, ThroughputVsFloor: 0.5, JournalCPUVsFloor: 2, RatioToCeiling: 0.2, FloorRatioToCeiling: 0.4},
			},
			want: map[string]*spread{
				"throughput_vs_floor":        {0.5, 0.5, 0.5},
				"journal_cpu_vs_floor":       {2, 2, 2},
				"renew_throughput_vs_floor":  nil,
				"renew_journal_cpu_vs_floor": nil,
			},
			wantTargets: map[string]bool{"throughput_ge_0.95_floor": false, "journal_cpu_le_1.15_floor": false},
		},
		{
			name:       "a failed run fails the pair and is left out of the spreads",
			lines:      []string{pactFailed, floorLine1, pactLine3, floorLine3},
			wantReason: "pair 1: storm: enroll storm: 3 agents failed",
			wantPassed: 1,
			want: map[string]*spread{
				"throughput_vs_floor":       {1, 1, 1},
				"renew_throughput_vs_floor": {1, 1, 1},
			},
			wantTargets: map[string]bool{"throughput_ge_0.95_floor": true, "journal_cpu_le_1.15_floor": true,
				"renew_throughput_ge_0.95_floor": true, "renew_journal_cpu_le_1.15_floor": true},
		},
		{
			name:       "every pair failed: no spreads, no targets",
			lines:      []string{pactFailed, floorLine1},
			wantReason: "3 agents failed",
			want:       map[string]*spread{"throughput_vs_floor": nil, "journal_cpu_vs_floor": nil},
		},
		{
			name:       "different agent counts are no pair",
			lines:      []string{pactNoRenew, floorLine1},
			wantReason: "pair 1: 200 agents in the storm, 10000 in the floor",
			want:       map[string]*spread{"throughput_vs_floor": nil},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum := summarizePairs(canned(t, tc.lines...))
			if sum.Pass != tc.wantPass || !strings.Contains(sum.Reason, tc.wantReason) {
				t.Errorf("pass %v (%s), want %v (%q)", sum.Pass, sum.Reason, tc.wantPass, tc.wantReason)
			}
			if sum.PairsPassed != tc.wantPassed || sum.Pairs != len(tc.lines)/2 {
				t.Errorf("%d of %d pairs passed, want %d of %d", sum.PairsPassed, sum.Pairs, tc.wantPassed, len(tc.lines)/2)
			}
			if tc.wantPerPair != nil && !reflect.DeepEqual(sum.PerPair, tc.wantPerPair) {
				t.Errorf("per pair:\n got %s\nwant %s", asJSON(t, sum.PerPair), asJSON(t, tc.wantPerPair))
			}
			// Read the spreads back from the JSON line, by the names the
			// docs give them.
			var line map[string]json.RawMessage
			if err := json.Unmarshal([]byte(asJSON(t, sum)), &line); err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.want {
				raw, ok := line[name]
				if want == nil {
					if ok {
						t.Errorf("%s: %s, want none", name, raw)
					}
					continue
				}
				var got spread
				if err := json.Unmarshal(raw, &got); err != nil || got != *want {
					t.Errorf("%s: %s (%v), want %+v", name, raw, err, *want)
				}
			}
			if !reflect.DeepEqual(sum.Targets, tc.wantTargets) && (len(sum.Targets) != 0 || len(tc.wantTargets) != 0) {
				t.Errorf("targets %v, want %v", sum.Targets, tc.wantTargets)
			}
		})
	}
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLastJSONObject(t *testing.T) {
	out := "table\n{\"bench\":\"storm\",\"pass\":false}\n\nfinal check: FAIL\n{\"bench\":\"storm\",\"pass\":true}\ntrailing text\n"
	if got := lastJSONObject([]byte(out)); got != `{"bench":"storm","pass":true}` {
		t.Errorf("got %q", got)
	}
	if got := lastJSONObject([]byte("no line\n")); got != "" {
		t.Errorf("got %q, want none", got)
	}
}

// runStorms runs each storm as a child with its own arguments and then
// its flags, reads each JSON line into its storm's line, names a failure
// by the round and the storm, and stops at the first.
func TestRunStormsReadsEachJSONLine(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to stand in for a child")
	}
	c := &childRunner{self: sh}
	// sh -c SCRIPT NAME: the flags come in as $0.
	printLine := []string{"-c", `printf 'progress\n{"bench":"%s","pass":true}\n' "$0"`}
	var a, b, failed, after runLine
	var out bytes.Buffer
	flags := func(name string) []string { return []string{name + "-flags"} }
	if err := c.runStorms("round 1:", "round 1,", &out, flags,
		childStorm{"a", printLine, &a}, childStorm{"b", printLine, &b}); err != nil {
		t.Fatal(err)
	}
	if a.Bench != "a-flags" || !a.Pass || b.Bench != "b-flags" {
		t.Errorf("lines %+v and %+v, want each storm's own", a, b)
	}
	if strings.Count(out.String(), "progress\n") != 2 {
		t.Errorf("output %q, want each child's passed on", out.String())
	}
	err = c.runStorms("round 2:", "round 2,", &out, flags,
		childStorm{"failed", []string{"-c", "echo no line; exit 3"}, &failed}, childStorm{"after", printLine, &after})
	if err == nil || err.Error() != "round 2, failed storm: printed no JSON line (exit status 3)" {
		t.Errorf("error %v", err)
	}
	if after.Bench != "" {
		t.Errorf("a storm after the failed one ran: %+v", after)
	}
}

func TestPairFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
		want    []string // the flags one run gets, for pair 2's floor run
	}{
		{args: []string{"-agents", "200", "-pairs", "2", "-wait-idle", "30s", "-renew=false"},
			want: []string{"-agents=200", "-renew=false", "-wait-idle=30s"}},
		{args: []string{"-dir", "/d", "-journal-args", "-admission=false -x"},
			want: []string{"-journal-args=-admission=false -x", "-dir=/d/pair2-floor"}},
		{args: []string{"-floor"}, wantErr: "drop -floor"},
		{args: []string{"-floor-client", "bare"}, wantErr: "drop -floor"},
		{args: []string{"-pairs", "0"}, wantErr: "-pairs"},
		{args: []string{"-agents", "0"}, wantErr: "-agents"},
	} {
		var f stormFlags
		fs := newStormFlagSet("t", &f)
		pairs := fs.Int("pairs", 3, "")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := checkPairFlags(&f, fs, *pairs)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		// The flags must parse back to the same storm flags.
		got := forwardedFlags(fs, f.dir, "pair2-floor")
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: forwarded %q, want %q", tc.args, got, tc.want)
		}
		var back stormFlags
		if err := newStormFlagSet("back", &back).Parse(got); err != nil {
			t.Errorf("%v: forwarded flags do not parse: %v", tc.args, err)
		}
		f.dir = back.dir
		if !reflect.DeepEqual(back, f) {
			t.Errorf("%v: forwarded flags parse to %+v, want %+v", tc.args, back, f)
		}
	}
}

// The old floor (stubs that keep nothing) runs beside the replicating one:
// pact is set against both, the targets are judged on the replicating
// floor alone, and a failed old-floor run fails its pair.
func TestSummarizePairsWithOldFloor(t *testing.T) {
	runs := canned(t, pactLine1, floorLine1)
	var old runLine
	if err := json.Unmarshal([]byte(`{"bench":"storm-floor","pass":true,"reason":"ok","agents":10000,"seconds_to_all_streaming":15,"journal_cpu_ms_per_agent":1.5,"ratio_to_ceiling":0.6,"renew_seconds":10,"journal_cpu_ms_per_renew":1.2,"renew_ratio_to_ceiling":0.7}`), &old); err != nil {
		t.Fatal(err)
	}
	runs[0].oldFloor = &old
	sum := summarizePairs(runs)
	if !sum.Pass {
		t.Fatalf("pair failed: %s", sum.Reason)
	}
	if got := sum.ThroughputVsOldFloor.Median; got != 0.5 {
		t.Errorf("throughput vs old floor %v, want 0.5 (15 s over 30 s)", got)
	}
	if got := sum.JournalCPUVsOldFloor.Median; got != 2 {
		t.Errorf("journal CPU vs old floor %v, want 2", got)
	}
	if got := sum.RenewJournalCPUVsOldFloor.Median; got != 2 {
		t.Errorf("renew journal CPU vs old floor %v, want 2", got)
	}
	if got := sum.JournalCPUVsFloor.Median; got != 1.5 {
		t.Errorf("journal CPU vs the replicating floor %v, want 1.5", got)
	}
	if _, ok := sum.Targets["throughput_vs_old_floor"]; ok || len(sum.Targets) != 4 {
		t.Errorf("targets %v, want the four against the replicating floor", sum.Targets)
	}
	old.Pass, old.Reason = false, "enroll storm: 1 agents failed or were abandoned"
	if sum := summarizePairs(runs); sum.Pass || sum.PairsPassed != 0 {
		t.Errorf("a failed old floor: pass %v, %d pairs passed", sum.Pass, sum.PairsPassed)
	}
}
