package journal

import (
	"context"
	"sort"

	"github.com/pact-hpc/pact/internal/logkey"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// livenessLoop runs every DigestInterval: this journal reports the nodes
// whose streams it holds (one Raft write, however many nodes), and the
// leader marks Active nodes nobody has seen for NodeLivenessTimeout Inactive.
func (j *Journal) livenessLoop() {
	for {
		t := j.cfg.Clock.NewTimer(j.cfg.DigestInterval)
		select {
		case <-j.stop:
			t.Stop()
			return
		case <-t.C():
		}
		j.livenessTick()
	}
}

func (j *Journal) livenessTick() {
	ctx, cancel := context.WithTimeout(context.Background(), j.cfg.ApplyTimeout)
	defer cancel()
	if ids := j.hub.nodes(); len(ids) > 0 {
		sort.Strings(ids)
		if _, err := j.propose(ctx, &pactv1.Command{
			Actor: "journal/" + j.cfg.NodeID,
			Op:    &pactv1.Command_LivenessDigest{LivenessDigest: &pactv1.LivenessDigestOp{JournalId: j.cfg.NodeID, NodeIds: ids}},
		}); err != nil {
			j.log.Warn("liveness digest not committed", logkey.Err, err, logkey.Nodes, len(ids))
		}
	}
	if !j.raft.IsLeader() {
		return
	}
	cutoff := j.cfg.Clock.Now().Add(-j.cfg.NodeLivenessTimeout).UnixNano()
	var stale []string
	for id, seen := range j.fsm.ActiveLastSeen() {
		if seen < cutoff {
			stale = append(stale, id)
		}
	}
	if len(stale) == 0 {
		return
	}
	sort.Strings(stale)
	if _, err := j.propose(ctx, &pactv1.Command{
		Actor: "journal/" + j.cfg.NodeID,
		Op:    &pactv1.Command_MarkInactive{MarkInactive: &pactv1.MarkInactiveOp{NodeIds: stale, CutoffUnixNano: cutoff}},
	}); err != nil {
		j.log.Warn("marking nodes inactive failed", logkey.Err, err, logkey.Nodes, len(stale))
		return
	}
	j.log.Info("nodes without a stream for the heartbeat timeout marked inactive", logkey.Nodes, len(stale), logkey.Timeout, j.cfg.NodeLivenessTimeout)
}
