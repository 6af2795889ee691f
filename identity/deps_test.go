package identity_test

import (
	"testing"

	"github.com/pact-hpc/pact/internal/deptest"
)

// The identity packages go into the agent on every node and into anything
// else that needs a node identity: they must not carry the journal, Raft,
// bbolt, or test helpers.
func TestIdentityImportsStayLean(t *testing.T) {
	deptest.Forbid(t, []string{
		"github.com/pact-hpc/pact/identity",
		"github.com/pact-hpc/pact/identity/spire",
		"github.com/pact-hpc/pact/identity/static",
	},
		"testing",
		"github.com/hashicorp/raft",
		"go.etcd.io/bbolt",
		"github.com/boltdb/bolt",
		"github.com/pact-hpc/pact/journal",
		"github.com/pact-hpc/pact/raftfsm",
		"github.com/pact-hpc/pact/identity/identitytest",
		"github.com/pact-hpc/pact/identity/spire/spiretest",
	)
}
