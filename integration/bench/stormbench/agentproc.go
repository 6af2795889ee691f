package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// agentProcMem is what one real pact-agent process holds once it
// streams: the memory a node's agent costs the node, beside what each
// agent of the load generator adds to its heap.
type agentProcMem struct {
	rss, hwm int64 // VmRSS once it has streamed for a while, VmHWM then
	anon     int64 // RssAnon: its own memory, without the binary's pages
}

// agentSettle is how long the real agent streams before it is measured.
const agentSettle = 3 * time.Second

// measureAgentProcess registers one more node (its own MAC and BMC
// serial, no storm agent's), runs bin/pact-agent for it as a node runs it
// (the journals, the domain root, its hardware identity; no SPIRE, TPM or
// status socket, which this machine has not or the storm's agents have
// not either; Go's default GC), waits for its stream and agentSettle
// more, reads /proc/PID/status, and stops it with SIGTERM (it releases
// its node). Its log is DIR/pact-agent.log.
func (c *cluster) measureAgentProcess(dir, caFile string) (agentProcMem, error) {
	n := inventory("proc", 1)[0]
	if _, stderr, code, err := c.pact(nil, c.addrs(), "node", "enroll", n.id, "--mac", n.mac, "--bmc-serial", n.bmc); err != nil || code != 0 {
		return agentProcMem{}, fmt.Errorf("pact node enroll %s: exit %d, %v: %s", n.id, code, err, stderr)
	}
	logPath := filepath.Join(dir, "pact-agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return agentProcMem{}, err
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(c.bin, "pact-agent"), "--journal", strings.Join(c.addrs(), ","), "--ca", caFile,
		"--mac", n.mac, "--bmc-serial", n.bmc, "--spire-socket=", "--status-socket=", "--tpm-device=")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return agentProcMem{}, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	deadline := time.Now().Add(90 * time.Second)
	for {
		b, _ := os.ReadFile(logPath)
		if strings.Contains(string(b), `msg="stream open"`) {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			return agentProcMem{}, fmt.Errorf("pact-agent exited before it streamed (%v); see %s", err, logPath)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return agentProcMem{}, fmt.Errorf("pact-agent not streaming after 90s; see %s", logPath)
		}
	}
	time.Sleep(agentSettle)
	m, err := procMem(cmd.Process.Pid)
	if err != nil {
		return agentProcMem{}, err
	}
	return agentProcMem{rss: m.RSS, hwm: m.HWM, anon: m.Anon}, nil
}
