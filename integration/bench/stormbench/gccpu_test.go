package main

import (
	"runtime"
	"testing"
	"time"
)

// TestSelfGCCPUGrowsWithCollections: the reading is the collector's work,
// not a constant (a heap of pointers collected ten times costs it CPU).
func TestSelfGCCPUGrowsWithCollections(t *testing.T) {
	heap := make([]*[64]byte, 1<<18)
	for i := range heap {
		heap[i] = new([64]byte)
	}
	before := selfGCCPU()
	for range 10 {
		runtime.GC()
	}
	runtime.KeepAlive(heap)
	if after := selfGCCPU(); after <= before {
		t.Fatalf("GC CPU %v after ten collections, %v before", after, before)
	}
}

func TestGenGCShare(t *testing.T) {
	for _, tc := range []struct {
		cpu, gc time.Duration
		want    float64
	}{
		{0, 0, 0},
		{time.Second, 0, 0},
		{4 * time.Second, time.Second, 0.25},
		{time.Second, 2 * time.Second, 1}, // an estimate past the measured CPU is capped
	} {
		r := &stormResult{genCPU: tc.cpu, genGC: tc.gc}
		if got := r.genGCShare(); got != tc.want {
			t.Errorf("genGCShare(cpu %v, gc %v) = %v, want %v", tc.cpu, tc.gc, got, tc.want)
		}
	}
}
