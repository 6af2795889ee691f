package identity_test

import (
	"testing"

	"github.com/pact-hpc/pact/internal/deptest"
)

// The identity packages go into the agent on every node and into anything
// else that needs a node identity: they must not carry the journal, Raft,
// bbolt, or test helpers.
func TestIdentityImportsStayLean(t *testing.T) {
	deptest.Forbid(t, identityPackages,
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

// The identity packages are the providers and the cascade; the journal's
// wire protocol (the generated EnrollmentService client, Ping, Subscribe,
// STALE_CERTIFICATE, the busy answer) is the agent's, in agent/channel. A
// renewal that had to pass through identity to reach the journal would
// cross between the two packages again.
func TestIdentitySpeaksNoJournalProtocol(t *testing.T) {
	deptest.Forbid(t, identityPackages,
		"github.com/pact-hpc/pact/proto",
		"github.com/pact-hpc/pact/agent",
		"github.com/pact-hpc/pact/internal/apierr",
		"github.com/pact-hpc/pact/internal/transport",
	)
	// identity/spire speaks gRPC to the local SPIRE agent (the Workload
	// API); identity itself speaks to nobody.
	deptest.Forbid(t, []string{"github.com/pact-hpc/pact/identity"}, "google.golang.org/grpc")
}

var identityPackages = []string{
	"github.com/pact-hpc/pact/identity",
	"github.com/pact-hpc/pact/identity/spire",
	"github.com/pact-hpc/pact/identity/static",
}
