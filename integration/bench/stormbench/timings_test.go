package main

import (
	"testing"

	"github.com/pact-hpc/pact/journal/connlimit"
)

// The storm's timing figures are the journals' histograms over the storm
// alone (after minus before, summed over journals), with their quantiles
// interpolated within a bucket.
func TestTimingsDelta(t *testing.T) {
	const before = `pact_journal_handshake_seconds_bucket{port="grpc",le="0.01"} 10
pact_journal_handshake_seconds_bucket{port="grpc",le="0.1"} 10
pact_journal_handshake_seconds_bucket{port="grpc",le="+Inf"} 10
`
	const after1 = `# HELP pact_journal_handshake_seconds How long
pact_journal_handshake_seconds_bucket{port="grpc",le="0.01"} 10
pact_journal_handshake_seconds_bucket{port="grpc",le="0.1"} 110
pact_journal_handshake_seconds_bucket{port="grpc",le="+Inf"} 110
pact_journal_handshake_seconds_sum{port="grpc"} 5
pact_journal_first_call_seconds_bucket{port="raft",le="0.01"} 0
pact_journal_first_call_seconds_bucket{port="raft",le="+Inf"} 0
`
	// A second journal: 100 slot waits past every bound.
	const after2 = `pact_journal_handshake_slot_wait_seconds_bucket{le="15",port="grpc"} 0
pact_journal_handshake_slot_wait_seconds_bucket{le="+Inf",port="grpc"} 100
`
	b, a := histograms{}, histograms{}
	parseTimings(b, before)
	parseTimings(a, after1)
	parseTimings(a, after2)
	got := timingsDelta(b, a)
	hs := got["grpc"]["handshake"]
	if hs.Count != 100 || hs.P50ms != 55 || hs.P99ms != 99.1 {
		t.Errorf("handshake %+v, want 100 between 10 and 100 ms: p50 55, p99 99.1", hs)
	}
	if sw := got["grpc"]["slot_wait"]; sw.Count != 100 || sw.P50ms != 15000 {
		t.Errorf("slot wait %+v, want 100 past 15 s, reported at 15 s", sw)
	}
	if _, ok := got["raft"]; ok {
		t.Errorf("a port with nothing observed is reported: %+v", got["raft"])
	}
	if line := timingLine(got); line != "grpc: slot_wait p50 15000.0 ms p99 15000.0 ms (100), handshake p50 55.0 ms p99 99.1 ms (100)" {
		t.Errorf("timingLine = %q", line)
	}
}

// The floor's stubs serve their limiter's timings in a journal's text
// format; the storm reads them back as it reads a journal's.
func TestTimingsTextReadsBack(t *testing.T) {
	tm := connlimit.Timings{Handshake: connlimit.Histogram{Count: 4, Sum: 0.2, Buckets: map[float64]uint64{0.01: 0, 0.1: 4}}}
	h := histograms{}
	parseTimings(h, timingsText("grpc", tm))
	got := timingsDelta(histograms{}, h)
	if fig := got["grpc"]["handshake"]; fig.Count != 4 || fig.P50ms != 55 {
		t.Errorf("handshake read back as %+v, want 4 with p50 55 ms", fig)
	}
	if _, ok := got["grpc"]["slot_wait"]; ok {
		t.Errorf("an empty histogram read back as observed: %+v", got)
	}
}
