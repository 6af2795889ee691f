package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/agent"
	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/transport"
)

// Every simulated node is pact-agent's own agent.Agent, run in the load
// generator's process (or in one of its workers, workers.go): agent.New
// and Run with the hardware identity given here, so the
// storm goes through the agent's enrollment (key and CSR, Enroll with its
// retry and backoff policy, chain verification), its mTLS channel (Ping,
// Subscribe, the first event) and, in the renewal storm, its rotation
// (RenewNow: RenewCert over the live channel, a new channel). The
// benchmark only starts agents, watches them through Config.OnAttempt and
// Config.OnStream, and counts. Nothing of the agent's path is copied here
// (storm_test.go checks that).

type stormKind int

const (
	stormEnroll stormKind = iota
	stormRenew
)

func (k stormKind) String() string {
	if k == stormRenew {
		return "renew"
	}
	return "enroll"
}

// work counts the unavoidable crypto of attempts, in units the ceiling
// prices (ceiling.go componentCPU): key+CSR, a server-authenticated TLS
// handshake (both sides), CSR check and signing, an mTLS handshake (both
// sides).
type work struct{ keygen, tls, sign, mtls int }

func (w *work) add(o work) {
	w.keygen, w.tls, w.sign, w.mtls = w.keygen+o.keygen, w.tls+o.tls, w.sign+o.sign, w.mtls+o.mtls
}

// attemptWork is what an attempt the agent reported (OnAttempt) cost, by
// how far it got. A failure the journal answered is priced as far as the
// answer needs; a deadline as if the journal had done everything (it may
// have); a renewal refused before RenewCert answered as its key alone.
// The agent keeps its enrollment key across retries until it is signed,
// so the key is priced with the enrollment that succeeds.
func attemptWork(op string, err error) work {
	deadline := err != nil && apierr.FromError(err).Code == codes.DeadlineExceeded
	if answeredBusy(err) {
		if op == "renew" && !failedAtRenewCert(err) {
			// RenewCert answered (a key, a signature); the new
			// channel's journal answered busy, before any handshake.
			return work{keygen: 1, sign: 1}
		}
		return work{}
	}
	if closedUnshaken(err) {
		return work{}
	}
	switch op {
	case "enroll":
		switch {
		case err == nil:
			return work{keygen: 1, tls: 1, sign: 1}
		case deadline:
			return work{tls: 1, sign: 1}
		}
		return work{tls: 1}
	case "renew":
		switch {
		case err == nil:
			return work{keygen: 1, sign: 1, mtls: 1}
		case failedAtRenewCert(err):
			if deadline {
				return work{keygen: 1, sign: 1}
			}
			return work{keygen: 1}
		}
		// RenewCert answered; the new channel failed.
		return work{keygen: 1, sign: 1, mtls: 1}
	case "standby":
		return work{keygen: 1, sign: 1}
	}
	return work{mtls: 1} // connect, upgrade, fallback, move: a new channel
}

// failedAtRenewCert reports a failed renewal that ended at its RenewCert
// call (an agent.RenewCertError), not on the new channel afterwards.
func failedAtRenewCert(err error) bool {
	var rc *agent.RenewCertError
	return errors.As(err, &rc)
}

// wastedWork is what of a failed attempt's work (attemptWork) came to
// nothing. All of it, but for a renewal whose RenewCert answered and whose
// new channel failed: the agent keeps the renewed certificate and moves
// onto it later ("move", priced as a new channel), so only the failed
// channel's handshake is lost, not the key or the signature.
func wastedWork(op string, err error) work {
	w := attemptWork(op, err)
	if op == "renew" && err != nil && !failedAtRenewCert(err) {
		return work{mtls: w.mtls}
	}
	return w
}

// newChannel reports an attempt to put a certificate on a new channel:
// a connect, a move to another identity, or a renewal whose RenewCert
// answered (its new channel tried, whatever came of it). In the renewal
// storm these are the tries to move each node onto its renewed
// certificate: with --renewal-stream-grace off mostly the renewal's own
// and a connect after the journal ended the old stream, with the grace on
// the renewal's and the agent's paced "move" retries.
func newChannel(op string, err error) bool {
	switch op {
	case "connect", "upgrade", "fallback", "move":
		return true
	case "renew":
		return err == nil || !failedAtRenewCert(err)
	}
	return false
}

// answeredBusy reports a journal's busy answer (internal/transport): it had no
// handshake slot soon enough and named when to come back, before any
// crypto on either side but the client's key share. Not a failure: the
// agent comes back when told, without growing its backoff.
func answeredBusy(err error) bool {
	var busy *transport.BusyError
	return errors.As(err, &busy)
}

// closedUnshaken reports a connection the journal closed before it
// answered the ClientHello: it had no handshake slot free for it within
// --handshake-queue-wait (journal --max-handshakes). No crypto was done
// for it on either side but the client's key share; the wait is not CPU.
// (A handshake the journal cut off half-way, past --handshake-timeout,
// ends the same way: it is priced as nothing too, a slight
// underestimate.)
func closedUnshaken(err error) bool {
	var hs *channel.HandshakeError
	return errors.As(err, &hs) && errors.Is(hs, io.EOF)
}

// benchAgent is one node of the storm.
type benchAgent struct {
	idx  int
	node benchNode
	ag   *agent.Agent
	stop context.CancelFunc
	ran  chan error // Run's result, once it returns

	mu         sync.Mutex
	kind       stormKind // the storm under way
	arrival    time.Time
	activeAt   time.Time // the enrollment answered (enroll storm)
	streamAt   time.Time // the storm's goal: a new stream's first event
	serial     string    // the serial of the latest live channel
	before     string    // the serial before the renewal storm
	attempts   int
	busy       int // attempts a journal answered busy
	channels   int // renewal storm: attempts on a new channel (newChannel)
	byOp       map[string]int
	failures   map[string]int
	examples   map[string]string // one error message per failure label
	wasted     work              // attempts that failed
	spent      work              // every attempt of this storm
	err        error
	finished   bool
	abandoned  bool // still trying at the storm's deadline
	held       bool // holds a slot of the load generator's pool
	onFinished func(held bool)
}

// benchAgents are the nodes [from, to) of the inventory, as agents of
// the load generator (their agent.Agent is made at their arrival).
func benchAgents(nodes []benchNode, from, to int) []*benchAgent {
	out := make([]*benchAgent, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, &benchAgent{idx: i, node: nodes[i]})
	}
	return out
}

// reset prepares a for a storm.
func (a *benchAgent) reset(kind stormKind, onFinished func(held bool)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.kind, a.onFinished = kind, onFinished
	a.arrival, a.activeAt, a.streamAt = time.Time{}, time.Time{}, time.Time{}
	a.before = a.serial
	a.attempts, a.busy, a.channels, a.byOp, a.failures, a.examples = 0, 0, 0, map[string]int{}, map[string]int{}, map[string]string{}
	a.wasted, a.spent, a.err, a.finished, a.held, a.abandoned = work{}, work{}, nil, false, false, false
}

// finish ends a's part in the storm (under a.mu), once.
func (a *benchAgent) finish(err error) {
	if a.finished {
		return
	}
	a.finished, a.err = true, err
	if a.onFinished != nil {
		a.onFinished(a.held)
	}
}

// onAttempt is the agent's OnAttempt.
func (a *benchAgent) onAttempt(op string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.finished && a.err != nil {
		return // abandoned: its cancellation is not an attempt of the storm
	}
	a.attempts++
	a.byOp[op]++
	if a.kind == stormRenew && newChannel(op, err) {
		a.channels++
	}
	w := attemptWork(op, err)
	a.spent.add(w)
	if answeredBusy(err) {
		a.busy++
		return
	}
	if err != nil {
		a.wasted.add(wastedWork(op, err))
		pe := apierr.FromError(err)
		label := op + " " + pe.Code.String()
		switch {
		case pe.Reason != "":
			label += "/" + string(pe.Reason)
		case closedUnshaken(err):
			label = op + " closed before the handshake"
		}
		a.failures[label]++
		if _, ok := a.examples[label]; !ok {
			a.examples[label] = err.Error()
		}
		return
	}
	if op == "enroll" && a.activeAt.IsZero() {
		a.activeAt = time.Now()
	}
}

// onStream is the agent's OnStream: a new channel is live.
func (a *benchAgent) onStream(ch *channel.Channel) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.serial = ch.Identity().Serial()
	if a.finished || (a.kind == stormRenew && a.serial == a.before) {
		return // a reconnection, not what this storm waits for
	}
	a.streamAt = now
	a.finish(nil)
}

// storm is one run of every agent against the quorum.
type storm struct {
	kind        stormKind
	agents      []*benchAgent
	addrs       []string
	caFile      string
	concurrency int           // agents the load generator lets work at once; 0: all
	spread      time.Duration // arrivals are spread evenly over this
	deadline    time.Duration // give up on the storm after this
	kx          transport.KeyExchange
	oneSource   bool            // every agent connects from 127.0.0.1
	tpms        *simFleet       // storm -tpm: each node's simulated TPM (simtpm.go); nil: none
	life        context.Context // the agents run until it ends
	log         *slog.Logger    // the agents' logger
}

type stormResult struct {
	probe       time.Duration // the speed probe's median during the storm (probe.go)
	kind        stormKind
	agents      int
	ok          int
	failed      int
	abandoned   int // still trying at the deadline
	wall        time.Duration
	activeWall  time.Duration // first arrival to the last enrollment's answer
	perSec      float64
	lat         []time.Duration // arrival to the goal, per successful agent, sorted
	attempts    int
	byOp        map[string]int
	failedTries int
	busy        int // attempts answered busy (not failures, not in failures)
	channels    int // renewal storm: attempts on a new channel (newChannel)
	maxAttempt  int
	failures    map[string]int
	examples    map[string]string // one error message per failure label
	firstErrs   []string
	wasted      work
	spent       work
	journalCPU  []time.Duration
	genCPU      time.Duration
	genGC       time.Duration // of genCPU, the load generator's garbage collectors'
	rssMax      int64         // the largest journal's
	genRSS      int64         // the load generator's (every agent), at its peak
	// heap is the load generator's live heap and goroutines before the
	// enrollment storm and once every agent streams (enrollment storm
	// only; summed over workers).
	heap heapFigures
	// agentProc is one real pact-agent process's memory once it streams
	// (enrollment storm; nil when it could not be measured).
	agentProc    *agentProcMem
	streamsOpen  int // pact_journal_streams_open summed over the journals, after the storm
	others       float64
	leaderChange int
	// conntrackDrops is the packets the kernel dropped during the storm,
	// its connection-tracking table full (-1: not tracked here).
	conntrackDrops int64
	journalCount   map[string]float64 // pact_journal_{enroll,renew}_total by result, during the storm
	// bootVerdicts is pact_journal_boot_policy_verdicts_total by verdict
	// during the storm (storm -tpm: every TPM round's quote evaluated).
	bootVerdicts map[string]float64
	// journalClosed is pact_journal_connections_refused_total during the
	// storm: connections the journals closed before their handshake.
	journalClosed int
	// journalBusy is pact_journal_connections_busy_total during the
	// storm: connections the journals answered busy, with a retry-after.
	journalBusy int
	// batches and batched are the activation (or renewal) batches the
	// journals proposed during the storm and the commands in them
	// (pact_journal_activation_batch_size's count and sum): how many
	// enrollments one Raft entry carried.
	batches, batched float64
	// timings are the journals' connection timings during the storm, by
	// port and histogram (timings.go).
	timings map[string]map[string]timingFigure
}

// meanBatch is the commands per batch the journals proposed (0: none).
func (r *stormResult) meanBatch() float64 {
	if r.batches == 0 {
		return 0
	}
	return r.batched / r.batches
}

func (r *stormResult) pct(p float64) time.Duration { return percentile(r.lat, p) }

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (r *stormResult) journalCPUSum() time.Duration {
	var t time.Duration
	for _, c := range r.journalCPU {
		t += c
	}
	return t
}

func (r *stormResult) cpuPerOp() time.Duration {
	if r.ok == 0 {
		return 0
	}
	return (r.journalCPUSum() + r.genCPU) / time.Duration(r.ok)
}

func (r *stormResult) genCPUPerOp() time.Duration {
	if r.ok == 0 {
		return 0
	}
	return r.genCPU / time.Duration(r.ok)
}

func (r *stormResult) journalCPUPerOp() time.Duration {
	if r.ok == 0 {
		return 0
	}
	return r.journalCPUSum() / time.Duration(r.ok)
}

// agentConfig is pact-agent's configuration for node a, as a diskless node
// booting from the image would run it, minus what only a process of its
// own has: no status socket, no /metrics listener, no identity files, no
// SPIRE and no TPM (the nodes are registered by MAC and BMC serial), but
// with -tpm the node's simulated TPM (simtpm.go).
func (s *storm) agentConfig(a *benchAgent) agent.Config {
	cfg := agent.DefaultConfig()
	// One image: every node lists the journals in the same order (the
	// agent starts at one picked at random).
	cfg.JournalAddrs = s.addrs
	cfg.CAFile = s.caFile
	cfg.Hardware.MACs = []string{a.node.mac}
	cfg.Hardware.BMCSerial = a.node.bmc
	cfg.KeyExchange = s.kx
	cfg.SPIRESocket = ""
	cfg.StatusSocket = ""
	cfg.TPMDevice = ""
	if s.tpms != nil {
		// storm -tpm: the node's TPM, simulated (simtpm.go), and the
		// event log of its boot.
		cfg.OpenTPM = s.tpms.tpms[a.idx].open
		cfg.TPMEventLog = s.tpms.logPath(a.idx)
	}
	if !s.oneSource {
		// A node of a site has an address of its own, and the journals'
		// per-source limits (connections, failed enrollments) are per
		// node: each agent connects from its own loopback address.
		src := &net.TCPAddr{IP: sourceIP(a.idx)}
		cfg.Dialer = func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: src}
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	cfg.Logger = s.log
	cfg.OnAttempt = a.onAttempt
	cfg.OnStream = a.onStream
	return cfg
}

// sourceIP is agent i's own loopback address: 127.1.0.1 on, skipping .0
// and .255 (Linux routes all of 127.0.0.0/8 to the loopback interface).
func sourceIP(i int) net.IP {
	const perBlock = 254 * 256
	return net.IPv4(127, byte(1+i/perBlock), byte(i%perBlock/254), byte(1+i%254))
}

// start makes a's agent and runs it until s.life ends (or it is stopped).
func (s *storm) start(a *benchAgent) error {
	ag, err := agent.New(s.agentConfig(a))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(s.life)
	a.mu.Lock()
	a.ag, a.stop, a.ran = ag, cancel, make(chan error, 1)
	a.mu.Unlock()
	go func() {
		err := ag.Run(ctx)
		if err == nil && ctx.Err() == nil {
			err = errors.New("agent: Run returned")
		}
		a.ran <- err
		a.mu.Lock()
		if err != nil {
			a.finish(fmt.Errorf("%s: %w", a.node.id, err))
		} else {
			a.finish(errors.New("stopped"))
		}
		a.mu.Unlock()
	}()
	return nil
}

// arrive is a's arrival: its agent starts (enroll storm) or is told to
// renew (renewal storm).
func (s *storm) arrive(a *benchAgent) {
	a.mu.Lock()
	a.arrival = time.Now()
	a.mu.Unlock()
	if s.kind == stormEnroll {
		if err := s.start(a); err != nil {
			a.mu.Lock()
			a.finish(err)
			a.mu.Unlock()
		}
		return
	}
	// The agent renews as at 2/3 of its certificate's life. Between a
	// stream's end and the reconnection there is no channel to renew on:
	// ask again once there is.
	for !a.ag.RenewNow() {
		a.mu.Lock()
		done := a.finished
		a.mu.Unlock()
		if done || s.life.Err() != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// arrival is an agent's place in a storm's schedule: the agent (its
// index in the inventory) and when it arrives, from the storm's start.
type arrival struct {
	Idx int           `json:"i"`
	At  time.Duration `json:"at"`
}

// schedule spreads the arrivals of the agents idxs evenly over spread, in
// a random order. Every load-generator process runs its part of one
// schedule (workers.go), so the storm is the same however many there are.
func schedule(idxs []int, spread time.Duration) []arrival {
	n := len(idxs)
	out := make([]arrival, n)
	for k, i := range rand.Perm(n) {
		out[k] = arrival{Idx: idxs[i], At: time.Duration(k) * spread / time.Duration(n)}
	}
	return out
}

// runArrivals runs the agents of arr in this process and measures it.
func (s *storm) runArrivals(pids []int, arr []arrival) (*stormResult, []agentRecord) {
	m := startMeters(pids)
	t0 := time.Now()
	recs := s.play(t0, arr)
	res := m.stop(s.kind, 0, 0)
	res.genRSS = ownRSS()
	aggregate(res, recs, t0)
	return res, recs
}

// play releases each agent of arr (of s.agents) at t0 plus its offset and
// waits until each has reached the goal (its first stream; in the
// renewal storm, a stream with its new certificate), has been refused for
// good, or the deadline passes (it is abandoned). With s.concurrency > 0
// at most that many agents work at once: an arrival waits for a slot, and
// an agent holds its slot until it is done. It returns the agents'
// records, in the order of arr.
func (s *storm) play(t0 time.Time, arr []arrival) []agentRecord {
	byIdx := make(map[int]*benchAgent, len(s.agents))
	for _, a := range s.agents {
		byIdx[a.idx] = a
	}
	agents := make([]*benchAgent, len(arr))
	for k, x := range arr {
		agents[k] = byIdx[x.Idx]
	}
	n := len(agents)
	var pending sync.WaitGroup
	pending.Add(n)
	var slots chan struct{}
	if s.concurrency > 0 && s.concurrency < n {
		slots = make(chan struct{}, s.concurrency)
	}
	for _, a := range agents {
		a.reset(s.kind, func(held bool) {
			if held {
				<-slots
			}
			pending.Done()
		})
	}
	allDone := make(chan struct{})
	go func() { pending.Wait(); close(allDone) }()

	go func() { // arrivals
		for k, a := range agents {
			time.Sleep(time.Until(t0.Add(arr[k].At)))
			if slots != nil {
				select {
				case slots <- struct{}{}:
				case <-allDone:
					return
				case <-s.life.Done():
					return
				}
				a.mu.Lock()
				a.held = !a.finished
				a.mu.Unlock()
				if !a.held {
					<-slots // abandoned before its turn
					continue
				}
			}
			go s.arrive(a)
		}
	}()
	timer := time.NewTimer(s.deadline)
	defer timer.Stop()
	select {
	case <-allDone:
	case <-timer.C:
		for _, a := range agents {
			a.mu.Lock()
			if !a.finished {
				a.abandoned = true
				a.finish(fmt.Errorf("%s: still trying after %v: abandoned", a.node.id, s.deadline))
				a.wasted = a.spent // nothing it did came to anything
				if a.stop != nil && s.kind == stormEnroll {
					a.stop()
				}
			}
			a.mu.Unlock()
		}
	}
	recs := make([]agentRecord, n)
	for k, a := range agents {
		recs[k] = a.record()
	}
	return recs
}

// agentRecord is what one agent did in a storm: what the load generator
// collects from each, in this process or from a worker (as JSON).
type agentRecord struct {
	Idx       int               `json:"i"`
	Arrival   time.Time         `json:"arrival"`
	ActiveAt  time.Time         `json:"active_at"`
	StreamAt  time.Time         `json:"stream_at"`
	Serial    string            `json:"serial,omitempty"`
	Before    string            `json:"before,omitempty"`
	Attempts  int               `json:"attempts"`
	Busy      int               `json:"busy,omitempty"`
	Channels  int               `json:"channels,omitempty"`
	ByOp      map[string]int    `json:"by_op,omitempty"`
	Failures  map[string]int    `json:"failures,omitempty"`
	Examples  map[string]string `json:"examples,omitempty"`
	Wasted    work              `json:"wasted"`
	Spent     work              `json:"spent"`
	Failed    bool              `json:"failed,omitempty"`
	Err       string            `json:"err,omitempty"`
	Abandoned bool              `json:"abandoned,omitempty"`
}

// ok reports an agent that reached the storm's goal.
func (r *agentRecord) ok() bool { return !r.Failed && !r.StreamAt.IsZero() }

// record is a's record of the storm (its agent runs on: the maps are
// copied).
func (a *benchAgent) record() agentRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := agentRecord{Idx: a.idx, Arrival: a.arrival, ActiveAt: a.activeAt, StreamAt: a.streamAt,
		Serial: a.serial, Before: a.before, Attempts: a.attempts, Busy: a.busy, Channels: a.channels,
		ByOp: maps.Clone(a.byOp), Failures: maps.Clone(a.failures), Examples: maps.Clone(a.examples),
		Wasted: a.wasted, Spent: a.spent, Failed: a.err != nil, Abandoned: a.abandoned}
	if a.err != nil {
		r.Err = a.err.Error()
	}
	return r
}

// MarshalJSON writes w as [keygen, tls, sign, mtls].
func (w work) MarshalJSON() ([]byte, error) {
	return json.Marshal([4]int{w.keygen, w.tls, w.sign, w.mtls})
}

func (w *work) UnmarshalJSON(b []byte) error {
	var v [4]int
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*w = work{keygen: v[0], tls: v[1], sign: v[2], mtls: v[3]}
	return nil
}

// meters measure a storm: the journals' CPU and memory, the load
// generator's CPU (this process's; workers add theirs), and the machine.
type meters struct {
	rss     *rssSampler
	machine machineMeter
	cpu     *cpuMeter
}

func startMeters(pids []int) *meters {
	return &meters{rss: sampleRSS(pids, 100*time.Millisecond), machine: startMachine(), cpu: startCPU(pids)}
}

// stop ends the measurement; workerCPU is what the load generator's
// worker processes used meanwhile, workerGC what their collectors used of
// it.
func (m *meters) stop(kind stormKind, workerCPU, workerGC time.Duration) *stormResult {
	res := &stormResult{kind: kind, byOp: map[string]int{}, failures: map[string]int{}, examples: map[string]string{}}
	res.journalCPU, res.genCPU, res.genGC = m.cpu.stop()
	res.genCPU += workerCPU
	res.genGC += workerGC
	res.others = m.machine.others(res.genCPU + res.journalCPUSum())
	res.rssMax = m.rss.finish()
	return res
}

// ownRSS is this process's peak resident set so far.
func ownRSS() int64 {
	m, err := procMem(os.Getpid())
	if err != nil {
		return 0
	}
	return max(m.RSS, m.HWM)
}

// aggregate adds the agents' records of a storm that started at t0 to
// res.
func aggregate(res *stormResult, recs []agentRecord, t0 time.Time) {
	res.agents = len(recs)
	var last, lastActive time.Time
	for i := range recs {
		r := &recs[i]
		res.attempts += r.Attempts
		res.busy += r.Busy
		res.channels += r.Channels
		res.maxAttempt = max(res.maxAttempt, r.Attempts)
		for k, v := range r.ByOp {
			res.byOp[k] += v
		}
		for k, v := range r.Failures {
			res.failures[k] += v
			res.failedTries += v
			if _, ok := res.examples[k]; !ok {
				res.examples[k] = r.Examples[k]
			}
		}
		res.wasted.add(r.Wasted)
		res.spent.add(r.Spent)
		if r.ActiveAt.After(lastActive) {
			lastActive = r.ActiveAt
		}
		if r.Abandoned {
			res.abandoned++
		}
		switch {
		case r.ok():
			res.ok++
			res.lat = append(res.lat, r.StreamAt.Sub(r.Arrival))
			if r.StreamAt.After(last) {
				last = r.StreamAt
			}
		default:
			res.failed++
			if len(res.firstErrs) < 5 {
				res.firstErrs = append(res.firstErrs, r.Err)
			}
		}
	}
	slices.Sort(res.lat)
	if res.ok > 0 {
		res.wall = last.Sub(t0)
		res.perSec = float64(res.ok) / res.wall.Seconds()
	}
	if !lastActive.IsZero() {
		res.activeWall = lastActive.Sub(t0)
	}
}

// stopAgents stops every running agent and waits for each Run to return
// (each releases its node on the way out, as pact-agent does on SIGTERM).
func stopAgents(agents []*benchAgent) {
	var ran []chan error
	for _, a := range agents {
		a.mu.Lock()
		if a.stop != nil {
			a.stop()
			ran = append(ran, a.ran)
		}
		a.stop = nil
		a.mu.Unlock()
	}
	for _, r := range ran {
		<-r
	}
}
