package raftfsm

import (
	"sort"
	"strings"

	"github.com/pact-hpc/pact/internal/hwid"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The read side. Every method answers from this replica's applied state; a
// caller that needs linearizable reads issues a Raft barrier first.
// Returned records are shared and must not be modified.

// Node returns the record of id.
func (f *FSM) Node(id string) (*pactv1.Node, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, ok := f.st.nodes[id]
	return n, ok
}

// Resolve matches a reported hardware identity with the same rule Apply uses.
func (f *FSM) Resolve(rep hwid.Identity) Resolution {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.resolve(rep)
}

// Nodes returns the records in node id order, filtered by state when state
// is not NODE_STATE_UNSPECIFIED.
func (f *FSM) Nodes(state pactv1.NodeState) []*pactv1.Node {
	f.mu.RLock()
	out := make([]*pactv1.Node, 0, len(f.st.nodes))
	for _, n := range f.st.nodes {
		if state == pactv1.NodeState_NODE_STATE_UNSPECIFIED || n.GetState() == state {
			out = append(out, n)
		}
	}
	f.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].GetNodeId() < out[j].GetNodeId() })
	return out
}

// IsRevoked reports whether a certificate serial is in the revocation set.
func (f *FSM) IsRevoked(serial string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, ok := f.st.revoked[serial]
	return ok
}

// Intermediates returns the published intermediates that are not expired
// at nowUnix and not revoked, in serial order.
func (f *FSM) Intermediates(nowUnix int64) []*pactv1.Intermediate {
	f.mu.RLock()
	out := make([]*pactv1.Intermediate, 0, len(f.st.intermediates))
	for s, in := range f.st.intermediates {
		if _, revoked := f.st.revoked[s]; revoked || in.GetNotAfterUnix() < nowUnix {
			continue
		}
		out = append(out, in)
	}
	f.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].GetSerial() < out[j].GetSerial() })
	return out
}

// StateName is the lower-case name operators see: registered, active,
// inactive, revoked.
func StateName(s pactv1.NodeState) string {
	name := strings.TrimPrefix(s.String(), "NODE_STATE_")
	return strings.ToLower(name)
}
