package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// heapFigures are a load-generator process's live heap (after a GC) and
// goroutines: before the enrollment storm (base) and once every agent of
// it streams, so what the agents hold is the difference.
type heapFigures struct {
	BaseHeap       int64 `json:"base_heap,omitempty"`
	BaseGoroutines int   `json:"base_goroutines,omitempty"`
	Heap           int64 `json:"heap,omitempty"`
	Goroutines     int   `json:"goroutines,omitempty"`
}

func (h *heapFigures) add(o heapFigures) {
	h.BaseHeap += o.BaseHeap
	h.BaseGoroutines += o.BaseGoroutines
	h.Heap += o.Heap
	h.Goroutines += o.Goroutines
}

// perAgent is the live heap (bytes) and goroutines each of n agents holds.
func (h heapFigures) perAgent(n int) (heap, goroutines float64) {
	if n <= 0 || h.Heap == 0 {
		return 0, 0
	}
	return float64(h.Heap-h.BaseHeap) / float64(n), float64(h.Goroutines-h.BaseGoroutines) / float64(n)
}

// liveHeap collects the garbage and reads the live heap and the
// goroutines of this process.
func liveHeap() (heap int64, goroutines int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), runtime.NumGoroutine()
}

// writeHeapProfile writes a pprof heap profile of this process (as of
// the latest GC: liveHeap runs one first) to path, and its goroutines,
// counted by stack (text), to path.goroutines.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	g, err := os.Create(path + ".goroutines")
	if err != nil {
		return err
	}
	if err := pprof.Lookup("goroutine").WriteTo(g, 1); err != nil {
		g.Close()
		return err
	}
	if err := g.Close(); err != nil {
		return err
	}
	logf("load generator heap profile (every agent streaming, after a GC): %s; its goroutines by stack: %s.goroutines", path, path)
	return nil
}

// measureAgents fills h's figures once every agent streams (the
// enrollment storm is over), and writes a heap profile to profile when
// it is set.
func measureAgents(h *heapFigures, profile string) error {
	h.Heap, h.Goroutines = liveHeap()
	if profile == "" {
		return nil
	}
	if err := writeHeapProfile(profile); err != nil {
		return fmt.Errorf("-memprofile: %w", err)
	}
	return nil
}
