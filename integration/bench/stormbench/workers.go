package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// One process cannot hold every agent of a big storm: each agent needs
// file descriptors (a connection to Enroll, then its channel, and a
// second channel while it moves to a new one), and the hard open-file
// limit is per process (20,000 on the machine of docs/benchmarks.md,
// which root cannot raise there). The load generator then splits its
// agents over worker processes, each running a contiguous slice of the
// inventory (stormbench storm-worker, started by the parent). A worker
// sets its agents up exactly as the in-process path does (newStorm,
// storm.agentConfig), plays its part of one schedule the parent makes
// (schedule: every agent of every worker arrives evenly over -spread,
// from one absolute start), and sends back the same per-agent records
// (agentRecord) plus its own CPU and peak memory.
//
// The protocol is JSON lines: the worker writes {"ready":N} once its
// agents are set up; then for each storm the parent writes a
// workerCommand on the worker's stdin and the worker answers with one
// workerReport on its stdout. The parent closing the worker's stdin ends
// it: its agents stop (releasing their nodes) and it exits.

const (
	// fdsPerAgent is what an agent of the load generator may hold at the
	// peak of a storm: its Enroll connection or its old channel, its new
	// channel, and a share of a reconnection.
	fdsPerAgent = 2.3
	// fdMargin is the open files a load-generator process needs besides
	// its agents' connections.
	fdMargin = 1000
	// workerLead is how far ahead of a storm's start the parent sends
	// its workers the schedule, so every worker holds it at the start.
	workerLead = 250 * time.Millisecond
)

// autoWorkers is how many load-generator processes -workers 0 uses for
// agents under an open-file limit of limit: one while it fits the
// agents, else the fewest whose shares each fit. One process is kept as
// long as the agents are at most half the limit: the recorded
// 10,000-agent runs (docs/benchmarks.md) ran in one process under a
// 20,000 limit, and a default run must stay comparable with them.
func autoWorkers(agents int, limit uint64) int {
	need := func(n int) float64 { return float64(n)*fdsPerAgent + fdMargin }
	if limit == 0 || need(agents) <= float64(limit) || uint64(agents) <= limit/2 {
		return 1
	}
	per := int((float64(limit) - fdMargin) / fdsPerAgent)
	if per < 1 {
		per = 1
	}
	return (agents + per - 1) / per
}

// share is worker w's slice [from, to) of n agents split over k workers.
func share(n, k, w int) (from, to int) { return w * n / k, (w + 1) * n / k }

// workerCommand starts one storm in a worker.
type workerCommand struct {
	Kind     string    `json:"kind"`            // "enroll" or "renew"
	Start    int64     `json:"start_unix_nano"` // the storm's start, on the shared wall clock
	Arrivals []arrival `json:"arrivals"`        // the worker's agents, by offset from Start
}

// workerReport is a worker's answer: ready, or one storm's records.
type workerReport struct {
	Ready   int           `json:"ready,omitempty"` // the first line: agents set up
	Kind    string        `json:"kind,omitempty"`
	Records []agentRecord `json:"records,omitempty"`
	CPU     time.Duration `json:"cpu_ns,omitempty"`    // getrusage: user+system during the storm
	GCCPU   time.Duration `json:"gc_cpu_ns,omitempty"` // of CPU, the garbage collector's (runtime/metrics)
	PeakRSS int64         `json:"peak_rss,omitempty"`  // VmHWM at the end of the storm, bytes
	Heap    heapFigures   `json:"heap,omitzero"`       // enrollment storm: live heap and goroutines before and after
	Error   string        `json:"error,omitempty"`
}

func parseKind(s string) (stormKind, error) {
	switch s {
	case stormEnroll.String():
		return stormEnroll, nil
	case stormRenew.String():
		return stormRenew, nil
	}
	return 0, fmt.Errorf("unknown storm %q", s)
}

// workerFlags are the storm flags a worker needs, under the same names.
type workerFlags struct {
	stormFlags
	index    int
	from, to int
	addrs    string
	caFile   string
}

// args is the command line a worker runs with.
func (w workerFlags) args() []string {
	a := []string{"storm-worker",
		"-worker", strconv.Itoa(w.index), "-agents", strconv.Itoa(w.agents),
		"-from", strconv.Itoa(w.from), "-to", strconv.Itoa(w.to),
		"-addrs", w.addrs, "-ca", w.caFile,
		"-key-exchange", w.keyExchange, "-one-source=" + strconv.FormatBool(w.oneSource),
		"-deadline", w.deadline.String(), "-concurrency", strconv.Itoa(w.concurrency)}
	if w.cpuprofile != "" {
		a = append(a, "-cpuprofile", w.cpuprofile)
	}
	if w.memprofile != "" {
		a = append(a, "-memprofile", w.memprofile)
	}
	if w.tpm {
		a = append(a, "-tpm-dir", w.tpmDir)
	}
	return a
}

// runWorker is `stormbench storm-worker` (hidden: the parent starts it).
func runWorker(args []string) int {
	var w workerFlags
	fs := flag.NewFlagSet("stormbench storm-worker", flag.ContinueOnError)
	fs.IntVar(&w.index, "worker", 0, "this worker's number")
	fs.IntVar(&w.agents, "agents", 0, "agents of the whole storm (the inventory)")
	fs.IntVar(&w.from, "from", 0, "first agent (inventory index) of this worker")
	fs.IntVar(&w.to, "to", 0, "one past the last agent of this worker")
	fs.StringVar(&w.addrs, "addrs", "", "the journals' gRPC addresses, comma-separated")
	fs.StringVar(&w.caFile, "ca", "", "the domain root (ca.pem)")
	fs.StringVar(&w.keyExchange, "key-exchange", "", "as storm -key-exchange")
	fs.BoolVar(&w.oneSource, "one-source", false, "as storm -one-source")
	fs.DurationVar(&w.deadline, "deadline", 10*time.Minute, "as storm -deadline")
	fs.IntVar(&w.concurrency, "concurrency", 0, "this worker's share of storm -concurrency")
	fs.StringVar(&w.cpuprofile, "cpuprofile", "", "write FILE.enroll.wN and FILE.renew.wN")
	fs.StringVar(&w.memprofile, "memprofile", "", "write FILE.wN after the enrollment storm")
	fs.StringVar(&w.tpmDir, "tpm-dir", "", "storm -tpm: the simulated TPMs' keys and event logs")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if w.from < 0 || w.to <= w.from || w.to > w.agents || w.addrs == "" || w.caFile == "" {
		fmt.Fprintln(os.Stderr, "stormbench storm-worker: want 0 <= -from < -to <= -agents, -addrs and -ca")
		return 2
	}
	if err := workerMain(w, os.Stdin, os.Stdout); err != nil {
		logf("worker %d: %v", w.index, err)
		return 1
	}
	return 0
}

func workerMain(w workerFlags, in io.Reader, out io.Writer) error {
	checkFiles(w.to - w.from)
	nodes := inventory("storm", w.agents)
	agents := benchAgents(nodes, w.from, w.to)
	var tpms *simFleet
	if w.tpmDir != "" {
		var err error
		if tpms, err = loadSimFleet(w.tpmDir, nodes, w.from, w.to); err != nil {
			return err
		}
	}
	life, stop := context.WithCancel(context.Background())
	defer func() { stop(); stopAgents(agents) }()
	st, err := newStorm(w.stormFlags, strings.Split(w.addrs, ","), w.caFile, agents, tpms, life)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	if err := enc.Encode(workerReport{Ready: len(agents)}); err != nil {
		return err
	}
	// The parent closing stdin ends the worker even in the middle of a
	// storm (the parent was interrupted): the agents stop at once.
	cmds := make(chan workerCommand)
	var readErr error
	go func() {
		defer close(cmds)
		defer stop()
		dec := json.NewDecoder(in)
		for {
			var cmd workerCommand
			if err := dec.Decode(&cmd); err != nil {
				if !errors.Is(err, io.EOF) {
					readErr = err
				}
				return
			}
			cmds <- cmd
		}
	}()
	for cmd := range cmds {
		if err := enc.Encode(st.workerStorm(w, cmd)); err != nil {
			return err
		}
	}
	return readErr // nil: the parent is done
}

// workerStorm runs a worker's part of one storm.
func (s *storm) workerStorm(w workerFlags, cmd workerCommand) workerReport {
	rep := workerReport{Kind: cmd.Kind}
	kind, err := parseKind(cmd.Kind)
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	s.kind = kind
	if w.cpuprofile != "" {
		stop, err := startProfile(fmt.Sprintf("%s.%s.w%d", w.cpuprofile, kind, w.index))
		if err != nil {
			rep.Error = err.Error()
			return rep
		}
		defer stop()
	}
	if kind == stormEnroll {
		rep.Heap.Base = liveHeap()
	}
	cpu0, gc0 := selfCPU(), selfGCCPU()
	rep.Records = s.play(time.Unix(0, cmd.Start), cmd.Arrivals)
	rep.CPU, rep.GCCPU = selfCPU()-cpu0, selfGCCPU()-gc0
	rep.PeakRSS = ownRSS()
	if kind == stormEnroll {
		var profile string
		if w.memprofile != "" {
			profile = fmt.Sprintf("%s.w%d", w.memprofile, w.index)
		}
		if err := measureAgents(&rep.Heap, profile); err != nil {
			rep.Error = err.Error()
		}
	}
	return rep
}

// startProfile writes a pprof CPU profile of this process to path until
// the returned stop.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		logf("load generator CPU profile: %s", path)
	}, nil
}

// worker is one storm-worker process, seen from the parent.
type worker struct {
	index    int
	from, to int
	cmd      *exec.Cmd
	in       io.WriteCloser
	enc      *json.Encoder
	dec      *json.Decoder
	exited   chan struct{}
	waitErr  error // once exited is closed
}

// workerPool is the load generator split over worker processes.
type workerPool struct {
	spread  time.Duration
	workers []*worker
}

// startWorkers starts k workers over f.agents agents and waits until each
// has set its agents up.
func startWorkers(f stormFlags, k int, addrs []string, caFile string) (*workerPool, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &workerPool{spread: f.spread}
	for w := range k {
		wf := workerFlags{stormFlags: f, index: w, addrs: strings.Join(addrs, ","), caFile: caFile}
		wf.from, wf.to = share(f.agents, k, w)
		if f.concurrency > 0 {
			wf.concurrency = (f.concurrency + k - 1) / k
		}
		cmd := exec.Command(self, wf.args()...)
		cmd.Stderr = os.Stderr
		// Its own process group: an interrupt at the terminal reaches the
		// parent alone, which stops the workers before the journals.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		in, err := cmd.StdinPipe()
		if err != nil {
			p.stop()
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			p.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			p.stop()
			return nil, err
		}
		wk := &worker{index: w, from: wf.from, to: wf.to, cmd: cmd, in: in, enc: json.NewEncoder(in), dec: json.NewDecoder(out), exited: make(chan struct{})}
		p.workers = append(p.workers, wk)
		go func() { wk.waitErr = cmd.Wait(); close(wk.exited) }()
	}
	for _, wk := range p.workers {
		var r workerReport
		if err := wk.dec.Decode(&r); err != nil || r.Ready != wk.to-wk.from {
			p.stop()
			return nil, fmt.Errorf("load-generator worker %d did not start (%v, ready %d)", wk.index, err, r.Ready)
		}
	}
	return p, nil
}

// run runs one storm of kind with the agents idxs over the workers: one
// schedule, split by owner, from one start; the records merged. pids
// are the journal processes measured.
func (p *workerPool) run(kind stormKind, idxs []int, pids []int) (*stormResult, []agentRecord, error) {
	arr := schedule(idxs, p.spread)
	parts := make([][]arrival, len(p.workers))
	for _, x := range arr {
		for i, wk := range p.workers {
			if x.Idx >= wk.from && x.Idx < wk.to {
				parts[i] = append(parts[i], x)
				break
			}
		}
	}
	m := startMeters(pids)
	t0 := time.Now().Add(workerLead)
	for i, wk := range p.workers {
		cmd := workerCommand{Kind: kind.String(), Start: t0.UnixNano(), Arrivals: parts[i]}
		if err := wk.enc.Encode(cmd); err != nil {
			return nil, nil, fmt.Errorf("load-generator worker %d: %w", wk.index, err)
		}
	}
	reps := make([]workerReport, len(p.workers))
	errs := make([]error, len(p.workers))
	done := make(chan int)
	for i, wk := range p.workers {
		go func() {
			errs[i] = wk.dec.Decode(&reps[i])
			done <- i
		}()
	}
	var workerCPU, workerGC time.Duration
	var rss int64
	var heap heapFigures
	var recs []agentRecord
	var failed []string
	for range p.workers {
		i := <-done
		if errs[i] == nil && reps[i].Error != "" {
			errs[i] = errors.New(reps[i].Error)
		}
		if errs[i] != nil {
			failed = append(failed, fmt.Sprintf("worker %d: %v", p.workers[i].index, errs[i]))
			continue
		}
		workerCPU += reps[i].CPU
		workerGC += reps[i].GCCPU
		rss += reps[i].PeakRSS
		heap.add(reps[i].Heap)
		recs = append(recs, reps[i].Records...)
	}
	res := m.stop(kind, workerCPU, workerGC)
	if len(failed) > 0 {
		return nil, nil, fmt.Errorf("load generator: %s", strings.Join(failed, "; "))
	}
	res.genRSS = rss
	res.heap = heap
	aggregate(res, recs, t0)
	return res, recs, nil
}

// stop ends every worker: its stdin closes, its agents stop and release
// their nodes, it exits (killed if it has not within a minute).
func (p *workerPool) stop() {
	for _, wk := range p.workers {
		wk.in.Close()
	}
	for _, wk := range p.workers {
		select {
		case <-wk.exited:
		case <-time.After(time.Minute):
			logf("load-generator worker %d did not exit; killing it", wk.index)
			_ = wk.cmd.Process.Kill()
			<-wk.exited
		}
		if wk.waitErr != nil {
			logf("load-generator worker %d: %v", wk.index, wk.waitErr)
		}
	}
}

// fileLimit raises this process's open-file limit to its hard limit and
// returns it (0: unknown).
func fileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	if lim.Cur == math.MaxUint64 { // RLIM_INFINITY
		return 0
	}
	return lim.Cur
}
