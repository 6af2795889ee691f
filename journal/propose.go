package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/journal/auth"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Errors of the journal itself (rule errors come from raftfsm).
var (
	ErrNoLeader        = errors.New("journal: no leader")
	ErrUnauthenticated = auth.ErrUnauthenticated // journal/auth refuses with these two
	ErrPermission      = auth.ErrPermission
	ErrInvalidArgument = errors.New("journal: invalid argument")
	ErrOverloaded      = errors.New("journal: too many enrollments in flight")
	ErrNotFound        = errors.New("journal: not found")
	// ErrOperatorNotFound: pact admin revoke NAME of a name no recorded
	// operator credential carries (a typo, most likely). It is an
	// ErrNotFound.
	ErrOperatorNotFound = fmt.Errorf("%w: no such operator", ErrNotFound)
	// ErrTooManyStreams: the caller's certificate holds the most streams
	// one certificate may open on a journal (Config.MaxStreamsPerCert).
	ErrTooManyStreams = errors.New("journal: too many streams for one certificate")
	// ErrOutcomeUnknown: the write was sent to the leader but no answer
	// came in time, so it may or may not have committed; or it committed
	// but this journal could not apply it in time to show the result.
	// Retryable, never final.
	ErrOutcomeUnknown = errors.New("journal: outcome unknown")
	// ErrDataDirInUse: another process (another pact-journal) holds the
	// lock on the data directory's Raft store.
	ErrDataDirInUse = errors.New("journal: data directory in use")
)

// propose stamps cmd with this journal's clock, commits it through Raft and
// returns its typed result. It returns only after the entry is applied here,
// so whatever the caller does next sees the new state (a journal that
// cannot apply it in time answers ErrOutcomeUnknown instead). A rule failure comes
// back as the error (from Result.Err); the Result is still returned.
func (j *Journal) propose(ctx context.Context, cmd *pactv1.Command) (*raftfsm.Result, error) {
	j.stamp(ctx, cmd)
	return j.proposeStamped(ctx, cmd)
}

// stamp fills in what the proposer owes a command: its clock, the ignorable
// marker, the caller's address and the request's correlation id.
func (j *Journal) stamp(ctx context.Context, cmd *pactv1.Command) {
	cmd.AtUnixNano = j.cfg.Clock.Now().UnixNano()
	cmd.Ignorable = raftfsm.Ignorable(cmd)
	if cmd.Source == "" {
		cmd.Source = peerAddr(ctx)
	}
	if cmd.CorrelationId == "" {
		cmd.CorrelationId = correlationFrom(ctx)
	}
}

// proposeStamped is propose for a command already stamped.
func (j *Journal) proposeStamped(ctx context.Context, cmd *pactv1.Command) (*raftfsm.Result, error) {
	data, err := raftfsm.Encode(cmd)
	if err != nil {
		return nil, fmt.Errorf("journal: encode command: %w", err)
	}
	if j.raft.State() == raft.Leader {
		res, _, err := j.applyLocal(ctx, data, opName(cmd))
		if !errors.Is(err, ErrNoLeader) {
			return res, err
		}
		// Lost the leadership just now: the new leader takes it.
	}
	return j.forward(ctx, data)
}

// applyLocal commits data on this journal, which must lead. It returns the
// typed result, the entry's index, and the rule error (or a Raft error).
func (j *Journal) applyLocal(ctx context.Context, data []byte, op string) (*raftfsm.Result, uint64, error) {
	timeout := j.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < timeout {
			timeout = d
		}
	}
	if timeout <= 0 {
		return nil, 0, context.DeadlineExceeded
	}
	start := time.Now()
	f := j.raft.Apply(data, timeout)
	err := f.Error()
	j.metrics.applySeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrEnqueueTimeout):
			// Never entered the log: nothing was written.
			return nil, 0, fmt.Errorf("%w: %w", ErrNoLeader, err)
		case errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown):
			// In the log but not known committed: a later leader may still
			// commit it, so the caller must not be told it was not written.
			return nil, 0, fmt.Errorf("%w: leadership lost before the entry was known committed: %w", ErrOutcomeUnknown, err)
		}
		// Anything else failed before the entry was in this journal's log:
		// above all, the log could not be written (a full or failing disk;
		// Raft passes the storage error on as text and steps down), so no
		// follower can have it either. Nothing was written: the caller may
		// retry, here once the disk is fixed, or at another journal.
		j.log.Error("raft could not take the entry; this journal steps down", logkey.Err, err)
		return nil, 0, fmt.Errorf("%w: this journal could not write its Raft log (is its disk full or failing?): %w", ErrNoLeader, err)
	}
	res, ok := f.Response().(*raftfsm.Result)
	if !ok {
		return nil, 0, fmt.Errorf("journal: unexpected apply response %T", f.Response())
	}
	return res, f.Index(), res.Err
}

// Rule errors the journal raises itself, outside Apply, share the FSM's
// sentinels so they map to the same wire reasons.
var (
	errNodeRevoked = raftfsm.ErrNodeRevoked
	errStale       = raftfsm.ErrStaleCertificate
)
