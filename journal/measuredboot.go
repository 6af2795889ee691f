package journal

import (
	"sync"
	"time"

	"github.com/pact-hpc/pact/internal/measuredboot"
)

// maxBootEvidence bounds the nodes whose last verified quote a journal
// keeps (a boot storm of a large site fits).
const maxBootEvidence = 65536

// maxEventData bounds the data kept of each replayed event: enough to name
// a boot loader, kernel or command line, never a whole measured blob.
const maxEventData = 512

// bootRecord is a node's last verified quote, as this journal saw it.
type bootRecord struct {
	at time.Time
	ev *measuredboot.BootEvidence
}

// bootEvidence holds the last verified quote of each node this journal
// attested, in memory: it is evidence for an operator (pact boot-policy
// capture), not state the quorum agrees on.
type bootEvidence struct {
	mu    sync.Mutex
	max   int
	nodes map[string]bootRecord
}

func newBootEvidence(max int) *bootEvidence {
	return &bootEvidence{max: max, nodes: make(map[string]bootRecord)}
}

func (b *bootEvidence) put(node string, ev *measuredboot.BootEvidence, now time.Time) {
	for k := range ev.Events {
		if len(ev.Events[k].Data) > maxEventData {
			ev.Events[k].Data = ev.Events[k].Data[:maxEventData:maxEventData]
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.nodes[node]; !ok && len(b.nodes) >= b.max {
		// Full: forget the oldest.
		oldest, at := "", now
		for n, r := range b.nodes {
			if !r.at.After(at) {
				oldest, at = n, r.at
			}
		}
		delete(b.nodes, oldest)
	}
	b.nodes[node] = bootRecord{at: now, ev: ev}
}
