package journal

import (
	"context"
	"errors"

	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/raftnode"
	"github.com/pact-hpc/pact/journal/v1rpc"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Errors of the journal itself (rule errors come from raftfsm).
var (
	ErrNoLeader        = raftnode.ErrNoLeader
	ErrUnauthenticated = auth.ErrUnauthenticated // journal/auth refuses with these two
	ErrPermission      = auth.ErrPermission
	ErrInvalidArgument = v1rpc.ErrInvalidArgument
	ErrOverloaded      = v1rpc.ErrOverloaded
	ErrNotFound        = v1rpc.ErrNotFound
	// ErrOperatorNotFound: pact admin revoke NAME of a name no recorded
	// operator credential carries (a typo, most likely). It is an
	// ErrNotFound.
	ErrOperatorNotFound = v1rpc.ErrOperatorNotFound
	// ErrTooManyStreams: the caller's certificate holds the most streams
	// one certificate may open on a journal (Config.MaxStreamsPerCert).
	ErrTooManyStreams = errors.New("journal: too many streams for one certificate")
	// ErrOutcomeUnknown: the write may or may not have committed
	// (raftnode). Retryable, never final.
	ErrOutcomeUnknown = raftnode.ErrOutcomeUnknown
	// ErrDataDirInUse: another process (another pact-journal) holds the
	// lock on the data directory's Raft store.
	ErrDataDirInUse = raftnode.ErrDataDirInUse
	// ErrQuorumMismatch: a peer journal belongs to another quorum.
	ErrQuorumMismatch = raftnode.ErrQuorumMismatch
	// ErrBootstrapRefused: an empty journal was asked to bootstrap a new
	// quorum, but a journal it lists already belongs to one.
	ErrBootstrapRefused = raftnode.ErrBootstrapRefused
)

// propose attributes cmd to the caller, commits it (stamped by raftnode)
// through Raft and returns its typed result. It returns only after the
// entry is applied here, so whatever the caller does next sees the new
// state (a journal that cannot apply it in time answers ErrOutcomeUnknown
// instead). A rule failure comes back as the error (from Result.Err); the
// Result is still returned.
func (j *Journal) propose(ctx context.Context, cmd *pactv1.Command) (*raftfsm.Result, error) {
	j.attribute(ctx, cmd)
	return j.raft.Propose(ctx, cmd)
}

// proposeBatched commits an Activate, Renew or Release command, in a batch
// with others when ActivationBatchMax allows (raftnode's batcher): the
// commands a boot storm, a renewal storm or a site stopping every node at
// once brings by the thousand. It returns like
// propose: only after the entry is applied here, with the command's own
// result.
func (j *Journal) proposeBatched(ctx context.Context, cmd *pactv1.Command) (*raftfsm.Result, error) {
	j.attribute(ctx, cmd)
	return j.raft.ProposeBatched(ctx, cmd)
}

// attribute fills in who asked for a command: the caller's address and
// the request's correlation id. Its time and ignorable marker are
// raftnode's to stamp (Node.Propose), in one place for every command.
func (j *Journal) attribute(ctx context.Context, cmd *pactv1.Command) {
	if cmd.Source == "" {
		cmd.Source = peerAddr(ctx)
	}
	if cmd.CorrelationId == "" {
		cmd.CorrelationId = v1rpc.CorrelationFrom(ctx)
	}
}
