package raftnode

import (
	"math"
	"runtime/metrics"
	"testing"
	"time"
)

// longestWait reports the lower bound of the highest bucket whose count
// grew since the previous look, and nothing when no bucket grew (a
// journal that was starved once is not starved forever).
func TestSchedWatchLongestWait(t *testing.T) {
	buckets := []float64{math.Inf(-1), 0, 1e-6, 1e-3, 0.5, 2, math.Inf(1)}
	var counts []uint64
	s := &schedWatch{hist: func() *metrics.Float64Histogram {
		return &metrics.Float64Histogram{Counts: append([]uint64(nil), counts...), Buckets: buckets}
	}}
	steps := []struct {
		name   string
		counts []uint64
		want   time.Duration
	}{
		{"first look, microsecond waits", []uint64{0, 3, 10, 0, 0, 0}, time.Microsecond},
		{"nothing new", []uint64{0, 3, 10, 0, 0, 0}, 0},
		{"a wait of half a second and some short ones", []uint64{0, 4, 20, 0, 1, 0}, 500 * time.Millisecond},
		{"a wait over two seconds", []uint64{0, 4, 21, 0, 1, 1}, 2 * time.Second},
		{"only short waits since", []uint64{0, 9, 21, 0, 1, 1}, 0},
	}
	for _, st := range steps {
		counts = st.counts
		if got := s.longestWait(); got != st.want {
			t.Errorf("%s: longestWait = %v, want %v", st.name, got, st.want)
		}
	}
}

// A runtime that does not have the metric says nothing: the watchdog
// goes by its probe alone.
func TestSchedWatchWithoutTheMetric(t *testing.T) {
	s := &schedWatch{hist: func() *metrics.Float64Histogram { return nil }}
	if got := s.longestWait(); got != 0 {
		t.Errorf("longestWait = %v without the metric, want 0", got)
	}
}

// This runtime has the histogram the watchdog reads.
func TestSchedLatenciesIsARuntimeMetric(t *testing.T) {
	h := runtimeSchedLatencies()
	if h == nil || len(h.Buckets) != len(h.Counts)+1 {
		t.Fatalf("the runtime's %s: %v", schedLatencies, h)
	}
}
