package raftfsm_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// A SPIRE node's journal-signed standby: recorded only for a node active on
// an SVID, replaced by a newer one, made current by its first stream, kept
// when SPIRE replaces a journal certificate, cleared by any other journal
// certificate, and revoked with the node.
func TestStandby(t *testing.T) {
	later := at(t0 + hour)
	tests := []struct {
		name  string
		setup []*pactv1.Command
		cmd   *pactv1.Command
		want  error
		idem  bool
		check func(t *testing.T, f *raftfsm.FSM)
	}{
		{
			name:  "issued on an SVID",
			setup: []*pactv1.Command{later.SVIDSeen("node-1", default1, "a1", t0+day)},
			cmd:   later.StandbyIssued("node-1", default1, cert("s1", "spki-s1")),
			check: func(t *testing.T, f *raftfsm.FSM) {
				n, _ := f.Node("node-1")
				if n.GetCert().GetSerial() != "a1" || !proto.Equal(n.GetStandbyCert(), cert("s1", "spki-s1")) {
					t.Errorf("node %v: want SVID a1 current and s1 standby", n)
				}
			},
		},
		{
			name:  "same key again",
			setup: []*pactv1.Command{later.SVIDSeen("node-1", default1, "a1", t0+day), later.StandbyIssued("node-1", default1, cert("s1", "spki-s1"))},
			cmd:   later.StandbyIssued("node-1", default1, cert("s1b", "spki-s1")),
			idem:  true,
		},
		{
			name:  "a new standby replaces the old one",
			setup: []*pactv1.Command{later.SVIDSeen("node-1", default1, "a1", t0+day), later.StandbyIssued("node-1", default1, cert("s1", "spki-s1"))},
			cmd:   later.StandbyIssued("node-1", default1, cert("s2", "spki-s2")),
			check: func(t *testing.T, f *raftfsm.FSM) {
				n, _ := f.Node("node-1")
				if n.GetStandbyCert().GetSerial() != "s2" {
					t.Errorf("standby %v, want s2", n.GetStandbyCert())
				}
			},
		},
		{name: "node on a journal certificate", setup: []*pactv1.Command{journal.Activate("node-1", hw1(), cert("01", "spki-1"))},
			cmd: later.StandbyIssued("node-1", default1, cert("s1", "spki-s1")), want: raftfsm.ErrStaleCertificate},
		{name: "registered node", cmd: later.StandbyIssued("node-1", default1, cert("s1", "spki-s1")), want: raftfsm.ErrStaleCertificate},
		{name: "another node's SPIFFE ID", setup: []*pactv1.Command{later.SVIDSeen("node-1", default1, "a1", t0+day)},
			cmd: later.StandbyIssued("node-1", default2, cert("s1", "spki-s1")), want: raftfsm.ErrStaleCertificate},
		{name: "unknown node", cmd: later.StandbyIssued("node-9", "spiffe://pact.local/pact-agent/node-9", cert("s1", "spki-s1")), want: raftfsm.ErrNodeNotEnrolled},
		{name: "revoked node", setup: []*pactv1.Command{at(t0 + hour).Decommission("node-1")},
			cmd: later.StandbyIssued("node-1", default1, cert("s1", "spki-s1")), want: raftfsm.ErrNodeRevoked},
		{name: "an SVID as standby", setup: []*pactv1.Command{later.SVIDSeen("node-1", default1, "a1", t0+day)},
			cmd: later.StandbyIssued("node-1", default1, &pactv1.CertificateInfo{Serial: "x", SpkiSha256: "y", Der: []byte("z"), IssuerSerial: raftfsm.SPIREIssuer}), want: raftfsm.ErrInvalidCommand},
		{
			name:  "activated by its first stream",
			setup: []*pactv1.Command{later.SVIDSeen("node-1", default1, "a1", t0+day), later.StandbyIssued("node-1", default1, cert("s1", "spki-s1"))},
			cmd:   at(t0+2*hour).StandbyActivated("node-1", "s1"),
			check: func(t *testing.T, f *raftfsm.FSM) {
				n, _ := f.Node("node-1")
				if !proto.Equal(n.GetCert(), cert("s1", "spki-s1")) || n.GetStandbyCert() != nil || n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
					t.Errorf("node %v: want s1 current and no standby", n)
				}
				if f.LastSeen("node-1") != (t0+2*hour)*1e9 {
					t.Errorf("last seen %d", f.LastSeen("node-1"))
				}
			},
		},
		{
			name:  "activated again",
			setup: []*pactv1.Command{later.SVIDSeen("node-1", default1, "a1", t0+day), later.StandbyIssued("node-1", default1, cert("s1", "spki-s1")), later.StandbyActivated("node-1", "s1")},
			cmd:   later.StandbyActivated("node-1", "s1"),
			idem:  true,
		},
		{
			name:  "a replaced standby is not activated",
			setup: []*pactv1.Command{later.SVIDSeen("node-1", default1, "a1", t0+day), later.StandbyIssued("node-1", default1, cert("s1", "spki-s1")), later.StandbyIssued("node-1", default1, cert("s2", "spki-s2"))},
			cmd:   later.StandbyActivated("node-1", "s1"),
			want:  raftfsm.ErrStaleCertificate,
		},
		{
			name:  "SPIRE back: the journal certificate becomes the standby",
			setup: []*pactv1.Command{later.SVIDSeen("node-1", default1, "a1", t0+day), later.StandbyIssued("node-1", default1, cert("s1", "spki-s1")), later.StandbyActivated("node-1", "s1")},
			cmd:   at(t0+3*hour).SVIDSeen("node-1", default1, "a2", t0+day+2*hour),
			check: func(t *testing.T, f *raftfsm.FSM) {
				n, _ := f.Node("node-1")
				if n.GetCert().GetSerial() != "a2" || !proto.Equal(n.GetStandbyCert(), cert("s1", "spki-s1")) {
					t.Errorf("node %v: want SVID a2 current and s1 standby", n)
				}
			},
		},
		{
			name:  "a renewal clears the standby",
			setup: []*pactv1.Command{later.SVIDSeen("node-1", default1, "a1", t0+day), later.StandbyIssued("node-1", default1, cert("s1", "spki-s1"))},
			cmd:   later.Renew("node-1", "a1", cert("02", "spki-2")),
			check: func(t *testing.T, f *raftfsm.FSM) {
				if n, _ := f.Node("node-1"); n.GetStandbyCert() != nil || n.GetCert().GetSerial() != "02" {
					t.Errorf("node %v: want 02 current, no standby", n)
				}
			},
		},
		{
			name:  "decommission revokes the standby too",
			setup: []*pactv1.Command{later.SVIDSeen("node-1", default1, "a1", t0+day), later.StandbyIssued("node-1", default1, cert("s1", "spki-s1"))},
			cmd:   at(t0 + 2*hour).Decommission("node-1"),
			check: func(t *testing.T, f *raftfsm.FSM) {
				if !f.IsRevoked("s1") || !f.IsRevoked("a1") {
					t.Errorf("revoked: s1 %v, a1 %v; want both", f.IsRevoked("s1"), f.IsRevoked("a1"))
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, a := spiffeRegistry(t)
			for _, c := range tt.setup {
				mustApply(t, a, c)
			}
			switch {
			case tt.want != nil:
				applyFails(t, a, tt.cmd, tt.want)
				return
			case tt.idem:
				if res := applyUnchanged(t, a, tt.cmd); res.Err != nil || !res.Idempotent {
					t.Errorf("result %+v, want idempotent", res)
				}
				return
			}
			if res := mustApply(t, a, tt.cmd); res.Idempotent {
				t.Errorf("result %+v, want a change", res)
			}
			tt.check(t, f)
			// The state survives a snapshot round trip.
			g := raftfsm.New()
			if err := raftfsmtest.RestoreBytes(g, snapshotBytes(t, f)); err != nil {
				t.Fatal(err)
			}
			n1, _ := f.Node("node-1")
			n2, _ := g.Node("node-1")
			if !proto.Equal(n1, n2) {
				t.Errorf("after a snapshot: %v, want %v", n2, n1)
			}
		})
	}
}
