package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/pact-hpc/pact/internal/polltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// Nodes on hashicorp/raft's in-memory transport and stores: the node's own
// logic (proposals, the read barrier, the applied wait, the batcher,
// membership) without TLS or bbolt, which the journal's tests cover.

// memStore is raft's in-memory store answering a missing key as the bolt
// store does (the quorum id is read before Raft starts).
type memStore struct{ *raft.InmemStore }

func (s memStore) Get(k []byte) ([]byte, error) {
	v, err := s.InmemStore.Get(k)
	if err != nil {
		return nil, raftboltdb.ErrKeyNotFound
	}
	return v, nil
}

// batchSizes records the activation batches a node proposed.
type batchSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (*batchSizes) ObserveApply(string, time.Duration) {}
func (*batchSizes) HandshakeRefused(string, error)     {}
func (b *batchSizes) ObserveBatch(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, n)
}

func (b *batchSizes) get() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.sizes)
}

type liveNode struct {
	*Node
	trans   *raft.InmemTransport
	hooks   *Hooks
	batches *batchSizes
}

// memCluster is voters nodes bootstrapped together, connected in memory.
type memCluster struct {
	t     *testing.T
	nodes []*liveNode
}

// newMemNode starts journal id on trans; with servers it is bootstrapped
// as a member of that configuration, without it waits to be added.
func newMemNode(t *testing.T, id string, trans *raft.InmemTransport, servers []raft.Server) *liveNode {
	t.Helper()
	return newMemNodeWith(t, id, trans, servers, func(*Config) {})
}

// newMemNodeWith is newMemNode with tune applied to the node's Config last.
func newMemNodeWith(t *testing.T, id string, trans *raft.InmemTransport, servers []raft.Server, tune func(*Config)) *liveNode {
	t.Helper()
	store := memStore{raft.NewInmemStore()}
	snaps := raft.NewInmemSnapshotStore()
	if servers != nil {
		rc := raft.DefaultConfig()
		rc.LocalID = raft.ServerID(id)
		rc.Logger = hclog.NewNullLogger()
		if err := raft.BootstrapCluster(rc, store, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.DataDir = t.TempDir()
	cfg.Join = servers == nil
	cfg.FSM = raftfsm.New()
	cfg.Transport = trans
	cfg.Stores = &Stores{Log: store, Stable: store, Snapshots: snaps}
	cfg.RaftTimeout = 100 * time.Millisecond
	cfg.ActivationBatchMax = 8
	cfg.ActivationBatchWindow = time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Hooks = &Hooks{}
	batches := &batchSizes{}
	cfg.Metrics = batches
	tune(&cfg)
	n, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close %s: %v", id, err)
		}
	})
	return &liveNode{Node: n, trans: trans, hooks: cfg.Hooks, batches: batches}
}

func startMemCluster(t *testing.T, voters int) *memCluster {
	t.Helper()
	var servers []raft.Server
	var trans []*raft.InmemTransport
	for i := range voters {
		id := fmt.Sprintf("j%d", i+1)
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(id))
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: addr, Suffrage: raft.Voter})
		trans = append(trans, tr)
	}
	c := &memCluster{t: t}
	for i, tr := range trans {
		for _, other := range trans {
			tr.Connect(other.LocalAddr(), other)
		}
		c.nodes = append(c.nodes, newMemNode(t, string(servers[i].ID), tr, servers))
	}
	return c
}

// add starts a journal that waits to be added, connected to the others.
func (c *memCluster) add(id string) *liveNode {
	addr, tr := raft.NewInmemTransport(raft.ServerAddress(id))
	for _, n := range c.nodes {
		tr.Connect(n.trans.LocalAddr(), n.trans)
		n.trans.Connect(addr, tr)
	}
	n := newMemNode(c.t, id, tr, nil)
	c.nodes = append(c.nodes, n)
	return n
}

// leader waits for one node to lead and to have recorded the quorum id
// (a quorum bootstrapped without one gets it from its first leader), so
// nothing but the test writes to the log afterwards.
func (c *memCluster) leader() *liveNode {
	c.t.Helper()
	var l *liveNode
	polltest.Until(c.t, 10*time.Second, 10*time.Millisecond, func() bool {
		for _, n := range c.nodes {
			if n.IsLeader() {
				l = n
				return true
			}
		}
		return false
	}, "no leader elected")
	polltest.Until(c.t, 10*time.Second, 10*time.Millisecond, func() bool {
		id := l.fsm.Quorum().GetQuorumId()
		return id != "" && id == l.QuorumID()
	}, "the leader never recorded the quorum id")
	return l
}

func (c *memCluster) followers(leader *liveNode) []*liveNode {
	var out []*liveNode
	for _, n := range c.nodes {
		if n != leader {
			out = append(out, n)
		}
	}
	return out
}

var proposer = raftfsmtest.Proposer{Actor: "journal/test"}

// macOf is a MAC address of nodeID's own.
func macOf(nodeID string) string {
	var sum byte
	for _, c := range []byte(nodeID) {
		sum = sum*31 + c
	}
	return fmt.Sprintf("52:54:00:00:01:%02x", sum)
}

// register registers nodeID with hardware of its own (Propose stamps it).
func register(_ *Node, nodeID string) *pactv1.Command {
	return proposer.RegisterNode(nodeID, "", raftfsmtest.Hardware("S-"+nodeID, macOf(nodeID)))
}

func (n *liveNode) registered(nodeID string) bool {
	_, ok := n.fsm.Node(nodeID)
	return ok
}

// A proposal on the leader returns once applied there, and reaches every
// follower; a follower that cannot reach the leader's peer service (its
// address is not published) refuses a write retryably, writing nothing.
func TestProposeCommitsOnEveryNode(t *testing.T) {
	c := startMemCluster(t, 3)
	l := c.leader()
	res, err := l.Propose(context.Background(), register(l.Node, "n1"))
	if err != nil || res == nil {
		t.Fatalf("propose on the leader: %v, %v", res, err)
	}
	if !l.registered("n1") {
		t.Fatal("Propose returned before the leader applied the entry")
	}
	for _, f := range c.followers(l) {
		polltest.Until(t, 10*time.Second, 10*time.Millisecond, func() bool { return f.registered("n1") }, "%s never applied the entry", f.cfg.NodeID)
	}
	f := c.followers(l)[0]
	before := l.raft.LastIndex()
	if _, err := f.Propose(context.Background(), register(f.Node, "n2")); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("a follower that cannot reach the leader proposed: %v, want ErrNoLeader", err)
	}
	if l.raft.LastIndex() != before || l.registered("n2") {
		t.Fatal("a refused forward wrote to the log")
	}
}

// A newly elected leader answers no read until it has committed an entry of
// its own term: before, its state may lack writes the previous leader
// acknowledged.
func TestReadBarrierWaitsForTheNewLeadersTerm(t *testing.T) {
	requireHooks(t)
	c := startMemCluster(t, 3)
	old := c.leader()
	if err := old.ReadBarrier(context.Background()); err != nil {
		t.Fatalf("read barrier on a settled leader: %v", err)
	}
	next := c.followers(old)[0]
	// next commits what follows but applies nothing, so no barrier it
	// starts as leader can complete.
	release := make(chan struct{})
	hold := func() { <-release }
	next.hooks.BeforeApply.Store(&hold)
	released := sync.OnceFunc(func() { next.hooks.BeforeApply.Store(nil); close(release) })
	defer released()
	if _, err := old.Propose(context.Background(), register(old.Node, "n1")); err != nil {
		t.Fatal(err)
	}
	if err := old.hooks.Raft.LeadershipTransferToServer(raft.ServerID(next.cfg.NodeID), next.trans.LocalAddr()).Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	polltest.Until(t, 10*time.Second, 10*time.Millisecond, next.IsLeader, "%s never led", next.cfg.NodeID)

	// A cancelled context answers at once: a ready term is served without
	// waiting, an unready one is refused.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := next.ReadBarrier(cancelled); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("the new leader served a read before its term's barrier: %v, want ErrNoLeader", err)
	}
	released()
	polltest.Until(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return next.IsLeader() && next.ReadBarrier(cancelled) == nil
	}, "the new leader never became ready for reads")
	if !next.registered("n1") {
		t.Fatal("a read served by the new leader misses the previous leader's write")
	}
}

// waitApplied is true only once the FSM holds the index, not when Raft
// merely committed it.
func TestWaitAppliedFollowsTheFSM(t *testing.T) {
	requireHooks(t)
	c := startMemCluster(t, 3)
	l := c.leader()
	f := c.followers(l)[0]
	release := make(chan struct{})
	hold := func() { <-release }
	f.hooks.BeforeApply.Store(&hold)
	released := sync.OnceFunc(func() { f.hooks.BeforeApply.Store(nil); close(release) })
	defer released()
	if _, err := l.Propose(context.Background(), register(l.Node, "n1")); err != nil {
		t.Fatal(err)
	}
	index := l.raft.LastIndex()
	polltest.Until(t, 10*time.Second, 10*time.Millisecond, func() bool { return f.CommitIndex() >= index }, "the follower never learnt the commit")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if f.waitApplied(cancelled, index) {
		t.Fatal("waitApplied reported an entry the FSM has not applied")
	}
	released()
	if !f.waitApplied(context.Background(), index) || !f.registered("n1") {
		t.Fatal("waitApplied gave up on an entry being applied")
	}
}

// Activations arriving while a batch is in flight go together in the next
// batch, one Raft entry, and each caller gets its own result.
func TestBatcherGroupsActivationsWhileOneIsInFlight(t *testing.T) {
	requireHooks(t)
	c := startMemCluster(t, 3)
	l := c.leader()
	gate := make(chan struct{})
	sending := make(chan int, 4)
	beforeSend := func(n int) {
		sending <- n
		if n == 1 {
			<-gate
		}
	}
	queued := make(chan int, 16)
	onQueued := func(n int) { queued <- n }
	l.hooks.BatchBeforeSend.Store(&beforeSend)
	l.hooks.BatchQueued.Store(&onQueued)

	activate := func(nodeID string) *pactv1.Command {
		return proposer.Activate(nodeID, raftfsmtest.Hardware("S-"+nodeID, macOf(nodeID)), &pactv1.CertificateInfo{Serial: "01" + nodeID, SpkiSha256: "spki-" + nodeID, Der: []byte("placeholder"), NotAfterUnix: 1 << 40})
	}
	type outcome struct {
		id  string
		res *raftfsm.Result
		err error
	}
	out := make(chan outcome, 4)
	go func() {
		res, err := l.ProposeBatched(context.Background(), activate("a0"))
		out <- outcome{"a0", res, err}
	}()
	if n := <-sending; n != 1 {
		t.Fatalf("a lone activation went in a batch of %d", n)
	}
	before := l.raft.LastIndex()
	for i := 1; i <= 3; i++ {
		go func() {
			id := fmt.Sprintf("a%d", i)
			res, err := l.ProposeBatched(context.Background(), activate(id))
			out <- outcome{id, res, err}
		}()
	}
	for n := range queued {
		if n == 3 {
			break
		}
	}
	close(gate)
	if n := <-sending; n != 3 {
		t.Fatalf("the activations that waited went in a batch of %d, want 3", n)
	}
	for range 4 {
		o := <-out
		// None of them is registered: each is refused on its own.
		if !errors.Is(o.err, raftfsm.ErrNodeNotEnrolled) || o.res == nil {
			t.Fatalf("activation %s: %v, %v; want its own refusal", o.id, o.res, o.err)
		}
	}
	if got := l.batches.get(); !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("batches %v, want [1 3]", got)
	}
	// The lone activation's entry and one for the three (the first was
	// held before it was proposed).
	if entries := l.raft.LastIndex() - before; entries != 2 {
		t.Fatalf("four activations in two batches took %d log entries, want 2", entries)
	}
}

// A journal is added as a non-voter and gets the state; removal takes a
// voter out of the configuration; a follower refuses both, retryably.
func TestMembershipAddAndRemove(t *testing.T) {
	c := startMemCluster(t, 3)
	l := c.leader()
	if _, err := l.Propose(context.Background(), register(l.Node, "n1")); err != nil {
		t.Fatal(err)
	}
	j4 := c.add("j4")
	f := c.followers(l)[0]
	if err := f.AddNonvoter("j4", string(j4.trans.LocalAddr())); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("a follower added a journal: %v, want ErrNoLeader", err)
	}
	if err := f.NotLeaderError(); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("NotLeaderError: %v", err)
	}
	if err := l.AddNonvoter("j4", string(j4.trans.LocalAddr())); err != nil {
		t.Fatalf("add: %v", err)
	}
	polltest.Until(t, 10*time.Second, 10*time.Millisecond, func() bool { return j4.registered("n1") }, "the added journal never got the state")
	if l.IsVoter("j4") {
		t.Fatal("an added journal voted before it was promoted")
	}
	servers, _, err := l.Servers()
	if err != nil || !slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == "j4" && s.Suffrage == raft.Nonvoter }) {
		t.Fatalf("configuration %v, %v: want j4 as a non-voter", servers, err)
	}

	gone := f.cfg.NodeID
	if err := l.RemoveServer(gone); err != nil {
		t.Fatalf("remove: %v", err)
	}
	servers, _, err = l.Servers()
	if err != nil || slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == gone }) || l.IsVoter(gone) {
		t.Fatalf("configuration %v, %v: %s still in it", servers, err, gone)
	}
	// Two voters remain and commit.
	if _, err := l.Propose(context.Background(), register(l.Node, "n2")); err != nil {
		t.Fatalf("propose after the removal: %v", err)
	}
}
