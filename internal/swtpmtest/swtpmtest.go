// Package swtpmtest starts a real software TPM (swtpm, from Debian's swtpm
// package) for tests: a fresh TPM 2.0 with its own endorsement seed,
// reached over a Unix socket. Tests that need it skip when swtpm is not
// installed, except under CI=true, where they fail: CI installs it
// (.ci/run), and a silently skipped TPM test would prove nothing.
package swtpmtest

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
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
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The socket file appears at bind, before swtpm listens: wait
		// until a connection is accepted.
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return tp
		}
		select {
		case err := <-exited:
			t.Fatalf("swtpm exited: %v\n%s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("swtpm did not create %s within 30s\n%s", sock, out.String())
		}
	}
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
