//go:build !testhooks

package journal

import (
	"context"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Without -tags testhooks (every shipped binary) the journal's test hooks
// on its forward and stream paths compile out, as the Raft node's do
// (raftnode.HooksBuilt): a leader refuses exactly the commands it cannot
// apply, no stream wake-up can be held, and nothing holds the federation
// loop.

func (j *Journal) refusesUnknown(cmd *pactv1.Command) bool { return raftfsm.HasUnknownOp(cmd) }

func (*hub) wakesHeld() bool { return false }

func (*hub) holdFirstState(context.Context, string) {}

func (*fedRefresher) federationPass(run func()) { run() }
