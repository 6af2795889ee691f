package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

func ms(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// faultSummary counts faults by kind: "4 SIGKILL".
func faultSummary(fs []Fault) string {
	counts := map[string]int{}
	var kinds []string
	for _, f := range fs {
		if counts[f.Kind] == 0 {
			kinds = append(kinds, f.Kind)
		}
		counts[f.Kind]++
	}
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

func (r *ScenarioResult) invariantSummary() string {
	if r.Err != nil && len(r.Checks) == 0 {
		return "ERROR"
	}
	var bad []string
	for _, c := range r.Checks {
		if !c.OK() {
			bad = append(bad, fmt.Sprintf("%s(%d)", c.Name, len(c.Violations)))
		}
	}
	for _, c := range r.Checks {
		if c.OK() && c.Checked == 0 {
			bad = append(bad, c.Name+"(checked nothing)")
		}
	}
	if len(bad) == 0 {
		return fmt.Sprintf("ok %d/%d", len(r.Checks), len(r.Checks))
	}
	return "VIOLATED " + strings.Join(bad, " ")
}

// afterHealSummary is the table's word on the load after healing: "ok",
// the kinds short of their minimum, or "n/a".
func (r *ScenarioResult) afterHealSummary() string {
	if len(r.AfterHealMin) == 0 {
		if r.Err != nil {
			return "-"
		}
		return "n/a"
	}
	var short []string
	for _, k := range AfterHealKinds {
		if m, ok := r.AfterHealMin[k]; ok && r.AfterHeal[k] < m {
			short = append(short, fmt.Sprintf("%s %d/%d", k, r.AfterHeal[k], m))
		}
	}
	if len(short) > 0 {
		return "LOW " + strings.Join(short, " ")
	}
	return "ok"
}

// afterHealLine details the calls after healing: each kind's successes
// and its minimum, and the kinds not required, with why.
func (r *ScenarioResult) afterHealLine() string {
	var parts []string
	for _, k := range AfterHealKinds {
		if m, ok := r.AfterHealMin[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %d (min %d)", k, r.AfterHeal[k], m))
		}
	}
	reached := "never reached"
	if r.RecoveredAfter >= 0 {
		reached = "reached " + ms(r.RecoveredAfter) + " after healing"
	}
	line := fmt.Sprintf("successful calls after healing (at %.1fs; minimums %s): %s", float64(r.HealedAt)/1e9, reached, strings.Join(parts, ", "))
	for _, n := range r.AfterHealNA {
		line += fmt.Sprintf("; %s not required: %s", n.What, n.Why)
	}
	return line
}

func (r *ScenarioResult) linSummary() string {
	switch {
	case r.Err != nil && r.Lin.Verdict == "":
		return "-"
	case r.Lin.Verdict == "yes" && r.Lin.AllowedNodes() > 0:
		var parts []string
		for _, a := range DesignAllowances {
			if n := len(r.Lin.Allowed[a]); n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n, a))
			}
		}
		return fmt.Sprintf("yes (%s)", strings.Join(parts, ", "))
	case r.Lin.Verdict == "no":
		return fmt.Sprintf("NO (%d of %d nodes)", len(r.Lin.Illegal)+len(r.Lin.NoLeader), r.Lin.Nodes)
	case r.Lin.Verdict == "unknown":
		return fmt.Sprintf("UNKNOWN (%d timed out)", len(r.Lin.TimedOut))
	}
	return r.Lin.Verdict
}

// Report prints the table, every violation with its history excerpt, the
// notes, and one JSON line; it returns whether everything passed.
func Report(w io.Writer, results []*ScenarioResult, seed uint64, skipped []string) bool {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tjournals\tops (ok/refused/unknown)\tfaults\tunavail p50\tunavail p99\tlinearizable\tinvariants\tafter heal\tresult")
	pass := true
	for _, r := range results {
		verdict := "PASS"
		if !r.Passed() {
			verdict, pass = "FAIL", false
		}
		fmt.Fprintf(tw, "%s\t%d\t%d (%d/%d/%d)\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Journals, r.Ops, r.OK, r.Failed, r.Unknown,
			faultSummary(r.Faults), ms(Percentile(r.Unavailable, 50)), ms(Percentile(r.Unavailable, 99)), r.linSummary(), r.invariantSummary(), r.afterHealSummary(), verdict)
	}
	tw.Flush()
	for _, s := range skipped {
		fmt.Fprintf(w, "(skipped %s: a long scenario, run by make chaos)\n", s)
	}
	for _, r := range results {
		var lines []string
		if r.Err != nil {
			lines = append(lines, "ERROR: "+r.Err.Error())
		}
		if r.Network != "" {
			lines = append(lines, "network: "+r.Network)
		}
		for _, m := range r.Evidence() {
			lines = append(lines, "NOT SHOWN (the run proves nothing without it): "+m)
		}
		if len(r.Leaders) > 0 {
			var ls []string
			for _, l := range r.Leaders {
				ls = append(ls, fmt.Sprintf("%s (term %d, %.1fs)", l.Leader, l.Term, float64(l.At)/1e9))
			}
			lines = append(lines, fmt.Sprintf("leaders seen: %d changes: %s", LeaderChanges(r.Leaders), strings.Join(ls, ", ")))
		}
		if hc := r.Hardware; hc != (HardwareCounts{}) {
			lines = append(lines, fmt.Sprintf("hardware: %d registrations of another node id's hardware, %d refused as a conflict; reboots with a new key: %d takeovers, %d refused (ALREADY_ACTIVE)",
				hc.Moves, hc.Conflicts, hc.Takeovers, hc.TakeoversRefused))
		}
		if len(r.AfterHealMin) > 0 {
			lines = append(lines, r.afterHealLine())
		}
		if r.Probes.Losses > 0 || r.NeedProbes {
			lines = append(lines, "probes right after leader losses: "+r.Probes.String())
		}
		for _, c := range r.Checks {
			status := "ok"
			switch {
			case !c.OK():
				status = fmt.Sprintf("VIOLATED (%d)", len(c.Violations))
			case c.Checked == 0:
				status = "CHECKED NOTHING"
			}
			line := fmt.Sprintf("%-26s %s, %d checked", c.Name, status, c.Checked)
			if c.Note != "" {
				line += "; " + c.Note
			}
			lines = append(lines, line)
			for k, v := range c.Violations {
				if k == 5 {
					lines = append(lines, fmt.Sprintf("  ... and %d more", len(c.Violations)-5))
					break
				}
				lines = append(lines, "  "+strings.ReplaceAll(strings.TrimRight(v, "\n"), "\n", "\n  "))
			}
		}
		lines = append(lines, r.Mistakes.lines()...)
		lines = append(lines, r.RevokeCA.lines()...)
		for _, n := range r.NotApplicable {
			lines = append(lines, fmt.Sprintf("%-26s not applicable: %s", n.What, n.Why))
		}
		if len(r.Unavailable) > 0 {
			var us []string
			for k, d := range r.Unavailable {
				f := r.Faults[k]
				held := ""
				if f.Healed > f.At {
					held = fmt.Sprintf(" (%.1fs)", float64(f.Healed-f.At)/1e9)
				}
				us = append(us, fmt.Sprintf("%s %s%s: %s", f.Kind, f.Target, held, ms(d)))
			}
			lines = append(lines, "unavailability per fault (injection to the first later write acknowledged): "+strings.Join(us, "; "))
		}
		if r.Unknown > 0 {
			lines = append(lines, fmt.Sprintf("unknown outcomes resolved from the rest of the history and the converged registry: %d writes took effect, %d did not, %d either way (reads with unknown outcomes need no resolution)",
				r.Lin.UnknownApplied, r.Lin.UnknownNotApplied, r.Lin.UnknownEither))
		}
		for _, a := range DesignAllowances {
			if nodes := r.Lin.Allowed[a]; len(nodes) > 0 {
				lines = append(lines, fmt.Sprintf("allowed stale answer %s on %d nodes (docs/chaos.md; not a violation): %s", a, len(nodes), strings.Join(nodes, " ")))
			}
		}
		for _, e := range r.Lin.Excerpts {
			lines = append(lines, strings.TrimRight(e, "\n"))
		}
		for _, n := range r.Notes {
			lines = append(lines, "note: "+n)
		}
		if !r.Passed() || r.Err != nil {
			lines = append(lines, fmt.Sprintf("kept: %s (journal logs, history.txt); same schedule again: chaos -seed %d -scenario %s", r.Dir, r.Seed, r.Scenario))
		}
		t0 := ""
		if !r.T0.IsZero() {
			t0 = "; history time 0 = " + r.T0.UTC().Format("15:04:05.000")
		}
		fmt.Fprintf(w, "\n== %s (%d journals, %s, seed %d%s)\n", r.Scenario, r.Journals, r.Elapsed.Round(time.Second), r.Seed, t0)
		for _, l := range lines {
			fmt.Fprintln(w, "  "+strings.ReplaceAll(l, "\n", "\n  "))
		}
	}
	fmt.Fprintln(w)
	out, _ := json.Marshal(summary(results, seed, pass))
	fmt.Fprintln(w, string(out))
	// Last, because a CI log is often read from its tail, and the JSON
	// line above runs to several kilobytes: what failed, in a few lines.
	for _, r := range results {
		for _, l := range r.failureDigest() {
			fmt.Fprintln(w, l)
		}
	}
	return pass
}

// digestLen bounds one reason in the failure digest; the scenario's own
// section above has it whole.
const digestLen = 400

// failureDigest is why a failed run failed, one reason a line after a
// header that names the scenario and how to run its schedule again;
// nothing for a run that passed.
func (r *ScenarioResult) failureDigest() []string {
	if r.Passed() {
		return nil
	}
	var why []string
	if r.Err != nil {
		why = append(why, "error: "+r.Err.Error())
	}
	if lin := r.Lin.Verdict == "yes" || r.naLinearizable() && r.Lin.Verdict == "n/a"; !lin {
		why = append(why, fmt.Sprintf("linearizable %q: illegal on %v, NO_LEADER written on %v, checker timed out on %v",
			r.Lin.Verdict, r.Lin.Illegal, r.Lin.NoLeader, r.Lin.TimedOut))
	}
	for _, m := range r.Evidence() {
		why = append(why, "not shown: "+m)
	}
	for _, c := range r.Checks {
		if !c.OK() {
			why = append(why, fmt.Sprintf("%s violated (%d): %s", c.Name, len(c.Violations), c.Violations[0]))
		}
	}
	out := []string{fmt.Sprintf("FAILED %s (seed %d): chaos -seed %d -scenario %s runs its schedule again; kept: %s", r.Scenario, r.Seed, r.Seed, r.Scenario, r.Dir)}
	for _, w := range why {
		w = strings.Join(strings.Fields(w), " ")
		if len(w) > digestLen {
			w = w[:digestLen] + "…"
		}
		out = append(out, "  "+w)
	}
	return out
}

type jsonScenario struct {
	Scenario     string         `json:"scenario"`
	Journals     int            `json:"journals"`
	Ops          int            `json:"ops"`
	OK           int            `json:"ok"`
	Refused      int            `json:"refused"`
	Unknown      int            `json:"unknown"`
	Faults       int            `json:"faults"`
	LeaderChgs   int            `json:"leader_changes"`
	UnavailP50   int64          `json:"unavail_p50_ms"`
	UnavailP99   int64          `json:"unavail_p99_ms"`
	Linearizable string         `json:"linearizable"`
	Allowed      map[string]int `json:"allowed_stale_nodes"`
	Resolved     [3]int         `json:"unknown_applied_notapplied_either"`
	Invariants   map[string]int `json:"invariant_violations"`
	Checked      map[string]int `json:"invariant_checked"`
	NA           []string       `json:"invariants_not_applicable"`
	AfterHeal    map[string]int `json:"after_heal_ok"`
	AfterHealMin map[string]int `json:"after_heal_min"`
	ProbeCalls   int            `json:"probe_calls"`
	ProbeFinal   int            `json:"probe_final_refusals"`
	Error        string         `json:"error,omitempty"`
	Pass         bool           `json:"pass"`
	Seconds      float64        `json:"seconds"`
}

func summary(results []*ScenarioResult, seed uint64, pass bool) any {
	var ss []jsonScenario
	violations := 0
	for _, r := range results {
		s := jsonScenario{Scenario: r.Scenario, Journals: r.Journals, Ops: r.Ops, OK: r.OK, Refused: r.Failed, Unknown: r.Unknown,
			Faults: len(r.Faults), LeaderChgs: LeaderChanges(r.Leaders), UnavailP50: Percentile(r.Unavailable, 50).Milliseconds(), UnavailP99: Percentile(r.Unavailable, 99).Milliseconds(),
			Linearizable: r.Lin.Verdict, Allowed: map[string]int{}, Resolved: [3]int{r.Lin.UnknownApplied, r.Lin.UnknownNotApplied, r.Lin.UnknownEither}, Invariants: map[string]int{}, Pass: r.Passed(), Seconds: r.Elapsed.Seconds()}
		for a, nodes := range r.Lin.Allowed {
			s.Allowed[string(a)] = len(nodes)
		}
		s.Checked, s.AfterHeal, s.AfterHealMin = map[string]int{}, map[string]int{}, map[string]int{}
		for _, c := range r.Checks {
			s.Invariants[c.Name] = len(c.Violations)
			s.Checked[c.Name] = c.Checked
			violations += len(c.Violations)
		}
		for _, n := range r.NotApplicable {
			s.NA = append(s.NA, n.What)
		}
		for k, m := range r.AfterHealMin {
			s.AfterHealMin[string(k)] = m
			s.AfterHeal[string(k)] = r.AfterHeal[k]
		}
		s.ProbeCalls, s.ProbeFinal = r.Probes.Calls, r.Probes.FinalRefusals()
		if r.Lin.Verdict != "yes" {
			violations += len(r.Lin.Illegal) + len(r.Lin.NoLeader) + len(r.Lin.TimedOut)
		}
		if r.Err != nil {
			s.Error = r.Err.Error()
			violations++
		}
		violations += len(r.Evidence())
		ss = append(ss, s)
	}
	return map[string]any{"chaos": "pact", "seed": seed, "pass": pass, "violations": violations, "scenarios": ss}
}
