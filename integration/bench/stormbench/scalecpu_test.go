package main

import "testing"

func TestParseSizes(t *testing.T) {
	if got, err := parseSizes("1000, 3000,10000"); err != nil || len(got) != 3 || got[2] != 10000 {
		t.Fatalf("parseSizes = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "3000,1000", "1000,1000", "1k"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) accepted", bad)
		}
	}
}

// The cost table's growth is each size's journal CPU per agent over the
// smallest size's; flat means pact's stays within 1.2 times it.
func TestSummarizeScaleCPU(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	line := func(cpu, renew float64) runLine {
		return runLine{Bench: "storm", Pass: true, JournalCPU: cpu, RenewJournalCPU: f(renew), Seconds: 1}
	}
	rows := []scaleCPURow{
		{Agents: 1000, pact: line(2.0, 1.0), floor: line(1.5, 0.8)},
		{Agents: 3000, pact: line(2.2, 1.1), floor: line(1.5, 0.8)},
	}
	sum := summarizeScaleCPU(rows)
	if !sum.Pass || !sum.Flat {
		t.Fatalf("pass %v flat %v, want both: %+v", sum.Pass, sum.Flat, sum)
	}
	if g := sum.Sizes[1].PactGrowth; g != 1.1 {
		t.Errorf("pact growth %v, want 1.1", g)
	}
	if r := sum.Sizes[0].JournalCPUVsFloor; r != 1.333 {
		t.Errorf("pact/floor %v, want 1.333", r)
	}
	rows[1].pact.RenewJournalCPU = f(1.3) // 1.3 times the renewal at 1,000
	if sum := summarizeScaleCPU(rows); sum.Flat {
		t.Error("a renewal cost grown 1.3 times is called flat")
	}
	rows[1].floor.Pass = false
	if sum := summarizeScaleCPU(rows); sum.Pass {
		t.Error("a size whose floor run failed passes")
	}
}
