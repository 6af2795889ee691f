package raftfsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/hwid"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// The registry most tests start from (newRegistry):
//
//	node-1  mac1 mac2, BMC S1        vcluster vc-a
//	node-2  mac3, BMC S2, TPM EK ekA maintenance mode
//	node-3  mac4, no BMC             vcluster vc-b
//
// mac9 and S9 belong to nobody.
const (
	mac1 = "52:54:00:00:00:01"
	mac2 = "52:54:00:00:00:02"
	mac3 = "52:54:00:00:00:03"
	mac4 = "52:54:00:00:00:04"
	mac5 = "52:54:00:00:00:05"
	mac6 = "52:54:00:00:00:06"
	mac9 = "52:54:00:00:00:09"

	t0   = int64(1_800_000_000) // proposers' wall clock, Unix seconds
	hour = int64(3600)
	day  = 24 * hour
)

var (
	ekA = strings.Repeat("a1", 32)
	ekB = strings.Repeat("b2", 32)

	// Timestamps are the proposer's. None is near the test's own clock, so a
	// value read from time.Now in Apply would show up as a mismatch.
	admin   = raftfsmtest.Proposer{Actor: "admin-alice", AtUnixNano: t0 * 1e9}
	journal = raftfsmtest.Proposer{Actor: "journal-1", AtUnixNano: (t0 + 60) * 1e9}
)

func hw1() *pactv1.HardwareIdentity { return raftfsmtest.Hardware("S1", mac1, mac2) }
func hw2() *pactv1.HardwareIdentity { return withEK(raftfsmtest.Hardware("S2", mac3), ekA) }
func hw3() *pactv1.HardwareIdentity { return raftfsmtest.Hardware("", mac4) }

func withEK(h *pactv1.HardwareIdentity, ek string) *pactv1.HardwareIdentity {
	h.TpmEkHash = ek
	return h
}

// cert returns a certificate valid for three days from t0.
func cert(serial, spki string) *pactv1.CertificateInfo {
	return raftfsmtest.Cert(serial, spki, t0+3*day)
}

func ident(h *pactv1.HardwareIdentity) hwid.Identity {
	return hwid.Identity{MACs: h.GetMacs(), BMCSerial: h.GetBmcSerial(), EKHash: h.GetTpmEkHash()}
}

func at(unixSeconds int64) raftfsmtest.Proposer {
	return raftfsmtest.Proposer{Actor: "journal-1", AtUnixNano: unixSeconds * 1e9}
}

func newRegistry(t testing.TB) (*raftfsm.FSM, *raftfsmtest.Applier) {
	t.Helper()
	f := raftfsm.New()
	a := &raftfsmtest.Applier{FSM: f}
	mustApply(t, a, admin.RegisterNode("node-1", "vc-a", hw1()))
	mustApply(t, a, admin.RegisterNode("node-2", "", hw2()))
	mustApply(t, a, admin.RegisterNode("node-3", "vc-b", hw3()))
	return f, a
}

// restoreNodes replaces f's state with exactly these nodes, revoked serials
// and intermediates. It is how tests start from a state that would otherwise
// take a long sequence of commands.
func restoreNodes(t testing.TB, f raft.FSM, snap *pactv1.Snapshot) {
	t.Helper()
	if err := raftfsmtest.Restore(f, snap); err != nil {
		t.Fatalf("Restore: %v", err)
	}
}

func node(id string, st pactv1.NodeState, hw *pactv1.HardwareIdentity, c *pactv1.CertificateInfo) *pactv1.Node {
	return &pactv1.Node{
		NodeId:               id,
		Hardware:             hw,
		State:                st,
		Cert:                 c,
		RegisteredAtUnixNano: (t0 - day) * 1e9,
		RegisteredBy:         "admin-bob",
		UpdatedAtUnixNano:    (t0 - hour) * 1e9,
	}
}

func mustApply(t testing.TB, a *raftfsmtest.Applier, cmd *pactv1.Command) *raftfsm.Result {
	t.Helper()
	res := a.Apply(cmd)
	if res.Err != nil {
		t.Fatalf("apply %v: %v", cmd, res.Err)
	}
	return res
}

func snapshotBytes(t testing.TB, f raft.FSM) []byte {
	t.Helper()
	b, err := raftfsmtest.SnapshotBytes(f)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return b
}

// applyUnchanged applies cmd and fails the test if the FSM's state changed.
// Every rejected command, and every idempotent retry, must leave it alone.
func applyUnchanged(t testing.TB, a *raftfsmtest.Applier, cmd *pactv1.Command) *raftfsm.Result {
	t.Helper()
	before := snapshotBytes(t, a.FSM)
	res := a.Apply(cmd)
	if after := snapshotBytes(t, a.FSM); !bytes.Equal(before, after) {
		t.Errorf("apply %v (err %v) changed the state", cmd, res.Err)
	}
	return res
}

// applyFails applies cmd, wants a rule error matching want and no change.
func applyFails(t testing.TB, a *raftfsmtest.Applier, cmd *pactv1.Command, want error) *raftfsm.Result {
	t.Helper()
	res := applyUnchanged(t, a, cmd)
	if !errors.Is(res.Err, want) {
		t.Errorf("apply %v: err = %v, want %v", cmd, res.Err, want)
	}
	if res.Idempotent {
		t.Errorf("apply %v: a failed command is marked idempotent", cmd)
	}
	return res
}

func TestRegisterNode(t *testing.T) {
	// A proposer whose clock reads 1970: registered_at can only come from it.
	early := raftfsmtest.Proposer{Actor: "admin-bob", AtUnixNano: 42}
	tests := []struct {
		name string
		cmd  *pactv1.Command
		want error
	}{
		{"new node", early.RegisterNode("node-9", "vc-a", raftfsmtest.Hardware("S9", mac9)), nil},
		{"maintenance mode", early.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", mac9)), nil},
		{"no BMC, two MACs", early.RegisterNode("node-9", "vc-a", raftfsmtest.Hardware("", mac5, mac9)), nil},
		{"TPM EK", early.RegisterNode("node-9", "vc-a", withEK(raftfsmtest.Hardware("S9", mac9), ekB)), nil},

		{"duplicate node id", admin.RegisterNode("node-1", "vc-a", raftfsmtest.Hardware("S9", mac9)), raftfsm.ErrNodeAlreadyEnrolled},
		{"duplicate node id and hardware", admin.RegisterNode("node-1", "vc-a", hw1()), raftfsm.ErrNodeAlreadyEnrolled},

		{"MAC of another node", admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", mac2, mac9)), raftfsm.ErrHardwareIdentityConflict},
		{"BMC serial of another node", admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S1", mac9)), raftfsm.ErrHardwareIdentityConflict},
		{"TPM EK of another node", admin.RegisterNode("node-9", "", withEK(raftfsmtest.Hardware("S9", mac9), ekA)), raftfsm.ErrHardwareIdentityConflict},

		{"empty node id", admin.RegisterNode("", "", raftfsmtest.Hardware("S9", mac9)), raftfsm.ErrInvalidCommand},
		{"node id with a slash", admin.RegisterNode("rack1/node-9", "", raftfsmtest.Hardware("S9", mac9)), raftfsm.ErrInvalidCommand},
		{"node id starting with a dash", admin.RegisterNode("-node-9", "", raftfsmtest.Hardware("S9", mac9)), raftfsm.ErrInvalidCommand},
		{"node id of 64 characters", admin.RegisterNode(strings.Repeat("n", 64), "", raftfsmtest.Hardware("S9", mac9)), raftfsm.ErrInvalidCommand},
		{"invalid vcluster", admin.RegisterNode("node-9", "vc a", raftfsmtest.Hardware("S9", mac9)), raftfsm.ErrInvalidCommand},
		{"upper-case MAC", admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", "52:54:00:00:00:0A")), raftfsm.ErrInvalidCommand},
		{"dash-separated MAC", admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", "52-54-00-00-00-09")), raftfsm.ErrInvalidCommand},
		{"unsorted MACs", admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", mac9, mac5)), raftfsm.ErrInvalidCommand},
		{"repeated MAC", admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", mac9, mac9)), raftfsm.ErrInvalidCommand},
		{"broadcast MAC", admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", "ff:ff:ff:ff:ff:ff")), raftfsm.ErrInvalidCommand},
		{"BMC serial with spaces", admin.RegisterNode("node-9", "", raftfsmtest.Hardware(" S9 ", mac9)), raftfsm.ErrInvalidCommand},
		{"upper-case TPM EK", admin.RegisterNode("node-9", "", withEK(raftfsmtest.Hardware("S9", mac9), strings.ToUpper(ekB))), raftfsm.ErrInvalidCommand},
		{"no MAC", admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S9")), raftfsm.ErrInvalidCommand},
		{"no hardware", admin.RegisterNode("node-9", "", nil), raftfsm.ErrInvalidCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, a := newRegistry(t)
			if tt.want != nil {
				applyFails(t, a, tt.cmd, tt.want)
				return
			}
			res := a.Apply(tt.cmd)
			if res.Err != nil {
				t.Fatalf("err = %v", res.Err)
			}
			op := tt.cmd.GetRegisterNode()
			n := res.Node
			if n.GetNodeId() != op.GetNodeId() || n.GetState() != pactv1.NodeState_NODE_STATE_REGISTERED ||
				n.GetVcluster() != op.GetVcluster() || !proto.Equal(n.GetHardware(), op.GetHardware()) || n.GetCert() != nil {
				t.Errorf("node = %v, want a registered record of %v", n, op)
			}
			if n.GetRegisteredAtUnixNano() != 42 || n.GetUpdatedAtUnixNano() != 42 || n.GetRegisteredBy() != "admin-bob" {
				t.Errorf("registered at %d (updated %d) by %q, want the command's 42 and admin-bob",
					n.GetRegisteredAtUnixNano(), n.GetUpdatedAtUnixNano(), n.GetRegisteredBy())
			}
			if n.GetActivatedAtUnixNano() != 0 {
				t.Errorf("activated_at = %d on a registered node", n.GetActivatedAtUnixNano())
			}
			if got, ok := f.Node(op.GetNodeId()); !ok || !proto.Equal(got, n) {
				t.Errorf("Node(%s) = %v, %v; want the result's record", op.GetNodeId(), got, ok)
			}
			if r := f.Resolve(ident(op.GetHardware())); r.Err != nil || r.Node.GetNodeId() != op.GetNodeId() {
				t.Errorf("Resolve(own hardware) = %v, %v", r.Node.GetNodeId(), r.Err)
			}
		})
	}
}

func TestRegisterNodeAfterRevoke(t *testing.T) {
	revoked := func(t *testing.T) (*raftfsm.FSM, *raftfsmtest.Applier) {
		f := raftfsm.New()
		restoreNodes(t, f, &pactv1.Snapshot{Nodes: []*pactv1.Node{
			node("node-1", pactv1.NodeState_NODE_STATE_REVOKED, hw1(), cert("01", "spki-1")),
		}})
		return f, &raftfsmtest.Applier{FSM: f}
	}
	t.Run("same node id", func(t *testing.T) {
		_, a := revoked(t)
		n := mustApply(t, a, admin.RegisterNode("node-1", "vc-a", hw1())).Node
		if n.GetState() != pactv1.NodeState_NODE_STATE_REGISTERED || n.GetCert() != nil || n.GetRegisteredAtUnixNano() != admin.AtUnixNano {
			t.Errorf("re-registered node = %v, want a fresh registered record", n)
		}
	})
	t.Run("its hardware under another id", func(t *testing.T) {
		f, a := revoked(t)
		mustApply(t, a, admin.RegisterNode("node-7", "vc-a", hw1()))
		if n, _ := f.Node("node-1"); n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED {
			t.Errorf("node-1 = %v, want the revoked record kept", n)
		}
		if r := f.Resolve(ident(hw1())); r.Node.GetNodeId() != "node-7" {
			t.Errorf("hardware resolves to %v (%v), want node-7", r.Node.GetNodeId(), r.Err)
		}
		n := mustApply(t, a, journal.Activate("node-7", hw1(), cert("02", "spki-2"))).Node
		if n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
			t.Errorf("node-7 = %v, want active", n)
		}
	})
}

func TestActivate(t *testing.T) {
	c := cert("0a", "spki-a")
	tests := []struct {
		name string
		cmd  *pactv1.Command
		want error
	}{
		{"exact hardware", journal.Activate("node-1", hw1(), c), nil},
		{"extra NIC", journal.Activate("node-1", raftfsmtest.Hardware("S1", mac1, mac2, mac9), c), nil},
		{"a registered NIC failed", journal.Activate("node-1", raftfsmtest.Hardware("S1", mac2), c), nil},
		{"TPM EK", journal.Activate("node-2", hw2(), c), nil},
		{"no BMC registered", journal.Activate("node-3", hw3(), c), nil},
		{"no BMC registered, an unknown one reported", journal.Activate("node-3", raftfsmtest.Hardware("S9", mac4), c), nil},

		{"registered BMC not reported", journal.Activate("node-1", raftfsmtest.Hardware("", mac1, mac2), c), raftfsm.ErrNodeNotEnrolled},
		{"BMC differs", journal.Activate("node-1", raftfsmtest.Hardware("S9", mac1, mac2), c), raftfsm.ErrNodeNotEnrolled},
		{"registered TPM EK not reported", journal.Activate("node-2", raftfsmtest.Hardware("S2", mac3), c), raftfsm.ErrNodeNotEnrolled},
		{"TPM EK differs", journal.Activate("node-2", withEK(raftfsmtest.Hardware("S2", mac3), ekB), c), raftfsm.ErrNodeNotEnrolled},
		{"only the BMC matches", journal.Activate("node-1", raftfsmtest.Hardware("S1", mac9), c), raftfsm.ErrNodeNotEnrolled},
		{"unknown hardware", journal.Activate("node-1", raftfsmtest.Hardware("S9", mac9), c), raftfsm.ErrNodeNotEnrolled},
		{"MACs of two nodes", journal.Activate("node-1", raftfsmtest.Hardware("S1", mac1, mac3), c), raftfsm.ErrHardwareIdentityConflict},
		{"BMC of another node", journal.Activate("node-1", raftfsmtest.Hardware("S2", mac1), c), raftfsm.ErrHardwareIdentityConflict},
		{"hardware resolves to another node", journal.Activate("node-3", hw1(), c), raftfsm.ErrHardwareIdentityConflict},
		{"node id nobody registered", journal.Activate("node-9", hw1(), c), raftfsm.ErrHardwareIdentityConflict},

		{"no certificate", journal.Activate("node-1", hw1(), nil), raftfsm.ErrInvalidCommand},
		{"certificate without serial", journal.Activate("node-1", hw1(), cert("", "spki-a")), raftfsm.ErrInvalidCommand},
		{"certificate without SPKI", journal.Activate("node-1", hw1(), cert("0a", "")), raftfsm.ErrInvalidCommand},
		{"certificate without DER", journal.Activate("node-1", hw1(), &pactv1.CertificateInfo{Serial: "0a", SpkiSha256: "spki-a"}), raftfsm.ErrInvalidCommand},
		{"reported MAC not normalised", journal.Activate("node-1", raftfsmtest.Hardware("S1", "52:54:00:00:00:0A"), c), raftfsm.ErrInvalidCommand},
		{"nothing reported", journal.Activate("node-1", nil, c), raftfsm.ErrInvalidCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, a := newRegistry(t)
			if tt.want != nil {
				applyFails(t, a, tt.cmd, tt.want)
				return
			}
			op := tt.cmd.GetActivate()
			before, _ := f.Node(op.GetNodeId())
			res := a.Apply(tt.cmd)
			if res.Err != nil || res.Idempotent {
				t.Fatalf("err = %v, idempotent = %v", res.Err, res.Idempotent)
			}
			n := res.Node
			if n.GetNodeId() != op.GetNodeId() || n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || !proto.Equal(n.GetCert(), op.GetCert()) {
				t.Errorf("node = %v, want %s active with %v", n, op.GetNodeId(), op.GetCert())
			}
			if n.GetActivatedAtUnixNano() != journal.AtUnixNano || n.GetUpdatedAtUnixNano() != journal.AtUnixNano {
				t.Errorf("activated_at = %d, updated_at = %d, want the command's %d", n.GetActivatedAtUnixNano(), n.GetUpdatedAtUnixNano(), journal.AtUnixNano)
			}
			// What was registered stays; what was reported is not learnt.
			if !proto.Equal(n.GetHardware(), before.GetHardware()) || n.GetRegisteredAtUnixNano() != before.GetRegisteredAtUnixNano() ||
				n.GetRegisteredBy() != before.GetRegisteredBy() || n.GetVcluster() != before.GetVcluster() {
				t.Errorf("node = %v, registration was %v", n, before)
			}
			if r := f.Resolve(hwid.Identity{MACs: []string{mac9}, BMCSerial: "S9"}); !errors.Is(r.Err, raftfsm.ErrNodeNotEnrolled) {
				t.Errorf("reported-only identifiers now resolve to %v", r.Node.GetNodeId())
			}
		})
	}
}

func TestActivateActiveNode(t *testing.T) {
	_, a := newRegistry(t)
	first := mustApply(t, a, journal.Activate("node-1", hw1(), cert("0a", "spki-a"))).Node

	// The agent retried with the same key; the journal signed again.
	res := applyUnchanged(t, a, at(t0+120).Activate("node-1", hw1(), cert("0b", "spki-a")))
	if res.Err != nil || !res.Idempotent {
		t.Fatalf("retry with the same key: err = %v, idempotent = %v", res.Err, res.Idempotent)
	}
	if !proto.Equal(res.Node, first) || res.Node.GetCert().GetSerial() != "0a" {
		t.Errorf("retry returned %v, want the first certificate (serial 0a)", res.Node.GetCert())
	}

	applyFails(t, a, at(t0+120).Activate("node-1", hw1(), cert("0c", "spki-c")), raftfsm.ErrAlreadyActive)
}

func TestActivateInactiveNode(t *testing.T) {
	f := raftfsm.New()
	restoreNodes(t, f, &pactv1.Snapshot{Nodes: []*pactv1.Node{
		node("node-1", pactv1.NodeState_NODE_STATE_INACTIVE, hw1(), cert("01", "spki-old")),
	}})
	a := &raftfsmtest.Applier{FSM: f}
	n := mustApply(t, a, journal.Activate("node-1", hw1(), cert("02", "spki-new"))).Node
	if n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || n.GetCert().GetSerial() != "02" || n.GetActivatedAtUnixNano() != journal.AtUnixNano {
		t.Errorf("node = %v, want active with certificate 02", n)
	}
}

func TestActivateRevokedNode(t *testing.T) {
	f := raftfsm.New()
	restoreNodes(t, f, &pactv1.Snapshot{Nodes: []*pactv1.Node{
		node("node-1", pactv1.NodeState_NODE_STATE_REVOKED, hw1(), cert("01", "spki-old")),
		node("node-2", pactv1.NodeState_NODE_STATE_REGISTERED, hw2(), nil),
	}})
	a := &raftfsmtest.Applier{FSM: f}
	applyFails(t, a, journal.Activate("node-1", hw1(), cert("02", "spki-new")), raftfsm.ErrNodeRevoked)
}

func TestRenew(t *testing.T) {
	renewer := at(t0 + 2*day)
	tests := []struct {
		name string
		cmd  *pactv1.Command
		want error
	}{
		{"current serial", renewer.Renew("node-1", "01", cert("02", "spki-2")), nil},
		{"stale serial", renewer.Renew("node-1", "00", cert("02", "spki-2")), raftfsm.ErrStaleCertificate},
		{"no previous serial", renewer.Renew("node-1", "", cert("02", "spki-2")), raftfsm.ErrStaleCertificate},
		{"node that never enrolled", renewer.Renew("node-3", "", cert("02", "spki-2")), raftfsm.ErrStaleCertificate},
		{"unknown node", renewer.Renew("node-9", "01", cert("02", "spki-2")), raftfsm.ErrNodeNotEnrolled},
		{"no certificate", renewer.Renew("node-1", "01", nil), raftfsm.ErrInvalidCommand},
		{"certificate without DER", renewer.Renew("node-1", "01", &pactv1.CertificateInfo{Serial: "02", SpkiSha256: "spki-2"}), raftfsm.ErrInvalidCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, a := newRegistry(t)
			mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
			if tt.want != nil {
				applyFails(t, a, tt.cmd, tt.want)
				return
			}
			before, _ := f.Node("node-1")
			res := a.Apply(tt.cmd)
			if res.Err != nil || res.Idempotent {
				t.Fatalf("err = %v, idempotent = %v", res.Err, res.Idempotent)
			}
			n := res.Node
			if n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || !proto.Equal(n.GetCert(), tt.cmd.GetRenew().GetCert()) {
				t.Errorf("node = %v, want active with the new certificate", n)
			}
			if n.GetUpdatedAtUnixNano() != renewer.AtUnixNano || n.GetActivatedAtUnixNano() != before.GetActivatedAtUnixNano() {
				t.Errorf("updated_at = %d, activated_at = %d; want %d and the activation's %d",
					n.GetUpdatedAtUnixNano(), n.GetActivatedAtUnixNano(), renewer.AtUnixNano, before.GetActivatedAtUnixNano())
			}
			if got, _ := f.Node("node-1"); !proto.Equal(got, n) {
				t.Errorf("Node(node-1) = %v, want %v", got, n)
			}
		})
	}
}

func TestRenewRetry(t *testing.T) {
	_, a := newRegistry(t)
	mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
	renewed := mustApply(t, a, at(t0+2*day).Renew("node-1", "01", cert("02", "spki-2"))).Node

	// The reply was lost; the agent asks again with the same new key and
	// the serial it still holds. The journal has signed once more.
	res := applyUnchanged(t, a, at(t0+2*day+5).Renew("node-1", "01", cert("03", "spki-2")))
	if res.Err != nil || !res.Idempotent {
		t.Fatalf("retry: err = %v, idempotent = %v", res.Err, res.Idempotent)
	}
	if !proto.Equal(res.Node, renewed) || res.Node.GetCert().GetSerial() != "02" {
		t.Errorf("retry returned %v, want the first renewal's certificate (02)", res.Node.GetCert())
	}

	// A different key on the superseded serial is not a retry.
	applyFails(t, a, at(t0+2*day+5).Renew("node-1", "01", cert("04", "spki-4")), raftfsm.ErrStaleCertificate)
}

func TestRenewRevoked(t *testing.T) {
	f := raftfsm.New()
	restoreNodes(t, f, &pactv1.Snapshot{
		Nodes: []*pactv1.Node{
			node("node-1", pactv1.NodeState_NODE_STATE_REVOKED, hw1(), cert("01", "spki-1")),
			node("node-2", pactv1.NodeState_NODE_STATE_ACTIVE, hw2(), cert("05", "spki-5")),
		},
		Revoked: []*pactv1.RevokedSerial{{Serial: "01", NotAfterUnix: t0 + 3*day}, {Serial: "05", NotAfterUnix: t0 + 3*day}},
	})
	a := &raftfsmtest.Applier{FSM: f}
	applyFails(t, a, journal.Renew("node-1", "01", cert("02", "spki-2")), raftfsm.ErrNodeRevoked)
	applyFails(t, a, journal.Renew("node-2", "05", cert("06", "spki-6")), raftfsm.ErrStaleCertificate)
}

func serials(ins []*pactv1.Intermediate) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.GetSerial()
	}
	return out
}

func TestPublishIntermediate(t *testing.T) {
	f := raftfsm.New()
	a := &raftfsmtest.Applier{FSM: f}
	mustApply(t, a, at(t0).PublishIntermediate(raftfsmtest.Intermediate("journal-2", "i-2", t0+1000)))
	mustApply(t, a, at(t0).PublishIntermediate(raftfsmtest.Intermediate("journal-1", "i-1", t0+100)))

	reads := []struct {
		now  int64
		want []string
	}{
		{t0, []string{"i-1", "i-2"}},
		{t0 + 100, []string{"i-1", "i-2"}}, // valid through not_after
		{t0 + 101, []string{"i-2"}},
		{t0 + 1001, []string{}},
		{0, []string{"i-1", "i-2"}}, // reading filters; it does not prune
	}
	for _, r := range reads {
		if got := serials(f.Intermediates(r.now)); !slices.Equal(got, r.want) {
			t.Errorf("Intermediates(t0%+d) = %v, want %v", r.now-t0, got, r.want)
		}
	}

	// A command stamped after i-1 expired prunes it from the state, and an
	// intermediate already expired at its own command's time never stays.
	mustApply(t, a, at(t0+500).PublishIntermediate(raftfsmtest.Intermediate("journal-1", "i-3", t0+2000)))
	mustApply(t, a, at(t0+500).PublishIntermediate(raftfsmtest.Intermediate("journal-3", "i-0", t0+499)))
	if got, want := serials(f.Intermediates(0)), []string{"i-2", "i-3"}; !slices.Equal(got, want) {
		t.Errorf("after pruning at t0+500: Intermediates(0) = %v, want %v", got, want)
	}

	// Publishing a serial again replaces it.
	mustApply(t, a, at(t0+600).PublishIntermediate(raftfsmtest.Intermediate("journal-2", "i-2", t0+5000)))
	if got := f.Intermediates(t0 + 4000); len(got) != 1 || got[0].GetSerial() != "i-2" {
		t.Errorf("Intermediates(t0+4000) = %v, want i-2 with its new expiry", serials(got))
	}

	for _, tt := range []struct {
		name string
		in   *pactv1.Intermediate
	}{
		{"none", nil},
		{"no serial", raftfsmtest.Intermediate("journal-1", "", t0+2000)},
		{"no journal", raftfsmtest.Intermediate("", "i-4", t0+2000)},
		{"no certificate", &pactv1.Intermediate{JournalId: "journal-1", Serial: "i-4", NotAfterUnix: t0 + 2000}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			applyFails(t, a, at(t0+700).PublishIntermediate(tt.in), raftfsm.ErrInvalidCommand)
		})
	}
}

func TestPublishIntermediatePrunesRevokedSerials(t *testing.T) {
	f := raftfsm.New()
	restoreNodes(t, f, &pactv1.Snapshot{
		Revoked: []*pactv1.RevokedSerial{
			{Serial: "r-expired", NotAfterUnix: t0 - 1},
			{Serial: "r-valid", NotAfterUnix: t0},
			{Serial: "i-revoked", NotAfterUnix: t0 + day},
		},
		Intermediates: []*pactv1.Intermediate{raftfsmtest.Intermediate("journal-9", "i-revoked", t0+day)},
	})
	if got := f.Intermediates(t0); len(got) != 0 {
		t.Errorf("Intermediates = %v, want the revoked one left out", serials(got))
	}
	a := &raftfsmtest.Applier{FSM: f}
	mustApply(t, a, at(t0).PublishIntermediate(raftfsmtest.Intermediate("journal-1", "i-1", t0+day)))
	for serial, want := range map[string]bool{"r-expired": false, "r-valid": true, "i-revoked": true} {
		if got := f.IsRevoked(serial); got != want {
			t.Errorf("IsRevoked(%s) = %v after pruning at t0, want %v", serial, got, want)
		}
	}
}

func TestObserver(t *testing.T) {
	f := raftfsm.New()
	a := &raftfsmtest.Applier{FSM: f}
	// seen is an event reduced to what the observer is promised: which
	// nodes changed, whether the bundle did, which audit actions were
	// recorded, and (read from the FSM inside the callback) the first
	// changed node's state.
	type seen struct {
		index   uint64
		nodes   string
		bundle  bool
		actions string
		state   pactv1.NodeState
	}
	var got []seen
	f.SetObserver(func(ev raftfsm.Event) {
		// The observer runs after the change and outside the lock: it may
		// read the FSM and sees the new state.
		var st pactv1.NodeState
		if len(ev.NodeIDs) > 0 {
			n, _ := f.Node(ev.NodeIDs[0])
			st = n.GetState()
		}
		var actions []string
		for _, e := range ev.Audit {
			if e.GetIndex() != ev.Index {
				t.Errorf("event %d carries an audit entry of index %d", ev.Index, e.GetIndex())
			}
			actions = append(actions, e.GetAction()+":"+e.GetNodeId())
		}
		got = append(got, seen{ev.Index, strings.Join(ev.NodeIDs, ","), ev.BundleChanged, strings.Join(actions, ","), st})
	})

	later := at(t0 + 2*hour)
	a.Apply(admin.RegisterNode("node-1", "", hw1()))                               // 1
	a.Apply(admin.RegisterNode("node-1", "", hw1()))                               // 2 duplicate
	a.Apply(admin.RegisterNode("node-2", "", raftfsmtest.Hardware("S3", mac1)))    // 3 conflict
	a.Apply(journal.Activate("node-1", hw1(), cert("01", "spki-1")))               // 4
	a.Apply(journal.Activate("node-1", hw1(), cert("02", "spki-1")))               // 5 idempotent: nothing changed
	a.Apply(journal.Activate("node-1", hw1(), cert("03", "spki-3")))               // 6 already active
	a.Apply(journal.PublishIntermediate(raftfsmtest.Intermediate("j", "i", t0+1))) // 7
	a.Apply(journal.PublishIntermediate(nil))                                      // 8 invalid
	a.Apply(journal.Renew("node-1", "01", cert("04", "spki-4")))                   // 9
	f.Apply(&raft.Log{Index: 10, Type: raft.LogNoop})
	a.Index = 10
	a.Apply(admin.Assign("node-1", "vc-a", ""))                    // 11 assign
	a.Apply(admin.Assign("node-1", "vc-a", "vc-a"))                // 12 idempotent
	a.Apply(admin.Assign("node-1", "vc-b", ""))                    // 13 vcluster changed
	a.Apply(journal.LivenessDigest("journal-1", "node-1"))         // 14 liveness alone: no event
	a.Apply(later.MarkInactive(t0*1e9, "node-1"))                  // 15 seen after the cutoff: no event
	a.Apply(later.MarkInactive(later.AtUnixNano, "node-1"))        // 16 inactive
	a.Apply(later.LivenessDigest("journal-2", "node-1", "node-9")) // 17 active again
	a.Apply(admin.RegisterNode("node-3", "vc-b", hw3()))           // 18
	evenLater := later
	evenLater.AtUnixNano++
	a.Apply(evenLater.MarkInactive(evenLater.AtUnixNano, "node-1", "node-3")) // 19 one of two
	a.Apply(admin.Decommission("node-1"))                                     // 20
	a.Apply(admin.Decommission("node-1"))                                     // 21 already revoked
	restoreNodes(t, f, &pactv1.Snapshot{})

	const (
		registered = pactv1.NodeState_NODE_STATE_REGISTERED
		active     = pactv1.NodeState_NODE_STATE_ACTIVE
		inactive   = pactv1.NodeState_NODE_STATE_INACTIVE
		revoked    = pactv1.NodeState_NODE_STATE_REVOKED
		none       = pactv1.NodeState_NODE_STATE_UNSPECIFIED
	)
	want := []seen{
		{1, "node-1", false, "register:node-1", registered},
		{4, "node-1", false, "enroll:node-1", active},
		{7, "", true, "", none},
		{9, "node-1", false, "renew:node-1", active},
		{11, "node-1", false, "assign:node-1", active},
		{16, "node-1", false, "inactive:node-1", inactive},
		{17, "node-1", false, "active:node-1", active},
		{18, "node-3", false, "register:node-3", registered},
		{19, "node-1", false, "inactive:node-1", inactive},
		{20, "node-1", false, "decommission:node-1", revoked},
		{0, "", true, "", none}, // Restore
	}
	if !slices.Equal(got, want) {
		t.Errorf("observed\n%v\nwant\n%v", got, want)
	}
}

// recoverPanic runs fn and returns what it panicked with, or nil.
func recoverPanic(fn func()) (v any) {
	defer func() { v = recover() }()
	fn()
	return nil
}

func TestApplyPanicsOnUndecodableCommands(t *testing.T) {
	register, err := raftfsm.Encode(admin.RegisterNode("node-1", "", hw1()))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		data      []byte
		decodeErr bool
	}{
		{"not protobuf", []byte{0xff, 0xff, 0xff}, true},
		{"truncated", register[:len(register)-1], true},
		{"actor not UTF-8", []byte{0x12, 0x01, 0xff}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := raftfsm.Decode(tt.data); (err != nil) != tt.decodeErr {
				t.Fatalf("Decode err = %v, want error: %v", err, tt.decodeErr)
			}
			f := raftfsm.New()
			v := recoverPanic(func() { f.Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: tt.data}) })
			if v == nil {
				t.Fatal("Apply did not panic")
			}
			if s := fmt.Sprint(v); !strings.HasPrefix(s, "raftfsm: ") {
				t.Errorf("panic %q, want it to name the package", s)
			}
		})
	}
}

func TestApplyIgnoresOtherLogTypes(t *testing.T) {
	f, a := newRegistry(t)
	before := snapshotBytes(t, f)
	for _, typ := range []raft.LogType{raft.LogNoop, raft.LogAddPeerDeprecated, raft.LogRemovePeerDeprecated, raft.LogBarrier, raft.LogConfiguration} {
		var res any
		if v := recoverPanic(func() { res = f.Apply(&raft.Log{Index: a.Index + 1, Type: typ, Data: []byte{0xff, 0xff}}) }); v != nil {
			t.Errorf("Apply(%v) panicked: %v", typ, v)
			continue
		}
		if r, ok := res.(*raftfsm.Result); !ok || r.Node != nil || r.Err != nil || r.Idempotent || r.Batch != nil {
			t.Errorf("Apply(%v) = %#v, want an empty *Result", typ, res)
		}
	}
	if !bytes.Equal(before, snapshotBytes(t, f)) {
		t.Error("non-command entries changed the state")
	}
}

func TestRecordsAreCopyOnWrite(t *testing.T) {
	f, a := newRegistry(t)
	registered, _ := f.Node("node-1")
	listed := f.Nodes(raftfsm.Filter{State: pactv1.NodeState_NODE_STATE_REGISTERED})
	cmd := journal.Activate("node-1", hw1(), cert("01", "spki-1"))
	mustApply(t, a, cmd)

	if registered.GetState() != pactv1.NodeState_NODE_STATE_REGISTERED || registered.GetCert() != nil {
		t.Errorf("a record read before Activate was modified: %v", registered)
	}
	if listed[0].GetState() != pactv1.NodeState_NODE_STATE_REGISTERED {
		t.Errorf("a listed record was modified: %v", listed[0])
	}

	// The stored record does not alias the command's messages either.
	cmd.GetActivate().GetCert().Serial = "ff"
	reg := admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", mac9))
	mustApply(t, a, reg)
	reg.GetRegisterNode().GetHardware().Macs[0] = mac5
	n1, _ := f.Node("node-1")
	n9, _ := f.Node("node-9")
	if n1.GetCert().GetSerial() != "01" || n9.GetHardware().GetMacs()[0] != mac9 {
		t.Errorf("stored records alias the commands: %v, %v", n1.GetCert(), n9.GetHardware())
	}
}

func TestNodes(t *testing.T) {
	f, a := newRegistry(t)
	mustApply(t, a, journal.Activate("node-2", hw2(), cert("01", "spki-1")))
	ids := func(ns []*pactv1.Node) []string {
		out := make([]string, len(ns))
		for i, n := range ns {
			out[i] = n.GetNodeId()
		}
		return out
	}
	for _, tt := range []struct {
		state pactv1.NodeState
		want  []string
	}{
		{pactv1.NodeState_NODE_STATE_UNSPECIFIED, []string{"node-1", "node-2", "node-3"}},
		{pactv1.NodeState_NODE_STATE_REGISTERED, []string{"node-1", "node-3"}},
		{pactv1.NodeState_NODE_STATE_ACTIVE, []string{"node-2"}},
		{pactv1.NodeState_NODE_STATE_REVOKED, []string{}},
	} {
		if got := ids(f.Nodes(raftfsm.Filter{State: tt.state})); !slices.Equal(got, tt.want) {
			t.Errorf("Nodes(%v) = %v, want %v", tt.state, got, tt.want)
		}
	}
	if _, ok := f.Node("node-9"); ok {
		t.Error("Node(node-9) found a node nobody registered")
	}
}

func TestStateName(t *testing.T) {
	for _, tt := range []struct {
		s    pactv1.NodeState
		want string
	}{
		{pactv1.NodeState_NODE_STATE_REGISTERED, "registered"},
		{pactv1.NodeState_NODE_STATE_ACTIVE, "active"},
		{pactv1.NodeState_NODE_STATE_INACTIVE, "inactive"},
		{pactv1.NodeState_NODE_STATE_REVOKED, "revoked"},
		{pactv1.NodeState_NODE_STATE_UNSPECIFIED, "unspecified"},
	} {
		if got := raftfsm.StateName(tt.s); got != tt.want {
			t.Errorf("StateName(%v) = %q, want %q", tt.s, got, tt.want)
		}
	}
}

func TestErrorCode(t *testing.T) {
	sentinels := []error{
		raftfsm.ErrNodeNotEnrolled, raftfsm.ErrNodeAlreadyEnrolled, raftfsm.ErrHardwareIdentityConflict,
		raftfsm.ErrNodeRevoked, raftfsm.ErrAlreadyActive, raftfsm.ErrStaleCertificate, raftfsm.ErrInvalidCommand,
		raftfsm.ErrVClusterChanged, raftfsm.ErrNodeFenced, raftfsm.ErrJoinTokenRequired, raftfsm.ErrJoinTokenInvalid,
		raftfsm.ErrKeyInUse, raftfsm.ErrOperatorRevoked, raftfsm.ErrNotFound, raftfsm.ErrQuorumVersion,
		raftfsm.ErrJournalCARevoked, raftfsm.ErrJournalCANotBound,
	}
	seen := map[string]error{}
	for _, e := range sentinels {
		code := raftfsm.ErrorCode(fmt.Errorf("%w: node-1", e))
		if code == "" {
			t.Errorf("ErrorCode(wrapped %v) is empty", e)
		}
		if other, dup := seen[code]; dup {
			t.Errorf("%v and %v share the code %s", e, other, code)
		}
		seen[code] = e
		// The code is the wire enum's name without its prefix.
		if _, ok := pactv1.ApplyError_value["APPLY_ERROR_"+code]; !ok {
			t.Errorf("code %s of %v has no ApplyError value", code, e)
		}
	}
	if len(seen) != len(pactv1.ApplyError_value)-1 {
		t.Errorf("%d codes for %d ApplyError values (besides UNSPECIFIED)", len(seen), len(pactv1.ApplyError_value)-1)
	}
	for _, err := range []error{nil, io.EOF} {
		if code := raftfsm.ErrorCode(err); code != "" {
			t.Errorf("ErrorCode(%v) = %q, want empty", err, code)
		}
	}
}

// TestConcurrentReadsDuringApply is for -race: readers share the records
// Apply replaces, and snapshots are persisted while Apply runs.
func TestConcurrentReadsDuringApply(t *testing.T) {
	f := raftfsm.New()
	f.SetObserver(func(ev raftfsm.Event) {
		for _, id := range ev.NodeIDs {
			f.Node(id)
		}
	})
	cmds := newCommandGen(7).commands(300)

	done := make(chan struct{})
	var wg sync.WaitGroup
	reader := func(read func(i int)) {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				read(i)
			}
		})
	}
	reader(func(i int) {
		if n, ok := f.Node(fmt.Sprintf("node-%02d", i%genNodes)); ok {
			if _, err := proto.Marshal(n); err != nil {
				t.Errorf("marshal %s: %v", n.GetNodeId(), err)
			}
		}
	})
	reader(func(i int) {
		for _, n := range f.Nodes(raftfsm.Filter{}) {
			_ = f.Resolve(ident(n.GetHardware()))
			_ = n.GetCert().GetSerial()
		}
	})
	reader(func(i int) {
		for _, in := range f.Intermediates(t0) {
			_ = f.IsRevoked(in.GetSerial())
		}
	})
	reader(func(i int) {
		for _, e := range f.Audit("", 0, 50) {
			_ = e.GetAction()
		}
		for id, at := range f.ActiveLastSeen() {
			_ = f.LastSeen(id) >= at
		}
		_ = f.Nodes(raftfsm.Filter{VCluster: "vc-1"})
		_ = f.Nodes(raftfsm.Filter{Unassigned: true, State: pactv1.NodeState_NODE_STATE_INACTIVE})
	})
	reader(func(i int) {
		if _, err := raftfsmtest.SnapshotBytes(f); err != nil {
			t.Errorf("snapshot: %v", err)
		}
	})

	a := &raftfsmtest.Applier{FSM: f}
	for _, c := range cmds {
		a.Apply(c)
	}
	close(done)
	wg.Wait()
}

// BenchmarkApplyActivate measures one Activate through raft.FSM.Apply,
// decode included, against a registry of 10,000 registered nodes.
func BenchmarkApplyActivate(b *testing.B) {
	const n = 10_000
	registered := bigRegistry(n, pactv1.NodeState_NODE_STATE_REGISTERED)
	f := raftfsm.New()
	logs := make([]*raft.Log, n)
	for i, nd := range registered.GetNodes() {
		data, err := raftfsm.Encode(journal.Activate(nd.GetNodeId(), nd.GetHardware(), bigCert(i+n)))
		if err != nil {
			b.Fatal(err)
		}
		logs[i] = &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%n == 0 {
			// Every node is active: start again from the registered state.
			b.StopTimer()
			restoreNodes(b, f, registered)
			b.StartTimer()
		}
		res := f.Apply(logs[i%n]).(*raftfsm.Result)
		if res.Err != nil {
			b.Fatal(res.Err)
		}
		i++
	}
}
