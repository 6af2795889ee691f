package integration

import (
	"bytes"
	"fmt"
	"os"
	"testing"
)

// TestJournalRunsWithFreePages: a journal started without GODEBUG runs
// with madvdontneed=0 (cmd/pact-journal: it starts once more with the
// setting, as the same process), and one started with
// GODEBUG=madvdontneed=1 keeps it. Read from the running processes'
// environment, which the Go runtime read when it started.
func TestJournalRunsWithFreePages(t *testing.T) {
	t.Setenv("GODEBUG", "")
	os.Unsetenv("GODEBUG")
	q := startQuorum(t, 1)
	env := processEnv(t, q.pq.Pid(0))
	if !bytes.Contains(env, []byte("\x00GODEBUG=madvdontneed=0\x00")) {
		t.Fatalf("journal started without GODEBUG runs with environment %q; want GODEBUG=madvdontneed=0", bytes.ReplaceAll(env, []byte{0}, []byte{' '}))
	}

	t.Setenv("GODEBUG", "madvdontneed=1")
	q1 := startQuorum(t, 1)
	env = processEnv(t, q1.pq.Pid(0))
	if !bytes.Contains(env, []byte("\x00GODEBUG=madvdontneed=1\x00")) || bytes.Contains(env, []byte("madvdontneed=0")) {
		t.Fatalf("journal started with GODEBUG=madvdontneed=1 runs with environment %q", bytes.ReplaceAll(env, []byte{0}, []byte{' '}))
	}
}

// processEnv is a live process's environment, NUL-separated and framed
// by NULs so that a whole variable can be matched.
func processEnv(t *testing.T, pid int) []byte {
	t.Helper()
	if pid == 0 {
		t.Fatal("the journal has no process")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{0}, b...)
}
