package journal

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/journal/v1rpc"
	"github.com/pact-hpc/pact/raftfsm"
)

// readBarrier is the leader confirmation of every check on a call's path
// (confirm and the checks that call it directly).
func (j *Journal) readBarrier(ctx context.Context) error {
	return v1rpc.BarrierOnce(ctx, j.raft.ReadBarrier)
}

// unconfirmedRetryAfter is the retry-after of a refusal this journal could
// not confirm with the leader: about an election's time.
const unconfirmedRetryAfter = 2 * time.Second

// confirm is how a service confirms an answer with the leader, the one
// helper around the Raft node's read barrier: it runs decide, which
// answers from this journal's copy of the registry, and an answer needs
// names (isFinal: a final refusal, as apierr.Error.Final and so pact-agent
// see it; isRuleError: any refusal that rests on replicated state) stands
// only if decide still gives it after the barrier. A follower's copy may
// lag a registration, a decommission or an enrollment committed through
// another journal, and a leader cut off from its quorum may not know it
// has been deposed. When the leader cannot be reached, the caller is told
// to retry (NO_LEADER) instead: an agent exits for good on a final
// refusal, so a lagging journal must never give one.
func (j *Journal) confirm(ctx context.Context, decide func() error, needs func(error) bool) error {
	err := decide()
	if !needs(err) {
		return err
	}
	if rerr := j.readBarrier(ctx); rerr != nil {
		j.metrics.unconfirmed.Inc()
		return &retryAfterError{
			err:   fmt.Errorf("%w: this journal cannot confirm its answer with the leader (its copy of the registry may lag): %s; retry, or try another journal", ErrNoLeader, strings.TrimPrefix(rerr.Error(), ErrNoLeader.Error()+": ")),
			after: unconfirmedRetryAfter,
		}
	}
	return decide()
}

// isFinal reports whether err, as the caller will see it, is final.
func isFinal(err error) bool {
	return err != nil && apierr.FromError(toStatus(err)).Final()
}

// isRuleError reports whether err is a rule error: a refusal that depends
// on replicated state.
func isRuleError(err error) bool { return raftfsm.ErrorCode(err) != "" }
