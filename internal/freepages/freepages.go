// Package freepages says how a journal process has the Go runtime return
// free heap pages to the kernel: with MADV_FREE (GODEBUG=madvdontneed=0)
// rather than the runtime's default on Linux, MADV_DONTNEED.
//
// A journal's heap rises and falls with every wave of connections in a
// boot storm (an enrollment's connection closes once its agent streams on
// the next), and each page returned with MADV_DONTNEED was faulted in and
// zeroed again on the next wave: 0.32 ms of journal CPU per enrollment in
// clear_page at 10,000 agents, 0.03 ms with MADV_FREE (perf;
// docs/benchmarks.md). With MADV_FREE the kernel still takes the pages
// back under memory pressure, and until it does they count in the
// process's resident memory (docs/monitoring.md). The runtime reads the
// setting only when it starts, and a //go:debug line cannot name it, so a
// process that wants it starts itself once more with Env's environment
// (cmd/pact-journal); the floor's stub journals are started with it
// (integration/bench/stormbench), so that the floor is not charged what
// pact-journal avoids.
package freepages

import "strings"

// setting is the GODEBUG setting Env adds.
const setting = "madvdontneed=0"

// Env returns env with GODEBUG=madvdontneed=0 added (to the last GODEBUG
// entry, which is the one that counts, keeping its other settings), and
// true; or env itself and false when its GODEBUG already names
// madvdontneed (GODEBUG=madvdontneed=1 keeps the runtime's default). env
// is not modified.
func Env(env []string) ([]string, bool) {
	last := -1
	for i, kv := range env {
		if strings.HasPrefix(kv, "GODEBUG=") {
			last = i
		}
	}
	if last >= 0 {
		for _, s := range strings.Split(strings.TrimPrefix(env[last], "GODEBUG="), ",") {
			if strings.HasPrefix(strings.TrimSpace(s), "madvdontneed=") {
				return env, false
			}
		}
	}
	out := append([]string(nil), env...)
	switch {
	case last < 0:
		out = append(out, "GODEBUG="+setting)
	case out[last] == "GODEBUG=":
		out[last] = "GODEBUG=" + setting
	default:
		out[last] += "," + setting
	}
	return out, true
}
