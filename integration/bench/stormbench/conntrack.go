package main

import (
	"os"
	"strconv"
	"strings"
)

// conntrackStat is where Linux counts, per CPU, what connection tracking
// did: its "drop" column is the packets dropped because the table was full
// (dmesg: "nf_conntrack: table full, dropping packet"). A storm whose
// clients reconnect every few seconds leaves a tracked connection in
// TIME_WAIT for each attempt (two minutes by default), and on a host that
// tracks connections the kernel then drops new connections (and Raft's
// packets) before any journal sees them.
const conntrackStat = "/proc/net/stat/nf_conntrack"

// conntrackDrops is the sum of the drop column over every CPU; ok is false
// where the kernel does not track connections.
func conntrackDrops() (drops uint64, ok bool) {
	b, err := os.ReadFile(conntrackStat)
	if err != nil {
		return 0, false
	}
	return parseConntrackDrops(string(b))
}

// parseConntrackDrops reads the drop column of /proc/net/stat/nf_conntrack:
// a header line naming the columns, then one line of hexadecimal counters
// per CPU.
func parseConntrackDrops(s string) (drops uint64, ok bool) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) < 2 {
		return 0, false
	}
	col := -1
	for i, name := range strings.Fields(lines[0]) {
		if name == "drop" {
			col = i
		}
	}
	if col < 0 {
		return 0, false
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if col >= len(f) {
			return 0, false
		}
		v, err := strconv.ParseUint(f[col], 16, 64)
		if err != nil {
			return 0, false
		}
		drops += v
	}
	return drops, true
}
