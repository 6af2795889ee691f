package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
)

// tpm-cost (make bench-tpm) prices attestation: it runs the boot storm
// without TPMs and then the same storm with every node attesting (storm
// -tpm, simtpm.go), the two back to back, -pairs times, and reports per
// enrollment and per renewal what the TPM round adds to the journals' CPU
// and takes from throughput. Ratios of runs made in the same minutes are
// what to read on a shared machine, not the absolute figures.

// attestLine is what tpm-cost reads of a storm's JSON line.
type attestLine struct {
	runLine
	PerSec        float64            `json:"streaming_per_s"`
	RenewPerSec   *float64           `json:"renew_per_s"`
	TPM           bool               `json:"tpm"`
	EnrollRefused float64            `json:"enroll_refused"`
	RenewRefused  float64            `json:"renew_refused"`
	Verdicts      map[string]float64 `json:"boot_policy_verdicts"`
	RenewVerdicts map[string]float64 `json:"renew_boot_policy_verdicts"`
	OtherCPU      float64            `json:"other_cpu_share"`
}

// tpmCostPair is one pair's figures: without TPMs (plain), with.
type tpmCostPair struct {
	Pair int  `json:"pair"`
	Pass bool `json:"pass"`
	// Journal CPU per enrollment (ms), without and with attestation, the
	// difference (what attestation costs the journals per enrollment) and
	// the ratio.
	JournalCPU       float64 `json:"journal_cpu_ms_per_enroll"`
	JournalCPUTPM    float64 `json:"journal_cpu_ms_per_enroll_tpm"`
	AttestJournalCPU float64 `json:"attestation_journal_cpu_ms_per_enroll"`
	JournalCPURatio  float64 `json:"journal_cpu_ratio_tpm"`
	// Enrollments per second (to every node streaming), without and
	// with, and with over without.
	PerSec          float64 `json:"enroll_per_s"`
	PerSecTPM       float64 `json:"enroll_per_s_tpm"`
	ThroughputRatio float64 `json:"throughput_ratio_tpm"`
	// The same for the renewal storm (nil when either run had none).
	RenewJournalCPU       *float64 `json:"journal_cpu_ms_per_renew,omitempty"`
	RenewJournalCPUTPM    *float64 `json:"journal_cpu_ms_per_renew_tpm,omitempty"`
	AttestRenewJournalCPU *float64 `json:"attestation_journal_cpu_ms_per_renew,omitempty"`
	RenewPerSec           *float64 `json:"renew_per_s,omitempty"`
	RenewPerSecTPM        *float64 `json:"renew_per_s_tpm,omitempty"`
	RenewThroughputRatio  *float64 `json:"renew_throughput_ratio_tpm,omitempty"`
	// Refusals and boot policy matches of the attesting run.
	Refused float64 `json:"refused_tpm"`
	Matched float64 `json:"boot_policy_matches_tpm"`
	// OtherCPU is the share of the machine others took, without / with.
	OtherCPU    float64 `json:"other_cpu_share"`
	OtherCPUTPM float64 `json:"other_cpu_share_tpm"`
}

func runTPMCost(args []string) int {
	var f stormFlags
	fs := newStormFlagSet("stormbench tpm-cost", &f)
	pairs := fs.Int("pairs", 1, "how many times to run the storm without TPMs and then with every node attesting, back to back")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *pairs < 1 || f.floor || f.tpm {
		fmt.Fprintln(os.Stderr, "stormbench tpm-cost: -pairs must be positive; it runs the pact storm without and with -tpm itself (no -floor, no -tpm)")
		return 2
	}
	children, err := newChildRunner()
	if err != nil {
		logf("%v", err)
		return 1
	}
	var out []tpmCostPair
	for i := 1; i <= *pairs; i++ {
		var plain, tpm attestLine
		flags := func(name string) []string { return forwardedFlags(fs, f.dir, fmt.Sprintf("tpm-cost%d-%s", i, name)) }
		if err := children.runStorms(fmt.Sprintf("pair %d of %d:", i, *pairs), fmt.Sprintf("pair %d,", i), os.Stdout, flags,
			childStorm{"plain", []string{"storm"}, &plain},
			childStorm{"tpm", []string{"storm", "-tpm"}, &tpm}); err != nil {
			logf("%v", err)
			return 1
		}
		out = append(out, tpmCostOf(i, plain, tpm))
	}
	if err := tpmCostReport(os.Stdout, f.agents, out); err != nil {
		return 1
	}
	return 0
}

// tpmCostOf sets the attesting run beside the plain one.
func tpmCostOf(i int, plain, tpm attestLine) tpmCostPair {
	p := tpmCostPair{Pair: i, Pass: plain.Pass && tpm.Pass && tpm.TPM && plain.Agents == tpm.Agents,
		JournalCPU: plain.JournalCPU, JournalCPUTPM: tpm.JournalCPU, AttestJournalCPU: round(tpm.JournalCPU-plain.JournalCPU, 3),
		JournalCPURatio: round(over(tpm.JournalCPU, plain.JournalCPU), 3),
		PerSec:          plain.PerSec, PerSecTPM: tpm.PerSec, ThroughputRatio: round(over(tpm.PerSec, plain.PerSec), 3),
		Refused: tpm.EnrollRefused + tpm.RenewRefused, Matched: tpm.Verdicts["match"] + tpm.RenewVerdicts["match"],
		OtherCPU: plain.OtherCPU, OtherCPUTPM: tpm.OtherCPU}
	if plain.RenewJournalCPU != nil && tpm.RenewJournalCPU != nil {
		a, b := *plain.RenewJournalCPU, *tpm.RenewJournalCPU
		d := round(b-a, 3)
		p.RenewJournalCPU, p.RenewJournalCPUTPM, p.AttestRenewJournalCPU = &a, &b, &d
	}
	if plain.RenewPerSec != nil && tpm.RenewPerSec != nil {
		a, b := *plain.RenewPerSec, *tpm.RenewPerSec
		r := round(over(b, a), 3)
		p.RenewPerSec, p.RenewPerSecTPM, p.RenewThroughputRatio = &a, &b, &r
	}
	return p
}

// tpmCostReport prints a table, then one JSON line: every pair and the
// medians of the attesting run's cost and ratios.
func tpmCostReport(w io.Writer, agents int, pairs []tpmCostPair) error {
	fmt.Fprintf(w, "\nwhat attestation costs: %d agents, the storm without TPMs and then with every node attesting (simulated TPMs, a TPM round at every enrollment and renewal), back to back\n\n", agents)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pair\tjournal ms/enroll\twith TPM\tattestation ms\tratio\tenroll/s\twith TPM\tratio\tjournal ms/renew\twith TPM\tattestation ms\trenew/s\twith TPM\tratio\tothers' CPU\t")
	opt := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.3f", *v)
	}
	pass := true
	var attest, cpuRatio, thrRatio, attestRenew, renewRatio []float64
	for _, p := range pairs {
		fmt.Fprintf(tw, "%d\t%.3f\t%.3f\t%.3f\t%.2f\t%.0f\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f%% / %.0f%%\t\n", p.Pair,
			p.JournalCPU, p.JournalCPUTPM, p.AttestJournalCPU, p.JournalCPURatio, p.PerSec, p.PerSecTPM, p.ThroughputRatio,
			opt(p.RenewJournalCPU), opt(p.RenewJournalCPUTPM), opt(p.AttestRenewJournalCPU), opt(p.RenewPerSec), opt(p.RenewPerSecTPM), opt(p.RenewThroughputRatio),
			100*p.OtherCPU, 100*p.OtherCPUTPM)
		pass = pass && p.Pass && p.Refused == 0
		attest, cpuRatio, thrRatio = append(attest, p.AttestJournalCPU), append(cpuRatio, p.JournalCPURatio), append(thrRatio, p.ThroughputRatio)
		if p.AttestRenewJournalCPU != nil {
			attestRenew = append(attestRenew, *p.AttestRenewJournalCPU)
		}
		if p.RenewThroughputRatio != nil {
			renewRatio = append(renewRatio, *p.RenewThroughputRatio)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "attestation ms = journal CPU per enrollment (renewal) with the TPM round minus without; ratio = with / without; others' CPU = the share of the machine other processes took, without / with")
	// The median to three places (spreadOfValues), 0 for none.
	median := func(vs []float64) float64 {
		if s := spreadOfValues(vs); s != nil {
			return s.Median
		}
		return 0
	}
	js := map[string]any{
		"bench":  "tpm-cost",
		"agents": agents,
		"pass":   pass,
		"pairs":  pairs,
		"median_attestation_journal_cpu_ms_per_enroll": median(attest),
		"median_journal_cpu_ratio_tpm":                 median(cpuRatio),
		"median_throughput_ratio_tpm":                  median(thrRatio),
	}
	if len(attestRenew) > 0 {
		js["median_attestation_journal_cpu_ms_per_renew"] = median(attestRenew)
	}
	if len(renewRatio) > 0 {
		js["median_renew_throughput_ratio_tpm"] = median(renewRatio)
	}
	b, err := json.Marshal(js)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, string(b))
	if !pass {
		return errors.New("a run failed its final check, or the attesting run had refusals")
	}
	return nil
}
