package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/tlsalert"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// recs builds records from compact ops (times in milliseconds).
func recs(ops ...op) []*Record {
	var out []*Record
	for i, o := range ops {
		in := o.in
		in.Node = o.node
		r := &Record{ID: i, Journal: "j1", In: in, Out: o.out, Call: o.call * 1e6, Return: o.ret * 1e6}
		if o.ret < 0 {
			r.Out.Result, r.Return = ResultUnknown, o.call*1e6+5e9
		}
		out = append(out, r)
	}
	return out
}

func audit(entries ...string) []*pactv1.AuditEntry {
	var out []*pactv1.AuditEntry
	for i, e := range entries {
		f := strings.Fields(e) // "node action [serial]"
		a := &pactv1.AuditEntry{Index: uint64(i + 10), NodeId: f[0], Action: f[1], AtUnixNano: int64(i)}
		if len(f) > 2 {
			a.Serial = f[2]
		}
		out = append(out, a)
	}
	return out
}

func node(id, state, serial, key string, macs ...string) *pactv1.Node {
	st := map[string]pactv1.NodeState{StateRegistered: pactv1.NodeState_NODE_STATE_REGISTERED, StateActive: pactv1.NodeState_NODE_STATE_ACTIVE, StateRevoked: pactv1.NodeState_NODE_STATE_REVOKED}[state]
	n := &pactv1.Node{NodeId: id, State: st, Hardware: &pactv1.HardwareIdentity{Macs: macs}}
	if serial != "" {
		n.Cert = &pactv1.CertificateInfo{Serial: serial, SpkiSha256: key}
	}
	return n
}

func final(nodes []*pactv1.Node, a []*pactv1.AuditEntry) JournalState {
	js := JournalState{ID: "j1", Nodes: map[string]*pactv1.Node{}, Audit: a}
	for _, n := range nodes {
		js.Nodes[n.GetNodeId()] = n
	}
	return js
}

func TestClassify(t *testing.T) {
	cases := []struct {
		err    error
		result Result
		reason string
	}{
		{apierr.Status(apierr.NoLeader, 0, "no leader").Err(), ResultFailed, "NO_LEADER"},
		{apierr.Status(apierr.OutcomeUnknown, time.Second, "maybe").Err(), ResultUnknown, "OUTCOME_UNKNOWN"},
		{apierr.Status(apierr.Internal, 0, "oops").Err(), ResultUnknown, "INTERNAL"},
		{apierr.Status(apierr.StaleCertificate, 0, "old").Err(), ResultFailed, "STALE_CERTIFICATE"},
		// A call that never had a connection (explainCalls): definite.
		{&callError{err: status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.213.0.11:7443: connect: connection refused"`), cause: errNotSent}, ResultFailed, "UNREACHABLE"},
		{status.Error(codes.Unavailable, "error reading from server: EOF"), ResultUnknown, "UNAVAILABLE"},
		// The journal refused the client certificate: definite, and about
		// the certificate, not a connection never made nor an unknown one.
		{&callError{err: tlsalert.Attach(status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: remote error: tls: bad certificate"`), badCertificate(t)), cause: errNotSent}, ResultFailed, ReasonCertRefused},
		{&callError{err: tlsalert.Attach(status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: remote error: tls: internal error"`), internalError(t)), cause: errNotSent}, ResultFailed, "UNREACHABLE"},
		// Only typed values decide, never the words.
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.213.0.11:7443: connect: connection refused"`), ResultUnknown, "UNAVAILABLE"},
		{status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: remote error: tls: bad certificate"`), ResultUnknown, "UNAVAILABLE"},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), ResultUnknown, "DEADLINEEXCEEDED"},
		{errors.New("something else"), ResultUnknown, "UNKNOWN"},
	}
	for _, c := range cases {
		got := Classify(c.err)
		if got.Result != c.result || got.Reason != c.reason {
			t.Errorf("Classify(%v) = %s %s, want %s %s", c.err, got.Result, got.Reason, c.result, c.reason)
		}
	}
}

func TestCheckLinearizableClassifies(t *testing.T) {
	h := recs(
		// n1: linearizable.
		op{0, 10, "n1", register, ok},
		op{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
		// n2: a lagging journal told a new incarnation to wait for a
		// takeover (allowed: takeover-wait).
		op{0, 10, "n2", register, ok},
		op{11, 20, "n2", enrollIn("k1"), cert("s2", "k1")},
		op{21, 30, "n2", decomm, ok},
		op{31, 40, "n2", register, ok},
		op{41, 50, "n2", enrollIn("k2"), retryable("ALREADY_ACTIVE")},
		// n3: NO_LEADER, yet written.
		op{0, 10, "n3", register, fail("NO_LEADER")},
		op{11, 20, "n3", read, readOut(StateRegistered, "", "")},
		// n4: an acknowledged registration lost.
		op{0, 10, "n4", register, ok},
		op{11, 20, "n4", read, fail("NODE_NOT_ENROLLED")},
	)
	l := CheckLinearizable(h, 0, 10*time.Second)
	if l.Verdict != "no" || l.Nodes != 4 {
		t.Errorf("verdict %s over %d nodes, want no over 4", l.Verdict, l.Nodes)
	}
	if strings.Join(l.Allowed[AllowTakeoverWait], ",") != "n2" || l.AllowedNodes() != 1 || strings.Join(l.NoLeader, ",") != "n3" || strings.Join(l.Illegal, ",") != "n4" {
		t.Errorf("allowed %v, no-leader %v, illegal %v; want takeover-wait [n2] [n3] [n4]", l.Allowed, l.NoLeader, l.Illegal)
	}
	if len(l.Excerpts) != 3 || !strings.Contains(l.Excerpts[2], ">>") || !strings.Contains(l.Excerpts[2], "n4 read() -> NODE_NOT_ENROLLED") {
		t.Errorf("excerpts do not point at the offending call:\n%s", strings.Join(l.Excerpts, "\n"))
	}
	if l.Visualization == nil {
		t.Error("no visualization for the violation")
	}
}

func TestCheckAckedWrites(t *testing.T) {
	h := recs(
		op{0, 10, "n1", register, ok},
		op{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
		op{21, 30, "n1", enrollIn("k1"), cert("s1", "k1")}, // a retry: no write
		op{31, 40, "n1", renewIn("s1", "k2"), cert("s2", "k2")},
	)
	good := final([]*pactv1.Node{node("n1", StateActive, "s2", "k2")}, audit("n1 register", "n1 enroll s1", "n1 renew s2"))
	if c := CheckAckedWrites(h, good, NewHistory()); !c.OK() || c.Checked != 3 {
		t.Errorf("kept writes: %v (checked %d)", c.Violations, c.Checked)
	}
	lost := final([]*pactv1.Node{node("n1", StateActive, "s1", "k1")}, audit("n1 register", "n1 enroll s1"))
	if c := CheckAckedWrites(h, lost, NewHistory()); len(c.Violations) != 2 {
		t.Errorf("a lost renewal: %d violations, want 2 (not in the audit, not the final state):\n%s", len(c.Violations), strings.Join(c.Violations, "\n"))
	}
}

func TestCheckCertsCommitted(t *testing.T) {
	h := recs(op{0, 10, "n1", enrollIn("k1"), cert("s1", "k1")}, op{11, 20, "n1", renewIn("s1", "k2"), cert("s2", "k2")})
	h[1].CertProblem = "does not verify"
	c := CheckCertsCommitted(h, final(nil, audit("n1 enroll s1")), NewHistory())
	if len(c.Violations) != 2 {
		t.Errorf("%d violations, want 2 (s2 does not verify and never committed): %v", len(c.Violations), c.Violations)
	}
}

func TestCheckNoRenewAfterDecommission(t *testing.T) {
	h := recs(
		op{0, 10, "n1", register, ok},
		op{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
		op{21, 30, "n1", decomm, ok},
		op{31, 40, "n1", renewIn("s1", "k2"), cert("s2", "k2")},
	)
	c := CheckNoRenewAfterDecommission(h, final(nil, audit("n1 register", "n1 enroll s1", "n1 decommission s1", "n1 renew s2")))
	if len(c.Violations) != 2 {
		t.Errorf("%d violations, want 2 (client side and audit): %v", len(c.Violations), c.Violations)
	}
	ok := CheckNoRenewAfterDecommission(h[:3], final(nil, audit("n1 register", "n1 enroll s1", "n1 decommission s1", "n1 register", "n1 enroll s3", "n1 renew s4")))
	if !ok.OK() {
		t.Errorf("a renewal after a new registration: %v", ok.Violations)
	}
}

func TestCheckSerials(t *testing.T) {
	h := recs(op{0, 10, "n1", enrollIn("k1"), cert("s1", "k1")}, op{0, 10, "n2", enrollIn("k2"), cert("s1", "k2")})
	if c := CheckSerials(h, final(nil, audit("n1 enroll s1", "n2 enroll s1"))); len(c.Violations) != 2 {
		t.Errorf("%d violations, want 2: %v", len(c.Violations), c.Violations)
	}
}

func TestCheckHardware(t *testing.T) {
	s := final([]*pactv1.Node{
		node("n1", StateActive, "s1", "k1", "52:54:00:00:00:01"),
		node("n2", StateRegistered, "", "", "52:54:00:00:00:01"),
		node("n3", StateRevoked, "s3", "k3", "52:54:00:00:00:02"),
		node("n4", StateActive, "s4", "k4", "52:54:00:00:00:02"),
	}, nil)
	c := CheckHardware([]JournalState{s}, s, nil, NewHistory())
	if len(c.Violations) != 1 || !strings.Contains(c.Violations[0], "52:54:00:00:00:01") {
		t.Errorf("violations %v, want one for 52:54:00:00:00:01", c.Violations)
	}
}

// hw-active-once holds at every moment, not only at the end: a history
// whose end state is clean but which had two live (or active) holders of
// one MAC or BMC at some index fails.
func TestCheckHardwareOverTheHistory(t *testing.T) {
	hw := map[string][2]string{
		"old":   {"52:54:00:00:00:01", "SN-OLD"},
		"new":   {"52:54:00:00:00:01", "SN-OLD"}, // the old node's hardware
		"nic":   {"52:54:00:00:00:01", "SN-NIC"}, // only its NIC
		"other": {"52:54:00:00:00:02", "SN-OTHER"},
	}
	clean := []*pactv1.Node{node("old", StateRevoked, "s1", "k1", "52:54:00:00:00:01"), node("new", StateActive, "s2", "k2", "52:54:00:00:00:01")}
	cases := map[string]struct {
		audit []*pactv1.AuditEntry
		want  string // a violation containing this; "" none
	}{
		"hardware handed on after the decommission": {audit: audit(
			"old register", "old enroll s1", "old decommission", "new register", "new enroll s2")},
		"registered to a new id while the old one was live": {audit: audit(
			"old register", "old enroll s1", "new register", "old decommission", "new enroll s2"),
			want: "new registered with mac 52:54:00:00:00:01, which node old (active) holds"},
		"a moved NIC registered while its node was live": {audit: audit(
			"old register", "nic register", "old decommission", "nic decommission", "new register", "new enroll s2"),
			want: "nic registered with mac 52:54:00:00:00:01"},
		"activated with hardware another node holds": {audit: audit(
			"old register", "old decommission", "new register", "old enroll s1", "old decommission", "new enroll s2"),
			want: "old became active with mac 52:54:00:00:00:01, which node new holds"},
		"an id the workload never registers": {audit: audit("ghost register"),
			want: "ghost registered, but the workload never registers it"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := final(clean, tc.audit)
			c := CheckHardware([]JournalState{s}, s, hw, NewHistory())
			switch {
			case tc.want == "" && !c.OK():
				t.Errorf("violations %v, want none", c.Violations)
			case tc.want != "" && !strings.Contains(strings.Join(c.Violations, "\n"), tc.want):
				t.Errorf("violations %v, want one with %q", c.Violations, tc.want)
			}
		})
	}
}

func TestUnavailability(t *testing.T) {
	h := recs(
		op{0, 10, "n1", register, ok},
		op{100, 150, "n1", enrollIn("k1"), fail("NO_LEADER")},
		op{160, 170, "n1", enrollIn("k1"), cert("s1", "k1")},
		op{300, 305, "n1", enrollIn("k1"), cert("s1", "k1")}, // a retry, no write
		op{400, 450, "n1", decomm, ok},
	)
	got := Unavailability(h, []Fault{{At: 90e6}, {At: 200e6}}, 1e9)
	if got[0] != 80*time.Millisecond || got[1] != 250*time.Millisecond {
		t.Errorf("unavailability %v, want [80ms 250ms]", got)
	}
	if p := Percentile([]time.Duration{5, 1, 3, 2, 4}, 50); p != 3 {
		t.Errorf("p50 %v, want 3", p)
	}
	if p := Percentile([]time.Duration{5, 1, 3, 2, 4}, 99); p != 5 {
		t.Errorf("p99 %v, want 5", p)
	}
}

func TestResolveUnknown(t *testing.T) {
	h := recs(
		// n1: the enrollment whose answer never came took effect (a later
		// read shows its key).
		op{0, 10, "n1", register, ok},
		op{11, -1, "n1", enrollIn("k1"), unknown()},
		op{6000, 6010, "n1", read, readOut(StateActive, "s1", "k1")},
		// n2: the decommission did not (the node is active at the end).
		op{0, 10, "n2", register, ok},
		op{11, 20, "n2", enrollIn("k1"), cert("s2", "k1")},
		op{21, -1, "n2", decomm, unknown()},
		op{6000, 6010, "n2", read, readOut(StateActive, "s2", "k1")},
		// n3: nothing tells.
		op{0, -1, "n3", register, unknown()},
	)
	l := CheckLinearizable(h, 5000e6, 10*time.Second) // settled at 5s
	if l.Verdict != "yes" || l.UnknownApplied != 1 || l.UnknownNotApplied != 1 || l.UnknownEither != 1 {
		t.Errorf("verdict %s; applied %d, not applied %d, either %d; want yes 1 1 1", l.Verdict, l.UnknownApplied, l.UnknownNotApplied, l.UnknownEither)
	}
}

// A run passes only with a definite verdict and the evidence that it did
// what it is about; each missing piece alone fails it.
func TestPassedNeedsVerdictAndEvidence(t *testing.T) {
	good := func() *ScenarioResult {
		return &ScenarioResult{
			Ops: 500, OK: 400, MinOps: 100, MinFaults: 1, NeedLeaderChange: true,
			Faults:       []Fault{{Kind: "SIGKILL", Target: "j1(leader)"}},
			Leaders:      []LeaderTerm{{Leader: "j1", Term: 2}, {Leader: "j2", Term: 3}},
			Lin:          Linearizability{Verdict: "yes", Nodes: 4},
			Checks:       []Check{{Name: InvHardware, Checked: 4}},
			Expected:     []string{InvLinearizable, InvHardware},
			AfterHealMin: map[OpKind]int{OpRenew: 5, OpRead: 5},
			AfterHeal:    map[OpKind]int{OpRenew: 40, OpRead: 20},
			NeedProbes:   true,
			Probes:       ProbeCounts{Losses: 1, Calls: 10, ReadsOK: 3, Final: map[string]int{"NODE_NOT_ENROLLED": 2}},
		}
	}
	if r := good(); !r.Passed() {
		t.Fatalf("a complete run fails: %v", r.Evidence())
	}
	cases := map[string]func(r *ScenarioResult){
		"checker timed out":                   func(r *ScenarioResult) { r.Lin = Linearizability{Verdict: "unknown", TimedOut: []string{"n1"}} },
		"not linearizable":                    func(r *ScenarioResult) { r.Lin = Linearizability{Verdict: "no", Illegal: []string{"n1"}} },
		"no verdict":                          func(r *ScenarioResult) { r.Lin = Linearizability{} },
		"too few operations":                  func(r *ScenarioResult) { r.Ops = 99 },
		"nothing succeeded":                   func(r *ScenarioResult) { r.OK = 0 },
		"no fault injected":                   func(r *ScenarioResult) { r.Faults = nil },
		"no leader change":                    func(r *ScenarioResult) { r.Leaders = r.Leaders[:1] },
		"no leader seen at all":               func(r *ScenarioResult) { r.Leaders = nil },
		"an invariant violated":               func(r *ScenarioResult) { r.Checks[0].Violations = []string{"x"} },
		"fewer faults than required":          func(r *ScenarioResult) { r.MinFaults = 2 },
		"every renewal refused after healing": func(r *ScenarioResult) { r.AfterHeal[OpRenew] = 0 },
		"an invariant checked nothing":        func(r *ScenarioResult) { r.Checks[0].Checked = 0 },
		"an expected invariant not run":       func(r *ScenarioResult) { r.Expected = append(r.Expected, InvSerials) },
		"a leader loss not probed":            func(r *ScenarioResult) { r.Probes.Unprobed = []int64{1} },
		"no probe refused for good":           func(r *ScenarioResult) { r.Probes.Final = nil },
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			r := good()
			spoil(r)
			if r.Passed() {
				t.Errorf("passed")
			}
			// The report's last lines say which scenario failed and why,
			// for a CI log read from its tail.
			r.Scenario, r.Seed = "some-scenario", 7
			var out bytes.Buffer
			Report(&out, []*ScenarioResult{r}, 7, nil)
			lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
			i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "FAILED some-scenario (seed 7)") })
			if i < 0 || i == len(lines)-1 || !strings.HasPrefix(lines[i-1], "{") {
				t.Errorf("the report does not end with the JSON line, then a FAILED header and its reasons:\n%s", strings.Join(lines[max(0, len(lines)-4):], "\n"))
			}
		})
	}
	var out bytes.Buffer
	Report(&out, []*ScenarioResult{good()}, 7, nil)
	if strings.Contains(out.String(), "FAILED") {
		t.Errorf("a passing run's report names a failure:\n%s", out.String())
	}
	// Not about leaders: no change needed.
	r := good()
	r.NeedLeaderChange, r.Leaders, r.NeedProbes, r.Probes = false, nil, false, ProbeCounts{}
	if !r.Passed() {
		t.Errorf("a scenario not about leaders fails without a leader change: %v", r.Evidence())
	}
}

// A node the checker cannot decide within its budget (and the larger
// retry) makes the verdict "unknown", never "yes".
func TestCheckLinearizableTimeoutIsUnknown(t *testing.T) {
	var ops []op
	ops = append(ops, op{0, 10, "n1", register, ok}, op{11, 20, "n1", enrollIn("k0"), cert("s0", "k0")})
	// Many concurrent renewals of unknown outcome, then reads: a large
	// search for porcupine.
	for i := range 60 {
		ops = append(ops, op{30, -1, "n1", renewIn("s0", fmt.Sprintf("k%d", i+1)), unknown()})
	}
	for i := range 40 {
		ops = append(ops, op{int64(100 + 10*i), int64(105 + 10*i), "n1", read, readOut(StateActive, fmt.Sprintf("x%d", i), "kz")})
	}
	l := CheckLinearizable(recs(ops...), 0, time.Nanosecond)
	if l.Verdict != "unknown" || len(l.TimedOut) != 1 {
		t.Fatalf("verdict %s, timed out %v; want unknown [n1]", l.Verdict, l.TimedOut)
	}
	r := &ScenarioResult{Ops: 1, OK: 1, Faults: []Fault{{}}, Lin: l}
	if r.Passed() {
		t.Error("a run with an undecided node passes")
	}
}

func TestCheckNoStall(t *testing.T) {
	slow := []Fault{{Kind: "slow", Target: "j2", At: 1000e6, Healed: 5000e6}}
	steady := recs(
		op{900, 1100, "n1", register, ok},
		op{1200, 2500, "n1", enrollIn("k1"), cert("s1", "k1")},
		op{2600, 4000, "n1", renewIn("s1", "k2"), cert("s2", "k2")},
		op{4100, 4900, "n1", decomm, ok},
		op{4100, 4200, "n1", read, readOut(StateActive, "s2", "k2")},
	)
	if c := CheckNoStall(steady, slow, 6000e6); !c.OK() || c.Checked != 1 {
		t.Errorf("steady writes: %v (checked %d)", c.Violations, c.Checked)
	}
	stalled := recs(
		op{900, 1100, "n1", register, ok},
		op{1200, 1500, "n1", enrollIn("k1"), cert("s1", "k1")},
		op{1600, 4000, "n1", read, readOut(StateActive, "s1", "k1")}, // reads do not count
		op{4100, 4600, "n1", renewIn("s1", "k2"), cert("s2", "k2")},
		op{4700, 4800, "n1", decomm, ok},
	)
	if c := CheckNoStall(stalled, slow, 6000e6); len(c.Violations) != 1 || !strings.Contains(c.Violations[0], "3.1s") {
		t.Errorf("a 3.1 s stall: %v", c.Violations)
	}
	quietEnd := recs(op{900, 1100, "n1", register, ok}, op{1200, 1500, "n1", enrollIn("k1"), cert("s1", "k1")})
	if c := CheckNoStall(quietEnd, slow, 6000e6); c.OK() {
		t.Error("no write in the last 3.5 s of the fault passed")
	}
}

// The load must still succeed once the faults are healed: each kind of
// call at least its minimum, counted from the heal; a run whose quorum
// refused every renewal after healing fails, whatever else it shows.
func TestAfterHealMinimums(t *testing.T) {
	// Healed at 1 s; ok calls of every kind after it, takeovers only if
	// asked.
	life := func(extra ...op) []*Record {
		ops := []op{
			{500, 600, "n1", register, ok},                          // before the heal: not counted
			{600, 700, "n1", renewIn("s0", "k0"), cert("s0", "k0")}, // neither
			{1000, 1010, "n1", register, ok},
			{1011, 1020, "n1", enrollIn("k1"), cert("s1", "k1")},
			{1021, 1030, "n1", renewIn("s1", "k2"), cert("s2", "k2")},
			{1031, 1040, "n1", read, readOut(StateActive, "s2", "k2")},
			{1041, 1050, "n1", decomm, ok},
		}
		return recs(append(ops, extra...)...)
	}
	one := map[OpKind]int{OpRegister: 1, OpEnroll: 1, OpRenew: 1, OpDecommission: 1, OpRead: 1}
	cases := map[string]struct {
		sc   Scenario
		recs []*Record
		// want: the evidence names this; "" none.
		want string
	}{
		"every kind after healing": {sc: Scenario{AfterHeal: one}, recs: life()},
		"renewals only before the heal": {sc: Scenario{AfterHeal: one}, recs: recs(
			op{600, 700, "n1", renewIn("s0", "k0"), cert("s0", "k0")},
			op{1000, 1010, "n1", register, ok},
			op{1011, 1020, "n1", enrollIn("k1"), cert("s1", "k1")},
			op{1021, 1030, "n1", renewIn("s1", "k2"), fail("STALE_CERTIFICATE")},
			op{1031, 1040, "n1", read, readOut(StateActive, "s1", "k1")},
			op{1041, 1050, "n1", decomm, ok},
		), want: "0 successful renew calls"},
		"too few reads": {sc: Scenario{AfterHeal: map[OpKind]int{OpRead: 2}}, recs: life(), want: "1 successful read calls (at least 2"},
		"final reads do not count": {sc: Scenario{AfterHeal: one}, recs: func() []*Record {
			rs := life()
			rs[5].Final = true
			return rs
		}(), want: "0 successful read calls"},
		"takeovers needed where nodes reboot": {sc: Scenario{AfterHeal: one, TakeoverWindow: 6 * time.Second}, recs: life(), want: "0 successful takeover calls"},
		"and counted":                         {sc: Scenario{AfterHeal: one, TakeoverWindow: 6 * time.Second}, recs: life(op{1051, 1060, "n2", takeoverIn("k9"), cert("s9", "k9")})},
		"a kind declared not applicable": {sc: Scenario{AfterHeal: one, NotApplicable: map[string]string{"renew": "a scenario whose nodes never renew"}}, recs: recs(
			op{1000, 1010, "n1", register, ok},
			op{1011, 1020, "n1", enrollIn("k1"), cert("s1", "k1")},
			op{1031, 1040, "n1", read, readOut(StateActive, "s1", "k1")},
			op{1041, 1050, "n1", decomm, ok},
		)},
		"no registry workload": {sc: Scenario{Liveness: true}, recs: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &ScenarioResult{HealedAt: 1000e6, OK: 1}
			r.AfterHealMin, r.AfterHealNA = AfterHealPlan(tc.sc)
			r.AfterHeal = CountAfterHeal(tc.recs, r.HealedAt)
			got := strings.Join(r.Evidence(), "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("evidence %q, want none", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("evidence %q, want one with %q", got, tc.want)
			}
		})
	}
	if min, na := AfterHealPlan(Scenario{}); min[OpRenew] != DefaultAfterHeal[OpRenew] || len(na) != 1 || na[0].What != "takeover" || na[0].Why == "" {
		t.Errorf("default plan %v, not applicable %v; want the defaults and takeover not applicable, with why", min, na)
	}
}

// Every invariant of the verdict looked at something, or is declared not
// applicable to the scenario with why; an invariant that checked nothing,
// or one expected but not run, fails the run.
func TestInvariantCoverage(t *testing.T) {
	all := func(sc Scenario) *ScenarioResult {
		p := PlanInvariants(sc)
		r := &ScenarioResult{OK: 1, Expected: p.Apply, NotApplicable: p.NA, Lin: Linearizability{Verdict: "yes", Nodes: 3}}
		for _, n := range p.Apply {
			if n != InvLinearizable {
				r.Checks = append(r.Checks, Check{Name: n, Checked: 2})
			}
		}
		return r
	}
	cases := map[string]struct {
		result func() *ScenarioResult
		want   string // "" passes
	}{
		"every invariant checked something": {result: func() *ScenarioResult { return all(Scenario{Leaders: true}) }},
		"an invariant checked nothing": {result: func() *ScenarioResult {
			r := all(Scenario{})
			r.Checks[2].Checked = 0
			return r
		}, want: "invariant " + InvCertsComitted + " checked nothing"},
		"an invariant expected but not run": {result: func() *ScenarioResult {
			r := all(Scenario{PausesLeader: true})
			r.Checks = slices.DeleteFunc(r.Checks, func(c Check) bool { return c.Name == InvExLeader })
			return r
		}, want: "invariant " + InvExLeader + " was neither checked nor declared"},
		"linearizability over no node": {result: func() *ScenarioResult {
			r := all(Scenario{})
			r.Lin.Nodes = 0
			return r
		}, want: "linearizability checked no node"},
		"an extra check that checked nothing": {result: func() *ScenarioResult {
			r := all(Scenario{})
			r.Checks = append(r.Checks, Check{Name: InvExLeader})
			return r
		}, want: "invariant " + InvExLeader + " checked nothing"},
		"declared not applicable by the scenario": {result: func() *ScenarioResult {
			r := all(Scenario{NotApplicable: map[string]string{InvSerials: "no certificate is issued"}})
			return r
		}},
		"liveness: linearizability not applicable": {result: func() *ScenarioResult {
			r := all(Scenario{Liveness: true})
			r.Lin = Linearizability{Verdict: "n/a"}
			r.Ops, r.OK, r.Faults, r.MinFaults = 1, 1, []Fault{{}}, 1
			return r
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := tc.result()
			got := strings.Join(r.Evidence(), "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("evidence %q, want none", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("evidence %q, want one with %q", got, tc.want)
			}
		})
	}
	// The campaign: every scenario's plan covers every invariant, each
	// either applied or not applicable with a reason; linearizability
	// applies wherever there is a registry workload.
	for _, sc := range Scenarios() {
		p := PlanInvariants(sc)
		if len(p.Apply)+len(p.NA) != len(invariantRules) {
			t.Errorf("%s: %d applied + %d not applicable, want %d", sc.Name, len(p.Apply), len(p.NA), len(invariantRules))
		}
		for _, n := range p.NA {
			if n.Why == "" {
				t.Errorf("%s: %s not applicable without a reason", sc.Name, n.What)
			}
		}
		if p.applies(InvLinearizable) == sc.Liveness {
			t.Errorf("%s: linearizability applies %v", sc.Name, p.applies(InvLinearizable))
		}
	}
	// A liveness run passes with "n/a" only because it declares
	// linearizability not applicable.
	r := all(Scenario{})
	r.Lin = Linearizability{Verdict: "n/a", Nodes: 1}
	r.Ops, r.OK, r.Faults = 1, 1, []Fault{{}}
	if r.Passed() {
		t.Error("a registry scenario passes with linearizability n/a")
	}
}

// After every leader loss the workload probes: the probes must have been
// made (within the window), a read answered and a final refusal given.
func TestProbeCoverage(t *testing.T) {
	probes := func(ops ...op) []*Record {
		rs := recs(ops...)
		for _, r := range rs {
			r.Probe = true
		}
		return rs
	}
	good := probes(
		op{1000, 1100, "g", read, fail("NO_LEADER")},
		op{1200, 3000, "g", read, fail("NODE_NOT_ENROLLED")},
		op{3100, 3200, "n1", read, readOut(StateActive, "s1", "k1")},
		op{3300, 3400, "n1", renewIn("s0", "k2"), fail("STALE_CERTIFICATE")},
		op{3500, 3600, "n1", enrollIn("k3"), retryable("ALREADY_ACTIVE")},
		op{9000, 9100, "n1", read, readOut(StateActive, "s1", "k1")},
	)
	cases := map[string]struct {
		recs   []*Record
		losses []int64
		need   bool
		want   string
	}{
		"probed after each loss":       {recs: good, losses: []int64{900e6, 8900e6}, need: true},
		"a loss not probed":            {recs: good, losses: []int64{900e6, 20000e6}, need: true, want: "no probe within 8s of the leader losses at 20.0s"},
		"no loss in a leader scenario": {recs: good, need: true, want: "no leader loss was announced"},
		"no loss, not about leaders":   {recs: nil},
		"no read answered": {recs: probes(
			op{1000, 1100, "g", read, fail("NO_LEADER")},
			op{1200, 3000, "g", decomm, fail("NODE_NOT_ENROLLED")},
		), losses: []int64{900e6}, want: "no probe read after a leader loss was answered"},
		"no final refusal": {recs: probes(
			op{1000, 1100, "g", decomm, fail("NO_LEADER")},
			op{1100, 1200, "n1", enrollIn("k3"), retryable("ALREADY_ACTIVE")},
			op{1200, 3000, "n1", read, readOut(StateActive, "s1", "k1")},
		), losses: []int64{900e6}, want: "no probe after a leader loss was refused for good"},
		"calls that are no probes do not count": {recs: recs(
			op{1200, 3000, "g", read, fail("NODE_NOT_ENROLLED")},
			op{3100, 3200, "n1", read, readOut(StateActive, "s1", "k1")},
		), losses: []int64{900e6}, want: "no probe within"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &ScenarioResult{OK: 1, Probes: CountProbes(tc.recs, tc.losses), NeedProbes: tc.need}
			got := strings.Join(r.Evidence(), "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("evidence %q, want none", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("evidence %q, want one with %q", got, tc.want)
			}
		})
	}
	p := CountProbes(good, []int64{900e6})
	if p.Calls != 6 || p.ReadsOK != 2 || p.FinalRefusals() != 2 || p.Final["NODE_NOT_ENROLLED"] != 1 || p.NotFinal != 2 {
		t.Errorf("counts %+v: want 6 calls, 2 reads answered, 2 final refusals, 2 not final", p)
	}
}
