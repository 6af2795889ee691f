package raftfsm_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

func bootPolicy(vc string, mode pactv1.BootPolicyMode) *pactv1.BootPolicy {
	return &pactv1.BootPolicy{Vcluster: vc, Mode: mode, Action: pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE,
		Pcrs: []*pactv1.BootPolicyPcr{{Index: 7, Allowed: [][]byte{make([]byte, 32)}}}}
}

// Boot policies are a level-3 feature: below it they are refused
// QUORUM_VERSION and change nothing.
func TestBootPolicyNeedsLevel3(t *testing.T) {
	f := raftfsm.New()
	a := &raftfsmtest.Applier{FSM: f}
	mustApply(t, a, at(t0).SetQuorumLevel(2))
	for _, cmd := range []*pactv1.Command{
		admin.SetBootPolicy(bootPolicy("", pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE), 0),
		admin.RemoveBootPolicy(""),
	} {
		res := applyFails(t, a, cmd, raftfsm.ErrQuorumVersion)
		var qv *raftfsm.QuorumVersionError
		if !errors.As(res.Err, &qv) || qv.Need != 3 || qv.Have != 2 {
			t.Errorf("%v: err %v, want a QuorumVersionError needing 3 at 2", cmd.GetOp(), res.Err)
		}
	}
	if len(f.BootPolicies()) != 0 {
		t.Fatal("a refused command left a policy")
	}
}

// Each change of a vCluster's policy takes the next version, stamped with
// who and when; expect_version refuses an edit of a stale read; a node's
// vCluster falls back to the domain's default; remove, and the snapshot.
func TestBootPolicyVersionsAndDefault(t *testing.T) {
	f, a := raftfsmtest.AtFeatureLevel()
	mustApply(t, a, admin.SetBootPolicy(bootPolicy("", pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE), 0))
	mustApply(t, a, admin.SetBootPolicy(bootPolicy("", pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE), 1))
	p, ok := f.BootPolicy("")
	if !ok || p.GetVersion() != 2 || p.GetMode() != pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE || p.GetSetBy() != admin.Actor || p.GetSetAtUnixNano() != admin.AtUnixNano {
		t.Fatalf("default policy %v", p)
	}
	applyFails(t, a, admin.SetBootPolicy(bootPolicy("", pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE), 1), raftfsm.ErrInvalidCommand)
	applyFails(t, a, admin.SetBootPolicy(&pactv1.BootPolicy{Vcluster: "ml", Mode: pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE}, 0), raftfsm.ErrInvalidCommand)
	mustApply(t, a, admin.SetBootPolicy(bootPolicy("ml", pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE), 0))
	if p, _ := f.BootPolicyFor("ml"); p.GetVcluster() != "ml" || p.GetVersion() != 1 {
		t.Errorf("policy for ml: %v", p)
	}
	if p, _ := f.BootPolicyFor("hpc"); p.GetVcluster() != "" || p.GetVersion() != 2 {
		t.Errorf("policy for hpc (the default): %v", p)
	}

	snap := snapshotBytes(t, f)
	g := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(g, snap); err != nil {
		t.Fatal(err)
	}
	want, got := f.BootPolicies(), g.BootPolicies()
	if len(got) != 2 {
		t.Fatalf("restored %d boot policies, want 2", len(got))
	}
	for i := range want {
		if !proto.Equal(want[i], got[i]) {
			t.Errorf("restored %v, want %v", got[i], want[i])
		}
	}

	mustApply(t, a, admin.RemoveBootPolicy("ml"))
	applyFails(t, a, admin.RemoveBootPolicy("ml"), raftfsm.ErrNotFound)
	if p, _ := f.BootPolicyFor("ml"); p.GetVcluster() != "" {
		t.Errorf("after remove, ml falls back to the default: %v", p)
	}
	// A version goes on from where the vCluster's last policy was only
	// while it exists: a new policy after a remove starts at 1.
	mustApply(t, a, admin.SetBootPolicy(bootPolicy("ml", pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE), 0))
	if p, _ := f.BootPolicy("ml"); p.GetVersion() != 1 {
		t.Errorf("version %d after a remove, want 1", p.GetVersion())
	}
}
