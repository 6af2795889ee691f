package integration

// Process-level test of pact journal remove after pact journal revoke-ca
// of the leader's journal CA: the journal the operator wants out.

import (
	"fmt"
	"github.com/pact-hpc/pact/internal/polltest"
	"strings"
	"syscall"
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
	tries := 0
	var last polltest.Last
	polltest.Until(t, 30*time.Second, 500*time.Millisecond, func() bool {
		stdout, stderr, code := runPact(t, q.env(q.addrs()...), "journal", "remove", id)
		tries++
		if code == 0 || (code == 3 && tries > 1 && strings.Contains(stderr, "no journal")) {
			return true // removed (by an earlier try whose outcome was unknown)
		}
		if code != 7 {
			t.Fatalf("remove %s, whose journal CA is revoked: exit %d\n%s%s", id, code, stdout, stderr)
		}
		last.Value = fmt.Sprintf("exit %d\n%s%s", code, stdout, stderr)
		return false
	}, "remove %s, whose journal CA is revoked: %v", id, &last)
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

// TestRemovedCutOffJournalExits: a journal whose journal CA is revoked (so
// every peer refuses it, PEER_WITHDRAWN) and which is then removed with
// pact journal remove learns that it was removed and exits with code 3,
// as pact journal remove's help and docs/quorum.md promise, instead of
// staying up cut off for ever.
func TestRemovedCutOffJournalExits(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	leader := q.leader()
	victim := (leader + 1) % 3
	id := q.members[victim].id
	var live []string
	for i := range q.members {
		if i != victim {
			live = append(live, q.members[i].grpc)
		}
	}
	if stdout, stderr, code := runPact(t, q.env(live...), "journal", "revoke-ca", id, "--reason", "host "+id+" compromised", "--yes"); code != 0 {
		t.Fatalf("revoke-ca %s: exit %d\n%s%s", id, code, stdout, stderr)
	}
	if stdout, stderr, code := runPact(t, q.env(live...), "journal", "remove", id); code != 0 {
		t.Fatalf("remove %s: exit %d\n%s%s", id, code, stdout, stderr)
	}
	if code := q.wait(victim); code != 3 {
		t.Fatalf("%s, cut off and removed: exit %d, want 3\n%s", id, code, q.output(victim))
	}
}

// TestRemovedWhileFrozenAndCutOffExits: a journal frozen (a hung host)
// has its journal CA revoked and is removed meanwhile. Thawed, it never
// receives the entry that removed it, cannot re-key (its journal CA is
// revoked), and every peer refuses it, even its MemberStatus
// (PEER_WITHDRAWN). It must still learn that it was removed and exit 3, as
// pact journal remove promises, not stay up cut off for ever.
func TestRemovedWhileFrozenAndCutOffExits(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	leader := q.leader()
	victim := (leader + 1) % 3
	id := q.members[victim].id
	var live []string
	for i := range q.members {
		if i != victim {
			live = append(live, q.members[i].grpc)
		}
	}
	if err := q.pq.Pause(victim); err != nil {
		t.Fatal(err)
	}
	if stdout, stderr, code := runPact(t, q.env(live...), "journal", "revoke-ca", id, "--reason", "host "+id+" compromised", "--yes"); code != 0 {
		t.Fatalf("revoke-ca %s: exit %d\n%s%s", id, code, stdout, stderr)
	}
	if stdout, stderr, code := runPact(t, q.env(live...), "journal", "remove", id); code != 0 {
		t.Fatalf("remove %s: exit %d\n%s%s", id, code, stdout, stderr)
	}
	if err := q.signal(victim, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := q.wait(victim); code != 3 {
		t.Fatalf("%s, removed while frozen and cut off: exit %d, want 3\n%s", id, code, q.output(victim))
	}
	wantContains(t, id+"'s log", q.output(victim), "THIS JOURNAL WAS REMOVED FROM THE QUORUM")
}
