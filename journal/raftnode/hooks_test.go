package raftnode

import (
	"os"
	"testing"
)

// requireHooks skips t unless the test hooks are built (-tags testhooks,
// as make test builds): without the tag they are compiled out, as in
// every shipped binary, and a test that holds the node with one would
// see nothing held. Under CI (CI=true) it fails instead: CI runs make
// test, and a check skipped there would pass with the node broken.
func requireHooks(t testing.TB) {
	t.Helper()
	if HooksBuilt {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs the Raft node's test hooks, compiled out of this build: run go test -tags testhooks (make test passes it)")
	}
	t.Skip("needs the Raft node's test hooks: go test -tags testhooks (make test passes it)")
}
