// Command stormbench is pact's boot-storm benchmark (make bench-storm) and
// registry-scale benchmark (make bench-scale).
//
// storm (the default) starts a quorum of pact-journal processes with bbolt
// on disk, registers N nodes with one `pact node enroll --batch`, measures
// the crypto ceiling of this machine, and then starts N agents, each
// pact-agent's own code (agent.New and Run, in this process), all arriving
// within one second: each enrolls, opens its mTLS channel and subscribes,
// with the agent's own retry policy. The headline is the time until the
// last one has its first Subscribe event, confirmed by the journals. Then
// every agent renews through its own rotation. It prints a table and,
// last, one JSON line that says whether the final check passed. When one
// process cannot hold every agent (the open-file limit), the agents are
// split over worker processes of this program (-workers; workers.go).
//
// pair runs the storm and then the same storm against the floor's stub
// journals (storm -floor), several times, and sets each pact run beside
// its floor run (pair.go).
//
// scale-cpu runs the storm and the floor at several sizes and prints the
// journals' CPU per agent at each (scalecpu.go).
//
// tpm-cost runs the storm without TPMs and then with every node attesting
// (storm -tpm: TPMs simulated in the load generator, simtpm.go), back to
// back, and reports what attestation costs the journals per enrollment
// and renewal (tpmcost.go).
//
// peer issues the same number of certificates from pact's journals and
// from step-ca, a new TLS connection each, and compares the servers' CPU
// per certificate (peer.go, stepca.go).
//
// scale registers 100,000 nodes and reports journal memory per node,
// snapshot and restore time, restart time and leader failover time.
//
// It builds nothing: run `make build` first (the make targets do).
//
//	stormbench [storm] -bin bin -agents 10000
//	stormbench pair -bin bin -agents 10000 -pairs 3
//	stormbench scale-cpu -bin bin -sizes 1000,3000,10000,30000
//	stormbench tpm-cost -bin bin -agents 3000 -pairs 1
//	stormbench peer -bin bin -stepca .tools/step-ca -certs 10000 -clients 32,256
//	stormbench scale -bin bin -nodes 100000
//
// See docs/benchmarks.md.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
)

func main() {
	args := os.Args[1:]
	mode := "storm"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		mode, args = args[0], args[1:]
	}
	// The load generator stands in for thousands of agent processes, each
	// with a tiny heap it would seldom collect: keep its own GC from being
	// a cost real agents do not have (GOGC overrides), within a bound on a
	// shared machine (GOMEMLIMIT overrides).
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(8 << 30)
	}
	var code int
	switch mode {
	case "storm":
		code = runStorm(args)
	case "scale":
		code = runScale(args)
	case "pair":
		code = runPair(args)
	case "peer":
		code = runPeer(args)
	case "scale-cpu":
		code = runScaleCPU(args)
	case "tpm-cost":
		code = runTPMCost(args)
	case "floor-journal": // hidden: storm -floor starts its stub journals (floor.go)
		code = runFloorJournal(args)
	case "storm-worker": // hidden: storm starts it when the agents need more than one process (workers.go)
		code = runWorker(args)
	default:
		fmt.Fprintf(os.Stderr, "stormbench: unknown mode %q (want storm, pair, scale-cpu, tpm-cost, peer or scale)\n", mode)
		code = 2
	}
	os.Exit(code)
}

// cleanup runs registered functions once, on return or on a signal.
type cleanup struct {
	mu  sync.Mutex
	fns []func()
}

func (c *cleanup) add(f func()) {
	c.mu.Lock()
	c.fns = append(c.fns, f)
	c.mu.Unlock()
}

func (c *cleanup) run() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
	c.fns = nil
}

// onSignal runs c and exits when the benchmark is interrupted, so no
// journal process outlives it.
func (c *cleanup) onSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-ch
		fmt.Fprintf(os.Stderr, "stormbench: %v: stopping the journals\n", s)
		c.run()
		os.Exit(130)
	}()
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "stormbench: "+format+"\n", args...)
}
