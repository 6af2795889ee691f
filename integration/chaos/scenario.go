package chaos

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fault is one injected fault.
type Fault struct {
	Kind   string
	Target string
	At     int64 // history time it took effect
	Healed int64 // history time it was undone (0: at the end of the run)
}

// Env is what a scenario's fault schedule works with.
type Env struct {
	Ctx context.Context
	// Dir holds the journals' data directories (Dir/jN).
	Dir string
	// Bin is the directory with the operator's commands (pact,
	// pact-journal), for scenarios that run them.
	Bin  string
	Q    Quorum
	H    *History
	Rng  *mrand.Rand
	Logf func(format string, args ...any)
	// Probe, if set, makes the workload probe right after a leader loss
	// (Workload.Probe); schedules call it through leaderLost.
	Probe func()

	mu sync.Mutex
	// losses are the history times of the leader losses announced
	// (leaderLost).
	losses []int64
	faults []Fault
	pauses []Pause
	notes  []string
	snap   *SnapshotResult
	// emulated lists journals SIGSTOPped to emulate a partition.
	emulated map[int]bool
	// members is what the membership scenario saw; view, if set, is the
	// journals that are members at the end (the checks read those only).
	members *MembershipResult
	view    Quorum
	// cutoff lists, per fault, the journals it cut off from the leader
	// (the liveness scenario).
	cutoff map[int][]string
	// mistakes is what the operator-mistakes scenario saw.
	mistakes *MistakesResult
	// revoke is what the revoke-leader-ca scenario saw; agentHW the
	// hardware of its agents' nodes (node -> MAC, BMC serial), which the
	// registry checks must know beside the workload's.
	revoke  *RevokeCAResult
	agentHW map[string][2]string
}

// SnapshotResult is what the lagging-follower scenario saw.
type SnapshotResult struct {
	Follower     string
	BehindFrom   uint64 // the follower's last index when stopped (approx.)
	CompactedTo  uint64 // the leader's log was compacted through here
	Waited       time.Duration
	Installed    bool // the follower installed a snapshot from the leader
	Err          string
	CatchUpAfter time.Duration
}

func (e *Env) addFault(kind, target string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = append(e.faults, Fault{Kind: kind, Target: target, At: e.H.Now()})
	e.Logf("fault %d: %s %s", len(e.faults), kind, target)
	return len(e.faults) - 1
}

// leaderLost announces that the leader was just killed or frozen: the
// workload's clients issue reads and calls made to be refused right away
// (Workload.Probe), so the answers given while a new leader is elected
// and a restarted journal catches up are in the checked history. Every
// schedule that kills or freezes a leader calls it.
func (e *Env) leaderLost() {
	e.mu.Lock()
	e.losses = append(e.losses, e.H.Now())
	e.mu.Unlock()
	if e.Probe != nil {
		e.Probe()
	}
}

func (e *Env) heal(k int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults[k].Healed = e.H.Now()
}

func (e *Env) note(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	for _, n := range e.notes {
		if n == msg {
			return
		}
	}
	e.notes = append(e.notes, msg)
}

// sleep waits d or until the schedule ends; false means it ended.
func (e *Env) sleep(d time.Duration) bool {
	select {
	case <-e.Ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// between is a random duration in [a, b).
func (e *Env) between(a, b time.Duration) time.Duration {
	if b <= a {
		return a
	}
	return a + time.Duration(e.Rng.Int64N(int64(b-a)))
}

func (e *Env) leader() (int, error) {
	return Leader(context.Background(), e.Q, 30*time.Second)
}

func (e *Env) others(except ...int) []int {
	var out []int
	for i := range e.Q.Size() {
		skip := false
		for _, x := range except {
			skip = skip || x == i
		}
		if !skip {
			out = append(out, i)
		}
	}
	return out
}

func (e *Env) restart(i int) error {
	if err := e.Q.Start(i); err != nil {
		return err
	}
	return e.Q.WaitServing(i, 90*time.Second)
}

// cut partitions the quorum, or emulates it by freezing the side that
// would lose the quorum (SIGSTOP) when the network cannot cut links.
func (e *Env) cut(groups [][]int, minority []int) error {
	if e.Q.CanPartition() {
		return e.Q.Partition(groups)
	}
	e.note("partitions emulated with SIGSTOP (no network namespaces): the cut-off journals could not answer clients either")
	e.mu.Lock()
	if e.emulated == nil {
		e.emulated = map[int]bool{}
	}
	e.mu.Unlock()
	var errs []error
	for _, i := range minority {
		errs = append(errs, e.Q.Pause(i))
		e.mu.Lock()
		e.emulated[i] = true
		e.mu.Unlock()
	}
	return errors.Join(errs...)
}

func (e *Env) uncut() error {
	if e.Q.CanPartition() {
		return e.Q.Heal()
	}
	e.mu.Lock()
	frozen := e.emulated
	e.emulated = nil
	e.mu.Unlock()
	var errs []error
	for i := range frozen {
		errs = append(errs, e.Q.Resume(i))
	}
	return errors.Join(errs...)
}

// Scenario is a fault schedule run against a fresh quorum under load.
type Scenario struct {
	Name     string
	Journals int
	// Duration is how long faults are injected (the workload runs a
	// little longer: warm-up and recovery).
	Duration time.Duration
	// Extra flags for every journal.
	Extra []string
	// Long marks scenarios only the full campaign runs.
	Long bool
	// ThinkMin and ThinkMax override the workload's pacing.
	ThinkMin, ThinkMax time.Duration
	// Inject runs the fault schedule until e.Ctx ends and must leave the
	// quorum healed (the runner heals again anyway).
	Inject func(e *Env) error
	// Describe says what the scenario does, for -list.
	Describe string
	// Leaders marks a scenario about leaders: it fails unless the leader
	// changed at least once (ScenarioResult.Evidence).
	Leaders bool
	// MinFaults is the fewest faults the run must inject (at least 1).
	MinFaults int
	// Disk gives every journal a small filesystem of its own (diskFull
	// fills them); the run is checked with CheckDiskFull.
	Disk bool
	// Slow marks the slow-follower scenario: its run is checked for write
	// stalls while a follower is slowed (CheckSlowFollower).
	Slow bool
	// Slots, if more than Journals, is how many journal processes run:
	// the first Journals form the quorum, the others wait with --join to
	// be added (the membership scenario).
	Slots int
	// Membership marks the membership scenario: the run must show an add
	// and a remove committed under a fault (CheckMembership).
	Membership bool
	// Processes marks a scenario that needs journal processes (their data
	// directories, the operator's offline commands on them): a campaign
	// against containers (-docker) skips it.
	Processes bool
	// Mistakes marks the operator-mistakes scenario: the run must show
	// every mistake refused (CheckMistakes) and one quorum after each
	// (CheckOneQuorum).
	Mistakes bool
	// RevokeCA marks the revoke-leader-ca scenario: the run is checked
	// with CheckRevokedCA and the model learns the revocation
	// (RevocationRecords).
	RevokeCA bool
	// ClockStep runs the journals from Options.ClockBin, whose clocks
	// follow offsets in Dir/clock (clockStep).
	ClockStep bool
	// Upgrade starts the journals from Options.PrevBin, the previous
	// release, for the schedule to upgrade them to Options.Bin
	// (rollingUpgrade).
	Upgrade bool
	// Liveness marks the liveness scenario: streaming nodes instead of
	// the registry workload (runLiveness).
	Liveness bool
	// TakeoverWindow, if set, is given to the journals (with a digest
	// interval of a third of it) and the workload reboots nodes with a
	// new key inside and after it; the run must show both answers.
	TakeoverWindow time.Duration
	// PausesLeader marks a scenario that freezes and thaws leaders: its
	// run is checked with CheckExLeader.
	PausesLeader bool
	// Snapshot marks the lagging-follower scenario: its run is checked
	// for the follower's snapshot installation (snapshot-catch-up).
	Snapshot bool
	// AfterHeal overrides the fewest successful calls of a kind the load
	// must make once the faults are healed (DefaultAfterHeal).
	AfterHeal map[OpKind]int
	// NotApplicable declares, with the reason, invariants (by name) or
	// kinds of call after healing (by OpKind) this scenario does not
	// check, beyond what invariantRules and AfterHealPlan already
	// exempt. Anything else the verdict must see checked: an invariant
	// that checked nothing fails the run (ScenarioResult.Evidence).
	NotApplicable map[string]string
}

// Flags every journal of every scenario gets: a small snapshot threshold,
// checked every second, so snapshots and log compaction happen during a
// run (and a lagging follower needs one within seconds), and liveness and
// takeover windows far beyond a run (the workload's nodes never stream).
var journalFlags = []string{
	"--raft-snapshot-threshold", "64", "--raft-trailing-logs", "16", "--raft-snapshot-interval", "1s",
	"--heartbeat-timeout", "24h", "--takeover-window", "12h",
}

// Scenarios is the campaign: name -> scenario, in run order.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "leader-kill", Journals: 3, Leaders: true, Duration: 30 * time.Second, Inject: leaderKill,
			Describe: "SIGKILL the leader every 3-6 s, restart it 1-3 s later"},
		{Name: "leader-pause", Journals: 3, Leaders: true, PausesLeader: true, Duration: 30 * time.Second, Inject: leaderPause,
			Describe: "SIGSTOP the leader for 2.5-4 s and until a new leader is elected, then SIGCONT: a paused ex-leader"},
		{Name: "minority-partition", Journals: 3, Duration: 30 * time.Second, Inject: minorityPartition,
			Describe: "cut a minority (half the time with the leader) off the others for 3-6 s; clients still reach it"},
		{Name: "flapping-partition", Journals: 3, Duration: 30 * time.Second, Inject: flappingPartition,
			Describe: "partitions that come and go every 0.3-2 s: isolate one journal (often the leader) or cut one link"},
		{Name: "full-restart", Journals: 3, Leaders: true, Duration: 30 * time.Second, Inject: fullRestart,
			Describe: "stop every journal (SIGTERM or SIGKILL), start them all again"},
		{Name: "lagging-follower-snapshot", Journals: 3, Duration: 20 * time.Second, Inject: laggingFollower, Snapshot: true,
			ThinkMin: 60 * time.Millisecond, ThinkMax: 200 * time.Millisecond,
			Describe: "SIGKILL a follower, write until every other journal has snapshotted and compacted its log past it, restart it: it must install the snapshot and catch up"},
		{Name: "leader-kill-5", Journals: 5, Leaders: true, Duration: 30 * time.Second, Inject: leaderKill,
			Describe: "five journals: SIGKILL the leader (half the time a follower too: two of five), restart them"},
		{Name: "hardware-churn", Journals: 3, Leaders: true, Duration: 30 * time.Second, Inject: leaderKill, TakeoverWindow: 6 * time.Second,
			Describe: "SIGKILL the leader while nodes reboot with a new key inside and after a 6 s takeover window and hardware moves between node ids"},
		{Name: "slow-follower", Journals: 3, Duration: 30 * time.Second, Inject: slowFollower, Slow: true,
			Describe: "slow one follower's link (tc netem delay, or a tbf token bucket without sch_netem) for 4-8 s at a time: writes must not stall"},
		{Name: "disk-full", Journals: 3, Duration: 30 * time.Second, Inject: diskFull, Disk: true, Long: true,
			Describe: "fill one journal's own 64 MB tmpfs (the leader half the time) for 3-6 s, then free it: it must stop writing cleanly and catch up"},
		{Name: "minority-partition-5", Journals: 5, Duration: 30 * time.Second, Inject: minorityPartition, Long: true,
			Describe: "five journals: cut two off the other three"},
		{Name: "clock-step", Journals: 3, Duration: 30 * time.Second, Inject: clockStep, ClockStep: true, Long: true, MinFaults: 2,
			Describe: "step one journal's wall clock (the leader half the time) 2-5 minutes forward, or back, in turn, for 4-8 s, then set it right (a pact-journal built with -tags chaosclock)"},
		{Name: "liveness-partition", Journals: 3, Duration: 45 * time.Second, Inject: livenessPartition, Liveness: true, Long: true,
			Describe: "12 nodes hold Subscribe streams (heartbeat timeout 8 s, digests every 1 s) while one journal is cut off for longer than the timeout or the leader is killed: no node streaming to a journal that reaches the leader is marked Inactive"},
		{Name: "membership-change", Journals: 3, Slots: 5, Duration: 45 * time.Second, Inject: membershipChurn, Membership: true, Long: true, MinFaults: 2,
			Describe: "add and remove journals (pact journal add/remove through the leader; two spare journals wait with --join) while the leader is killed or a minority is cut off; a removed journal must exit 3 and is added back empty"},
		{Name: "operator-mistakes", Journals: 3, Duration: 30 * time.Second, Inject: operatorMistakes, Mistakes: true, Processes: true, MinFaults: 4,
			Describe: "operator mistakes under load: a wiped follower restarted with its old --initial-cluster (must exit 4), then added back with --join; the majority lost while the survivor leads, pact-journal recover on the survivor, a lost journal back with its old disk (the survivor must refuse it: quorum_mismatch; it must never serve), the lost ones added back wiped; a snapshot restored under another root of the same name (must be refused, nothing written); one quorum id after each"},
		{Name: "revoke-leader-ca", Journals: 3, Duration: 30 * time.Second, Inject: revokeLeaderCA, RevokeCA: true, Leaders: true, Processes: true, Long: true,
			Describe: "12 pact-agents streaming; pact journal revoke-ca of the leader's journal CA through a follower: another journal leads within electionWait, the others refuse it as a peer (revoked_intermediate), it reports itself halted, every agent that streamed on it or held a certificate of its intermediates streams again elsewhere within the failover plus the agent's retry budget; then pact journal remove (the journal, cut off, is stopped), a new key and journal CA, --join and pact journal add --journal-ca; the journal runs on; one quorum of three"},
		{Name: "rolling-upgrade", Journals: 3, Leaders: true, Upgrade: true, Processes: true, Long: true, MinFaults: 3, Duration: 40 * time.Second, Inject: rollingUpgrade,
			Describe: "three journals of the previous release (-prev-bin, make release-previous) upgraded one at a time to this build, on the same data directory and flags, in an order drawn from the seed: followers first, the leader first, or the leader SIGKILLed after the first follower; every journal serves the new release at the end"},
	}
}

func leaderKill(e *Env) error {
	for e.sleep(e.between(3*time.Second, 6*time.Second)) {
		l, err := e.leader()
		if err != nil {
			return err
		}
		victims := []int{l}
		if e.Q.Size() >= 5 && e.Rng.IntN(2) == 0 {
			o := e.others(l)
			victims = append(victims, o[e.Rng.IntN(len(o))])
		}
		var ks []int
		for _, v := range victims {
			if err := e.Q.Kill(v); err != nil {
				return err
			}
			ks = append(ks, e.addFault("SIGKILL", e.Q.ID(v)+map[bool]string{true: "(leader)", false: ""}[v == l]))
		}
		e.leaderLost()
		time.Sleep(e.between(time.Second, 3*time.Second))
		for n, v := range victims {
			if err := e.restart(v); err != nil {
				return err
			}
			e.heal(ks[n])
		}
	}
	return nil
}

// electionWait is the longest a paused leader stays frozen waiting for
// the others to elect one of themselves: many election timeouts.
const electionWait = 20 * time.Second

func leaderPause(e *Env) error {
	for e.sleep(e.between(3*time.Second, 5*time.Second)) {
		l, err := e.leader()
		if err != nil {
			return err
		}
		if err := e.Q.Pause(l); err != nil {
			return err
		}
		k := e.addFault("pause", e.Q.ID(l)+"(leader)")
		e.leaderLost()
		p := Pause{Journal: l, ID: e.Q.ID(l), From: e.H.Now()}
		// The pause lasts its drawn hold and, beyond it, until another
		// journal leads: a leader thawed before the election ends leads on
		// in its own term, and the scenario would not be about a paused
		// ex-leader at all. An election under the journals' 2 s timeouts
		// takes longer than the shortest hold (both followers must first
		// miss heartbeats, and a split vote costs another timeout); one
		// that takes electionWait is a liveness failure the verdict
		// reports (no leader change).
		hold := e.between(2500*time.Millisecond, 4*time.Second)
		deadline := time.Now().Add(hold)
		if nl, err := Leader(context.Background(), e.Q, electionWait, e.others(l)...); err == nil {
			p.NewLeader = e.Q.ID(nl)
		}
		time.Sleep(time.Until(deadline))
		if err := e.Q.Resume(l); err != nil {
			return err
		}
		p.To = e.H.Now()
		e.heal(k)
		e.mu.Lock()
		e.pauses = append(e.pauses, p)
		e.mu.Unlock()
		if p.NewLeader == "" {
			e.note("a pause of %s ended before another journal led", p.ID)
		}
	}
	return nil
}

// minority picks ceil(n/2)-1 journals, with the leader half the time.
func (e *Env) minority(withLeader bool) ([]int, []int, error) {
	l, err := e.leader()
	if err != nil {
		return nil, nil, err
	}
	size := (e.Q.Size() - 1) / 2
	var pool []int
	var minority []int
	if withLeader {
		minority = append(minority, l)
		pool = e.others(l)
	} else {
		pool = e.others(l)
	}
	e.Rng.Shuffle(len(pool), func(a, b int) { pool[a], pool[b] = pool[b], pool[a] })
	for len(minority) < size {
		minority, pool = append(minority, pool[0]), pool[1:]
	}
	return minority, e.others(minority...), nil
}

func names(q Quorum, is []int) string {
	s := ""
	for k, i := range is {
		if k > 0 {
			s += ","
		}
		s += q.ID(i)
	}
	return s
}

func minorityPartition(e *Env) error {
	for e.sleep(e.between(2*time.Second, 4*time.Second)) {
		withLeader := e.Rng.IntN(2) == 0
		minor, major, err := e.minority(withLeader)
		if err != nil {
			return err
		}
		label := names(e.Q, minor) + "|" + names(e.Q, major)
		if withLeader {
			label += " (leader cut off)"
		}
		if err := e.cut([][]int{minor, major}, minor); err != nil {
			return err
		}
		k := e.addFault("partition", label)
		if withLeader {
			e.leaderLost() // the majority elects another; the cut-off one must not answer for good
		}
		time.Sleep(e.between(3*time.Second, 6*time.Second))
		if err := e.uncut(); err != nil {
			return err
		}
		e.heal(k)
	}
	return nil
}

func flappingPartition(e *Env) error {
	for e.sleep(e.between(300*time.Millisecond, 1500*time.Millisecond)) {
		var groups [][]int
		var minor []int
		var label string
		switch p := e.Rng.IntN(3); {
		case p == 0 && e.Q.CanPartition():
			// One link only: both ends still reach everyone else.
			pair := e.Rng.Perm(e.Q.Size())[:2]
			groups, label = [][]int{{pair[0]}, {pair[1]}}, "link "+e.Q.ID(pair[0])+"-"+e.Q.ID(pair[1])
		default:
			var err error
			var major []int
			minor, major, err = e.minority(p == 1)
			if err != nil {
				return err
			}
			groups, label = [][]int{minor, major}, names(e.Q, minor)+"|"+names(e.Q, major)
		}
		if err := e.cut(groups, minor); err != nil {
			return err
		}
		k := e.addFault("flap", label)
		time.Sleep(e.between(500*time.Millisecond, 2*time.Second))
		if err := e.uncut(); err != nil {
			return err
		}
		e.heal(k)
	}
	return nil
}

func fullRestart(e *Env) error {
	for e.sleep(e.between(4*time.Second, 7*time.Second)) {
		kill := e.Rng.IntN(2) == 0
		kind := "SIGTERM all"
		if kill {
			kind = "SIGKILL all"
		}
		var errs []error
		for i := range e.Q.Size() {
			if kill {
				errs = append(errs, e.Q.Kill(i))
			} else {
				errs = append(errs, e.Q.Stop(i))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		// The fault counts from the moment no journal runs (a graceful
		// stop still answers for a moment).
		k := e.addFault(kind, names(e.Q, e.others()))
		time.Sleep(e.between(500*time.Millisecond, 1500*time.Millisecond))
		for i := range e.Q.Size() {
			if err := e.Q.Start(i); err != nil {
				return err
			}
		}
		// The leader is lost from the stop; the probes start with the
		// journals (while all are down they could only be unreachable),
		// so they meet the election and the first answers after it.
		e.leaderLost()
		for i := range e.Q.Size() {
			if err := e.Q.WaitServing(i, 90*time.Second); err != nil {
				return err
			}
		}
		e.heal(k)
	}
	return nil
}

var (
	compactRE   = regexp.MustCompile(`msg="compacting logs".*? to=(\d+)`)
	installedRE = regexp.MustCompile(`msg="Installed remote snapshot"`)
)

// SnapshotWait bounds how long the lagging-follower scenario waits for a
// journal to snapshot and compact its log; with --raft-snapshot-interval
// 1s (journalFlags) that takes a few seconds of writes.
var SnapshotWait = 60 * time.Second

func laggingFollower(e *Env) error {
	if !e.sleep(2 * time.Second) {
		return nil
	}
	l, err := e.leader()
	if err != nil {
		return err
	}
	o := e.others(l)
	f := o[e.Rng.IntN(len(o))]
	res := &SnapshotResult{Follower: e.Q.ID(f)}
	e.mu.Lock()
	e.snap = res
	e.mu.Unlock()
	if err := e.Q.Kill(f); err != nil {
		return err
	}
	k := e.addFault("SIGKILL follower", e.Q.ID(f))
	// The follower's log ends at most at the leader's last index now; once
	// a journal has compacted its log beyond that, the follower can only
	// catch up from a snapshot.
	behind, err := LastIndex(e.Q, l)
	if err != nil {
		return err
	}
	marker := time.Now()
	startLogs := make([]int, e.Q.Size())
	for _, i := range e.others(f) {
		startLogs[i] = len(e.Q.Log(i))
	}
	deadline := time.Now().Add(SnapshotWait)
	// Every other journal must have compacted past the follower: whichever
	// leads when it returns can then only send it a snapshot. (One was
	// enough before, and a leader that had not compacted yet caught the
	// follower up from its log: a run that showed nothing, failed.)
	var compacted uint64
	for time.Now().Before(deadline) {
		compacted = 0
		for k, i := range e.others(f) {
			var to uint64
			log := e.Q.Log(i)
			if m := compactRE.FindAllStringSubmatch(log[min(startLogs[i], len(log)):], -1); len(m) > 0 {
				to, _ = strconv.ParseUint(m[len(m)-1][1], 10, 64)
			}
			if k == 0 || to < compacted {
				compacted = to
			}
		}
		if compacted > behind+32 { // margin: entries in flight beyond the commit index
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	res.BehindFrom, res.CompactedTo, res.Waited = behind, compacted, time.Since(marker)
	if compacted <= behind+32 {
		res.Err = fmt.Sprintf("not every other journal compacted its log past index %d within %v (with --raft-snapshot-interval 1s)", behind, SnapshotWait)
	}
	before := len(e.Q.Log(f))
	restarted := time.Now()
	if err := e.restart(f); err != nil {
		return err
	}
	e.heal(k)
	for wait := time.Now().Add(30 * time.Second); time.Now().Before(wait); time.Sleep(200 * time.Millisecond) {
		log := e.Q.Log(f)
		if installedRE.MatchString(log[min(before, len(log)):]) {
			res.Installed = true
			break
		}
	}
	res.CatchUpAfter = time.Since(restarted)
	// Keep the load on a while with the follower back.
	e.sleep(e.between(3*time.Second, 5*time.Second))
	return nil
}

// slowFollower slows one follower's link at a time. Without a network that
// can (loopback, containers) it emulates slowness by freezing the follower
// for 150 ms of every 400 ms, and says so.
func slowFollower(e *Env) error {
	type slower interface {
		Slow(i int) (string, error)
		Unslow(i int) error
	}
	for e.sleep(e.between(time.Second, 2*time.Second)) {
		l, err := e.leader()
		if err != nil {
			return err
		}
		others := e.others(l)
		f := others[e.Rng.IntN(len(others))]
		hold := e.between(4*time.Second, 8*time.Second)
		if s, ok := e.Q.(slower); ok {
			how, err := s.Slow(f)
			if err == nil {
				e.note("slow link: %s", how)
				k := e.addFault("slow", e.Q.ID(f))
				time.Sleep(hold)
				err = s.Unslow(f)
				e.heal(k)
				if err != nil {
					return err
				}
				continue
			}
			e.note("slow link unavailable (%v): emulated by freezing the follower 150 ms of every 400 ms", err)
		}
		k := e.addFault("slow (SIGSTOP 150ms/400ms)", e.Q.ID(f))
		for end := time.Now().Add(hold); time.Now().Before(end); {
			if err := e.Q.Pause(f); err != nil {
				return err
			}
			time.Sleep(150 * time.Millisecond)
			if err := e.Q.Resume(f); err != nil {
				return err
			}
			time.Sleep(250 * time.Millisecond)
		}
		e.heal(k)
	}
	return nil
}

// clockStep steps one journal's wall clock (the leader half the time) by
// 2-5 minutes, forward or back, for 4-8 s, then sets it right again: a
// second step, the other way. The journal logs each step it adopts.
func clockStep(e *Env) error {
	for e.sleep(e.between(2*time.Second, 4*time.Second)) {
		l, err := e.leader()
		if err != nil {
			return err
		}
		j := l
		if e.Rng.IntN(2) == 0 {
			o := e.others(l)
			j = o[e.Rng.IntN(len(o))]
		}
		// Forward and back in turn: both directions in every run.
		off := e.between(2*time.Minute, 5*time.Minute).Round(time.Second)
		e.mu.Lock()
		if len(e.faults)%2 == 1 {
			off = -off
		}
		e.mu.Unlock()
		file := filepath.Join(e.Dir, "clock", e.Q.ID(j))
		if err := e.stepClock(j, file, off); err != nil {
			return err
		}
		who := e.Q.ID(j)
		if j == l {
			who += "(leader)"
		}
		k := e.addFault(fmt.Sprintf("clock %+.0fs", off.Seconds()), who)
		time.Sleep(e.between(4*time.Second, 8*time.Second))
		if err := e.stepClock(j, file, 0); err != nil {
			return err
		}
		e.heal(k)
	}
	return nil
}

// stepClock sets journal j's clock offset and waits until the journal has
// logged that it follows it: a run whose journals ignore the file proves
// nothing.
func (e *Env) stepClock(j int, file string, off time.Duration) error {
	before := strings.Count(e.Q.Log(j), "CHAOS: clock stepped")
	if err := os.WriteFile(file, []byte(off.String()), 0o644); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if strings.Count(e.Q.Log(j), "CHAOS: clock stepped") > before {
			return nil
		}
	}
	return fmt.Errorf("%s did not log that its clock stepped to %v: is it built with -tags chaosclock?", e.Q.ID(j), off)
}
