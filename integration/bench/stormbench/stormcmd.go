package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/pact-hpc/pact/internal/wire"
)

type stormFlags struct {
	agents      int
	journals    int
	bin         string
	dir         string
	keep        bool
	concurrency int
	spread      time.Duration
	ceiling     time.Duration
	renew       bool
	pregen      bool
	deadline    time.Duration
	perf        bool
	cpuprofile  string
	journalArgs string
	journalEnv  string
	waitIdle    time.Duration
	keyExchange string
}

func runStorm(args []string) int {
	var f stormFlags
	fs := flag.NewFlagSet("stormbench storm", flag.ContinueOnError)
	fs.IntVar(&f.agents, "agents", 10000, "simulated agents (= registered nodes)")
	fs.IntVar(&f.journals, "journals", 3, "journals in the quorum")
	fs.StringVar(&f.bin, "bin", "bin", "directory holding pact-journal and pact (make build)")
	fs.StringVar(&f.dir, "dir", "", "working directory for the domain root, data and logs (default: a new temporary directory, removed at the end unless -keep)")
	fs.BoolVar(&f.keep, "keep", false, "keep the working directory")
	fs.IntVar(&f.concurrency, "concurrency", 256, "agents the load generator works on at once (a worker pool pulling arrivals); 0: every agent at once, one goroutine each")
	fs.DurationVar(&f.spread, "spread", time.Second, "agents arrive evenly spread over this window")
	fs.DurationVar(&f.ceiling, "ceiling", 3*time.Second, "how long to run each crypto ceiling")
	fs.BoolVar(&f.renew, "renew", true, "run the renewal storm after the enrollment storm")
	fs.BoolVar(&f.pregen, "pregen", false, "make the agents' keys and CSRs before the timed phase (and leave keygen out of the ceiling too)")
	fs.DurationVar(&f.deadline, "deadline", 10*time.Minute, "give up on a storm after this long")
	fs.BoolVar(&f.perf, "perf", false, "record the journals with perf(1) during each storm (DIR/perf-*.data and a flat report DIR/perf-*.txt)")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a pprof CPU profile of the load generator (this process) during each storm to FILE.enroll and FILE.renew")
	fs.StringVar(&f.journalArgs, "journal-args", "", "extra flags for every pact-journal, space-separated")
	fs.StringVar(&f.journalEnv, "journal-env", "", "extra environment for every pact-journal, space-separated (e.g. GOGC=200)")
	fs.StringVar(&f.keyExchange, "key-exchange", string(wire.Classical), "TLS key exchange the simulated agents offer, as pact-agent --key-exchange (x25519 or x25519mlkem768); run the journals with the same through -journal-args")
	fs.DurationVar(&f.waitIdle, "wait-idle", 0, "before each ceiling and storm, wait up to this long for a second in which other processes use less than 15% of the machine (a shared machine)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if f.agents < 1 || f.journals < 1 {
		fmt.Fprintln(os.Stderr, "stormbench: -agents and -journals must be positive")
		return 2
	}
	return runIn(f.dir, f.keep, func(dir string, cl *cleanup) error { return stormMain(f, dir, cl) })
}

// runIn runs a benchmark in its working directory (made, or dir), cleaning
// up on return or on a signal; a failure keeps the directory and its logs.
func runIn(dir string, keep bool, bench func(dir string, cl *cleanup) error) int {
	var cl cleanup
	cl.onSignal()
	defer cl.run()
	dir, err := workDir(dir, keep, &cl)
	if err != nil {
		logf("%v", err)
		return 1
	}
	if err := bench(dir, &cl); err != nil {
		logf("%v", err)
		logf("journal logs are in %s", dir)
		keepDir = true
		return 1
	}
	return 0
}

// keepDir keeps the working directory (set on failure).
var keepDir bool

// workDir makes (or uses) the working directory and arranges for a
// temporary one to be removed at the end.
func workDir(dir string, keep bool, cl *cleanup) (string, error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", err
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) > 0 {
			return "", fmt.Errorf("-dir %s is not empty", dir)
		}
		return filepath.Abs(dir)
	}
	d, err := os.MkdirTemp("", "stormbench-")
	if err != nil {
		return "", err
	}
	cl.add(func() {
		if keep || keepDir {
			logf("kept %s", d)
			return
		}
		os.RemoveAll(d)
	})
	return d, nil
}

func stormMain(f stormFlags, dir string, cl *cleanup) error {
	logf("machine: %d CPUs (GOMAXPROCS %d), %s/%s, %s; working directory %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version(), dir)
	c, err := newCluster(f.bin, dir, f.journals, strings.Fields(f.journalArgs), strings.Fields(f.journalEnv))
	if err != nil {
		return err
	}
	cl.add(c.stopAll)
	if err := c.startAll(90 * time.Second); err != nil {
		return err
	}
	logf("%d journals serving on %s", f.journals, strings.Join(c.addrs(), ","))

	nodes := inventory("storm", f.agents)
	regTook, err := c.registerBatch(nodes)
	if err != nil {
		return err
	}
	logf("registered %d nodes with one pact node enroll --batch in %.2fs (%.0f/s)", len(nodes), regTook.Seconds(), float64(len(nodes))/regTook.Seconds())

	kx, err := wire.ParseKeyExchange(f.keyExchange)
	if err != nil {
		return err
	}
	curve, err := probeCurve(c.journals[0].grpc, c.roots, kx)
	if err != nil {
		return fmt.Errorf("TLS probe of %s: %w", c.journals[0].id, err)
	}
	logf("the journals negotiate %v with an agent offering %s; the ceiling does the same", curve, kx)
	kit, err := newCeilingKit(dir, !f.pregen, curve)
	if err != nil {
		return err
	}
	idle(f, c)
	logf("enroll ceiling: keygen+CSR %v, TLS 1.3 handshake (both sides), ParseCSR, SignAgent, flat out for %v", !f.pregen, f.ceiling)
	ceilE, err := kit.run(f.ceiling, false)
	if err != nil {
		return fmt.Errorf("enroll ceiling: %w", err)
	}
	signRate, signCPU, err := kit.signOnly(time.Second)
	if err != nil {
		return err
	}
	logf("signing only (ca.ParseCSR + ca.SignAgent, one goroutine): %.0f/s, %.3f ms CPU each", signRate, ms(signCPU))
	logf("enroll ceiling: %.0f/s, %.3f ms CPU each (journal's part %.3f ms, agent's part %.3f ms); other processes used %.0f%% of the machine meanwhile", ceilE.perSec, ms(ceilE.cpuOp), ms(ceilE.serverOp), ms(ceilE.clientOp), 100*ceilE.others)

	agents := make([]*simAgent, len(nodes))
	for i, n := range nodes {
		agents[i] = &simAgent{idx: i, node: n}
	}
	st := &storm{kind: stormEnroll, agents: agents, addrs: c.addrs(), roots: c.roots,
		concurrency: f.concurrency, spread: f.spread, keygen: !f.pregen, deadline: f.deadline, kx: kx}
	enrollRes, err := runOneStorm(c, st, f, dir)
	if err != nil {
		return err
	}
	counts, _, err := c.stateCounts(0, nodes[len(nodes)-1].id)
	if err != nil {
		return err
	}
	logf("pact node list -o json after the enroll storm: %v", counts)

	var renewRes *stormResult
	var ceilR ceilingResult
	var renewCounts map[string]int
	renewed := 0
	if f.renew {
		idle(f, c)
		logf("renew ceiling: keygen+CSR %v, TLS 1.3 handshake with client certificate (both sides, chain verified), ParseCSR, SignAgent, flat out for %v", !f.pregen, f.ceiling)
		if ceilR, err = kit.run(f.ceiling, true); err != nil {
			return fmt.Errorf("renew ceiling: %w", err)
		}
		logf("renew ceiling: %.0f/s, %.3f ms CPU each (journal's part %.3f ms, agent's part %.3f ms); other processes used %.0f%% of the machine meanwhile", ceilR.perSec, ms(ceilR.cpuOp), ms(ceilR.serverOp), ms(ceilR.clientOp), 100*ceilR.others)
		var enrolled []*simAgent
		before := map[string]string{}
		for _, a := range agents {
			if a.err == nil && a.chain != nil {
				enrolled = append(enrolled, a)
				before[a.node.id] = a.serial
			}
		}
		st := &storm{kind: stormRenew, agents: enrolled, addrs: c.addrs(), roots: c.roots,
			concurrency: f.concurrency, spread: f.spread, keygen: !f.pregen, deadline: f.deadline, kx: kx}
		if renewRes, err = runOneStorm(c, st, f, dir); err != nil {
			return err
		}
		var list []nodeJSON
		if renewCounts, list, err = c.stateCounts(0, nodes[len(nodes)-1].id); err != nil {
			return err
		}
		for _, n := range list {
			if old, ok := before[n.NodeID]; ok && n.State == "active" && !strings.EqualFold(n.CertSerial, old) && n.CertSerial != "" {
				renewed++
			}
		}
		logf("pact node list -o json after the renew storm: %v; %d nodes hold a new certificate", renewCounts, renewed)
	}

	report(f, regTook, curve, signRate, signCPU, ceilE, enrollRes, counts, ceilR, renewRes, renewed)
	if counts["active"] != f.agents {
		return fmt.Errorf("only %d of %d nodes are active after the storm", counts["active"], f.agents)
	}
	return nil
}

var leaderRE = regexp.MustCompile(`msg="entering leader state"`)

// runOneStorm runs st with the journals' CPU, memory, leader changes and
// refusals measured (and perf recording them when asked).
func runOneStorm(c *cluster, st *storm, f stormFlags, dir string) (*stormResult, error) {
	if err := st.prepare(); err != nil {
		return nil, err
	}
	leadersBefore := c.countInLogs(leaderRE)
	e0, r0 := c.enrollCounters()
	var perf *exec.Cmd
	if f.perf {
		perf = startPerf(c.pids(), filepath.Join(dir, "perf-"+st.kind.String()+".data"))
	}
	idle(f, c)
	logf("%s storm: %d agents arriving over %v, load generator works on %s at once", st.kind, len(st.agents), f.spread, concurrencyName(f.concurrency))
	var prof *os.File
	if f.cpuprofile != "" {
		var err error
		if prof, err = os.Create(f.cpuprofile + "." + st.kind.String()); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(prof); err != nil {
			return nil, err
		}
	}
	res := st.run(c.pids())
	if prof != nil {
		pprof.StopCPUProfile()
		prof.Close()
		logf("load generator CPU profile: %s", prof.Name())
	}
	if perf != nil {
		base := filepath.Join(dir, "perf-"+st.kind.String())
		stopPerf(perf, base)
		if shares, total, err := categorizePerf(base + ".data"); err != nil {
			logf("-perf: perf script: %v", err)
		} else {
			txt := formatShares(shares, total, ms(res.journalCPUPerOp()))
			_ = os.WriteFile(base+"-categories.txt", []byte(txt), 0o644)
			fmt.Fprint(os.Stderr, txt)
		}
	}
	e1, r1 := c.enrollCounters()
	res.leaderChanges = c.countInLogs(leaderRE) - leadersBefore
	res.journalCounters = map[string]float64{}
	a, b := e0, e1
	if st.kind == stormRenew {
		a, b = r0, r1
	}
	for k, v := range b {
		if d := v - a[k]; d != 0 {
			res.journalCounters[k] = d
		}
	}
	logf("%s storm: %d ok, %d failed in %.2fs (%.0f/s), p50 %.0f ms, p99 %.0f ms; journals answered %v; retried failures %v; leader changes %d; other processes used %.0f%% of the machine meanwhile",
		st.kind, res.ok, res.failed, res.wall.Seconds(), res.perSec, ms(res.pct(0.50)), ms(res.pct(0.99)), res.journalCounters, res.failures, res.leaderChanges, 100*res.others)
	for _, e := range res.firstErrs {
		logf("  failed: %s", e)
	}
	return res, nil
}

// idle waits (bounded by -wait-idle) for other users of the machine to
// quiet down.
func idle(f stormFlags, c *cluster) {
	if f.waitIdle <= 0 {
		return
	}
	if share := waitIdle(f.waitIdle, 0.15, c.pids()); share > 0.15 {
		logf("the machine is busy: other processes use %.0f%% of it; going ahead after waiting %v", 100*share, f.waitIdle)
	}
}

func concurrencyName(n int) string {
	if n <= 0 {
		return "every agent"
	}
	return fmt.Sprintf("at most %d agents", n)
}

func startPerf(pids []int, out string) *exec.Cmd {
	if _, err := exec.LookPath("perf"); err != nil {
		logf("-perf: perf(1) not found; not recording")
		return nil
	}
	var ps []string
	for _, p := range pids {
		ps = append(ps, fmt.Sprint(p))
	}
	cmd := exec.Command("perf", "record", "-F", "499", "-g", "-p", strings.Join(ps, ","), "-o", out)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		logf("-perf: %v", err)
		return nil
	}
	time.Sleep(300 * time.Millisecond) // let it attach
	return cmd
}

func stopPerf(cmd *exec.Cmd, base string) {
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	out, err := exec.Command("perf", "report", "-i", base+".data", "--stdio", "--no-children",
		"--sort", "sym", "--percent-limit", "0.4", "-g", "none").Output()
	if err != nil {
		logf("-perf: perf report: %v", err)
		return
	}
	_ = os.WriteFile(base+".txt", out, 0o644)
	logf("perf profile: %s.data, flat report %s.txt", base, base)
}

// cpuRatio is the ceiling's CPU per operation over the storm's: the share
// of the CPU the storm spent that the unavoidable crypto accounts for.
func cpuRatio(c ceilingResult, s *stormResult) float64 {
	if s.cpuPerOp() == 0 {
		return 0
	}
	return float64(c.cpuOp) / float64(s.cpuPerOp())
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

func report(f stormFlags, regTook time.Duration, curve tls.CurveID, signRate float64, signCPU time.Duration, ceilE ceilingResult, e *stormResult, counts map[string]int, ceilR ceilingResult, r *stormResult, renewed int) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(os.Stdout, "\npact boot storm: %d agents, %d journals (bbolt on disk), %d CPUs, agents arrive over %v, load generator works on %s at once, keygen+CSR %s\n\n",
		f.agents, f.journals, runtime.NumCPU(), f.spread, concurrencyName(f.concurrency), map[bool]string{true: "before the timed phase", false: "at arrival (timed)"}[f.pregen])
	fmt.Fprintln(w, "storm\tok\tfailed\tseconds\tper s\tp50 ms\tp99 ms\tmax ms\trpc p99 ms\tattempts\tCPU ms/op\tjournals ms/op\tceiling/s\tceiling CPU ms/op\tratio\tCPU ratio\tleader changes\tothers' CPU\t")
	row := func(name string, s *stormResult, c ceilingResult) {
		fmt.Fprintf(w, "%s\t%d\t%d\t%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%.3f\t%.3f\t%.0f\t%.3f\t%.2f\t%.2f\t%d\t%.0f%% / %.0f%%\t\n",
			name, s.ok, s.failed, s.wall.Seconds(), s.perSec, ms(s.pct(0.5)), ms(s.pct(0.99)), ms(s.pct(1)), ms(percentile(s.calls, 0.99)),
			s.attempts, ms(s.cpuPerOp()), ms(s.journalCPUPerOp()), c.perSec, ms(c.cpuOp), s.perSec/c.perSec, cpuRatio(c, s), s.leaderChanges, 100*s.others, 100*c.others)
	}
	row("enroll", e, ceilE)
	if r != nil {
		row("renew", r, ceilR)
	}
	w.Flush()
	fmt.Fprintln(os.Stdout)
	fmt.Fprintln(w, "CPU ms/op\tjournals\tjournal's part of the ceiling\tjournal ratio\tload generator\tagent's part of the ceiling\tagent ratio\t")
	split := func(name string, s *stormResult, c ceilingResult) {
		fmt.Fprintf(w, "%s\t%.3f\t%.3f\t%.2f\t%.3f\t%.3f\t%.2f\t\n", name, ms(s.journalCPUPerOp()), ms(c.serverOp), ratio(c.serverOp, s.journalCPUPerOp()),
			ms(s.genCPUPerOp()), ms(c.clientOp), ratio(c.clientOp, s.genCPUPerOp()))
	}
	split("enroll", e, ceilE)
	if r != nil {
		split("renew", r, ceilR)
	}
	w.Flush()
	fmt.Fprintf(os.Stdout, "\nregistration: %d nodes in %.2fs with one pact node enroll --batch\n", f.agents, regTook.Seconds())
	fmt.Fprintf(os.Stdout, "enroll: journals answered %v; agents retried after %v\n", e.journalCounters, e.failures)
	if r != nil {
		fmt.Fprintf(os.Stdout, "renew: journals answered %v; agents retried after %v; %d nodes hold a renewed certificate\n", r.journalCounters, r.failures, renewed)
	}
	fmt.Fprintf(os.Stdout, "registry after the storm: %v\n", counts)
	fmt.Fprintf(os.Stdout, "signing only (ca.ParseCSR + ca.SignAgent) on one core: %.0f/s, %.3f ms CPU each: 10,000 in %.1f s (ADR-008 assumed ~1 ms, ~10 s)\n", signRate, ms(signCPU), 10000/signRate)
	fmt.Fprintf(os.Stdout, "TLS key exchange the journals negotiate (and the ceiling uses): %v\n", curve)
	fmt.Fprintf(os.Stdout, "max journal RSS: %.0f MB\n", float64(e.rssMax)/(1<<20))
	fmt.Fprintln(os.Stdout, "CPU ms/op counts every journal process and the load generator; ratio = per s / ceiling per s; CPU ratio = ceiling CPU ms/op / CPU ms/op;")
	fmt.Fprintln(os.Stdout, "others' CPU = share of the machine other users' processes took during the storm / during its ceiling (a shared machine: trust the CPU ratio more than the ratio when these differ)")
	fmt.Fprintln(os.Stdout)

	out := map[string]any{
		"bench":                     "storm",
		"agents":                    f.agents,
		"journals":                  f.journals,
		"cpus":                      runtime.NumCPU(),
		"concurrency":               f.concurrency,
		"spread_s":                  f.spread.Seconds(),
		"keygen_timed":              !f.pregen,
		"register_s":                round(regTook.Seconds(), 3),
		"active":                    counts["active"],
		"enroll_failed":             e.failed,
		"seconds_to_all_active":     round(e.wall.Seconds(), 3),
		"enroll_per_s":              round(e.perSec, 1),
		"p50_ms":                    round(ms(e.pct(0.5)), 1),
		"p99_ms":                    round(ms(e.pct(0.99)), 1),
		"max_ms":                    round(ms(e.pct(1)), 1),
		"rpc_p99_ms":                round(ms(percentile(e.calls, 0.99)), 1),
		"enroll_attempts":           e.attempts,
		"cpu_ms_per_enroll":         round(ms(e.cpuPerOp()), 3),
		"journal_cpu_ms_per_enroll": round(ms(e.journalCPUPerOp()), 3),
		"journal_rss_mb":            round(float64(e.rssMax)/(1<<20), 1),
		"leader_changes":            e.leaderChanges,
		"key_exchange":              curve.String(),
		"sign_only_per_s_one_core":  round(signRate, 0),
		"sign_only_cpu_ms":          round(ms(signCPU), 3),
		"ceiling_per_s":             round(ceilE.perSec, 1),
		"ceiling_cpu_ms_per_enroll": round(ms(ceilE.cpuOp), 3),
		"ratio_to_ceiling":          round(e.perSec/ceilE.perSec, 3),
		"cpu_ratio_to_ceiling":      round(cpuRatio(ceilE, e), 3),
		"loadgen_cpu_ms_per_enroll": round(ms(e.genCPUPerOp()), 3),
		"ceiling_journal_cpu_ms":    round(ms(ceilE.serverOp), 3),
		"ceiling_agent_cpu_ms":      round(ms(ceilE.clientOp), 3),
		"journal_cpu_ratio":         round(ratio(ceilE.serverOp, e.journalCPUPerOp()), 3),
		"other_cpu_share":           round(e.others, 3),
		"ceiling_other_cpu_share":   round(ceilE.others, 3),
	}
	if r != nil {
		out["renewed"] = renewed
		out["renew_failed"] = r.failed
		out["renew_seconds"] = round(r.wall.Seconds(), 3)
		out["renew_per_s"] = round(r.perSec, 1)
		out["renew_p50_ms"] = round(ms(r.pct(0.5)), 1)
		out["renew_p99_ms"] = round(ms(r.pct(0.99)), 1)
		out["cpu_ms_per_renew"] = round(ms(r.cpuPerOp()), 3)
		out["renew_journal_rss_mb"] = round(float64(r.rssMax)/(1<<20), 1)
		out["renew_leader_changes"] = r.leaderChanges
		out["renew_ceiling_per_s"] = round(ceilR.perSec, 1)
		out["renew_ceiling_cpu_ms"] = round(ms(ceilR.cpuOp), 3)
		out["renew_ratio_to_ceiling"] = round(r.perSec/ceilR.perSec, 3)
		out["renew_cpu_ratio_to_ceiling"] = round(cpuRatio(ceilR, r), 3)
		out["journal_cpu_ms_per_renew"] = round(ms(r.journalCPUPerOp()), 3)
		out["renew_journal_cpu_ratio"] = round(ratio(ceilR.serverOp, r.journalCPUPerOp()), 3)
		out["renew_other_cpu_share"] = round(r.others, 3)
		out["renew_ceiling_other_cpu_share"] = round(ceilR.others, 3)
	}
	b, _ := json.Marshal(out)
	fmt.Fprintln(os.Stdout, string(b))
}
