package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Options configure a campaign.
type Options struct {
	Bin string // directory with pact-journal
	// ClockBin is a directory with a pact-journal built with -tags
	// chaosclock (clock-step needs it).
	ClockBin string
	// PrevBin is a directory with the previous release's pact-journal
	// (make release-previous): rolling-upgrade starts its journals from
	// it and upgrades them to Bin's.
	PrevBin string
	WorkDir string // one sub-directory per scenario (kept on failure)
	Seed    uint64
	// Scenarios to run by name (empty: the campaign's default set).
	Scenarios []string
	// Short shortens every scenario and skips the long ones (CI).
	Short bool
	// Duration overrides every scenario's fault-injection time.
	Duration time.Duration
	// Net is "auto" (namespaces if possible, else loopback), "netns",
	// "loopback" or "docker".
	Net string
	// Image is the container image for Net "docker".
	Image string
	Keep  bool
	// JournalFlags go to every journal, after the scenario's own.
	JournalFlags []string
	// Workload shape.
	Clients, NodesPerClient int
	// CheckTimeout bounds porcupine per node.
	CheckTimeout time.Duration
	Out          io.Writer // progress and the report
}

// ScenarioResult is one scenario's outcome.
type ScenarioResult struct {
	Scenario string
	Journals int
	Seed     uint64
	Network  string
	Dir      string
	Elapsed  time.Duration

	Ops, OK, Failed, Unknown int
	Faults                   []Fault
	Unavailable              []time.Duration
	Lin                      Linearizability
	Checks                   []Check
	Notes                    []string
	Snapshot                 *SnapshotResult
	Err                      error
	// T0 is the wall-clock instant of history time 0.
	T0 time.Time
	// Settled is the history time from which nothing was in flight (0:
	// the journals never converged).
	Settled int64
	// What the run must show (Evidence): at least MinOps calls and
	// MinFaults faults, and, if NeedLeaderChange, a new leader among
	// Leaders (every term with a known leader the watcher saw).
	MinOps, MinFaults int
	NeedLeaderChange  bool
	Leaders           []LeaderTerm
	// Hardware is what the workload did with hardware and keys, and
	// NeedMoves / NeedReboots whether the run must show moves and
	// conflicts / takeovers and refused takeovers.
	Hardware               HardwareCounts
	NeedMoves, NeedReboots bool
	// Membership is what the membership scenario saw; it must show an add
	// and a remove that took effect under a fault.
	Membership     *MembershipResult
	NeedMembership bool
	// Mistakes is what the operator-mistakes scenario saw; it must show
	// every mistake made (mistakesPlanned).
	Mistakes     *MistakesResult
	NeedMistakes bool
	// RevokeCA is what the revoke-leader-ca scenario saw.
	RevokeCA *RevokeCAResult
	// Liveness is what the liveness scenario saw; LivenessRightly counts
	// nodes marked Inactive while streaming to a cut-off journal (it must
	// show one: the marking works, the check is not vacuous).
	Liveness        *LivenessResult
	LivenessRightly int
	// Expected lists the invariants the verdict must see checked (each
	// with Checked > 0); NotApplicable the others, each with why
	// (PlanInvariants).
	Expected      []string
	NotApplicable []NotApplicable
	// HealedAt is the history time the faults were all healed;
	// AfterHeal counts the successful calls of each kind made from then
	// on, AfterHealMin is the fewest the run needs (AfterHealPlan) and
	// AfterHealNA the kinds it need not make, with why. RecoveredAfter is
	// how long after healing the minimums were reached (-1: never).
	HealedAt       int64
	AfterHeal      map[OpKind]int
	AfterHealMin   map[OpKind]int
	AfterHealNA    []NotApplicable
	RecoveredAfter time.Duration
	// Probes is what the probes after leader losses saw; NeedProbes: the
	// scenario is about leaders, so it must have lost some and probed.
	Probes     ProbeCounts
	NeedProbes bool
}

// naLinearizable reports whether linearizability is declared not
// applicable to the run (its scenario has no registry workload).
func (r *ScenarioResult) naLinearizable() bool {
	return slices.ContainsFunc(r.NotApplicable, func(n NotApplicable) bool { return n.What == InvLinearizable })
}

// Passed reports whether nothing was violated, the checker reached a
// definite verdict, and the run showed the work and faults it is about
// (Evidence).
func (r *ScenarioResult) Passed() bool {
	lin := r.Lin.Verdict == "yes" || r.naLinearizable() && r.Lin.Verdict == "n/a"
	if r.Err != nil || !lin || len(r.Evidence()) > 0 {
		return false
	}
	for _, c := range r.Checks {
		if !c.OK() {
			return false
		}
	}
	return true
}

// Pick returns the scenarios named (all of the campaign if none), or an
// error naming an unknown one.
func Pick(names []string, short bool) ([]Scenario, []string, error) {
	all := Scenarios()
	if len(names) == 0 {
		var out []Scenario
		var skipped []string
		for _, s := range all {
			if short && s.Long {
				skipped = append(skipped, s.Name)
				continue
			}
			out = append(out, s)
		}
		return out, skipped, nil
	}
	var out []Scenario
	for _, n := range names {
		found := false
		for _, s := range all {
			if s.Name == n {
				out, found = append(out, s), true
			}
		}
		if !found {
			return nil, nil, fmt.Errorf("unknown scenario %q (see -list)", n)
		}
	}
	return out, nil, nil
}

// shortFactor divides every scenario's fault-injection time in the short
// (CI) campaign, which must stay under two minutes: 7.5 s of faults in a
// 30 s scenario still fits each schedule's first fault (leader-kill waits
// at most 6 s, full-restart 7 s), and the minimums after healing make the
// recovery as long as the quorum needs.
const shortFactor = 4

// RunScenario runs one scenario against a fresh quorum and checks it.
func RunScenario(sc Scenario, opts Options, seed uint64) *ScenarioResult {
	res := &ScenarioResult{Scenario: sc.Name, Journals: sc.Journals, Seed: seed}
	began := time.Now()
	defer func() { res.Elapsed = time.Since(began) }()
	logf := func(format string, args ...any) {
		fmt.Fprintf(opts.Out, "  [%s %6.1fs] %s\n", sc.Name, time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	res.Dir = filepath.Join(opts.WorkDir, sc.Name)
	if err := os.MkdirAll(res.Dir, 0o755); err != nil {
		res.Err = err
		return res
	}
	plan := PlanInvariants(sc)
	res.Expected, res.NotApplicable = plan.Apply, plan.NA
	res.AfterHealMin, res.AfterHealNA = AfterHealPlan(sc)
	res.NeedProbes = sc.Leaders
	if sc.Liveness {
		runLiveness(sc, opts, seed, res, logf)
		return res
	}
	wl := DefaultWorkload()
	if opts.Clients > 0 {
		wl.Clients = opts.Clients
	}
	if opts.NodesPerClient > 0 {
		wl.NodesPerClient = opts.NodesPerClient
	}
	if sc.ThinkMax > 0 {
		wl.ThinkMin, wl.ThinkMax = sc.ThinkMin, sc.ThinkMax
	}
	wl.Seed = seed
	// Every scenario moves hardware between node ids; hw-active-once is
	// checked over the whole history.
	wl.Churn = true
	if sc.TakeoverWindow > 0 {
		wl.TakeoverWindow = sc.TakeoverWindow
		sc.Extra = append(append([]string{}, sc.Extra...),
			"--takeover-window", sc.TakeoverWindow.String(), "--digest-interval", (sc.TakeoverWindow / 3).String())
	}

	q, err := newQuorum(sc, opts, &wl, res)
	if err != nil {
		res.Err = err
		return res
	}
	unmount := func() {}
	if sc.Disk {
		if _, ok := q.(*ProcQuorum); !ok {
			res.Err = errors.New("the disk-full scenario needs journal processes (not containers)")
			return res
		}
		if unmount, err = smallDisks(res.Dir, sc.Journals); err != nil {
			res.Err = err
			return res
		}
	}
	unregister := onSignal(func() { q.Close(); unmount() })
	defer func() {
		unregister()
		if err := q.Close(); err != nil {
			res.Notes = append(res.Notes, "cleanup: "+err.Error())
		}
		unmount()
		if res.Passed() && !opts.Keep {
			os.RemoveAll(res.Dir)
		}
	}()
	res.Network = q.Describe()
	logf("%s", res.Network)
	if err := StartAll(q, 90*time.Second); err != nil {
		res.Err = fmt.Errorf("starting the quorum: %w", err)
		return res
	}
	if _, err := Leader(context.Background(), q, 30*time.Second); err != nil {
		res.Err = err
		return res
	}
	h := NewHistory()
	res.T0 = h.Start()
	watch, err := watchLeaders(q, h)
	if err != nil {
		res.Err = err
		return res
	}
	stopWatch := sync.OnceFunc(func() { res.Leaders = watch.Stop() })
	defer stopWatch()
	w, err := NewWorkload(wl, q, h)
	if err != nil {
		res.Err = err
		return res
	}
	defer w.Close()
	w.Start()
	logf("quorum of %d serving; %d clients x %d nodes running", sc.Journals, wl.Clients, wl.NodesPerClient)
	// recovery is the least the load runs on after healing; it runs on
	// until the minimums after healing are reached (at most recoveryMax).
	warmup, recovery := 1500*time.Millisecond, 3*time.Second
	if opts.Short {
		warmup, recovery = time.Second, time.Second
	}
	time.Sleep(warmup)

	dur := sc.Duration
	if opts.Duration > 0 {
		dur = opts.Duration
	} else if opts.Short {
		dur = dur / shortFactor
	}
	res.MinOps = int(dur.Seconds() * minOpsPerSecond)
	res.MinFaults = max(sc.MinFaults, 1)
	res.NeedLeaderChange = sc.Leaders
	res.NeedMembership = sc.Membership
	res.NeedMistakes = sc.Mistakes
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	env := &Env{Ctx: ctx, Dir: res.Dir, Bin: opts.Bin, Q: q, H: h, Rng: mrand.New(mrand.NewPCG(seed, 0x5eed)), Logf: logf, Probe: w.Probe}
	injectErr := sc.Inject(env)
	cancel()
	healErr := healAll(env)
	res.HealedAt = h.Now()
	res.Faults, res.Snapshot, res.Membership, res.Mistakes, res.RevokeCA = env.faults, env.snap, env.members, env.mistakes, env.revoke
	// The membership scenario ends with some journals outside the quorum
	// (waiting with --join): the checks read the members only.
	post := q
	if env.view != nil {
		post = env.view
	}
	for _, p := range env.pauses {
		if p.NewLeader != "" {
			res.Notes = append(res.Notes, fmt.Sprintf("%s paused %.1fs-%.1fs; %s led meanwhile", p.ID, float64(p.From)/1e9, float64(p.To)/1e9, p.NewLeader))
		}
	}
	res.Notes = append(res.Notes, env.notes...)
	if err := errors.Join(injectErr, healErr); err != nil {
		res.Err = fmt.Errorf("fault injection: %w", err)
	}
	logf("healed after %d faults; recovering under load", len(res.Faults))
	// The load runs on for the recovery time, and longer (up to
	// recoveryMax) until it has made the successful calls of each kind
	// the scenario needs after healing.
	res.RecoveredAfter = -1
	for began := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		met := minimumsMet(CountAfterHeal(h.Records(), res.HealedAt), res.AfterHealMin)
		if met && res.RecoveredAfter < 0 {
			res.RecoveredAfter = time.Since(began)
		}
		if met && time.Since(began) >= recovery || time.Since(began) >= recoveryMax {
			break
		}
	}
	w.Stop()
	stopWatch()
	end := h.Now()

	admins, closeAdmins, err := AdminConns(post)
	if err != nil {
		res.Err = errors.Join(res.Err, err)
		return res
	}
	defer closeAdmins()
	nodes := w.Nodes()
	states, diff := Converge(context.Background(), post, admins, nodes[0], 60*time.Second)
	var settled int64
	if diff == "" {
		settled = h.Now() // converged, nothing in flight: unknown outcomes have settled
	}
	finalReads(h, post, admins, nodes, wl.Clients)
	recs := h.Records()
	for _, r := range recs {
		if r.Final {
			continue
		}
		res.Ops++
		switch r.Out.Result {
		case ResultOK:
			res.OK++
		case ResultFailed:
			res.Failed++
		default:
			res.Unknown++
		}
	}
	logf("%d calls (%d ok, %d refused, %d unknown); checking", res.Ops, res.OK, res.Failed, res.Unknown)
	timeout := opts.CheckTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	res.Settled = settled
	// The revocation of a journal CA is an operation in every node's
	// history: the model needs it (OpRevokeCA); the other checks read the
	// workload's calls only.
	revocation := RevocationRecords(recs, res.RevokeCA)
	res.Lin = CheckLinearizable(append(slices.Clone(recs), revocation...), settled, timeout)
	res.Unavailable = Unavailability(recs, res.Faults, end)
	res.Hardware = CountHardware(recs, w.Hardware())
	res.AfterHeal = CountAfterHeal(recs, res.HealedAt)
	res.Probes = CountProbes(recs, env.losses)
	res.NeedMoves, res.NeedReboots = wl.Churn, wl.TakeoverWindow > 0
	final := states[0]
	for _, s := range states {
		if s.Err == nil {
			final = s
			break
		}
	}
	// The hardware of every node the registry holds: the workload's, and
	// the revoke-leader-ca scenario's agents'.
	hw := w.Hardware()
	if len(env.agentHW) > 0 {
		hw = maps.Clone(hw)
		maps.Copy(hw, env.agentHW)
	}
	if res.RevokeCA != nil {
		res.RevokeCA.Reenrolled = countReenrolled(final.Audit, w.Hardware())
	}
	// The checks of the plan: an invariant it names that is not checked
	// here, or checks nothing, fails the run (ScenarioResult.Evidence).
	for _, c := range []struct {
		name  string
		check func() Check
	}{
		{InvAckedWrites, func() Check { return CheckAckedWrites(recs, final, h) }},
		{InvHardware, func() Check { return CheckHardware(states, final, hw, h) }},
		{InvCertsComitted, func() Check { return CheckCertsCommitted(recs, final, h) }},
		{InvNoRenewRevoke, func() Check { return CheckNoRenewAfterDecommission(recs, final) }},
		{InvIdentical, func() Check { return CheckIdentical(states, diff) }},
		{InvSerials, func() Check { return CheckSerials(recs, final) }},
		{InvMembership, func() Check { return CheckMembership(res.Membership) }},
		{InvNoStall, func() Check { return CheckNoStall(recs, res.Faults, end) }},
		{InvMistakes, func() Check { return CheckMistakes(res.Mistakes, recs) }},
		{InvOneQuorum, func() Check { return CheckOneQuorum(res.Mistakes) }},
		{InvRevokedCA, func() Check { return CheckRevokedCA(res.RevokeCA) }},
	} {
		if plan.applies(c.name) {
			res.Checks = append(res.Checks, c.check())
		}
	}
	if plan.applies(InvDiskFull) {
		running := func(id string) bool {
			for i := range q.Size() {
				if q.ID(i) == id {
					return q.Running(i)
				}
			}
			return false
		}
		res.Checks = append(res.Checks, CheckDiskFull(recs, res.Faults, running))
	}
	if plan.applies(InvExLeader) {
		res.Checks = append(res.Checks, CheckExLeader(recs, final, env.pauses, post.Log))
	}
	if plan.applies(InvSnapshot) {
		c := Check{Name: InvSnapshot, Checked: 1}
		s := res.Snapshot
		if s == nil {
			s = &SnapshotResult{Err: "the schedule recorded no lagging follower"}
		}
		switch {
		case s.Err != "":
			c.fail("%s", s.Err)
		case !s.Installed:
			c.fail("%s restarted behind a compacted log (index %d, compacted to %d) but logged no snapshot installation", s.Follower, s.BehindFrom, s.CompactedTo)
		}
		c.Note = fmt.Sprintf("%s stopped at index <= %d; log compacted to %d after %v; snapshot installed %v; serving %v after restart",
			s.Follower, s.BehindFrom, s.CompactedTo, s.Waited.Round(time.Second), s.Installed, s.CatchUpAfter.Round(100*time.Millisecond))
		res.Checks = append(res.Checks, c)
	}
	if err := writeArtifacts(res, append(slices.Clone(recs), revocation...)); err != nil {
		res.Notes = append(res.Notes, "artifacts: "+err.Error())
	}
	return res
}

func newQuorum(sc Scenario, opts Options, wl *WorkloadConfig, res *ScenarioResult) (Quorum, error) {
	extra := append(append(append([]string{}, journalFlags...), sc.Extra...), opts.JournalFlags...)
	n, initial := sc.Journals, 0
	if sc.Slots > sc.Journals {
		n, initial = sc.Slots, sc.Journals
	}
	var nw Network
	switch opts.Net {
	case "docker":
		if sc.ClockStep || sc.Upgrade {
			return nil, fmt.Errorf("%s needs journal processes (not containers)", sc.Name)
		}
		dq, err := NewDockerQuorum(DockerConfig{Image: opts.Image, Dir: res.Dir, N: sc.Journals, Extra: extra, Bin: opts.Bin})
		if err != nil {
			return nil, fmt.Errorf("docker: %w", err)
		}
		return dq, nil
	case "loopback":
		lb, err := NewLoopback(n, "-net loopback")
		if err != nil {
			return nil, err
		}
		nw = lb
	default:
		ns, err := NewNetNS(n, wl.Clients)
		if err != nil {
			if opts.Net == "netns" {
				return nil, err
			}
			lb, lerr := NewLoopback(n, "network namespaces unavailable: "+err.Error())
			if lerr != nil {
				return nil, lerr
			}
			nw = lb
		} else {
			nw = ns
		}
	}
	wl.SourceIP = nw.ClientIP
	pc := ProcConfig{Bin: opts.Bin, Dir: res.Dir, N: n, Initial: initial, Net: nw, Extra: extra}
	if sc.Upgrade {
		// The journals start on the previous release; the schedule
		// upgrades them to opts.Bin's one at a time.
		if opts.PrevBin == "" {
			nw.Close()
			return nil, errors.New("rolling-upgrade needs the previous release's pact-journal: pass -prev-bin (make chaos runs make release-previous)")
		}
		pc.Bin = opts.PrevBin
	}
	if sc.ClockStep {
		// The journals follow the offsets the scenario writes here.
		if opts.ClockBin == "" {
			nw.Close()
			return nil, errors.New("clock-step needs a pact-journal built with -tags chaosclock: pass -clock-bin (make chaos builds bin/chaosclock)")
		}
		if err := os.MkdirAll(filepath.Join(res.Dir, "clock"), 0o755); err != nil {
			nw.Close()
			return nil, err
		}
		pc.Bin, pc.Env = opts.ClockBin, []string{"PACT_CHAOS_CLOCK_DIR=" + filepath.Join(res.Dir, "clock")}
	}
	q, err := NewProcQuorum(pc)
	if err != nil {
		nw.Close()
		return nil, err
	}
	return q, nil
}

// healAll undoes whatever a schedule left: links, frozen and stopped
// journals; then waits until every journal serves.
func healAll(e *Env) error {
	var errs []error
	if e.Q.CanPartition() {
		errs = append(errs, e.Q.Heal())
	}
	errs = append(errs, e.uncut())
	for i := range e.Q.Size() {
		if e.Q.Running(i) {
			_ = e.Q.Resume(i)
			continue
		}
		errs = append(errs, e.Q.Start(i))
	}
	for i := range e.Q.Size() {
		errs = append(errs, waitUp(e.Q, i, 90*time.Second))
	}
	return errors.Join(errs...)
}

// finalReads reads every node from every journal once the quorum has
// converged; the reads join the history (as one more client), so the
// linearizability check covers the final state too.
func finalReads(h *History, q Quorum, admins []pactv1.AdminServiceClient, nodes []string, client int) {
	for _, n := range nodes {
		for i := range q.Size() {
			r := h.Begin(client, q.ID(i), Input{Kind: OpRead, Node: n})
			r.Final = true
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := admins[i].InspectNode(ctx, &pactv1.InspectNodeRequest{NodeId: n})
			cancel()
			out := Output{}
			if err != nil {
				out = Classify(err)
			} else {
				out = NodeOutput(resp.GetNode())
			}
			h.End(r, out, err)
		}
	}
}

// writeArtifacts keeps the history (and porcupine's visualization of a
// violation) next to the journals' logs.
func writeArtifacts(res *ScenarioResult, recs []*Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# history time 0 = %s (journal logs are in wall-clock time)\n", res.T0.UTC().Format(time.RFC3339Nano))
	for _, r := range recs {
		b.WriteString(r.String())
		b.WriteString("\n")
	}
	if err := os.WriteFile(filepath.Join(res.Dir, "history.txt"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := WriteHistory(filepath.Join(res.Dir, "history.jsonl"), recs, res.Settled); err != nil {
		return err
	}
	if res.Lin.Visualization != nil {
		return os.WriteFile(filepath.Join(res.Dir, "linearizability.html"), res.Lin.Visualization, 0o644)
	}
	return nil
}
