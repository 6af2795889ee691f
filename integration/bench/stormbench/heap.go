package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// heapFigures are a load-generator process's live heap (after a GC),
// goroutine stacks and goroutines: before the enrollment storm (Base) and
// once every agent of it streams, so what the agents hold is the
// difference.
type heapFigures struct {
	Base heapSample `json:"base,omitzero"`
	Now  heapSample `json:"now,omitzero"`
}

// heapSample is one reading: live heap and goroutine stacks in bytes,
// and goroutines.
type heapSample struct {
	Heap       int64 `json:"heap,omitempty"`
	Stack      int64 `json:"stack,omitempty"`
	Goroutines int   `json:"goroutines,omitempty"`
}

func (s *heapSample) add(o heapSample) {
	s.Heap += o.Heap
	s.Stack += o.Stack
	s.Goroutines += o.Goroutines
}

func (h *heapFigures) add(o heapFigures) {
	h.Base.add(o.Base)
	h.Now.add(o.Now)
}

// perAgent is the live heap, the goroutine stacks (bytes) and the
// goroutines each of n agents holds.
func (h heapFigures) perAgent(n int) (heap, stack, goroutines float64) {
	if n <= 0 || h.Now.Heap == 0 {
		return 0, 0, 0
	}
	d := float64(n)
	return float64(h.Now.Heap-h.Base.Heap) / d, float64(h.Now.Stack-h.Base.Stack) / d, float64(h.Now.Goroutines-h.Base.Goroutines) / d
}

// liveHeap collects the garbage and reads the live heap, the goroutine
// stacks and the goroutines of this process.
func liveHeap() heapSample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return heapSample{Heap: int64(ms.HeapAlloc), Stack: int64(ms.StackInuse), Goroutines: runtime.NumGoroutine()}
}

// writeHeapProfile writes a pprof heap profile of this process (as of
// the latest GC: liveHeap runs one first) to path, and its goroutines,
// counted by stack (text), to path.goroutines.
func writeHeapProfile(path string) error {
	if err := writeProfile("heap", path, 0); err != nil {
		return err
	}
	if err := writeProfile("goroutine", path+".goroutines", 1); err != nil {
		return err
	}
	logf("load generator heap profile (every agent streaming, after a GC): %s; its goroutines by stack: %s.goroutines", path, path)
	return nil
}

// writeProfile writes the runtime profile name to path (debug as
// pprof.Profile.WriteTo takes it).
func writeProfile(name, path string, debug int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, debug); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// measureAgents fills h's figures once every agent streams (the
// enrollment storm is over), and writes a heap profile to profile when
// it is set.
func measureAgents(h *heapFigures, profile string) error {
	h.Now = liveHeap()
	if profile == "" {
		return nil
	}
	if err := writeHeapProfile(profile); err != nil {
		return fmt.Errorf("-memprofile: %w", err)
	}
	return nil
}
