package journal

import (
	"context"
	"sort"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/journal/raftnode"
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

// digestBytes bounds the node ids of one liveness digest command: a
// follower forwards it to the leader in one message of at most
// raftnode.MaxForwardBytes, and a journal with thousands of streams would
// pass it (the leader refused every such digest, and marked those nodes
// Inactive while they streamed).
const digestBytes = raftnode.MaxForwardBytes - 1<<10

// digestChunks splits sorted node ids into runs whose encoded ids fit in
// maxBytes each (a node id is far shorter than maxBytes).
func digestChunks(ids []string, maxBytes int) [][]string {
	var out [][]string
	start, size := 0, 0
	for i, id := range ids {
		n := len(id) + 3 // a repeated string: its tag and a length of up to two bytes
		if i > start && size+n > maxBytes {
			out = append(out, ids[start:i:i])
			start, size = i, 0
		}
		size += n
	}
	return append(out, ids[start:])
}

// proposeDigest commits the liveness digest for ids, one command per
// chunk: a chunk that fails leaves the others standing, and the next
// digest tries it again.
func (j *Journal) proposeDigest(ctx context.Context, ids []string) {
	for _, chunk := range digestChunks(ids, digestBytes) {
		if _, err := j.propose(ctx, &pactv1.Command{
			Actor: "journal/" + j.cfg.NodeID,
			Op:    &pactv1.Command_LivenessDigest{LivenessDigest: &pactv1.LivenessDigestOp{JournalId: j.cfg.NodeID, NodeIds: chunk}},
		}); err != nil {
			j.log.Warn("liveness digest not committed", logkey.Err, err, logkey.Nodes, len(chunk), logkey.Streams, len(ids))
		}
	}
}

func (j *Journal) livenessTick() {
	ctx, cancel := context.WithTimeout(context.Background(), j.cfg.ApplyTimeout)
	defer cancel()
	if ids := j.hub.nodes(); len(ids) > 0 {
		sort.Strings(ids)
		j.proposeDigest(ctx, ids)
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
