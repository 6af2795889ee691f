package journal

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/journal/raftnode"
	"github.com/pact-hpc/pact/journal/v1rpc"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// ApplyRaw appends data to the Raft log through this journal, which must
// lead: the rolling-upgrade tests use it to stand for a newer journal's
// command. The channel receives Raft's answer once the entry is applied
// here or refused (this journal did not lead, or lost the leadership). An
// entry that halts the journal is never answered: its Apply waits until
// the journal stops.
func (j *Journal) ApplyRaw(data []byte, timeout time.Duration) <-chan error {
	f := j.raftHooks.Raft.Apply(data, timeout)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	return done
}

// Ready is what /readyz answers.
func (j *Journal) Ready() error { return j.ready() }

// EnrollInProcess calls the journal's Enroll handler directly, as the gRPC
// server does after decoding a request (Enroll needs no authentication),
// and maps its error to the status a caller would see. Test only: the fuzz
// target drives the real handler without a network round trip.
func (j *Journal) EnrollInProcess(ctx context.Context, req *pactv1.EnrollRequest) (*pactv1.EnrollResponse, error) {
	resp, err := j.enrollment.Enroll(v1rpc.WithCorrelation(ctx), req)
	return resp, toStatus(err)
}

// RegistryForTest returns every node record of the journal's registry.
func (j *Journal) RegistryForTest() []*pactv1.Node { return j.fsm.Nodes(raftfsm.Filter{}) }

// SetBatchHooks installs the activation batcher's test hooks: queued is
// told the number of activations waiting each time it changes, beforeSend
// runs (on the batch's goroutine) before a batch of n is proposed and may
// block it. Set them before any enrollment.
func (j *Journal) SetBatchHooks(t testing.TB, queued, beforeSend func(n int)) {
	requireRaftHooks(t)
	j.raftHooks.BatchQueued.Store(&queued)
	j.raftHooks.BatchBeforeSend.Store(&beforeSend)
}

// RaftLastIndex is the index of the last entry in this journal's Raft log.
func (j *Journal) RaftLastIndex() uint64 { return j.raftHooks.Raft.LastIndex() }

// RefuseBatchesAsLeader makes this journal, as leader, refuse forwarded
// batches the way a leader of the release before batches does (it does
// not know the command).
func (j *Journal) RefuseBatchesAsLeader(t testing.TB) {
	requireRaftHooks(t)
	older := func(cmd *pactv1.Command) bool { return cmd.GetBatch() != nil || raftfsm.HasUnknownOp(cmd) }
	j.unknownOp.Store(&older)
}

// SetRekeyHooks installs the re-key test hooks: beforeRekey runs in the
// rotation loop before it re-keys and may block it; awaitingRekey runs each
// time a signature waits for the re-key.
func (j *Journal) SetRekeyHooks(beforeRekey, awaitingRekey func()) {
	j.rekeyMu.Lock()
	defer j.rekeyMu.Unlock()
	j.beforeRekey, j.awaitingRekey = beforeRekey, awaitingRekey
}

// HoldRaftWrites makes every Raft store write of this journal block, as
// on a hung disk, until release is called; the writes held then go on.
func (j *Journal) HoldRaftWrites(t testing.TB) (release func()) {
	requireRaftHooks(t)
	gate := make(chan struct{})
	hold := func() { <-gate }
	j.raftHooks.HoldWrites.Store(&hold)
	var once sync.Once
	return func() {
		once.Do(func() {
			j.raftHooks.HoldWrites.Store(nil)
			close(gate)
		})
	}
}

// HoldRaftWritesOnly makes every Raft store write of this journal block
// until release is called while its disk answers the write watchdog's
// probes: a write slow for want of CPU, not a hung disk.
func (j *Journal) HoldRaftWritesOnly(t testing.TB) (release func()) {
	requireRaftHooks(t)
	answer := func() {}
	j.raftHooks.HoldProbes.Store(&answer)
	held := j.HoldRaftWrites(t)
	return func() {
		held()
		j.raftHooks.HoldProbes.Store(nil)
	}
}

// StarveRaftWatchdog makes the write watchdog find, at each look, that a
// runnable goroutine waited wait to run since the previous look (0: none),
// in place of the runtime's measure, until the test ends.
func (j *Journal) StarveRaftWatchdog(t testing.TB, wait time.Duration) {
	requireRaftHooks(t)
	f := func() time.Duration { return wait }
	j.raftHooks.SchedWait.Store(&f)
	t.Cleanup(func() { j.raftHooks.SchedWait.Store(nil) })
}

// RaftDiskAnsweredSince reports whether a probe of the write watchdog that
// started at t or later has finished.
func (j *Journal) RaftDiskAnsweredSince(at time.Time) bool { return j.raftHooks.DiskAnsweredSince(at) }

// HoldApply makes this journal's FSM wait, before applying each entry,
// until release is called: Raft still takes and commits entries here,
// but none reaches the registry.
func (j *Journal) HoldApply(t testing.TB) (release func()) {
	requireRaftHooks(t)
	held := make(chan struct{})
	hook := func() { <-held }
	j.raftHooks.BeforeApply.Store(&hook)
	var once sync.Once
	return func() {
		once.Do(func() {
			j.raftHooks.BeforeApply.Store(nil)
			close(held)
		})
	}
}

// WaitingApplied counts, from now, the times a read barrier of this
// journal starts to wait for an entry it has not applied; the function it
// returns reads the count.
func (j *Journal) WaitingApplied(t testing.TB) func() int64 {
	requireRaftHooks(t)
	var n atomic.Int64
	hook := func() { n.Add(1) }
	j.raftHooks.WaitingApplied.Store(&hook)
	t.Cleanup(func() { j.raftHooks.WaitingApplied.Store(nil) })
	return n.Load
}

// RaftWritesInFlight is how many Raft store writes have started and not
// finished.
func (j *Journal) RaftWritesInFlight() int { return j.raftHooks.WritesInFlight() }

// WithWatchdogClock returns cfg with the write watchdog timing Raft's
// store writes on c instead of the system clock.
func WithWatchdogClock(cfg Config, c clock.Clock) Config {
	cfg.watchdogClock = c
	return cfg
}

// CheckRaftWrites runs one look of the write watchdog now, as its loop
// does every quarter of RaftWriteTimeout.
func (j *Journal) CheckRaftWrites() { j.raftHooks.CheckWrites() }

// PeerRefusedForTest reads pact_journal_peer_refused_total{reason}.
func (j *Journal) PeerRefusedForTest(reason string) float64 {
	return testutil.ToFloat64(j.raftHooks.PeerRefused.WithLabelValues(reason))
}

// SetApplyWait sets how long this journal waits to apply an entry the
// leader committed before it gives up on showing it (waitApplied).
func (j *Journal) SetApplyWait(t testing.TB, d time.Duration) {
	requireRaftHooks(t)
	j.raftHooks.ApplyWait.Store(int64(d))
}

// KillRaft stops this journal's Raft as a crash does for the other
// journals: first its outgoing Raft calls fail (Raft's own shutdown would
// tell the followers one last time what it committed), then Raft stops.
// Close still releases the rest.
func (j *Journal) KillRaft(t testing.TB) error {
	requireRaftHooks(t)
	j.raftHooks.Severed.Store(true)
	return j.raftHooks.Raft.Shutdown().Error()
}

// SetQuorumIDForTest makes this journal claim quorum id from now on, as a
// journal of another quorum would.
func (j *Journal) SetQuorumIDForTest(id string) {
	j.raftHooks.ClaimQuorumID(id)
}

// IntermediateRecordForTest is the intermediate with serial as Raft records it.
func (j *Journal) IntermediateRecordForTest(serial string) (*pactv1.Intermediate, bool) {
	return j.fsm.Intermediate(serial)
}

// OperatorRecordForTest is the operator credential with serial as Raft
// records it.
func (j *Journal) OperatorRecordForTest(serial string) (*pactv1.Operator, bool) {
	return j.fsm.Operator(serial)
}

// ProposeDigestForTest commits a liveness digest naming ids (sorted), as
// this journal's liveness loop does for the streams it holds.
func (j *Journal) ProposeDigestForTest(ids []string) {
	ctx, cancel := context.WithTimeout(context.Background(), j.cfg.ApplyTimeout)
	defer cancel()
	j.proposeDigest(ctx, ids)
}

// HoldStreamWakeups keeps every Subscribe stream of this journal asleep,
// as a scheduler that has not run their goroutines yet would, until
// release, which wakes them all. A stream still sees its client leave.
func (j *Journal) HoldStreamWakeups(t testing.TB) (release func()) {
	requireRaftHooks(t)
	h := j.hub
	h.mu.Lock()
	h.held = true
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.held = false
		for _, ws := range h.streams {
			for w := range ws {
				wake(w.node)
			}
		}
	}
}

// HoldFirstState keeps every new Subscribe stream of the certificate
// serial from sending its first state until its client leaves, as a
// journal too busy to answer before the agent gives up would; arrived
// receives each held stream as it reaches the hold. clear lifts it.
func (j *Journal) HoldFirstState(t testing.TB, serial string) (arrived <-chan struct{}, clear func()) {
	requireRaftHooks(t)
	ch := make(chan struct{}, 16)
	hold := func(ctx context.Context, s string) {
		if s != serial {
			return
		}
		ch <- struct{}{}
		<-ctx.Done()
	}
	j.hub.beforeFirstState.Store(&hold)
	return ch, func() { j.hub.beforeFirstState.Store(nil) }
}

// IntermediateTrustedForTest reports whether serial is a live
// intermediate of this journal's trust bundle, read at its clock: a
// retired one drops out at the end of its grace.
func (j *Journal) IntermediateTrustedForTest(serial string) bool {
	_, ok := j.bundle.get().live[serial]
	return ok
}

// requireRaftHooks skips t unless the test hooks are built (-tags
// testhooks, as make test builds; raftnode.HooksBuilt): without the tag
// they are compiled out, as in every shipped binary (the Raft node's and
// the journal's own: testhooks_off.go). Under CI
// (CI=true) it fails instead: a check skipped there would pass with the
// journal broken.
func requireRaftHooks(t testing.TB) {
	t.Helper()
	if raftnode.HooksBuilt {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs the Raft node's test hooks, compiled out of this build: run go test -tags testhooks (make test passes it)")
	}
	t.Skip("needs the Raft node's test hooks: go test -tags testhooks (make test passes it)")
}

// AttestingStreams counts the streams of node on this journal that answer
// boot attestation requests (registered once the stream's first state was
// sent).
func (j *Journal) AttestingStreams(node string) int {
	n := 0
	j.attestStreams.Range(func(k, _ any) bool {
		if k.(*streamAttest).node == node {
			n++
		}
		return true
	})
	return n
}
