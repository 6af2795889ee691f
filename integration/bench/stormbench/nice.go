package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// The load generator shares the machine's cores with the journals, where a
// site's nodes run on machines of their own: 30,000 agents cost it more CPU
// than the journals (11.8 ms against 7.8 ms per agent in one run), and two
// cores shared equally left the journals' Raft heartbeats seconds late,
// the leader deposed, and a Raft store write past the write watchdog's 5 s
// (docs/benchmarks.md). -loadgen-nice runs the agents at a lower CPU
// priority than the journals (or the floor's stubs), so the journals get
// the CPU when they have work. It is off by default: tried at 10 on
// 30,000 agents, it kept the leader in both storms but starved the agents,
// whose handshakes and keepalives then timed out and were made again (the
// journals' CPU per agent rose, docs/benchmarks.md). Two cores cannot give
// both sides what hosts of their own would.

// lowerPriority raises the nice value of every thread of this process to
// nice (Linux keeps it per thread; a new thread inherits its creator's, as
// do processes started afterwards: the load generator's workers). It runs
// once the journals (or the floor's stubs) have started, so they keep
// theirs.
func lowerPriority(nice int) error {
	if nice <= 0 {
		return nil
	}
	// A thread created while the list is read inherits the old value:
	// pass again until a pass finds every thread done.
	for range 10 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("lower the load generator's priority: %w", err)
		}
		changed := 0
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			// getpriority(2) returns 20-nice.
			if p, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid); err == nil && 20-p == nice {
				continue
			}
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil {
				return fmt.Errorf("lower the load generator's priority (thread %d to nice %d): %w", tid, nice, err)
			}
			changed++
		}
		if changed == 0 {
			break
		}
	}
	logf("the load generator runs at nice %d, the journals at their own", nice)
	return nil
}
