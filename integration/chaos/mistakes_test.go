package chaos

import (
	"strings"
	"testing"

	"github.com/pact-hpc/pact/cli"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// A run of the three mistakes that met everything, and every way
// CheckMistakes must reject one: an expected refusal that did not
// happen (the wiped journal started instead of exiting 4, the lost one
// served), a control or premise not met, a quorum that stopped serving.
func TestCheckMistakes(t *testing.T) {
	refused := func(what string) Outcome {
		return Outcome{What: what, Want: "refused", Got: "refused", Refusal: true, Seen: true}
	}
	good := func() *MistakesResult {
		return &MistakesResult{Initial: "q1", Recovered: "q2", Mistakes: []Mistake{
			{Name: "wiped", From: 1e9, To: 3e9, Outcomes: []Outcome{refused("j2 wiped, old flags"), {What: "j2 added back", Seen: true}}},
			{Name: "recovery", From: 5e9, To: 8e9, Outcomes: []Outcome{{What: "premise", Seen: true}, {What: "recover", Seen: true}, refused("quorum_mismatch"), refused("never serves")}},
			{Name: "restore", From: 9e9, To: 10e9, Outcomes: []Outcome{refused("another root"), {What: "own root", Seen: true}}},
		}}
	}
	// One write acknowledged inside each window.
	history := recs(
		op{node: "n1", in: Input{Kind: OpRegister}, out: Output{Result: ResultOK}, call: 1500, ret: 1600},
		op{node: "n1", in: Input{Kind: OpEnroll}, out: Output{Result: ResultOK, Serial: "s1"}, call: 6000, ret: 6100},
		op{node: "n1", in: Input{Kind: OpDecommission}, out: Output{Result: ResultOK}, call: 9200, ret: 9300},
	)
	if c := CheckMistakes(good(), history); !c.OK() || c.Checked != 8 {
		t.Fatalf("a run that met every expectation: %v, %d checked", c.Violations, c.Checked)
	}
	// A mistake over in a tenth of a second is judged over a second.
	quick := good()
	quick.Mistakes[2].To = 9.1e9
	if c := CheckMistakes(quick, history); !c.OK() {
		t.Fatalf("a write acknowledged in the second a 0.1 s mistake began: %v", c.Violations)
	}
	cases := []struct {
		name   string
		break_ func(m *MistakesResult)
		recs   []*Record
		want   string
	}{
		{"the wiped journal started instead of exiting 4", func(m *MistakesResult) {
			m.Mistakes[0].Outcomes[0].Seen, m.Mistakes[0].Outcomes[0].Got = false, "still running 60 s after its start"
		}, nil, "expected refusal did not happen: j2 wiped, old flags"},
		{"the survivor never refused the lost journal", func(m *MistakesResult) { m.Mistakes[1].Outcomes[2].Seen = false }, nil, "expected refusal did not happen: quorum_mismatch"},
		{"the lost journal served", func(m *MistakesResult) { m.Mistakes[1].Outcomes[3].Seen = false }, nil, "expected refusal did not happen: never serves"},
		{"the restore under another root wrote", func(m *MistakesResult) { m.Mistakes[2].Outcomes[0].Seen = false }, nil, "expected refusal did not happen: another root"},
		{"the premise of the recovery not established", func(m *MistakesResult) { m.Mistakes[1].Outcomes[0].Seen = false }, nil, "recovery: expected: premise"},
		{"the control restore failed", func(m *MistakesResult) { m.Mistakes[2].Outcomes[1].Seen = false }, nil, "restore: expected: own root"},
		{"the journal not brought back", func(m *MistakesResult) { m.Mistakes[0].Outcomes[1].Seen = false }, nil, "wiped: expected: j2 added back"},
		{"no write acknowledged during a mistake", func(*MistakesResult) {}, history[1:], "wiped: no write acknowledged"},
		{"no write acknowledged in the second a quick mistake began", func(m *MistakesResult) { m.Mistakes[2].To = 9.1e9 }, history[:2],
			"restore: no write acknowledged from 9.0s to 10.0s"},
		{"a write refused is not serving", func(*MistakesResult) {}, recs(
			op{node: "n1", in: Input{Kind: OpRegister}, out: Output{Result: ResultFailed, Reason: "NO_LEADER"}, call: 1500, ret: 1600},
			op{node: "n1", in: Input{Kind: OpEnroll}, out: Output{Result: ResultOK, Serial: "s1"}, call: 6000, ret: 6100},
			op{node: "n1", in: Input{Kind: OpDecommission}, out: Output{Result: ResultOK}, call: 9200, ret: 9300},
		), "wiped: no write acknowledged"},
		{"the scenario stopped", func(m *MistakesResult) { m.Err = "pact-journal recover on j1: exit 1" }, nil, "pact-journal recover on j1"},
		{"no refusal expected at all", func(m *MistakesResult) {
			for k := range m.Mistakes {
				for o := range m.Mistakes[k].Outcomes {
					m.Mistakes[k].Outcomes[o].Refusal = false
				}
			}
		}, nil, "no refusal was expected"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := good()
			tc.break_(m)
			rs := tc.recs
			if rs == nil {
				rs = history
			}
			c := CheckMistakes(m, rs)
			if c.OK() || !strings.Contains(strings.Join(c.Violations, "\n"), tc.want) {
				t.Fatalf("violations %q; want one saying %q", c.Violations, tc.want)
			}
		})
	}
	if c := CheckMistakes(nil, history); c.OK() {
		t.Fatal("no mistakes result passes")
	}
}

// One quorum: every journal reports the same quorum id (its own and each
// member's), the same configuration of voters and leader, and audit
// trails of one history; every way to be two quorums fails.
func TestCheckOneQuorum(t *testing.T) {
	members := []string{"j1", "j2", "j3"}
	view := func(served, id string) cli.QuorumView {
		v := cli.QuorumView{LeaderID: "j1", ServedBy: served, QuorumID: id}
		for _, m := range members {
			v.Members = append(v.Members, cli.JournalMemberView{JournalID: m, Voter: true, Reachable: true, QuorumID: id})
		}
		return v
	}
	reading := func(id string) QuorumReading {
		r := QuorumReading{When: "after", Members: members, WantID: id, NotID: "old", Views: map[string]cli.QuorumView{}, Codes: map[string]int{}, Errs: map[string]string{}, Compared: 10}
		for _, m := range members {
			r.Views[m], r.Codes[m] = view(m, id), 0
		}
		return r
	}
	good := func() *MistakesResult {
		return &MistakesResult{Initial: "old", Recovered: "new", Mistakes: []Mistake{
			{Name: "wiped", Readings: []QuorumReading{func() QuorumReading { r := reading("old"); r.NotID = ""; return r }()}},
			{Name: "recovery", Readings: []QuorumReading{reading("new")}},
		}}
	}
	if c := CheckOneQuorum(good()); !c.OK() || c.Checked != 6 {
		t.Fatalf("one quorum throughout: %v, %d checked", c.Violations, c.Checked)
	}
	cases := []struct {
		name   string
		break_ func(r *QuorumReading, m *MistakesResult)
		want   string
	}{
		{"a journal of another quorum", func(r *QuorumReading, _ *MistakesResult) { v := r.Views["j2"]; v.QuorumID = "other"; r.Views["j2"] = v }, "j2 reports quorum id other, not new"},
		{"a member seen in another quorum", func(r *QuorumReading, _ *MistakesResult) { r.Views["j1"].Members[2].QuorumID = "old" }, `j1 sees member j3 in quorum "old"`},
		{"no quorum id", func(r *QuorumReading, _ *MistakesResult) {
			r.WantID = ""
			v := r.Views["j1"]
			v.QuorumID = ""
			r.Views["j1"] = v
		}, "j1 reports no quorum id"},
		{"the old quorum id after the recovery", func(r *QuorumReading, m *MistakesResult) {
			r.WantID = ""
			for _, id := range members {
				v := r.Views[id]
				v.QuorumID = "old"
				for k := range v.Members {
					v.Members[k].QuorumID = "old"
				}
				r.Views[id] = v
			}
		}, "still reports the old quorum id old"},
		{"the recovery kept the id", func(_ *QuorumReading, m *MistakesResult) { m.Recovered = "old" }, "the recovery kept quorum id old"},
		{"a journal did not answer", func(r *QuorumReading, _ *MistakesResult) { r.Errs["j3"] = "exit 7" }, "j3: exit 7"},
		{"a journal unhealthy", func(r *QuorumReading, _ *MistakesResult) { r.Codes["j2"] = 11 }, "j2: pact journal status exit 11"},
		{"a non-voter left", func(r *QuorumReading, _ *MistakesResult) { r.Views["j1"].Members[1].Voter = false }, "j1 sees j2 as a non-voter"},
		{"a member unreachable", func(r *QuorumReading, _ *MistakesResult) { r.Views["j1"].Members[1].Reachable = false }, "j1 cannot reach j2"},
		{"another configuration", func(r *QuorumReading, _ *MistakesResult) {
			v := r.Views["j3"]
			v.Members = v.Members[:2]
			r.Views["j3"] = v
		}, "j3's configuration is [j1 j2]"},
		{"two leaders", func(r *QuorumReading, _ *MistakesResult) { v := r.Views["j3"]; v.LeaderID = "j3"; r.Views["j3"] = v }, "the journals name 2 leaders"},
		{"no leader", func(r *QuorumReading, _ *MistakesResult) { v := r.Views["j3"]; v.LeaderID = ""; r.Views["j3"] = v }, "a journal knows no leader"},
		{"two histories", func(r *QuorumReading, _ *MistakesResult) { r.History = "audit trails diverge" }, "not one history: audit trails diverge"},
		{"status from another journal", func(r *QuorumReading, _ *MistakesResult) { v := r.Views["j2"]; v.ServedBy = "j1"; r.Views["j2"] = v }, "j2: status served by j1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := good()
			tc.break_(&m.Mistakes[1].Readings[0], m)
			c := CheckOneQuorum(m)
			if c.OK() || !strings.Contains(strings.Join(c.Violations, "\n"), tc.want) {
				t.Fatalf("violations %q; want one saying %q", c.Violations, tc.want)
			}
		})
	}
	if c := CheckOneQuorum(nil); c.OK() {
		t.Fatal("no mistakes result passes")
	}
}

// Audit trails of one quorum are windows of one sequence; anything else
// is two histories.
func TestOneHistory(t *testing.T) {
	seq := audit("n1 register", "n1 enroll s1", "n2 register", "n1 renew s2", "n2 enroll s3", "n1 decommission")
	other := audit("n1 register", "n1 enroll s1", "n2 register", "n1 renew s9")
	other[3].AtUnixNano = seq[3].AtUnixNano
	cases := []struct {
		name   string
		audits [][]*pactv1.AuditEntry
		want   string // "" one history
	}{
		{"identical", [][]*pactv1.AuditEntry{seq, seq}, ""},
		{"a lagging journal: a prefix", [][]*pactv1.AuditEntry{seq, seq[:4]}, ""},
		{"a ring that dropped its oldest", [][]*pactv1.AuditEntry{seq[2:], seq}, ""},
		{"both ways", [][]*pactv1.AuditEntry{seq[1:5], seq[:3], seq[3:]}, ""},
		{"diverged", [][]*pactv1.AuditEntry{seq, other}, "diverge"},
		{"nothing in common", [][]*pactv1.AuditEntry{seq[:2], seq[3:]}, "share no entry"},
		{"empty", [][]*pactv1.AuditEntry{seq, nil}, "empty audit trail"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, n := oneHistory(tc.audits)
			switch {
			case tc.want == "" && (got != "" || n == 0):
				t.Errorf("%q after %d compared, want one history", got, n)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("%q, want one saying %q", got, tc.want)
			}
		})
	}
}

// The run must make every mistake: a schedule that stopped early proves
// nothing about the ones it did not make.
func TestMistakesEvidence(t *testing.T) {
	r := &ScenarioResult{NeedMistakes: true, OK: 1, Ops: 1, Mistakes: &MistakesResult{Mistakes: make([]Mistake, 2)}}
	if got := strings.Join(r.Evidence(), "\n"); !strings.Contains(got, "2 of the 3 operator mistakes were made") {
		t.Errorf("evidence %q", got)
	}
	r.Mistakes = nil
	if got := strings.Join(r.Evidence(), "\n"); !strings.Contains(got, "0 of the 3 operator mistakes") {
		t.Errorf("evidence %q", got)
	}
	r.Mistakes = &MistakesResult{Mistakes: make([]Mistake, 3)}
	if got := strings.Join(r.Evidence(), "\n"); strings.Contains(got, "operator mistakes") {
		t.Errorf("evidence %q with every mistake made", got)
	}
	// The scenario's plan checks both invariants; no other scenario's does.
	for _, sc := range Scenarios() {
		p := PlanInvariants(sc)
		if p.applies(InvMistakes) != sc.Mistakes || p.applies(InvOneQuorum) != sc.Mistakes {
			t.Errorf("%s: mistakes-refused applies %v, one-quorum %v", sc.Name, p.applies(InvMistakes), p.applies(InvOneQuorum))
		}
	}
}
