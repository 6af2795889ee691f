package raftnode

import (
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// Hooks let a test hold, break or look into a running node at points
// production never stops at. The journal passes one in Config (its
// export_test.go drives it); the zero value changes nothing. Fields under
// "set by New" are filled in before New returns.
//
// The hooks run only in a build with -tags testhooks (make test passes it;
// HooksBuilt says): without it the node never reads them (hooks_off.go),
// so no binary make build ships loads a test hook on its apply path.
type Hooks struct {
	// BeforeApply runs before each entry is applied and may hold it back.
	BeforeApply atomic.Pointer[func()]
	// HoldWrites runs inside each Raft store write before it reaches the
	// store and may block it: a stuck disk. It holds the write watchdog's
	// probes of the disk too, unless HoldProbes is set.
	HoldWrites atomic.Pointer[func()]
	// HoldProbes runs inside each of the write watchdog's disk probes in
	// place of HoldWrites: with a no-op, a disk that answers while the
	// Raft writes are held for another reason (a journal short of CPU).
	HoldProbes atomic.Pointer[func()]
	// SchedWait stands in for the runtime's measure the write watchdog
	// reads at each look: the longest a runnable goroutine waited to run
	// since the previous look (schedWatch).
	SchedWait atomic.Pointer[func() time.Duration]
	// Severed fails every outgoing Raft call (a crash, as the other
	// journals see it: Raft's own shutdown would first tell each follower
	// what it committed).
	Severed atomic.Bool
	// ApplyWait, when positive, bounds how long the node waits to apply
	// an entry the leader committed, in place of the default.
	ApplyWait atomic.Int64
	// BatchQueued is told the activation queue's length each time it
	// changes; BatchBeforeSend runs before a batch of n is proposed and
	// may block it.
	BatchQueued, BatchBeforeSend atomic.Pointer[func(n int)]
	// RaftListening runs in New right after the Raft port listens, before
	// the journal bootstraps or starts Raft, and may hold it there: a
	// journal slow to go on (a loaded host) while its port already
	// answers probes.
	RaftListening atomic.Pointer[func()]
	// WaitingApplied runs each time a read waits for this node to apply
	// an entry it has not applied yet (waitApplied): a test sees a
	// barrier waiting on a lagging copy.
	WaitingApplied atomic.Pointer[func()]

	// Set by New.
	Raft           *raft.Raft
	CheckWrites    func()
	WritesInFlight func() int
	// DiskAnsweredSince reports whether a probe of the write watchdog
	// started at t or later has finished.
	DiskAnsweredSince func(t time.Time) bool
	ClaimQuorumID     func(id string)
	PeerRefused       *prometheus.CounterVec
}
