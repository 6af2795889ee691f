package main

import (
	"os"
	"testing"
	"time"
)

// The /proc readings of this process and of the machine are sane: memory
// in bytes (not kB), CPU time that grows with work, busy within total.
func TestProcReadings(t *testing.T) {
	pid := os.Getpid()
	m, err := procMem(pid)
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS < 1<<20 || m.HWM < m.RSS || m.Anon <= 0 || m.Anon+m.File > m.RSS {
		t.Errorf("memory %+v", m)
	}
	before, err := procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	busy0, total0 := machineCPU()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if c, _ := procCPU(pid); c-before >= 50*time.Millisecond {
			break
		}
	}
	after, _ := procCPU(pid)
	busy1, total1 := machineCPU()
	if after-before < 50*time.Millisecond {
		t.Errorf("CPU time went from %v to %v while spinning", before, after)
	}
	if busy0 <= 0 || busy0 > total0 || busy1 < busy0 || total1 <= total0 || busy1-busy0 > total1-total0 {
		t.Errorf("machine busy %v→%v of total %v→%v", busy0, busy1, total0, total1)
	}
	if _, err := procCPU(-1); err == nil {
		t.Error("no error for a process that does not exist")
	}
}
