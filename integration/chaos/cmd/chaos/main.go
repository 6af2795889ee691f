// Command chaos runs pact's chaos campaign: fresh journal quorums under a
// recording workload while faults are injected, then a linearizability
// check and the registry's invariants. See integration/chaos.
package main

import (
	"os"

	"github.com/pact-hpc/pact/integration/chaos"
)

func main() { os.Exit(chaos.Main(os.Args[1:], os.Stdout, os.Stderr)) }
