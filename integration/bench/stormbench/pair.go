package main

// pair (make bench-pair) runs the pact storm and the floor storm back to
// back, -pairs times, and sets them side by side: how much of the floor's
// throughput pact reaches, and how much more journal CPU it spends per
// agent, for the enrollment and the renewal storm (issue 24's targets:
// throughput at least 0.95 of the floor's, journal CPU at most 1.15 times
// the floor's).
//
// Each run is a child process of this program (`storm`, then `storm
// -floor`), exactly what make bench-storm and make bench-floor run, rather
// than a call in this process: the load generator's peak RSS (VmHWM) and
// heap belong to the process, so a second storm in the same process would
// report the first one's peak and start with its garbage; and a child
// starts from the same state as the single-run targets, so a pair's
// figures compare with theirs.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
)

// The targets, pact against the floor run in the same hour.
const (
	targetThroughputVsFloor = 0.95 // pact's agents per second over the floor's, at least
	targetJournalCPUVsFloor = 1.15 // pact's journal CPU per agent over the stubs', at most
)

func runPair(args []string) int {
	var f stormFlags
	fs := newStormFlagSet("stormbench pair", &f)
	pairs := fs.Int("pairs", 3, "how many times to run the pact storm and then the floor storm")
	oldFloor := fs.Bool("old-floor", true, "in each pair, also run the old floor (stubs that keep nothing, -floor-replicate=false) and report pact against it beside the replicating floor")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := checkPairFlags(&f, fs, *pairs); err != nil {
		fmt.Fprintf(os.Stderr, "stormbench: %v\n", err)
		return 2
	}
	children, err := newChildRunner()
	if err != nil {
		logf("%v", err)
		return 1
	}
	var runs []pairRun
	for i := 1; i <= *pairs; i++ {
		var run pairRun
		storms := []childStorm{
			{"pact", []string{"storm"}, &run.pact},
			{"floor", []string{"storm", "-floor"}, &run.floor},
		}
		if *oldFloor {
			run.oldFloor = &runLine{}
			storms = append(storms, childStorm{"old-floor", []string{"storm", "-floor", "-floor-replicate=false"}, run.oldFloor})
		}
		flags := func(name string) []string { return forwardedFlags(fs, f.dir, fmt.Sprintf("pair%d-%s", i, name)) }
		if err := children.runStorms(fmt.Sprintf("pair %d of %d:", i, *pairs), fmt.Sprintf("pair %d,", i), os.Stdout, flags, storms...); err != nil {
			logf("%v", err)
			return 1
		}
		runs = append(runs, run)
	}
	sum := summarizePairs(runs)
	pairReport(os.Stdout, sum)
	if !sum.Pass {
		return 1
	}
	return 0
}

// checkPairFlags keeps to what a pair can compare: pact-agent's own code
// on both sides (bare clients have no renewal to set beside pact's).
func checkPairFlags(f *stormFlags, fs *flag.FlagSet, pairs int) error {
	if pairs < 1 {
		return errors.New("-pairs must be positive")
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["floor"] || set["floor-client"] || set["floor-replicate"] {
		return errors.New("pair runs the storm and the floors itself, all with pact-agent's own code: drop -floor, -floor-client and -floor-replicate")
	}
	return checkStormFlags(f, fs)
}

// forwardedFlags are the flags given to pair, as one run takes them:
// every one set except -pairs, and -dir as a subdirectory of its own per
// run (a run wants an empty directory).
func forwardedFlags(fs *flag.FlagSet, dir, run string) []string {
	var out []string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "pairs", "dir", "old-floor", "sizes":
		default:
			out = append(out, "-"+fl.Name+"="+fl.Value.String())
		}
	})
	if dir != "" {
		out = append(out, "-dir="+filepath.Join(dir, run))
	}
	return out
}

// childRunner runs one benchmark at a time as a child process and passes
// an interrupt on to it, so its journals are stopped by its own cleanup.
type childRunner struct {
	self        string
	mu          sync.Mutex
	cur         *exec.Cmd
	interrupted bool
}

// newChildRunner runs this program's own executable, and passes
// interrupts on from now.
func newChildRunner() (*childRunner, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &childRunner{self: self}
	c.forwardSignals()
	return c, nil
}

func (c *childRunner) forwardSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		for s := range ch {
			c.mu.Lock()
			c.interrupted = true
			if c.cur != nil && c.cur.Process != nil {
				_ = c.cur.Process.Signal(s)
			}
			c.mu.Unlock()
		}
	}()
}

// run runs the program with args, its output going on to out as it comes,
// and returns its JSON line (its last line that is a JSON object). A run
// whose final check failed still printed one, and exits 1: that is not an
// error here; a run that printed none is.
func (c *childRunner) run(args []string, out io.Writer) (string, error) {
	var buf bytes.Buffer
	cmd := exec.Command(c.self, args...)
	cmd.Stdout = io.MultiWriter(out, &buf)
	cmd.Stderr = os.Stderr
	c.mu.Lock()
	if c.interrupted {
		c.mu.Unlock()
		return "", errors.New("interrupted")
	}
	err := cmd.Start()
	c.cur = cmd
	c.mu.Unlock()
	if err != nil {
		return "", err
	}
	err = cmd.Wait()
	c.mu.Lock()
	c.cur = nil
	interrupted := c.interrupted
	c.mu.Unlock()
	if interrupted {
		return "", errors.New("interrupted")
	}
	line := lastJSONObject(buf.Bytes())
	if line == "" {
		if err == nil {
			err = errors.New("exited 0")
		}
		return "", fmt.Errorf("printed no JSON line (%w)", err)
	}
	return line, nil
}

// childStorm is one child run of a round: its name (in the log, and in
// its directory), the arguments that choose the storm, and what its JSON
// line is read into.
type childStorm struct {
	name string
	args []string
	line any
}

// runStorms runs storms one after the other: each with its own args and
// then flags(its name), its output going on to out, its JSON line read
// into its line. The log names a run "<started> <name> storm" as it starts
// and the error "<failed> <name> storm"; the first run that fails ends the
// round.
func (c *childRunner) runStorms(started, failed string, out io.Writer, flags func(name string) []string, storms ...childStorm) error {
	for _, s := range storms {
		args := slices.Concat(s.args, flags(s.name))
		logf("%s %s storm: %s %s", started, s.name, filepath.Base(c.self), strings.Join(args, " "))
		line, err := c.run(args, out)
		if err != nil {
			return fmt.Errorf("%s %s storm: %w", failed, s.name, err)
		}
		if err := json.Unmarshal([]byte(line), s.line); err != nil {
			return fmt.Errorf("%s %s storm: its JSON line: %w", failed, s.name, err)
		}
	}
	return nil
}

func lastJSONObject(out []byte) string {
	var last string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "{") {
			last = l
		}
	}
	return last
}

// runLine is what pair reads from a storm's or a floor's JSON line; a
// renewal figure is nil when the line has none (-renew=false).
type runLine struct {
	Bench               string   `json:"bench"`
	Pass                bool     `json:"pass"`
	Reason              string   `json:"reason"`
	Agents              int      `json:"agents"`
	Seconds             float64  `json:"seconds_to_all_streaming"`
	JournalCPU          float64  `json:"journal_cpu_ms_per_agent"`
	RatioToCeiling      float64  `json:"ratio_to_ceiling"`
	RenewSeconds        *float64 `json:"renew_seconds"`
	RenewJournalCPU     *float64 `json:"journal_cpu_ms_per_renew"`
	RenewRatioToCeiling *float64 `json:"renew_ratio_to_ceiling"`
}

// pairRun is one pair: the pact storm, then the (replicating) floor, then
// the old floor when it ran.
type pairRun struct {
	pact, floor runLine
	oldFloor    *runLine
}

// pairFigures are one pair's comparisons. Throughput is agents per
// second, so pact's over the floor's is the floor's seconds over pact's
// (both runs have the same agents). A renewal figure is nil when either
// line lacks what it needs.
type pairFigures struct {
	Pair                     int      `json:"pair"`
	Pass                     bool     `json:"pass"`
	ThroughputVsFloor        float64  `json:"throughput_vs_floor"`
	JournalCPUVsFloor        float64  `json:"journal_cpu_vs_floor"`
	RatioToCeiling           float64  `json:"ratio_to_ceiling"`
	FloorRatioToCeiling      float64  `json:"floor_ratio_to_ceiling"`
	RenewThroughputVsFloor   *float64 `json:"renew_throughput_vs_floor,omitempty"`
	RenewJournalCPUVsFloor   *float64 `json:"renew_journal_cpu_vs_floor,omitempty"`
	RenewRatioToCeiling      *float64 `json:"renew_ratio_to_ceiling,omitempty"`
	FloorRenewRatioToCeiling *float64 `json:"floor_renew_ratio_to_ceiling,omitempty"`

	// Against the old floor (stubs that keep nothing), when it ran.
	ThroughputVsOldFloor      *float64 `json:"throughput_vs_old_floor,omitempty"`
	JournalCPUVsOldFloor      *float64 `json:"journal_cpu_vs_old_floor,omitempty"`
	RenewThroughputVsOldFloor *float64 `json:"renew_throughput_vs_old_floor,omitempty"`
	RenewJournalCPUVsOldFloor *float64 `json:"renew_journal_cpu_vs_old_floor,omitempty"`
	OldFloorRatioToCeiling    *float64 `json:"old_floor_ratio_to_ceiling,omitempty"`
}

// spread is a figure over the pairs that passed.
type spread struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

// pairSummary is pair's JSON line. The spreads and the targets are over
// the pairs whose two runs passed their final checks; the targets are
// judged on the median.
type pairSummary struct {
	Bench       string        `json:"bench"`
	Agents      int           `json:"agents"`
	Pairs       int           `json:"pairs"`
	PairsPassed int           `json:"pairs_passed"`
	Pass        bool          `json:"pass"`
	Reason      string        `json:"reason"`
	PerPair     []pairFigures `json:"per_pair"`

	ThroughputVsFloor        *spread `json:"throughput_vs_floor,omitempty"`
	JournalCPUVsFloor        *spread `json:"journal_cpu_vs_floor,omitempty"`
	RatioToCeiling           *spread `json:"ratio_to_ceiling,omitempty"`
	FloorRatioToCeiling      *spread `json:"floor_ratio_to_ceiling,omitempty"`
	RenewThroughputVsFloor   *spread `json:"renew_throughput_vs_floor,omitempty"`
	RenewJournalCPUVsFloor   *spread `json:"renew_journal_cpu_vs_floor,omitempty"`
	RenewRatioToCeiling      *spread `json:"renew_ratio_to_ceiling,omitempty"`
	FloorRenewRatioToCeiling *spread `json:"floor_renew_ratio_to_ceiling,omitempty"`

	ThroughputVsOldFloor      *spread `json:"throughput_vs_old_floor,omitempty"`
	JournalCPUVsOldFloor      *spread `json:"journal_cpu_vs_old_floor,omitempty"`
	RenewThroughputVsOldFloor *spread `json:"renew_throughput_vs_old_floor,omitempty"`
	RenewJournalCPUVsOldFloor *spread `json:"renew_journal_cpu_vs_old_floor,omitempty"`
	OldFloorRatioToCeiling    *spread `json:"old_floor_ratio_to_ceiling,omitempty"`

	// Targets, by name, judged on the medians; a target whose figure no
	// pair has (no renewal storm) is absent.
	Targets map[string]bool `json:"targets_met,omitempty"`
}

func figuresOf(i int, r pairRun) pairFigures {
	p, fl := r.pact, r.floor
	fig := pairFigures{
		Pair:                i,
		Pass:                p.Pass && fl.Pass,
		ThroughputVsFloor:   over(fl.Seconds, p.Seconds),
		JournalCPUVsFloor:   over(p.JournalCPU, fl.JournalCPU),
		RatioToCeiling:      p.RatioToCeiling,
		FloorRatioToCeiling: fl.RatioToCeiling,
		RenewRatioToCeiling: p.RenewRatioToCeiling,
	}
	if p.RenewRatioToCeiling != nil {
		fig.FloorRenewRatioToCeiling = fl.RenewRatioToCeiling
	}
	if p.RenewSeconds != nil && fl.RenewSeconds != nil {
		v := over(*fl.RenewSeconds, *p.RenewSeconds)
		fig.RenewThroughputVsFloor = &v
	}
	if p.RenewJournalCPU != nil && fl.RenewJournalCPU != nil {
		v := over(*p.RenewJournalCPU, *fl.RenewJournalCPU)
		fig.RenewJournalCPUVsFloor = &v
	}
	if o := r.oldFloor; o != nil {
		fig.Pass = fig.Pass && o.Pass
		ptr := func(v float64) *float64 { return &v }
		fig.ThroughputVsOldFloor = ptr(over(o.Seconds, p.Seconds))
		fig.JournalCPUVsOldFloor = ptr(over(p.JournalCPU, o.JournalCPU))
		fig.OldFloorRatioToCeiling = ptr(o.RatioToCeiling)
		if p.RenewSeconds != nil && o.RenewSeconds != nil {
			fig.RenewThroughputVsOldFloor = ptr(over(*o.RenewSeconds, *p.RenewSeconds))
		}
		if p.RenewJournalCPU != nil && o.RenewJournalCPU != nil {
			fig.RenewJournalCPUVsOldFloor = ptr(over(*p.RenewJournalCPU, *o.RenewJournalCPU))
		}
	}
	return fig
}

// over is a/b to three places; 0 when b is (a figure a run did not have).
func over(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round(a/b, 3)
}

// summarizePairs sets each pair's runs side by side and takes every
// comparison's spread over the pairs that passed.
func summarizePairs(runs []pairRun) pairSummary {
	sum := pairSummary{Bench: "storm-pair", Pairs: len(runs)}
	var problems []string
	var passed []pairFigures
	for i, r := range runs {
		fig := figuresOf(i+1, r)
		sum.PerPair = append(sum.PerPair, fig)
		sum.Agents = max(sum.Agents, r.pact.Agents)
		sides := []runLine{r.pact, r.floor}
		if r.oldFloor != nil {
			sides = append(sides, *r.oldFloor)
		}
		for _, side := range sides {
			if !side.Pass {
				problems = append(problems, fmt.Sprintf("pair %d: %s: %s", i+1, side.Bench, side.Reason))
			}
		}
		if r.pact.Agents != r.floor.Agents {
			problems = append(problems, fmt.Sprintf("pair %d: %d agents in the storm, %d in the floor", i+1, r.pact.Agents, r.floor.Agents))
			fig.Pass = false
		}
		if fig.Pass {
			passed = append(passed, fig)
		}
	}
	sum.PairsPassed = len(passed)
	sum.Pass = len(problems) == 0 && len(runs) > 0
	sum.Reason = "every run passed its final check"
	switch {
	case len(problems) > 0:
		sum.Reason = strings.Join(problems, "; ")
	case len(runs) == 0:
		sum.Reason = "no pair ran"
	}
	if len(passed) == 0 {
		return sum
	}
	plain := func(get func(pairFigures) float64) *spread {
		return spreadOf(passed, func(f pairFigures) *float64 { v := get(f); return &v })
	}
	sum.ThroughputVsFloor = plain(func(f pairFigures) float64 { return f.ThroughputVsFloor })
	sum.JournalCPUVsFloor = plain(func(f pairFigures) float64 { return f.JournalCPUVsFloor })
	sum.RatioToCeiling = plain(func(f pairFigures) float64 { return f.RatioToCeiling })
	sum.FloorRatioToCeiling = plain(func(f pairFigures) float64 { return f.FloorRatioToCeiling })
	sum.RenewThroughputVsFloor = spreadOf(passed, func(f pairFigures) *float64 { return f.RenewThroughputVsFloor })
	sum.RenewJournalCPUVsFloor = spreadOf(passed, func(f pairFigures) *float64 { return f.RenewJournalCPUVsFloor })
	sum.RenewRatioToCeiling = spreadOf(passed, func(f pairFigures) *float64 { return f.RenewRatioToCeiling })
	sum.FloorRenewRatioToCeiling = spreadOf(passed, func(f pairFigures) *float64 { return f.FloorRenewRatioToCeiling })
	sum.ThroughputVsOldFloor = spreadOf(passed, func(f pairFigures) *float64 { return f.ThroughputVsOldFloor })
	sum.JournalCPUVsOldFloor = spreadOf(passed, func(f pairFigures) *float64 { return f.JournalCPUVsOldFloor })
	sum.RenewThroughputVsOldFloor = spreadOf(passed, func(f pairFigures) *float64 { return f.RenewThroughputVsOldFloor })
	sum.RenewJournalCPUVsOldFloor = spreadOf(passed, func(f pairFigures) *float64 { return f.RenewJournalCPUVsOldFloor })
	sum.OldFloorRatioToCeiling = spreadOf(passed, func(f pairFigures) *float64 { return f.OldFloorRatioToCeiling })

	sum.Targets = map[string]bool{}
	target := func(name string, s *spread, ok func(float64) bool) {
		if s != nil {
			sum.Targets[name] = ok(s.Median)
		}
	}
	atLeast := func(v float64) bool { return v >= targetThroughputVsFloor }
	atMost := func(v float64) bool { return v <= targetJournalCPUVsFloor }
	target("throughput_ge_0.95_floor", sum.ThroughputVsFloor, atLeast)
	target("journal_cpu_le_1.15_floor", sum.JournalCPUVsFloor, atMost)
	target("renew_throughput_ge_0.95_floor", sum.RenewThroughputVsFloor, atLeast)
	target("renew_journal_cpu_le_1.15_floor", sum.RenewJournalCPUVsFloor, atMost)
	return sum
}

// spreadOf is the min, median and max of a figure over figs; nil when a
// pair lacks it (every pair or none has a renewal: the same flags).
func spreadOf(figs []pairFigures, get func(pairFigures) *float64) *spread {
	var vs []float64
	for _, f := range figs {
		v := get(f)
		if v == nil {
			return nil
		}
		vs = append(vs, *v)
	}
	return spreadOfValues(vs)
}

// spreadOfValues is the min, median (the mean of the middle two of an
// even count) and max of vs; nil for none.
func spreadOfValues(vs []float64) *spread {
	if len(vs) == 0 {
		return nil
	}
	vs = slices.Sorted(slices.Values(vs))
	med := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return &spread{Min: vs[0], Median: round(med, 3), Max: vs[len(vs)-1]}
}

func pairReport(out io.Writer, sum pairSummary) {
	fmt.Fprintf(out, "\npact against the replicating floor: %d pairs of %d agents (pact storm, then the floor storm), %d passed\n\n", sum.Pairs, sum.Agents, sum.PairsPassed)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "pair\tpass\tthroughput vs floor\tjournal CPU vs floor\tratio to ceiling\tfloor's\trenew throughput vs floor\trenew journal CPU vs floor\trenew ratio to ceiling\tfloor's\t")
	opt := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.3f", *v)
	}
	for _, f := range sum.PerPair {
		fmt.Fprintf(w, "%d\t%v\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t%s\t\n", f.Pair, f.Pass, f.ThroughputVsFloor, f.JournalCPUVsFloor, f.RatioToCeiling, f.FloorRatioToCeiling,
			opt(f.RenewThroughputVsFloor), opt(f.RenewJournalCPUVsFloor), opt(f.RenewRatioToCeiling), opt(f.FloorRenewRatioToCeiling))
	}
	med := func(s *spread) string {
		if s == nil {
			return "-"
		}
		return fmt.Sprintf("%.3f", s.Median)
	}
	fmt.Fprintf(w, "median\t\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", med(sum.ThroughputVsFloor), med(sum.JournalCPUVsFloor), med(sum.RatioToCeiling), med(sum.FloorRatioToCeiling),
		med(sum.RenewThroughputVsFloor), med(sum.RenewJournalCPUVsFloor), med(sum.RenewRatioToCeiling), med(sum.FloorRenewRatioToCeiling))
	w.Flush()
	if sum.ThroughputVsOldFloor != nil {
		fmt.Fprintf(out, "\nagainst the old floor (stubs that keep nothing), medians: throughput %s, journal CPU %s, renew throughput %s, renew journal CPU %s; the old floor's ratio to ceiling %s\n",
			med(sum.ThroughputVsOldFloor), med(sum.JournalCPUVsOldFloor), med(sum.RenewThroughputVsOldFloor), med(sum.RenewJournalCPUVsOldFloor), med(sum.OldFloorRatioToCeiling))
	}
	fmt.Fprintln(out)
	names := make([]string, 0, len(sum.Targets))
	for n := range sum.Targets {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(out, "target %s (median): %s\n", n, map[bool]string{true: "met", false: "not met"}[sum.Targets[n]])
	}
	fmt.Fprintf(out, "\nfinal check: %s: %s\n\n", map[bool]string{true: "PASS", false: "FAIL"}[sum.Pass], sum.Reason)
	b, _ := json.Marshal(sum)
	fmt.Fprintln(out, string(b))
}
