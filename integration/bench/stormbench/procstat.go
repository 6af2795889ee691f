package main

import (
	"math"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// userHZ is the unit of utime and stime in /proc/PID/stat. Linux fixes
// USER_HZ at 100 for the /proc interface on every architecture we run on
// (procfs assumes the same).
const userHZ = 100

// procFS is /proc, read with prometheus/procfs.
var procFS, procFSErr = procfs.NewDefaultFS()

func proc(pid int) (procfs.Proc, error) {
	if procFSErr != nil {
		return procfs.Proc{}, procFSErr
	}
	return procFS.Proc(pid)
}

// procCPU is the user+system CPU time a process (all its threads) has
// used, from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	p, err := proc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return time.Duration(st.UTime+st.STime) * time.Second / userHZ, nil
}

// selfCPU is this process's user+system CPU time (getrusage).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memStatus is what /proc/PID/status says about a process's memory, in
// bytes.
type memStatus struct {
	RSS, HWM, Anon, File int64
}

func procMem(pid int) (memStatus, error) {
	p, err := proc(pid)
	if err != nil {
		return memStatus{}, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return memStatus{}, err
	}
	return memStatus{RSS: int64(st.VmRSS), HWM: int64(st.VmHWM), Anon: int64(st.RssAnon), File: int64(st.RssFile)}, nil
}

// cpuMeter measures the CPU used by a set of processes and by this one
// between start and stop.
type cpuMeter struct {
	pids      []int
	startProc []time.Duration
	startSelf time.Duration
	startGC   time.Duration
}

func startCPU(pids []int) *cpuMeter {
	m := &cpuMeter{pids: pids, startSelf: selfCPU(), startGC: selfGCCPU()}
	for _, p := range pids {
		c, _ := procCPU(p)
		m.startProc = append(m.startProc, c)
	}
	return m
}

// stop returns the CPU each process used, what this process used, and
// what its garbage collector used of that.
func (m *cpuMeter) stop() (procs []time.Duration, self, gc time.Duration) {
	self = selfCPU() - m.startSelf
	gc = selfGCCPU() - m.startGC
	for i, p := range m.pids {
		c, _ := procCPU(p)
		procs = append(procs, c-m.startProc[i])
	}
	return procs, self, gc
}

// rssSampler samples the resident set of processes until stopped and
// keeps the largest VmRSS seen for each (VmHWM is read at the end too).
type rssSampler struct {
	pids []int
	mu   sync.Mutex
	max  []int64
	stop chan struct{}
	done chan struct{}
}

func sampleRSS(pids []int, every time.Duration) *rssSampler {
	s := &rssSampler{pids: pids, max: make([]int64, len(pids)), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				s.sample()
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range s.pids {
		if m, err := procMem(p); err == nil {
			s.max[i] = max(s.max[i], m.RSS, m.HWM)
		}
	}
}

// finish stops sampling and returns the largest resident set of any of
// the processes, in bytes.
func (s *rssSampler) finish() int64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	var m int64
	for _, v := range s.max {
		m = max(m, v)
	}
	return m
}

// machineCPU reads the aggregate "cpu" line of /proc/stat: busy time
// (everything but idle and iowait, steal included: on a VM, time another
// guest took is time we did not get) and total time.
func machineCPU() (busy, total time.Duration) {
	if procFSErr != nil {
		return 0, 0
	}
	st, err := procFS.Stat()
	if err != nil {
		return 0, 0
	}
	// procfs gives seconds (ticks / USER_HZ); back to whole ticks, exactly.
	// Guest and GuestNice are left out: they are already in User and Nice.
	ticks := func(s float64) int64 { return int64(math.Round(s * userHZ)) }
	c := st.CPUTotal
	idle := ticks(c.Idle) + ticks(c.Iowait)
	sum := ticks(c.User) + ticks(c.Nice) + ticks(c.System) + idle + ticks(c.IRQ) + ticks(c.SoftIRQ) + ticks(c.Steal)
	return time.Duration(sum-idle) * time.Second / userHZ, time.Duration(sum) * time.Second / userHZ
}

// machineMeter measures how busy the whole machine was over a window,
// so the CPU that other users' processes took can be told apart from ours.
type machineMeter struct{ busy, total time.Duration }

func startMachine() machineMeter {
	b, t := machineCPU()
	return machineMeter{b, t}
}

// others returns the share of the machine's capacity over the window that
// was busy with something other than ours (the CPU time we used).
func (m machineMeter) others(ours time.Duration) float64 {
	b, t := machineCPU()
	if t <= m.total {
		return 0
	}
	return max(0, float64(b-m.busy-ours)/float64(t-m.total))
}

// waitIdle waits up to limit for a second in which other processes use
// less than maxShare of the machine, and returns the share seen last.
// pids are ours (their CPU does not count).
func waitIdle(limit time.Duration, maxShare float64, pids []int) float64 {
	deadline := time.Now().Add(limit)
	for {
		m := startMachine()
		cpu := startCPU(pids)
		time.Sleep(time.Second)
		procs, self, _ := cpu.stop()
		ours := self
		for _, p := range procs {
			ours += p
		}
		share := m.others(ours)
		if share <= maxShare || time.Now().After(deadline) {
			return share
		}
	}
}
