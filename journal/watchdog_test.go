package journal_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// waitFor polls cond until it holds; the deadline is a hang guard, not a
// measure.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, 30*time.Second, 10*time.Millisecond, cond, "not within 30s: %s", what)
}

// A leader whose Raft store write blocks (a hung disk) is cut off once the
// write has been outstanding for RaftWriteTimeout, not before: it stops
// heartbeating, the other two elect a leader that takes writes, and the
// cut-off journal says why (its halt reason, pact journal status, its
// metrics) and refuses calls. Once the write finishes it serves again as a
// follower and catches up, with no restart.
//
// The watchdog's clock is a fake one, so the bound is exact; Raft keeps
// its own wall-clock timers, so the election is real.
func TestLeaderWithStuckWriteStepsDown(t *testing.T) {
	c, fc, bound, li := startWatchdogCluster(t, func(cfg *journal.Config) { cfg.MetricsListen = "127.0.0.1:0" })
	if bound != journal.DefaultRaftWriteTimeout {
		t.Fatalf("RaftWriteTimeout %v, want the default %v", bound, journal.DefaultRaftWriteTimeout)
	}
	old := c.Nodes[li]
	// Its goroutines wait to run, but less than a tenth of the bound (and
	// not as the loaded test machine's scheduler happens to make them): a
	// silent disk, not a starved journal.
	old.J.StarveRaftWatchdog(t, bound/10-time.Millisecond)
	release := old.J.HoldRaftWrites(t)
	// Before the cluster's own cleanup closes the journals: Raft cannot
	// shut down while its write is stuck.
	t.Cleanup(release)

	// A write on the leader: Raft's main loop sticks in the log append.
	stuck := writeOnHeldLeader(t, old, "stuck")

	// Just under the bound: still leading, still serving.
	fc.Advance(bound - time.Millisecond)
	old.J.CheckRaftWrites()
	if r := old.J.Halted(); r != "" || !old.J.IsLeader() {
		t.Fatalf("cut off %v before the bound: leader %v, halted %q", time.Millisecond, old.J.IsLeader(), r)
	}

	// The bound crossed: the watchdog's own loop (it looks every quarter
	// of the bound) cuts the leader off.
	waitFor(t, "the watchdog cuts the stuck leader off", func() bool {
		if old.J.Halted() != "" {
			return true
		}
		fc.Advance(bound / 4)
		return false
	})
	reason := old.J.Halted()
	for _, w := range []string{"Raft store write", "has not finished for", "--raft-write-timeout 5s", "check that disk"} {
		if !strings.Contains(reason, w) {
			t.Errorf("halt reason lacks %q: %q", w, reason)
		}
	}
	if err := old.J.Ready(); err == nil || !strings.Contains(err.Error(), "halted") {
		t.Errorf("readiness while cut off: %v", err)
	}
	_, err := old.AdminClient(t).ListNodes(context.Background(), &pactv1.ListNodesRequest{})
	wantReason(t, err, codes.Unavailable, apierr.JournalHalted)
	m := scrape(t, old)
	for _, w := range []string{"pact_journal_raft_write_stalls_total 1\n", "pact_journal_raft_write_stalled 1\n"} {
		if !strings.Contains(m, w) {
			t.Errorf("metrics lack %q", strings.TrimSpace(w))
		}
	}

	// The other two elect a leader among themselves and take writes.
	var others []*journaltest.Harness
	for i, h := range c.Nodes {
		if i != li {
			others = append(others, h)
		}
	}
	var leader, follower *journaltest.Harness
	waitFor(t, "a new leader known to the other follower", func() bool {
		for k, h := range others {
			if h.J.IsLeader() && others[1-k].J.KnownLeader() == h.Cfg.NodeID {
				leader, follower = h, others[1-k]
				return true
			}
		}
		return false
	})
	for k, h := range []*journaltest.Harness{leader, follower} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := h.AdminClient(t).RegisterNode(ctx, &pactv1.RegisterNodeRequest{NodeId: "after-" + h.Cfg.NodeID, Hardware: &pactv1.HardwareIdentity{Macs: []string{mac(10 + k)}}})
		cancel()
		if err != nil {
			t.Fatalf("write through %s after the stuck leader was cut off: %v", h.Cfg.NodeID, err)
		}
	}
	st, err := leader.AdminClient(t).JournalStatus(context.Background(), &pactv1.JournalStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	shown := false
	for _, mb := range st.GetMembers() {
		if mb.GetJournalId() == old.Cfg.NodeID {
			shown = strings.Contains(mb.GetHalted(), "--raft-write-timeout")
		}
	}
	if !shown {
		t.Errorf("pact journal status does not show why %s stopped: %v", old.Cfg.NodeID, st.GetMembers())
	}

	// The disk comes back: the write finishes, Raft steps the old leader
	// down (the new leader's term), and the fence is lifted.
	release()
	waitFor(t, "the old leader serves again as a follower", func() bool {
		old.J.CheckRaftWrites()
		return old.J.Halted() == "" && !old.J.IsLeader() && old.J.KnownLeader() == leader.Cfg.NodeID
	})
	waitFor(t, "the old leader catches up", func() bool {
		for _, n := range old.J.RegistryForTest() {
			if n.GetNodeId() == "after-"+follower.Cfg.NodeID {
				return true
			}
		}
		return false
	})
	if !strings.Contains(scrape(t, old), "pact_journal_raft_write_stalled 0\n") {
		t.Error("pact_journal_raft_write_stalled is not 0 once the write finished")
	}
	// The entry that was stuck was never replicated, and the new leader's
	// log replaced it: its caller is told the outcome is unknown (it may
	// retry), never that it succeeded.
	wantReason(t, <-stuck, codes.DeadlineExceeded, apierr.OutcomeUnknown)
}

// A leader whose Raft store write is slow while its disk answers (a journal
// short of CPU in a boot storm: the write's goroutine runs late, the disk
// does not) leads on past the bound: the watchdog's probe beside raft.db was
// written and synced while the write was outstanding. Once the write has
// been outstanding for three times the bound the leader is cut off all the
// same, saying that the disk answers.
func TestLeaderWithSlowWriteLeadsOnWhileItsDiskAnswers(t *testing.T) {
	c, fc, bound, li := startWatchdogCluster(t, nil)
	old := c.Nodes[li]
	release := old.J.HoldRaftWritesOnly(t)
	t.Cleanup(release)

	// Its outcome is not this test's: the write waits for release.
	writeOnHeldLeader(t, old, "slow")

	// Every half bound a look, which probes the disk from half the bound
	// on; each probe answers before the next look.
	for waited := bound / 2; waited < slowWriteLimit*bound; waited += bound / 2 {
		probed := fc.Now().Add(bound / 2)
		fc.Advance(bound / 2)
		old.J.CheckRaftWrites()
		if r := old.J.Halted(); r != "" || !old.J.IsLeader() {
			t.Fatalf("cut off after %v with the disk answering: leader %v, halted %q", waited, old.J.IsLeader(), r)
		}
		// The watchdog's own loop may have a probe of an earlier look in
		// flight: each poll looks again, which starts one once it is done.
		waitFor(t, "the watchdog's probe answers", func() bool {
			old.J.CheckRaftWrites()
			return old.J.RaftDiskAnsweredSince(probed)
		})
		if r := old.J.Halted(); r != "" {
			t.Fatalf("cut off after %v with the disk answering: %q", waited, r)
		}
	}

	fc.Advance(bound / 2)
	old.J.CheckRaftWrites()
	reason := old.J.Halted()
	for _, w := range []string{"has not finished for 15s", "the disk answers", "check the journal's CPU"} {
		if !strings.Contains(reason, w) {
			t.Errorf("after three bounds: halt reason lacks %q: %q", w, reason)
		}
	}
}

// A leader whose write is outstanding while its goroutines wait seconds to
// run is short of CPU: its probe of the disk, run by those goroutines,
// cannot answer, which says nothing of the disk. It leads on, and is cut
// off at three times the bound, as one whose disk answers is. Seen as
// 30,000 agents stopped at once: the leader cut off with its probe
// unanswered while another process synced a file on the same disk in
// 15 ms (docs/benchmarks.md).
func TestStarvedLeaderWithSlowWriteLeadsOn(t *testing.T) {
	c, fc, bound, li := startWatchdogCluster(t, nil)
	old := c.Nodes[li]
	// Each look finds a goroutine that waited half the bound to run.
	old.J.StarveRaftWatchdog(t, bound/2)
	// The writes and the probes held: the probe never answers.
	release := old.J.HoldRaftWrites(t)
	t.Cleanup(release)

	// Its outcome is not this test's: the write waits for release.
	writeOnHeldLeader(t, old, "starved")

	for waited := bound / 4; waited < slowWriteLimit*bound; waited += bound / 4 {
		fc.Advance(bound / 4)
		old.J.CheckRaftWrites()
		if r := old.J.Halted(); r != "" || !old.J.IsLeader() {
			t.Fatalf("cut off after %v while starved: leader %v, halted %q", waited, old.J.IsLeader(), r)
		}
	}
	if old.J.RaftDiskAnsweredSince(time.Time{}) {
		t.Fatal("a held probe of the disk answered")
	}

	fc.Advance(bound / 4)
	old.J.CheckRaftWrites()
	reason := old.J.Halted()
	for _, w := range []string{"has not finished for 15s", "waited seconds to run", "check the journal's CPU"} {
		if !strings.Contains(reason, w) {
			t.Errorf("after three bounds: halt reason lacks %q: %q", w, reason)
		}
	}
}

// startWatchdogCluster starts three journals whose write watchdogs run on
// fc (tune, if any, sets more of each config) and returns them, fc, the
// watchdog's bound and the index of the leader.
func startWatchdogCluster(t *testing.T, tune func(*journal.Config)) (c *journaltest.Cluster, fc *fakeclock.Clock, bound time.Duration, leader int) {
	t.Helper()
	fc = fakeclock.New(time.Now())
	c = startCluster(t, 3, func(cfg *journal.Config) {
		*cfg = journal.WithWatchdogClock(*cfg, fc)
		if tune != nil {
			tune(cfg)
		}
	})
	return c, fc, c.Configs[0].RaftWriteTimeout, c.Leader(t)
}

// writeOnHeldLeader registers node id through old, whose Raft store writes
// a test holds, and returns once Raft's write of it has started (its main
// loop stuck in the log append); the call's outcome comes on the channel
// once the writes are released.
func writeOnHeldLeader(t *testing.T, old *journaltest.Harness, id string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	admin := old.AdminClient(t)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := admin.RegisterNode(ctx, &pactv1.RegisterNodeRequest{NodeId: id, Hardware: &pactv1.HardwareIdentity{Macs: []string{mac(1)}}})
		done <- err
	}()
	waitFor(t, "the leader's log write starts", func() bool { return old.J.RaftWritesInFlight() > 0 })
	return done
}

// slowWriteLimit is the watchdog's (raftnode): a write outstanding for
// that many bounds cuts the leader off whatever its disk says.
const slowWriteLimit = 3

// RaftWriteTimeout is validated: below a second a busy disk's fsync would
// make the leader step down.
func TestRaftWriteTimeoutValidate(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, journal.MinRaftWriteTimeout - time.Millisecond} {
		cfg := journal.DefaultConfig()
		cfg.DataDir = t.TempDir()
		cfg.RaftWriteTimeout = d
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "raft write timeout "+d.String()+" is shorter than 1s") {
			t.Errorf("RaftWriteTimeout %v: Validate = %v", d, err)
		}
	}
	cfg := journal.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.RaftWriteTimeout = journal.MinRaftWriteTimeout
	if err := cfg.Validate(); err != nil {
		t.Errorf("RaftWriteTimeout %v: %v", cfg.RaftWriteTimeout, err)
	}
}
