// Package raftnode is a journal's Raft node: hashicorp/raft with its bolt
// store, the Raft port over mutual TLS with the quorum hello, proposals
// and their forwarding to the leader, the read barrier, the activation
// batcher, the write watchdog and the membership loops. The journal's
// services (package journal) call it; it knows nothing of them.
package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/bbolt"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/raftfsm"
)

// Node is one journal's Raft node.
type Node struct {
	cfg  Config
	log  *slog.Logger
	fsm  *raftfsm.FSM
	raft *raft.Raft
	// logs is the Raft log behind a cache of recent entries; closeStore
	// closes the store under it (last).
	logs       raft.LogStore
	closeStore func() error
	metrics    Metrics
	peers      *peerConns
	raftAddr   string // as other journals reach it
	// netTrans is the Raft transport of a member of a quorum (nil alone).
	netTrans *raft.NetworkTransport
	// quorum is this journal's quorum identity (quorum.go); peerRefused
	// counts the journal peers it refused.
	quorum      quorumIdentity
	peerRefused *prometheus.CounterVec
	// raftStarted is raft once it runs, for the Raft port's goroutines,
	// which start before it.
	raftStarted atomic.Pointer[raft.Raft]

	// appliedSignal wakes callers waiting for an index to be applied.
	appliedSignal appliedSignal
	// reads serves the Raft read index, as leader (readindex.go).
	reads *leaderReads
	// hooks are a test's (Config.Hooks), or none.
	hooks        *Hooks
	snapMu       sync.Mutex // guards the two below (restoredThrough)
	snapRestores uint64
	snapIndex    uint64

	// watchdog cuts this journal off while it leads with a Raft store
	// write stuck (watchdog.go).
	watchdog writeWatchdog
	// halted says why the journal stopped serving; promoteNow wakes
	// promoteLoop after an add; nonvoterSince is when this journal first
	// saw each current non-voter.
	halted        haltState
	promoteNow    chan struct{}
	nonvoterMu    sync.Mutex
	nonvoterSince map[string]time.Time

	// logScan is what removalLoop has read of the log (knownJournals).
	logScan logScan
	// levels is what the last feature level check saw (level.go).
	levels levelView

	// batcher groups enrollment activations into one Raft entry (nil
	// when ActivationBatchMax is 1).
	batcher *batcher

	stopOnce sync.Once
	stop     chan struct{}
	wg       sync.WaitGroup
}

// New opens the Raft stores, bootstraps a new quorum (after agreeing on
// its id with the other founding journals) or joins one, and starts Raft
// and the node's loops. ctx stops it while an empty journal of a new
// quorum waits for its InitialCluster peers to answer. The node serves
// peers once Serve is called.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.InitialCluster = append([]Peer(nil), cfg.InitialCluster...)
	n := &Node{
		cfg:           cfg,
		log:           cfg.Logger,
		fsm:           cfg.FSM,
		metrics:       cfg.Metrics,
		stop:          make(chan struct{}),
		promoteNow:    make(chan struct{}, 1),
		nonvoterSince: map[string]time.Time{},
		peerRefused:   newPeerRefusedCounter(),
	}
	if n.metrics == nil {
		n.metrics = noMetrics{}
	}
	n.hooks = cfg.Hooks
	if n.hooks == nil {
		n.hooks = &Hooks{}
	}
	n.halted.removed = make(chan struct{})
	n.watchdog.watch = newWriteWatch(cfg.WatchdogClock, n.hooks)
	n.watchdog.probe = &diskProbe{path: filepath.Join(cfg.DataDir, probeFile), clock: n.watchdog.watch.clock, hooks: n.hooks}
	n.watchdog.sched = newSchedWatch().longestWait
	n.peers = newPeerConns(n)
	if cfg.ActivationBatchMax > 1 {
		n.batcher = newBatcher(cfg.ActivationBatchMax, cfg.ActivationBatchWindow, cfg.Clock, n.stop, n.sendBatch, n.hooks)
	}
	n.fsm.SetHaltHandler(n.onFSMHalt)
	n.fsm.SetObserver(n.onApply)
	if err := n.startRaft(ctx); err != nil {
		return nil, err
	}
	n.hooks.Raft = n.raft
	n.hooks.CheckWrites = n.checkWrites
	n.hooks.DiskAnsweredSince = n.watchdog.probe.answeredSince
	n.hooks.WritesInFlight = func() int {
		_, inFlight := n.watchdog.watch.oldest(n.watchdog.watch.clock.Now())
		return inFlight
	}
	n.hooks.ClaimQuorumID = func(id string) {
		n.quorum.mu.Lock()
		n.quorum.id = id
		n.quorum.mu.Unlock()
	}
	n.hooks.PeerRefused = n.peerRefused
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.reads.watch(n.stop)
	}()
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		n.quorumLoop()
	}()
	go func() {
		defer n.wg.Done()
		n.levelLoop()
	}()
	if n.batcher != nil {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.batcher.run()
		}()
	}
	// From the start: a removed journal restarted with its old state may
	// never find a leader, and must learn it was removed while it waits;
	// a leader's write may stick before the journal serves.
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		n.removalLoop()
	}()
	go func() {
		defer n.wg.Done()
		n.watchdogLoop()
	}()
	return n, nil
}

type noMetrics struct{}

func (noMetrics) ObserveApply(string, time.Duration) {}
func (noMetrics) ObserveBatch(int)                   {}
func (noMetrics) HandshakeRefused(string, error)     {}

// openStores opens the bolt store and the file snapshots in DataDir, or
// takes the injected ones. fresh says raft.db did not exist before.
func (n *Node) openStores() (s Stores, closeStore func() error, fresh bool, err error) {
	if st := n.cfg.Stores; st != nil {
		return *st, func() error { return nil }, false, nil
	}
	_, statErr := os.Stat(filepath.Join(n.cfg.DataDir, "raft.db"))
	fresh = errors.Is(statErr, os.ErrNotExist)
	store, err := raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(n.cfg.DataDir, "raft.db"),
		// What etcd runs bbolt with: the freelist is rebuilt when the file
		// is opened instead of written with every commit, and kept as a
		// map, which stays fast as the log grows between snapshots.
		BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if errors.Is(err, bbolt.ErrTimeout) {
		return s, nil, false, fmt.Errorf("%w by another pact-journal: %s (its raft.db is locked); stop that journal, or give this one its own --data-dir", ErrDataDirInUse, n.cfg.DataDir)
	}
	if err != nil {
		return s, nil, false, fmt.Errorf("journal: open raft store: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(n.cfg.DataDir, 2, newRaftLogger(n.log))
	if err != nil {
		store.Close()
		return s, nil, false, fmt.Errorf("journal: open snapshot store: %w", err)
	}
	return Stores{Log: store, Stable: store, Snapshots: snaps}, store.Close, fresh, nil
}

func (n *Node) startRaft(ctx context.Context) error {
	st, closeStore, freshStore, err := n.openStores()
	if err != nil {
		return err
	}
	store, stable, snaps := st.Log, st.Stable, st.Snapshots
	rc := raft.DefaultConfig()
	// Proposals arriving together (a boot storm) go into one log write and
	// one AppendEntries instead of one each.
	rc.BatchApplyCh = true
	rc.LocalID = raft.ServerID(n.cfg.NodeID)
	rc.Logger = newRaftLogger(n.log)
	rc.SnapshotThreshold = n.cfg.RaftSnapshotThreshold
	rc.TrailingLogs = n.cfg.RaftTrailingLogs
	if n.cfg.RaftSnapshotInterval > 0 {
		rc.SnapshotInterval = n.cfg.RaftSnapshotInterval
	}
	// The lease is as long as the heartbeat timeout, not hashicorp/raft's
	// half of it: a leader steps down when it has not heard from a quorum
	// within the lease, and a journal saturated by a boot storm's
	// handshakes answered heartbeats 540-830 ms late, so a 500 ms lease
	// deposed a healthy leader (docs/benchmarks.md, ninth round). Safety
	// does not rest on the lease (reads go through a read index, writes
	// through a commit); it decides how soon a cut-off leader stops
	// answering, and no follower elects another sooner than this anyway.
	// The timeouts themselves are twice hashicorp/raft's (DefaultRaftTimeout).
	t := n.cfg.RaftTimeout
	if t <= 0 {
		t = DefaultRaftTimeout
	}
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = t, t, t
	existing, err := raft.HasExistingState(store, stable, snaps)
	if err != nil {
		closeStore()
		return fmt.Errorf("journal: inspect raft state: %w", err)
	}
	if err := n.quorum.load(stable, existing); err != nil {
		closeStore()
		return err
	}
	if !existing && !n.cfg.Join && len(n.cfg.InitialCluster) > 1 {
		// A founding journal holds its bootstrap candidate before its
		// Raft port answers a probe: a co-founder that asked in between
		// would take it for a journal waiting to join (no candidate, no
		// state) and refuse to bootstrap.
		if err := n.quorum.startBootstrap(stable); err != nil {
			closeStore()
			return err
		}
	}
	addr, raftTrans, err := n.raftTransport()
	if err != nil {
		closeStore()
		return err
	}
	n.hooks.raftListening()
	// On every failure from here the Raft listener and its goroutines go
	// with the store: New returns no node to Close.
	started := false
	defer func() {
		if c, ok := raftTrans.(raft.WithClose); ok && !started {
			_ = c.Close()
		}
	}()
	if !existing && !n.cfg.Join && n.cfg.RaftListen != "" && len(n.cfg.InitialCluster) == 0 {
		closeStore()
		return fmt.Errorf("%w: --raft-listen is set but neither --initial-cluster nor --join: give --initial-cluster with every voter of a new quorum (this journal included, e.g. %s=%s), or --join to wait to be added to a running one (pact journal add)", ErrNoCluster, n.cfg.NodeID, addr)
	}
	if !existing && !n.cfg.Join {
		// A new quorum's id: agreed with the other founding journals (who
		// must all answer, and none may belong to a quorum already), or
		// minted for a quorum of one.
		var qerr error
		if len(n.cfg.InitialCluster) > 1 {
			_, qerr = n.agreeBootstrap(ctx, stable)
		} else if n.quorum.get() == "" {
			qerr = n.quorum.set(mintQuorumID())
		}
		if qerr != nil {
			closeStore()
			if freshStore && errors.Is(qerr, ErrBootstrapRefused) {
				// Leave the directory as empty as it was found, so the
				// journal can be started with --join on it as it is.
				_ = os.Remove(filepath.Join(n.cfg.DataDir, "raft.db"))
				_ = os.Remove(filepath.Join(n.cfg.DataDir, "snapshots")) // only if empty
			}
			return qerr
		}
		n.log.Info("bootstrapping a new quorum", logkey.QuorumID, n.quorum.get(), logkey.Members, max(1, len(n.cfg.InitialCluster)))
		cfg := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: addr, Suffrage: raft.Voter}}}
		if len(n.cfg.InitialCluster) > 0 {
			cfg.Servers = nil
			for _, p := range n.cfg.InitialCluster {
				cfg.Servers = append(cfg.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr), Suffrage: raft.Voter})
			}
		}
		if err := raft.BootstrapCluster(rc, store, stable, snaps, raftTrans, cfg); err != nil {
			closeStore()
			return fmt.Errorf("journal: bootstrap raft: %w", err)
		}
	}
	if n.cfg.BeforeStart != nil {
		lastIndex, err := store.LastIndex()
		if err != nil {
			closeStore()
			return fmt.Errorf("journal: read raft log: %w", err)
		}
		if err := n.cfg.BeforeStart(lastIndex); err != nil {
			closeStore()
			return err
		}
	}
	// Raft's writes are timed by the watchdog; replication reads recent
	// entries from memory rather than from the store.
	watched := watchedStore{log: store, stable: stable, w: n.watchdog.watch}
	logs, err := raft.NewLogCache(1024, watched)
	if err != nil {
		closeStore()
		return fmt.Errorf("journal: raft log cache: %w", err)
	}
	n.logs = logs
	if n.netTrans != nil {
		raftTrans = fencedTransport{NetworkTransport: n.netTrans, fenced: &n.watchdog.fenced, hooks: n.hooks}
	}
	r, err := raft.NewRaft(rc, &signalingFSM{FSM: n.fsm, signal: &n.appliedSignal, hooks: n.hooks, restored: n.onQuorumRestored}, logs, watched, snaps, raftTrans)
	if err != nil {
		closeStore()
		return fmt.Errorf("journal: start raft: %w", err)
	}
	if err := n.fsm.CheckStart(); err != nil {
		// A downgrade: the snapshot it restored is of a quorum at a level
		// this binary does not speak.
		_ = r.Shutdown().Error()
		closeStore()
		return err
	}
	n.raft = r
	n.raftStarted.Store(r)
	n.closeStore = closeStore
	n.reads = newLeaderReads(r, termReadyWait)
	started = true
	return nil
}

// WaitReady blocks until a leader is known and this journal has applied
// everything the leader has told it is committed (the leader: its whole
// log), so the registry and revocation set are current before anyone is
// served. announce runs once if the journal, empty, waits to be added.
func (n *Node) WaitReady(ctx context.Context, announce func()) error {
	announced := false
	for {
		if _, leader := n.raft.LeaderWithID(); leader != "" {
			if n.raft.State() == raft.Leader {
				err := n.raft.Barrier(n.cfg.ApplyTimeout).Error()
				if err == nil {
					return nil
				}
				if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) {
					return fmt.Errorf("journal: replay registry: %w", err)
				}
			} else if c := n.raft.CommitIndex(); c > 0 && n.applied(c) {
				return nil
			}
		} else if n.cfg.Join && !announced && n.raft.LastIndex() == 0 {
			if announce != nil {
				announce()
			}
			announced = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("journal: waiting for a Raft leader and the registry: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// RaftAddr is the Raft address other journals reach this one at ("" for
// a journal alone).
func (n *Node) RaftAddr() string { return n.raftAddr }

// LastSnapshotIndex is the index of this node's newest Raft snapshot.
func (n *Node) LastSnapshotIndex() uint64 {
	i, _ := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
	return i
}

// CommitIndex is the highest log index this node knows is committed.
func (n *Node) CommitIndex() uint64 { return n.raft.CommitIndex() }

// AppliedIndex is the highest log index Raft has handed to the FSM.
func (n *Node) AppliedIndex() uint64 { return n.raft.AppliedIndex() }

// Term is the current Raft term.
func (n *Node) Term() uint64 { return n.raft.CurrentTerm() }

// State is this node's Raft state.
func (n *Node) State() raft.RaftState { return n.raft.State() }

// LastContact is when this node last heard from the leader (the zero
// time if never).
func (n *Node) LastContact() time.Time { return n.raft.LastContact() }

// IsLeader reports whether this node leads the quorum.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader is the id of the journal this one takes for the leader ("" while
// it knows none).
func (n *Node) Leader() string {
	_, id := n.raft.LeaderWithID()
	return string(id)
}

// Servers is the Raft configuration and the index it was committed at.
func (n *Node) Servers() ([]raft.Server, uint64, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, 0, fmt.Errorf("journal: raft configuration: %w", err)
	}
	return f.Configuration().Servers, f.Index(), nil
}

// QuorumID is this journal's quorum id ("" before it has one).
func (n *Node) QuorumID() string { return n.quorum.get() }

// Collectors are the node's own metrics, for the journal's registry.
func (n *Node) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		n.peerRefused,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pact_journal_raft_write_stalls_total", Help: "Times this journal, leading, had a Raft store write unfinished past --raft-write-timeout and cut itself off so the others elect a leader."},
			func() float64 { return float64(n.watchdog.stalls.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_raft_write_stalled", Help: "1 while this journal is cut off by the write watchdog (a stuck Raft store write): it sends no Raft message and serves nothing."},
			func() float64 {
				if n.watchdog.fenced.Load() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pact_journal_raft_write_oldest_seconds", Help: "How long the oldest Raft store write in flight has been outstanding (0: none); a leader is cut off at --raft-write-timeout."},
			func() float64 {
				age, _ := n.watchdog.watch.oldest(n.watchdog.watch.clock.Now())
				return age.Seconds()
			}),
	}
}

// Stop stops the node's loops and fails what waits on them; Close then
// shuts Raft down. The journal stops its services between the two.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		// A halted FSM blocks Raft's apply goroutine, and with it every
		// proposal still waiting, until released.
		n.fsm.Release()
		close(n.stop)
	})
}

// Close stops the node (Stop), waits for its loops, and shuts Raft and
// its stores down.
func (n *Node) Close() error {
	n.Stop()
	n.wg.Wait()
	n.peers.close()
	var errs []error
	if err := n.raft.Shutdown().Error(); err != nil {
		errs = append(errs, fmt.Errorf("journal: raft shutdown: %w", err))
	}
	if n.netTrans != nil {
		// Raft's shutdown closes the listener but keeps the pooled
		// connections to the peers, whose reading goroutines would then
		// wait on them for as long as the peers run. A Raft that shut
		// itself down (a leader that removed itself) has not closed the
		// transport either: closing it again is harmless.
		_ = n.netTrans.Close()
		n.netTrans.CloseStreams()
	}
	if err := n.closeStore(); err != nil {
		errs = append(errs, fmt.Errorf("journal: close raft store: %w", err))
	}
	return errors.Join(errs...)
}

// onApply is the FSM's observer: the peer authentication is told (it
// forgets the peer chains it verified when an intermediate is retired or
// revoked), and the node learns the quorum id once an entry sets it; then
// the journal is told.
func (n *Node) onApply(ev raftfsm.Event) {
	if n.cfg.PeerAuth != nil {
		n.cfg.PeerAuth.Applied(ev)
	}
	if ev.QuorumChanged {
		n.onQuorumApplied()
	}
	if n.cfg.OnApply != nil {
		n.cfg.OnApply(ev)
	}
}

// StartPromoting starts the loop that, while this journal leads, promotes
// each non-voter once its registry has caught up. The journal starts it
// when it serves.
func (n *Node) StartPromoting() {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.promoteLoop()
	}()
}

// LeaderRead runs read (of what, for errors) on this journal, which must
// lead, after a barrier (its state then reflects every write committed
// before the call), and confirms afterwards that it still leads, so what
// read saw is the quorum's state.
func (n *Node) LeaderRead(what string, read func() error) error {
	if err := n.raft.Barrier(n.cfg.ApplyTimeout).Error(); err != nil {
		return fmt.Errorf("%w: barrier before %s: %w", ErrNoLeader, what, err)
	}
	if err := read(); err != nil {
		return err
	}
	if err := n.raft.VerifyLeader().Error(); err != nil {
		return fmt.Errorf("%w: %w", ErrNoLeader, err)
	}
	return nil
}

// TermOf is the term of the log entry at index (the current term if the
// entry was compacted away).
func (n *Node) TermOf(index uint64) uint64 {
	var l raft.Log
	if index > 0 && n.logs.GetLog(index, &l) == nil {
		return l.Term
	}
	return n.raft.CurrentTerm()
}
