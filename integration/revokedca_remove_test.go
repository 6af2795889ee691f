package integration

// Process-level test of pact journal remove after pact journal revoke-ca
// of the leader's journal CA: the journal the operator wants out.

import (
	"strings"
	"testing"
	"time"
)

// TestRemoveRevokedLeaderWithTheCLI: the operator revokes the leader's
// journal CA, then removes it, with the CLI trying every journal. The
// revoked journal, refused as a peer, cannot commit its own removal and
// says so; the two others elect a leader, which removes it, and serve.
func TestRemoveRevokedLeaderWithTheCLI(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	leader := q.leader()
	id := q.members[leader].id
	var left []int
	var live []string
	for i := range q.members {
		if i != leader {
			left = append(left, i)
			live = append(live, q.members[i].grpc)
		}
	}
	if stdout, stderr, code := runPact(t, q.env(live...), "journal", "revoke-ca", id, "--reason", "host "+id+" compromised", "--yes"); code != 0 {
		t.Fatalf("revoke-ca %s: exit %d\n%s%s", id, code, stdout, stderr)
	}
	// As an operator would: the revoked leader cannot commit its own
	// removal and says so (no leader, exit 7), and so do the others until
	// they have elected a leader; then it goes through.
	deadline := time.Now().Add(30 * time.Second)
	for tries := 0; ; tries++ {
		stdout, stderr, code := runPact(t, q.env(q.addrs()...), "journal", "remove", id)
		if code == 0 || (code == 3 && tries > 0 && strings.Contains(stderr, "no journal")) {
			break // removed (by an earlier try whose outcome was unknown)
		}
		if code != 7 || time.Now().After(deadline) {
			t.Fatalf("remove %s, whose journal CA is revoked: exit %d\n%s%s", id, code, stdout, stderr)
		}
		time.Sleep(500 * time.Millisecond)
	}
	q.leader(left...)
	q.waitStatus("the two journals left serving without "+id, func(st statusJSON, code int) bool {
		if code != 0 || len(st.Members) != 2 || st.LeaderID == "" || st.LeaderID == id {
			return false
		}
		for _, m := range st.Members {
			if m.JournalID == id || !m.Voter || !m.Reachable {
				return false
			}
		}
		return true
	}, live...)
}
