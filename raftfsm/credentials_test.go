package raftfsm_test

import (
	"strings"
	"testing"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

var (
	tokA = strings.Repeat("ab", 32)
	tokB = strings.Repeat("cd", 32)
)

// tokenRegistry has node-1 requiring a join token with tokA (node-1, one
// hour from admin's time) and tokB (node-2's), and node-2 without a token
// policy.
func tokenRegistry(t *testing.T) (*raftfsm.FSM, *raftfsmtest.Applier) {
	t.Helper()
	f := raftfsm.New()
	a := &raftfsmtest.Applier{FSM: f}
	mustApply(t, a, admin.RegisterNodeRequiringToken("node-1", "vc-a", hw1()))
	mustApply(t, a, admin.RegisterNode("node-2", "", hw2()))
	mustApply(t, a, admin.CreateJoinToken("node-1", tokA, (t0+hour)*1e9))
	mustApply(t, a, admin.CreateJoinToken("node-2", tokB, (t0+hour)*1e9))
	return f, a
}

func TestJoinTokenConsumedWithActivation(t *testing.T) {
	f, a := tokenRegistry(t)
	if n, _ := f.Node("node-1"); !raftfsm.RequiresJoinToken(n) {
		t.Fatalf("node-1 lost its policy: %v", n)
	}
	applyFails(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")), raftfsm.ErrJoinTokenRequired)
	applyFails(t, a, journal.ActivateWithToken("node-1", hw1(), cert("01", "spki-1"), tokB), raftfsm.ErrJoinTokenInvalid)
	applyFails(t, a, journal.ActivateWithToken("node-1", hw1(), cert("01", "spki-1"), strings.Repeat("ef", 32)), raftfsm.ErrJoinTokenInvalid)
	res := mustApply(t, a, journal.ActivateWithToken("node-1", hw1(), cert("01", "spki-1"), tokA))
	if res.Node.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
		t.Fatalf("node-1 %v", res.Node)
	}
	toks := f.JoinTokens("node-1")
	if len(toks) != 1 || toks[0].GetUsedAtUnixNano() != journal.AtUnixNano {
		t.Fatalf("tokens %v, want tokA used at the activation's time", toks)
	}
	// A second journal proposed the same token for another key before it
	// saw the first commit: the FSM refuses it.
	res = applyFails(t, a, journal.ActivateWithToken("node-1", hw1(), cert("02", "spki-2"), tokA), raftfsm.ErrJoinTokenInvalid)
	if !strings.Contains(res.Err.Error(), "already used") {
		t.Errorf("err %v, want already used", res.Err)
	}
	// The same key again is the retry of the committed activation.
	if res := applyUnchanged(t, a, journal.ActivateWithToken("node-1", hw1(), cert("01", "spki-1"), tokA)); !res.Idempotent {
		t.Errorf("retry: %+v", res)
	}
	if err := f.CheckJoinToken("node-1", tokA, journal.AtUnixNano); err == nil {
		t.Error("CheckJoinToken accepts a used token")
	}
}

func TestJoinTokenExpiresAtTheCommandsTime(t *testing.T) {
	f, a := tokenRegistry(t)
	expires := (t0 + hour) * 1e9
	late := raftfsmtest.Proposer{Actor: "journal-1", AtUnixNano: expires}
	applyFails(t, a, late.ActivateWithToken("node-1", hw1(), cert("01", "spki-1"), tokA), raftfsm.ErrJoinTokenInvalid)
	if err := f.CheckJoinToken("node-1", tokA, expires-1); err != nil {
		t.Errorf("a nanosecond before expiry: %v", err)
	}
	justInTime := raftfsmtest.Proposer{Actor: "journal-1", AtUnixNano: expires - 1}
	mustApply(t, a, justInTime.ActivateWithToken("node-1", hw1(), cert("01", "spki-1"), tokA))
	// Expired tokens, used or not, are pruned by a later command stamped
	// past their expiry, the same on every replica.
	mustApply(t, a, at(t0+2*hour).PublishIntermediate(raftfsmtest.Intermediate("journal-1", "i-1", t0+day)))
	if toks := f.JoinTokens(""); len(toks) != 0 {
		t.Errorf("tokens left after their expiry: %v", toks)
	}
}

func TestCreateAndRevokeJoinTokens(t *testing.T) {
	f, a := tokenRegistry(t)
	applyFails(t, a, admin.CreateJoinToken("node-9", strings.Repeat("01", 32), (t0+hour)*1e9), raftfsm.ErrNodeNotEnrolled)
	applyFails(t, a, admin.CreateJoinToken("node-1", "short", (t0+hour)*1e9), raftfsm.ErrInvalidCommand)
	applyFails(t, a, admin.CreateJoinToken("node-1", strings.Repeat("01", 32), t0*1e9), raftfsm.ErrInvalidCommand)
	applyFails(t, a, admin.CreateJoinToken("node-1", tokA, (t0+hour)*1e9), raftfsm.ErrInvalidCommand)
	if res := applyUnchanged(t, a, admin.RevokeJoinTokens("node-1", "ff")); !res.Idempotent {
		t.Errorf("revoking nothing: %+v", res)
	}
	mustApply(t, a, admin.RevokeJoinTokens("node-1", ""))
	if toks := f.JoinTokens("node-1"); len(toks) != 0 {
		t.Errorf("node-1 tokens after revoke: %v", toks)
	}
	if toks := f.JoinTokens("node-2"); len(toks) != 1 {
		t.Errorf("revoking node-1's tokens touched node-2's: %v", toks)
	}
	applyFails(t, a, journal.ActivateWithToken("node-1", hw1(), cert("01", "spki-1"), tokA), raftfsm.ErrJoinTokenInvalid)
}

func TestFence(t *testing.T) {
	f, a := newRegistry(t)
	mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
	applyFails(t, a, admin.Fence("node-1", ""), raftfsm.ErrInvalidCommand)
	applyFails(t, a, admin.Fence("node-1", "two\nlines"), raftfsm.ErrInvalidCommand)
	applyFails(t, a, admin.Fence("node-9", "r"), raftfsm.ErrNodeNotEnrolled)
	res := mustApply(t, a, admin.Fence("node-1", "INC-7"))
	n := res.Node
	if n.GetFence().GetReason() != "INC-7" || n.GetFence().GetBy() != admin.Actor || n.GetState() != pactv1.NodeState_NODE_STATE_INACTIVE || n.GetVcluster() != "vc-a" {
		t.Fatalf("fenced node %v", n)
	}
	if !f.IsRevoked("01") {
		t.Error("fencing left the certificate unrevoked")
	}
	if res := applyUnchanged(t, a, admin.Fence("node-1", "again")); !res.Idempotent {
		t.Errorf("fence again: %+v", res)
	}
	applyFails(t, a, journal.Activate("node-1", hw1(), cert("02", "spki-2")), raftfsm.ErrNodeFenced)
	applyFails(t, a, journal.Renew("node-1", "01", cert("02", "spki-2")), raftfsm.ErrNodeFenced)
	applyFails(t, a, journal.SVIDSeen("node-1", "spiffe://pact.local/pact-agent/node-1", "s1", t0+day), raftfsm.ErrNodeFenced)
	// A liveness digest sent before the journal applied the fence does
	// not bring the node back.
	applyUnchanged(t, a, journal.LivenessDigest("journal-1", "node-1"))
	mustApply(t, a, admin.Unfence("node-1"))
	if res := applyUnchanged(t, a, admin.Unfence("node-1")); !res.Idempotent {
		t.Errorf("unfence again: %+v", res)
	}
	res = mustApply(t, a, journal.Activate("node-1", hw1(), cert("02", "spki-2")))
	if res.Node.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || res.Node.GetFence() != nil {
		t.Errorf("after unfence: %v", res.Node)
	}
	got := f.Audit("node-1", 0, 10)
	var acts []string
	for _, e := range got {
		acts = append(acts, e.GetAction())
	}
	if strings.Join(acts, ",") != "register,enroll,fence,unfence,enroll" || got[2].GetDetail() != "reason: INC-7" {
		t.Errorf("audit %v", got)
	}
}

func TestOneKeyOneNode(t *testing.T) {
	f, a := newRegistry(t)
	mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
	applyFails(t, a, journal.Activate("node-2", hw2(), cert("02", "spki-1")), raftfsm.ErrKeyInUse)
	mustApply(t, a, journal.Activate("node-2", hw2(), cert("02", "spki-2")))
	applyFails(t, a, journal.Renew("node-2", "02", cert("03", "spki-1")), raftfsm.ErrKeyInUse)
	if got := f.KeyOwner("spki-1", "node-2"); got != "node-1" {
		t.Errorf("KeyOwner = %q", got)
	}
	// A decommissioned node's key is bound to nobody.
	mustApply(t, a, admin.Decommission("node-1"))
	if got := f.KeyOwner("spki-1", "node-2"); got != "" {
		t.Errorf("KeyOwner after decommission = %q", got)
	}
	// The index is rebuilt from a snapshot the same way.
	g := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(g, snapshotBytes(t, f)); err != nil {
		t.Fatal(err)
	}
	if got := g.KeyOwner("spki-2", "node-3"); got != "node-2" {
		t.Errorf("restored KeyOwner = %q", got)
	}
}

func TestSnapshotKeepsJoinTokens(t *testing.T) {
	f, a := tokenRegistry(t)
	mustApply(t, a, journal.ActivateWithToken("node-1", hw1(), cert("01", "spki-1"), tokA))
	g := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(g, snapshotBytes(t, f)); err != nil {
		t.Fatal(err)
	}
	if got, want := snapshotBytes(t, g), snapshotBytes(t, f); string(got) != string(want) {
		t.Error("a restored replica's snapshot differs")
	}
	if err := g.CheckJoinToken("node-1", tokA, journal.AtUnixNano); err == nil {
		t.Error("the restored replica forgot that tokA was used")
	}
	if err := g.CheckJoinToken("node-2", tokB, journal.AtUnixNano); err != nil {
		t.Errorf("the restored replica lost tokB: %v", err)
	}
}

// A SPIRE node's journal-signed standby authenticates like its current
// certificate: a fence revokes and forgets it too, refuses a new one, and
// the standby's key is bound to the node like a current key.
func TestFenceRevokesTheStandby(t *testing.T) {
	f, a := newRegistry(t)
	sid := "spiffe://pact.local/pact-agent/node-1"
	mustApply(t, a, journal.SVIDSeen("node-1", sid, "a1", t0+day))
	mustApply(t, a, journal.StandbyIssued("node-1", sid, cert("s1", "spki-s1")))
	applyFails(t, a, journal.Activate("node-2", hw2(), cert("02", "spki-s1")), raftfsm.ErrKeyInUse)
	res := mustApply(t, a, admin.Fence("node-1", "INC-9"))
	if res.Node.GetStandbyCert() != nil || !f.IsRevoked("s1") || !f.IsRevoked("a1") {
		t.Fatalf("after the fence: standby %v, s1 revoked %v, a1 revoked %v", res.Node.GetStandbyCert(), f.IsRevoked("s1"), f.IsRevoked("a1"))
	}
	applyFails(t, a, journal.StandbyIssued("node-1", sid, cert("s2", "spki-s2")), raftfsm.ErrNodeFenced)
	applyFails(t, a, journal.StandbyActivated("node-1", "s1"), raftfsm.ErrNodeFenced)
}
