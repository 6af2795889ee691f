package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// What a scenario's verdict must cover, beyond "nothing was violated". A
// check that could pass with pact broken is a defect, so:
//
//   - every invariant (and linearizability) either looked at something in
//     this run (Check.Checked > 0) or is declared not applicable to the
//     scenario, with the reason (invariantRules, Scenario.NotApplicable);
//     the report prints both;
//   - once the faults are healed, the load must still succeed: at least
//     so many successful calls of each kind (AfterHealPlan), or the run
//     fails, whatever else it shows (a quorum that refuses every renewal
//     after a partition violates no safety invariant);
//   - after every leader loss the workload probes (Workload.Probe) and the
//     probes must have been made and answered: a read and a final refusal
//     at least.
//
// Adding a scenario: give it a Scenario entry (scenario.go) with its
// Inject schedule and the flags that say what it does (Leaders, Disk,
// PausesLeader ...); the rules below then say which invariants and which
// kinds of call after healing it must show. If its schedule kills or
// freezes a leader, call e.leaderLost() right after. If an invariant or a
// kind of call cannot arise in it, declare that in its NotApplicable with
// the reason, rather than letting a check run on nothing. Adding an
// invariant: a name (check.go), a rule here saying where it does not
// apply, and its check in RunScenario (run.go) under plan.applies.

// InvLinearizable names the linearizability check among the invariants
// (its outcome is ScenarioResult.Lin, not a Check).
const InvLinearizable = "linearizable"

// NotApplicable is an invariant, or a kind of call after healing, that a
// scenario does not check, and why.
type NotApplicable struct {
	What string
	Why  string
}

// noRegistryWorkload is why the registry checks do not apply to the
// liveness scenario.
const noRegistryWorkload = "no registry workload: its nodes are enrolled once and only stream (Active -> Inactive is not in the registry model)"

// invariantRules lists every invariant of the verdict, in report order,
// with why it does not apply to a scenario ("" when it does).
var invariantRules = []struct {
	name string
	na   func(sc Scenario) string
}{
	{InvLinearizable, registryOnly},
	{InvAckedWrites, registryOnly},
	{InvHardware, registryOnly},
	{InvCertsComitted, registryOnly},
	{InvNoRenewRevoke, registryOnly},
	{InvIdentical, func(Scenario) string { return "" }},
	{InvSerials, registryOnly},
	{InvExLeader, func(sc Scenario) string {
		if sc.PausesLeader {
			return ""
		}
		return "no leader is frozen and thawed (certs-committed covers every certificate a client received)"
	}},
	{InvSnapshot, func(sc Scenario) string {
		if sc.Snapshot {
			return ""
		}
		return "no follower is held back while the others compact their logs"
	}},
	{InvNoStall, func(sc Scenario) string {
		if sc.Slow {
			return ""
		}
		return "no follower's link is slowed"
	}},
	{InvDiskFull, func(sc Scenario) string {
		if sc.Disk {
			return ""
		}
		return "no journal's disk fills"
	}},
	{InvMembership, func(sc Scenario) string {
		switch {
		case sc.Membership:
			return ""
		case sc.Mistakes:
			return "no change is asked under a fault: the configuration changes only to repair the mistakes, and one-quorum checks it after each"
		case sc.RevokeCA:
			return "no change is asked under a fault: the revoked journal is removed and added back only to restore the quorum, and revoked-ca-cut-off checks the outcome (the remove, the add, the journal running on, one quorum of three)"
		}
		return "the quorum's configuration does not change"
	}},
	{InvMistakes, func(sc Scenario) string {
		if sc.Mistakes {
			return ""
		}
		return "no operator mistake is made (no journal is wiped, recovered or restored)"
	}},
	{InvOneQuorum, func(sc Scenario) string {
		if sc.Mistakes {
			return ""
		}
		return "the quorum id never changes and no journal is wiped (journals-identical covers the registry)"
	}},
	{InvRevokedCA, func(sc Scenario) string {
		if sc.RevokeCA {
			return ""
		}
		return "no journal CA is revoked"
	}},
	{InvLiveness, func(sc Scenario) string {
		if sc.Liveness {
			return ""
		}
		return "the workload's nodes never stream (--heartbeat-timeout 24h): no node may be marked Inactive"
	}},
}

func registryOnly(sc Scenario) string {
	if sc.Liveness {
		return noRegistryWorkload
	}
	return ""
}

// InvariantPlan is what a scenario's verdict checks: Apply, the
// invariants that must each look at something; NA, the others, each with
// why it does not apply.
type InvariantPlan struct {
	Apply []string
	NA    []NotApplicable
}

func (p InvariantPlan) applies(name string) bool { return slices.Contains(p.Apply, name) }

// PlanInvariants returns sc's invariant plan: invariantRules, with the
// scenario's own NotApplicable declarations on top.
func PlanInvariants(sc Scenario) InvariantPlan {
	var p InvariantPlan
	for _, r := range invariantRules {
		why := r.na(sc)
		if w, ok := sc.NotApplicable[r.name]; ok && why == "" {
			why = w
		}
		if why == "" {
			p.Apply = append(p.Apply, r.name)
		} else {
			p.NA = append(p.NA, NotApplicable{What: r.name, Why: why})
		}
	}
	return p
}

// AfterHealKinds is every kind of call whose successes after healing are
// counted, in report order.
var AfterHealKinds = []OpKind{OpRegister, OpEnroll, OpRenew, OpDecommission, OpRead, OpTakeover}

// DefaultAfterHeal is the fewest successful calls of each kind the load
// must make once the faults are healed. A healthy quorum makes these in
// well under a second (about 100 calls a second, 40% of them renewals);
// the recovery lasts until they are reached or recoveryMax has passed.
var DefaultAfterHeal = map[OpKind]int{OpRegister: 2, OpEnroll: 3, OpRenew: 5, OpDecommission: 2, OpRead: 5, OpTakeover: 1}

// noReboots is why takeovers are not required where the workload does
// not reboot nodes with a new key.
const noReboots = "no reboots with a new key: without --takeover-window the workload never asks for a takeover (another key is refused ALREADY_ACTIVE)"

// AfterHealPlan returns the fewest successful calls of each kind sc's
// load must make once its faults are healed, and the kinds it need not
// make, each with why.
func AfterHealPlan(sc Scenario) (map[OpKind]int, []NotApplicable) {
	min := map[OpKind]int{}
	var na []NotApplicable
	for _, k := range AfterHealKinds {
		why := sc.NotApplicable[string(k)]
		switch {
		case sc.Liveness:
			why = noRegistryWorkload
		case k == OpTakeover && sc.TakeoverWindow == 0:
			why = noReboots
		}
		if why != "" {
			na = append(na, NotApplicable{What: string(k), Why: why})
			continue
		}
		min[k] = DefaultAfterHeal[k]
		if v, ok := sc.AfterHeal[k]; ok && v > 0 {
			min[k] = v
		}
	}
	return min, na
}

// CountAfterHeal counts the successful calls of each kind made at or after
// healed (history time), the final reads left out.
func CountAfterHeal(recs []*Record, healed int64) map[OpKind]int {
	out := map[OpKind]int{}
	for _, r := range recs {
		if r.Final || r.Call < healed || r.Out.Result != ResultOK {
			continue
		}
		out[r.In.Kind]++
	}
	return out
}

// minimumsMet reports whether counts reach every minimum.
func minimumsMet(counts, min map[OpKind]int) bool {
	for k, m := range min {
		if counts[k] < m {
			return false
		}
	}
	return true
}

// recoveryMax bounds how long the load runs after healing while the
// minimums are not reached; a quorum that needs longer fails the run.
const recoveryMax = 15 * time.Second

// ProbeCounts is what the probes after leader losses saw.
type ProbeCounts struct {
	// Losses is how many leader losses were announced; Unprobed lists
	// those (history time) with no probe called within probeWindow.
	Losses   int
	Unprobed []int64
	Calls    int
	// ReadsOK: reads answered (the node's record, not a refusal);
	// WritesOK: other calls that succeeded (a probe made to be refused
	// that succeeded is the model's to judge).
	ReadsOK, WritesOK int
	// Final counts final refusals by reason (definite, not
	// retry-after, not NO_LEADER, RATE_LIMITED or UNREACHABLE).
	Final map[string]int
	// NotFinal: refusals that say nothing of the registry (noEffect) or
	// come with a retry-after; Unknown: unknown outcomes.
	NotFinal, Unknown int
}

// FinalRefusals is how many probes were refused for good.
func (p ProbeCounts) FinalRefusals() int {
	n := 0
	for _, c := range p.Final {
		n += c
	}
	return n
}

// CountProbes counts the probe calls of a history and checks that each
// leader loss (history times) was followed by some.
func CountProbes(recs []*Record, losses []int64) ProbeCounts {
	p := ProbeCounts{Losses: len(losses), Final: map[string]int{}}
	var calls []int64
	for _, r := range recs {
		if !r.Probe {
			continue
		}
		p.Calls++
		calls = append(calls, r.Call)
		switch {
		case r.Out.Result == ResultOK && r.In.Kind == OpRead:
			p.ReadsOK++
		case r.Out.Result == ResultOK:
			p.WritesOK++
		case r.Out.Result == ResultFailed && !noEffect(r.Out.Reason) && !r.Out.Retryable:
			p.Final[r.Out.Reason]++
		case r.Out.Result == ResultFailed:
			p.NotFinal++
		default:
			p.Unknown++
		}
	}
	for _, t := range losses {
		if !slices.ContainsFunc(calls, func(c int64) bool { return c >= t && c <= t+int64(probeWindow) }) {
			p.Unprobed = append(p.Unprobed, t)
		}
	}
	return p
}

func (p ProbeCounts) String() string {
	var reasons []string
	for r := range p.Final {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	var fs []string
	for _, r := range reasons {
		fs = append(fs, fmt.Sprintf("%s %d", r, p.Final[r]))
	}
	final := "none"
	if len(fs) > 0 {
		final = strings.Join(fs, ", ")
	}
	return fmt.Sprintf("%d calls after %d leader loss(es): %d reads answered, %d other successes; final refusals: %s; %d not final (no leader, shed, unreachable, retry-after), %d unknown",
		p.Calls, p.Losses, p.ReadsOK, p.WritesOK, final, p.NotFinal, p.Unknown)
}

// coverage says what the verdict of r failed to look at: an invariant
// that checked nothing, one neither checked nor declared not applicable,
// a kind of call too rare after healing, leader losses not probed.
func (r *ScenarioResult) coverage() []string {
	var out []string
	for _, c := range r.Checks {
		if c.Checked == 0 {
			out = append(out, fmt.Sprintf("invariant %s checked nothing (it would pass with pact broken)", c.Name))
		}
	}
	if r.Err == nil {
		for _, name := range r.Expected {
			if name == InvLinearizable {
				if r.Lin.Nodes == 0 {
					out = append(out, "linearizability checked no node")
				}
				continue
			}
			if !slices.ContainsFunc(r.Checks, func(c Check) bool { return c.Name == name }) {
				out = append(out, fmt.Sprintf("invariant %s was neither checked nor declared not applicable", name))
			}
		}
		for _, k := range AfterHealKinds {
			if m, ok := r.AfterHealMin[k]; ok && r.AfterHeal[k] < m {
				out = append(out, fmt.Sprintf("after healing: %d successful %s calls (at least %d within %v)", r.AfterHeal[k], k, m, recoveryMax))
			}
		}
	}
	p := r.Probes
	if r.NeedProbes && p.Losses == 0 {
		out = append(out, "no leader loss was announced to the workload: nothing probed right after one")
	}
	if p.Losses > 0 {
		if len(p.Unprobed) > 0 {
			var ts []string
			for _, t := range p.Unprobed {
				ts = append(ts, fmt.Sprintf("%.1fs", float64(t)/1e9))
			}
			out = append(out, fmt.Sprintf("no probe within %v of the leader losses at %s", probeWindow, strings.Join(ts, " ")))
		}
		if p.ReadsOK == 0 {
			out = append(out, "no probe read after a leader loss was answered")
		}
		if p.FinalRefusals() == 0 {
			out = append(out, "no probe after a leader loss was refused for good (a final refusal)")
		}
	}
	return out
}
