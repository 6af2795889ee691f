package raftfsm_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/snapfile"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// mac7 belongs to node-7 in the fuzz fixture, and to nobody live.
const mac7 = "52:54:00:00:00:07"

// fuzzFixture is the state every fuzz input starts from, as snapshot bytes:
// the test registry with node-2 active (seen at journal's time), an
// intermediate, a revoked node-4 whose MAC and BMC serial now belong to
// node-6, an inactive node-5, a revoked serial, and node-7 activated then
// decommissioned by command, so its hardware (S7, mac7) answers
// NODE_REVOKED. The audit ring holds what those commands recorded.
var fuzzFixture = sync.OnceValue(func() []byte {
	f := raftfsm.New()
	err := raftfsmtest.Restore(f, &pactv1.Snapshot{
		Nodes: []*pactv1.Node{
			node("node-4", pactv1.NodeState_NODE_STATE_REVOKED, raftfsmtest.Hardware("S4", mac5), cert("04", "spki-4")),
			node("node-5", pactv1.NodeState_NODE_STATE_INACTIVE, raftfsmtest.Hardware("S5", mac6), cert("05", "spki-5")),
		},
		Revoked:  []*pactv1.RevokedSerial{{Serial: "04", NotAfterUnix: t0 + 3*day}},
		LastSeen: []*pactv1.LastSeen{{NodeId: "node-5", AtUnixNano: (t0 - hour) * 1e9}},
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
		admin.RegisterNode("node-7", "vc-b", raftfsmtest.Hardware("S7", mac7)),
		journal.Activate("node-2", hw2(), cert("02", "spki-2")),
		journal.Activate("node-7", raftfsmtest.Hardware("S7", mac7), cert("07", "spki-7")),
		journal.PublishIntermediate(raftfsmtest.Intermediate("journal-1", "i-1", t0+day)),
		journal.Decommission("node-7"),
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

// hwKeys returns the identifiers of h, each prefixed by its kind.
func hwKeys(h *pactv1.HardwareIdentity) []string {
	keys := slices.Clone(h.GetMacs())
	if b := h.GetBmcSerial(); b != "" {
		keys = append(keys, "bmc:"+b)
	}
	if e := h.GetTpmEkHash(); e != "" {
		keys = append(keys, "ek:"+e)
	}
	return keys
}

// keyIdentity is the identity reporting only the identifier key.
func keyIdentity(key string) hwid.Identity {
	switch {
	case strings.HasPrefix(key, "bmc:"):
		return hwid.Identity{BMCSerial: strings.TrimPrefix(key, "bmc:")}
	case strings.HasPrefix(key, "ek:"):
		return hwid.Identity{EKHash: strings.TrimPrefix(key, "ek:")}
	}
	return hwid.Identity{MACs: []string{key}}
}

// checkInvariants checks what every state reached by Apply must satisfy:
// live nodes own their identifiers alone, in normal form, and resolve to
// themselves; an identifier of a revoked node that no live node owns
// resolves to NODE_REVOKED (and a revoked node's whole hardware too, when
// none of it is owned); liveness is known for known nodes only; and the
// state survives a snapshot round trip unchanged.
func checkInvariants(t *testing.T, f *raftfsm.FSM) {
	t.Helper()
	owner := map[string]string{}
	all := f.Nodes(raftfsm.Filter{})
	for _, n := range all {
		if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
			continue
		}
		h := n.GetHardware()
		norm, err := hwid.Normalize(h.GetMacs(), h.GetBmcSerial(), h.GetTpmEkHash())
		if err != nil || !slices.Equal(norm.MACs, h.GetMacs()) || norm.BMCSerial != h.GetBmcSerial() || norm.EKHash != h.GetTpmEkHash() {
			t.Errorf("%s holds hardware not in normal form: %v (%v)", n.GetNodeId(), h, err)
		}
		for _, k := range hwKeys(h) {
			if o, dup := owner[k]; dup {
				t.Errorf("%s is held by both %s and %s", k, o, n.GetNodeId())
			}
			owner[k] = n.GetNodeId()
		}
		if r := f.Resolve(ident(h)); r.Err != nil || r.Node.GetNodeId() != n.GetNodeId() {
			t.Errorf("%s's own hardware resolves to %q: %v", n.GetNodeId(), r.Node.GetNodeId(), r.Err)
		}
	}
	for _, n := range all {
		if n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED {
			continue
		}
		released := true
		for _, k := range hwKeys(n.GetHardware()) {
			if _, live := owner[k]; live {
				released = false
				continue
			}
			r := f.Resolve(keyIdentity(k))
			if !errors.Is(r.Err, raftfsm.ErrNodeRevoked) || r.Node.GetState() != pactv1.NodeState_NODE_STATE_REVOKED ||
				!slices.Contains(hwKeys(r.Node.GetHardware()), k) {
				t.Errorf("%s of revoked %s, owned by no live node, resolves to %q (%v): %v",
					k, n.GetNodeId(), r.Node.GetNodeId(), stateOf(r.Node), r.Err)
			}
		}
		if r := f.Resolve(ident(n.GetHardware())); released && !errors.Is(r.Err, raftfsm.ErrNodeRevoked) {
			t.Errorf("revoked %s's hardware, owned by no live node, resolves to %q: %v", n.GetNodeId(), r.Node.GetNodeId(), r.Err)
		}
		if ls := f.LastSeen(n.GetNodeId()); ls != 0 {
			t.Errorf("revoked %s has a last sighting %d", n.GetNodeId(), ls)
		}
	}
	checkSPIFFEInvariants(t, f, all)
	// One key, one node: no two live nodes hold the same current key, and
	// each live node's key is found bound to it.
	keys := map[string]string{}
	for _, n := range all {
		k := n.GetCert().GetSpkiSha256()
		if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED || k == "" {
			continue
		}
		if o, dup := keys[k]; dup {
			t.Errorf("key %s is the current key of both %s and %s", k, o, n.GetNodeId())
		}
		keys[k] = n.GetNodeId()
		if got := f.KeyOwner(k, ""); got != n.GetNodeId() {
			t.Errorf("KeyOwner(%s) = %q, want %s", k, got, n.GetNodeId())
		}
	}
	// What pact node list --state fenced|released shows: the filters
	// agree with the records, and a released node is Active and not
	// fenced (a fence makes an Active node Inactive: no release survives
	// it).
	var fenced, released []string
	for _, n := range all {
		if n.GetFence() != nil {
			fenced = append(fenced, n.GetNodeId())
		}
		if raftfsm.Released(n) {
			released = append(released, n.GetNodeId())
			if n.GetFence() != nil || n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || n.GetReleasedSerial() != n.GetCert().GetSerial() {
				t.Errorf("released %s is %v, fenced %v, released serial %q of certificate %q", n.GetNodeId(), n.GetState(), n.GetFence() != nil, n.GetReleasedSerial(), n.GetCert().GetSerial())
			}
		}
	}
	if got := ids(f.Nodes(raftfsm.Filter{Fenced: true})); !slices.Equal(got, fenced) {
		t.Errorf("Filter{Fenced} = %v, the fenced nodes are %v", got, fenced)
	}
	if got := ids(f.Nodes(raftfsm.Filter{Released: true})); !slices.Equal(got, released) {
		t.Errorf("Filter{Released} = %v, the released nodes are %v", got, released)
	}
	active := f.Nodes(raftfsm.Filter{State: pactv1.NodeState_NODE_STATE_ACTIVE})
	seen := f.ActiveLastSeen()
	if len(seen) != len(active) {
		t.Errorf("ActiveLastSeen has %d nodes, %d are active", len(seen), len(active))
	}
	for _, n := range active {
		if ls, ok := seen[n.GetNodeId()]; !ok || ls != f.LastSeen(n.GetNodeId()) {
			t.Errorf("ActiveLastSeen[%s] = %d, %v; LastSeen = %d", n.GetNodeId(), ls, ok, f.LastSeen(n.GetNodeId()))
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
	// A replica restored from the snapshot answers every lookup the same.
	for _, n := range all {
		sid := raftfsm.SPIFFEIDOf(n, "pact.local")
		x, xok := f.NodeBySPIFFEID(sid)
		y, yok := g.NodeBySPIFFEID(sid)
		if xok != yok || x.GetNodeId() != y.GetNodeId() {
			t.Errorf("NodeBySPIFFEID(%s) = %q, %v; after a snapshot round trip %q, %v", sid, x.GetNodeId(), xok, y.GetNodeId(), yok)
		}
		for _, k := range hwKeys(n.GetHardware()) {
			if x, y := f.Resolve(keyIdentity(k)), g.Resolve(keyIdentity(k)); !sameResolution(x, y) || errText(x.Err) != errText(y.Err) {
				t.Errorf("Resolve(%s) = %q, %v; after a snapshot round trip %q, %v", k, x.Node.GetNodeId(), x.Err, y.Node.GetNodeId(), y.Err)
			}
		}
	}
}

func ids(nodes []*pactv1.Node) []string {
	out := []string{}
	for _, n := range nodes {
		out = append(out, n.GetNodeId())
	}
	return out
}

// checkSPIFFEInvariants: live nodes own their SPIFFE ID overrides alone,
// each valid; every live node's ID (override or default) maps to it; an
// override of a revoked node that no live node holds maps to a revoked
// node that held it.
func checkSPIFFEInvariants(t *testing.T, f *raftfsm.FSM, all []*pactv1.Node) {
	t.Helper()
	owner := map[string]string{}
	for _, n := range all {
		if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
			continue
		}
		if sid := n.GetSpiffeId(); sid != "" {
			if err := raftfsm.ValidateSPIFFEID(n.GetNodeId(), sid); err != nil {
				t.Errorf("%s holds an invalid SPIFFE ID: %v", n.GetNodeId(), err)
			}
			if o, dup := owner[sid]; dup {
				t.Errorf("SPIFFE ID %s is held by both %s and %s", sid, o, n.GetNodeId())
			}
			owner[sid] = n.GetNodeId()
		}
		sid := raftfsm.SPIFFEIDOf(n, "pact.local")
		if m, ok := f.NodeBySPIFFEID(sid); !ok || m.GetNodeId() != n.GetNodeId() {
			t.Errorf("%s's SPIFFE ID %s maps to %q (%v)", n.GetNodeId(), sid, m.GetNodeId(), ok)
		}
	}
	for _, n := range all {
		sid := n.GetSpiffeId()
		if n.GetState() != pactv1.NodeState_NODE_STATE_REVOKED || sid == "" {
			continue
		}
		if _, live := owner[sid]; live {
			continue
		}
		m, ok := f.NodeBySPIFFEID(sid)
		if !ok || m.GetState() != pactv1.NodeState_NODE_STATE_REVOKED || m.GetSpiffeId() != sid {
			t.Errorf("SPIFFE ID %s of revoked %s, held by no live node, maps to %q (%v)", sid, n.GetNodeId(), m.GetNodeId(), stateOf(m))
		}
	}
}

// stateOf names a record's state for messages ("" for none).
func stateOf(n *pactv1.Node) string {
	if n == nil {
		return ""
	}
	return raftfsm.StateName(n.GetState())
}

// batchSeeds are batches of activations as a journal proposes them in a
// boot storm: retries and second keys of one node, a key or hardware of two
// nodes, a refusal among successes, a decommission between two activations,
// an unknown command, a batch inside a batch.
func batchSeeds() []*pactv1.Command {
	a1 := func(s int64) raftfsmtest.Proposer { return agent("node-1", s) }
	return []*pactv1.Command{
		journal.Batch(a1(1).Activate("node-1", hw1(), cert("0a", "spki-a")), agent("node-3", 2).Activate("node-3", hw3(), cert("0b", "spki-b"))),
		journal.Batch(a1(1).Activate("node-1", hw1(), cert("0a", "spki-a")), a1(2).Activate("node-1", hw1(), cert("0a", "spki-a"))),
		journal.Batch(a1(1).Activate("node-1", hw1(), cert("0a", "spki-a")), a1(2).Activate("node-1", hw1(), cert("0c", "spki-c"))),
		journal.Batch(a1(1).Activate("node-1", hw1(), cert("0a", "spki-a")), agent("node-3", 2).Activate("node-3", hw3(), cert("0b", "spki-a"))),
		journal.Batch(agent("node-3", 1).Activate("node-3", raftfsmtest.Hardware("S1", mac4), cert("0b", "spki-b")), a1(2).Activate("node-1", hw1(), cert("0a", "spki-a"))),
		journal.Batch(a1(1).Activate("node-1", hw1(), cert("0a", "spki-a")), admin.Decommission("node-1"), a1(3).Activate("node-1", hw1(), cert("0c", "spki-c"))),
		journal.Batch(a1(1).Activate("node-1", hw1(), cert("0a", "spki-a")), &pactv1.Command{Actor: "journal/j9", Ignorable: true}),
		journal.Batch(a1(1).Activate("node-1", hw1(), cert("0a", "spki-a")), &pactv1.Command{Actor: "journal/j9"}),
		journal.Batch(journal.Batch(a1(1).Activate("node-1", hw1(), cert("0a", "spki-a")))),
		journal.Batch(),
	}
}

// halts reports whether the FSM must stop at cmd's entry: it, or a command
// of its batch, names no operation this version knows and is not ignorable.
func halts(cmd *pactv1.Command) bool {
	if cmd.GetOp() == nil {
		return !cmd.GetIgnorable()
	}
	return slices.ContainsFunc(cmd.GetBatch().GetCommands(), func(c *pactv1.Command) bool { return c.GetOp() == nil && !c.GetIgnorable() })
}

// FuzzApply feeds arbitrary bytes to Apply as a command entry, twice (a
// command is often retried). Apply must panic exactly when the entry does
// not decode, skip or halt on one naming no operation it knows, and otherwise keep every invariant; a
// refused or idempotent command must change nothing, and every audit entry
// must carry the command's context and log index. A batch must answer and
// leave the state exactly as its commands would in entries of their own at
// the same index.
func FuzzApply(f *testing.F) {
	for _, c := range []*pactv1.Command{
		admin.RecordOperator(&pactv1.Operator{Name: "alice", Role: "viewer", Serial: "a1", NotBeforeUnix: t0, NotAfterUnix: t0 + day, IssuedBy: "admin/root"}),
		admin.RevokeOperator("alice", ""),
		admin.RevokeOperator("", "a1"),
		journal.RetireIntermediate((t0+600)*1e9, "i-1"),
		journal.RetireIntermediate(0, "i-1", "i-9"),
		journal.PublishIntermediateUnder(raftfsmtest.Intermediate("journal-2", "i-2", t0+day), raftfsmtest.JournalCA("journal-2", "ca-2", t0+365*day), "ca-2"),
		admin.RevokeJournalCA("lost", "ca-2"),
		journal.Batch(
			journal.PublishIntermediateUnder(raftfsmtest.Intermediate("journal-2", "i-2", t0+day), raftfsmtest.JournalCA("journal-2", "ca-2", t0+365*day), "ca-2"),
			admin.RevokeJournalCA("lost", "ca-2"),
			journal.PublishIntermediateUnder(raftfsmtest.Intermediate("journal-2", "i-3", t0+day), nil, "ca-2")),
		journal.Release("node-2", "02"),
		journal.Batch(journal.Release("node-2", "02"), journal.Fence("node-2", "INC-1")),
		journal.Batch(journal.Release("node-2", "02"), journal.MarkInactive((t0+day)*1e9, "node-2"), journal.LivenessDigest("journal-1", "node-2")),
	} {
		data, err := raftfsm.Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, c := range batchSeeds() {
		data, err := raftfsm.Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := fixtureFSM(t)
		cmd, decodeErr := raftfsm.Decode(data)
		wantPanic := decodeErr != nil
		if decodeErr == nil && (cmd.GetOp() == nil || halts(cmd)) {
			// An operation this version does not know: skipped if
			// ignorable, else the FSM halts (blocking until released)
			// before any of the entry is applied.
			before := snapshotBytes(t, fsm)
			fsm.Release()
			res, panicked := applyRecover(fsm, 100, data)
			skip := !halts(cmd)
			// A halted FSM takes no snapshot; it must not count the entry
			// applied either.
			if panicked || (res.Err != nil) == skip || (skip && !bytes.Equal(before, snapshotBytes(t, fsm))) || (!skip && fsm.AppliedIndex() == 100) {
				t.Fatalf("unknown operation (skipped %v): panicked %v, result %+v, or the state changed", skip, panicked, res)
			}
			return
		}
		if decodeErr == nil && cmd.GetBatch() != nil {
			checkBatch(t, fsm, cmd)
			return
		}
		var evs []raftfsm.Event
		fsm.SetObserver(func(ev raftfsm.Event) { evs = append(evs, ev) })
		for i := range uint64(2) {
			index := 100 + i
			before := snapshotBytes(t, fsm)
			evs = evs[:0]
			res, panicked := applyRecover(fsm, index, data)
			if panicked != wantPanic {
				t.Fatalf("Apply panicked: %v; decode error: %v; command %v", panicked, decodeErr, cmd)
			}
			if panicked {
				return // Raft would have stopped here; the FSM is not used again.
			}
			if res.Err != nil && (raftfsm.ErrorCode(res.Err) == "" || res.Idempotent) {
				t.Errorf("result %+v: want a typed rule error and no idempotent flag", res)
			}
			if res.Err != nil || res.Idempotent {
				if !bytes.Equal(before, snapshotBytes(t, fsm)) {
					t.Errorf("result %+v: the state changed", res)
				}
				if len(evs) != 0 {
					t.Errorf("result %+v: observed %v", res, evs)
				}
			}
			for _, ev := range evs {
				if ev.Index != index {
					t.Errorf("event index %d, want %d", ev.Index, index)
				}
				for _, e := range ev.Audit {
					if e.GetIndex() != index || e.GetAtUnixNano() != cmd.GetAtUnixNano() || e.GetActor() != cmd.GetActor() ||
						e.GetSource() != cmd.GetSource() || e.GetCorrelationId() != cmd.GetCorrelationId() || e.GetAction() == "" {
						t.Errorf("audit entry %v of command %v at index %d", e, cmd, index)
					}
				}
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
			checkAgrees(t, data, err, 0)
			return
		}
		checkAgrees(t, data, nil, len(fsm.Nodes(raftfsm.Filter{})))
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

// checkAgrees fails t unless snapfile.CheckState (what the CLI's inspect
// checks a snapshot file's state with) judges data as Restore did: the
// same refusal, or acceptance with as many nodes. Both go through
// snapfile.ReadState, each into a registry of its own: this holds the two
// registries' answers to the rules to each other.
func checkAgrees(t *testing.T, data []byte, restoreErr error, nodes int) {
	t.Helper()
	n, err := snapfile.CheckState(bytes.NewReader(data))
	switch {
	case restoreErr == nil && err != nil:
		t.Fatalf("Restore accepted a state snapfile.CheckState refuses: %v", err)
	case restoreErr == nil && n != nodes:
		t.Fatalf("snapfile.CheckState counts %d nodes, Restore restored %d", n, nodes)
	case restoreErr != nil && err == nil:
		t.Fatalf("snapfile.CheckState accepts a state Restore refuses (%v)", restoreErr)
	case restoreErr != nil && err.Error() != restoreErr.Error():
		t.Fatalf("snapfile.CheckState refuses %q, Restore %q", err, restoreErr)
	}
}

// checkBatch applies a batch entry twice and, beside it, each of its
// commands as an entry of its own at the same index on a twin: the results,
// the state (byte for byte, audit entries included) and the invariants must
// agree, a refused or idempotent command must change nothing, and every
// audit entry must carry the stamp of a command of the batch.
func checkBatch(t *testing.T, fsm *raftfsm.FSM, cmd *pactv1.Command) {
	t.Helper()
	twin := fixtureFSM(t)
	subs := cmd.GetBatch().GetCommands()
	data, err := raftfsm.Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var evs []raftfsm.Event
	fsm.SetObserver(func(ev raftfsm.Event) { evs = append(evs, ev) })
	for i := range uint64(2) {
		index := 100 + i
		evs = evs[:0]
		res, panicked := applyRecover(fsm, index, data)
		if panicked || res.Err != nil || len(res.Batch) != len(subs) {
			t.Fatalf("batch: panicked %v, result %+v for %d commands", panicked, res, len(subs))
		}
		for k, sub := range subs {
			got := res.Batch[k]
			if got.Err != nil && (raftfsm.ErrorCode(got.Err) == "" || got.Idempotent) {
				t.Errorf("command %d: result %+v: want a typed rule error and no idempotent flag", k, got)
			}
			if sub.GetBatch() != nil {
				if !errors.Is(got.Err, raftfsm.ErrInvalidCommand) {
					t.Errorf("command %d, a batch inside a batch: %v", k, got.Err)
				}
				continue
			}
			before := snapshotBytes(t, twin)
			sd, err := raftfsm.Encode(sub)
			if err != nil {
				t.Fatal(err)
			}
			alone, panicked := applyRecover(twin, index, sd)
			if panicked {
				t.Fatalf("command %d alone panicked", k)
			}
			if (alone.Err != nil || alone.Idempotent) && !bytes.Equal(before, snapshotBytes(t, twin)) {
				t.Errorf("command %d alone: result %+v: the state changed", k, alone)
			}
			if errText(alone.Err) != errText(got.Err) || alone.Idempotent != got.Idempotent || !proto.Equal(alone.Node, got.Node) {
				t.Errorf("command %d: in the batch %+v, alone %+v", k, got, alone)
			}
		}
		if !bytes.Equal(snapshotBytes(t, fsm), snapshotBytes(t, twin)) {
			t.Fatal("the batch left another state than its commands in entries of their own")
		}
		if len(evs) > 1 {
			t.Errorf("%d events for one entry", len(evs))
		}
		for _, ev := range evs {
			if ev.Index != index {
				t.Errorf("event index %d, want %d", ev.Index, index)
			}
			for _, e := range ev.Audit {
				if e.GetIndex() != index || e.GetAction() == "" || !slices.ContainsFunc(subs, func(c *pactv1.Command) bool {
					return e.GetAtUnixNano() == c.GetAtUnixNano() && e.GetActor() == c.GetActor() && e.GetSource() == c.GetSource() && e.GetCorrelationId() == c.GetCorrelationId()
				}) {
					t.Errorf("audit entry %v at index %d carries no command's stamp", e, index)
				}
			}
		}
		checkInvariants(t, fsm)
	}
}
