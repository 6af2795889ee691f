package raftfsm

import (
	"slices"
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

// Filter selects nodes; the zero value selects every node.
type Filter struct {
	State      pactv1.NodeState // NODE_STATE_UNSPECIFIED: any
	VCluster   string           // "": any
	Unassigned bool             // only nodes in no vCluster
	MAC        string           // normalised; "": any
	BMCSerial  string           // normalised; "": any
	Fenced     bool             // only fenced nodes
	Released   bool             // only released nodes (see Released)
}

func (fl Filter) match(n *pactv1.Node) bool {
	switch {
	case fl.State != pactv1.NodeState_NODE_STATE_UNSPECIFIED && n.GetState() != fl.State:
		return false
	case fl.VCluster != "" && n.GetVcluster() != fl.VCluster:
		return false
	case fl.MAC != "" && !slices.Contains(n.GetHardware().GetMacs(), fl.MAC):
		return false
	case fl.BMCSerial != "" && n.GetHardware().GetBmcSerial() != fl.BMCSerial:
		return false
	case fl.Unassigned && n.GetVcluster() != "":
		return false
	case fl.Fenced && n.GetFence() == nil:
		return false
	case fl.Released && !Released(n):
		return false
	}
	return true
}

// Nodes returns the records that pass fl, in node id order.
func (f *FSM) Nodes(fl Filter) []*pactv1.Node {
	f.mu.RLock()
	out := make([]*pactv1.Node, 0, len(f.st.nodes))
	for _, n := range f.st.nodes {
		if fl.match(n) {
			out = append(out, n)
		}
	}
	f.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].GetNodeId() < out[j].GetNodeId() })
	return out
}

// LastSeen is when a journal last reported the node's stream (or the node
// last enrolled or renewed), in Unix nanoseconds; 0 if never.
func (f *FSM) LastSeen(id string) int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.lastSeen[id]
}

// ActiveLastSeen returns every Active node with its last sighting.
func (f *FSM) ActiveLastSeen() map[string]int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]int64)
	for id, n := range f.st.nodes {
		if n.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE {
			out[id] = f.st.lastSeen[id]
		}
	}
	return out
}

// Audit returns up to limit of the newest entries (oldest first) about
// nodeID (any node if empty) at or after sinceUnixNano.
func (f *FSM) Audit(nodeID string, sinceUnixNano int64, limit int) []*pactv1.AuditEntry {
	f.mu.RLock()
	all := f.st.audit.entries()
	f.mu.RUnlock()
	var out []*pactv1.AuditEntry
	for i := len(all) - 1; i >= 0 && len(out) < limit; i-- {
		e := all[i]
		if (nodeID == "" || e.GetNodeId() == nodeID) && e.GetAtUnixNano() >= sinceUnixNano {
			out = append(out, e)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
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
	return f.IntermediatesAt(nowUnix * 1e9)
}

// IntermediatesAt returns the intermediates live at now (Unix nanoseconds):
// not expired, not revoked, and not past the end of a retirement.
func (f *FSM) IntermediatesAt(nowUnixNano int64) []*pactv1.Intermediate {
	nowUnix := nowUnixNano / 1e9
	f.mu.RLock()
	out := make([]*pactv1.Intermediate, 0, len(f.st.intermediates))
	for s, in := range f.st.intermediates {
		if _, revoked := f.st.revoked[s]; revoked || in.GetNotAfterUnix() < nowUnix || IntermediateRevoked(in, nowUnixNano) || f.st.journalCARevoked(in.GetIssuerSerial()) {
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

// Journal returns how a journal of the quorum is reached, as it last
// published.
func (f *FSM) Journal(id string) (*pactv1.JournalInfo, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	ji, ok := f.st.journals[id]
	return ji, ok
}

// AppliedIndex is the index of the last log entry applied here.
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

// Restores counts the snapshots restored into this FSM.
func (f *FSM) Restores() uint64 { return f.restores.Load() }

// Journals lists the journals that published their addresses, by id.
func (f *FSM) Journals() []*pactv1.JournalInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]*pactv1.JournalInfo, 0, len(f.st.journals))
	for _, ji := range f.st.journals {
		out = append(out, ji)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].GetJournalId() < out[b].GetJournalId() })
	return out
}

// NodeCertIssuers counts, by the serial of the intermediate that signed
// it, the current certificates of the nodes not decommissioned that are
// unexpired at nowUnix and not revoked: which intermediates (and so which
// journal CAs and roots) the nodes still chain to (pact journal
// intermediates).
func (f *FSM) NodeCertIssuers(nowUnix int64) map[string]uint32 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := map[string]uint32{}
	for _, n := range f.st.nodes {
		c := n.GetCert()
		if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED || c.GetSerial() == "" || c.GetIssuerSerial() == "" || c.GetNotAfterUnix() < nowUnix {
			continue
		}
		if _, revoked := f.st.revoked[c.GetSerial()]; revoked {
			continue
		}
		out[c.GetIssuerSerial()]++
	}
	return out
}
