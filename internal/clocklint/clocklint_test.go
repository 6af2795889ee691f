package clocklint_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// allowed lists the functions (file, then the enclosing top-level function
// or method) that may let wall time pass, each with why nothing else works.
// Keep it short: an entry is time that cannot be faked (a real process, the
// kernel's clock, raft over TCP), a measurement of it, or load; never a
// wait for something a state or the fake clock could show.
var allowed = map[string]string{
	// hashicorp/raft's timers: on the wall clock over real TLS and TCP (the
	// founders), or on a synctest bubble's clock through methods clocklint
	// cannot tell are called in one (the stalling transport).
	"journal/raftnode/bootstrap_internal_test.go:TestFoundersAgreeWhateverTheirTiming": "the founders' random start order and delays, against raft's wall-clock election timers, are what the test explores",
	"journal/raftnode/bootstrap_internal_test.go:newFounder":                           "a founder slow to go on, in wall time, against raft's wall-clock timers (see TestFoundersAgreeWhateverTheirTiming)",
	"journal/raftnode/lease_test.go:stallingTransport.AppendEntries":                   "delays heartbeats; called only in TestLateHeartbeatsKeepTheLeaderWithTheDefaultTiming's testing/synctest bubble, so it sleeps on the bubble's fake clock (clocklint exempts a function literal passed to synctest.Test, not a method it calls)",
	"journal/raftnode/lease_test.go:stallingPipeline.AppendEntries":                    "the pipelined path of the same stalling transport (see stallingTransport.AppendEntries)",

	// The kernel's clock: socket deadlines, and an emulated WAN between real processes.
	"journal/connlimit/connlimit_test.go:TestAdmitHandshakeGivesTheHandshakeItsTimeFromItsSlot": "the claim is about socket deadlines (SetDeadline on a TCP connection, the kernel's wall clock): a handshake that queued 2 s of a 4 s deadline and waits 2.5 s more for its turn still has its full timeout from its slot; only wall time passing can show it",
	"integration/fill_linux_test.go:startWAN":                                                   "emulates a WAN's one-way delay between real processes (a proxy that holds each segment)",
	"integration/fill_linux_test.go:delayCopy":                                                  "the proxy of startWAN: holds each segment for the emulated one-way delay",

	// Measurements of real processes over wall time; no verdict waits on a state.
	"integration/guess_test.go:TestGuessingFloodLetsARegisteredNodeThrough":        "counts the failed guesses a real journal process evaluates over a 3 s window of wall time against its global budget (one per 300 ms): the bound scales with the elapsed time measured, so a slow machine cannot fail it (journal/ratelimit tests the limiter itself on its injected clock)",
	"integration/fill_linux_test.go:testConnectionFill":                            "samples the journal's open connections every 250 ms while honest clients run under the fill (a measurement of a real process), and lets the churn of a full listen queue settle for a second first: no state says the churn is over",
	"integration/flood_test.go:TestConnectionFloodLeavesRoomForAgentsAndOperators": "samples the journal process's RSS every 200 ms while the flood runs (a measurement of a real process; no verdict waits on it)",
	"integration/bench/stormbench/procstat_test.go:TestProcReadings":               "burns this process's CPU until procCPU sees 50 ms of it: the loop is the load being measured, its 5 s bound a hang guard",
	"identity/spire/back_bench_test.go:BenchmarkSVIDBack":                          "benchmarks, in wall time, how soon the real backoff brings an SVID back: SPIRE must stay away for real time for the backoff to grow",

	// Load: attacker helper processes and workloads, paced like the clients they stand for.
	"integration/fill_linux_test.go:fillHelper":        "the fill helper process (the attacker, run by the test as a separate process): its epoll loop reports once a second while it holds its connections",
	"integration/fill_linux_test.go:handshakenFill":    "the handshaken fill helper process (the attacker): keeps its handshakes going and reports once a second",
	"integration/flood_test.go:flooder.fill":           "the flood helper process's dial burst against a real journal, bounded in wall time: the load itself, not a wait",
	"integration/flood_test.go:floodHelper":            "the flood helper process (the attacker): tops its connections up and reports once a second while it runs",
	"integration/rolling_upgrade_test.go:opLoad.cli":   "the rolling upgrade's workload: a CLI retried after 250 ms while real journal processes restart, as an operator's script would (client pacing, not a wait for the test's verdict)",
	"integration/rolling_upgrade_test.go:opLoad.renew": "the rolling upgrade's workload: a renewal retried after 250 ms while real journal processes restart (client pacing, not a wait for the test's verdict)",
	"journal/peerbinding_test.go:paceWrites":           "the revocation test's writers' load rate (a write per 20 ms per journal): load, not a wait for a verdict",
}

// pending lists the functions that still sleep or loop on a deadline and
// are yet to be converted (issue 42). It only shrinks: an entry that no
// longer matches fails the test, so a converted function leaves it.
var pending = []string{
	"integration/bench/stormbench/storm_test.go:inspectNode",
	"integration/bench/stormbench/storm_test.go:waitStreams",
}

// TestTestsDoNotRaceTheClock fails on every time.Sleep and every
// hand-rolled deadline loop in a _test.go file or a test helper package (a
// directory named *test) outside internal/polltest and the allow-list.
func TestTestsDoNotRaceTheClock(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	files, used := 0, map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		dir := filepath.Base(filepath.Dir(path))
		if !strings.HasSuffix(name, ".go") || (!strings.HasSuffix(name, "_test.go") && !strings.HasSuffix(dir, "test")) ||
			strings.HasPrefix(rel, "internal/polltest/") || strings.HasPrefix(rel, "internal/clocklint/") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, fd := range findings(fset, f) {
			key := rel + ":" + fd.fn
			if _, ok := allowed[key]; ok || slices.Contains(pending, key) {
				used[key] = true
				continue
			}
			t.Errorf("%s: %s in %s: wait on state (internal/polltest), advance the fake clock (internal/clock/fakeclock) or use testing/synctest; if nothing else can work, add %q to the allow-list in internal/clocklint with why", fset.Position(fd.pos), fd.what, fd.fn, key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d test files from %s; the check would be meaningless", files, root)
	}
	for key := range allowed {
		if !used[key] {
			t.Errorf("allow-list entry %q matches nothing: remove it", key)
		}
	}
	for _, key := range pending {
		if !used[key] {
			t.Errorf("pending entry %q matches nothing (converted?): remove it", key)
		}
	}
}

type finding struct {
	pos  token.Pos
	fn   string // the enclosing top-level function, Recv.Name for a method
	what string
}

// findings returns the sleeps and deadline loops in f:
//   - a call of time.Sleep, or a receive from time.After on its own (a
//     sleep by another name);
//   - a for loop whose condition, or an if directly in whose body, reads
//     the wall clock (time.Now, time.Since, time.Until): a deadline loop;
//   - a for loop that waits on a receive from time.After or time.Tick and
//     does nothing on it but go round again: a sleep in a select.
//
// A for-select that waits on a channel of the code under test with a
// time.After hang guard is a wait on state, and passes.
func findings(fset *token.FileSet, f *ast.File) (out []finding) {
	timeName, synctestName := "", ""
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		switch p {
		case "time":
			timeName = name
		case "testing/synctest":
			synctestName = name
		}
	}
	if timeName == "" || timeName == "_" {
		return nil
	}
	isTime := func(e ast.Expr, names ...string) bool {
		call, ok := e.(*ast.CallExpr)
		if !ok {
			return false
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		pkg, ok := sel.X.(*ast.Ident)
		return ok && pkg.Name == timeName && slices.Contains(names, sel.Sel.Name)
	}
	readsClock := func(n ast.Node) bool {
		found := false
		ast.Inspect(n, func(n ast.Node) bool {
			if _, ok := n.(*ast.FuncLit); ok {
				return false
			}
			if e, ok := n.(ast.Expr); ok && isTime(e, "Now", "Since", "Until") {
				found = true
			}
			return !found
		})
		return found
	}
	// Time in a testing/synctest bubble is the bubble's fake clock: what
	// a function passed to synctest.Test does is no race with wall time.
	var bubbles []ast.Node
	if synctestName != "" {
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
					if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == synctestName && (sel.Sel.Name == "Test" || sel.Sel.Name == "Run") {
						for _, a := range call.Args {
							if lit, ok := a.(*ast.FuncLit); ok {
								bubbles = append(bubbles, lit)
							}
						}
					}
				}
			}
			return true
		})
	}
	inBubble := func(pos token.Pos) bool {
		for _, b := range bubbles {
			if b.Pos() <= pos && pos < b.End() {
				return true
			}
		}
		return false
	}
	defer func() {
		out = slices.DeleteFunc(out, func(fd finding) bool { return inBubble(fd.pos) })
	}()
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		fn := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) > 0 {
			typ := fd.Recv.List[0].Type
			if s, ok := typ.(*ast.StarExpr); ok {
				typ = s.X
			}
			if ix, ok := typ.(*ast.IndexExpr); ok {
				typ = ix.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				fn = id.Name + "." + fn
			}
		}
		comms := map[ast.Stmt]bool{}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if isTime(n, "Sleep") {
					out = append(out, finding{n.Pos(), fn, "time.Sleep"})
				}
			case *ast.CommClause:
				comms[n.Comm] = true // a select's case: a hang guard, not a sleep
			case *ast.ExprStmt:
				if u, ok := n.X.(*ast.UnaryExpr); ok && !comms[n] && u.Op == token.ARROW && isTime(u.X, "After", "Tick") {
					out = append(out, finding{n.Pos(), fn, "a sleep (<-time.After)"})
				}
			case *ast.ForStmt:
				if n.Cond != nil && readsClock(n.Cond) {
					out = append(out, finding{n.Pos(), fn, "a deadline loop (its condition reads the clock)"})
					break
				}
				for _, st := range n.Body.List {
					if is, ok := st.(*ast.IfStmt); ok && readsClock(is.Cond) {
						out = append(out, finding{n.Pos(), fn, "a deadline loop (it checks the clock in its body)"})
						break
					}
				}
				if idleTimeCase(n.Body, isTime) {
					out = append(out, finding{n.Pos(), fn, "a polling loop (it waits on time.After or time.Tick and goes round again)"})
				}
			}
			return true
		})
	}
	return out
}

// idleTimeCase reports whether body holds, directly, a select with a case
// that receives from time.After or time.Tick and does nothing else (or
// only continues): the loop sleeps between looks.
func idleTimeCase(body *ast.BlockStmt, isTime func(ast.Expr, ...string) bool) bool {
	for _, st := range body.List {
		sel, ok := st.(*ast.SelectStmt)
		if !ok {
			continue
		}
		for _, c := range sel.Body.List {
			cc := c.(*ast.CommClause)
			var recv ast.Expr
			switch s := cc.Comm.(type) {
			case *ast.ExprStmt:
				recv = s.X
			case *ast.AssignStmt:
				if len(s.Rhs) == 1 {
					recv = s.Rhs[0]
				}
			}
			u, ok := recv.(*ast.UnaryExpr)
			if !ok || u.Op != token.ARROW || !isTime(u.X, "After", "Tick") {
				continue
			}
			idle := true
			for _, s := range cc.Body {
				if br, ok := s.(*ast.BranchStmt); !ok || br.Tok != token.CONTINUE {
					idle = false
				}
			}
			if idle {
				return true
			}
		}
	}
	return false
}

// The check itself: what it flags and what it leaves alone.
func TestFindings(t *testing.T) {
	const src = `package p

import (
	"testing"
	"testing/synctest"
	tm "time"
)

func TestSleeps(t *testing.T) {
	tm.Sleep(tm.Second) // flagged
	<-tm.After(tm.Second) // flagged
}

func TestDeadlineInCond(t *testing.T) {
	for deadline := tm.Now().Add(tm.Second); tm.Now().Before(deadline); { // flagged
	}
}

func TestDeadlineInBody(t *testing.T) {
	deadline := tm.Now().Add(tm.Second)
	for { // flagged
		if tm.Now().After(deadline) {
			t.Fatal("x")
		}
	}
}

func (h *harness) pollAfter() {
	for !h.done() { // flagged
		select {
		case <-h.stop:
			return
		case <-tm.After(tm.Millisecond):
		}
	}
}

func TestInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm.Sleep(tm.Second) // passes: the bubble's fake clock
	})
}

func TestWaitOnStateWithAHangGuard(t *testing.T) {
	events := make(chan int)
	for range 3 { // passes: it waits on the code under test
		select {
		case <-events:
		case <-tm.After(tm.Minute):
			t.Fatal("hung")
		}
	}
	start := tm.Now()
	_ = tm.Since(start) // passes: not a loop
	for i := 0; i < 3; i++ {
		go func() { _ = tm.Now() }() // passes: not the loop's own check
	}
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p_test.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, fd := range findings(fset, f) {
		got = append(got, fmt.Sprintf("%d %s", fset.Position(fd.pos).Line, fd.fn))
	}
	want := []string{"10 TestSleeps", "11 TestSleeps", "15 TestDeadlineInCond", "21 TestDeadlineInBody", "29 harness.pollAfter"}
	if !slices.Equal(got, want) {
		t.Fatalf("flagged %q, want %q", got, want)
	}
}
