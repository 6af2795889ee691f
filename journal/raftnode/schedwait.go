package raftnode

import (
	"math"
	"runtime/metrics"
	"time"
)

// schedLatencies is the Go runtime's histogram of how long goroutines
// waited, runnable, before they ran.
const schedLatencies = "/sched/latencies:seconds"

// schedWatch tells how long this process's runnable goroutines have been
// kept waiting by its own scheduler. The write watchdog asks it because a
// probe of the disk run by this process's goroutines cannot answer while
// they are starved, however fast the disk: at 30,000 agents stopping at
// once a journal's probe went unanswered for 2.5 s while another process
// synced a file on the same disk in 15 ms (docs/benchmarks.md).
type schedWatch struct {
	hist func() *metrics.Float64Histogram // runtimeSchedLatencies; a test's
	prev []uint64                         // bucket counts at the previous look
}

// newSchedWatch measures from now on.
func newSchedWatch() *schedWatch {
	s := &schedWatch{hist: runtimeSchedLatencies}
	s.longestWait()
	return s
}

// runtimeSchedLatencies reads the runtime's histogram (nil: this runtime
// does not have it).
func runtimeSchedLatencies() *metrics.Float64Histogram {
	sample := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return sample[0].Value.Float64Histogram()
}

// longestWait is the longest any goroutine waited to run since the
// previous call, to the lower bound of its histogram bucket (0: none
// waited, or the runtime does not say).
func (s *schedWatch) longestWait() time.Duration {
	h := s.hist()
	if h == nil {
		return 0
	}
	var longest time.Duration
	for i, n := range h.Counts {
		var before uint64
		if i < len(s.prev) {
			before = s.prev[i]
		}
		if n > before && i < len(h.Buckets) {
			if lo := h.Buckets[i]; lo > 0 && !math.IsInf(lo, 1) {
				longest = max(longest, time.Duration(lo*float64(time.Second)))
			}
		}
	}
	s.prev = append(s.prev[:0], h.Counts...)
	return longest
}
