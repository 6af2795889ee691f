package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/pact-hpc/pact/internal/transport"
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
	oneSource   bool
	deadline    time.Duration
	perf        bool
	cpuprofile  string
	memprofile  string
	journalArgs string
	journalEnv  string
	waitIdle    time.Duration
	keyExchange string
	workers     int
	// loadgenNice: the load generator's nice value above the journals'
	// (nice.go); 0 shares the CPU equally.
	loadgenNice int
	floor       bool
	floorClient string
	// floorReplicate: the floor's stubs commit one Raft entry per
	// certificate (floorraft.go); false is the old floor, which keeps
	// nothing.
	floorReplicate bool
	// tpm: every node is registered with its (simulated) TPM's EK hash
	// and enrolls and renews with a full TPM round under a boot policy
	// (simtpm.go); tpmEK is the endorsement keys' kind; tpmDir holds the
	// TPMs' keys and event logs (set by the storm, for its workers).
	tpm    bool
	tpmEK  string
	tpmDir string
}

func runStorm(args []string) int {
	var f stormFlags
	fs := newStormFlagSet("stormbench storm", &f)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := checkStormFlags(&f, fs); err != nil {
		fmt.Fprintf(os.Stderr, "stormbench: %v\n", err)
		return 2
	}
	if f.workers == 0 {
		f.workers = autoWorkers(f.agents, fileLimit())
	}
	if f.workers == 1 {
		checkFiles(f.agents)
	}
	if f.floor {
		if f.tpm {
			logf("-tpm: the floor does not attest; its stub journals get no TPM round")
			f.tpm = false
		}
		return runIn(f.dir, f.keep, func(dir string, cl *cleanup) error {
			return floorMain(f, dir, cl, os.Stdout)
		})
	}
	return runIn(f.dir, f.keep, func(dir string, cl *cleanup) error {
		_, err := stormMain(f, dir, cl, os.Stdout)
		return err
	})
}

// newStormFlagSet defines storm's flags into f; pair (pair.go) takes the
// same ones and hands them to each of its runs.
func newStormFlagSet(name string, f *stormFlags) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.IntVar(&f.agents, "agents", 10000, "agents (= registered nodes), each pact-agent's own code in the load generator")
	fs.IntVar(&f.journals, "journals", 3, "journals in the quorum")
	fs.StringVar(&f.bin, "bin", "bin", "directory holding pact-journal and pact (make build)")
	fs.StringVar(&f.dir, "dir", "", "working directory for the domain root, data and logs (default: a new temporary directory, removed at the end unless -keep)")
	fs.BoolVar(&f.keep, "keep", false, "keep the working directory")
	fs.IntVar(&f.concurrency, "concurrency", 0, "0: every agent runs from its arrival (real agents cannot coordinate); N: the load generator lets at most N agents work at once, each holding its slot until it streams (not the headline)")
	fs.DurationVar(&f.spread, "spread", time.Second, "agents arrive evenly spread over this window")
	fs.DurationVar(&f.ceiling, "ceiling", 3*time.Second, "how long to run each crypto ceiling")
	fs.BoolVar(&f.renew, "renew", true, "run the renewal storm after the enrollment storm")
	fs.BoolVar(&f.oneSource, "one-source", false, "connect every agent from 127.0.0.1, so the journals' per-source limits see one address for all nodes; by default each agent has a loopback address of its own (127.1.x.y), as each node of a site has")
	fs.DurationVar(&f.deadline, "deadline", 10*time.Minute, "give up on a storm after this long (agents still trying count as abandoned)")
	fs.BoolVar(&f.perf, "perf", false, "record the journals with perf(1) during each storm (DIR/perf-*.data and a flat report DIR/perf-*.txt)")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a pprof CPU profile of the load generator (the agents) during each storm to FILE.enroll and FILE.renew (with workers, one per worker: FILE.enroll.wN, FILE.renew.wN)")
	fs.StringVar(&f.memprofile, "memprofile", "", "write a pprof heap profile of the load generator to FILE, and its goroutines by stack to FILE.goroutines, once every agent of the enrollment storm streams, after a GC (with workers, one per worker: FILE.wN)")
	fs.IntVar(&f.loadgenNice, "loadgen-nice", 0, "run the load generator (the agents) at this nice value, the journals (or the floor's stubs) at their own, so the journals get the cores when they have work, as on hosts of their own (nice.go); 0, the default, shares the CPU equally: at 10 the 30,000-agent storm's agents, starved, let their handshakes and keepalives time out (docs/benchmarks.md)")
	fs.IntVar(&f.workers, "workers", 0, "load-generator processes the agents are split over: 0 picks one while the open-file limit holds every agent (and always for up to half the limit), else the fewest whose shares fit")
	fs.StringVar(&f.journalArgs, "journal-args", "", "extra flags for every pact-journal (with -floor: for every stub journal, e.g. -admission=false), space-separated")
	fs.StringVar(&f.journalEnv, "journal-env", "", "extra environment for every pact-journal (with -floor: every stub journal), space-separated (e.g. GOGC=200)")
	fs.StringVar(&f.keyExchange, "key-exchange", string(transport.Classical), "TLS key exchange the agents offer, as pact-agent --key-exchange (x25519 or x25519mlkem768); run the journals with the same through -journal-args")
	fs.BoolVar(&f.floor, "floor", false, "run the storm against stub journals that do the ceiling's work behind gRPC and commit one Raft entry per certificate (no registry, authentication or rate limits; floor.go, floorraft.go; -floor-replicate=false: the old floor, which keeps nothing): the least a journal of this design could do on this machine, to compare with the storm")
	fs.BoolVar(&f.floorReplicate, "floor-replicate", true, "with -floor, the stubs commit one Raft entry per enrollment and renewal (hashicorp/raft + raft-boltdb on three nodes over mTLS, pact-journal's Raft settings; floorraft.go); false: the old floor, which keeps nothing")
	fs.StringVar(&f.floorClient, "floor-client", "pact", "with -floor, the clients: pact (pact-agent's own code, as in the storm) or bare (bareclient: the least a node can do with gRPC; enrollment storm only)")
	fs.BoolVar(&f.tpm, "tpm", false, "every node is registered with the EK hash of a TPM simulated in the load generator (real keys, TPM2_ActivateCredential, a TPMS_ATTEST quote signed by the AK, a TCG event log replaying to the quoted PCRs; simtpm.go) and enrolls and renews with a full TPM round under an enforced boot policy its boot matches: what attestation costs the journals (the floor does not attest: -floor ignores it)")
	fs.StringVar(&f.tpmEK, "tpm-ek", "rsa", "with -tpm, the simulated TPMs' endorsement keys: rsa (RSA-2048 from the TCG template, as pact-agent derives it; made once and kept in the user's cache directory) or ecc (P-256)")
	fs.DurationVar(&f.waitIdle, "wait-idle", 0, "before each ceiling and storm, wait up to this long for a second in which other processes use less than 15% of the machine (a shared machine)")
	return fs
}

// checkStormFlags rejects flags a storm could only fail at later.
func checkStormFlags(f *stormFlags, fs *flag.FlagSet) error {
	if f.agents < 1 || f.journals < 1 || f.workers < 0 || f.workers > f.agents {
		return errors.New("-agents and -journals must be positive, -workers from 0 to -agents")
	}
	if f.tpm && !slices.Contains(simEKKinds, f.tpmEK) {
		return fmt.Errorf("-tpm-ek %q: want one of %v", f.tpmEK, simEKKinds)
	}
	return checkFloorFlags(f, fs)
}

// checkFiles raises this process's open-file limit to its hard limit and
// warns when that is still short of what its agents need: a connection
// each (an Enroll connection, then a channel), and a second one for those
// moving to a new channel at the same moment.
func checkFiles(agents int) {
	limit := fileLimit()
	if need := uint64(agents*3/2 + fdMargin); limit != 0 && limit < need {
		logf("warning: the open-file limit is %d; %d agents in one process may need up to %d (ulimit -n, or -workers)", limit, agents, need)
	}
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

// stormOutcome is what a run measured and checked.
type stormOutcome struct {
	enroll, renew *stormResult
	chk           *checks
}

// loadgen runs the storms' agents: in this process (inProcess) or split
// over worker processes (workerPool, workers.go).
type loadgen interface {
	// run runs one storm of kind with the agents idxs (inventory
	// indices) arriving spread over -spread, measuring the journal
	// processes pids, and returns the result and each agent's record.
	run(kind stormKind, idxs []int, pids []int) (*stormResult, []agentRecord, error)
}

// newStorm is the storm every load-generator process sets up, in this
// process or in a worker: the agents' configuration (storm.agentConfig)
// has this one source.
// With tpms (storm -tpm), each agent proves its node with its simulated
// TPM.
func newStorm(f stormFlags, addrs []string, caFile string, agents []*benchAgent, tpms *simFleet, life context.Context) (*storm, error) {
	kx, err := transport.ParseKeyExchange(f.keyExchange)
	if err != nil {
		return nil, err
	}
	return &storm{kind: stormEnroll, agents: agents, addrs: addrs, caFile: caFile,
		concurrency: f.concurrency, spread: f.spread, deadline: f.deadline, kx: kx, oneSource: f.oneSource,
		tpms: tpms, life: life, log: slog.New(slog.DiscardHandler)}, nil
}

// inProcess runs every agent in this process.
type inProcess struct {
	s          *storm
	profile    string // -cpuprofile
	memprofile string // -memprofile
}

func (p *inProcess) run(kind stormKind, idxs []int, pids []int) (*stormResult, []agentRecord, error) {
	p.s.kind = kind
	var heap heapFigures
	if kind == stormEnroll {
		heap.Base = liveHeap()
	}
	if p.profile != "" {
		stop, err := startProfile(p.profile + "." + kind.String())
		if err != nil {
			return nil, nil, err
		}
		defer stop()
	}
	res, recs := p.s.runArrivals(pids, schedule(idxs, p.s.spread))
	if kind == stormEnroll {
		if err := measureAgents(&heap, p.memprofile); err != nil {
			return nil, nil, err
		}
		res.heap = heap
	}
	return res, recs, nil
}

func stormMain(f stormFlags, dir string, cl *cleanup, out io.Writer) (*stormOutcome, error) {
	if f.workers < 1 {
		f.workers = 1
	}
	logf("machine: %d CPUs (GOMAXPROCS %d), %s/%s, %s; working directory %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version(), dir)
	c, err := newCluster(f.bin, dir, f.journals, strings.Fields(f.journalArgs), strings.Fields(f.journalEnv))
	if err != nil {
		return nil, err
	}
	cl.add(c.stopAll)
	if err := c.startAll(90 * time.Second); err != nil {
		return nil, err
	}
	logf("%d journals serving on %s", f.journals, strings.Join(c.addrs(), ","))

	nodes := inventory("storm", f.agents)
	var tpms *simFleet
	if f.tpm {
		f.tpmDir = filepath.Join(dir, "tpm")
		if tpms, err = makeSimFleet(f.tpmDir, f.tpmEK, nodes); err != nil {
			return nil, fmt.Errorf("-tpm: %w", err)
		}
		for i := range nodes {
			nodes[i].ekHash = tpms.tpms[i].ekHash
		}
		if err := c.setBootPolicy(tpms); err != nil {
			return nil, fmt.Errorf("-tpm: %w", err)
		}
	}
	regTook, err := c.registerBatch(nodes)
	if err != nil {
		return nil, err
	}
	logf("registered %d nodes with one pact node enroll --batch in %.2fs (%.0f/s)", len(nodes), regTook.Seconds(), float64(len(nodes))/regTook.Seconds())

	kx, err := transport.ParseKeyExchange(f.keyExchange)
	if err != nil {
		return nil, err
	}
	curve, err := probeCurve(c.journals[0].grpc, c.roots, kx)
	if err != nil {
		return nil, fmt.Errorf("TLS probe of %s: %w", c.journals[0].id, err)
	}
	logf("the journals negotiate %v with an agent offering %s; the ceiling does the same", curve, kx)
	kit, err := newCeilingKit(dir, curve)
	if err != nil {
		return nil, err
	}
	// Both ceilings before the storms, while this process runs no agent.
	idle(f, c)
	logf("enroll ceiling: keygen+CSR, TLS 1.3 handshake (both sides), ParseCSR, SignAgent, then an mTLS handshake (both sides, the agent's channel), flat out for %v", f.ceiling)
	probe := startProbe()
	ceilE, err := kit.run(f.ceiling, false)
	ceilE.probe = probe.finish()
	if err != nil {
		return nil, fmt.Errorf("enroll ceiling: %w", err)
	}
	logf("enroll ceiling: %.0f/s, %.3f ms CPU each (journal's part %.3f ms, agent's part %.3f ms); other processes used %.0f%% of the machine meanwhile", ceilE.perSec, ms(ceilE.cpuOp), ms(ceilE.serverOp), ms(ceilE.clientOp), 100*ceilE.others)
	var ceilR ceilingResult
	if f.renew {
		idle(f, c)
		logf("renew ceiling: keygen+CSR, ParseCSR, SignAgent, an mTLS handshake (both sides, the new channel), flat out for %v", f.ceiling)
		probe := startProbe()
		ceilR, err = kit.run(f.ceiling, true)
		ceilR.probe = probe.finish()
		if err != nil {
			return nil, fmt.Errorf("renew ceiling: %w", err)
		}
		logf("renew ceiling: %.0f/s, %.3f ms CPU each (journal's part %.3f ms, agent's part %.3f ms); other processes used %.0f%% of the machine meanwhile", ceilR.perSec, ms(ceilR.cpuOp), ms(ceilR.serverOp), ms(ceilR.clientOp), 100*ceilR.others)
	}
	// Short runs (tests) shorten these too; the default (3 s) keeps 1 s.
	short := min(time.Second, f.ceiling)
	signRate, signCPU, err := kit.signOnly(short)
	if err != nil {
		return nil, err
	}
	logf("signing only (ca.ParseCSR + ca.SignAgent, one goroutine): %.0f/s, %.3f ms CPU each", signRate, ms(signCPU))
	price, err := kit.price(short)
	if err != nil {
		return nil, err
	}
	logf("unit prices (both sides): keygen+CSR %.3f ms, TLS handshake %.3f ms, mTLS handshake %.3f ms, ParseCSR+SignAgent %.3f ms", ms(price.keygen), ms(price.tls), ms(price.mtls), ms(price.sign))

	caFile := filepath.Join(dir, "ca.pem")
	if err := lowerPriority(f.loadgenNice); err != nil {
		return nil, err
	}
	var lg loadgen
	if f.workers > 1 {
		logf("the load generator: %d agents over %d worker processes (open-file limit %d per process)", f.agents, f.workers, fileLimit())
		pool, err := startWorkers(f, f.workers, c.addrs(), caFile)
		if err != nil {
			return nil, err
		}
		cl.add(pool.stop) // before the journals stop
		lg = pool
	} else {
		life, stop := context.WithCancel(context.Background())
		agents := benchAgents(nodes, 0, len(nodes))
		cl.add(func() { stop(); stopAgents(agents) }) // before the journals stop
		st, err := newStorm(f, c.addrs(), caFile, agents, tpms, life)
		if err != nil {
			return nil, err
		}
		lg = &inProcess{s: st, profile: f.cpuprofile, memprofile: f.memprofile}
	}
	all := make([]int, len(nodes))
	for i := range all {
		all[i] = i
	}
	probe = startProbe()
	enrollRes, enrollRecs, err := runOneStorm(c, lg, stormEnroll, all, f, dir)
	if err != nil {
		probe.finish()
		return nil, err
	}
	enrollRes.probe = probe.finish()
	chk := &checks{}
	chk.enroll(c, nodes, enrollRes)
	if f.tpm {
		chk.attested(stormEnroll, enrollRes, len(nodes))
	}
	if am, err := c.measureAgentProcess(dir, caFile); err != nil {
		logf("a real pact-agent process: %v (not reported)", err)
	} else {
		enrollRes.agentProc = &am
		logf("a real pact-agent process streaming for one more node: VmRSS %.1f MB (RssAnon %.1f MB), VmHWM %.1f MB", mb(am.rss), mb(am.anon), mb(am.hwm))
	}
	// The real agent's stream ends a moment after its process: wait for
	// the journals to count it gone, or the renewal storm's drop check
	// could count it as the storm's.
	c.settledStreams(chk.streams)

	var renewRes *stormResult
	if f.renew {
		var enrolled []int
		for _, r := range enrollRecs {
			if !r.Failed && r.Serial != "" {
				enrolled = append(enrolled, r.Idx)
			}
		}
		var renewRecs []agentRecord
		ends := c.streamEnds()
		probe := startProbe()
		renewRes, renewRecs, err = runOneStorm(c, lg, stormRenew, enrolled, f, dir)
		if err != nil {
			probe.finish()
			return nil, err
		}
		renewRes.probe = probe.finish()
		chk.renew(c, nodes, renewRecs, renewRes)
		if f.tpm {
			chk.attested(stormRenew, renewRes, len(enrolled))
		}
		chk.renewEnds(ends, c.streamEnds(), renewalGraceOff(strings.Fields(f.journalArgs), strings.Fields(f.journalEnv)))
	}
	report(out, f, regTook, curve, signRate, signCPU, price, ceilE, enrollRes, ceilR, renewRes, chk)
	res := &stormOutcome{enroll: enrollRes, renew: renewRes, chk: chk}
	if !chk.pass() {
		return res, fmt.Errorf("the final check failed: %s", chk.reason())
	}
	return res, nil
}

// checks is the journals' confirmation of what the agents reported.
type checks struct {
	counts  map[string]int // registry after the enrollment storm, by state
	streams int            // pact_journal_streams_open, summed, after the enrollment storm
	// notActiveFirst is how many nodes the registry did not list Active
	// at the first look after the enrollment storm: nodes that went
	// without a stream for the heartbeat timeout while the storm lasted
	// (Inactive) and whose stream the next digest reports (Active again).
	notActiveFirst int
	renewCounts    map[string]int
	renewStreams   int
	renewed        int // nodes whose registry serial is the agent's new one
	// renewDrops and renewHandovers are the stream ends the journals
	// counted during the renewal storm (pact_journal_stream_drops_total,
	// every reason; pact_journal_stream_handovers_total), summed;
	// renewDropsBy the drops by reason.
	renewDrops, renewHandovers float64
	renewDropsBy               map[string]float64
	problems                   []string
}

// streamEnds are the journals' stream ends so far, summed over them.
type streamEnds struct {
	drops     map[string]float64 // pact_journal_stream_drops_total by reason
	handovers float64            // pact_journal_stream_handovers_total
}

// streamEnds reads every journal's stream drops (by reason) and handovers.
func (c *cluster) streamEnds() streamEnds {
	e := streamEnds{drops: map[string]float64{}}
	for i := range c.journals {
		if m, err := c.metrics(i); err == nil {
			for reason, v := range metricByLabel(m, "pact_journal_stream_drops_total", "reason") {
				e.drops[reason] += v
			}
			e.handovers += metricValue(m, "pact_journal_stream_handovers_total")
		}
	}
	return e
}

// renewEnds counts how the renewal storm's old streams ended: handed over
// to the node's new one, or dropped (by reason). With the journals'
// renewal grace (the default) a renewal must never drop a stream: any drop
// fails the run. With the grace turned off (graceOff) every renewal ends
// its old stream as superseded, so drops are reported only.
func (k *checks) renewEnds(before, after streamEnds, graceOff bool) {
	k.renewHandovers = after.handovers - before.handovers
	k.renewDrops, k.renewDropsBy = 0, map[string]float64{}
	for reason, v := range after.drops {
		if d := v - before.drops[reason]; d > 0 {
			k.renewDropsBy[reason] = d
			k.renewDrops += d
		}
	}
	logf("stream ends in the renew storm: %.0f handed over, %.0f dropped %v", k.renewHandovers, k.renewDrops, k.renewDropsBy)
	if !graceOff && k.renewDrops > 0 {
		k.fail("renew storm: the journals dropped %.0f streams %v (pact_journal_stream_drops_total); with --renewal-stream-grace a renewal hands its stream over", k.renewDrops, k.renewDropsBy)
	}
}

// renewalGraceOff reports whether the journals run with their renewal
// stream grace turned off (--renewal-stream-grace 0 in -journal-args, or
// PACT_RENEWAL_STREAM_GRACE=0 in -journal-env): flags win over the
// environment, as in pact-journal.
func renewalGraceOff(args, env []string) bool {
	zero := func(v string) bool {
		d, err := time.ParseDuration(v)
		return v == "0" || (err == nil && d == 0)
	}
	for i, a := range args {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "renewal-stream-grace" || !strings.HasPrefix(a, "-") {
			continue
		}
		if !hasVal && i+1 < len(args) {
			val = args[i+1]
		}
		return zero(val)
	}
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PACT_RENEWAL_STREAM_GRACE="); ok {
			return zero(v)
		}
	}
	return false
}

func (k *checks) fail(format string, args ...any) {
	k.problems = append(k.problems, fmt.Sprintf(format, args...))
}

func (k *checks) pass() bool { return len(k.problems) == 0 }

func (k *checks) reason() string {
	if k.pass() {
		return "every node active with one stream counted by the journals after each storm; no agent failed"
	}
	return strings.Join(k.problems, "; ")
}

// enroll confirms the enrollment storm with the journals: every node
// Active in the registry, and one stream per node in their metrics.
func (k *checks) enroll(c *cluster, nodes []benchNode, r *stormResult) {
	if r.failed > 0 {
		k.fail("enroll storm: %d agents failed or were abandoned", r.failed)
	}
	k.streams = c.settledStreams(len(nodes))
	logf("pact_journal_streams_open after the enroll storm: %d (of %d nodes)", k.streams, len(nodes))
	if k.streams != len(nodes) {
		k.fail("enroll storm: the journals hold %d streams for %d nodes", k.streams, len(nodes))
	}
	// A storm longer than the heartbeat timeout (5 minutes) leaves the
	// nodes that enrolled early and streamed late Inactive until the
	// journals' next digest reports their streams (docs/registry.md);
	// every node must be Active within a few digests.
	deadline := time.Now().Add(activeAgainWait)
	for first := true; ; first = false {
		counts, _, err := c.stateCounts(0, nodes[len(nodes)-1].id)
		if err != nil {
			k.fail("enroll storm: pact node list: %v", err)
			return
		}
		k.counts = counts
		if first {
			k.notActiveFirst = len(nodes) - counts["active"]
		}
		if counts["active"] == len(nodes) || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	logf("pact node list -o json after the enroll storm: %v (at the first look %d not active)", k.counts, k.notActiveFirst)
	if k.counts["active"] != len(nodes) {
		k.fail("enroll storm: %d of %d nodes active %v after the journals held every stream", k.counts["active"], len(nodes), activeAgainWait)
	}
}

// attested confirms a -tpm storm with the journals: every one of the n
// nodes went through a TPM round whose quote the boot policy matched
// (pact_journal_boot_policy_verdicts_total{verdict="match"}), and no
// answer was a refusal, so the storm measured attestations, not refusals.
func (k *checks) attested(kind stormKind, r *stormResult, n int) {
	if m := r.bootVerdicts["match"]; m < float64(n) {
		k.fail("%s storm (-tpm): the journals' boot policy matched %.0f quotes for %d nodes (verdicts %v)", kind, m, n, r.bootVerdicts)
	}
	if x := r.journalCount["refused"]; x > 0 {
		k.fail("%s storm (-tpm): the journals refused %.0f attempts", kind, x)
	}
}

// activeAgainWait is how long the final check waits for nodes marked
// Inactive during a long storm to be listed Active again: three digest
// intervals (10 s each by default).
const activeAgainWait = 30 * time.Second

// renew confirms the renewal storm: every node Active with the serial its
// agent now presents (a new one), and still one stream per node.
func (k *checks) renew(c *cluster, nodes []benchNode, recs []agentRecord, r *stormResult) {
	if r.failed > 0 {
		k.fail("renew storm: %d agents failed or were abandoned", r.failed)
	}
	counts, list, err := c.stateCounts(0, nodes[len(nodes)-1].id)
	if err != nil {
		k.fail("renew storm: pact node list: %v", err)
	}
	k.renewCounts = counts
	serial := map[string]string{}
	for _, n := range list {
		if n.State == "active" {
			serial[n.NodeID] = n.CertSerial
		}
	}
	for _, a := range recs {
		if s := serial[nodes[a.Idx].id]; s != "" && strings.EqualFold(s, a.Serial) && !strings.EqualFold(s, a.Before) {
			k.renewed++
		}
	}
	logf("pact node list -o json after the renew storm: %v; %d nodes hold the new certificate their agent presents", counts, k.renewed)
	if k.renewed != len(nodes) {
		k.fail("renew storm: %d of %d nodes hold a new certificate", k.renewed, len(nodes))
	}
	k.renewStreams = c.settledStreams(len(nodes))
	logf("pact_journal_streams_open after the renew storm: %d (of %d nodes)", k.renewStreams, len(nodes))
	if k.renewStreams != len(nodes) {
		k.fail("renew storm: the journals hold %d streams for %d nodes", k.renewStreams, len(nodes))
	}
}

// sumByLabel sums name by label over the running journals.
func (c *cluster) sumByLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for i := range c.journals {
		if !c.running(i) {
			continue
		}
		if m, err := c.metrics(i); err == nil {
			for k, v := range metricByLabel(m, name, label) {
				out[k] += v
			}
		}
	}
	return out
}

// sumMetric sums every sample of name over the running journals.
func (c *cluster) sumMetric(name string) float64 {
	var n float64
	for i := range c.journals {
		if !c.running(i) {
			continue
		}
		if m, err := c.metrics(i); err == nil {
			n += metricValue(m, name)
		}
	}
	return n
}

// settledStreams sums pact_journal_streams_open over the journals until
// it reads want, or for at most 30 s: a journal notices a replaced
// channel's stream end a moment after the agent moved.
func (c *cluster) settledStreams(want int) int {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, ok := 0, true
		for i := range c.journals {
			m, err := c.metrics(i)
			if err != nil {
				ok = false
				break
			}
			n += int(metricValue(m, "pact_journal_streams_open"))
		}
		if (ok && n == want) || time.Now().After(deadline) {
			return n
		}
		time.Sleep(250 * time.Millisecond)
	}
}

var leaderRE = regexp.MustCompile(`msg="entering leader state"`)

// runOneStorm runs one storm of kind with the agents idxs through lg,
// with the journals' CPU, memory, leader changes and refusals measured
// (and perf recording them when asked).
func runOneStorm(c *cluster, lg loadgen, kind stormKind, idxs []int, f stormFlags, dir string) (*stormResult, []agentRecord, error) {
	leadersBefore := c.countInLogs(leaderRE)
	e0, r0 := c.enrollCounters()
	closed0 := c.sumMetric("pact_journal_connections_refused_total")
	busy0 := c.sumMetric("pact_journal_connections_busy_total")
	batches0, batched0 := c.sumMetric("pact_journal_activation_batch_size_count"), c.sumMetric("pact_journal_activation_batch_size_sum")
	ct0, ctOK := conntrackDrops()
	timings0 := c.timings()
	verdicts0 := c.sumByLabel("pact_journal_boot_policy_verdicts_total", "verdict")
	var perf *exec.Cmd
	if f.perf {
		perf = startPerf(c.pids(), filepath.Join(dir, "perf-"+kind.String()+".data"))
	}
	idle(f, c)
	logf("%s storm: %d agents (pact-agent's own code, %s) arriving over %v; %s", kind, len(idxs), processesName(f.workers), f.spread, concurrencyName(f.concurrency))
	res, recs, err := lg.run(kind, idxs, c.pids())
	if err != nil {
		if perf != nil {
			_ = perf.Process.Kill()
			_ = perf.Wait()
		}
		return nil, nil, err
	}
	if perf != nil {
		finishPerf(perf, filepath.Join(dir, "perf-"+kind.String()), res)
	}
	e1, r1 := c.enrollCounters()
	res.timings = timingsDelta(timings0, c.timings())
	res.journalClosed = int(c.sumMetric("pact_journal_connections_refused_total") - closed0)
	res.journalBusy = int(c.sumMetric("pact_journal_connections_busy_total") - busy0)
	res.leaderChange = c.countInLogs(leaderRE) - leadersBefore
	res.batches = c.sumMetric("pact_journal_activation_batch_size_count") - batches0
	res.batched = c.sumMetric("pact_journal_activation_batch_size_sum") - batched0
	if ct1, ok := conntrackDrops(); ok && ctOK {
		res.conntrackDrops = int64(ct1 - ct0)
	} else {
		res.conntrackDrops = -1
	}
	res.bootVerdicts = map[string]float64{}
	for k, v := range c.sumByLabel("pact_journal_boot_policy_verdicts_total", "verdict") {
		if d := v - verdicts0[k]; d != 0 {
			res.bootVerdicts[k] = d
		}
	}
	res.journalCount = map[string]float64{}
	a, b := e0, e1
	if kind == stormRenew {
		a, b = r0, r1
	}
	for k, v := range b {
		if d := v - a[k]; d != 0 {
			res.journalCount[k] = d
		}
	}
	logf("%s storm: %d streaming, %d failed (%d abandoned) in %.2fs (%.0f/s), p50 %.0f ms, p99 %.0f ms from arrival; attempts %v; journals answered %v, answered %d connections busy (agents saw %d) and closed %d before their handshake; failed attempts %v; leader changes %d; %.0f Raft batches of %.2f commands on average; other processes used %.0f%% of the machine meanwhile",
		kind, res.ok, res.failed, res.abandoned, res.wall.Seconds(), res.perSec, ms(res.pct(0.50)), ms(res.pct(0.99)), res.byOp, res.journalCount, res.journalBusy, res.busy, res.journalClosed, res.failures, res.leaderChange, res.batches, res.meanBatch(), 100*res.others)
	logf("%s storm: the journals' connection timings (slot wait, TLS handshake, accept to first call): %s", kind, timingLine(res.timings))
	for _, e := range res.firstErrs {
		logf("  failed: %s", e)
	}
	for _, k := range slices.Sorted(maps.Keys(res.examples)) {
		logf("  a failed attempt %s: %s", k, res.examples[k])
	}
	return res, recs, nil
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

func processesName(n int) string {
	if n <= 1 {
		return "in one load-generator process"
	}
	return fmt.Sprintf("split over %d load-generator processes", n)
}

func concurrencyName(n int) string {
	if n <= 0 {
		return "every agent runs from its arrival, no load-generator bound"
	}
	return fmt.Sprintf("the load generator lets at most %d agents work at once", n)
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

// finishPerf stops the recording of a storm that ended with res, and
// prints and writes (BASE-categories.txt) the journals' CPU by activity.
func finishPerf(cmd *exec.Cmd, base string, res *stormResult) {
	stopPerf(cmd, base)
	shares, total, err := categorizePerf(base + ".data")
	if err != nil {
		logf("-perf: perf script: %v", err)
		return
	}
	txt := formatShares(shares, total, ms(res.journalCPUPerOp()))
	_ = os.WriteFile(base+"-categories.txt", []byte(txt), 0o644)
	fmt.Fprint(os.Stderr, txt)
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

// wastedShare is the share of all the CPU the storm used that went to
// attempts that ended refused, timed out or abandoned. Each attempt the
// agents reported is priced by the crypto it did (prices) and every
// attempt is assumed to carry the same overhead on top in proportion, so
// the share is wasted crypto over all crypto. cryptoOnly is the bare
// lower bound: wasted crypto over the CPU the processes really used.
func wastedShare(r *stormResult, p prices) (share, cryptoOnly float64) {
	all, waste := p.of(r.spent), p.of(r.wasted)
	total := r.journalCPUSum() + r.genCPU
	if all <= 0 || total <= 0 {
		return 0, 0
	}
	return float64(waste) / float64(all), float64(waste) / float64(total)
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

func report(out io.Writer, f stormFlags, regTook time.Duration, curve tls.CurveID, signRate float64, signCPU time.Duration, price prices, ceilE ceilingResult, e *stormResult, ceilR ceilingResult, r *stormResult, chk *checks) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "\npact boot storm: %d agents (pact-agent's own code, %s), %d journals (bbolt on disk), %d CPUs, agents arrive over %v, %s\n\n",
		f.agents, processesName(f.workers), f.journals, runtime.NumCPU(), f.spread, concurrencyName(f.concurrency))
	fmt.Fprintln(w, "storm\tstreaming\tfailed\tseconds\tper s\tp50 ms\tp99 ms\tmax ms\tattempts\tfailed attempts\twasted CPU\tCPU ms/op\tjournals ms/op\tceiling/s\tceiling CPU ms/op\tratio\tCPU ratio\tleader changes\tothers' CPU\t")
	row := func(name string, s *stormResult, c ceilingResult) {
		ws, _ := wastedShare(s, price)
		fmt.Fprintf(w, "%s\t%d\t%d\t%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%d\t%.1f%%\t%.3f\t%.3f\t%.0f\t%.3f\t%.2f\t%.2f\t%d\t%.0f%% / %.0f%%\t\n",
			name, s.ok, s.failed, s.wall.Seconds(), s.perSec, ms(s.pct(0.5)), ms(s.pct(0.99)), ms(s.pct(1)),
			s.attempts, s.failedTries, 100*ws, ms(s.cpuPerOp()), ms(s.journalCPUPerOp()), c.perSec, ms(c.cpuOp), s.perSec/c.perSec, cpuRatio(c, s), s.leaderChange, 100*s.others, 100*c.others)
	}
	row("enroll", e, ceilE)
	if r != nil {
		row("renew", r, ceilR)
	}
	w.Flush()
	fmt.Fprintln(out)
	fmt.Fprintln(w, "CPU ms/op\tjournals\tjournal's part of the ceiling\tjournal ratio\tagents (load generator)\tagent's part of the ceiling\tagent ratio\tloadgen processes\t")
	split := func(name string, s *stormResult, c ceilingResult) {
		fmt.Fprintf(w, "%s\t%.3f\t%.3f\t%.2f\t%.3f\t%.3f\t%.2f\t%d\t\n", name, ms(s.journalCPUPerOp()), ms(c.serverOp), ratio(c.serverOp, s.journalCPUPerOp()),
			ms(s.genCPUPerOp()), ms(c.clientOp), ratio(c.clientOp, s.genCPUPerOp()), f.workers)
	}
	split("enroll", e, ceilE)
	if r != nil {
		split("renew", r, ceilR)
	}
	w.Flush()
	fmt.Fprintf(out, "\nregistration: %d nodes in %.2fs with one pact node enroll --batch\n", f.agents, regTook.Seconds())
	fmt.Fprintf(out, "enroll: every node active after %.2fs, streaming after %.2fs; attempts by kind %v; failed attempts %v; journals answered %v\n", e.activeWall.Seconds(), e.wall.Seconds(), e.byOp, e.failures, e.journalCount)
	if r != nil {
		fmt.Fprintf(out, "renew: attempts by kind %v; failed attempts %v; journals answered %v; %d nodes hold the new certificate; %d attempts on a new channel (%.2f per renewed node)\n",
			r.byOp, r.failures, r.journalCount, chk.renewed, r.channels, perRenewal(r.channels, chk.renewed))
	}
	if f.tpm {
		fmt.Fprintf(out, "TPM attestation (-tpm, simulated TPMs with %s EKs): enroll: %.0f TPM challenges, boot policy verdicts %v, %.0f enrollments refused", ekName(f.tpmEK), e.journalCount["tpm_challenge"], e.bootVerdicts, e.journalCount["refused"])
		if r != nil {
			fmt.Fprintf(out, "; renew: %.0f TPM challenges, boot policy verdicts %v, %.0f renewals refused", r.journalCount["tpm_challenge"], r.bootVerdicts, r.journalCount["refused"])
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "enroll: the journals' connection timings (slot wait, TLS handshake, accept to first call; medians and 99th percentiles): %s\n", timingLine(e.timings))
	if r != nil {
		fmt.Fprintf(out, "renew: the journals' connection timings: %s\n", timingLine(r.timings))
	}
	fmt.Fprintf(out, "registry after the enroll storm: %v; streams the journals hold: %d\n", chk.counts, chk.streams)
	fmt.Fprintf(out, "unit prices (both sides): keygen+CSR %.3f ms, TLS handshake %.3f ms, mTLS handshake %.3f ms, ParseCSR+SignAgent %.3f ms\n", ms(price.keygen), ms(price.tls), ms(price.mtls), ms(price.sign))
	fmt.Fprintf(out, "signing only (ca.ParseCSR + ca.SignAgent) on one core: %.0f/s, %.3f ms CPU each\n", signRate, ms(signCPU))
	fmt.Fprintf(out, "TLS key exchange the journals negotiate (and the ceiling uses): %v\n", curve)
	fmt.Fprintf(out, "speed probe (thread CPU of one ECDSA P-256 sign and verify, median): enroll ceiling %.1f µs, enroll storm %.1f µs (%.2fx)", us(ceilE.probe), us(e.probe), ratio(e.probe, ceilE.probe))
	if r != nil {
		fmt.Fprintf(out, "; renew ceiling %.1f µs, renew storm %.1f µs (%.2fx)", us(ceilR.probe), us(r.probe), ratio(r.probe, ceilR.probe))
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "max journal RSS: %.0f MB; load generator (every agent; %d processes, their peaks summed) RSS: %.0f MB\n", mb(e.rssMax), f.workers, mb(e.genRSS))
	fmt.Fprintf(out, "load generator's garbage collector: %.0f%% of its CPU in the enroll storm", 100*e.genGCShare())
	if r != nil {
		fmt.Fprintf(out, ", %.0f%% in the renew storm", 100*r.genGCShare())
	}
	fmt.Fprintln(out)
	for _, s := range []*stormResult{e, r} {
		if s != nil && s.genGCShare() > gcShareWarning {
			fmt.Fprintf(out, "WARNING: in the %s storm the load generator spent %.0f%% of its CPU collecting garbage (near its memory limit?): its agents, not the journals, may have set the pace; give it more memory (GOMEMLIMIT) or split it (-workers)\n", s.kind, 100*s.genGCShare())
		}
		if s != nil && s.conntrackDrops > 0 {
			fmt.Fprintf(out, "WARNING: in the %s storm the kernel dropped %d packets, its connection-tracking table full (sysctl net.netfilter.nf_conntrack_max): the machine, not pact, lost those connections\n", s.kind, s.conntrackDrops)
		}
	}
	heapPer, stackPer, gorPer := e.heap.perAgent(e.agents)
	fmt.Fprintf(out, "load generator once every agent streams, after a GC: live heap %.1f KB, goroutine stacks %.1f KB and %.2f goroutines per agent (%.0f MB, %.0f MB and %d in all)\n",
		heapPer/1024, stackPer/1024, gorPer, mb(e.heap.Now.Heap), mb(e.heap.Now.Stack), e.heap.Now.Goroutines)
	if am := e.agentProc; am != nil {
		fmt.Fprintf(out, "one real pact-agent process, streaming: VmRSS %.1f MB (RssAnon %.1f MB), VmHWM %.1f MB\n", mb(am.rss), mb(am.anon), mb(am.hwm))
	}
	fmt.Fprintln(out, "CPU ms/op counts every journal process and the load generator (every process of it) per agent; ratio = per s / ceiling per s; CPU ratio = ceiling CPU ms/op / CPU ms/op;")
	fmt.Fprintln(out, "wasted CPU = share of the CPU spent on attempts that ended refused, timed out or abandoned (each attempt priced by its crypto, overhead in proportion; a renewal whose new channel failed loses that handshake only, its certificate is kept);")
	fmt.Fprintln(out, "others' CPU = share of the machine other users' processes took during the storm / during its ceiling (a shared machine: trust the CPU ratio more than the ratio when these differ)")
	ws, wsMin := wastedShare(e, price)
	fmt.Fprintf(out, "\nheadline: %d of %d agents streaming %.2f s after the first arrival; ratio to ceiling %.2f; wasted CPU %.1f%%; journal CPU ratio %.2f; %d failed; %d leader changes (others took %.0f%% of the machine)\n",
		e.ok, f.agents, e.wall.Seconds(), e.perSec/ceilE.perSec, 100*ws, ratio(ceilE.serverOp, e.journalCPUPerOp()), e.failed, e.leaderChange, 100*e.others)
	fmt.Fprintf(out, "final check: %s: %s\n\n", map[bool]string{true: "PASS", false: "FAIL"}[chk.pass()], chk.reason())

	js := map[string]any{
		"bench":                           "storm",
		"agent_code":                      "pact-agent (agent.New/Run, in the load generator's processes)",
		"agents":                          f.agents,
		"journals":                        f.journals,
		"cpus":                            runtime.NumCPU(),
		"concurrency":                     f.concurrency,
		"spread_s":                        f.spread.Seconds(),
		"one_source":                      f.oneSource,
		"register_s":                      round(regTook.Seconds(), 3),
		"pass":                            chk.pass(),
		"reason":                          chk.reason(),
		"seconds_to_all_streaming":        round(e.wall.Seconds(), 3),
		"seconds_to_all_active":           round(e.activeWall.Seconds(), 3),
		"streaming_per_s":                 round(e.perSec, 1),
		"wasted_cpu_share":                round(ws, 4),
		"wasted_cpu_share_crypto":         round(wsMin, 4),
		"active":                          chk.counts["active"],
		"not_active_at_first_look":        chk.notActiveFirst,
		"streams_open":                    chk.streams,
		"failed":                          e.failed,
		"abandoned":                       e.abandoned,
		"p50_ms":                          round(ms(e.pct(0.5)), 1),
		"p99_ms":                          round(ms(e.pct(0.99)), 1),
		"max_ms":                          round(ms(e.pct(1)), 1),
		"attempts":                        e.attempts,
		"attempts_by_kind":                e.byOp,
		"failed_attempts":                 e.failedTries,
		"journal_closed_before_handshake": e.journalClosed,
		"journal_busy_answers":            e.journalBusy,
		"busy_attempts":                   e.busy,
		"max_attempts_one_agent":          e.maxAttempt,
		"failures":                        e.failures,
		"cpu_ms_per_agent":                round(ms(e.cpuPerOp()), 3),
		"journal_cpu_ms_per_agent":        round(ms(e.journalCPUPerOp()), 3),
		"loadgen_cpu_ms_per_agent":        round(ms(e.genCPUPerOp()), 3),
		"journal_rss_mb":                  round(mb(e.rssMax), 1),
		"loadgen_rss_mb":                  round(mb(e.genRSS), 1),
		"loadgen_gc_cpu_share":            round(e.genGCShare(), 3),
		"loadgen_processes":               f.workers,
		"loadgen_heap_kb_per_agent":       round(heapPer/1024, 1),
		"loadgen_goroutines_per_agent":    round(gorPer, 2),
		"loadgen_stack_kb_per_agent":      round(stackPer/1024, 1),
		"leader_changes":                  e.leaderChange,
		"journal_timings":                 e.timings,
		"kernel_conntrack_drops":          e.conntrackDrops,
		"raft_batches":                    e.batches,
		"mean_batch":                      round(e.meanBatch(), 2),
		"key_exchange":                    curve.String(),
		"sign_only_per_s_one_core":        round(signRate, 0),
		"sign_only_cpu_ms":                round(ms(signCPU), 3),
		"ceiling_per_s":                   round(ceilE.perSec, 1),
		"ceiling_cpu_ms_per_agent":        round(ms(ceilE.cpuOp), 3),
		"ceiling_journal_cpu_ms":          round(ms(ceilE.serverOp), 3),
		"ceiling_agent_cpu_ms":            round(ms(ceilE.clientOp), 3),
		"ratio_to_ceiling":                round(e.perSec/ceilE.perSec, 3),
		"cpu_ratio_to_ceiling":            round(cpuRatio(ceilE, e), 3),
		"journal_cpu_ratio":               round(ratio(ceilE.serverOp, e.journalCPUPerOp()), 3),
		"other_cpu_share":                 round(e.others, 3),
		"ceiling_other_cpu_share":         round(ceilE.others, 3),
		"price_keygen_ms":                 round(ms(price.keygen), 3),
		"price_tls_handshake_ms":          round(ms(price.tls), 3),
		"price_mtls_handshake_ms":         round(ms(price.mtls), 3),
		"price_sign_ms":                   round(ms(price.sign), 3),
		"targets_met":                     targets(e, ceilE, ws),
		"probe_ceiling_us":                round(us(ceilE.probe), 1),
		"probe_storm_us":                  round(us(e.probe), 1),
		"probe_slowdown":                  round(ratio(e.probe, ceilE.probe), 3),
		"tpm":                             f.tpm,
		"enroll_refused":                  e.journalCount["refused"],
		"enroll_tpm_challenges":           e.journalCount["tpm_challenge"],
		"boot_policy_verdicts":            e.bootVerdicts,
	}
	if f.tpm {
		js["tpm_ek"] = ekName(f.tpmEK)
	}
	if am := e.agentProc; am != nil {
		js["agent_process_rss_mb"] = round(mb(am.rss), 1)
		js["agent_process_anon_mb"] = round(mb(am.anon), 1)
		js["agent_process_hwm_mb"] = round(mb(am.hwm), 1)
	}
	if r != nil {
		rws, rwsMin := wastedShare(r, price)
		js["renewed"] = chk.renewed
		js["renew_streams_open"] = chk.renewStreams
		js["renew_stream_drops"] = chk.renewDrops
		js["renew_stream_drops_by_reason"] = chk.renewDropsBy
		js["renew_stream_handovers"] = chk.renewHandovers
		js["renew_failed"] = r.failed
		js["renew_refused"] = r.journalCount["refused"]
		js["renew_tpm_challenges"] = r.journalCount["tpm_challenge"]
		js["renew_boot_policy_verdicts"] = r.bootVerdicts
		js["renew_journal_timings"] = r.timings
		js["renew_seconds"] = round(r.wall.Seconds(), 3)
		js["renew_per_s"] = round(r.perSec, 1)
		js["renew_p50_ms"] = round(ms(r.pct(0.5)), 1)
		js["renew_p99_ms"] = round(ms(r.pct(0.99)), 1)
		js["renew_attempts"] = r.attempts
		js["renew_failed_attempts"] = r.failedTries
		js["renew_journal_closed_before_handshake"] = r.journalClosed
		js["renew_journal_busy_answers"] = r.journalBusy
		js["renew_busy_attempts"] = r.busy
		js["renew_attempts_by_kind"] = r.byOp
		js["renew_failures"] = r.failures
		js["renew_channel_attempts"] = r.channels
		js["renew_channel_attempts_per_renewal"] = round(perRenewal(r.channels, chk.renewed), 3)
		js["renew_wasted_cpu_share"] = round(rws, 4)
		js["renew_wasted_cpu_share_crypto"] = round(rwsMin, 4)
		js["cpu_ms_per_renew"] = round(ms(r.cpuPerOp()), 3)
		js["journal_cpu_ms_per_renew"] = round(ms(r.journalCPUPerOp()), 3)
		js["renew_journal_rss_mb"] = round(mb(r.rssMax), 1)
		js["renew_loadgen_gc_cpu_share"] = round(r.genGCShare(), 3)
		js["renew_leader_changes"] = r.leaderChange
		js["renew_kernel_conntrack_drops"] = r.conntrackDrops
		js["renew_raft_batches"] = r.batches
		js["renew_mean_batch"] = round(r.meanBatch(), 2)
		js["renew_ceiling_per_s"] = round(ceilR.perSec, 1)
		js["renew_ceiling_cpu_ms"] = round(ms(ceilR.cpuOp), 3)
		js["renew_ratio_to_ceiling"] = round(r.perSec/ceilR.perSec, 3)
		js["renew_cpu_ratio_to_ceiling"] = round(cpuRatio(ceilR, r), 3)
		js["renew_journal_cpu_ratio"] = round(ratio(ceilR.serverOp, r.journalCPUPerOp()), 3)
		js["renew_other_cpu_share"] = round(r.others, 3)
		js["renew_ceiling_other_cpu_share"] = round(ceilR.others, 3)
		js["renew_probe_ceiling_us"] = round(us(ceilR.probe), 1)
		js["renew_probe_storm_us"] = round(us(r.probe), 1)
		js["renew_probe_slowdown"] = round(ratio(r.probe, ceilR.probe), 3)
	}
	b, _ := json.Marshal(js)
	fmt.Fprintln(out, string(b))
}

// targets are issue 11's, for the enrollment storm, measured in this run.
func targets(e *stormResult, c ceilingResult, wasted float64) map[string]bool {
	return map[string]bool{
		"failed_0":                 e.failed == 0,
		"leader_changes_0":         e.leaderChange == 0,
		"wasted_cpu_share_le_5pc":  wasted <= 0.05,
		"ratio_to_ceiling_ge_0.6":  e.perSec/c.perSec >= 0.6,
		"journal_cpu_ratio_ge_0.5": ratio(c.serverOp, e.journalCPUPerOp()) >= 0.5,
	}
}

// perRenewal is n per renewed node (0 when none renewed).
func perRenewal(n, renewed int) float64 {
	if renewed <= 0 {
		return 0
	}
	return float64(n) / float64(renewed)
}
