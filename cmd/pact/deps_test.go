package main

import (
	"testing"

	"github.com/pact-hpc/pact/internal/deptest"
)

// The operator CLI speaks the wire contract only: it reads a snapshot file
// through internal/snapfile, not the journal's state machine, and must not
// carry the journal, Raft, its msgpack codec or bbolt.
func TestCLIBinaryImportsNoJournalRaftOrBolt(t *testing.T) {
	deptest.Forbid(t, []string{"github.com/pact-hpc/pact/cmd/pact"}, deptest.JournalOnly...)
}

// The certificate linter the CA's tests run is not part of the binary.
func TestCLIBinaryCarriesNoTestOnlyModule(t *testing.T) {
	deptest.Forbid(t, []string{"github.com/pact-hpc/pact/cmd/pact"}, deptest.TestOnly...)
}
