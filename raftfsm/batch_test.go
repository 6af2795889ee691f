package raftfsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// agent returns the proposer stamp of an enrollment by nodeID's agent, with
// a correlation id of its own, as each command of a batch carries.
func agent(nodeID string, second int64) raftfsmtest.Proposer {
	return raftfsmtest.Proposer{Actor: "agent/" + nodeID, AtUnixNano: (t0+second)*1e9 + 7, Source: "10.0.0.1:4000", CorrelationID: "corr-" + nodeID + fmt.Sprint(second)}
}

// A batch applies its commands in order, each exactly as if it had an entry
// of its own: the same results, the same state, and an audit entry for each
// command that changed something. A refusal refuses that command alone.
func TestBatch(t *testing.T) {
	c1, c2, c3 := cert("s-1", "k-1"), cert("s-2", "k-2"), cert("s-3", "k-3")
	tests := []struct {
		name string
		cmds []*pactv1.Command
		want []error // per command; nil: applied
		idem []bool  // per command, when any is idempotent
	}{
		{"three activations",
			[]*pactv1.Command{agent("node-1", 1).Activate("node-1", hw1(), c1), agent("node-2", 2).Activate("node-2", hw2(), c2), agent("node-3", 3).Activate("node-3", hw3(), c3)},
			[]error{nil, nil, nil}, nil},
		{"one node twice with the same key: the second is a retry",
			[]*pactv1.Command{agent("node-1", 1).Activate("node-1", hw1(), c1), agent("node-1", 2).Activate("node-1", hw1(), c1)},
			[]error{nil, nil}, []bool{false, true}},
		{"one node twice with two keys: the second is refused",
			[]*pactv1.Command{agent("node-1", 1).Activate("node-1", hw1(), c1), agent("node-1", 2).Activate("node-1", hw1(), cert("s-1b", "k-1b"))},
			[]error{nil, raftfsm.ErrAlreadyActive}, nil},
		{"one key for two nodes: the second is refused",
			[]*pactv1.Command{agent("node-1", 1).Activate("node-1", hw1(), c1), agent("node-2", 2).Activate("node-2", hw2(), cert("s-2", "k-1"))},
			[]error{nil, raftfsm.ErrKeyInUse}, nil},
		{"hardware of two nodes among good activations",
			[]*pactv1.Command{
				agent("node-1", 1).Activate("node-1", hw1(), c1),
				agent("node-2", 2).Activate("node-2", raftfsmtest.Hardware("S2", mac3, mac4), c2),
				agent("node-3", 3).Activate("node-3", hw3(), c3),
			},
			[]error{nil, raftfsm.ErrHardwareIdentityConflict, nil}, nil},
		{"hardware now of another node",
			[]*pactv1.Command{agent("node-2", 1).Activate("node-2", hw1(), c2), agent("node-1", 2).Activate("node-1", hw1(), c1)},
			[]error{raftfsm.ErrHardwareIdentityConflict, nil}, nil},
		{"hardware registered to another node earlier in the batch",
			[]*pactv1.Command{
				admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", mac9)),
				admin.RegisterNode("node-8", "", raftfsmtest.Hardware("S8", mac9)),
				agent("node-9", 3).Activate("node-9", raftfsmtest.Hardware("S9", mac9), c1),
			},
			[]error{nil, raftfsm.ErrHardwareIdentityConflict, nil}, nil},
		{"decommissioned earlier in the batch",
			[]*pactv1.Command{admin.Decommission("node-2"), agent("node-2", 2).Activate("node-2", hw2(), c2)},
			[]error{nil, raftfsm.ErrNodeRevoked}, nil},
		{"decommissioned later in the batch",
			[]*pactv1.Command{agent("node-1", 1).Activate("node-1", hw1(), c1), admin.Decommission("node-1")},
			[]error{nil, nil}, nil},
		{"an invalid command among good ones",
			[]*pactv1.Command{agent("node-1", 1).Activate("node-1", hw1(), c1), agent("node-2", 2).Activate("node-2", hw2(), nil), agent("node-3", 3).Activate("node-3", hw3(), c3)},
			[]error{nil, raftfsm.ErrInvalidCommand, nil}, nil},
		{"a batch inside a batch",
			[]*pactv1.Command{agent("node-1", 1).Activate("node-1", hw1(), c1), journal.Batch(agent("node-2", 2).Activate("node-2", hw2(), c2))},
			[]error{nil, raftfsm.ErrInvalidCommand}, nil},
		{"every command refused",
			[]*pactv1.Command{agent("node-9", 1).Activate("node-9", raftfsmtest.Hardware("S9", mac9), c1), agent("node-2", 2).Activate("node-2", hw2(), nil)},
			[]error{raftfsm.ErrNodeNotEnrolled, raftfsm.ErrInvalidCommand}, nil},
		{"empty", nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			batched, ab := newRegistry(t)
			single, as := newRegistry(t)
			before := snapshotBytes(t, batched)
			res := ab.Apply(journal.Batch(tt.cmds...))
			if res.Err != nil || res.Node != nil || len(res.Batch) != len(tt.cmds) {
				t.Fatalf("batch result: err %v, node %v, %d results for %d commands", res.Err, res.Node, len(res.Batch), len(tt.cmds))
			}
			refusedAll := true
			for i, cmd := range tt.cmds {
				got := res.Batch[i]
				if want := tt.want[i]; (want == nil) != (got.Err == nil) || !errors.Is(got.Err, want) {
					t.Errorf("command %d: err = %v, want %v", i, got.Err, want)
				}
				refusedAll = refusedAll && got.Err != nil
				if tt.idem != nil && got.Idempotent != tt.idem[i] {
					t.Errorf("command %d: idempotent = %v, want %v", i, got.Idempotent, tt.idem[i])
				}
				if cmd.GetBatch() != nil {
					// Refused in a batch; alone it would be a batch entry
					// of its own, so there is nothing to compare.
					continue
				}
				// The same command in an entry of its own, after the same
				// predecessors, answers the same.
				alone := as.Apply(cmd)
				if fmt.Sprint(alone.Err) != fmt.Sprint(got.Err) || alone.Idempotent != got.Idempotent || !proto.Equal(alone.Node, got.Node) {
					t.Errorf("command %d: in a batch %v/%v/%v, alone %v/%v/%v", i, got.Err, got.Idempotent, got.Node, alone.Err, alone.Idempotent, alone.Node)
				}
			}
			if !proto.Equal(raftfsm.StateWithoutAuditIndex(batched), raftfsm.StateWithoutAuditIndex(single)) {
				t.Error("the batch left another state than its commands applied one entry each")
			}
			if refusedAll && !bytes.Equal(before, snapshotBytes(t, batched)) {
				t.Error("a batch whose every command was refused changed the state")
			}
			if batched.AppliedIndex() != 4 {
				t.Errorf("applied index %d, want 4: a batch is one entry", batched.AppliedIndex())
			}
		})
	}
}

// One batch entry is one Event: every node it changed, in order, and an
// audit entry per command that changed something, stamped with the batch's
// index and that command's own time, actor, source and correlation id.
func TestBatchEventAndAudit(t *testing.T) {
	f, a := newRegistry(t)
	var events []raftfsm.Event
	f.SetObserver(func(ev raftfsm.Event) { events = append(events, ev) })
	cmds := []*pactv1.Command{
		agent("node-2", 2).Activate("node-2", hw2(), cert("s-2", "k-2")),
		agent("node-9", 3).Activate("node-9", raftfsmtest.Hardware("S9", mac9), cert("s-9", "k-9")), // refused
		agent("node-1", 1).Activate("node-1", hw1(), cert("s-1", "k-1")),
	}
	a.Apply(journal.Batch(cmds...))
	if len(events) != 1 {
		t.Fatalf("%d events for one batch entry, want 1", len(events))
	}
	ev := events[0]
	if ev.Index != 4 || fmt.Sprint(ev.NodeIDs) != "[node-2 node-1]" || len(ev.Audit) != 2 {
		t.Fatalf("event index %d, nodes %v, %d audit entries; want 4, [node-2 node-1], 2", ev.Index, ev.NodeIDs, len(ev.Audit))
	}
	for i, c := range []*pactv1.Command{cmds[0], cmds[2]} {
		e := ev.Audit[i]
		if e.GetIndex() != 4 || e.GetAtUnixNano() != c.GetAtUnixNano() || e.GetActor() != c.GetActor() ||
			e.GetSource() != c.GetSource() || e.GetCorrelationId() != c.GetCorrelationId() || e.GetNodeId() != c.GetActivate().GetNodeId() {
			t.Errorf("audit entry %d = %v, want index 4 and the stamp of %v", i, e, c)
		}
	}
	if got := f.Audit("", 0, 100); len(got) != 5 { // three registrations, two enrollments
		t.Errorf("registry holds %d audit entries, want 5", len(got))
	}
}

// Replicas applying the same log of batches (duplicates, conflicts and
// refusals included) reach byte-identical snapshots and give identical
// results, and a replica restored from that snapshot is the same again.
func TestBatchReplicasAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 42)) // a fixed log: the test is the same every run
	const nodes = 40
	mac := func(i int) string { return fmt.Sprintf("02:00:00:00:01:%02x", i) }
	var log [][]byte
	add := func(cmd *pactv1.Command) {
		data, err := raftfsm.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, data)
	}
	for i := range nodes {
		add(admin.RegisterNode(fmt.Sprintf("n-%02d", i), "", raftfsmtest.Hardware(fmt.Sprintf("B%02d", i), mac(i))))
	}
	for b := range 12 {
		var cmds []*pactv1.Command
		for k := range 1 + rng.IntN(20) {
			i := rng.IntN(nodes)
			id := fmt.Sprintf("n-%02d", i)
			p := agent(id, int64(100*b+k))
			switch rng.IntN(6) {
			case 0: // another node's hardware
				cmds = append(cmds, p.Activate(id, raftfsmtest.Hardware(fmt.Sprintf("B%02d", (i+1)%nodes), mac(i)), cert(fmt.Sprintf("s-%d-%d", b, k), "k-"+id)))
			case 1: // a key shared with another node
				cmds = append(cmds, p.Activate(id, raftfsmtest.Hardware(fmt.Sprintf("B%02d", i), mac(i)), cert(fmt.Sprintf("s-%d-%d", b, k), "shared")))
			case 2:
				cmds = append(cmds, admin.Decommission(id))
			default: // the node's own key, often twice in one batch
				cmds = append(cmds, p.Activate(id, raftfsmtest.Hardware(fmt.Sprintf("B%02d", i), mac(i)), cert(fmt.Sprintf("s-%d-%d", b, k), fmt.Sprintf("k-%s-%d", id, rng.IntN(2)))))
			}
		}
		add(journal.Batch(cmds...))
	}
	apply := func(f *raftfsm.FSM) []string {
		var out []string
		for i, data := range log {
			res := f.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}).(*raftfsm.Result)
			for _, r := range append([]*raftfsm.Result{res}, res.Batch...) {
				nb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(r.Node)
				out = append(out, fmt.Sprintf("%v|%v|%x", r.Err, r.Idempotent, nb))
			}
		}
		return out
	}
	a, b := raftfsm.New(), raftfsm.New()
	ra, rb := apply(a), apply(b)
	if fmt.Sprint(ra) != fmt.Sprint(rb) {
		t.Fatal("two replicas gave different results for the same log")
	}
	sa, sb := snapshotBytes(t, a), snapshotBytes(t, b)
	if !bytes.Equal(sa, sb) {
		t.Fatal("two replicas that applied the same log have different snapshots")
	}
	c := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(c, sa); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, c), sa) {
		t.Fatal("a replica restored from the snapshot differs")
	}
	refused, applied := 0, 0
	for _, r := range ra {
		if r[:5] == "<nil>" {
			applied++
		} else {
			refused++
		}
	}
	if refused == 0 || applied == 0 {
		t.Fatalf("the log exercises too little: %d applied, %d refused", applied, refused)
	}
}

// A batch holding a command this version does not know stops the FSM at
// the batch's entry before any of it is applied; one marked ignorable is
// skipped and the rest applied.
func TestBatchWithUnknownCommand(t *testing.T) {
	register := admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", mac9))
	t.Run("ignorable", func(t *testing.T) {
		f := raftfsm.New()
		a := &raftfsmtest.Applier{FSM: f}
		res := a.Apply(journal.Batch(register, &pactv1.Command{AtUnixNano: 1, Actor: "journal/j9", Ignorable: true}))
		if len(res.Batch) != 2 || res.Batch[0].Err != nil || res.Batch[1].Err != nil || f.Halted() != "" {
			t.Fatalf("results %v, halted %q", res.Batch, f.Halted())
		}
		if _, ok := f.Node("node-9"); !ok {
			t.Fatal("the known command of the batch was not applied")
		}
	})
	t.Run("not ignorable", func(t *testing.T) {
		f := raftfsm.New()
		halted := make(chan string, 1)
		f.SetHaltHandler(func(_ uint64, reason string) { halted <- reason })
		data, err := raftfsm.Encode(journal.Batch(register, &pactv1.Command{AtUnixNano: 1, Actor: "journal/j9"}))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan *raftfsm.Result, 1)
		go func() { done <- f.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: data}).(*raftfsm.Result) }()
		select {
		case <-halted:
		case <-time.After(10 * time.Second): // a hang guard only
			t.Fatal("no halt reported")
		}
		f.Release()
		if res := <-done; !errors.Is(res.Err, raftfsm.ErrHalted) {
			t.Errorf("result %v, want ErrHalted", res.Err)
		}
		if _, ok := f.Node("node-9"); ok || f.AppliedIndex() != 0 {
			t.Errorf("a halted batch was partly applied: node-9 present %v, applied index %d", ok, f.AppliedIndex())
		}
	})
}
