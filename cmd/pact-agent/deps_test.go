package main

import (
	"testing"

	"github.com/pact-hpc/pact/internal/deptest"
)

// The agent runs on thousands of diskless nodes: it must not carry the
// journal, Raft or bbolt.
func TestAgentBinaryImportsNoJournalRaftOrBolt(t *testing.T) {
	deptest.Forbid(t, []string{"github.com/pact-hpc/pact/cmd/pact-agent"}, deptest.JournalOnly...)
}

// The agent speaks to the TPM in pure Go: go-tpm's simulator transport and
// go-tpm-tools' simulator wrap the C reference TPM (cgo), and the test
// harness starts swtpm; none of them belongs in the binary.
func TestAgentBinaryCarriesNoTPMSimulator(t *testing.T) {
	deptest.Forbid(t, []string{"github.com/pact-hpc/pact/cmd/pact-agent"},
		"github.com/google/go-tpm/tpm2/transport/simulator",
		"github.com/google/go-tpm-tools",
		"github.com/pact-hpc/pact/internal/swtpmtest",
	)
}

// The certificate linter the CA's tests run is not part of the binary.
func TestAgentBinaryCarriesNoTestOnlyModule(t *testing.T) {
	deptest.Forbid(t, []string{"github.com/pact-hpc/pact/cmd/pact-agent"}, deptest.TestOnly...)
}
