package cli

import (
	"fmt"
	"sort"
	"strings"
	"time"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// NodeView is the stable JSON form of a registry record, printed by
// "pact node list -o json" (an array) and "pact node inspect -o json" (one
// object). Field names are a contract with scripts: add fields, never rename
// or remove them. Times are RFC 3339 in UTC, empty when unset.
type NodeView struct {
	NodeID           string   `json:"node_id"`
	State            string   `json:"state"` // registered, active, inactive or revoked
	MACs             []string `json:"macs"`  // never null
	BMCSerial        string   `json:"bmc_serial"`
	TPMEKHash        string   `json:"tpm_ek_hash,omitempty"`
	VCluster         string   `json:"vcluster"` // empty: maintenance mode
	CertSerial       string   `json:"cert_serial"`
	CertNotAfter     string   `json:"cert_not_after"`
	CertIssuerSerial string   `json:"cert_issuer_serial"`
	RegisteredAt     string   `json:"registered_at"`
	RegisteredBy     string   `json:"registered_by"`
	ActivatedAt      string   `json:"activated_at"`
	UpdatedAt        string   `json:"updated_at"`
}

// NodeViewOf converts a registry record to its view. It is the only place
// that does, so list and inspect always agree.
func NodeViewOf(n *pactv1.Node) NodeView {
	hw := n.GetHardware()
	cert := n.GetCert()
	macs := append([]string{}, hw.GetMacs()...)
	return NodeView{
		NodeID:           n.GetNodeId(),
		State:            stateName(n.GetState()),
		MACs:             macs,
		BMCSerial:        hw.GetBmcSerial(),
		TPMEKHash:        hw.GetTpmEkHash(),
		VCluster:         n.GetVcluster(),
		CertSerial:       cert.GetSerial(),
		CertNotAfter:     formatTime(unixTime(cert.GetNotAfterUnix(), 0)),
		CertIssuerSerial: cert.GetIssuerSerial(),
		RegisteredAt:     formatTime(unixTime(0, n.GetRegisteredAtUnixNano())),
		RegisteredBy:     n.GetRegisteredBy(),
		ActivatedAt:      formatTime(unixTime(0, n.GetActivatedAtUnixNano())),
		UpdatedAt:        formatTime(unixTime(0, n.GetUpdatedAtUnixNano())),
	}
}

// nodeViews converts and sorts by node id, so output is stable whatever
// order the journal answers in.
func nodeViews(nodes []*pactv1.Node) []NodeView {
	out := make([]NodeView, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, NodeViewOf(n))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// states maps the wire enum to the names the CLI prints and accepts.
var states = []struct {
	name  string
	state pactv1.NodeState
}{
	{"registered", pactv1.NodeState_NODE_STATE_REGISTERED},
	{"active", pactv1.NodeState_NODE_STATE_ACTIVE},
	{"inactive", pactv1.NodeState_NODE_STATE_INACTIVE},
	{"revoked", pactv1.NodeState_NODE_STATE_REVOKED},
}

// stateName is the lower-case name of a state; "unknown" for a value this
// CLI does not know (a newer journal).
func stateName(s pactv1.NodeState) string {
	for _, st := range states {
		if st.state == s {
			return st.name
		}
	}
	return "unknown"
}

func stateNames() string {
	names := make([]string, len(states))
	for i, st := range states {
		names[i] = st.name
	}
	return strings.Join(names, ", ")
}

// parseState reads a --state value; "" means every state.
func parseState(s string) (pactv1.NodeState, error) {
	if s == "" {
		return pactv1.NodeState_NODE_STATE_UNSPECIFIED, nil
	}
	for _, st := range states {
		if strings.EqualFold(st.name, s) {
			return st.state, nil
		}
	}
	return 0, fmt.Errorf("unknown state %q: use --state with one of %s", s, stateNames())
}

func unixTime(sec, nsec int64) time.Time {
	if sec == 0 && nsec == 0 {
		return time.Time{}
	}
	return time.Unix(sec, nsec)
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
