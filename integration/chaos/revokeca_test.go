package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/pact-hpc/pact/cli"
)

func issuedCert(serial, key, issuer string) Output {
	return Output{Result: ResultOK, Serial: serial, Key: key, Issuer: issuer}
}

func revokeCAIn(issuers string) Input { return Input{Kind: OpRevokeCA, Issuers: issuers} }

// The model after a journal CA's revocation: a node whose current
// certificate a revoked intermediate signed is refused as it authenticates
// and enrolls again with a new key at once; one whose certificate a live
// intermediate signed is not.
func TestModelRevokedCA(t *testing.T) {
	pass := map[string][]op{
		"a withdrawn certificate refused, then a new key enrolled at once": {
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), issuedCert("s1", "k1", "i1")},
			{21, 30, "n1", revokeCAIn("i1"), ok},
			{31, 40, "n1", renewIn("s1", "k2"), fail(ReasonCertRefused)},
			{41, 50, "n1", renewIn("s1", "k3"), fail("UNAUTHENTICATED")},
			{51, 60, "n1", enrollIn("k4"), issuedCert("s4", "k4", "i2")},
			{61, 70, "n1", read, readOut(StateActive, "s4", "k4")},
		},
		"refused while the revocation is in flight": {
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), issuedCert("s1", "k1", "i1")},
			{21, 40, "n1", revokeCAIn("i1"), ok},
			{25, 30, "n1", renewIn("s1", "k2"), fail(ReasonCertRefused)},
		},
		"a lagging journal still answers ALREADY_ACTIVE with a retry-after": {
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), issuedCert("s1", "k1", "i1")},
			{21, 30, "n1", revokeCAIn("i1"), ok},
			{31, 40, "n1", enrollIn("k2"), retryable("ALREADY_ACTIVE")},
		},
		"the revoked journal halted, its journal CA revoked": {
			{0, 10, "n1", register, fail("JOURNAL_HALTED")},
			{11, 20, "n1", register, fail("JOURNAL_CA_REVOKED")},
			{21, 30, "n1", read, fail("NODE_NOT_ENROLLED")},
		},
	}
	for name, ops := range pass {
		t.Run(name, func(t *testing.T) {
			if got := check(t, Spec{Allow: DesignAllowances}, history(ops...)); got != porcupine.Ok {
				t.Errorf("%s, want Ok", got)
			}
		})
	}
	fail := map[string][]op{
		"a current certificate refused before any revocation": {
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), issuedCert("s1", "k1", "i1")},
			{21, 30, "n1", renewIn("s1", "k2"), fail(ReasonCertRefused)},
			{31, 40, "n1", revokeCAIn("i1"), ok},
		},
		"a certificate of a live intermediate refused after another's revocation": {
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), issuedCert("s1", "k1", "i2")},
			{21, 30, "n1", revokeCAIn("i1"), ok},
			{31, 40, "n1", renewIn("s1", "k2"), fail(ReasonCertRefused)},
		},
		"a new key for a node whose certificate a live intermediate signed": {
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), issuedCert("s1", "k1", "i2")},
			{21, 30, "n1", revokeCAIn("i1"), ok},
			{31, 40, "n1", enrollIn("k2"), issuedCert("s2", "k2", "i2")},
		},
		"a new key enrolled before the revocation": {
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), issuedCert("s1", "k1", "i1")},
			{21, 30, "n1", enrollIn("k2"), issuedCert("s2", "k2", "i2")},
			{31, 40, "n1", revokeCAIn("i1"), ok},
		},
	}
	for name, ops := range fail {
		t.Run(name, func(t *testing.T) {
			if got := check(t, Spec{Allow: DesignAllowances}, history(ops...)); got != porcupine.Illegal {
				t.Errorf("%s, want Illegal", got)
			}
		})
	}
}

// RevocationRecords puts the revocation in every node's history, once.
func TestRevocationRecords(t *testing.T) {
	recs := []*Record{
		{ID: 0, In: Input{Kind: OpRegister, Node: "a"}},
		{ID: 1, In: Input{Kind: OpRead, Node: "b"}},
		{ID: 2, In: Input{Kind: OpRead, Node: "a"}},
	}
	r := &RevokeCAResult{Via: "j2", Issuers: []string{"i1", "i2"}, Call: 5, Return: 9}
	out := RevocationRecords(recs, r)
	if len(out) != 2 || out[0].In.Node != "a" || out[1].In.Node != "b" || out[0].In.Issuers != "i1,i2" || out[0].ID != 3 || out[1].ID != 4 || out[0].Call != 5 || out[0].Return != 9 {
		t.Fatalf("records %+v %+v", out[0], out[1])
	}
	if RevocationRecords(recs, nil) != nil || RevocationRecords(recs, &RevokeCAResult{}) != nil {
		t.Fatal("records without a revocation")
	}
}

func TestCheckRevokedCA(t *testing.T) {
	good := func() *RevokeCAResult {
		return &RevokeCAResult{Journal: "j1", Via: "j2", Issuers: []string{"i1"}, Failover: 2 * time.Second, NewLeader: "j3",
			DarkBound: 2*time.Second + agentRetryBudget(),
			Outcomes:  []Outcome{{What: "revoke", Seen: true}, {What: "failover", Seen: true}, {What: "peer", Refusal: true, Seen: true}},
			Agents: []AgentDark{
				{Node: "ra00", Journal: "j1", Issuer: "i9", Affected: true, Back: 2500 * time.Millisecond, On: "j2"},
				{Node: "ra01", Journal: "j2", Issuer: "i1", Affected: true, Back: 3 * time.Second, On: "j2", Reenrolled: true},
				{Node: "ra02", Journal: "j3", Issuer: "i3", Back: -1},
			},
			Readings: []QuorumReading{oneQuorumReading()},
		}
	}
	if c := CheckRevokedCA(good()); !c.OK() || c.Checked == 0 {
		t.Fatalf("a good run: %v (checked %d)", c.Violations, c.Checked)
	}
	cases := map[string]struct {
		mut  func(r *RevokeCAResult)
		want string
	}{
		"nothing recorded":       {func(r *RevokeCAResult) { *r = RevokeCAResult{} }, "not read after"},
		"no failover":            {func(r *RevokeCAResult) { r.Outcomes[1].Seen = false }, "failover"},
		"not refused as a peer":  {func(r *RevokeCAResult) { r.Outcomes[2].Seen = false }, "expected refusal did not happen"},
		"an agent dark too long": {func(r *RevokeCAResult) { r.Agents[1].Back = 30 * time.Second }, "beyond the bound"},
		"an agent never back":    {func(r *RevokeCAResult) { r.Agents[0].Back = -1 }, "did not stream again"},
		"an agent stopped":       {func(r *RevokeCAResult) { r.Agents[0].Exit = "exited 6" }, "stopped"},
		"no agent affected": {func(r *RevokeCAResult) {
			r.Agents = r.Agents[2:]
		}, "no agent streamed on j1"},
		"not one quorum after": {func(r *RevokeCAResult) {
			r.Readings[0].Errs = map[string]string{"j1": "unreachable"}
		}, "unreachable"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := good()
			tc.mut(r)
			c := CheckRevokedCA(r)
			if c.OK() || !strings.Contains(strings.Join(c.Violations, "\n"), tc.want) {
				t.Fatalf("violations %q, want one saying %q", c.Violations, tc.want)
			}
		})
	}
}

// oneQuorumReading is a reading of one quorum of j1 j2 j3, all voters.
func oneQuorumReading() QuorumReading {
	members := []string{"j1", "j2", "j3"}
	r := QuorumReading{When: "after", Members: members, Views: map[string]cli.QuorumView{}, Codes: map[string]int{}, Errs: map[string]string{}, Compared: 10}
	for _, id := range members {
		v := cli.QuorumView{LeaderID: "j2", ServedBy: id, QuorumID: "q"}
		for _, m := range members {
			v.Members = append(v.Members, cli.JournalMemberView{JournalID: m, Voter: true, Reachable: true, QuorumID: "q"})
		}
		r.Views[id] = v
	}
	return r
}
