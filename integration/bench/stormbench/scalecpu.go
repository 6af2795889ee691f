package main

// scale-cpu (make bench-scale-cpu) runs the pact storm and the replicating
// floor's at several sizes and sets the journals' CPU per agent side by
// side: issue 39 wants it flat, pact's at 10,000 and 30,000 agents within
// 1.2 times its figure at 1,000. Each run is a child process, as pair's
// are (pair.go says why).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
)

// targetFlatCPU is issue 39's bound on the growth of the journals' CPU per
// agent from the smallest size to the largest.
const targetFlatCPU = 1.2

func runScaleCPU(args []string) int {
	var f stormFlags
	fs := newStormFlagSet("stormbench scale-cpu", &f)
	sizesFlag := fs.String("sizes", "1000,3000,10000,30000", "agents of each run, comma-separated, smallest first")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	sizes, err := parseSizes(*sizesFlag)
	if err == nil {
		err = checkPairFlags(&f, fs, 1)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "stormbench: %v\n", err)
		return 2
	}
	children, err := newChildRunner()
	if err != nil {
		logf("%v", err)
		return 1
	}
	var rows []scaleCPURow
	for _, n := range sizes {
		row := scaleCPURow{Agents: n}
		flags := func(name string) []string {
			var out []string
			for _, a := range forwardedFlags(fs, f.dir, fmt.Sprintf("scale%d-%s", n, name)) {
				if !strings.HasPrefix(a, "-agents=") {
					out = append(out, a)
				}
			}
			return append(out, "-agents="+strconv.Itoa(n))
		}
		if err := children.runStorms(fmt.Sprintf("scale-cpu, %d agents:", n), fmt.Sprintf("scale-cpu, %d agents,", n), os.Stderr, flags,
			childStorm{"pact", []string{"storm"}, &row.pact},
			childStorm{"floor", []string{"storm", "-floor"}, &row.floor}); err != nil {
			logf("%v", err)
			return 1
		}
		rows = append(rows, row)
	}
	sum := summarizeScaleCPU(rows)
	scaleCPUReport(os.Stdout, sum)
	if !sum.Pass {
		return 1
	}
	return 0
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-sizes: %q is not a positive number of agents", p)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, errors.New("-sizes: give the sizes smallest first, each once")
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("-sizes: none given")
	}
	return out, nil
}

// scaleCPURow is one size: the pact run and the replicating floor's.
type scaleCPURow struct {
	Agents      int `json:"agents"`
	pact, floor runLine
}

// scaleCPUSize is one size's figures in the JSON line. Growth is the
// figure over the same figure at the smallest size.
type scaleCPUSize struct {
	Agents                 int      `json:"agents"`
	Pass                   bool     `json:"pass"`
	PactJournalCPU         float64  `json:"pact_journal_cpu_ms_per_agent"`
	FloorJournalCPU        float64  `json:"floor_journal_cpu_ms_per_agent"`
	JournalCPUVsFloor      float64  `json:"journal_cpu_vs_floor"`
	PactGrowth             float64  `json:"pact_growth"`
	FloorGrowth            float64  `json:"floor_growth"`
	PactRenewJournalCPU    *float64 `json:"pact_journal_cpu_ms_per_renew,omitempty"`
	FloorRenewJournalCPU   *float64 `json:"floor_journal_cpu_ms_per_renew,omitempty"`
	RenewJournalCPUVsFloor *float64 `json:"renew_journal_cpu_vs_floor,omitempty"`
	PactRenewGrowth        *float64 `json:"pact_renew_growth,omitempty"`
	PactSeconds            float64  `json:"pact_seconds"`
	FloorSeconds           float64  `json:"floor_seconds"`
}

type scaleCPUSummary struct {
	Bench  string         `json:"bench"`
	Pass   bool           `json:"pass"`
	Reason string         `json:"reason"`
	Sizes  []scaleCPUSize `json:"sizes"`
	// Flat says whether pact's journal CPU per agent at every size is
	// within targetFlatCPU of the smallest size's (enroll, and renew when
	// it ran).
	Flat bool `json:"flat_within_1.2"`
}

func summarizeScaleCPU(rows []scaleCPURow) scaleCPUSummary {
	sum := scaleCPUSummary{Bench: "storm-scale-cpu", Pass: len(rows) > 0, Flat: len(rows) > 0, Reason: "every run passed its final check"}
	var problems []string
	for i, r := range rows {
		s := scaleCPUSize{
			Agents: r.Agents, Pass: r.pact.Pass && r.floor.Pass,
			PactJournalCPU: r.pact.JournalCPU, FloorJournalCPU: r.floor.JournalCPU,
			JournalCPUVsFloor: over(r.pact.JournalCPU, r.floor.JournalCPU),
			PactGrowth:        over(r.pact.JournalCPU, rows[0].pact.JournalCPU),
			FloorGrowth:       over(r.floor.JournalCPU, rows[0].floor.JournalCPU),
			PactSeconds:       r.pact.Seconds, FloorSeconds: r.floor.Seconds,
			PactRenewJournalCPU: r.pact.RenewJournalCPU, FloorRenewJournalCPU: r.floor.RenewJournalCPU,
		}
		if r.pact.RenewJournalCPU != nil && r.floor.RenewJournalCPU != nil {
			v := over(*r.pact.RenewJournalCPU, *r.floor.RenewJournalCPU)
			s.RenewJournalCPUVsFloor = &v
		}
		if r.pact.RenewJournalCPU != nil && rows[0].pact.RenewJournalCPU != nil {
			v := over(*r.pact.RenewJournalCPU, *rows[0].pact.RenewJournalCPU)
			s.PactRenewGrowth = &v
			if i > 0 && v > targetFlatCPU {
				sum.Flat = false
			}
		}
		if i > 0 && s.PactGrowth > targetFlatCPU {
			sum.Flat = false
		}
		for _, side := range []runLine{r.pact, r.floor} {
			if !side.Pass {
				problems = append(problems, fmt.Sprintf("%d agents: %s: %s", r.Agents, side.Bench, side.Reason))
			}
		}
		sum.Sizes = append(sum.Sizes, s)
	}
	if len(problems) > 0 {
		sum.Pass, sum.Reason = false, strings.Join(problems, "; ")
	}
	if len(rows) == 0 {
		sum.Reason = "no size ran"
	}
	return sum
}

func scaleCPUReport(out io.Writer, sum scaleCPUSummary) {
	fmt.Fprintf(out, "\njournal CPU per agent by size: pact's three journals against the replicating floor's three stubs (ms of CPU, summed over the journals, per agent)\n\n")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "agents\tpass\tpact enroll\tfloor enroll\tpact/floor\tpact growth\tfloor growth\tpact renew\tfloor renew\tpact/floor\tpact renew growth\t")
	opt := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.3f", *v)
	}
	for _, s := range sum.Sizes {
		fmt.Fprintf(w, "%d\t%v\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t%s\t\n", s.Agents, s.Pass, s.PactJournalCPU, s.FloorJournalCPU, s.JournalCPUVsFloor, s.PactGrowth, s.FloorGrowth,
			opt(s.PactRenewJournalCPU), opt(s.FloorRenewJournalCPU), opt(s.RenewJournalCPUVsFloor), opt(s.PactRenewGrowth))
	}
	w.Flush()
	fmt.Fprintf(out, "\npact's cost per agent flat within %.1fx of the smallest size: %v\nfinal check: %s: %s\n\n", targetFlatCPU, sum.Flat, map[bool]string{true: "PASS", false: "FAIL"}[sum.Pass], sum.Reason)
	b, _ := json.Marshal(sum)
	fmt.Fprintln(out, string(b))
}
