// Package deptest checks in a test that a set of packages does not import
// what it must not (the agent carries no Raft, bbolt or journal).
package deptest

import (
	"os/exec"
	"strings"
	"testing"
)

// JournalOnly lists what only the journal may link: Raft and its msgpack
// codec, bbolt, and the journal and its state machine. The agent and the
// operator CLI speak the wire contract only.
var JournalOnly = []string{
	"github.com/hashicorp/raft",
	"github.com/hashicorp/go-msgpack",
	"go.etcd.io/bbolt",
	"github.com/boltdb/bolt",
	"github.com/pact-hpc/pact/journal",
	"github.com/pact-hpc/pact/raftfsm",
}

// TestOnly lists what only tests may link: zlint and its zcrypto, which
// journal/ca's tests lint every certificate kind with (issue 23).
var TestOnly = []string{
	"github.com/zmap",
}

// Forbid fails t if any of pkgs depends, directly or not, on a forbidden
// package or on anything below it.
func Forbid(t testing.TB, pkgs []string, forbidden ...string) {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list returned %d packages; the check would be meaningless", len(deps))
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("%s imports %s", strings.Join(pkgs, ", "), d)
			}
		}
	}
}
