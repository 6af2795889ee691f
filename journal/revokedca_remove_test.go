package journal_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// removeAsTheCLI sends RemoveJournal of id as pact journal remove does:
// to each journal in turn, moving on from one that answers UNAVAILABLE
// (not the leader, no leader), and again until one answers otherwise or
// the deadline passes (an election in between).
func removeAsTheCLI(t *testing.T, c *journaltest.Cluster, id string) (*pactv1.RemoveJournalResponse, error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		for _, h := range c.Nodes {
			if h == nil {
				continue
			}
			var resp *pactv1.RemoveJournalResponse
			resp, err = h.AdminClient(t).RemoveJournal(callCtx(t), &pactv1.RemoveJournalRequest{JournalId: id})
			if status.Code(err) != codes.Unavailable {
				return resp, err
			}
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pact journal remove of a follower whose journal CA was just revoked:
// the journal the operator wants out. The remove goes through, and the two
// journals left agree on it and take writes. (The leader's case, where the
// revoked journal removes itself, is integration:
// TestRemoveRevokedLeaderWithTheCLI: a journal that removed itself as
// leader leaves its Raft listener running after Close, which the leak
// check of this package would report.)
func TestRemoveJournalWhoseJournalCAIsRevoked(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	c := journaltest.StartCluster(t, root, cfgs)
	leader := c.Leader(t)
	target := (leader + 1) % 3
	other := (target + 1) % 3
	id := c.Configs[target].NodeID
	if _, err := c.Nodes[other].AdminClient(t).RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Targets: []string{id}, Reason: "host " + id + " compromised"}); err != nil {
		t.Fatal(err)
	}
	resp, err := removeAsTheCLI(t, c, id)
	if err != nil {
		t.Fatalf("remove %s, whose journal CA is revoked: %v", id, err)
	}
	for _, m := range resp.GetMembers() {
		if m.GetJournalId() == id {
			t.Errorf("%s is still listed after its removal: %v", id, resp.GetMembers())
		}
	}
	// The two journals left agree on a configuration without it, elect a
	// leader and take writes.
	var left []int
	for i := range c.Nodes {
		if i != target {
			left = append(left, i)
		}
	}
	waitFor(t, "a leader among the journals left", func() bool {
		for _, i := range left {
			if c.Nodes[i].J.IsLeader() {
				return true
			}
		}
		return false
	})
	for _, i := range left {
		h := c.Nodes[i]
		waitFor(t, h.Cfg.NodeID+" to drop "+id, func() bool {
			st, err := h.AdminClient(t).JournalStatus(callCtx(t), &pactv1.JournalStatusRequest{})
			if err != nil {
				return false
			}
			var ids []string
			for _, m := range st.GetMembers() {
				ids = append(ids, m.GetJournalId())
			}
			return len(ids) == 2 && !slices.Contains(ids, id)
		})
	}
	c.Nodes[left[0]].Register(t, "n9", "SN9", mac(9))
}

// The check still guards the quorum left behind: a leader whose journal
// CA is revoked removes itself only if enough of the other voters are up;
// one that refuses it counts, one that is down does not.
func TestRemoveRevokedLeaderStillCountsTheDown(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	c := journaltest.StartCluster(t, root, cfgs)
	leader := c.Leader(t)
	up, down := (leader+1)%3, (leader+2)%3
	id := c.Configs[leader].NodeID
	c.StopMember(t, down)
	if _, err := c.Nodes[up].AdminClient(t).RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Targets: []string{id}, Reason: "x"}); err != nil {
		t.Fatal(err)
	}
	if !c.Nodes[leader].J.IsLeader() {
		t.Skip("the revoked leader stepped down already; nothing to check here")
	}
	_, err := c.Nodes[leader].AdminClient(t).RemoveJournal(callCtx(t), &pactv1.RemoveJournalRequest{JournalId: id})
	want := fmt.Sprintf("only 1 of them answer now (%s unreachable)", c.Configs[down].NodeID)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) {
		t.Fatalf("remove of the revoked leader with %s down: %v, want FAILED_PRECONDITION saying %q", c.Configs[down].NodeID, err, want)
	}
}
