package main

import (
	"testing"

	"github.com/pact-hpc/pact/internal/deptest"
)

// The certificate linter the CA's tests run is not part of the journal.
func TestJournalBinaryCarriesNoTestOnlyModule(t *testing.T) {
	deptest.Forbid(t, []string{"github.com/pact-hpc/pact/cmd/pact-journal"}, deptest.TestOnly...)
}
