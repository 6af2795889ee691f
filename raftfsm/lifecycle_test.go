package raftfsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/hwid"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// Tests of the lifecycle commands: Decommission, Assign, LivenessDigest,
// MarkInactive, takeover through Activate, and the audit they record.

// observe records every event f reports from now on.
func observe(f *raftfsm.FSM) *[]raftfsm.Event {
	var evs []raftfsm.Event
	f.SetObserver(func(ev raftfsm.Event) { evs = append(evs, ev) })
	return &evs
}

// actions returns "action:node" for each entry.
func actions(es []*pactv1.AuditEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.GetAction() + ":" + e.GetNodeId()
	}
	return out
}

// lastAudit returns the newest audit entry, or nil.
func lastAudit(f *raftfsm.FSM) *pactv1.AuditEntry {
	es := f.Audit("", 0, 1)
	if len(es) == 0 {
		return nil
	}
	return es[0]
}

// applyRecords applies cmd, wants it to succeed and record exactly one audit
// entry with the given action about nodeID, which it returns.
func applyRecords(t *testing.T, a *raftfsmtest.Applier, cmd *pactv1.Command, action, nodeID string) *pactv1.AuditEntry {
	t.Helper()
	f := a.FSM.(*raftfsm.FSM)
	before := len(f.Audit("", 0, raftfsm.DefaultAuditCapacity))
	mustApply(t, a, cmd)
	all := f.Audit("", 0, raftfsm.DefaultAuditCapacity)
	if len(all) != before+1 {
		t.Fatalf("apply %v recorded %d audit entries, want 1", cmd, len(all)-before)
	}
	e := all[len(all)-1]
	if e.GetAction() != action || e.GetNodeId() != nodeID || e.GetIndex() != a.Index || e.GetAtUnixNano() != cmd.GetAtUnixNano() {
		t.Errorf("audit entry %v, want %s of %s at index %d, time %d", e, action, nodeID, a.Index, cmd.GetAtUnixNano())
	}
	return e
}

// activeRegistry is newRegistry with node-1 active (certificate 01, at
// journal's time) and node-2 inactive (certificate 02).
func activeRegistry(t *testing.T) (*raftfsm.FSM, *raftfsmtest.Applier) {
	t.Helper()
	f, a := newRegistry(t)
	mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
	mustApply(t, a, journal.Activate("node-2", hw2(), cert("02", "spki-2")))
	mustApply(t, a, at(t0+hour).MarkInactive((t0+hour)*1e9, "node-2"))
	if n, _ := f.Node("node-2"); n.GetState() != pactv1.NodeState_NODE_STATE_INACTIVE {
		t.Fatalf("node-2 = %v, want inactive", n)
	}
	return f, a
}

func TestDecommission(t *testing.T) {
	ops := raftfsmtest.Proposer{Actor: "admin/carol", AtUnixNano: (t0 + 2*hour) * 1e9, Source: "10.9.8.7:40000", CorrelationID: "req-7"}
	tests := []struct {
		name      string
		id        string
		hw        *pactv1.HardwareIdentity
		serial    string // the certificate revoked, if any
		wasDetail string
	}{
		{"registered", "node-3", hw3(), "", "was registered"},
		{"active", "node-1", hw1(), "01", "was active"},
		{"inactive", "node-2", hw2(), "02", "was inactive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, a := activeRegistry(t)
			before, _ := f.Node(tt.id)
			evs := observe(f)
			res := mustApply(t, a, ops.Decommission(tt.id))
			n := res.Node
			if n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED || n.GetRevokedAtUnixNano() != ops.AtUnixNano ||
				n.GetRevokedBy() != ops.Actor || n.GetUpdatedAtUnixNano() != ops.AtUnixNano {
				t.Errorf("node = %v, want revoked at %d by %s", n, ops.AtUnixNano, ops.Actor)
			}
			// The history stays in the record.
			if !proto.Equal(n.GetCert(), before.GetCert()) || !proto.Equal(n.GetHardware(), before.GetHardware()) ||
				n.GetVcluster() != before.GetVcluster() || n.GetRegisteredAtUnixNano() != before.GetRegisteredAtUnixNano() {
				t.Errorf("node = %v, want the record of %v kept", n, before)
			}
			if got, _ := f.Node(tt.id); !proto.Equal(got, n) {
				t.Errorf("Node(%s) = %v, want %v", tt.id, got, n)
			}
			if tt.serial != "" && !f.IsRevoked(tt.serial) {
				t.Errorf("IsRevoked(%s) = false after decommission", tt.serial)
			}
			if r := f.Resolve(ident(tt.hw)); !errors.Is(r.Err, raftfsm.ErrNodeRevoked) || r.Node.GetNodeId() != tt.id {
				t.Errorf("Resolve(its hardware) = %q, %v; want %s, ErrNodeRevoked", r.Node.GetNodeId(), r.Err, tt.id)
			}
			if ls := f.LastSeen(tt.id); ls != 0 {
				t.Errorf("LastSeen = %d after decommission, want 0", ls)
			}
			if _, ok := f.ActiveLastSeen()[tt.id]; ok {
				t.Error("a decommissioned node is in ActiveLastSeen")
			}
			e := lastAudit(f)
			if e.GetAction() != "decommission" || e.GetNodeId() != tt.id || e.GetSerial() != tt.serial || e.GetDetail() != tt.wasDetail {
				t.Errorf("audit entry %v, want decommission of %s, serial %q, %q", e, tt.id, tt.serial, tt.wasDetail)
			}
			if len(*evs) != 1 || !slices.Equal((*evs)[0].NodeIDs, []string{tt.id}) || (*evs)[0].BundleChanged ||
				!slices.Equal(actions((*evs)[0].Audit), []string{"decommission:" + tt.id}) {
				t.Errorf("events %v, want one about %s", *evs, tt.id)
			}

			// Nothing more happens to it until it is registered again.
			applyFails(t, a, ops.Decommission(tt.id), raftfsm.ErrNodeRevoked)
			applyFails(t, a, journal.Activate(tt.id, tt.hw, cert("09", "spki-9")), raftfsm.ErrNodeRevoked)
			applyFails(t, a, journal.Renew(tt.id, tt.serial, cert("09", "spki-9")), raftfsm.ErrNodeRevoked)
			applyFails(t, a, ops.Assign(tt.id, "vc-c", before.GetVcluster()), raftfsm.ErrNodeRevoked)
			applyUnchanged(t, a, journal.LivenessDigest("journal-1", tt.id))
			applyUnchanged(t, a, journal.MarkInactive((t0+day)*1e9, tt.id))
			if len(*evs) != 1 {
				t.Errorf("commands on a revoked node were observed: %v", (*evs)[1:])
			}
		})
	}
	t.Run("unknown node", func(t *testing.T) {
		_, a := activeRegistry(t)
		applyFails(t, a, ops.Decommission("node-9"), raftfsm.ErrNodeNotEnrolled)
		applyFails(t, a, ops.Decommission(""), raftfsm.ErrNodeNotEnrolled)
	})
}

func TestDecommissionReleasesHardware(t *testing.T) {
	decommissioned := func(t *testing.T) (*raftfsm.FSM, *raftfsmtest.Applier) {
		f, a := activeRegistry(t)
		mustApply(t, a, admin.Decommission("node-1"))
		return f, a
	}
	t.Run("same node id registers again", func(t *testing.T) {
		f, a := decommissioned(t)
		re := at(t0 + 3*hour)
		e := applyRecords(t, a, re.RegisterNode("node-1", "vc-c", hw1()), "register", "node-1")
		if e.GetActor() != re.Actor {
			t.Errorf("audit actor %q, want %q", e.GetActor(), re.Actor)
		}
		n, _ := f.Node("node-1")
		if n.GetState() != pactv1.NodeState_NODE_STATE_REGISTERED || n.GetCert() != nil || n.GetRevokedAtUnixNano() != 0 ||
			n.GetRegisteredAtUnixNano() != re.AtUnixNano || n.GetVcluster() != "vc-c" {
			t.Errorf("node-1 = %v, want a fresh registered record", n)
		}
		if r := f.Resolve(ident(hw1())); r.Err != nil || r.Node.GetNodeId() != "node-1" {
			t.Errorf("Resolve(hw1) = %q, %v; want node-1", r.Node.GetNodeId(), r.Err)
		}
		// The old certificate stays revoked; the node enrolls afresh.
		if !f.IsRevoked("01") {
			t.Error("re-registering un-revoked the old serial")
		}
		applyRecords(t, a, re.Activate("node-1", hw1(), cert("03", "spki-3")), "enroll", "node-1")
	})
	t.Run("same node id with other hardware", func(t *testing.T) {
		f, a := decommissioned(t)
		mustApply(t, a, admin.RegisterNode("node-1", "", raftfsmtest.Hardware("S9", mac9)))
		// No record holds hw1 any more, revoked or not.
		if r := f.Resolve(ident(hw1())); !errors.Is(r.Err, raftfsm.ErrNodeNotEnrolled) {
			t.Errorf("Resolve(hw1) = %q, %v; want ErrNodeNotEnrolled", r.Node.GetNodeId(), r.Err)
		}
		mustApply(t, a, admin.RegisterNode("node-7", "", hw1()))
	})
	t.Run("another node id takes a released MAC", func(t *testing.T) {
		f, a := decommissioned(t)
		applyRecords(t, a, admin.RegisterNode("node-7", "vc-a", raftfsmtest.Hardware("", mac1)), "register", "node-7")
		if r := f.Resolve(hwid.Identity{MACs: []string{mac1}}); r.Err != nil || r.Node.GetNodeId() != "node-7" {
			t.Errorf("Resolve(mac1) = %q, %v; want node-7", r.Node.GetNodeId(), r.Err)
		}
		// What node-7 did not take still answers for node-1.
		if r := f.Resolve(hwid.Identity{MACs: []string{mac2}, BMCSerial: "S1"}); !errors.Is(r.Err, raftfsm.ErrNodeRevoked) || r.Node.GetNodeId() != "node-1" {
			t.Errorf("Resolve(mac2, S1) = %q, %v; want node-1, ErrNodeRevoked", r.Node.GetNodeId(), r.Err)
		}
		if n, _ := f.Node("node-1"); n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED {
			t.Errorf("node-1 = %v, want its revoked record kept", n)
		}
		mustApply(t, a, journal.Activate("node-7", raftfsmtest.Hardware("", mac1), cert("07", "spki-7")))
		// Now node-1 cannot come back with hardware node-7 holds.
		applyFails(t, a, admin.RegisterNode("node-1", "", hw1()), raftfsm.ErrHardwareIdentityConflict)
		mustApply(t, a, admin.RegisterNode("node-1", "", raftfsmtest.Hardware("S1", mac2)))
	})
	t.Run("decommissioned twice", func(t *testing.T) {
		_, a := decommissioned(t)
		res := applyFails(t, a, admin.Decommission("node-1"), raftfsm.ErrNodeRevoked)
		if res.Node.GetNodeId() != "node-1" {
			t.Errorf("result node %v, want the revoked record", res.Node)
		}
	})
}

// TestRevokedIndexIsHistoryIndependent: when several revoked records held
// an identifier, every replica, whether it applied the log or restored a
// snapshot, must answer a lookup of it the same way.
func TestRevokedIndexIsHistoryIndependent(t *testing.T) {
	f, a := newRegistry(t)
	mustApply(t, a, at(t0+1).Decommission("node-3")) // mac4
	mustApply(t, a, at(t0+2).RegisterNode("node-0", "", raftfsmtest.Hardware("", mac4)))
	mustApply(t, a, at(t0+3).Decommission("node-0"))

	restored := func() *raftfsm.FSM {
		g := raftfsm.New()
		if err := raftfsmtest.RestoreBytes(g, snapshotBytes(t, f)); err != nil {
			t.Fatal(err)
		}
		return g
	}
	mac4Only := hwid.Identity{MACs: []string{mac4}}
	// Two revoked records held mac4: the one decommissioned last answers.
	for name, fsm := range map[string]*raftfsm.FSM{"applied": f, "restored": restored()} {
		if r := fsm.Resolve(mac4Only); !errors.Is(r.Err, raftfsm.ErrNodeRevoked) || r.Node.GetNodeId() != "node-0" {
			t.Errorf("%s: Resolve(mac4) = %q, %v; want node-0, ErrNodeRevoked", name, r.Node.GetNodeId(), r.Err)
		}
	}

	// node-0 registers again with other hardware: node-3 still held mac4.
	mustApply(t, a, at(t0+4).RegisterNode("node-0", "", raftfsmtest.Hardware("", mac9)))
	g := restored()
	b := &raftfsmtest.Applier{FSM: g, Index: a.Index}
	for name, fsm := range map[string]*raftfsm.FSM{"applied": f, "restored": g} {
		if r := fsm.Resolve(mac4Only); !errors.Is(r.Err, raftfsm.ErrNodeRevoked) || r.Node.GetNodeId() != "node-3" {
			t.Errorf("%s: Resolve(mac4) = %q, %v; want node-3, ErrNodeRevoked", name, r.Node.GetNodeId(), r.Err)
		}
	}
	activate := journal.Activate("node-3", hw3(), cert("03", "spki-3"))
	if ra, rb := a.Apply(activate), b.Apply(activate); !sameResult(ra, rb) || !errors.Is(ra.Err, raftfsm.ErrNodeRevoked) {
		t.Errorf("Activate(node-3): %v on the replica that applied the log, %v on the restored one; want ErrNodeRevoked on both", ra.Err, rb.Err)
	}
}

func TestDecommissionedSerialIsPrunedAfterNotAfter(t *testing.T) {
	f, a := activeRegistry(t) // certificate 01 is valid until t0+3d
	mustApply(t, a, at(t0+day).Decommission("node-1"))
	for _, tt := range []struct {
		publishAt int64
		want      bool
	}{
		{t0 + 2*day, true},
		{t0 + 3*day, true}, // still valid at not_after
		{t0 + 3*day + 1, false},
	} {
		mustApply(t, a, at(tt.publishAt).PublishIntermediate(raftfsmtest.Intermediate("journal-1", fmt.Sprint("i-", tt.publishAt), tt.publishAt+day)))
		if got := f.IsRevoked("01"); got != tt.want {
			t.Errorf("after a command at t0%+d: IsRevoked(01) = %v, want %v", tt.publishAt-t0, got, tt.want)
		}
	}
	// Reading never prunes; only commands do.
	g, b := activeRegistry(t)
	mustApply(t, b, at(t0+day).Decommission("node-1"))
	mustApply(t, b, at(t0+10*day).Decommission("node-2"))
	if !g.IsRevoked("01") || !g.IsRevoked("02") {
		t.Error("a decommission pruned the revocation set")
	}
}

func TestAssign(t *testing.T) {
	ops := raftfsmtest.Proposer{Actor: "admin/dave", AtUnixNano: (t0 + hour) * 1e9, Source: "10.0.0.5:1234", CorrelationID: "req-a"}
	tests := []struct {
		name           string
		id, to, expect string
		want           error
		idempotent     bool
		action, detail string
	}{
		{"assign from maintenance", "node-2", "vc-c", "", nil, false, "assign", "maintenance -> vc-c"},
		{"unassign", "node-1", "", "vc-a", nil, false, "unassign", "vc-a -> maintenance"},
		{"move", "node-1", "vc-b", "vc-a", nil, false, "move", "vc-a -> vc-b"},
		{"active node", "node-3", "vc-a", "vc-b", nil, false, "move", "vc-b -> vc-a"},

		{"already there", "node-1", "vc-a", "vc-a", nil, true, "", ""},
		{"already in maintenance", "node-2", "", "", nil, true, "", ""},

		{"moved meanwhile", "node-1", "vc-c", "vc-b", raftfsm.ErrVClusterChanged, false, "", ""},
		{"assigned meanwhile", "node-1", "vc-c", "", raftfsm.ErrVClusterChanged, false, "", ""},
		{"unassigned meanwhile", "node-2", "", "vc-a", raftfsm.ErrVClusterChanged, false, "", ""},
		{"already there, expected elsewhere", "node-1", "vc-a", "vc-b", raftfsm.ErrVClusterChanged, false, "", ""},
		{"invalid vcluster", "node-1", "vc a", "vc-a", raftfsm.ErrInvalidCommand, false, "", ""},
		{"vcluster with a slash", "node-1", "vc/a", "vc-a", raftfsm.ErrInvalidCommand, false, "", ""},
		{"unknown node", "node-9", "vc-a", "", raftfsm.ErrNodeNotEnrolled, false, "", ""},
		{"no node id", "", "vc-a", "", raftfsm.ErrNodeNotEnrolled, false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, a := newRegistry(t)
			mustApply(t, a, journal.Activate("node-3", hw3(), cert("03", "spki-3")))
			cmd := ops.Assign(tt.id, tt.to, tt.expect)
			if tt.want != nil {
				res := applyFails(t, a, cmd, tt.want)
				if errors.Is(tt.want, raftfsm.ErrVClusterChanged) && res.Node.GetVcluster() == tt.expect {
					t.Errorf("result node %v, want the record as it is", res.Node)
				}
				return
			}
			before, _ := f.Node(tt.id)
			if tt.idempotent {
				res := applyUnchanged(t, a, cmd)
				if res.Err != nil || !res.Idempotent || res.Node != before {
					t.Errorf("result %+v, want idempotent with the stored record", res)
				}
				return
			}
			e := applyRecords(t, a, cmd, tt.action, tt.id)
			if e.GetDetail() != tt.detail || e.GetSerial() != "" {
				t.Errorf("audit detail %q (serial %q), want %q", e.GetDetail(), e.GetSerial(), tt.detail)
			}
			n, _ := f.Node(tt.id)
			want := proto.Clone(before).(*pactv1.Node)
			want.Vcluster, want.UpdatedAtUnixNano = tt.to, ops.AtUnixNano
			if !proto.Equal(n, want) {
				t.Errorf("node = %v, want %v", n, want)
			}
			ids := func(fl raftfsm.Filter) (out []string) {
				for _, n := range f.Nodes(fl) {
					out = append(out, n.GetNodeId())
				}
				return out
			}
			if tt.to == "" && !slices.Contains(ids(raftfsm.Filter{Unassigned: true}), tt.id) ||
				tt.to != "" && !slices.Contains(ids(raftfsm.Filter{VCluster: tt.to}), tt.id) {
				t.Errorf("Nodes does not list %s under %q", tt.id, tt.to)
			}
		})
	}
}

func TestNodesFilter(t *testing.T) {
	f, a := newRegistry(t)
	mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
	mustApply(t, a, admin.RegisterNode("node-4", "vc-a", raftfsmtest.Hardware("S9", mac9)))
	mustApply(t, a, admin.Decommission("node-4"))
	const (
		active  = pactv1.NodeState_NODE_STATE_ACTIVE
		revoked = pactv1.NodeState_NODE_STATE_REVOKED
	)
	for _, tt := range []struct {
		fl   raftfsm.Filter
		want []string
	}{
		{raftfsm.Filter{}, []string{"node-1", "node-2", "node-3", "node-4"}},
		{raftfsm.Filter{VCluster: "vc-a"}, []string{"node-1", "node-4"}},
		{raftfsm.Filter{VCluster: "vc-a", State: active}, []string{"node-1"}},
		{raftfsm.Filter{VCluster: "vc-a", State: revoked}, []string{"node-4"}},
		{raftfsm.Filter{VCluster: "vc-z"}, nil},
		{raftfsm.Filter{Unassigned: true}, []string{"node-2"}},
		{raftfsm.Filter{Unassigned: true, State: active}, nil},
		{raftfsm.Filter{Unassigned: true, VCluster: "vc-a"}, nil},
	} {
		var got []string
		for _, n := range f.Nodes(tt.fl) {
			got = append(got, n.GetNodeId())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Nodes(%+v) = %v, want %v", tt.fl, got, tt.want)
		}
	}
}

func TestTakeover(t *testing.T) {
	activatedAt := journal.AtUnixNano // node-1's last sighting, unless a digest follows
	digestAt := activatedAt + 600e9
	retake := at(t0 + 2*hour)
	c := cert("0b", "spki-b")
	tests := []struct {
		name   string
		digest bool // a journal reports node-1's stream at digestAt
		cutoff int64
		want   error
	}{
		{"no cutoff", false, 0, raftfsm.ErrAlreadyActive},
		{"seen at the cutoff", false, activatedAt, raftfsm.ErrAlreadyActive},
		{"seen after the cutoff", false, activatedAt - 1, raftfsm.ErrAlreadyActive},
		{"not seen since the cutoff", false, activatedAt + 1, nil},
		{"a digest after the cutoff", true, activatedAt + 1, raftfsm.ErrAlreadyActive},
		{"a digest at the cutoff", true, digestAt, raftfsm.ErrAlreadyActive},
		{"not seen since the cutoff, digest included", true, digestAt + 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, a := newRegistry(t)
			mustApply(t, a, journal.Activate("node-1", hw1(), cert("0a", "spki-a")))
			if tt.digest {
				mustApply(t, a, raftfsmtest.Proposer{Actor: "journal-2", AtUnixNano: digestAt}.LivenessDigest("journal-2", "node-1"))
			}
			cmd := retake.ActivateTakeover("node-1", hw1(), c, tt.cutoff)
			if tt.want != nil {
				applyFails(t, a, cmd, tt.want)
				return
			}
			before, _ := f.Node("node-1")
			e := applyRecords(t, a, cmd, "takeover", "node-1")
			if e.GetSerial() != "0b" || e.GetDetail() != "replaces serial 0a" {
				t.Errorf("audit entry %v, want serial 0b, detail %q", e, "replaces serial 0a")
			}
			n, _ := f.Node("node-1")
			if n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || !proto.Equal(n.GetCert(), c) ||
				n.GetActivatedAtUnixNano() != retake.AtUnixNano || n.GetRegisteredAtUnixNano() != before.GetRegisteredAtUnixNano() {
				t.Errorf("node = %v, want active with certificate 0b since %d", n, retake.AtUnixNano)
			}
			if ls := f.LastSeen("node-1"); ls != retake.AtUnixNano {
				t.Errorf("LastSeen = %d, want the takeover's time %d", ls, retake.AtUnixNano)
			}
			// The new key is now the one a retry must present.
			if res := applyUnchanged(t, a, retake.ActivateTakeover("node-1", hw1(), cert("0c", "spki-b"), tt.cutoff)); !res.Idempotent {
				t.Errorf("retry with the new key: %+v, want idempotent", res)
			}
			applyFails(t, a, retake.ActivateTakeover("node-1", hw1(), cert("0d", "spki-a"), tt.cutoff), raftfsm.ErrAlreadyActive)
		})
	}
	t.Run("same key with a cutoff", func(t *testing.T) {
		_, a := newRegistry(t)
		first := mustApply(t, a, journal.Activate("node-1", hw1(), cert("0a", "spki-a"))).Node
		res := applyUnchanged(t, a, retake.ActivateTakeover("node-1", hw1(), cert("0b", "spki-a"), retake.AtUnixNano))
		if !res.Idempotent || !proto.Equal(res.Node, first) {
			t.Errorf("result %+v, want idempotent with certificate 0a", res)
		}
	})
	t.Run("hardware still checked", func(t *testing.T) {
		_, a := newRegistry(t)
		mustApply(t, a, journal.Activate("node-1", hw1(), cert("0a", "spki-a")))
		applyFails(t, a, retake.ActivateTakeover("node-1", raftfsmtest.Hardware("S9", mac1), c, retake.AtUnixNano), raftfsm.ErrNodeNotEnrolled)
	})
}

func TestActivationAndRenewalSetLastSeen(t *testing.T) {
	f, a := newRegistry(t)
	if ls := f.LastSeen("node-1"); ls != 0 {
		t.Errorf("LastSeen of a registered node = %d, want 0", ls)
	}
	mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
	if ls := f.LastSeen("node-1"); ls != journal.AtUnixNano {
		t.Errorf("LastSeen after Activate = %d, want %d", ls, journal.AtUnixNano)
	}
	renewer := at(t0 + day)
	mustApply(t, a, renewer.Renew("node-1", "01", cert("02", "spki-2")))
	if ls := f.LastSeen("node-1"); ls != renewer.AtUnixNano {
		t.Errorf("LastSeen after Renew = %d, want %d", ls, renewer.AtUnixNano)
	}
	// A retry changes nothing, not even liveness.
	applyUnchanged(t, a, at(t0+2*day).Renew("node-1", "01", cert("03", "spki-2")))
	// Registering the id again after a decommission forgets it.
	mustApply(t, a, admin.Decommission("node-1"))
	mustApply(t, a, admin.RegisterNode("node-1", "", hw1()))
	if ls := f.LastSeen("node-1"); ls != 0 {
		t.Errorf("LastSeen of a re-registered node = %d, want 0", ls)
	}
	if got := f.ActiveLastSeen(); len(got) != 0 {
		t.Errorf("ActiveLastSeen = %v, want none", got)
	}
}

func TestLivenessDigest(t *testing.T) {
	f, a := activeRegistry(t) // node-1 active, node-2 inactive, node-3 registered
	mustApply(t, a, admin.RegisterNode("node-4", "", raftfsmtest.Hardware("S9", mac9)))
	mustApply(t, a, admin.Decommission("node-4"))
	evs := observe(f)

	// node-1: only its last sighting moves. No event, no audit.
	d1 := at(t0 + 2*hour)
	n1, _ := f.Node("node-1")
	auditBefore := f.Audit("", 0, 100)
	if res := mustApply(t, a, d1.LivenessDigest("journal-1", "node-1", "node-1", "node-3", "node-4", "node-9")); res.Node != nil || res.Idempotent {
		t.Errorf("result %+v, want an empty one", res)
	}
	if ls := f.LastSeen("node-1"); ls != d1.AtUnixNano {
		t.Errorf("LastSeen(node-1) = %d, want %d", ls, d1.AtUnixNano)
	}
	if got := f.ActiveLastSeen(); len(got) != 1 || got["node-1"] != d1.AtUnixNano {
		t.Errorf("ActiveLastSeen = %v, want node-1 at %d", got, d1.AtUnixNano)
	}
	if n, _ := f.Node("node-1"); n != n1 {
		t.Errorf("node-1's record was replaced: %v", n)
	}
	for _, id := range []string{"node-3", "node-4", "node-9"} {
		if ls := f.LastSeen(id); ls != 0 {
			t.Errorf("LastSeen(%s) = %d, want 0: only Active and Inactive nodes are seen", id, ls)
		}
	}
	if len(*evs) != 0 || len(f.Audit("", 0, 100)) != len(auditBefore) {
		t.Errorf("a digest that changed only liveness was observed (%v) or audited", *evs)
	}

	// An older digest, committed late, does not move a sighting back.
	mustApply(t, a, at(t0+hour+30).LivenessDigest("journal-2", "node-1"))
	if ls := f.LastSeen("node-1"); ls != d1.AtUnixNano {
		t.Errorf("LastSeen(node-1) = %d after an older digest, want %d", ls, d1.AtUnixNano)
	}

	// node-2 is streaming again: Active, with an audit entry.
	d2 := raftfsmtest.Proposer{Actor: "journal/j3", AtUnixNano: (t0 + 3*hour) * 1e9, CorrelationID: "digest-17"}
	before, _ := f.Node("node-2")
	e := applyRecords(t, a, d2.LivenessDigest("j3", "node-2"), "active", "node-2")
	if e.GetSerial() != "02" || e.GetDetail() != "stream seen by journal j3" || e.GetCorrelationId() != "digest-17" {
		t.Errorf("audit entry %v", e)
	}
	n2, _ := f.Node("node-2")
	want := proto.Clone(before).(*pactv1.Node)
	want.State, want.UpdatedAtUnixNano = pactv1.NodeState_NODE_STATE_ACTIVE, d2.AtUnixNano
	if !proto.Equal(n2, want) {
		t.Errorf("node-2 = %v, want %v", n2, want)
	}
	if ls := f.LastSeen("node-2"); ls != d2.AtUnixNano {
		t.Errorf("LastSeen(node-2) = %d, want %d", ls, d2.AtUnixNano)
	}
	if len(*evs) != 1 || !slices.Equal((*evs)[0].NodeIDs, []string{"node-2"}) {
		t.Errorf("events %v, want one about node-2", *evs)
	}

	// An empty digest is valid and does nothing.
	applyUnchanged(t, a, d2.LivenessDigest("j3"))
}

func TestMarkInactive(t *testing.T) {
	f, a := newRegistry(t)
	// node-1 seen at t0+1h, node-2 at t0+3h, node-3 registered; node-4
	// active then decommissioned; node-5 inactive.
	mustApply(t, a, at(t0+hour).Activate("node-1", hw1(), cert("01", "spki-1")))
	mustApply(t, a, at(t0+hour).Activate("node-2", hw2(), cert("02", "spki-2")))
	mustApply(t, a, at(t0+3*hour).LivenessDigest("journal-1", "node-2"))
	mustApply(t, a, admin.RegisterNode("node-4", "", raftfsmtest.Hardware("S4", mac5)))
	mustApply(t, a, at(t0+hour).Activate("node-4", raftfsmtest.Hardware("S4", mac5), cert("04", "spki-4")))
	mustApply(t, a, at(t0+hour).Decommission("node-4"))
	mustApply(t, a, admin.RegisterNode("node-5", "", raftfsmtest.Hardware("S5", mac6)))
	mustApply(t, a, at(t0+hour).Activate("node-5", raftfsmtest.Hardware("S5", mac6), cert("05", "spki-5")))
	mustApply(t, a, at(t0+2*hour).MarkInactive((t0+2*hour)*1e9, "node-5"))
	all := []string{"node-1", "node-2", "node-3", "node-4", "node-5", "node-9"}

	sweep := at(t0 + 4*hour)
	tests := []struct {
		name     string
		cutoff   int64
		inactive []string // nodes the sweep moves to Inactive
	}{
		{"cutoff before every sighting", t0 * 1e9, nil},
		{"cutoff at node-1's sighting", (t0 + hour) * 1e9, nil},
		{"cutoff just after node-1's sighting", (t0+hour)*1e9 + 1, []string{"node-1"}},
		{"cutoff at node-2's sighting", (t0 + 3*hour) * 1e9, []string{"node-1"}},
		{"cutoff after every sighting", (t0 + 4*hour) * 1e9, []string{"node-1", "node-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := raftfsm.New()
			if err := raftfsmtest.RestoreBytes(g, snapshotBytes(t, f)); err != nil {
				t.Fatal(err)
			}
			b := &raftfsmtest.Applier{FSM: g, Index: a.Index}
			seen := map[string]int64{}
			for _, id := range all {
				seen[id] = g.LastSeen(id)
			}
			states := map[string]pactv1.NodeState{}
			for _, n := range g.Nodes(raftfsm.Filter{}) {
				states[n.GetNodeId()] = n.GetState()
			}
			evs := observe(g)
			cmd := sweep.MarkInactive(tt.cutoff, all...)
			if tt.inactive == nil {
				applyUnchanged(t, b, cmd)
				if len(*evs) != 0 {
					t.Errorf("events %v, want none", *evs)
				}
				return
			}
			mustApply(t, b, cmd)
			var wantAudit []string
			for _, id := range tt.inactive {
				wantAudit = append(wantAudit, "inactive:"+id)
				states[id] = pactv1.NodeState_NODE_STATE_INACTIVE
			}
			if len(*evs) != 1 || !slices.Equal((*evs)[0].NodeIDs, tt.inactive) || !slices.Equal(actions((*evs)[0].Audit), wantAudit) {
				t.Errorf("events %v, want one about %v", *evs, tt.inactive)
			}
			if got := actions(g.Audit("", sweep.AtUnixNano, 100)); !slices.Equal(got, wantAudit) {
				t.Errorf("audit %v, want %v", got, wantAudit)
			}
			for _, n := range g.Nodes(raftfsm.Filter{}) {
				if n.GetState() != states[n.GetNodeId()] {
					t.Errorf("%s is %s, want %s", n.GetNodeId(), raftfsm.StateName(n.GetState()), raftfsm.StateName(states[n.GetNodeId()]))
				}
				if slices.Contains(tt.inactive, n.GetNodeId()) && n.GetUpdatedAtUnixNano() != sweep.AtUnixNano {
					t.Errorf("%s updated at %d, want %d", n.GetNodeId(), n.GetUpdatedAtUnixNano(), sweep.AtUnixNano)
				}
			}
			for _, id := range all {
				if ls := g.LastSeen(id); ls != seen[id] {
					t.Errorf("LastSeen(%s) = %d, was %d: the sweep must not touch it", id, ls, seen[id])
				}
			}
			for _, id := range tt.inactive {
				if _, ok := g.ActiveLastSeen()[id]; ok {
					t.Errorf("%s still in ActiveLastSeen", id)
				}
			}
			// Sweeping again changes nothing; a digest brings them back.
			applyUnchanged(t, b, sweep.MarkInactive(tt.cutoff, all...))
			mustApply(t, b, at(t0+5*hour).LivenessDigest("journal-1", tt.inactive...))
			for _, id := range tt.inactive {
				if n, _ := g.Node(id); n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
					t.Errorf("%s = %v after a digest, want active", id, n)
				}
			}
		})
	}
}

// TestRenewInactiveNode: an Inactive node that renews is streaming again.
func TestRenewInactiveNode(t *testing.T) {
	f, a := activeRegistry(t)
	e := applyRecords(t, a, at(t0+2*hour).Renew("node-2", "02", cert("03", "spki-3")), "renew", "node-2")
	if e.GetSerial() != "03" || e.GetDetail() != "replaces serial 02" {
		t.Errorf("audit entry %v", e)
	}
	if n, _ := f.Node("node-2"); n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
		t.Errorf("node-2 = %v, want active", n)
	}
}

// TestAuditEntriesCarryTheCommand: every entry holds the command's actor,
// source, correlation id and time, and the log index it was applied at.
func TestAuditEntriesCarryTheCommand(t *testing.T) {
	p := raftfsmtest.Proposer{Actor: "admin/erin", AtUnixNano: (t0+day)*1e9 + 123, Source: "192.0.2.10:51000", CorrelationID: "4b1d-77"}
	late := p
	late.AtUnixNano += 10 * day * 1e9
	tests := []struct {
		name    string
		setup   func(a *raftfsmtest.Applier)
		cmd     *pactv1.Command
		actions []string
	}{
		{"register", nil, p.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", mac9)), []string{"register:node-9"}},
		{"enroll", nil, p.Activate("node-3", hw3(), cert("03", "spki-3")), []string{"enroll:node-3"}},
		{"takeover", nil, p.ActivateTakeover("node-1", hw1(), cert("0b", "spki-b"), p.AtUnixNano), []string{"takeover:node-1"}},
		{"renew", nil, p.Renew("node-1", "01", cert("0b", "spki-b")), []string{"renew:node-1"}},
		{"decommission", nil, p.Decommission("node-1"), []string{"decommission:node-1"}},
		{"assign", nil, p.Assign("node-2", "vc-a", ""), []string{"assign:node-2"}},
		{"unassign", nil, p.Assign("node-1", "", "vc-a"), []string{"unassign:node-1"}},
		{"move", nil, p.Assign("node-1", "vc-b", "vc-a"), []string{"move:node-1"}},
		{"inactive", func(a *raftfsmtest.Applier) { mustApply(t, a, journal.Activate("node-3", hw3(), cert("03", "spki-3"))) },
			late.MarkInactive(late.AtUnixNano, "node-1", "node-3"), []string{"inactive:node-1", "inactive:node-3"}},
		{"active", nil, p.LivenessDigest("journal-1", "node-1", "node-2"), []string{"active:node-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, a := activeRegistry(t)
			if tt.setup != nil {
				tt.setup(a)
			}
			evs := observe(f)
			mustApply(t, a, tt.cmd)
			got := f.Audit("", 0, len(tt.actions))
			if !slices.Equal(actions(got), tt.actions) {
				t.Fatalf("audit %v, want %v", actions(got), tt.actions)
			}
			for _, e := range got {
				if e.GetActor() != tt.cmd.GetActor() || e.GetSource() != tt.cmd.GetSource() || e.GetCorrelationId() != tt.cmd.GetCorrelationId() ||
					e.GetAtUnixNano() != tt.cmd.GetAtUnixNano() || e.GetIndex() != a.Index {
					t.Errorf("audit entry %v, want actor %q, source %q, correlation id %q, at %d, index %d",
						e, tt.cmd.GetActor(), tt.cmd.GetSource(), tt.cmd.GetCorrelationId(), tt.cmd.GetAtUnixNano(), a.Index)
				}
			}
			// The event carries the same entries.
			if len(*evs) != 1 || (*evs)[0].Index != a.Index || len((*evs)[0].Audit) != len(got) {
				t.Fatalf("events %v, want one at index %d with %d entries", *evs, a.Index, len(got))
			}
			for i, e := range (*evs)[0].Audit {
				if !proto.Equal(e, got[i]) {
					t.Errorf("event entry %v, stored %v", e, got[i])
				}
			}
		})
	}
}

// TestFailedCommandsRecordNothing: a refused command changes no byte of the
// state, records no audit entry and is not observed.
func TestFailedCommandsRecordNothing(t *testing.T) {
	p := raftfsmtest.Proposer{Actor: "admin/frank", AtUnixNano: (t0 + day) * 1e9, Source: "10.1.1.1:1", CorrelationID: "nope"}
	tests := []struct {
		name string
		cmd  *pactv1.Command
		want error
	}{
		{"register a known node", p.RegisterNode("node-1", "", hw1()), raftfsm.ErrNodeAlreadyEnrolled},
		{"register taken hardware", p.RegisterNode("node-9", "", hw1()), raftfsm.ErrHardwareIdentityConflict},
		{"activate an active node", p.Activate("node-1", hw1(), cert("09", "spki-9")), raftfsm.ErrAlreadyActive},
		{"takeover of a node seen since", p.ActivateTakeover("node-1", hw1(), cert("09", "spki-9"), journal.AtUnixNano), raftfsm.ErrAlreadyActive},
		{"renew a stale serial", p.Renew("node-1", "00", cert("09", "spki-9")), raftfsm.ErrStaleCertificate},
		{"publish nothing", p.PublishIntermediate(nil), raftfsm.ErrInvalidCommand},
		{"decommission nobody", p.Decommission("node-9"), raftfsm.ErrNodeNotEnrolled},
		{"decommission twice", p.Decommission("node-4"), raftfsm.ErrNodeRevoked},
		{"assign a moved node", p.Assign("node-1", "vc-c", "vc-b"), raftfsm.ErrVClusterChanged},
		{"assign an invalid vcluster", p.Assign("node-1", "VC_A!", "vc-a"), raftfsm.ErrInvalidCommand},
		{"assign a revoked node", p.Assign("node-4", "vc-c", ""), raftfsm.ErrNodeRevoked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, a := activeRegistry(t)
			mustApply(t, a, admin.RegisterNode("node-4", "", raftfsmtest.Hardware("S9", mac9)))
			mustApply(t, a, admin.Decommission("node-4"))
			audit := f.Audit("", 0, 100)
			evs := observe(f)
			applyFails(t, a, tt.cmd, tt.want)
			if got := f.Audit("", 0, 100); !slices.Equal(got, audit) {
				t.Errorf("audit grew: %v", actions(got[len(audit):]))
			}
			if len(*evs) != 0 {
				t.Errorf("a failed command was observed: %v", *evs)
			}
		})
	}
}

func TestAudit(t *testing.T) {
	f, a := newRegistry(t)                                                                     // register node-1, node-2, node-3 at t0 (indexes 1-3)
	mustApply(t, a, at(t0+10).Activate("node-1", hw1(), cert("01", "spki-1")))                 // 4
	mustApply(t, a, at(t0+20).Assign("node-2", "vc-a", ""))                                    // 5
	mustApply(t, a, at(t0+30).Renew("node-1", "01", cert("02", "spki-2")))                     // 6
	mustApply(t, a, at(t0+40).Decommission("node-3"))                                          // 7
	mustApply(t, a, at(t0+25).Assign("node-2", "", "vc-a"))                                    // 8: an earlier clock
	mustApply(t, a, at(t0+50).PublishIntermediate(raftfsmtest.Intermediate("j", "i", t0+day))) // 9: no audit

	indexes := func(es []*pactv1.AuditEntry) []uint64 {
		out := make([]uint64, len(es))
		for i, e := range es {
			out[i] = e.GetIndex()
		}
		return out
	}
	for _, tt := range []struct {
		node  string
		since int64 // Unix seconds
		limit int
		want  []uint64
	}{
		{"", 0, 100, []uint64{1, 2, 3, 4, 5, 6, 7, 8}},
		{"", 0, 3, []uint64{6, 7, 8}}, // the newest, oldest first
		{"", 0, 1, []uint64{8}},
		{"", 0, 0, []uint64{}},
		{"", t0 + 20, 100, []uint64{5, 6, 7, 8}}, // at or after since, in log order
		{"", t0 + 26, 100, []uint64{6, 7}},
		{"", t0 + 41, 100, []uint64{}},
		{"node-1", 0, 100, []uint64{1, 4, 6}},
		{"node-1", 0, 2, []uint64{4, 6}},
		{"node-1", t0 + 11, 100, []uint64{6}},
		{"node-2", 0, 100, []uint64{2, 5, 8}},
		{"node-2", t0 + 21, 1, []uint64{8}},
		{"node-9", 0, 100, []uint64{}},
	} {
		if got := indexes(f.Audit(tt.node, tt.since*1e9, tt.limit)); !slices.Equal(got, tt.want) {
			t.Errorf("Audit(%q, t0%+d, %d) = %v, want %v", tt.node, tt.since-t0, tt.limit, got, tt.want)
		}
	}
}

func TestAuditRing(t *testing.T) {
	f := raftfsm.NewWithAuditCapacity(3)
	a := &raftfsmtest.Applier{FSM: f}
	mustApply(t, a, admin.RegisterNode("node-1", "", hw1()))            // 1
	mustApply(t, a, admin.RegisterNode("node-2", "", hw2()))            // 2
	mustApply(t, a, admin.RegisterNode("node-3", "", hw3()))            // 3
	mustApply(t, a, admin.Assign("node-1", "vc-a", ""))                 // 4
	mustApply(t, a, admin.Assign("node-2", "vc-b", ""))                 // 5
	mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "s"))) // 6
	mustApply(t, a, admin.Assign("node-3", "vc-c", ""))                 // 7
	want := []string{"assign:node-2", "enroll:node-1", "assign:node-3"}
	if got := actions(f.Audit("", 0, 100)); !slices.Equal(got, want) {
		t.Fatalf("Audit = %v, want the newest three, oldest first: %v", got, want)
	}
	if got := f.Audit("node-1", 0, 100); len(got) != 1 || got[0].GetIndex() != 6 {
		t.Errorf("Audit(node-1) = %v, want only what the ring kept", actions(got))
	}

	data := snapshotBytes(t, f)
	snap, err := raftfsm.DecodeSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(snap.GetAudit()); !slices.Equal(got, want) {
		t.Errorf("snapshot audit = %v, want %v", got, want)
	}
	for _, tt := range []struct {
		name string
		g    *raftfsm.FSM
		want []string
	}{
		{"same capacity", raftfsm.NewWithAuditCapacity(3), want},
		{"larger capacity", raftfsm.New(), want},
		{"smaller capacity", raftfsm.NewWithAuditCapacity(2), want[1:]},
		{"capacity 0 keeps one", raftfsm.NewWithAuditCapacity(0), want[2:]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := raftfsmtest.RestoreBytes(tt.g, data); err != nil {
				t.Fatal(err)
			}
			if got := actions(tt.g.Audit("", 0, 100)); !slices.Equal(got, tt.want) {
				t.Errorf("Audit after restore = %v, want %v", got, tt.want)
			}
			for i, e := range tt.g.Audit("", 0, 100) {
				if !proto.Equal(e, snap.GetAudit()[len(want)-len(tt.want)+i]) {
					t.Errorf("entry %d = %v, want %v", i, e, snap.GetAudit()[i])
				}
			}
		})
	}

	// A replica restored with the same capacity goes on exactly like the
	// one that applied the whole log, however far the ring has turned.
	g := raftfsm.NewWithAuditCapacity(3)
	if err := raftfsmtest.RestoreBytes(g, data); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, g), data) {
		t.Fatal("Snapshot → Restore → Snapshot changed the bytes")
	}
	b := &raftfsmtest.Applier{FSM: g, Index: a.Index}
	for i, cmd := range []*pactv1.Command{
		admin.Assign("node-1", "vc-b", "vc-a"),
		admin.Assign("node-2", "", "vc-b"),
		admin.Decommission("node-3"),
		admin.Assign("node-1", "", "vc-b"),
	} {
		a.Apply(cmd)
		b.Apply(cmd)
		if x, y := snapshotBytes(t, f), snapshotBytes(t, g); !bytes.Equal(x, y) {
			t.Fatalf("after %d more commands the replicas differ", i+1)
		}
	}
	if got := actions(g.Audit("", 0, 100)); !slices.Equal(got, []string{"unassign:node-2", "decommission:node-3", "unassign:node-1"}) {
		t.Errorf("Audit = %v", got)
	}
}

func TestDefaultAuditCapacity(t *testing.T) {
	snap := &pactv1.Snapshot{}
	for i := range raftfsm.DefaultAuditCapacity + 5 {
		snap.Audit = append(snap.Audit, &pactv1.AuditEntry{Index: uint64(i + 1), Action: "register", NodeId: fmt.Sprint("node-", i)})
	}
	f := raftfsm.New()
	restoreNodes(t, f, snap)
	got := f.Audit("", 0, 2*raftfsm.DefaultAuditCapacity)
	if len(got) != raftfsm.DefaultAuditCapacity {
		t.Fatalf("kept %d entries, want %d", len(got), raftfsm.DefaultAuditCapacity)
	}
	if got[0].GetIndex() != 6 || got[len(got)-1].GetIndex() != uint64(raftfsm.DefaultAuditCapacity+5) {
		t.Errorf("kept entries %d to %d; want the newest", got[0].GetIndex(), got[len(got)-1].GetIndex())
	}
	// One more command pushes out the oldest.
	a := &raftfsmtest.Applier{FSM: f, Index: uint64(raftfsm.DefaultAuditCapacity + 5)}
	mustApply(t, a, admin.RegisterNode("node-x", "", hw1()))
	got = f.Audit("", 0, 2*raftfsm.DefaultAuditCapacity)
	if len(got) != raftfsm.DefaultAuditCapacity {
		t.Fatalf("kept %d entries after one more, want %d", len(got), raftfsm.DefaultAuditCapacity)
	}
	if got[0].GetIndex() != 7 || got[len(got)-1].GetNodeId() != "node-x" {
		t.Errorf("after one more: %d entries, first %d, last %v", len(got), got[0].GetIndex(), got[len(got)-1])
	}
}

func TestSnapshotCarriesLivenessAndAudit(t *testing.T) {
	f, a := activeRegistry(t)
	mustApply(t, a, at(t0+2*hour).LivenessDigest("journal-1", "node-1"))
	data := snapshotBytes(t, f)
	g := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(g, data); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		if x, y := f.LastSeen(id), g.LastSeen(id); x != y {
			t.Errorf("LastSeen(%s) = %d before, %d after", id, x, y)
		}
	}
	if x, y := f.Audit("", 0, 100), g.Audit("", 0, 100); !slices.EqualFunc(x, y, func(p, q *pactv1.AuditEntry) bool { return proto.Equal(p, q) }) || len(x) == 0 {
		t.Errorf("audit %v before, %v after", actions(x), actions(y))
	}
	// The restored replica takes the same liveness decisions.
	b := &raftfsmtest.Applier{FSM: g, Index: a.Index}
	for _, cmd := range []*pactv1.Command{
		at(t0+3*hour).ActivateTakeover("node-1", hw1(), cert("0b", "spki-b"), (t0+2*hour)*1e9),
		at(t0+3*hour).MarkInactive((t0+2*hour)*1e9, "node-1"),
		at(t0+3*hour).ActivateTakeover("node-1", hw1(), cert("0b", "spki-b"), (t0+2*hour)*1e9+1),
	} {
		if x, y := a.Apply(cmd), b.Apply(cmd); !sameResult(x, y) {
			t.Errorf("%v: %+v applied, %+v restored", cmd, x, y)
		}
	}
	if !bytes.Equal(snapshotBytes(t, f), snapshotBytes(t, g)) {
		t.Error("the replicas differ")
	}
}

// A node whose agent released it on a clean stop enrolls again with a new
// key at once; without a release (a crash) the takeover cutoff still
// rules; a release of a serial that is no longer current changes nothing.
func TestRelease(t *testing.T) {
	t.Run("release then a new key enrolls at once", func(t *testing.T) {
		f, a := newRegistry(t)
		mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
		n := mustApply(t, a, at(t0+10).Release("node-1", "01")).Node
		if n.GetReleasedSerial() != "01" || !raftfsm.Released(n) || n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
			t.Fatalf("after release: %v", n)
		}
		// Repeating it is a no-op.
		if res := applyUnchanged(t, a, at(t0+11).Release("node-1", "01")); res.Err != nil || !res.Idempotent {
			t.Errorf("repeated release: %v idempotent=%v", res.Err, res.Idempotent)
		}
		n = mustApply(t, a, at(t0+12).Activate("node-1", hw1(), cert("02", "spki-2"))).Node
		if n.GetCert().GetSerial() != "02" || n.GetReleasedSerial() != "" || raftfsm.Released(n) {
			t.Errorf("after the new enrollment: %v", n)
		}
		var actions []string
		for _, e := range f.Audit("node-1", 0, 100) {
			actions = append(actions, e.GetAction())
		}
		if got := strings.Join(actions, ","); got != "register,enroll,release,enroll" {
			t.Errorf("audit actions %s", got)
		}
		// The release was used up: the next new key waits again.
		applyFails(t, a, at(t0+13).Activate("node-1", hw1(), cert("03", "spki-3")), raftfsm.ErrAlreadyActive)
	})
	t.Run("no release: a new key is refused", func(t *testing.T) {
		_, a := newRegistry(t)
		mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
		applyFails(t, a, at(t0+12).Activate("node-1", hw1(), cert("02", "spki-2")), raftfsm.ErrAlreadyActive)
	})
	t.Run("stale or foreign releases change nothing", func(t *testing.T) {
		_, a := newRegistry(t)
		mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
		mustApply(t, a, at(t0+day).Renew("node-1", "01", cert("02", "spki-2")))
		for _, cmd := range []*pactv1.Command{
			at(t0+day+1).Release("node-1", "01"), // renewed since
			at(t0+day+1).Release("node-1", ""),
			at(t0+day+1).Release("node-2", "02"), // registered, never enrolled
			at(t0+day+1).Release("node-9", "02"), // unknown
		} {
			if res := applyUnchanged(t, a, cmd); res.Err != nil {
				t.Errorf("%v: %v", cmd, res.Err)
			}
		}
		applyFails(t, a, at(t0+day+2).Activate("node-1", hw1(), cert("03", "spki-3")), raftfsm.ErrAlreadyActive)
	})
}

func TestUpdateNode(t *testing.T) {
	t.Run("a NIC swap: new identity, same certificate, audited, re-indexed", func(t *testing.T) {
		f, a := newRegistry(t)
		mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
		newHW := raftfsmtest.Hardware("S1", mac1, "52:54:00:00:0a:0a")
		n := mustApply(t, a, at(t0+10).UpdateNode("node-1", newHW)).Node
		if !proto.Equal(n.GetHardware(), newHW) || n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || n.GetCert().GetSerial() != "01" {
			t.Fatalf("after update: %v", n)
		}
		if e := lastAudit(f); e.GetAction() != "update" || !strings.Contains(e.GetDetail(), "macs ") {
			t.Errorf("audit %v", e)
		}
		// The removed MAC is free for another node; the new one is taken.
		mustApply(t, a, admin.RegisterNode("node-8", "", raftfsmtest.Hardware("S8", mac2)))
		applyFails(t, a, admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", "52:54:00:00:0a:0a")), raftfsm.ErrHardwareIdentityConflict)
		// The next enrollment is matched against the new identity.
		if r := f.Resolve(ident(newHW)); r.Err != nil || r.Node.GetNodeId() != "node-1" {
			t.Errorf("resolve the new identity: %v", r.Err)
		}
		// Same identity again: nothing changes.
		if res := applyUnchanged(t, a, at(t0+11).UpdateNode("node-1", newHW)); res.Err != nil || !res.Idempotent {
			t.Errorf("repeat: %v %v", res.Err, res.Idempotent)
		}
	})
	tests := []struct {
		name string
		cmd  *pactv1.Command
		want error
	}{
		{"another node's MAC", at(t0).UpdateNode("node-1", raftfsmtest.Hardware("S1", mac3)), raftfsm.ErrHardwareIdentityConflict},
		{"another node's BMC serial", at(t0).UpdateNode("node-1", raftfsmtest.Hardware("S2", mac1)), raftfsm.ErrHardwareIdentityConflict},
		{"unknown node", at(t0).UpdateNode("node-9", raftfsmtest.Hardware("S9", "52:54:00:00:0a:0b")), raftfsm.ErrNodeNotEnrolled},
		{"not normalised", at(t0).UpdateNode("node-1", raftfsmtest.Hardware("S1", "52:54:00:00:0A:0B")), raftfsm.ErrInvalidCommand},
		{"no MAC", at(t0).UpdateNode("node-1", raftfsmtest.Hardware("S1")), raftfsm.ErrInvalidCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, a := newRegistry(t)
			applyFails(t, a, tt.cmd, tt.want)
		})
	}
	t.Run("decommissioned node", func(t *testing.T) {
		_, a := newRegistry(t)
		mustApply(t, a, admin.Decommission("node-1"))
		applyFails(t, a, at(t0).UpdateNode("node-1", raftfsmtest.Hardware("S1", mac1)), raftfsm.ErrNodeRevoked)
	})
}
