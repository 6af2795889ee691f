package journal_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// removeAsTheCLI sends RemoveJournal of id as pact journal remove does:
// to each journal in turn, moving on from one that answers UNAVAILABLE
// (not the leader, no leader), and again until one answers otherwise (an
// election in between); every journal UNAVAILABLE for 20 s fails t.
func removeAsTheCLI(t *testing.T, c *journaltest.Cluster, id string) (*pactv1.RemoveJournalResponse, error) {
	t.Helper()
	var resp *pactv1.RemoveJournalResponse
	var err error
	var last polltest.Last
	polltest.Until(t, 20*time.Second, 200*time.Millisecond, func() bool {
		for _, h := range c.Nodes {
			if h == nil {
				continue
			}
			resp, err = h.AdminClient(t).RemoveJournal(callCtx(t), &pactv1.RemoveJournalRequest{JournalId: id})
			if status.Code(err) != codes.Unavailable {
				return true
			}
			last.Err = err
		}
		return false
	}, "remove %s: every journal Unavailable for 20s: %v", id, &last)
	return resp, err
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

// A leader whose journal CA was just revoked, asked to remove itself,
// does not try a change it could not commit (the other journals drop its
// Raft connections): it answers UNAVAILABLE (NO_LEADER) saying why, and the
// operator's remove, run again as pact does against every journal, goes
// through the leader the two others elect.
func TestRemoveRevokedLeaderSendsTheOperatorOn(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	c := journaltest.StartCluster(t, root, cfgs)
	leader := c.Leader(t)
	id := c.Configs[leader].NodeID
	other := (leader + 1) % 3
	if _, err := c.Nodes[other].AdminClient(t).RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Targets: []string{id}, Reason: "x"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, id+" to apply its revocation", func() bool {
		v, ok := gathered(t, c.Nodes[leader].J.MetricsRegistry(), "pact_journal_ca_revoked")
		return ok && v == 1
	})
	_, err := c.Nodes[leader].AdminClient(t).RemoveJournal(callCtx(t), &pactv1.RemoveJournalRequest{JournalId: id})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("remove of the revoked leader at itself: %v, want UNAVAILABLE", err)
	}
	if c.Nodes[leader].J.IsLeader() && !strings.Contains(err.Error(), "cannot commit its own removal") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	if _, err := removeAsTheCLI(t, c, id); err != nil {
		t.Fatalf("remove %s through the other journals: %v", id, err)
	}
	left := []int{(leader + 1) % 3, (leader + 2) % 3}
	for _, i := range left {
		h := c.Nodes[i]
		waitFor(t, h.Cfg.NodeID+" to drop "+id, func() bool {
			st, err := h.AdminClient(t).JournalStatus(callCtx(t), &pactv1.JournalStatusRequest{})
			if err != nil || len(st.GetMembers()) != 2 {
				return false
			}
			for _, m := range st.GetMembers() {
				if m.GetJournalId() == id || !m.GetReachable() {
					return false
				}
			}
			return true
		})
	}
	c.Nodes[left[0]].Register(t, "n9", "SN9", mac(9))
}
