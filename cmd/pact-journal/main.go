// Command pact-journal runs a node of the pact journal.
package main

import (
	"os"
	"syscall"

	"github.com/pact-hpc/pact/internal/freepages"
	"github.com/pact-hpc/pact/journal/journalmain"
)

func main() {
	// Free heap pages go back to the kernel with MADV_FREE
	// (internal/freepages): the runtime reads that only when it starts,
	// so the journal starts once more with it, as the same process (PID,
	// open files, systemd's notify socket); on failure it runs as it is.
	if env, changed := freepages.Env(os.Environ()); changed {
		if self, err := os.Executable(); err == nil {
			_ = syscall.Exec(self, os.Args, env)
		}
	}
	os.Exit(journalmain.Main(os.Args[1:], os.Stdout, os.Stderr))
}
