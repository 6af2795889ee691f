// Command pact-journal runs a node of the pact journal.
package main

import (
	"os"

	"github.com/pact-hpc/pact/journal"
)

func main() { os.Exit(journal.Main(os.Args[1:], os.Stdout, os.Stderr)) }
