// Command pact-agent gives a node its pact identity.
package main

import (
	"os"

	"github.com/pact-hpc/pact/agent/agentmain"
)

func main() { os.Exit(agentmain.Main(os.Args[1:], os.Stdout, os.Stderr)) }
