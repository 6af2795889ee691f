package main

import (
	"runtime/metrics"
	"time"
)

// The load generator stands in for thousands of nodes in a few processes,
// so its garbage collector does work no real node does at that scale. When
// it collects too much (near its memory limit, the GC takes up to half its
// CPU and stalls the agents' goroutines with assists) the agents' side of
// every handshake slows down, their calls pass their deadlines, and the
// storm looks like a slow journal. loadgen_gc_cpu_share says how much of
// the load generator's CPU went to its collector during a storm, so a run
// can tell the two apart.

// gcCPUMetric is the runtime's estimate of the CPU its collector used
// (background marking, assists, pauses), since the process started.
const gcCPUMetric = "/cpu/classes/gc/total:cpu-seconds"

// selfGCCPU is this process's garbage-collector CPU time so far.
func selfGCCPU() time.Duration {
	s := []metrics.Sample{{Name: gcCPUMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(s[0].Value.Float64() * float64(time.Second))
}

// gcShareWarning is the load generator's GC share past which the report
// warns that the load generator, not the journals, may have set the pace.
const gcShareWarning = 0.25

// genGCShare is the share of the load generator's CPU its collectors used
// during the storm (0 when unknown).
func (r *stormResult) genGCShare() float64 {
	if r.genCPU <= 0 {
		return 0
	}
	return min(float64(r.genGC)/float64(r.genCPU), 1)
}
