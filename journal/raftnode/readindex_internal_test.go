package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/polltest"
)

// memFSM records the commands it applied.
type memFSM struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (f *memFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen[string(l.Data)] = true
	return nil
}

func (f *memFSM) has(cmd string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[cmd]
}

func (*memFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("no snapshots here") }
func (*memFSM) Restore(io.ReadCloser) error         { return errors.New("no snapshots here") }

// lossyNet decides which AppendEntries requests are lost on the way.
type lossyNet struct {
	mu   sync.Mutex
	drop func(from raft.ServerAddress, req *raft.AppendEntriesRequest) bool
}

func (n *lossyNet) setDrop(drop func(raft.ServerAddress, *raft.AppendEntriesRequest) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.drop = drop
}

func (n *lossyNet) lost(from raft.ServerAddress, req *raft.AppendEntriesRequest) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.drop != nil && n.drop(from, req)
}

var errLost = errors.New("lost by the test's network")

// lossyTransport is Raft's in-memory transport with the test deciding which
// outgoing AppendEntries are lost. Pipelining is off, so every one passes
// through AppendEntries.
type lossyTransport struct {
	*raft.InmemTransport
	net *lossyNet
}

func (t *lossyTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (t *lossyTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.net.lost(t.LocalAddr(), args) {
		return errLost
	}
	return t.InmemTransport.AppendEntries(id, target, args, resp)
}

type memNode struct {
	r     *raft.Raft
	fsm   *memFSM
	addr  raft.ServerAddress
	reads *leaderReads
}

// startMemQuorum starts n Raft servers on the lossy in-memory network,
// each with its leaderReads watching its leadership as the journal's does.
func startMemQuorum(t *testing.T, n int, net *lossyNet, wait time.Duration) []*memNode {
	t.Helper()
	nodes := make([]*memNode, n)
	trans := make([]*raft.InmemTransport, n)
	var servers []raft.Server
	for i := range nodes {
		id := raft.ServerID(fmt.Sprintf("m%d", i+1))
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(id))
		trans[i] = tr
		nodes[i] = &memNode{fsm: &memFSM{seen: map[string]bool{}}, addr: addr}
		servers = append(servers, raft.Server{ID: id, Address: addr, Suffrage: raft.Voter})
	}
	for i := range trans {
		for k := range trans {
			if i != k {
				trans[i].Connect(trans[k].LocalAddr(), trans[k])
			}
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, nd := range nodes {
		rc := raft.DefaultConfig()
		rc.LocalID = servers[i].ID
		rc.Logger = newRaftLogger(slog.New(slog.DiscardHandler))
		// Raft's own defaults: a leader on two loaded cores under -race
		// must not lose its lease while the test is not about elections.
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = time.Second, time.Second, time.Second
		rc.CommitTimeout = 5 * time.Millisecond
		logs, stable, snaps := raft.NewInmemStore(), raft.NewInmemStore(), raft.NewInmemSnapshotStore()
		tr := &lossyTransport{InmemTransport: trans[i], net: net}
		if err := raft.BootstrapCluster(rc, logs, stable, snaps, tr, raft.Configuration{Servers: servers}); err != nil {
			t.Fatal(err)
		}
		r, err := raft.NewRaft(rc, nd.fsm, logs, stable, snaps, tr)
		if err != nil {
			t.Fatal(err)
		}
		nd.r, nd.reads = r, newLeaderReads(r, wait)
		wg.Add(1)
		go func() {
			defer wg.Done()
			nd.reads.watch(stop)
		}()
	}
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		for _, nd := range nodes {
			_ = nd.r.Shutdown().Error()
		}
	})
	return nodes
}

// leaderOf waits until exactly one of nodes leads and returns it.
func leaderOf(t *testing.T, nodes []*memNode) *memNode {
	t.Helper()
	var leader *memNode
	polltest.Until(t, 10*time.Second, 5*time.Millisecond, func() bool {
		var leaders []*memNode
		for _, nd := range nodes {
			if nd.r.State() == raft.Leader {
				leaders = append(leaders, nd)
			}
		}
		if len(leaders) != 1 {
			return false
		}
		leader = leaders[0]
		return true
	}, "no single leader within 10s")
	return leader
}

// A write the previous leader acknowledged is in the read index of the
// next leader from its first moment, or the read is refused (retryably):
// never answered from before the write. The old leader commits the write
// and dies before the followers learn that it committed; the new leader's
// own commit index is then below the write until it commits an entry of
// its term, which the test holds back.
//
// In a testing/synctest bubble (raft on an in-memory network): elections
// and timeouts run on the bubble's fake clock, so the stale leader the test
// sets up does not depend on the machine's load (on a loaded machine, on
// the wall clock, the new leader could commit before the test looked).
func TestReadIndexOfANewLeaderCoversThePreviousLeadersWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := &lossyNet{}
		nodes := startMemQuorum(t, 3, net, 300*time.Millisecond)
		old := leaderOf(t, nodes)
		if err := old.r.Apply([]byte("before"), 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}

		// The write reaches the followers, but no news that it committed does.
		write := old.r.LastIndex() + 1
		oldTerm := old.r.CurrentTerm()
		net.setDrop(func(from raft.ServerAddress, req *raft.AppendEntriesRequest) bool {
			return from == old.addr && req.LeaderCommitIndex >= write
		})
		f := old.r.Apply([]byte("acknowledged"), 5*time.Second)
		if err := f.Error(); err != nil {
			t.Fatalf("the write was not acknowledged: %v", err)
		}
		if f.Index() != write {
			t.Fatalf("write at index %d, want %d", f.Index(), write)
		}
		var survivors []*memNode
		for _, nd := range nodes {
			if nd != old {
				survivors = append(survivors, nd)
				if c := nd.r.CommitIndex(); c >= write {
					t.Fatalf("follower %s learned commit index %d >= %d: the test no longer sets up a lagging follower", nd.addr, c, write)
				}
			}
		}

		// The old leader dies; the next cannot commit anything of its term.
		// The old leader's news of the commit stays lost: its shutdown
		// sends each follower one last AppendEntries, which carries it.
		net.setDrop(func(from raft.ServerAddress, req *raft.AppendEntriesRequest) bool {
			return from == old.addr && req.LeaderCommitIndex >= write || req.Term > oldTerm && len(req.Entries) > 0
		})
		if err := old.r.Shutdown().Error(); err != nil {
			t.Fatal(err)
		}
		next := leaderOf(t, survivors)
		if c := next.r.CommitIndex(); c >= write {
			t.Fatalf("new leader's commit index %d already covers the write at %d: the test no longer sets up a stale leader", c, write)
		}
		// A guard against a hang, not a measure of speed.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		idx, err := next.reads.readIndex(ctx)
		switch {
		case err == nil && idx < write:
			t.Fatalf("new leader's read index %d misses the write at %d the previous leader acknowledged", idx, write)
		case err == nil:
			t.Fatalf("read index %d without an entry of the new term committed", idx)
		case !errors.Is(err, ErrNoLeader):
			t.Fatalf("got %v, want a retryable NO_LEADER", err)
		}
		t.Logf("before the new term's first commit: %v", err)

		// Once the new leader can commit, the read index covers the write, and
		// the state read at it has the write.
		net.setDrop(nil)
		idx, err = next.reads.readIndex(ctx)
		if err != nil {
			t.Fatalf("read index once the new leader can commit: %v", err)
		}
		if idx < write {
			t.Fatalf("read index %d misses the write at %d", idx, write)
		}
		var applied polltest.Last
		polltest.Until(t, 10*time.Second, time.Millisecond, func() bool {
			applied.Value = next.r.AppliedIndex()
			return next.r.AppliedIndex() >= idx
		}, "applied %v, not yet the read index %d", &applied, idx)
		if !next.fsm.has("acknowledged") {
			t.Fatal("state at the read index lacks the acknowledged write")
		}

		// The barrier runs once a term, not once a read.
		last := next.r.LastIndex()
		for range 5 {
			if _, err := next.reads.readIndex(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got := next.r.LastIndex(); got != last {
			t.Errorf("reads appended to the log: last index %d, was %d", got, last)
		}
	})
}

// A journal that does not lead serves no read index.
func TestReadIndexRefusedByAFollower(t *testing.T) {
	nodes := startMemQuorum(t, 3, &lossyNet{}, 300*time.Millisecond)
	leader := leaderOf(t, nodes)
	for _, nd := range nodes {
		if nd == leader {
			continue
		}
		if _, err := nd.reads.readIndex(context.Background()); !errors.Is(err, ErrNoLeader) {
			t.Errorf("follower %s: got %v, want NO_LEADER", nd.addr, err)
		}
	}
	if _, err := leader.reads.readIndex(context.Background()); err != nil {
		t.Errorf("leader: %v", err)
	}
}
