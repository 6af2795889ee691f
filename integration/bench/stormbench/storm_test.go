package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/agent"
	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/internal/bintest"
	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The test binary doubles as the load generator's worker process: a
// storm with -workers starts os.Executable() storm-worker, which is this
// binary in a test.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "storm-worker" {
		os.Exit(runWorker(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "floor-journal" {
		os.Exit(runFloorJournal(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// A tiny storm against three journals in this process: every node the
// benchmark counts as streaming is one whose pact-agent (agent.Agent)
// enrolled, opened its channel and received its first event, which the
// journals confirm (the registry holds the serial the agent's channel
// presents, and one stream per node); then the same through the agent's
// renewal.
func TestTinyStormRunsPactAgent(t *testing.T) {
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	c := journaltest.StartCluster(t, root, cfgs)
	leader := c.Nodes[c.Leader(t)]
	nodes := inventory("t", 20)
	for _, n := range nodes {
		leader.Register(t, n.id, n.bmc, n.mac)
	}
	// An agent may enroll at any journal: each must have the
	// registrations (a linearizable read there waits for them).
	for _, h := range c.Nodes {
		inspectNode(t, h, nodes[len(nodes)-1].id)
	}

	life, stop := context.WithCancel(context.Background())
	agents := make([]*benchAgent, len(nodes))
	for i, n := range nodes {
		agents[i] = &benchAgent{idx: i, node: n}
	}
	t.Cleanup(func() { stop(); stopAgents(agents) }) // before the journals close
	var addrs []string
	for _, h := range c.Nodes {
		addrs = append(addrs, h.Addr)
	}
	st := &storm{kind: stormEnroll, agents: agents, addrs: addrs, caFile: filepath.Join(root, ca.RootCertFile),
		spread: 100 * time.Millisecond, deadline: 2 * time.Minute, kx: transport.Classical, life: life,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	res := st.run(nil)
	if res.ok != len(nodes) || res.failed != 0 {
		t.Fatalf("enroll storm: %d streaming, %d failed: %v", res.ok, res.failed, res.firstErrs)
	}
	if res.byOp["enroll"] < len(nodes) || res.byOp["connect"] < len(nodes) {
		t.Errorf("attempts %v: want an enrollment and a channel per agent", res.byOp)
	}
	enrolled := confirm(t, c, agents, nil)

	rs := *st
	rs.kind = stormRenew
	res = rs.run(nil)
	if res.ok != len(nodes) || res.failed != 0 {
		t.Fatalf("renew storm: %d streaming, %d failed: %v", res.ok, res.failed, res.firstErrs)
	}
	if res.byOp["renew"] < len(nodes) || res.channels < len(nodes) {
		t.Errorf("attempts %v, %d on a new channel: want a renewal and a new channel per agent", res.byOp, res.channels)
	}
	confirm(t, c, agents, enrolled)
}

// confirm checks with the journals that every agent's node is active with
// the serial its agent's channel presents (a new one when before is
// given) and that the journals hold one stream for it. It returns the
// serials.
func confirm(t *testing.T, c *journaltest.Cluster, agents []*benchAgent, before map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range agents {
		a.mu.Lock()
		serial, ag := a.serial, a.ag
		a.mu.Unlock()
		if ag == nil {
			t.Fatalf("%s: no agent.Agent", a.node.id)
		}
		if st := ag.Status(); !strings.EqualFold(st.Serial, serial) {
			t.Errorf("%s: the agent's channel presents serial %s, the benchmark saw %s", a.node.id, st.Serial, serial)
		}
		n := inspectNode(t, c.Nodes[0], a.node.id)
		if n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || !strings.EqualFold(n.GetCert().GetSerial(), serial) {
			t.Errorf("%s: registry %v serial %s, the agent's channel presents %s", a.node.id, n.GetState(), n.GetCert().GetSerial(), serial)
		}
		if old, ok := before[a.node.id]; ok && strings.EqualFold(old, serial) {
			t.Errorf("%s: still serial %s after the renewal storm", a.node.id, old)
		}
		out[a.node.id] = serial
		waitStreams(t, c, a.node.id)
	}
	return out
}

// waitStreams waits until the journals together hold exactly one stream
// for node: a journal notices a replaced channel's stream end a moment
// after the agent moved.
func waitStreams(t *testing.T, c *journaltest.Cluster, node string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a hang guard only
	for {
		n := 0
		for _, h := range c.Nodes {
			n += h.J.OpenStreams(node)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the journals hold %d streams, want 1", node, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inspectNode is a linearizable read of node at h, retried while h has no
// leader.
func inspectNode(t *testing.T, h *journaltest.Harness, node string) *pactv1.Node {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a hang guard only
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := h.AdminClient(t).InspectNode(ctx, &pactv1.InspectNodeRequest{NodeId: node})
		cancel()
		if err == nil {
			return resp.GetNode()
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("inspect %s at %s: %v", node, h.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The benchmark's agents are pact-agent's: the package imports the agent
// and makes none of the agent's calls itself, so it cannot drift back into
// a copy of the agent (as it once was) without this test failing.
func TestStormbenchHasNoAgentCopy(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	agentCalls := map[string]bool{"Enroll": true, "RenewCert": true, "Ping": true, "Subscribe": true,
		"NewEnrollmentServiceClient": true, "CreateCertificateRequestForAgent": true}
	importsAgent := false
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == "github.com/pact-hpc/pact/agent" {
				importsAgent = true
			}
			// The bare clients are the floor's alone (-floor-client bare).
			if strings.HasSuffix(p, "/bareclient") && name != "floor.go" {
				t.Errorf("%s imports %s; only the floor may use bare clients, the storm's agents are pact-agent", name, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				// peer.go (make bench-peer) is no storm: it sets pact's
				// server beside step-ca's, one bare Enroll per new TLS
				// connection, as a step-ca client makes one sign call.
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && agentCalls[sel.Sel.Name] && name != "peer.go" {
					t.Errorf("%s: calls %s itself; the agents must make every agent call (agent.Agent)", fset.Position(n.Pos()), sel.Sel.Name)
				}
			case *ast.FuncDecl:
				if name := strings.ToLower(n.Name.Name); strings.Contains(name, "backoff") || strings.Contains(name, "jitter") {
					t.Errorf("%s: declares %s; the retry policy is internal/backoff's, through the agent", fset.Position(n.Pos()), n.Name.Name)
				}
			}
			return true
		})
	}
	if !importsAgent {
		t.Error("stormbench does not import github.com/pact-hpc/pact/agent")
	}
}

// How far each kind of failed attempt got decides what it is priced at.
func TestAttemptWork(t *testing.T) {
	// As channel.ClientCredentials.Explain reports a journal that closed
	// the connection on the ClientHello.
	closed := fmt.Errorf("%w (TLS handshake: %w)", status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: EOF"`), &channel.HandshakeError{Err: io.EOF})
	deadline := status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	refused := status.Error(codes.Unavailable, "NO_LEADER")
	// As channel.ClientCredentials.Explain reports a busy answer.
	busy := fmt.Errorf("%w (TLS handshake: %w)", status.Error(codes.Unavailable, "connection error"), &transport.BusyError{RetryAfter: time.Second})
	for _, tc := range []struct {
		op   string
		err  error
		want work
	}{
		{"enroll", nil, work{keygen: 1, tls: 1, sign: 1}},
		{"enroll", refused, work{tls: 1}},
		{"enroll", deadline, work{tls: 1, sign: 1}},
		{"enroll", closed, work{}},
		{"connect", nil, work{mtls: 1}},
		{"connect", refused, work{mtls: 1}},
		{"connect", closed, work{}},
		{"enroll", fmt.Errorf("agent: enroll at x: %w", busy), work{}},
		{"connect", fmt.Errorf("channel: health check of x: %w", busy), work{}},
		{"move", nil, work{mtls: 1}},
		{"move", deadline, work{mtls: 1}},
		{"move", fmt.Errorf("channel: health check of x: %w", busy), work{}},
		{"renew", fmt.Errorf("channel: health check of x: %w", busy), work{keygen: 1, sign: 1}},
		{"renew", nil, work{keygen: 1, sign: 1, mtls: 1}},
		{"renew", &agent.RenewCertError{Journal: "x", Err: refused}, work{keygen: 1}},
		{"renew", &agent.RenewCertError{Journal: "x", Err: deadline}, work{keygen: 1, sign: 1}},
		{"renew", fmt.Errorf("channel: health check of x: %w", refused), work{keygen: 1, sign: 1, mtls: 1}},
		// Only the agent's typed errors say how far an attempt got, never
		// their words.
		{"renew", fmt.Errorf("agent: RenewCert at x: %w", refused), work{keygen: 1, sign: 1, mtls: 1}},
		{"connect", status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: EOF"`), work{mtls: 1}},
	} {
		if got := attemptWork(tc.op, tc.err); got != tc.want {
			t.Errorf("attemptWork(%s, %v) = %+v, want %+v", tc.op, tc.err, got, tc.want)
		}
	}
}

// A failed attempt's work is wasted but for a renewal that committed and
// whose new channel failed: its certificate is kept for the move.
func TestWastedWork(t *testing.T) {
	deadline := status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	refused := status.Error(codes.ResourceExhausted, "RATE_LIMITED")
	for _, tc := range []struct {
		op   string
		err  error
		want work
	}{
		{"renew", fmt.Errorf("channel: health check of x: %w", deadline), work{mtls: 1}},
		{"renew", &agent.RenewCertError{Journal: "x", Err: refused}, work{keygen: 1}},
		{"renew", &agent.RenewCertError{Journal: "x", Err: deadline}, work{keygen: 1, sign: 1}},
		{"enroll", deadline, work{tls: 1, sign: 1}},
		{"move", deadline, work{mtls: 1}},
	} {
		if got := wastedWork(tc.op, tc.err); got != tc.want {
			t.Errorf("wastedWork(%s, %v) = %+v, want %+v", tc.op, tc.err, got, tc.want)
		}
	}
}

// The renewal storm counts the tries to put each node's renewed
// certificate on a channel: the renewal's own once RenewCert answered,
// then moves and connects; not a renewal refused at RenewCert.
func TestNewChannel(t *testing.T) {
	busy := fmt.Errorf("channel: health check of x: %w", &transport.BusyError{RetryAfter: time.Second})
	stale := &agent.RenewCertError{Journal: "x", Err: status.Error(codes.PermissionDenied, "STALE_CERTIFICATE")}
	for _, tc := range []struct {
		op   string
		err  error
		want bool
	}{
		{"renew", nil, true},
		{"renew", busy, true},
		{"renew", stale, false},
		{"move", nil, true},
		{"move", busy, true},
		{"upgrade", busy, true},
		{"connect", nil, true},
		{"enroll", nil, false},
		{"standby", nil, false},
	} {
		if got := newChannel(tc.op, tc.err); got != tc.want {
			t.Errorf("newChannel(%s, %v) = %v, want %v", tc.op, tc.err, got, tc.want)
		}
	}
	a := &benchAgent{}
	a.reset(stormRenew, nil)
	for _, at := range []struct {
		op  string
		err error
	}{{"renew", busy}, {"move", busy}, {"renew", stale}, {"move", nil}} {
		a.onAttempt(at.op, at.err)
	}
	if r := a.record(); r.Channels != 3 || r.Attempts != 4 || r.ByOp["move"] != 2 {
		t.Errorf("record %+v: want 3 channel attempts of 4, 2 moves", r)
	}
}

// The whole benchmark, as make bench-storm runs it, with its agents split
// over two worker processes: three pact-journal processes, registration
// with the pact CLI, the ceilings, both storms, and the final check by
// the journals (pact node list, pact_journal_streams_open). The parent
// merges the workers' records into one result.
func TestTinyStormInWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts journal processes; skipped with -short")
	}
	bin := bintest.Dir(t, "pact-journal", "pact")
	const agents = 20
	f := stormFlags{agents: agents, journals: 3, bin: bin, workers: 2, spread: 200 * time.Millisecond,
		ceiling: 100 * time.Millisecond, renew: true, deadline: 2 * time.Minute, keyExchange: string(transport.Classical)}
	var cl cleanup
	defer cl.run()
	var out bytes.Buffer
	res, err := stormMain(f, t.TempDir(), &cl, &out)
	t.Logf("report:\n%s", out.String())
	if err != nil {
		t.Fatal(err) // a failed final check too
	}
	if !res.chk.pass() || res.chk.counts["active"] != agents || res.chk.streams != agents || res.chk.renewed != agents {
		t.Errorf("final check: %s; active %d, streams %d, renewed %d", res.chk.reason(), res.chk.counts["active"], res.chk.streams, res.chk.renewed)
	}
	e, r := res.enroll, res.renew
	if e.agents != agents || e.ok != agents || e.failed != 0 || len(e.lat) != agents {
		t.Errorf("enroll storm: %d agents, %d streaming, %d failed, %d latencies", e.agents, e.ok, e.failed, len(e.lat))
	}
	if e.byOp["enroll"] < agents || e.byOp["connect"] < agents || e.attempts < 2*agents {
		t.Errorf("enroll attempts %d %v: want an enrollment and a channel per agent", e.attempts, e.byOp)
	}
	if e.spent.keygen != agents || e.spent.sign < agents {
		t.Errorf("enroll work %+v: want a key and a signature per agent", e.spent)
	}
	if r == nil || r.agents != agents || r.ok != agents || r.byOp["renew"] < agents {
		t.Fatalf("renew storm: %+v", r)
	}
	if e.genCPU <= 0 || e.genRSS <= 0 || e.wall <= 0 {
		t.Errorf("load generator CPU %v, RSS %d, wall %v: the workers' measurements did not arrive", e.genCPU, e.genRSS, e.wall)
	}
	js := lastJSONLine(t, out.String())
	if js["loadgen_processes"] != float64(2) || js["pass"] != true || js["agents"] != float64(agents) || js["attempts"] != float64(e.attempts) {
		t.Errorf("JSON: loadgen_processes %v, pass %v, agents %v, attempts %v", js["loadgen_processes"], js["pass"], js["agents"], js["attempts"])
	}
}

// The floor: the same agents (pact-agent's code) against stub journals,
// each a process of this test binary, doing the ceiling's work and, the
// replicating floor, one Raft entry per enrollment and per renewal. Every
// agent must enroll, stream and renew there, the stubs must count one
// stream per agent, and the replicating stubs one committed entry per
// certificate; the report's JSON line carries the floor's ratios.
func TestTinyFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pact-journal and starts stub journal processes; skipped with -short")
	}
	bin := bintest.Dir(t, "pact-journal")
	for _, replicate := range []bool{true, false} {
		t.Run(fmt.Sprintf("replicate=%v", replicate), func(t *testing.T) { tinyFloor(t, bin, replicate) })
	}
}

func tinyFloor(t *testing.T, bin string, replicate bool) {
	const agents = 20
	f := stormFlags{agents: agents, journals: 3, bin: bin, workers: 1, spread: 200 * time.Millisecond,
		ceiling: 100 * time.Millisecond, renew: true, deadline: 2 * time.Minute, keyExchange: string(transport.Classical), floor: true, floorReplicate: replicate}
	var cl cleanup
	defer cl.run()
	var out bytes.Buffer
	err := floorMain(f, t.TempDir(), &cl, &out)
	t.Logf("report:\n%s", out.String())
	if err != nil {
		t.Fatal(err) // a failed final check too
	}
	js := lastJSONLine(t, out.String())
	if js["bench"] != "storm-floor" || js["pass"] != true || js["agents"] != float64(agents) || js["failed"] != float64(0) || js["renew_failed"] != float64(0) {
		t.Errorf("JSON: bench %v, pass %v, agents %v, failed %v, renew_failed %v", js["bench"], js["pass"], js["agents"], js["failed"], js["renew_failed"])
	}
	// An enrollment and a channel per agent at least.
	if a, _ := js["attempts"].(float64); a < 2*agents {
		t.Errorf("attempts %v: want at least two per agent", js["attempts"])
	}
	for _, k := range []string{"journal_cpu_ms_per_agent", "loadgen_cpu_ms_per_agent", "journal_cpu_ratio", "ratio_to_ceiling", "renew_journal_cpu_ratio"} {
		if v, _ := js[k].(float64); v <= 0 {
			t.Errorf("%s = %v: not measured", k, js[k])
		}
	}
	// One committed entry per enrollment and per renewal (a retried
	// call commits again, so at least), none for the old floor.
	entries, renewEntries := js["raft_entries"].(float64), js["renew_raft_entries"].(float64)
	if replicate && (entries < agents || renewEntries < agents) {
		t.Errorf("the replicating floor committed %v entries in the enroll storm and %v in the renew storm, want at least %d each", entries, renewEntries, agents)
	}
	if !replicate && (entries != 0 || renewEntries != 0) {
		t.Errorf("the old floor committed %v and %v Raft entries, want none", entries, renewEntries)
	}
	// The stubs' admission queue timed every connection's slot wait.
	if tm, _ := js["journal_timings"].(map[string]any)["grpc"].(map[string]any)["slot_wait"].(map[string]any); tm == nil || tm["count"].(float64) < agents {
		t.Errorf("journal_timings %v: want the stubs' slot waits, one per connection", js["journal_timings"])
	}
	if js["floor_replicates"] != replicate || js["leader_changes"] != float64(0) {
		t.Errorf("JSON: floor_replicates %v, leader_changes %v", js["floor_replicates"], js["leader_changes"])
	}
}

// The floor with bare gRPC clients: neither side is pact, and still every
// client must enroll at a stub and hold a stream there.
func TestTinyFloorBareClients(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pact-journal and starts stub journal processes; skipped with -short")
	}
	bin := bintest.Dir(t, "pact-journal")
	const agents = 20
	f := stormFlags{agents: agents, journals: 2, bin: bin, workers: 1, spread: 200 * time.Millisecond,
		ceiling: 100 * time.Millisecond, deadline: time.Minute, keyExchange: string(transport.Classical), floor: true, floorClient: "bare"}
	var cl cleanup
	defer cl.run()
	var out bytes.Buffer
	err := floorMain(f, t.TempDir(), &cl, &out)
	t.Logf("report:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	js := lastJSONLine(t, out.String())
	if js["floor_client"] != "bare" || js["pass"] != true || js["failed"] != float64(0) {
		t.Errorf("JSON: floor_client %v, pass %v, failed %v", js["floor_client"], js["pass"], js["failed"])
	}
	if a, _ := js["attempts"].(float64); a < 2*agents {
		t.Errorf("attempts %v: want an Enroll and a channel per client at least", js["attempts"])
	}
	if _, ok := js["renew_seconds"]; ok {
		t.Error("a bare floor ran a renewal storm: bare clients do not renew")
	}
}

// -workers 0 keeps one process while the open-file limit holds every
// agent, and always for up to half the limit (the recorded 10,000-agent
// runs, at 20,000); else the fewest processes whose shares fit.
func TestAutoWorkers(t *testing.T) {
	for _, tc := range []struct {
		agents int
		limit  uint64
		want   int
	}{
		{10000, 20000, 1},
		{30000, 20000, 4}, // 8,260 agents fit one process: 2.3 each and a margin
		{8260, 20000, 1},
		{12000, 20000, 2},
		{100, 1024, 1},
		{20000, 20000, 3},
		{30000, 0, 1},       // unknown or unlimited
		{30000, 1 << 20, 1}, // a raised limit
	} {
		got := autoWorkers(tc.agents, tc.limit)
		if got != tc.want {
			t.Errorf("autoWorkers(%d, %d) = %d, want %d", tc.agents, tc.limit, got, tc.want)
		}
		if got > 1 {
			for w := range got {
				from, to := share(tc.agents, got, w)
				if n := to - from; float64(n)*fdsPerAgent+fdMargin > float64(tc.limit) {
					t.Errorf("autoWorkers(%d, %d): worker %d holds %d agents, over the limit", tc.agents, tc.limit, w, n)
				}
			}
		}
	}
}

// The workers' shares cover the inventory, each agent once.
func TestShareCoversEveryAgent(t *testing.T) {
	for _, n := range []int{1, 7, 20, 30000} {
		for k := 1; k <= min(n, 5); k++ {
			next := 0
			for w := range k {
				from, to := share(n, k, w)
				if from != next || to <= from {
					t.Fatalf("share(%d, %d, %d) = [%d, %d), want from %d", n, k, w, from, to, next)
				}
				next = to
			}
			if next != n {
				t.Fatalf("share(%d, %d, ...) ends at %d", n, k, next)
			}
		}
	}
}

// An agent's record survives the trip from a worker as JSON.
func TestAgentRecordJSON(t *testing.T) {
	now := time.Now().Round(0)
	in := agentRecord{Idx: 7, Arrival: now, StreamAt: now.Add(time.Second), Serial: "ab", Before: "cd", Attempts: 3, Channels: 2,
		ByOp: map[string]int{"enroll": 2, "connect": 1}, Failures: map[string]int{"enroll Unavailable": 1},
		Examples: map[string]string{"enroll Unavailable": "x"}, Wasted: work{tls: 1}, Spent: work{1, 2, 3, 4}, Failed: true, Err: "e", Abandoned: true}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out agentRecord
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !out.Arrival.Equal(in.Arrival) || !out.StreamAt.Equal(in.StreamAt) || !out.ActiveAt.IsZero() {
		t.Errorf("times %v %v %v, want %v %v zero", out.Arrival, out.StreamAt, out.ActiveAt, in.Arrival, in.StreamAt)
	}
	out.Arrival, out.StreamAt, out.ActiveAt = in.Arrival, in.StreamAt, in.ActiveAt
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
}

// The worker's side of the protocol: ready with its share, one report per
// command (an unknown storm is an error, not an exit), and done when the
// parent closes its stdin.
func TestWorkerProtocol(t *testing.T) {
	w := workerFlags{stormFlags: stormFlags{agents: 5, keyExchange: string(transport.Classical), deadline: time.Minute},
		index: 1, from: 2, to: 5, addrs: "127.0.0.1:1", caFile: filepath.Join(t.TempDir(), "ca.pem")}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- workerMain(w, inR, outW); outW.Close() }()
	dec, enc := json.NewDecoder(outR), json.NewEncoder(inW)
	var r workerReport
	if err := dec.Decode(&r); err != nil || r.Ready != 3 {
		t.Fatalf("first line: %+v, %v; want ready 3", r, err)
	}
	for _, tc := range []struct {
		kind, wantErr string
	}{
		{"enroll", ""},
		{"renew", ""},
		{"reboot", `unknown storm "reboot"`},
	} {
		if err := enc.Encode(workerCommand{Kind: tc.kind, Start: time.Now().UnixNano()}); err != nil {
			t.Fatal(err)
		}
		r = workerReport{}
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		if r.Kind != tc.kind || r.Error != tc.wantErr || len(r.Records) != 0 {
			t.Errorf("%s: report %+v, want no records and error %q", tc.kind, r, tc.wantErr)
		}
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Errorf("workerMain after stdin closed: %v", err)
	}
}

// A floor the run could only fail at after its ceilings is refused at
// once, with what to do.
func TestCheckFloorFlags(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantErr   string // "" for accepted
		wantRenew bool
	}{
		{[]string{}, "", true},
		{[]string{"-floor"}, "", true},
		{[]string{"-floor", "-floor-client", "bare"}, "", false},
		{[]string{"-floor", "-floor-client", "bare", "-renew=false"}, "", false},
		{[]string{"-floor-client", "bare"}, "needs -floor", true},
		{[]string{"-floor", "-floor-client", "foo"}, "want pact", true},
		{[]string{"-floor", "-floor-client", "bare", "-workers", "2"}, "-workers", false},
		{[]string{"-floor", "-floor-client", "bare", "-renew"}, "drop -renew", true},
	} {
		f := stormFlags{}
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.BoolVar(&f.floor, "floor", false, "")
		fs.StringVar(&f.floorClient, "floor-client", "pact", "")
		fs.IntVar(&f.workers, "workers", 0, "")
		fs.BoolVar(&f.renew, "renew", true, "")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := checkFloorFlags(&f, fs)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: got %v, want an error saying %q", tc.args, err, tc.wantErr)
		case err == nil && f.renew != tc.wantRenew:
			t.Errorf("%v: renew %v, want %v", tc.args, f.renew, tc.wantRenew)
		}
	}
}

// lastJSONLine is a report's last line, which must be its JSON object.
func lastJSONLine(t *testing.T, report string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(report), "\n")
	var js map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &js); err != nil {
		t.Fatalf("last line: %v", err)
	}
	return js
}
