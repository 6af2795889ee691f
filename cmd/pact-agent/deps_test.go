package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The agent runs on thousands of diskless nodes: it must not carry the
// journal, Raft or bbolt.
func TestAgentBinaryImportsNoJournalRaftOrBolt(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/pact-hpc/pact/cmd/pact-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list returned %d packages; the check would be meaningless", len(deps))
	}
	forbidden := []string{
		"github.com/hashicorp/raft",
		"go.etcd.io/bbolt",
		"github.com/boltdb/bolt",
		"github.com/pact-hpc/pact/journal",
		"github.com/pact-hpc/pact/raftfsm",
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("pact-agent imports %s", d)
			}
		}
	}
}
