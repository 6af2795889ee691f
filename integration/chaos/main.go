package chaos

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Main runs the chaos command with args and returns its exit code: 0 when
// every scenario passed, 1 on any violation, 2 on a usage error.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("bin", "bin", "directory holding pact-journal (make build)")
	prevBin := fs.String("prev-bin", "", "directory holding the previous release's pact-journal, for rolling-upgrade (make chaos runs make release-previous: .cache/releases/x.y.z/bin)")
	clockBin := fs.String("clock-bin", "", "directory holding a pact-journal built with -tags chaosclock, for clock-step (make chaos builds bin/chaosclock)")
	seed := fs.Uint64("seed", 0, "seed of the fault schedules and the workload (0: from the clock); printed, to reproduce a run")
	scenarios := fs.String("scenario", "", "comma-separated scenarios to run (default: the campaign; see -list)")
	short := fs.Bool("short", false, "the CI campaign: every scenario a quarter as long, long scenarios skipped")
	duration := fs.Duration("duration", 0, "fault-injection time of every scenario (overrides the scenario's own)")
	netMode := fs.String("net", "auto", "auto (network namespaces if possible, else loopback), netns, loopback or docker")
	docker := fs.Bool("docker", false, "run the journals as containers of the pact image (same as -net docker)")
	image := fs.String("image", "pact:dev", "container image for -docker (make image builds it FROM scratch)")
	keep := fs.Bool("keep", false, "keep every scenario's directory (logs, history), not only failed ones")
	workDir := fs.String("workdir", "", "where scenario directories go (default: a new temporary directory)")
	clients := fs.Int("clients", 0, "concurrent clients (default 6)")
	nodes := fs.Int("nodes", 0, "nodes per client (default 4)")
	checkTimeout := fs.Duration("check-timeout", 30*time.Second, "porcupine time limit per node")
	snapWait := fs.Duration("snapshot-wait", SnapshotWait, "how long lagging-follower-snapshot waits for the leader to snapshot")
	journalFlagsArg := fs.String("journal-flags", "", `more flags for every journal, space-separated (e.g. "--raft-timeout 300ms")`)
	list := fs.Bool("list", false, "list the scenarios and exit")
	recheck := fs.String("recheck", "", "check a saved history (a scenario directory's history.jsonl) again and exit; with -node, one node only")
	onlyNode := fs.String("node", "", "with -recheck: the node to check")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *list {
		for _, s := range Scenarios() {
			long := ""
			if s.Long {
				long = " [long: not in -short]"
			}
			fmt.Fprintf(stdout, "%-26s %d journals, %v%s\n    %s\n", s.Name, s.Journals, s.Duration, long, s.Describe)
			p := PlanInvariants(s)
			var na []string
			for _, n := range p.NA {
				na = append(na, n.What)
			}
			fmt.Fprintf(stdout, "    checks: %s; not applicable (the report says why): %s\n", strings.Join(p.Apply, " "), strings.Join(na, " "))
		}
		return 0
	}
	if *recheck != "" {
		return Recheck(stdout, stderr, *recheck, *onlyNode, *checkTimeout)
	}
	if *docker {
		*netMode = "docker"
	}
	switch *netMode {
	case "auto", "netns", "loopback", "docker":
	default:
		fmt.Fprintf(stderr, "chaos: -net %q: want auto, netns, loopback or docker\n", *netMode)
		return 2
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	SnapshotWait = *snapWait
	var names []string
	for _, n := range strings.Split(*scenarios, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	picked, skipped, err := Pick(names, *short)
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 2
	}
	if *netMode == "docker" && len(names) == 0 {
		// Scenarios that work on the journals' processes and data
		// directories cannot run against containers.
		var kept []Scenario
		for _, sc := range picked {
			if sc.Processes {
				fmt.Fprintf(stdout, "(skipped %s: it needs journal processes, not containers)\n", sc.Name)
				continue
			}
			kept = append(kept, sc)
		}
		picked = kept
	}
	if _, err := os.Stat(filepath.Join(*bin, "pact-journal")); err != nil {
		fmt.Fprintf(stderr, "chaos: %v (run make build first, or pass -bin)\n", err)
		return 2
	}
	absBin, _ := filepath.Abs(*bin)
	absClockBin := ""
	if *clockBin != "" {
		absClockBin, _ = filepath.Abs(*clockBin)
	}
	if *workDir == "" {
		d, err := os.MkdirTemp("", "pact-chaos-")
		if err != nil {
			fmt.Fprintln(stderr, "chaos:", err)
			return 1
		}
		*workDir = d
	}
	absPrevBin := ""
	if *prevBin != "" {
		absPrevBin, _ = filepath.Abs(*prevBin)
	}
	opts := Options{Bin: absBin, ClockBin: absClockBin, PrevBin: absPrevBin, WorkDir: *workDir, Seed: *seed, Short: *short, Duration: *duration, Net: *netMode, Image: *image,
		Keep: *keep, Clients: *clients, NodesPerClient: *nodes, CheckTimeout: *checkTimeout, Out: stdout, JournalFlags: strings.Fields(*journalFlagsArg)}

	// One campaign at a time: namespaces, the subnet and container names
	// are fixed.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "pact-chaos.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 1
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintf(stderr, "chaos: another chaos run holds %s: %v\n", lock.Name(), err)
		return 1
	}

	// A signal stops the journals and removes the namespaces before exit.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		s, ok := <-sigs
		if !ok {
			return
		}
		fmt.Fprintf(stderr, "chaos: %v: cleaning up\n", s)
		runClosers()
		if *netMode == "docker" {
			CleanStaleContainers()
		} else {
			CleanStaleNamespaces()
		}
		os.Exit(130)
	}()

	fmt.Fprintf(stdout, "pact chaos: seed %d, %d scenarios, work dir %s\n", *seed, len(picked), *workDir)
	var results []*ScenarioResult
	for k, sc := range picked {
		results = append(results, RunScenario(sc, opts, *seed+uint64(k)))
	}
	if Report(stdout, results, *seed, skipped) {
		if !*keep {
			os.Remove(*workDir) // empty unless something was kept
		}
		return 0
	}
	return 1
}

var (
	closersMu sync.Mutex
	closers   = map[int]func(){}
	closerID  int
)

// onSignal registers cleanup to run if the command is interrupted; the
// returned function unregisters it.
func onSignal(f func()) func() {
	closersMu.Lock()
	defer closersMu.Unlock()
	closerID++
	id := closerID
	closers[id] = f
	return func() {
		closersMu.Lock()
		defer closersMu.Unlock()
		delete(closers, id)
	}
}

func runClosers() {
	closersMu.Lock()
	fs := make([]func(), 0, len(closers))
	for _, f := range closers {
		fs = append(fs, f)
	}
	closersMu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Recheck runs the linearizability check on a saved history and prints the
// verdict and every excerpt; 1 if it is not linearizable.
func Recheck(stdout, stderr io.Writer, path, node string, timeout time.Duration) int {
	recs, settled, err := ReadHistory(path)
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 2
	}
	if node != "" {
		var only []*Record
		for _, r := range recs {
			if r.In.Node == node {
				only = append(only, r)
			}
		}
		recs = only
	}
	l := CheckLinearizable(recs, settled, timeout)
	fmt.Fprintf(stdout, "%d calls on %d nodes: linearizable %s; allowed stale answers %v; NO_LEADER written %v; illegal %v; timed out %v\n",
		len(recs), l.Nodes, l.Verdict, l.Allowed, l.NoLeader, l.Illegal, l.TimedOut)
	fmt.Fprintf(stdout, "unknown writes: %d took effect, %d did not, %d either way\n", l.UnknownApplied, l.UnknownNotApplied, l.UnknownEither)
	for _, e := range l.Excerpts {
		fmt.Fprintln(stdout, e)
	}
	if l.Verdict != "yes" {
		return 1
	}
	return 0
}
