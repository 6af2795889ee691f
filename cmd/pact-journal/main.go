// Command pact-journal runs a node of the pact journal.
package main

import (
	"os"

	"github.com/pact-hpc/pact/journal/journalmain"
)

func main() { os.Exit(journalmain.Main(os.Args[1:], os.Stdout, os.Stderr)) }
