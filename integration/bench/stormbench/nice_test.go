package main

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// lowerPriority sets every thread of the process, and threads started
// afterwards, to the nice value asked (the test process's own: a nice
// value only goes up without privileges, which no later test minds).
func TestLowerPriorityEveryThread(t *testing.T) {
	const nice = 3
	if err := lowerPriority(nice); err != nil {
		t.Fatal(err)
	}
	// Threads made afterwards: goroutines locked to threads while others
	// block, so the runtime starts new ones.
	var wg, locked sync.WaitGroup
	release := make(chan struct{})
	for range 8 {
		wg.Add(1)
		locked.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			locked.Done()
			<-release
		}()
	}
	defer func() { close(release); wg.Wait() }()
	locked.Wait()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		p, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
		if err != nil {
			continue // the thread ended meanwhile
		}
		if got := 20 - p; got != nice {
			t.Errorf("thread %d: nice %d, want %d", tid, got, nice)
		}
	}
}
