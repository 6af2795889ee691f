package chaos

import (
	"strings"
	"testing"
	"time"
)

// A membership history that holds, and every way CheckMembership must
// reject one.
func TestCheckMembership(t *testing.T) {
	ok := MemberAttempt{Via: "j1", Out: Output{Result: ResultOK}}
	refused := MemberAttempt{Via: "j1", Out: Output{Result: ResultFailed, Reason: "MEMBERSHIP_REFUSED"}, Msg: "without j2 the quorum would have 2 voters ..."}
	noLeader := MemberAttempt{Via: "j1", Out: Output{Result: ResultFailed, Reason: "NO_LEADER"}, Msg: "this journal is no longer the leader"}
	unknown := MemberAttempt{Via: "j1", Out: Output{Result: ResultUnknown, Reason: "OUTCOME_UNKNOWN"}, Msg: "leadership lost"}
	three := []string{"j1", "j2", "j3"}
	four := []string{"j1", "j2", "j3", "j4"}
	good := func() *MembershipResult {
		return &MembershipResult{
			Changes: []MemberChange{
				{Op: opAdd, Journal: "j4", During: "SIGKILL j1(leader)", Before: three, After: four, Attempts: []MemberAttempt{noLeader, ok}},
				{Op: opRemove, Journal: "j2", During: "partition j2|j1,j3,j4,j5", Before: four, After: []string{"j1", "j3", "j4"}, Attempts: []MemberAttempt{ok}},
				{Op: opAdd, Journal: "j2", During: "partition j3|j1,j2,j4,j5", Before: []string{"j1", "j3", "j4"}, After: four, Attempts: []MemberAttempt{unknown}},
				{Op: opRemove, Journal: "j3", During: "SIGKILL j4(leader)", Before: four, After: four, Attempts: []MemberAttempt{refused}},
			},
			Removed: []RemovedJournal{{Journal: "j2", Exited: true, Code: 3}},
			Asked:   four,
			Views:   map[string][]string{"j1": four, "j2": four, "j3": four, "j4": four},
		}
	}
	if c := CheckMembership(good()); !c.OK() {
		t.Fatalf("a correct membership history fails: %v", c.Violations)
	}
	if a, r := good().Committed(); a != 2 || r != 1 {
		t.Fatalf("Committed() = %d adds, %d removes; want 2, 1", a, r)
	}
	cases := []struct {
		name   string
		break_ func(m *MembershipResult)
		want   string
	}{
		{"acknowledged add not in effect", func(m *MembershipResult) { m.Changes[0].After = three }, "acknowledged but"},
		{"acknowledged remove not in effect", func(m *MembershipResult) { m.Changes[1].After = four }, "acknowledged but"},
		{"refused remove took effect", func(m *MembershipResult) { m.Changes[3].After = []string{"j1", "j2", "j4"} }, "refused or never asked"},
		{"unclear error", func(m *MembershipResult) {
			m.Changes[3].Attempts = []MemberAttempt{{Via: "j1", Out: Output{Result: ResultFailed, Reason: "PERMISSION_DENIED"}, Msg: "x"}}
		}, "neither success nor a clear refusal"},
		{"refusal without a message", func(m *MembershipResult) {
			m.Changes[3].Attempts = []MemberAttempt{{Via: "j1", Out: Output{Result: ResultFailed, Reason: "MEMBERSHIP_REFUSED"}}}
		}, "neither success nor a clear refusal"},
		{"internal error", func(m *MembershipResult) {
			m.Changes[2].Attempts = []MemberAttempt{{Via: "j1", Out: Output{Result: ResultUnknown, Reason: "INTERNAL"}, Msg: "internal"}}
		}, "neither success nor a clear refusal"},
		{"a member disagrees", func(m *MembershipResult) { m.Views["j3"] = three }, "ends with the configuration"},
		{"a non-voter never promoted", func(m *MembershipResult) { m.Views["j4"] = []string{"j1", "j2", "j3", "~j4"} }, "ends with the configuration"},
		{"a member silent", func(m *MembershipResult) { delete(m.Views, "j2") }, "did not report"},
		{"removed journal kept running", func(m *MembershipResult) { m.Removed[0] = RemovedJournal{Journal: "j2", Detail: "still running"} }, "did not stop with exit code 3"},
		{"removed journal exited otherwise", func(m *MembershipResult) { m.Removed[0].Code = 1 }, "did not stop with exit code 3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := good()
			tc.break_(m)
			c := CheckMembership(m)
			if c.OK() || !strings.Contains(strings.Join(c.Violations, "\n"), tc.want) {
				t.Fatalf("violations %q; want one saying %q", c.Violations, tc.want)
			}
		})
	}
	if c := CheckMembership(nil); c.OK() {
		t.Fatal("no membership result passes")
	}
}

// The run must show an add and a remove that took effect under a fault.
func TestMembershipEvidence(t *testing.T) {
	r := &ScenarioResult{NeedMembership: true, OK: 1, Ops: 1, Membership: &MembershipResult{Changes: []MemberChange{
		{Op: opAdd, Journal: "j4", During: "SIGKILL j1(leader)", Before: []string{"j1"}, After: []string{"j1", "j4"}},
		// Took effect, but not under a fault: does not count.
		{Op: opRemove, Journal: "j4", Before: []string{"j1", "j4"}, After: []string{"j1"}},
	}}}
	if ev := r.Evidence(); len(ev) != 1 || !strings.Contains(ev[0], "1 journal adds and 0 removes") {
		t.Fatalf("evidence %q; want the missing remove named", ev)
	}
	r.Membership.Changes[1].During = "partition j4|j1"
	if ev := r.Evidence(); len(ev) != 0 {
		t.Fatalf("evidence %q; want none", ev)
	}
}

// CheckLiveness fails a node marked Inactive while streaming to a journal
// that reached the leader, and accepts one streaming to a cut-off journal.
func TestCheckLiveness(t *testing.T) {
	s := int64(time.Second)
	l := &LivenessResult{Timeout: 8 * time.Second, Digest: time.Second,
		Sessions: []StreamSession{
			{Node: "s00", Journal: "j1", Up: 1 * s},               // open to the end
			{Node: "s01", Journal: "j2", Up: 1 * s, Down: 40 * s}, // covers the mark
			{Node: "s02", Journal: "j3", Up: 25 * s},              // opened too late to be reported
		},
		Marks: []LivenessMark{
			{Node: "s00", At: 30 * s, Index: 40},
			{Node: "s01", At: 30 * s, Index: 41},
			{Node: "s02", At: 30 * s, Index: 42},
			{Node: "s00", At: 31 * s, Index: 43, Active: true},
		},
	}
	faults := []Fault{{Kind: "partition", Target: "j1|j2,j3", At: 10 * s, Healed: 29 * s}}
	cut := map[int][]string{0: {"j1"}}
	c, rightly := CheckLiveness(l, faults, cut)
	if len(c.Violations) != 1 || !strings.Contains(c.Violations[0], "node s01 marked Inactive") {
		t.Fatalf("violations %q; want s01's mark only", c.Violations)
	}
	if rightly != 1 || c.Checked != 3 {
		t.Fatalf("rightly %d, checked %d; want 1 (s00 on the cut-off j1), 3", rightly, c.Checked)
	}
	// With j2 cut off too, s01's mark is right.
	cut[0] = append(cut[0], "j2")
	if c, rightly := CheckLiveness(l, faults, cut); !c.OK() || rightly != 2 {
		t.Fatalf("violations %q, rightly %d; want none, 2", c.Violations, rightly)
	}
	// A cut that healed before the node liveness timeout's window does not excuse it.
	faults[0].Healed = 20 * s
	if c, _ := CheckLiveness(l, faults, cut); len(c.Violations) != 2 {
		t.Fatalf("violations %q; want s00 and s01", c.Violations)
	}
}
