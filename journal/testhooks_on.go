//go:build testhooks

package journal

import (
	"context"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// refusesUnknown says whether this leader refuses a forwarded command it
// cannot apply: raftfsm.HasUnknownOp, or what a test put in its place
// (export_test.go's RefuseBatchesAsLeader) in a testhooks build.
func (j *Journal) refusesUnknown(cmd *pactv1.Command) bool { return (*j.unknownOp.Load())(cmd) }

// wakesHeld says whether a test holds the streams' wake-ups
// (HoldStreamWakeups); h.mu is held.
func (h *hub) wakesHeld() bool { return h.held }

// holdFirstState runs a test's hold on a new stream before its first
// state (HoldFirstState).
func (h *hub) holdFirstState(ctx context.Context, serial string) {
	if hold := h.beforeFirstState.Load(); hold != nil {
		(*hold)(ctx, serial)
	}
}

// federationPass runs one pass of the federation loop under passMu, which
// a test holds to keep the loop from running (HoldFederationLoop).
func (f *fedRefresher) federationPass(run func()) {
	f.passMu.Lock()
	defer f.passMu.Unlock()
	run()
}
