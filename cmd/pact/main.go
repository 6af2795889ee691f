// Command pact is the operator CLI of a pact domain: it registers nodes
// with the journal and shows the enrollment registry. Everything lives in
// package cli; this file only hands it the process's arguments and streams.
package main

import (
	"os"

	"github.com/pact-hpc/pact/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
