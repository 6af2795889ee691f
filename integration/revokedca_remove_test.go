package integration

// Process-level test of pact journal remove after pact journal revoke-ca
// of the leader's journal CA: the journal the operator wants out.

import (
	"testing"
)

// TestRemoveRevokedLeaderWithTheCLI: the operator revokes the leader's
// journal CA, then removes it, with the CLI trying every journal. The
// followers name the revoked journal as leader; it removes itself,
// although the other journals now refuse its certificate on their peer
// service (their refusal is an answer: they are up), exits 3, and the two
// journals left elect a leader and serve.
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
	if stdout, stderr, code := runPact(t, q.env(q.addrs()...), "journal", "remove", id); code != 0 {
		t.Fatalf("remove %s, whose journal CA is revoked: exit %d\n%s%s", id, code, stdout, stderr)
	}
	if code := q.wait(leader); code != 3 {
		t.Fatalf("the removed %s exited %d, want 3\n%s", id, code, q.output(leader))
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
