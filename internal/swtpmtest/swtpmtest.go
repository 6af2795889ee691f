// Package swtpmtest starts a real software TPM (swtpm, from Debian's swtpm
// package) for tests: a fresh TPM 2.0 with its own endorsement seed,
// reached over a Unix socket. Tests that need it skip when swtpm is not
// installed, except under CI=true, where they fail: CI installs it
// (.ci/run), and a silently skipped TPM test would prove nothing.
package swtpmtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"

	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/internal/tpmdev"
)

// TPM is a running swtpm.
type TPM struct {
	// Device is what pact-agent's --tpm-device takes: unix:PATH.
	Device string
	// TCTI is how tpm2-tss programs reach it (tpm2-tools' TPM2TOOLS_TCTI,
	// tpm2-openssl's TPM2OPENSSL_TCTI): swtpm:path=PATH.
	TCTI string
	// Dir holds the TPM's state; a second Start with the same Dir is the
	// same TPM (same EK).
	Dir string
	cmd *exec.Cmd
}

// Require fails the test under CI=true and skips it otherwise when swtpm
// is not installed.
func Require(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("swtpm")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("swtpm is not installed (apt-get install swtpm swtpm-tools); CI must run the TPM tests: %v", err)
		}
		t.Skipf("swtpm is not installed (apt-get install swtpm swtpm-tools): %v", err)
	}
	return path
}

// Start starts a fresh software TPM, stopped when the test ends.
func Start(t testing.TB) *TPM {
	t.Helper()
	// Unix socket paths are limited to 108 bytes: t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "swtpm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return StartIn(t, dir)
}

// StartIn starts swtpm with its state in dir.
func StartIn(t testing.TB, dir string) *TPM {
	t.Helper()
	bin := Require(t)
	sock := filepath.Join(dir, "tpm.sock")
	_ = os.Remove(sock)
	_ = os.Remove(sock + ".ctrl")
	var out syncBuffer
	cmd := exec.Command(bin, "socket", "--tpm2",
		"--tpmstate", "dir="+dir,
		"--server", "type=unixio,path="+sock,
		// The TSS's swtpm TCTI (swtpm:path=SOCK) looks for the control
		// channel at SOCK.ctrl.
		"--ctrl", "type=unixio,path="+sock+".ctrl",
		"--flags", "not-need-init,startup-clear",
	)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start swtpm: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tp := &TPM{Device: "unix:" + sock, TCTI: "swtpm:path=" + sock, Dir: dir, cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// Wait for the socket: swtpm is a separate process that takes a moment
	// to manufacture a fresh TPM. This waits for an event, bounded, not for
	// a timeout to pass.
	polltest.Until(t, 30*time.Second, 10*time.Millisecond, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("swtpm exited: %v\n%s", err, out.String())
		default:
		}
		// The socket file appears at bind, before swtpm listens: wait
		// until a connection is accepted.
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "swtpm did not create %s within 30s\n%v", sock, &out)
	return tp
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// holdEnv makes a test binary that imports this package a holder process
// (Hold) instead of running its tests.
const holdEnv = "PACT_SWTPMTEST_HOLD"

func init() {
	if dev := os.Getenv(holdEnv); dev != "" {
		os.Exit(hold(dev))
	}
}

// hold connects to the TPM at device, has it answer a command (so that
// swtpm serves this connection), says "held" and keeps the connection
// until its standard input closes: when the test ends, or never if it is
// killed first.
func hold(device string) int {
	t, err := tpmdev.Open(device)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := (tpm2.GetRandom{BytesRequested: 8}).Execute(t); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// Holder is another process that holds the TPM: the one connection swtpm
// serves at a time, as a program holds an exclusive /dev/tpm0.
type Holder struct {
	// Pid is the holder's process id.
	Pid int
	cmd *exec.Cmd
	in  io.Closer
}

// Hold starts a process (this test binary, run again) that connects to the
// TPM and keeps the connection until Kill, or the test ends.
// It returns once swtpm serves that process.
func (tp *TPM) Hold(t testing.TB) *Holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+tp.Device)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the holder: %v", err)
	}
	h := &Holder{Pid: cmd.Process.Pid, cmd: cmd, in: in}
	t.Cleanup(h.Kill)
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "held" {
		h.Kill()
		t.Fatalf("the holder did not get the TPM: %q %v\n%s", line, err, stderr.String())
	}
	return h
}

// Kill kills the holder (SIGKILL) and waits for it; a second Kill does
// nothing.
func (h *Holder) Kill() {
	if h.cmd.ProcessState != nil {
		return
	}
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
	_ = h.in.Close()
}

// Transient lists the transient objects loaded in the TPM (swtpm keeps
// them across connections, as a TPM used without a resource manager does).
// swtpm serves one connection at a time: this waits for the others.
func (tp *TPM) Transient(t testing.TB) []tpm2.TPMHandle {
	t.Helper()
	tr, err := tpmdev.Open(tp.Device)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	return transient(t, tr)
}

func transient(t testing.TB, tr transport.TPM) []tpm2.TPMHandle {
	t.Helper()
	rsp, err := tpm2.GetCapability{Capability: tpm2.TPMCapHandles, Property: uint32(tpm2.TPMHTTransient) << 24, PropertyCount: 64}.Execute(tr)
	if err != nil {
		t.Fatalf("list the transient objects: %v", err)
	}
	hs, err := rsp.CapabilityData.Data.Handles()
	if err != nil {
		t.Fatal(err)
	}
	return hs.Handle
}

// Fill loads transient objects (storage primary keys) without flushing them
// until the TPM has room for only free more (a swtpm holds 3), as programs
// killed while they used a TPM without a resource manager leave it. It
// returns how many it loaded.
func (tp *TPM) Fill(t testing.TB, free int) int {
	t.Helper()
	tr, err := tpmdev.Open(tp.Device)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var made []tpm2.TPMHandle
	for {
		rsp, err := tpm2.CreatePrimary{PrimaryHandle: tpm2.TPMRHOwner, InPublic: tpm2.New2B(tpm2.ECCSRKTemplate)}.Execute(tr)
		if errors.Is(err, tpm2.TPMRCObjectMemory) {
			break
		}
		if err != nil {
			t.Fatalf("load an object: %v", err)
		}
		made = append(made, rsp.ObjectHandle)
		if len(made) > 64 {
			t.Fatal("the TPM loads more than 64 objects: cannot fill it")
		}
	}
	for i := 0; i < free && len(made) > 0; i++ {
		if _, err := (tpm2.FlushContext{FlushHandle: made[len(made)-1]}).Execute(tr); err != nil {
			t.Fatal(err)
		}
		made = made[:len(made)-1]
	}
	return len(made)
}

// FlushTransient flushes every transient object in the TPM, as
// tpm2_flushcontext -t does.
func (tp *TPM) FlushTransient(t testing.TB) {
	t.Helper()
	tr, err := tpmdev.Open(tp.Device)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, h := range transient(t, tr) {
		if _, err := (tpm2.FlushContext{FlushHandle: h}).Execute(tr); err != nil {
			t.Fatalf("flush %#x: %v", uint32(h), err)
		}
	}
}
