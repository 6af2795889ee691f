package main

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/wire"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

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
		spread: 100 * time.Millisecond, deadline: 2 * time.Minute, kx: wire.Classical, life: life,
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
	if res.byOp["renew"] < len(nodes) {
		t.Errorf("attempts %v: want a renewal per agent", res.byOp)
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
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/pact-hpc/pact/agent" {
				importsAgent = true
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && agentCalls[sel.Sel.Name] {
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
	closed := status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: EOF"`)
	deadline := status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	refused := status.Error(codes.Unavailable, "NO_LEADER")
	// As identity.ClientCredentials.Explain reports a busy answer.
	busy := fmt.Errorf("%w (TLS handshake: %w)", status.Error(codes.Unavailable, "connection error"), &wire.BusyError{RetryAfter: time.Second})
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
		{"connect", fmt.Errorf("identity: health check of x: %w", busy), work{}},
		{"renew", fmt.Errorf("identity: health check of x: %w", busy), work{keygen: 1, sign: 1}},
		{"renew", nil, work{keygen: 1, sign: 1, mtls: 1}},
		{"renew", fmt.Errorf("agent: RenewCert at x: %w", refused), work{keygen: 1}},
		{"renew", fmt.Errorf("agent: RenewCert at x: %w", deadline), work{keygen: 1, sign: 1}},
		{"renew", fmt.Errorf("identity: health check of x: %w", refused), work{keygen: 1, sign: 1, mtls: 1}},
	} {
		if got := attemptWork(tc.op, tc.err); got != tc.want {
			t.Errorf("attemptWork(%s, %v) = %+v, want %+v", tc.op, tc.err, got, tc.want)
		}
	}
}
