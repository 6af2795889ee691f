package raftnode

import (
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
)

// stallingTransport is an in-memory Raft transport whose outgoing
// AppendEntries (the leader's heartbeats, with no writes in flight) can be
// held until a given time: a journal that answers its peers late because
// a boot storm's handshakes hold its CPU. Injected in place of the real
// network transport, whose latency a test cannot set.
type stallingTransport struct {
	*raft.InmemTransport
	until *atomic.Int64 // unix nanoseconds; shared by the quorum
}

func (t *stallingTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if d := time.Until(time.Unix(0, t.until.Load())); d > 0 {
		time.Sleep(d)
	}
	return t.InmemTransport.AppendEntries(id, target, args, resp)
}

// AppendEntriesPipeline holds the pipeline too: a leader's replication
// sends on it every commit timeout (50 ms), and each answer counts as
// contact as much as a heartbeat's.
func (t *stallingTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.InmemTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return stallingPipeline{AppendPipeline: p, until: t.until}, nil
}

type stallingPipeline struct {
	raft.AppendPipeline
	until *atomic.Int64
}

func (p stallingPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if d := time.Until(time.Unix(0, p.until.Load())); d > 0 {
		time.Sleep(d)
	}
	return p.AppendPipeline.AppendEntries(args, resp)
}

// With the default Raft timing, a leader that hears from no follower for
// 1.5 s keeps leading: it steps down only when a quorum has been silent
// for the lease, as long as the heartbeat timeout (DefaultRaftTimeout,
// 2 s). hashicorp/raft's own 500 ms lease deposed a healthy leader in a
// 30,000-agent storm (its followers' answers 540 and 830 ms late), and so
// did a lease of 1 s in later storms, with answers up to 1.94 s late.
//
// In a testing/synctest bubble: raft's timers, the stalls and the watch run
// on the bubble's fake clock, so the timing is exact whatever the machine's
// load, and the test takes no wall time.
func TestLateHeartbeatsKeepTheLeaderWithTheDefaultTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			voters = 3
			stall  = 1500 * time.Millisecond
			stalls = 5
		)
		var until atomic.Int64
		var servers []raft.Server
		var trans []*stallingTransport
		for i := range voters {
			id := fmt.Sprintf("j%d", i+1)
			addr, tr := raft.NewInmemTransport(raft.ServerAddress(id))
			servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: addr, Suffrage: raft.Voter})
			trans = append(trans, &stallingTransport{InmemTransport: tr, until: &until})
		}
		c := &memCluster{t: t}
		for i, tr := range trans {
			for _, other := range trans {
				tr.Connect(other.LocalAddr(), other.InmemTransport)
			}
			c.nodes = append(c.nodes, newMemNodeWith(t, string(servers[i].ID), tr.InmemTransport, servers, func(cfg *Config) {
				cfg.Transport = tr
				cfg.RaftTimeout = 0 // the default timing, what a site runs
			}))
		}
		l := c.leader()
		term := l.hooks.Raft.CurrentTerm()

		for k := range stalls {
			until.Store(time.Now().Add(stall).UnixNano())
			// The stall, then a second of heartbeats answered at once.
			for end := time.Now().Add(stall + time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if !l.IsLeader() {
					t.Fatalf("%s stepped down in stall %d of %d, its followers silent for %v (term %d, now %d)", l.cfg.NodeID, k+1, stalls, stall, term, l.hooks.Raft.CurrentTerm())
				}
			}
		}
		if got := l.hooks.Raft.CurrentTerm(); got != term {
			t.Errorf("term went from %d to %d while heartbeats were late: an election ran", term, got)
		}
	})
}
