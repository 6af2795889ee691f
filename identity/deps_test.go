package identity_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The identity packages go into the agent on every node and into anything
// else that needs a node identity: they must not carry the journal, Raft,
// bbolt, or test helpers.
func TestIdentityImportsStayLean(t *testing.T) {
	pkgs := []string{
		"github.com/pact-hpc/pact/identity",
		"github.com/pact-hpc/pact/identity/spire",
		"github.com/pact-hpc/pact/identity/static",
	}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list returned %d packages; the check would be meaningless", len(deps))
	}
	forbidden := []string{
		"testing",
		"github.com/hashicorp/raft",
		"go.etcd.io/bbolt",
		"github.com/boltdb/bolt",
		"github.com/pact-hpc/pact/journal",
		"github.com/pact-hpc/pact/raftfsm",
		"github.com/pact-hpc/pact/identity/identitytest",
		"github.com/pact-hpc/pact/identity/spire/spiretest",
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("the identity packages import %s", d)
			}
		}
	}
}
