package journal

import (
	"fmt"

	"github.com/pact-hpc/pact/journal/raftnode"
	"github.com/pact-hpc/pact/journal/v1rpc"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// A journal stops serving when its Raft node halts (raftnode: removed
// from the quorum, a log entry it may not skip, or, leading, a Raft store
// write stuck until it finishes); errHalted answers every call but the
// status ones then, as Unavailable so clients move to another journal.
var (
	errHalted = v1rpc.ErrHalted
	// ErrRemoved: this journal was removed from the quorum's configuration.
	ErrRemoved = raftnode.ErrRemoved
	// ErrNoCluster: --raft-listen without --initial-cluster or --join.
	ErrNoCluster = raftnode.ErrNoCluster
	// errMembership: a membership change refused for a reason other than
	// leadership.
	errMembership = raftnode.ErrMembership
)

// RemovedMarker is the file a journal writes into its data directory when
// it finds itself removed, so a restart refuses instead of serving stale
// reads.
const RemovedMarker = raftnode.RemovedMarker

// Removed is closed once this journal found itself removed from the
// quorum; pact-journal then exits with its own code.
func (j *Journal) Removed() <-chan struct{} { return j.raft.Removed() }

// Halted is why this journal stopped serving, or "" while it serves.
func (j *Journal) Halted() string { return j.raft.Halted() }

// serving refuses a call while the journal is halted. The status calls
// still answer, so pact journal status can say why.
func (j *Journal) serving(method string) error {
	r := j.raft.Halted()
	if r == "" {
		return nil
	}
	switch method {
	case pactv1.AdminService_JournalStatus_FullMethodName, pactv1.JournalPeerService_MemberStatus_FullMethodName:
		return nil
	}
	return fmt.Errorf("%w: journal %s does not serve: %s", errHalted, j.cfg.NodeID, r)
}
