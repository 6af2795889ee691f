package main

import (
	"testing"

	"github.com/pact-hpc/pact/internal/deptest"
)

// The agent runs on thousands of diskless nodes: it must not carry the
// journal, Raft or bbolt.
func TestAgentBinaryImportsNoJournalRaftOrBolt(t *testing.T) {
	deptest.Forbid(t, []string{"github.com/pact-hpc/pact/cmd/pact-agent"},
		"github.com/hashicorp/raft",
		"go.etcd.io/bbolt",
		"github.com/boltdb/bolt",
		"github.com/pact-hpc/pact/journal",
		"github.com/pact-hpc/pact/raftfsm",
	)
}
