package raftfsm_test

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// Tests of the SPIRE side of the registry: SPIFFE ID overrides at
// registration, the SPIFFE ID → node mapping, and SVIDSeen.

const (
	custom1  = "spiffe://pact.local/custom/x"
	custom2  = "spiffe://pact.local/rack-7/slot-3"
	default1 = "spiffe://pact.local/pact-agent/node-1"
	default2 = "spiffe://pact.local/pact-agent/node-2"
	default3 = "spiffe://pact.local/pact-agent/node-3"
)

// spiffeRegistry is newRegistry plus node-4 registered with the override
// custom1 (hardware S4, mac5).
func spiffeRegistry(t *testing.T) (*raftfsm.FSM, *raftfsmtest.Applier) {
	t.Helper()
	f, a := newRegistry(t)
	mustApply(t, a, admin.RegisterNodeWithSPIFFEID("node-4", "", raftfsmtest.Hardware("S4", mac5), custom1))
	return f, a
}

func TestRegisterNodeSPIFFEID(t *testing.T) {
	tests := []struct {
		name     string
		node     string
		spiffeID string
		want     error // nil: registered with the override
		msg      string
	}{
		{name: "override", node: "node-5", spiffeID: custom2},
		{name: "its own default ID", node: "node-5", spiffeID: "spiffe://pact.local/pact-agent/node-5"},
		{name: "another trust domain", node: "node-5", spiffeID: "spiffe://other.org/node-5"},
		{name: "held by a live node", node: "node-5", spiffeID: custom1, want: raftfsm.ErrHardwareIdentityConflict, msg: "registered to node node-4"},
		{name: "another node's default", node: "node-5", spiffeID: default1, want: raftfsm.ErrInvalidCommand, msg: "default SPIFFE ID of node node-1"},
		{name: "not a SPIFFE ID", node: "node-5", spiffeID: "https://pact.local/custom/x", want: raftfsm.ErrInvalidCommand, msg: "not a SPIFFE ID"},
		{name: "upper-case trust domain", node: "node-5", spiffeID: "spiffe://PACT.local/custom/y", want: raftfsm.ErrInvalidCommand},
		{name: "trailing slash", node: "node-5", spiffeID: "spiffe://pact.local/custom/", want: raftfsm.ErrInvalidCommand},
		{name: "trust domain only", node: "node-5", spiffeID: "spiffe://pact.local", want: raftfsm.ErrInvalidCommand, msg: "names a trust domain"},
		{name: "too long", node: "node-5", spiffeID: "spiffe://pact.local/" + strings.Repeat("a", 2048), want: raftfsm.ErrInvalidCommand, msg: "at most 2048"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, a := spiffeRegistry(t)
			cmd := admin.RegisterNodeWithSPIFFEID(tt.node, "vc-a", raftfsmtest.Hardware("S5", mac6), tt.spiffeID)
			if tt.want != nil {
				res := applyFails(t, a, cmd, tt.want)
				if !strings.Contains(errText(res.Err), tt.msg) {
					t.Errorf("err = %v, want it to say %q", res.Err, tt.msg)
				}
				return
			}
			res := mustApply(t, a, cmd)
			if res.Node.GetSpiffeId() != tt.spiffeID {
				t.Errorf("registered spiffe_id %q, want %q", res.Node.GetSpiffeId(), tt.spiffeID)
			}
			if n, ok := f.NodeBySPIFFEID(tt.spiffeID); !ok || n.GetNodeId() != tt.node {
				t.Errorf("NodeBySPIFFEID(%s) = %q, %v; want %s", tt.spiffeID, n.GetNodeId(), ok, tt.node)
			}
			if e := lastAudit(f); e.GetAction() != "register" || !strings.Contains(e.GetDetail(), "spiffe_id "+tt.spiffeID) {
				t.Errorf("audit entry %v, want a registration naming the SPIFFE ID", e)
			}
		})
	}
}

func TestNodeBySPIFFEID(t *testing.T) {
	f, a := spiffeRegistry(t)
	// node-6 held custom2 and was decommissioned; node-7 held it too, and
	// was decommissioned later: the revoked index answers node-7.
	mustApply(t, a, admin.RegisterNodeWithSPIFFEID("node-6", "", raftfsmtest.Hardware("S6", mac6), custom2))
	mustApply(t, a, at(t0+hour).Decommission("node-6"))
	mustApply(t, a, admin.RegisterNodeWithSPIFFEID("node-7", "", raftfsmtest.Hardware("S7", mac9), custom2))
	mustApply(t, a, at(t0+2*hour).Decommission("node-7"))
	mustApply(t, a, at(t0+3*hour).Decommission("node-3"))
	tests := []struct {
		id     string
		want   string // node id, "" for none
		reason string
	}{
		{default1, "node-1", "the default ID of a node without override"},
		{"spiffe://other.org/pact-agent/node-1", "node-1", "the FSM leaves the trust domain to the journal"},
		{custom1, "node-4", "an override"},
		{"spiffe://pact.local/pact-agent/node-4", "", "an override replaces the default ID"},
		{default3, "node-3", "a revoked node's default ID, to be answered NODE_REVOKED"},
		{custom2, "node-7", "a revoked override: the node decommissioned last"},
		{"spiffe://pact.local/pact-agent/node-9", "", "nobody's default ID"},
		{"spiffe://pact.local/pact-agent/node-1/x", "", "a longer path"},
		{"spiffe://pact.local/pact-agent/", "", "no node id"},
		{"spiffe://pact.local/custom/unknown", "", "nobody's override"},
		{"not a uri", "", "garbage"},
		{"", "", "empty"},
	}
	for _, tt := range tests {
		n, ok := f.NodeBySPIFFEID(tt.id)
		if ok != (tt.want != "") || n.GetNodeId() != tt.want {
			t.Errorf("NodeBySPIFFEID(%q) = %q, %v; want %q (%s)", tt.id, n.GetNodeId(), ok, tt.want, tt.reason)
		}
	}

	// Registered again, the override is live and maps to the new owner.
	mustApply(t, a, admin.RegisterNodeWithSPIFFEID("node-8", "", raftfsmtest.Hardware("S8", "52:54:00:00:00:08"), custom2))
	if n, _ := f.NodeBySPIFFEID(custom2); n.GetNodeId() != "node-8" {
		t.Errorf("after re-registration NodeBySPIFFEID(custom2) = %q, want node-8", n.GetNodeId())
	}
}

func spireCert(serial string, notAfter int64) *pactv1.CertificateInfo {
	return &pactv1.CertificateInfo{Serial: serial, NotAfterUnix: notAfter, IssuerSerial: raftfsm.SPIREIssuer}
}

func TestSVIDSeen(t *testing.T) {
	later := at(t0 + 2*hour)
	type setup func(t *testing.T, a *raftfsmtest.Applier)
	svid := func(node, id, serial string, notAfter int64) setup {
		return func(t *testing.T, a *raftfsmtest.Applier) {
			mustApply(t, a, at(t0+hour).SVIDSeen(node, id, serial, notAfter))
		}
	}
	tests := []struct {
		name   string
		setup  []setup
		cmd    *pactv1.Command
		want   error  // rule error, or nil
		idem   bool   // idempotent: nothing changes
		action string // audit action recorded
		detail string
		cert   *pactv1.CertificateInfo // the node's certificate after
	}{
		{
			name: "registered node", cmd: later.SVIDSeen("node-1", default1, "a1", t0+day),
			action: "enroll", detail: "SPIRE SVID", cert: spireCert("a1", t0+day),
		},
		{
			name: "override", cmd: later.SVIDSeen("node-4", custom1, "a1", t0+day),
			action: "enroll", detail: "SPIRE SVID", cert: spireCert("a1", t0+day),
		},
		{
			name: "inactive node",
			setup: []setup{svid("node-1", default1, "a1", t0+day), func(t *testing.T, a *raftfsmtest.Applier) {
				mustApply(t, a, at(t0+hour+1).MarkInactive((t0+hour+1)*1e9, "node-1"))
			}},
			cmd: later.SVIDSeen("node-1", default1, "a1", t0+day), action: "enroll", detail: "SPIRE SVID", cert: spireCert("a1", t0+day),
		},
		{
			name: "rotation", setup: []setup{svid("node-1", default1, "a1", t0+day)},
			cmd: later.SVIDSeen("node-1", default1, "a2", t0+day+hour), action: "renew", detail: "SPIRE rotation", cert: spireCert("a2", t0+day+hour),
		},
		{
			name: "same SVID again", setup: []setup{svid("node-1", default1, "a1", t0+day)},
			cmd: later.SVIDSeen("node-1", default1, "a1", t0+day), idem: true,
		},
		{
			name: "an older SVID during a rotation", setup: []setup{svid("node-1", default1, "a2", t0+day+hour)},
			cmd: later.SVIDSeen("node-1", default1, "a1", t0+day), idem: true,
		},
		{
			name: "replaces a journal-signed certificate",
			setup: []setup{func(t *testing.T, a *raftfsmtest.Applier) {
				mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
			}},
			cmd: later.SVIDSeen("node-1", default1, "a1", t0+day), action: "renew", detail: "SPIRE SVID replaces journal certificate 01 (kept as standby)", cert: spireCert("a1", t0+day),
		},
		{name: "unknown node", cmd: later.SVIDSeen("node-9", "spiffe://pact.local/pact-agent/node-9", "a1", t0+day), want: raftfsm.ErrNodeNotEnrolled},
		{
			name:  "revoked node",
			setup: []setup{func(t *testing.T, a *raftfsmtest.Applier) { mustApply(t, a, at(t0+hour).Decommission("node-1")) }},
			cmd:   later.SVIDSeen("node-1", default1, "a1", t0+day), want: raftfsm.ErrNodeRevoked,
		},
		{
			name: "revoked serial",
			setup: []setup{svid("node-1", default1, "a1", t0+day), func(t *testing.T, a *raftfsmtest.Applier) { mustApply(t, a, at(t0+hour).Decommission("node-1")) }, func(t *testing.T, a *raftfsmtest.Applier) {
				mustApply(t, a, at(t0+hour).RegisterNode("node-1", "", hw1()))
			}},
			cmd: later.SVIDSeen("node-1", default1, "a1", t0+day), want: raftfsm.ErrNodeRevoked,
		},
		{name: "another node's ID", cmd: later.SVIDSeen("node-1", default2, "a1", t0+day), want: raftfsm.ErrStaleCertificate},
		{name: "default ID of a node with an override", cmd: later.SVIDSeen("node-4", "spiffe://pact.local/pact-agent/node-4", "a1", t0+day), want: raftfsm.ErrStaleCertificate},
		{name: "no serial", cmd: later.SVIDSeen("node-1", default1, "", t0+day), want: raftfsm.ErrInvalidCommand},
		{name: "no SPIFFE ID", cmd: later.SVIDSeen("node-1", "", "a1", t0+day), want: raftfsm.ErrInvalidCommand},
		{name: "no expiry", cmd: later.SVIDSeen("node-1", default1, "a1", 0), want: raftfsm.ErrInvalidCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, a := spiffeRegistry(t)
			for _, s := range tt.setup {
				s(t, a)
			}
			op := tt.cmd.GetSvidSeen()
			before, _ := f.Node(op.GetNodeId())
			evs := observe(f)
			switch {
			case tt.want != nil:
				applyFails(t, a, tt.cmd, tt.want)
				return
			case tt.idem:
				res := applyUnchanged(t, a, tt.cmd)
				if res.Err != nil || !res.Idempotent || !proto.Equal(res.Node, before) {
					t.Errorf("result %+v, want idempotent with the record unchanged", res)
				}
				if len(*evs) != 0 {
					t.Errorf("an idempotent sighting was observed: %v", *evs)
				}
				return
			}
			e := applyRecords(t, a, tt.cmd, tt.action, op.GetNodeId())
			if e.GetDetail() != tt.detail || e.GetSerial() != op.GetSerial() {
				t.Errorf("audit entry %v, want detail %q and serial %s", e, tt.detail, op.GetSerial())
			}
			n, _ := f.Node(op.GetNodeId())
			if n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || !proto.Equal(n.GetCert(), tt.cert) {
				t.Errorf("node = %v, want active with certificate %v", n, tt.cert)
			}
			if n.GetUpdatedAtUnixNano() != tt.cmd.GetAtUnixNano() || f.LastSeen(n.GetNodeId()) != tt.cmd.GetAtUnixNano() {
				t.Errorf("updated %d, last seen %d; want both %d", n.GetUpdatedAtUnixNano(), f.LastSeen(n.GetNodeId()), tt.cmd.GetAtUnixNano())
			}
			wantActivated := before.GetActivatedAtUnixNano()
			if tt.action == "enroll" {
				wantActivated = tt.cmd.GetAtUnixNano()
			}
			if n.GetActivatedAtUnixNano() != wantActivated {
				t.Errorf("activated at %d, want %d", n.GetActivatedAtUnixNano(), wantActivated)
			}
			if !proto.Equal(n.GetHardware(), before.GetHardware()) || n.GetVcluster() != before.GetVcluster() || n.GetSpiffeId() != before.GetSpiffeId() {
				t.Errorf("node = %v: an SVID sighting changed more than state and certificate of %v", n, before)
			}
			if len(*evs) != 1 || !slices.Equal((*evs)[0].NodeIDs, []string{n.GetNodeId()}) {
				t.Errorf("events %v, want one about %s", *evs, n.GetNodeId())
			}
		})
	}
}

// A decommissioned SVID node: its recorded serial is revoked, its SPIFFE ID
// maps to the revoked record (the journal answers NODE_REVOKED), and a new
// registration admits the node again, but not the revoked serial.
func TestDecommissionSVIDNode(t *testing.T) {
	for _, tt := range []struct{ node, id string }{{"node-1", default1}, {"node-4", custom1}} {
		t.Run(tt.node, func(t *testing.T) {
			f, a := spiffeRegistry(t)
			before, _ := f.Node(tt.node)
			mustApply(t, a, at(t0+hour).SVIDSeen(tt.node, tt.id, "a1", t0+day))
			applyRecords(t, a, at(t0+2*hour).Decommission(tt.node), "decommission", tt.node)
			if !f.IsRevoked("a1") {
				t.Error("the SVID serial is not revoked")
			}
			if n, ok := f.NodeBySPIFFEID(tt.id); !ok || n.GetNodeId() != tt.node || n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED {
				t.Errorf("NodeBySPIFFEID(%s) = %v, %v; want the revoked %s", tt.id, n, ok, tt.node)
			}
			applyFails(t, a, at(t0+3*hour).SVIDSeen(tt.node, tt.id, "a2", t0+day), raftfsm.ErrNodeRevoked)

			mustApply(t, a, admin.RegisterNodeWithSPIFFEID(tt.node, "", before.GetHardware(), before.GetSpiffeId()))
			applyFails(t, a, at(t0+3*hour).SVIDSeen(tt.node, tt.id, "a1", t0+day), raftfsm.ErrNodeRevoked)
			applyRecords(t, a, at(t0+3*hour).SVIDSeen(tt.node, tt.id, "a2", t0+day), "enroll", tt.node)
		})
	}
}

func TestSnapshotCarriesSPIFFEIndex(t *testing.T) {
	f, a := spiffeRegistry(t)
	mustApply(t, a, admin.RegisterNodeWithSPIFFEID("node-5", "", raftfsmtest.Hardware("S5", mac6), custom2))
	mustApply(t, a, at(t0+hour).Decommission("node-5"))
	mustApply(t, a, at(t0+hour).SVIDSeen("node-4", custom1, "a1", t0+day))
	g := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(g, snapshotBytes(t, f)); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{default1, custom1, custom2, "spiffe://pact.local/pact-agent/node-4"} {
		x, xok := f.NodeBySPIFFEID(id)
		y, yok := g.NodeBySPIFFEID(id)
		if xok != yok || !proto.Equal(x, y) {
			t.Errorf("NodeBySPIFFEID(%s): %v, %v before the snapshot, %v, %v after", id, x, xok, y, yok)
		}
	}
	// The index is enforced on the restored replica.
	ga := &raftfsmtest.Applier{FSM: g, Index: a.Index}
	applyFails(t, ga, admin.RegisterNodeWithSPIFFEID("node-6", "", raftfsmtest.Hardware("S6", "52:54:00:00:00:0a"), custom1), raftfsm.ErrHardwareIdentityConflict)
}

func TestRestoreRejectsSharedSPIFFEID(t *testing.T) {
	n1 := node("node-1", pactv1.NodeState_NODE_STATE_REGISTERED, hw1(), nil)
	n2 := node("node-2", pactv1.NodeState_NODE_STATE_ACTIVE, hw2(), cert("02", "spki-2"))
	n1.SpiffeId, n2.SpiffeId = custom1, custom1
	err := raftfsmtest.Restore(raftfsm.New(), &pactv1.Snapshot{Nodes: []*pactv1.Node{n1, n2}})
	if err == nil || !strings.Contains(err.Error(), "SPIFFE ID") {
		t.Errorf("Restore = %v, want a refusal naming the shared SPIFFE ID", err)
	}
	// A revoked node may share it with a live one.
	n1.State = pactv1.NodeState_NODE_STATE_REVOKED
	if err := raftfsmtest.Restore(raftfsm.New(), &pactv1.Snapshot{Nodes: []*pactv1.Node{n1, n2}}); err != nil {
		t.Errorf("Restore with a revoked holder: %v", err)
	}
}
