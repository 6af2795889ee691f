package journal

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/pact-hpc/pact/journal/v1rpc"
	"github.com/pact-hpc/pact/raftfsm"
)

// hub wakes the Subscribe streams a committed change concerns. Wake-ups are
// level-triggered (a channel of one): a stream re-reads the registry when
// woken, so coalesced notifications lose nothing.
type hub struct {
	mu      sync.Mutex
	streams map[string]map[*streamWaker]struct{}
	// drops counts, per node, the times its last stream here ended: a
	// stream moved to a new channel before the old one closed is no drop.
	drops map[string]int
	// held is a test hook (HoldStreamWakeups, read only in a testhooks
	// build): while set, no stream is woken; its release wakes every stream.
	held bool
	// beforeFirstState, if set, runs in a new stream before it sends its
	// first state and may block it: a test's journal too busy to answer
	// (HoldFirstState; read only in a testhooks build, holdFirstState).
	beforeFirstState atomic.Pointer[func(ctx context.Context, serial string)]
}

type streamWaker struct {
	nodeID string
	// serial is the certificate the stream was opened with, over conn.
	serial string
	conn   v1rpc.ConnID
	// renewedTo is the certificate a renewal made over conn is replacing
	// serial with (hub.renewingOver; read under hub.mu).
	renewedTo string
	hub       *hub
	// streaming: the stream has sent its first state (assignment and
	// trust bundle). Only then is it the node's stream for a handover.
	streaming bool
	node      chan struct{}
	bundle    chan struct{}
}

// NodeChanged and BundleChanged are the stream's wake-ups (v1rpc.Waker).
func (w *streamWaker) NodeChanged() <-chan struct{}   { return w.node }
func (w *streamWaker) BundleChanged() <-chan struct{} { return w.bundle }

// RenewedOverItsConnection is v1rpc.Waker's.
func (w *streamWaker) RenewedOverItsConnection() string {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.renewedTo
}

func newHub() *hub {
	return &hub{streams: map[string]map[*streamWaker]struct{}{}, drops: map[string]int{}}
}

func (h *hub) register(nodeID, serial string, conn v1rpc.ConnID) *streamWaker {
	w := &streamWaker{nodeID: nodeID, serial: serial, conn: conn, hub: h, node: make(chan struct{}, 1), bundle: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.streams[nodeID] == nil {
		h.streams[nodeID] = map[*streamWaker]struct{}{}
	}
	h.streams[nodeID][w] = struct{}{}
	h.mu.Unlock()
	return w
}

// streaming records that w has sent its first state: from then on it is
// the node's stream for a handover. Not at register: a journal busy enough
// to take seconds over a new stream's first state would end the old one
// while the agent, still waiting for that state, may give up on the new
// one and leave the node with no stream at all. The node's other streams
// are not woken: a renewed agent closes its old channel itself once the
// new one streams, and a stream whose client has not is let go at its
// next re-check (Subscribe). Waking them sent every old stream of a
// renewal storm through a re-check and an ending status the agent had
// no use for, a write on the journal and a read on the agent.
func (h *hub) streaming(w *streamWaker) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.streaming = true
}

// renewingOver marks the streams of the node's certificate serial on conn
// as renewed to renewed by their own agent. A connection without
// addresses matches none.
func (h *hub) renewingOver(conn v1rpc.ConnID, nodeID, serial, renewed string) {
	if conn == (v1rpc.ConnID{}) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.streams[nodeID] {
		if w.serial == serial && w.conn == conn {
			w.renewedTo = renewed
		}
	}
}

// hasStream reports whether this journal holds a stream of the node with
// the certificate serial that has sent its first state.
func (h *hub) hasStream(nodeID, serial string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.streams[nodeID] {
		if w.serial == serial && w.streaming {
			return true
		}
	}
	return false
}

// othersStreaming reports whether this journal holds another stream of
// w's node that has sent its first state.
func (h *hub) othersStreaming(w *streamWaker) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for o := range h.streams[w.nodeID] {
		if o != w && o.streaming {
			return true
		}
	}
	return false
}

func (h *hub) unregister(w *streamWaker) {
	h.mu.Lock()
	delete(h.streams[w.nodeID], w)
	if len(h.streams[w.nodeID]) == 0 {
		delete(h.streams, w.nodeID)
		h.drops[w.nodeID]++
	}
	h.mu.Unlock()
}

// dropCount is how many times the node's last stream here ended.
func (h *hub) dropCount(nodeID string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.drops[nodeID]
}

// streamCount is how many streams this journal holds for a node.
func (h *hub) streamCount(nodeID string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.streams[nodeID])
}

func (h *hub) notify(ev raftfsm.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ev.NodeIDs {
		for w := range h.streams[id] {
			h.wake(w.node)
		}
	}
	if ev.BundleChanged {
		for _, ws := range h.streams {
			for w := range ws {
				h.wake(w.bundle)
				h.wake(w.node) // a restore may have changed any node
			}
		}
	}
}

// wake wakes a stream unless a test holds wake-ups; h.mu is held.
func (h *hub) wake(ch chan struct{}) {
	if !h.wakesHeld() {
		wake(ch)
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// total is how many streams this journal holds.
func (h *hub) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ws := range h.streams {
		n += len(ws)
	}
	return n
}

// nodes returns the ids of the nodes with at least one open stream here.
func (h *hub) nodes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.streams))
	for id := range h.streams {
		out = append(out, id)
	}
	return out
}

// onCutOff is told when the quorum starts refusing this journal as a peer
// (or takes it again): every stream re-checks at once, and one on a
// journal that no longer serves ends, so its agent goes to one that does.
func (j *Journal) onCutOff(reason string) {
	if reason != "" {
		// Re-key: a journal CA recorded for it meanwhile is taken at once.
		wake(j.rotateNow)
	}
	j.hub.mu.Lock()
	defer j.hub.mu.Unlock()
	for _, ws := range j.hub.streams {
		for w := range ws {
			j.hub.wake(w.node)
		}
	}
}

// onApply is the FSM observer: it runs on Raft's apply goroutine and must
// not block.
func (j *Journal) onApply(ev raftfsm.Event) {
	j.claims.note(ev, j.fsm.Restores())
	if ev.BundleChanged {
		j.bundle.invalidate()
		if _, retiring := j.ownIntermediate(); retiring {
			// This journal's own intermediate is being retired: re-key now.
			wake(j.rotateNow)
		}
		// Its journal CA revoked: it stops signing, and says why.
		j.noteJournalCA()
	}
	j.hub.notify(ev)
	if ev.FederationChanged {
		// A domain federated (again), replaced or removed: every journal
		// polls at once, so a new incarnation's claims are read (and the
		// last one's dropped) without waiting for the next tick.
		j.federation.wake()
	}
	if j.audit != nil && len(ev.Audit) > 0 {
		j.audit.offer(ev.Audit)
	}
}
