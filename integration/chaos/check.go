package chaos

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// JournalState is one journal's registry after the run, read from that
// journal alone.
type JournalState struct {
	ID    string
	Nodes map[string]*pactv1.Node
	Audit []*pactv1.AuditEntry
	canon []byte
	Err   error
}

// auditCapacity is how many audit entries the registry keeps.
const auditCapacity = 10000

// AdminConns dials an admin channel to every journal.
func AdminConns(q Quorum) ([]pactv1.AdminServiceClient, func(), error) {
	admin := q.Admin()
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	var out []pactv1.AdminServiceClient
	for i := range q.Size() {
		c, err := dial(q.GRPC(i), q.Roots(), &admin, nil)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, c)
		out = append(out, pactv1.NewAdminServiceClient(c))
	}
	return out, closeAll, nil
}

// readJournal reads journal i's registry and audit trail after a
// linearizable read there (so it reflects everything committed before).
func readJournal(ctx context.Context, q Quorum, c pactv1.AdminServiceClient, i int, probe string) JournalState {
	js := JournalState{ID: q.ID(i)}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.InspectNode(cctx, &pactv1.InspectNodeRequest{NodeId: probe}); err != nil {
		if o := Classify(err); o.Reason != "NODE_NOT_ENROLLED" {
			js.Err = fmt.Errorf("linearizable read on %s: %w", js.ID, err)
			return js
		}
	}
	list, err := c.ListNodes(cctx, &pactv1.ListNodesRequest{})
	if err != nil {
		js.Err = fmt.Errorf("list on %s: %w", js.ID, err)
		return js
	}
	audit, err := c.ListAudit(cctx, &pactv1.ListAuditRequest{Limit: auditCapacity})
	if err != nil {
		js.Err = fmt.Errorf("audit on %s: %w", js.ID, err)
		return js
	}
	js.Nodes = map[string]*pactv1.Node{}
	var ids []string
	for _, n := range list.GetNodes() {
		js.Nodes[n.GetNodeId()] = n
		ids = append(ids, n.GetNodeId())
	}
	sort.Strings(ids)
	js.Audit = audit.GetEntries()
	var b bytes.Buffer
	mo := proto.MarshalOptions{Deterministic: true}
	for _, id := range ids {
		raw, _ := mo.Marshal(js.Nodes[id])
		fmt.Fprintf(&b, "node %d:", len(raw))
		b.Write(raw)
	}
	for _, e := range js.Audit {
		raw, _ := mo.Marshal(e)
		fmt.Fprintf(&b, "audit %d:", len(raw))
		b.Write(raw)
	}
	js.canon = b.Bytes()
	return js
}

// Converge reads every journal until all hold the same registry and audit
// trail (bounded by timeout) and returns the last reading and whether they
// agreed, or what differed.
func Converge(ctx context.Context, q Quorum, admins []pactv1.AdminServiceClient, probe string, timeout time.Duration) ([]JournalState, string) {
	deadline := time.Now().Add(timeout)
	for {
		states := make([]JournalState, q.Size())
		for i := range states {
			states[i] = readJournal(ctx, q, admins[i], i, probe)
		}
		diff := differences(states)
		if diff == "" || time.Now().After(deadline) || ctx.Err() != nil {
			return states, diff
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func differences(states []JournalState) string {
	var out []string
	for _, s := range states {
		if s.Err != nil {
			out = append(out, s.Err.Error())
		}
	}
	if len(out) > 0 {
		return strings.Join(out, "; ")
	}
	for _, s := range states[1:] {
		if !bytes.Equal(s.canon, states[0].canon) {
			out = append(out, fmt.Sprintf("%s differs from %s: %s", s.ID, states[0].ID, firstDifference(states[0], s)))
		}
	}
	return strings.Join(out, "; ")
}

func firstDifference(a, b JournalState) string {
	if len(a.Nodes) != len(b.Nodes) {
		return fmt.Sprintf("%d nodes vs %d", len(a.Nodes), len(b.Nodes))
	}
	var ids []string
	for id := range a.Nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		x, y := a.Nodes[id], b.Nodes[id]
		if !proto.Equal(x, y) {
			return fmt.Sprintf("node %s: %s %s vs %s %s", id, StateName(x.GetState()), x.GetCert().GetSerial(), StateName(y.GetState()), y.GetCert().GetSerial())
		}
	}
	if len(a.Audit) != len(b.Audit) {
		return fmt.Sprintf("audit of %d entries vs %d", len(a.Audit), len(b.Audit))
	}
	for k := range a.Audit {
		if !proto.Equal(a.Audit[k], b.Audit[k]) {
			return fmt.Sprintf("audit entry %d: %v vs %v", k, a.Audit[k], b.Audit[k])
		}
	}
	return "unknown"
}

// ---------------------------------------------------------------------------
// Linearizability.

// Linearizability is the verdict on a history.
type Linearizability struct {
	// Verdict: "yes", "no" or "unknown" (the checker timed out on some
	// node even with its larger second budget: the run fails).
	Verdict string
	Nodes   int
	// Allowed lists, per allowance, the nodes whose history needs it (a
	// stale answer the design allows, DesignAllowances; not a violation).
	Allowed map[Allowance][]string
	// NoLeader lists nodes whose history is linearizable only if a
	// NO_LEADER answer ("nothing was written") was in fact written.
	NoLeader []string
	// Illegal lists nodes whose history is not linearizable at all.
	Illegal []string
	// TimedOut lists nodes the checker gave up on.
	TimedOut []string
	// Unknown outcomes resolved afterwards: calls whose answer never came,
	// by what the rest of the history (ending with reads of the converged
	// registry) allows: they must have taken effect, cannot have, or
	// either is possible.
	UnknownApplied, UnknownNotApplied, UnknownEither int
	// Excerpts explain each violation (and the first answer of each
	// allowance).
	Excerpts []string
	// Visualization is porcupine's HTML for the first violation, if any.
	Visualization []byte
}

// AllowedNodes is how many nodes needed some allowance.
func (l Linearizability) AllowedNodes() int {
	n := 0
	for _, nodes := range l.Allowed {
		n += len(nodes)
	}
	return n
}

// retryBudget multiplies the checker's budget for a node it timed out on
// once: a verdict must be definite, so a node gets a second, longer try
// before the run is failed as "unknown".
const retryBudget = 4

// checkOps runs porcupine on one node's operations, once more with a
// larger budget if the first try timed out.
func checkOps(model porcupine.Model, ops []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	r := porcupine.CheckOperationsTimeout(model, ops, timeout)
	if r == porcupine.Unknown {
		r = porcupine.CheckOperationsTimeout(model, ops, retryBudget*timeout)
	}
	return r
}

// CheckLinearizable checks each node's history with porcupine against the
// model with the design's allowances; a node that fails is checked again
// to say what kind of failure it is, and a node that passes is checked
// without each allowance to report which stale answers it needed. A node
// the checker cannot decide makes the verdict "unknown", which fails the
// run.
func CheckLinearizable(recs []*Record, settled int64, timeout time.Duration) Linearizability {
	res := Linearizability{Verdict: "yes", Allowed: map[Allowance][]string{}}
	byNode := ByNode(recs)
	var nodes []string
	for n := range byNode {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	res.Nodes = len(nodes)
	model := Spec{Allow: DesignAllowances}.PorcupineModel()
	diag := Spec{Allow: DesignAllowances, NoLeaderUnknown: true}.PorcupineModel()
	for _, node := range nodes {
		ops := make([]porcupine.Operation, 0, len(byNode[node]))
		for _, r := range byNode[node] {
			ops = append(ops, r.Operation(settled))
		}
		resolveUnknown(&res, model, byNode[node], settled, timeout)
		switch checkOps(model, ops, timeout) {
		case porcupine.Ok:
			for _, a := range DesignAllowances {
				without := Spec{Allow: slices.DeleteFunc(slices.Clone(DesignAllowances), func(x Allowance) bool { return x == a })}.PorcupineModel()
				if checkOps(without, ops, timeout) == porcupine.Ok {
					continue
				}
				if len(res.Allowed[a]) == 0 {
					res.Excerpts = append(res.Excerpts, fmt.Sprintf("allowed stale answer (%s):\n%s", a, explain(without, byNode[node], settled, timeout)))
				}
				res.Allowed[a] = append(res.Allowed[a], node)
			}
			continue
		case porcupine.Unknown:
			res.TimedOut = append(res.TimedOut, node)
			continue
		}
		kind := "NOT LINEARIZABLE"
		switch checkOps(diag, ops, timeout) {
		case porcupine.Ok:
			res.NoLeader = append(res.NoLeader, node)
			kind = "NOT LINEARIZABLE: a write answered NO_LEADER (\"nothing was written\") took effect"
		case porcupine.Unknown:
			res.Illegal = append(res.Illegal, node)
			kind = "NOT LINEARIZABLE (whether NO_LEADER answers explain it: the checker timed out)"
		default:
			res.Illegal = append(res.Illegal, node)
		}
		res.Excerpts = append(res.Excerpts, kind+":\n"+explain(model, byNode[node], settled, timeout))
		if res.Visualization == nil {
			_, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
			var b bytes.Buffer
			if err := porcupine.Visualize(model, info, &b); err == nil {
				res.Visualization = b.Bytes()
			}
		}
	}
	switch {
	case len(res.NoLeader)+len(res.Illegal) > 0:
		res.Verdict = "no"
	case len(res.TimedOut) > 0:
		res.Verdict = "unknown"
		res.Excerpts = append(res.Excerpts, fmt.Sprintf("UNDECIDED: the checker timed out (budget %v, then %v) on nodes %s: the run fails; rerun with a larger -check-timeout or fewer operations per node", timeout, retryBudget*timeout, strings.Join(res.TimedOut, " ")))
	}
	return res
}

// resolveUnknown decides, for each unknown-outcome write of one node,
// whether the history is linearizable with it taken effect and with it
// not, and counts the answer.
func resolveUnknown(res *Linearizability, model porcupine.Model, recs []*Record, settled int64, timeout time.Duration) {
	with := func(k int, out Output) bool {
		ops := make([]porcupine.Operation, 0, len(recs))
		for j, r := range recs {
			op := r.Operation(settled)
			if j == k {
				op.Output = out
			}
			ops = append(ops, op)
		}
		return porcupine.CheckOperationsTimeout(model, ops, timeout) == porcupine.Ok
	}
	for k, r := range recs {
		if r.Out.Result != ResultUnknown || !r.IsWrite() {
			continue
		}
		applied := with(k, Output{Result: ResultApplied})
		notApplied := with(k, Output{Result: ResultFailed, Reason: "NO_LEADER"})
		switch {
		case applied && notApplied:
			res.UnknownEither++
		case applied:
			res.UnknownApplied++
		case notApplied:
			res.UnknownNotApplied++
		}
	}
}

// explain shows where a node's history stops being linearizable: the
// longest linearizable prefix porcupine found, the model's states after it,
// and the calls around the first one it could not place.
func explain(model porcupine.Model, recs []*Record, settled int64, timeout time.Duration) string {
	ops := make([]porcupine.Operation, 0, len(recs))
	for _, r := range recs {
		ops = append(ops, r.Operation(settled))
	}
	_, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	var longest []porcupine.Operation
	if parts := info.PartialLinearizationsOperations(); len(parts) > 0 {
		for _, lin := range parts[0] {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	placed := map[int]bool{}
	state := model.Init()
	for _, op := range longest {
		placed[op.Metadata.(*Record).ID] = true
		_, state = model.Step(state, op.Input, op.Output)
	}
	stuck := -1
	for k, r := range recs {
		if !placed[r.ID] && r.Out.Result != ResultUnknown {
			stuck = k
			break
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  node %s: %d calls; the longest linearizable prefix holds %d; model state(s) after it: %s\n",
		recs[0].In.Node, len(recs), len(longest), model.DescribeState(state))
	from, to := 0, len(recs)
	if stuck >= 0 {
		from, to = max(0, stuck-10), min(len(recs), stuck+4)
	}
	for k := from; k < to; k++ {
		mark := "    "
		if k == stuck {
			mark = "  >>"
		}
		b.WriteString(mark + recs[k].String() + "\n")
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// Invariants.

// Invariant names, in report order.
const (
	InvAckedWrites   = "acked-writes-kept"
	InvHardware      = "hw-active-once"
	InvCertsComitted = "certs-committed"
	InvNoRenewRevoke = "no-renew-after-decom"
	InvIdentical     = "journals-identical"
	InvSerials       = "serials-unique"
	InvExLeader      = "ex-leader-issued-nothing"
	InvSnapshot      = "snapshot-catch-up"
	InvNoStall       = "slow-follower-no-stall"
	InvDiskFull      = "disk-full-clean"
	InvMembership    = "membership-converges"
	InvLiveness      = "no-wrong-inactive"
	InvMistakes      = "mistakes-refused"
	InvOneQuorum     = "one-quorum"
	InvRevokedCA     = "revoked-ca-cut-off"
)

// maxStall is the longest a quorum with one slow follower may go without
// acknowledging a write: the leader and the other follower are a majority,
// so only calls that go through the slow one wait.
const maxStall = 2 * time.Second

// Check is the outcome of one invariant.
type Check struct {
	Name       string
	Checked    int // how many things it looked at
	Violations []string
	Note       string
}

// OK reports whether the invariant held.
func (c Check) OK() bool { return len(c.Violations) == 0 }

func (c *Check) fail(format string, args ...any) {
	c.Violations = append(c.Violations, fmt.Sprintf(format, args...))
}

// auditOf returns the audit entries about node, oldest first.
func auditOf(audit []*pactv1.AuditEntry, node string) []*pactv1.AuditEntry {
	var out []*pactv1.AuditEntry
	for _, e := range audit {
		if e.GetNodeId() == node {
			out = append(out, e)
		}
	}
	return out
}

func certAction(a string) bool { return a == "enroll" || a == "renew" || a == "takeover" }

// auditTruncated reports whether the registry dropped older audit entries,
// and the time (history clock) before which the audit is incomplete.
func auditTruncated(audit []*pactv1.AuditEntry, h *History) (bool, int64) {
	if len(audit) < auditCapacity {
		return false, 0
	}
	return true, h.At(time.Unix(0, audit[0].GetAtUnixNano()))
}

// CheckAckedWrites: every acknowledged write is in the committed audit
// trail, in the order the client made them; and a node whose last
// acknowledged write has no unknown-outcome write anywhere near or after
// it ends in exactly the state that write left.
func CheckAckedWrites(recs []*Record, final JournalState, h *History) Check {
	c := Check{Name: InvAckedWrites}
	truncated, from := auditTruncated(final.Audit, h)
	if truncated {
		c.Note = "audit trail truncated; older writes not checked against it"
	}
	for node, rs := range ByNode(recs) {
		audit := auditOf(final.Audit, node)
		seen := map[string]bool{}
		pos := 0
		var last *Record
		for _, r := range rs {
			if !r.IsWrite() || r.Out.Result != ResultOK || r.Final {
				continue
			}
			if (r.In.Kind == OpEnroll || r.In.Kind == OpTakeover) && seen[r.Out.Serial] {
				continue // a retry: the same certificate again, no new write
			}
			if r.In.Kind.issuesCert() {
				seen[r.Out.Serial] = true
			}
			last = r
			if r.Call < from {
				continue
			}
			c.Checked++
			found := false
			for ; pos < len(audit); pos++ {
				e := audit[pos]
				if matchesAudit(r, e) {
					found = true
					pos++
					break
				}
			}
			if !found {
				c.fail("node %s: acknowledged %s is not in the committed audit trail (in client order):\n%s  audit of %s:\n%s",
					node, DescribeOp(r.In, r.Out), "    "+r.String()+"\n", node, auditExcerpt(audit))
				pos = 0
			}
		}
		if last == nil {
			continue
		}
		// Unknown writes from up to 15s before (a journal may still hold
		// one: apply timeout plus forwarding) or after it may have changed
		// the state since; so may a write refused with NO_LEADER after it,
		// if that answer was wrong (the linearizability check reports
		// that, not this one).
		quiet := true
		for _, r := range rs {
			maybe := r.Out.Result == ResultUnknown && r.Call > last.Call-int64(15*time.Second) ||
				r.Out.Reason == "NO_LEADER" && r.Call > last.Call
			if r.IsWrite() && maybe && r != last {
				quiet = false
			}
		}
		if !quiet {
			continue
		}
		n, ok := final.Nodes[node]
		want := map[OpKind]string{OpRegister: StateRegistered, OpEnroll: StateActive, OpTakeover: StateActive, OpRenew: StateActive, OpDecommission: StateRevoked}[last.In.Kind]
		switch {
		case !ok:
			c.fail("node %s: its last acknowledged write (%s) is lost: the node is not in %s's registry", node, last, final.ID)
		case StateName(n.GetState()) != want:
			c.fail("node %s: its last acknowledged write %s left it %s; %s says %s", node, last, want, final.ID, StateName(n.GetState()))
		case last.In.Kind.issuesCert() && n.GetCert().GetSerial() != last.Out.Serial:
			c.fail("node %s: its last acknowledged write %s; %s holds serial %s", node, last, final.ID, n.GetCert().GetSerial())
		}
	}
	return c
}

func matchesAudit(r *Record, e *pactv1.AuditEntry) bool {
	switch r.In.Kind {
	case OpRegister:
		return e.GetAction() == "register"
	case OpDecommission:
		return e.GetAction() == "decommission"
	case OpEnroll, OpRenew, OpTakeover:
		return certAction(e.GetAction()) && e.GetSerial() == r.Out.Serial
	}
	return false
}

func auditExcerpt(audit []*pactv1.AuditEntry) string {
	var b strings.Builder
	for _, e := range audit {
		fmt.Fprintf(&b, "    index %d %s %s by %s\n", e.GetIndex(), e.GetAction(), e.GetSerial(), e.GetActor())
	}
	return b.String()
}

// CheckHardware checks hw-active-once at every moment of the history, not
// only at its end: replaying the committed audit trail in Raft order, with
// each node id's hardware (hw: a node id always registers with the same
// MAC and BMC), no MAC or BMC serial is ever held by two nodes that are not
// decommissioned, and a node activates (enroll, takeover) only with
// hardware no other live node holds. It also checks every journal's final
// registry the same way.
func CheckHardware(states []JournalState, final JournalState, hw map[string][2]string, h *History) Check {
	c := Check{Name: InvHardware}
	truncated, _ := auditTruncated(final.Audit, h)
	if truncated {
		c.Note = "audit trail truncated: the replay starts mid-history"
	}
	holder := map[string]string{} // "mac X" / "bmc Y" -> the live node holding it
	state := map[string]string{}
	parts := func(id string) []string {
		x, ok := hw[id]
		if !ok {
			return nil
		}
		out := []string{"mac " + x[0]}
		if x[1] != "" {
			out = append(out, "bmc "+x[1])
		}
		return out
	}
	active, moves := 0, 0
	for _, e := range final.Audit {
		id := e.GetNodeId()
		switch e.GetAction() {
		case "register":
			c.Checked++
			if _, ok := hw[id]; !ok {
				c.fail("index %d: node %s registered, but the workload never registers it", e.GetIndex(), id)
				continue
			}
			for _, p := range parts(id) {
				if o := holder[p]; o != "" && o != id {
					c.fail("index %d: node %s registered with %s, which node %s (%s) holds", e.GetIndex(), id, p, o, state[o])
				} else if o == "" && state[id] == "" {
					for other, st := range state {
						if other != id && st == StateRevoked && slices.Contains(parts(other), p) {
							moves++ // a decommissioned node's hardware, now another's
							break
						}
					}
				}
				holder[p] = id
			}
			state[id] = StateRegistered
		case "enroll", "takeover", "active":
			c.Checked++
			for _, p := range parts(id) {
				if o := holder[p]; o != id && !truncated {
					c.fail("index %d: node %s became active with %s, which node %s holds", e.GetIndex(), id, p, o)
				}
			}
			for other, st := range state {
				if other == id || st != StateActive {
					continue
				}
				for _, p := range parts(id) {
					if slices.Contains(parts(other), p) {
						c.fail("index %d: nodes %s and %s both active with %s", e.GetIndex(), id, other, p)
					}
				}
			}
			state[id] = StateActive
			active++
		case "inactive":
			state[id] = StateInactive
		case "decommission":
			state[id] = StateRevoked
			for _, p := range parts(id) {
				if holder[p] == id {
					delete(holder, p)
				}
			}
		}
	}
	if c.Note != "" {
		c.Note += "; "
	}
	c.Note += fmt.Sprintf("%d audit entries replayed, %d activations, %d registrations of a decommissioned node's hardware to another id", len(final.Audit), active, moves)
	for _, s := range states {
		owners := map[string][]string{}
		for id, n := range s.Nodes {
			if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
				continue
			}
			for _, m := range n.GetHardware().GetMacs() {
				owners["mac "+m] = append(owners["mac "+m], id+"("+StateName(n.GetState())+")")
			}
			if b := n.GetHardware().GetBmcSerial(); b != "" {
				owners["bmc "+b] = append(owners["bmc "+b], id+"("+StateName(n.GetState())+")")
			}
		}
		for hw, ids := range owners {
			c.Checked++
			if len(ids) > 1 {
				sort.Strings(ids)
				c.fail("%s at the end: %s belongs to %v", s.ID, hw, ids)
			}
		}
	}
	return c
}

// CheckCertsCommitted: every certificate a client received verifies, is
// for the client's key, and its serial is committed (an enroll, renew or
// takeover entry of the node's audit trail); one that is still the node's
// current certificate has the client's key in the registry.
func CheckCertsCommitted(recs []*Record, final JournalState, h *History) Check {
	c := Check{Name: InvCertsComitted}
	_, from := auditTruncated(final.Audit, h)
	committed := map[string]map[string]bool{}
	for _, e := range final.Audit {
		if certAction(e.GetAction()) {
			if committed[e.GetNodeId()] == nil {
				committed[e.GetNodeId()] = map[string]bool{}
			}
			committed[e.GetNodeId()][e.GetSerial()] = true
		}
	}
	for _, r := range recs {
		if !r.In.Kind.issuesCert() || r.Out.Result != ResultOK {
			continue
		}
		c.Checked++
		if r.CertProblem != "" {
			c.fail("node %s: certificate %s received: %s\n    %s", r.In.Node, r.Out.Serial, r.CertProblem, r)
		}
		if r.Call >= from && !committed[r.In.Node][r.Out.Serial] {
			c.fail("node %s: certificate %s was received but never committed\n    %s", r.In.Node, r.Out.Serial, r)
		}
		if n := final.Nodes[r.In.Node]; n.GetCert().GetSerial() == r.Out.Serial && n.GetCert().GetSpkiSha256() != r.Out.Key {
			c.fail("node %s: certificate %s is current with key %s, the client's key is %s", r.In.Node, r.Out.Serial, short(n.GetCert().GetSpkiSha256()), short(r.Out.Key))
		}
	}
	return c
}

// CheckNoRenewAfterDecommission: no renewal succeeds with a certificate
// received before an acknowledged decommission of its node, and in the
// committed audit no renewal follows a decommission before the node is
// registered again.
func CheckNoRenewAfterDecommission(recs []*Record, final JournalState) Check {
	c := Check{Name: InvNoRenewRevoke}
	for node, rs := range ByNode(recs) {
		received := map[string]int64{} // serial -> when the client had it
		var decoms []*Record
		for _, r := range rs {
			switch {
			case r.In.Kind == OpDecommission && r.Out.Result == ResultOK:
				decoms = append(decoms, r)
			case r.In.Kind == OpRenew && r.Out.Result == ResultOK:
				c.Checked++
				if at, ok := received[r.In.Prev]; ok {
					for _, d := range decoms {
						if at < d.Return && d.Return < r.Call {
							c.fail("node %s: renewal with %s (received before the decommission) succeeded after the acknowledged decommission\n    %s\n    %s", node, short(r.In.Prev), d, r)
						}
					}
				}
			}
			if r.In.Kind.issuesCert() && r.Out.Result == ResultOK {
				if _, ok := received[r.Out.Serial]; !ok {
					received[r.Out.Serial] = r.Return
				}
			}
		}
	}
	revoked := map[string]bool{}
	for _, e := range final.Audit {
		switch e.GetAction() {
		case "decommission":
			revoked[e.GetNodeId()] = true
		case "register":
			revoked[e.GetNodeId()] = false
		case "renew":
			if revoked[e.GetNodeId()] {
				c.fail("node %s: committed renewal (index %d, serial %s) after its decommission", e.GetNodeId(), e.GetIndex(), e.GetSerial())
			}
		}
	}
	return c
}

// CheckIdentical: every journal ended with the same registry and audit.
func CheckIdentical(states []JournalState, diff string) Check {
	c := Check{Name: InvIdentical, Checked: len(states)}
	if diff != "" {
		c.fail("%s", diff)
	}
	return c
}

// CheckSerials: every serial any client received names one certificate
// (one node, one key), and no two committed certificates share a serial.
func CheckSerials(recs []*Record, final JournalState) Check {
	c := Check{Name: InvSerials}
	type cert struct{ node, key string }
	seen := map[string]cert{}
	for _, r := range recs {
		if !r.In.Kind.issuesCert() || r.Out.Result != ResultOK {
			continue
		}
		c.Checked++
		this := cert{r.In.Node, r.Out.Key}
		if prev, ok := seen[r.Out.Serial]; ok && prev != this {
			c.fail("serial %s received for %s (key %s) and for %s (key %s)", r.Out.Serial, prev.node, short(prev.key), this.node, short(this.key))
		}
		seen[r.Out.Serial] = this
	}
	where := map[string]uint64{}
	for _, e := range final.Audit {
		if !certAction(e.GetAction()) {
			continue
		}
		if idx, ok := where[e.GetSerial()]; ok {
			c.fail("serial %s committed twice: audit index %d and %d", e.GetSerial(), idx, e.GetIndex())
		}
		where[e.GetSerial()] = e.GetIndex()
	}
	return c
}

// Pause is one SIGSTOP/SIGCONT of a journal that led when it was paused.
type Pause struct {
	Journal   int
	ID        string
	From, To  int64 // history time
	NewLeader string
}

var issuedRE = regexp.MustCompile(`msg="(?:node enrolled|certificate renewed)".*? serial=([0-9a-f]+)`)

// CheckExLeader: a paused ex-leader issued nothing that did not commit.
// Every certificate received from it after it was frozen (calls that
// reached it before or during the pause and were answered after the thaw,
// and calls in the seconds after, while it may still believe it leads),
// and every issuance it logged, must be in the committed audit trail.
func CheckExLeader(recs []*Record, final JournalState, pauses []Pause, logs func(i int) string) Check {
	c := Check{Name: InvExLeader}
	committed := map[string]bool{}
	for _, e := range final.Audit {
		if certAction(e.GetAction()) {
			committed[e.GetSerial()] = true
		}
	}
	var held, heldOK, after, afterOK int
	for _, p := range pauses {
		for _, r := range recs {
			if r.Journal != p.ID || r.Return < p.From || r.Call > p.To+int64(2*time.Second) {
				continue
			}
			ok := r.Out.Result == ResultOK
			if r.IsWrite() {
				if r.Call < p.To {
					held++
					if ok {
						heldOK++
					}
				} else {
					after++
					if ok {
						afterOK++
					}
				}
			}
			if r.In.Kind.issuesCert() && ok {
				c.Checked++
				if !committed[r.Out.Serial] {
					c.fail("ex-leader %s answered with certificate %s that never committed\n    %s", p.ID, r.Out.Serial, r)
				}
			}
		}
		for _, m := range issuedRE.FindAllStringSubmatch(logs(p.Journal), -1) {
			c.Checked++
			if !committed[m[1]] {
				c.fail("ex-leader %s logged issuing %s, which never committed", p.ID, m[1])
			}
		}
	}
	c.Note = fmt.Sprintf("%d pauses; writes that reached the frozen leader: %d (%d answered ok after the thaw); writes to it in the 2 s after the thaw: %d (%d ok)",
		len(pauses), held, heldOK, after, afterOK)
	return c
}

// Unavailability is, for each fault, the time from its injection until
// the first write called after it succeeded. An Enroll retry that got a
// certificate already received is no write (a journal answers it from its
// own copy).
func Unavailability(recs []*Record, faults []Fault, end int64) []time.Duration {
	var writes []*Record
	received := map[string]bool{}
	for _, r := range recs {
		if !r.IsWrite() || r.Out.Result != ResultOK || r.Final {
			continue
		}
		if r.In.Kind.issuesCert() {
			if received[r.Out.Serial] {
				continue
			}
			received[r.Out.Serial] = true
		}
		writes = append(writes, r)
	}
	var out []time.Duration
	for _, f := range faults {
		best := end - f.At
		for _, w := range writes {
			if w.Call >= f.At && w.Return-f.At < best {
				best = w.Return - f.At
			}
		}
		out = append(out, time.Duration(best))
	}
	return out
}

// Percentile is the p-th percentile (nearest rank) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// CheckNoStall: while a follower is slow, writes keep being acknowledged:
// no gap between acknowledged writes (or between the fault's start or end
// and the nearest write) is longer than maxStall.
func CheckNoStall(recs []*Record, faults []Fault, end int64) Check {
	c := Check{Name: InvNoStall}
	var acks []int64
	for _, r := range recs {
		if r.IsWrite() && r.Out.Result == ResultOK && !r.Final {
			acks = append(acks, r.Return)
		}
	}
	slices.Sort(acks)
	var worst time.Duration
	for _, f := range faults {
		if !strings.HasPrefix(f.Kind, "slow") {
			continue
		}
		c.Checked++
		to := f.Healed
		if to == 0 {
			to = end
		}
		// The points in time that bound the gaps: the fault's start, every
		// write acknowledged while it lasted, its end.
		points := []int64{f.At}
		for _, a := range acks {
			if a > f.At && a <= to {
				points = append(points, a)
			}
		}
		points = append(points, to)
		for k := 1; k < len(points); k++ {
			g := time.Duration(points[k] - points[k-1])
			worst = max(worst, g)
			if g > maxStall {
				c.fail("%s %s (%.1fs-%.1fs): no write acknowledged for %v from %.1fs", f.Kind, f.Target, float64(f.At)/1e9, float64(to)/1e9, g.Round(time.Millisecond), float64(points[k-1])/1e9)
			}
		}
	}
	c.Note = fmt.Sprintf("longest gap between acknowledged writes while a follower was slow: %v (at most %v)", worst.Round(time.Millisecond), maxStall)
	return c
}
