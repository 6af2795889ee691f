package main

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
)

// perfCategories attributes perf samples of the journals to what the
// journal was doing: the first category (in this order) with a frame
// anywhere in the sample's stack wins, so allocation and syscalls count
// toward the activity that caused them.
var perfCategories = []struct {
	name    string
	markers []string
}{
	{"TLS handshake, server side (agents)", []string{"crypto/tls.(*Conn).serverHandshake"}},
	{"TLS handshake, client side (journal to journal)", []string{"crypto/tls.(*Conn).clientHandshake"}},
	{"CSR check (ca.ParseCSR)", []string{"journal/ca.ParseCSR"}},
	{"signing (ca.SignAgent)", []string{"journal/ca.(*CA).SignAgent"}},
	{"client chain verify (auth verifyClientChain)", []string{"journal/auth.(*Authenticator).verifyClientChain"}},
	{"peer chain verify (auth.PeerVerifier)", []string{"journal/auth.(*PeerVerifier).CheckPeer", "journal/auth.(*PeerVerifier).VerifyChain"}},
	{"forwarding to the leader (gRPC client)", []string{"journal/raftnode.(*Node).forward"}},
	{"registry FSM apply", []string{"pact/raftfsm."}},
	{"Raft log store (bbolt, fsync)", []string{"raft-boltdb", "go.etcd.io/bbolt"}},
	{"Raft (replication, transport)", []string{"github.com/hashicorp/raft"}},
	{"logging (slog)", []string{"log/slog"}},
	{"metrics (prometheus)", []string{"prometheus"}},
	// After the crypto and Raft: what a call's handler does past them
	// (admission, lookups, binding checks, the stream's registration).
	{"handlers past the crypto (Enroll, RenewCert, Subscribe, Ping, Propose)", []string{"_EnrollmentService_", "_JournalPeerService_"}},
	{"gRPC / HTTP/2 (server and transport)", []string{"google.golang.org/grpc", "golang.org/x/net/http2"}},
	{"TLS records after the handshake", []string{"crypto/tls."}},
	{"garbage collector", []string{"runtime.gcBgMarkWorker", "runtime.gcDrain", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcStart", "runtime.markroot"}},
	{"Go scheduler, sysmon, idle", []string{"runtime.schedule", "runtime.findRunnable", "runtime.sysmon", "runtime.park_m", "runtime.mstart", "runtime.mcall", "runtime.goexit0", "runtime.futex", "runtime.notesleep", "runtime.usleep"}},
	{"pact journal (other)", []string{"pact-hpc/pact/"}},
}

// categorizePerf reads `perf script` of data and returns the share of
// samples per category, largest first.
func categorizePerf(data string) ([]catShare, int, error) {
	cmd := exec.Command("perf", "script", "-i", data, "-F", "comm,pid,ip,sym")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, err
	}
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	counts, total := countCategories(out)
	if err := cmd.Wait(); err != nil {
		return nil, 0, err
	}
	var shares []catShare
	for k, v := range counts {
		shares = append(shares, catShare{k, float64(v) / float64(max(total, 1))})
	}
	sort.Slice(shares, func(i, j int) bool { return shares[i].share > shares[j].share })
	return shares, total, nil
}

type catShare struct {
	name  string
	share float64
}

func countCategories(r io.Reader) (map[string]int, int) {
	counts := map[string]int{}
	total := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var frames []string
	flush := func() {
		if len(frames) == 0 {
			return
		}
		total++
		counts[categoryOf(frames)]++
		frames = frames[:0]
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] != ' ' && line[0] != '\t':
			flush() // a sample header: comm pid
		default:
			f := strings.Fields(line)
			if len(f) >= 2 {
				frames = append(frames, strings.Join(f[1:], " "))
			}
		}
	}
	flush()
	return counts, total
}

func categoryOf(frames []string) string {
	for _, c := range perfCategories {
		for _, fr := range frames {
			for _, m := range c.markers {
				if strings.Contains(fr, m) {
					return c.name
				}
			}
		}
	}
	for _, fr := range frames {
		if !strings.HasPrefix(fr, "[unknown]") && strings.Contains(fr, ".") && (strings.Contains(fr, "/") || strings.HasPrefix(fr, "runtime.") || strings.HasPrefix(fr, "syscall.")) {
			return "Go (other)"
		}
	}
	return "kernel (no Go frame: interrupts, softirq, scheduler)"
}

func formatShares(shares []catShare, total int, cpuPerOp float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "journal CPU by activity (%d perf samples; ms per operation at %.3f ms of journal CPU per operation)\n", total, cpuPerOp)
	for _, s := range shares {
		fmt.Fprintf(&b, "  %5.1f%%  %6.3f ms  %s\n", 100*s.share, s.share*cpuPerOp, s.name)
	}
	return b.String()
}
