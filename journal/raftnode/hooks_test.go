package raftnode

import "testing"

// requireHooks skips t unless the test hooks are built (-tags testhooks,
// as make test builds): without the tag they are compiled out, as in
// every shipped binary, and a test that holds the node with one would
// see nothing held.
func requireHooks(t testing.TB) {
	t.Helper()
	if !HooksBuilt {
		t.Skip("needs the Raft node's test hooks: go test -tags testhooks (make test passes it)")
	}
}
