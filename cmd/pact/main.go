// Command pact is the operator CLI of a pact domain: it registers nodes
// with the journal (one at a time or from a CSV file), assigns them to
// vClusters, decommissions them, and shows the enrollment registry and its
// audit trail. Everything lives in package cli; this file only hands it the
// process's arguments and streams (Main reads stdin for --batch - and
// checks whether stderr is a terminal for the progress line).
package main

import (
	"os"

	"github.com/pact-hpc/pact/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
