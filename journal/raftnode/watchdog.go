package raftnode

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/logkey"
)

// The write watchdog: a leader whose Raft store write blocks must stop
// leading.
//
// hashicorp/raft appends the leader's log (and writes its term and vote)
// on its main goroutine, while a goroutine per follower sends the
// heartbeats. A leader whose raft.db write blocks (a hung device, a file
// system that blocks when full) therefore stays leader: its heartbeats
// keep the followers from electing another while nothing can be written,
// and the quorum commits nothing. Raft cannot be asked to step down then:
// a leadership transfer is handled by the main goroutine, which is the one
// stuck, and Shutdown waits for it too.
//
// So the watchdog cuts the leader off instead. Every Raft store write is
// timed; while this journal leads, a write outstanding for longer than
// Config.RaftWriteTimeout fences its Raft transport (every RPC it sends
// fails: no heartbeat, no vote request) and halts it (every call but the
// status ones is refused Unavailable, /readyz fails, pact journal status
// says why). The followers stop hearing from it and elect a leader among
// themselves. Once the write has finished and this journal no longer leads
// (Raft steps it down: a newer term, or its lease lapses without the
// followers' answers), the fence is lifted and it serves again as a
// follower, with no restart. A write that never finishes keeps it fenced
// until it is restarted.
//
// A write can also be slow without the disk being stuck: in a boot storm
// the journal's CPU is saturated, and the goroutine doing the write (bbolt's
// page work between its system calls) waits behind thousands of runnable
// ones each time it is preempted. At 30,000 agents on two cores writes
// took 5.6 and 6.1 s with the disk answering, and the watchdog cut a
// healthy leader off in the middle of the storm (docs/benchmarks.md). So
// before it fences, the watchdog asks the disk itself: from half the bound
// on, it writes and syncs a small file beside raft.db (diskProbe), one
// probe at a time. A leader whose write has been outstanding for the
// bound is cut off only if no probe started within the last bound has
// finished (the disk did not answer while the write was outstanding), or
// once the write has been outstanding for slowWriteLimit times the bound
// whatever the disk says: a leader that commits nothing for that long
// holds the quorum up, whatever the cause.
//
// The probe is run by the journal's own goroutines, so it cannot answer
// while they are starved, however fast the disk: as 30,000 agents stopped
// at once a leader was cut off with its probe unanswered after 2.5 s while
// another process synced a file on the same disk in 15 ms. So the watchdog
// also asks the Go runtime how long runnable goroutines waited to run
// (schedWatch): a journal whose goroutines waited a tenth of the bound
// or more within the last bound is starved, and its slow write is treated
// as one on a disk that answers.

// starvedShare: a journal whose runnable goroutines waited RaftWriteTimeout
// / starvedShare or more to run is starved. The probe starts at half the
// bound and takes a handful of trips through the scheduler (the goroutine,
// each system call's return): with waits of a tenth of the bound each it
// cannot answer by the bound, whatever the disk.
const starvedShare = 10

// slowWriteLimit is how many times RaftWriteTimeout a write may stay
// outstanding while the disk answers before the leader is cut off anyway.
const slowWriteLimit = 3

// probeFile is the watchdog's probe, in the data directory beside raft.db.
const probeFile = "raft-watchdog-probe"

// errFenced answers every Raft RPC this journal sends while fenced.
var errFenced = errors.New("journal: Raft cut off by the write watchdog: a Raft store write is stuck")

// writeWatch times the Raft store writes in flight.
type writeWatch struct {
	clock    clock.Clock
	mu       sync.Mutex
	next     uint64
	inflight map[uint64]time.Time
	// hooks.holdWrite (Hooks.HoldWrites, in a testhooks build) runs
	// inside each write before it reaches the store and may block it: a
	// test's stuck disk.
	hooks *Hooks
}

// newWriteWatch times writes on c (nil: the system clock); hooks may block
// them (a test's).
func newWriteWatch(c clock.Clock, hooks *Hooks) *writeWatch {
	if c == nil {
		c = clock.Real{}
	}
	return &writeWatch{clock: c, inflight: map[uint64]time.Time{}, hooks: hooks}
}

// track records a write starting now and returns its id for done.
func (w *writeWatch) track() uint64 {
	w.mu.Lock()
	id := w.next
	w.next++
	w.inflight[id] = w.clock.Now()
	w.mu.Unlock()
	w.hooks.holdWrite()
	return id
}

// done records that write id has ended.
func (w *writeWatch) done(id uint64) {
	w.mu.Lock()
	delete(w.inflight, id)
	w.mu.Unlock()
}

// oldest is how long the oldest write in flight has been outstanding at
// now (0 with none), and how many are in flight.
func (w *writeWatch) oldest(now time.Time) (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var age time.Duration
	for _, at := range w.inflight {
		age = max(age, now.Sub(at))
	}
	return age, len(w.inflight)
}

// diskProbe writes and syncs a small file beside raft.db, one probe at a
// time, and remembers when the latest probe that finished had started.
type diskProbe struct {
	path  string
	clock clock.Clock
	// hooks.holdProbe (Hooks.HoldProbes, else Hooks.HoldWrites: the same
	// disk, in a testhooks build) may block a probe.
	hooks *Hooks

	mu       sync.Mutex
	inFlight bool
	answered time.Time // when the latest probe that finished had started
}

// start begins a probe unless one is in flight. A probe on a hung disk
// never finishes, and its goroutine waits with the Raft write.
func (p *diskProbe) start() {
	p.mu.Lock()
	if p.inFlight {
		p.mu.Unlock()
		return
	}
	p.inFlight = true
	started := p.clock.Now()
	p.mu.Unlock()
	go func() {
		err := p.write()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.inFlight = false
		if err == nil && started.After(p.answered) {
			p.answered = started
		}
	}()
}

// answeredSince reports whether a probe started at t or later finished.
func (p *diskProbe) answeredSince(t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.answered.IsZero() && !p.answered.Before(t)
}

// probeBlock is what a probe writes: one page, in a file created for the
// probe and removed after it, so each probe allocates a block no earlier
// probe holds: on a full disk it fails (or blocks, where the file system
// blocks when full), as the Raft write does.
var probeBlock [4096]byte

func (p *diskProbe) write() error {
	p.hooks.holdProbe()
	f, err := os.OpenFile(p.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(probeBlock[:])
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close(), os.Remove(p.path))
}

// watchedStore is the Raft store as Raft sees it (log and stable store),
// with every write timed by the watchdog. Reads pass through: bbolt
// serves them beside a stuck writer.
type watchedStore struct {
	log    raft.LogStore
	stable raft.StableStore
	w      *writeWatch
}

func (s watchedStore) FirstIndex() (uint64, error)        { return s.log.FirstIndex() }
func (s watchedStore) LastIndex() (uint64, error)         { return s.log.LastIndex() }
func (s watchedStore) GetLog(i uint64, l *raft.Log) error { return s.log.GetLog(i, l) }
func (s watchedStore) Get(k []byte) ([]byte, error)       { return s.stable.Get(k) }
func (s watchedStore) GetUint64(k []byte) (uint64, error) { return s.stable.GetUint64(k) }

func (s watchedStore) StoreLog(l *raft.Log) error {
	defer s.w.done(s.w.track())
	return s.log.StoreLog(l)
}

func (s watchedStore) StoreLogs(logs []*raft.Log) error {
	defer s.w.done(s.w.track())
	return s.log.StoreLogs(logs)
}

func (s watchedStore) DeleteRange(lo, hi uint64) error {
	defer s.w.done(s.w.track())
	return s.log.DeleteRange(lo, hi)
}

func (s watchedStore) Set(k, v []byte) error {
	defer s.w.done(s.w.track())
	return s.stable.Set(k, v)
}

func (s watchedStore) SetUint64(k []byte, v uint64) error {
	defer s.w.done(s.w.track())
	return s.stable.SetUint64(k, v)
}

// fencedTransport is the Raft network transport with two switches that
// fail every RPC this journal sends: the watchdog's fence (while up, what
// it receives is untouched, so a newer leader's heartbeat still reaches it
// and steps it down), and a test's severing (Hooks.Severed, the journal's KillRaft:
// thrown before Raft stops, so the journal goes silent as a crashed one
// does; hashicorp/raft's own shutdown first tells each follower, one last
// time, what it has committed, which a crash never does).
type fencedTransport struct {
	*raft.NetworkTransport
	fenced *atomic.Bool
	hooks  *Hooks // a test's severing (Hooks.Severed, in a testhooks build)
}

// errSevered is every outgoing Raft call of a severed transport.
var errSevered = errors.New("journal: raft transport severed")

func (t fencedTransport) closed() error {
	if t.hooks.severed() {
		return errSevered
	}
	if t.fenced.Load() {
		return errFenced
	}
	return nil
}

func (t fencedTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if err := t.closed(); err != nil {
		return nil, err
	}
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return fencedPipeline{AppendPipeline: p, t: t}, nil
}

func (t fencedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if err := t.closed(); err != nil {
		return err
	}
	return t.NetworkTransport.AppendEntries(id, target, args, resp)
}

func (t fencedTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if err := t.closed(); err != nil {
		return err
	}
	return t.NetworkTransport.RequestVote(id, target, args, resp)
}

func (t fencedTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if err := t.closed(); err != nil {
		return err
	}
	return t.NetworkTransport.RequestPreVote(id, target, args, resp)
}

func (t fencedTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if err := t.closed(); err != nil {
		return err
	}
	return t.NetworkTransport.InstallSnapshot(id, target, args, resp, data)
}

func (t fencedTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	if err := t.closed(); err != nil {
		return err
	}
	return t.NetworkTransport.TimeoutNow(id, target, args, resp)
}

// fencedPipeline fences a pipeline opened before the fence went up.
type fencedPipeline struct {
	raft.AppendPipeline
	t fencedTransport
}

func (p fencedPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if err := p.t.closed(); err != nil {
		return nil, err
	}
	return p.AppendPipeline.AppendEntries(args, resp)
}

// watchdogAction is what one look of the watchdog does.
type watchdogAction int

const (
	watchdogKeep  watchdogAction = iota // nothing changes
	watchdogFence                       // cut this leader off
	watchdogLift                        // serve again
	watchdogSlow                        // a slow write, the disk answering: lead on
)

// watchdogDecide is the watchdog's rule. stuck is how long the oldest Raft
// store write in flight has been outstanding (0: none); alone says this
// journal is the only voter, so no one else could lead; diskAnswers that a
// probe of the disk started within the last bound has finished; starved
// that this journal's runnable goroutines waited a tenth of the bound or
// more to run within the last bound (so an unanswered probe says nothing
// of the disk).
//
// A leader whose write has been stuck for bound or longer is cut off,
// unless the disk answers or the journal is starved (the write is slow,
// not stuck: watchdogSlow), and then once it has been outstanding for
// slowWriteLimit times the bound. A follower's stuck write harms no one
// (its leader goes on with the others), so it is left alone. The fence stays up until the write
// has finished (or is back under the bound) and Raft has stepped this
// journal down: lifting it from a leader would let its heartbeats hold the
// followers again. A journal alone stays leader whatever happens, so for
// it the finished write is enough.
func watchdogDecide(fenced, leader, alone bool, stuck, bound time.Duration, diskAnswers, starved bool) watchdogAction {
	stalled := stuck >= bound
	switch {
	case !fenced && leader && stalled && (!diskAnswers && !starved || stuck >= slowWriteLimit*bound):
		return watchdogFence
	case !fenced && leader && stalled:
		return watchdogSlow
	case fenced && !stalled && (!leader || alone):
		return watchdogLift
	}
	return watchdogKeep
}

// writeWatchdog is the watchdog's state on a journal.
type writeWatchdog struct {
	watch *writeWatch
	// fenced is read by the transport on every RPC.
	fenced atomic.Bool
	// mu serialises the looks (the loop's, and a test's).
	mu sync.Mutex
	// since is when the fence went up (under mu).
	since time.Time
	// stalls counts the fences (pact_journal_raft_write_stalls_total).
	stalls atomic.Uint64
	// probe asks the disk whether it answers while a write is outstanding.
	probe *diskProbe
	// slowSaid: the slow write in flight has been logged (under mu).
	slowSaid bool
	// sched is the longest a runnable goroutine waited to run since the
	// previous look (schedWatch.longestWait); starvedAt the latest look
	// that found a wait of a tenth of the bound or more (under mu).
	sched     func() time.Duration
	starvedAt time.Time
}

// watchdogLoop looks at the Raft store writes four times per
// RaftWriteTimeout until the journal stops.
func (n *Node) watchdogLoop() {
	every := n.cfg.RaftWriteTimeout / 4
	for {
		t := n.watchdog.watch.clock.NewTimer(every)
		select {
		case <-n.stop:
			t.Stop()
			return
		case <-t.C():
		}
		n.checkWrites()
	}
}

// checkWrites is one look of the watchdog.
func (n *Node) checkWrites() {
	wd := &n.watchdog
	wd.mu.Lock()
	defer wd.mu.Unlock()
	now := wd.watch.clock.Now()
	stuck, inFlight := wd.watch.oldest(now)
	leader := n.raft.State() == raft.Leader
	bound := n.cfg.RaftWriteTimeout
	if stuck < bound {
		wd.slowSaid = false
	}
	if leader && !wd.fenced.Load() && stuck >= bound/2 {
		wd.probe.start()
	}
	if n.hooks.schedWait(wd.sched) >= bound/starvedShare {
		wd.starvedAt = now
	}
	answers := wd.probe.answeredSince(now.Add(-bound))
	starved := !wd.starvedAt.IsZero() && !wd.starvedAt.Before(now.Add(-bound))
	switch watchdogDecide(wd.fenced.Load(), leader, n.soleVoter(), stuck, bound, answers, starved) {
	case watchdogSlow:
		if !wd.slowSaid {
			wd.slowSaid = true
			msg := "a Raft store write is slow but the disk answers (the watchdog's probe beside raft.db was written and synced meanwhile): this journal is short of CPU or its disk is slow; it leads on, and is cut off if the write stays unfinished three times --raft-write-timeout"
			if !answers {
				msg = "a Raft store write is slow and this journal's goroutines wait seconds to run: it is short of CPU, and its probe of the disk cannot answer meanwhile; it leads on, and is cut off if the write stays unfinished three times --raft-write-timeout"
			}
			n.log.Warn(msg, logkey.DataDir, n.cfg.DataDir, logkey.Duration, stuck.Round(time.Millisecond), logkey.RaftWriteTimeout, bound, logkey.WritesInFlight, inFlight)
		}
	case watchdogFence:
		wd.fenced.Store(true)
		wd.since = now
		wd.stalls.Add(1)
		why := "check that disk (full, hung or failing device)"
		switch {
		case answers:
			why = fmt.Sprintf("the disk answers, yet the write has taken over %d times that: check the journal's CPU and that disk", slowWriteLimit)
		case starved:
			why = fmt.Sprintf("the journal's goroutines waited seconds to run meanwhile, and the write has taken over %d times that: check the journal's CPU and that disk", slowWriteLimit)
		}
		reason := fmt.Sprintf("a Raft store write (raft.db in %s) has not finished for %v, over --raft-write-timeout %v: this journal stopped leading and serves nothing until the write finishes; %s",
			n.cfg.DataDir, stuck.Round(time.Millisecond), bound, why)
		n.setStalled(reason)
		n.log.Error("RAFT WRITE STUCK: this leader stops sending heartbeats and votes so the other journals elect a leader, and serves nothing until the write finishes; check the disk of --data-dir (full, hung or failing device). If the write never finishes, restart pact-journal once the disk is fixed",
			logkey.DataDir, n.cfg.DataDir, logkey.Duration, stuck.Round(time.Millisecond), logkey.RaftWriteTimeout, n.cfg.RaftWriteTimeout, logkey.WritesInFlight, inFlight)
	case watchdogLift:
		wd.fenced.Store(false)
		n.setStalled("")
		n.log.Warn("the stuck Raft store write finished; this journal serves again (as a follower unless elected)",
			logkey.Duration, now.Sub(wd.since).Round(time.Millisecond), logkey.State, n.raft.State().String())
	}
}

// soleVoter reports whether this journal is the only voter of its
// configuration.
func (n *Node) soleVoter() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.NodeID {
			return false
		}
	}
	return true
}
