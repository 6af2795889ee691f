// Package bintest builds pact's binaries for tests that run them as
// processes (the end-to-end and chaos tests, the boot-storm benchmark, the
// packaging and version checks): one builder, so every such test runs
// what make build makes (static, -trimpath).
package bintest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Commands are the three binaries of cmd/.
var Commands = []string{"pact-journal", "pact-agent", "pact"}

// Build builds the named commands of cmd/ (pact-journal, pact-agent,
// pact) into dir, as make build does: CGO_ENABLED=0 and -trimpath, with
// ldflags when not empty (make print-ldflags stamps the version so).
// Commands are named by import path, so Build works from any directory
// of the module.
func Build(dir, ldflags string, names ...string) error {
	args := []string{"build", "-trimpath"}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	args = append(args, "-o", dir+string(os.PathSeparator))
	for _, n := range names {
		args = append(args, "github.com/pact-hpc/pact/cmd/"+n)
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %v: %v\n%s", names, err, out)
	}
	return nil
}

// Dir builds the named commands into a temporary directory of t's and
// returns it; a failed build fails t.
func Dir(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := Build(dir, "", names...); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Main builds the named commands into a new temporary directory for a
// TestMain, which removes it when done; it exits the process when the
// build fails, as there is nothing to test.
func Main(names ...string) (dir string, remove func()) {
	dir, err := os.MkdirTemp("", "pact-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := Build(dir, "", names...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	return dir, func() { os.RemoveAll(dir) }
}
