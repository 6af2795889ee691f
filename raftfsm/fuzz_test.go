package raftfsm_test

import (
	"bytes"
	"slices"
	"sync"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/hwid"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// fuzzFixture is the state every fuzz input starts from, as snapshot bytes:
// the test registry with node-2 active, an intermediate, a revoked node-4
// whose MAC and BMC serial now belong to node-6, an inactive node-5 and a
// revoked serial.
var fuzzFixture = sync.OnceValue(func() []byte {
	f := raftfsm.New()
	err := raftfsmtest.Restore(f, &pactv1.Snapshot{
		Nodes: []*pactv1.Node{
			node("node-4", pactv1.NodeState_NODE_STATE_REVOKED, raftfsmtest.Hardware("S4", mac5), cert("04", "spki-4")),
			node("node-5", pactv1.NodeState_NODE_STATE_INACTIVE, raftfsmtest.Hardware("S5", mac6), cert("05", "spki-5")),
		},
		Revoked: []*pactv1.RevokedSerial{{Serial: "04", NotAfterUnix: t0 + 3*day}},
	})
	if err != nil {
		panic(err)
	}
	a := &raftfsmtest.Applier{FSM: f}
	for _, c := range []*pactv1.Command{
		admin.RegisterNode("node-1", "vc-a", hw1()),
		admin.RegisterNode("node-2", "", hw2()),
		admin.RegisterNode("node-3", "vc-b", hw3()),
		admin.RegisterNode("node-6", "vc-a", raftfsmtest.Hardware("S4", mac5)),
		journal.Activate("node-2", hw2(), cert("02", "spki-2")),
		journal.PublishIntermediate(raftfsmtest.Intermediate("journal-1", "i-1", t0+day)),
	} {
		if res := a.Apply(c); res.Err != nil {
			panic(res.Err)
		}
	}
	data, err := raftfsmtest.SnapshotBytes(f)
	if err != nil {
		panic(err)
	}
	return data
})

func fixtureFSM(t *testing.T) *raftfsm.FSM {
	f := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(f, fuzzFixture()); err != nil {
		t.Fatal(err)
	}
	return f
}

// applyRecover applies data as a command entry and reports a panic.
func applyRecover(f *raftfsm.FSM, index uint64, data []byte) (res *raftfsm.Result, panicked bool) {
	v := recoverPanic(func() {
		res = f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(*raftfsm.Result)
	})
	return res, v != nil
}

// checkInvariants checks what every state reached by Apply must satisfy:
// live nodes own their identifiers alone, in normal form, and resolve to
// themselves; and the state survives a snapshot round trip unchanged.
func checkInvariants(t *testing.T, f *raftfsm.FSM) {
	t.Helper()
	owner := map[string]string{}
	for _, n := range f.Nodes(raftfsm.Filter{}) {
		if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
			continue
		}
		h := n.GetHardware()
		norm, err := hwid.Normalize(h.GetMacs(), h.GetBmcSerial(), h.GetTpmEkHash())
		if err != nil || !slices.Equal(norm.MACs, h.GetMacs()) || norm.BMCSerial != h.GetBmcSerial() || norm.EKHash != h.GetTpmEkHash() {
			t.Errorf("%s holds hardware not in normal form: %v (%v)", n.GetNodeId(), h, err)
		}
		keys := slices.Clone(h.GetMacs())
		if b := h.GetBmcSerial(); b != "" {
			keys = append(keys, "bmc:"+b)
		}
		if e := h.GetTpmEkHash(); e != "" {
			keys = append(keys, "ek:"+e)
		}
		for _, k := range keys {
			if o, dup := owner[k]; dup {
				t.Errorf("%s is held by both %s and %s", k, o, n.GetNodeId())
			}
			owner[k] = n.GetNodeId()
		}
		if r := f.Resolve(ident(h)); r.Err != nil || r.Node.GetNodeId() != n.GetNodeId() {
			t.Errorf("%s's own hardware resolves to %q: %v", n.GetNodeId(), r.Node.GetNodeId(), r.Err)
		}
	}
	data := snapshotBytes(t, f)
	g := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(g, data); err != nil {
		t.Fatalf("a state reached by Apply does not restore: %v", err)
	}
	if !bytes.Equal(data, snapshotBytes(t, g)) {
		t.Error("Snapshot → Restore → Snapshot changed the bytes")
	}
}

// FuzzApply feeds arbitrary bytes to Apply as a command entry, twice (a
// command is often retried). Apply must panic exactly when the entry does
// not decode or names no operation, and otherwise keep every invariant.
func FuzzApply(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := fixtureFSM(t)
		cmd, decodeErr := raftfsm.Decode(data)
		wantPanic := decodeErr != nil || cmd.GetOp() == nil
		for i := range uint64(2) {
			res, panicked := applyRecover(fsm, 100+i, data)
			if panicked != wantPanic {
				t.Fatalf("Apply panicked: %v; decode error: %v; command %v", panicked, decodeErr, cmd)
			}
			if panicked {
				return // Raft would have stopped here; the FSM is not used again.
			}
			if res.Err != nil && (raftfsm.ErrorCode(res.Err) == "" || res.Idempotent) {
				t.Errorf("result %+v: want a typed rule error and no idempotent flag", res)
			}
			checkInvariants(t, fsm)
		}
	})
}

// FuzzRestore feeds arbitrary bytes to Restore: it must never panic, must
// leave the state alone when it fails, and what it accepts must survive a
// snapshot round trip.
func FuzzRestore(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := fixtureFSM(t)
		if err := raftfsmtest.RestoreBytes(fsm, data); err != nil {
			if !bytes.Equal(snapshotBytes(t, fsm), fuzzFixture()) {
				t.Fatalf("a failed Restore (%v) changed the state", err)
			}
			return
		}
		// The read side copes with whatever was accepted.
		for _, n := range fsm.Nodes(raftfsm.Filter{}) {
			fsm.Resolve(ident(n.GetHardware()))
		}
		fsm.Intermediates(t0)
		first := snapshotBytes(t, fsm)
		g := raftfsm.New()
		if err := raftfsmtest.RestoreBytes(g, first); err != nil {
			t.Fatalf("Restore accepted a snapshot whose own re-snapshot it refuses: %v", err)
		}
		if !bytes.Equal(first, snapshotBytes(t, g)) {
			t.Error("Snapshot → Restore → Snapshot changed the bytes")
		}
	})
}
