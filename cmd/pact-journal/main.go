// Command pact-journal runs a node of the pact journal.
package main

import (
	"os"
	"strings"
	"syscall"

	"github.com/pact-hpc/pact/journal/journalmain"
)

func main() {
	if env, ok := withFreePages(os.Environ()); ok {
		if self, err := os.Executable(); err == nil {
			// Same process (PID, open files, systemd's notify socket),
			// new runtime settings; on failure it runs as it is.
			_ = syscall.Exec(self, os.Args, env)
		}
	}
	os.Exit(journalmain.Main(os.Args[1:], os.Stdout, os.Stderr))
}

// withFreePages returns env with GODEBUG=madvdontneed=0 added, and true,
// unless env already says how the runtime returns memory.
//
// The Go runtime returns free heap pages to the kernel with MADV_DONTNEED
// by default on Linux. A journal's heap rises and falls with every wave of
// connections in a boot storm (an enrollment's connection closes once its
// agent streams on the next), and each page returned so was faulted in and
// zeroed again on the next wave: 0.32 ms of journal CPU per enrollment in
// clear_page at 10,000 agents, 0.03 ms with MADV_FREE (perf;
// docs/benchmarks.md). With MADV_FREE the kernel still takes the pages
// back under memory pressure, and until it does they count in the
// process's resident memory (docs/monitoring.md). The setting is read
// only when the runtime starts, and a //go:debug line cannot name it, so
// the journal starts once more with it set. GODEBUG=madvdontneed=1 in the
// environment keeps the runtime's default.
func withFreePages(env []string) ([]string, bool) {
	for i, kv := range env {
		v, ok := strings.CutPrefix(kv, "GODEBUG=")
		if !ok {
			continue
		}
		for _, s := range strings.Split(v, ",") {
			if strings.HasPrefix(strings.TrimSpace(s), "madvdontneed=") {
				return env, false
			}
		}
		out := append([]string(nil), env...)
		if v == "" {
			out[i] = "GODEBUG=madvdontneed=0"
		} else {
			out[i] = kv + ",madvdontneed=0"
		}
		return out, true
	}
	return append(append([]string(nil), env...), "GODEBUG=madvdontneed=0"), true
}
