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
	// LastSeen is when a journal last saw the node's stream (or its last
	// activation or renewal); empty if never.
	LastSeen  string `json:"last_seen"`
	RevokedAt string `json:"revoked_at"`
	RevokedBy string `json:"revoked_by"`
	// SPIFFEID is the SPIFFE ID registered for the node's SPIRE SVIDs;
	// absent for the default spiffe://{trust-domain}/pact-agent/{node_id}.
	SPIFFEID string `json:"spiffe_id,omitempty"`
	// RequireJoinToken: the node enrolls only with a join token.
	RequireJoinToken bool `json:"require_join_token,omitempty"`
	// Fenced is set while an operator has the node quarantined; the
	// reason, time and operator come with it.
	Fenced      bool   `json:"fenced,omitempty"`
	FenceReason string `json:"fence_reason,omitempty"`
	FencedAt    string `json:"fenced_at,omitempty"`
	FencedBy    string `json:"fenced_by,omitempty"`
	// StandbySerial and StandbyNotAfter are the journal-signed standby a
	// node on a SPIRE SVID holds for when SPIRE stops serving it
	// (docs/spire.md); absent when it has none.
	StandbySerial   string `json:"standby_serial,omitempty"`
	StandbyNotAfter string `json:"standby_not_after,omitempty"`
	// Released is set while the node is Active and its agent released
	// the current certificate on a clean stop (SIGTERM): the node may
	// enroll again at once, with no takeover window. It ends when the
	// node enrolls again, or when it is marked inactive.
	Released bool `json:"released,omitempty"`
	// AlsoActive names the federated domains whose enrollment claims hold
	// the node's hardware Active, as the answering journal holds them:
	// "DOMAIN (node NODE) since T" (docs/domains.md).
	AlsoActive []string `json:"also_active,omitempty"`
	// ClaimsChecked says, per federated domain, how old the claims were
	// that the journal decided on at the node's latest activation, and
	// whether one named its hardware (pact node inspect only;
	// docs/domains.md).
	ClaimsChecked []string `json:"claims_checked,omitempty"`

	lastSeen time.Time // for the relative LAST SEEN column
}

// NodeResultView is what a command that writes one node prints with -o
// json (enroll, update, fence, unfence): the record, and what the command
// did to it.
type NodeResultView struct {
	NodeView
	// Result is "ok" when the command changed the node, "exists" when
	// enroll found it registered exactly so, "unchanged" when there was
	// nothing to do (fence of a fenced node, unfence of one that is not,
	// update to the same identity). Nothing is written to Raft then.
	Result Result `json:"result"`
}

// Result is what a write did to a node: the "result" of a batch row
// (resultOK, resultExists, resultError) and of a single-node write
// (resultOK, resultExists, resultUnchanged) printed with -o json.
type Result string

// resultUnchanged is the result of a single-node write with nothing to
// do; resultOK and resultExists are those of a batch row.
const resultUnchanged Result = "unchanged"

func nodeResult(n *pactv1.Node, unchanged bool, noop Result) NodeResultView {
	r := NodeResultView{NodeView: NodeViewOf(n), Result: resultOK}
	if unchanged {
		r.Result = noop
	}
	return r
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
		LastSeen:         formatTime(unixTime(0, n.GetLastSeenUnixNano())),
		RevokedAt:        formatTime(unixTime(0, n.GetRevokedAtUnixNano())),
		RevokedBy:        n.GetRevokedBy(),
		SPIFFEID:         n.GetSpiffeId(),
		RequireJoinToken: n.GetCredentials().GetRequireJoinToken(),
		Fenced:           n.GetFence() != nil,
		FenceReason:      n.GetFence().GetReason(),
		FencedAt:         formatTime(unixTime(0, n.GetFence().GetAtUnixNano())),
		FencedBy:         n.GetFence().GetBy(),
		StandbySerial:    n.GetStandbyCert().GetSerial(),
		StandbyNotAfter:  formatTime(unixTime(n.GetStandbyCert().GetNotAfterUnix(), 0)),
		Released:         released(n),
		ClaimsChecked:    splitNonEmpty(n.GetClaimsChecked(), "; "),
		lastSeen:         unixTime(0, n.GetLastSeenUnixNano()),
	}
}

// splitNonEmpty is strings.Split, nil for "".
func splitNonEmpty(s, sep string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, sep)
}

// released is raftfsm.Released as the admin view shows it: a journal
// sends released_serial only while the release holds, and the CLI checks
// it against the record all the same.
func released(n *pactv1.Node) bool {
	return n.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && n.GetReleasedSerial() != "" &&
		n.GetReleasedSerial() == n.GetCert().GetSerial()
}

// JoinTokenView is the stable JSON form of a join token as "pact node
// token list|revoke -o json" print it: never the token, only its id (the
// first digits of its SHA-256).
type JoinTokenView struct {
	ID        string `json:"id"`
	NodeID    string `json:"node_id"`
	State     string `json:"state"` // unused, used or expired
	CreatedAt string `json:"created_at"`
	CreatedBy string `json:"created_by"`
	ExpiresAt string `json:"expires_at"`
	UsedAt    string `json:"used_at"`
}

// JoinTokenViewOf converts a token description to its view at now.
func JoinTokenViewOf(t *pactv1.JoinTokenInfo, now time.Time) JoinTokenView {
	state := "unused"
	switch {
	case t.GetUsedAtUnixNano() != 0:
		state = "used"
	case !now.Before(unixTime(0, t.GetExpiresAtUnixNano())):
		state = "expired"
	}
	return JoinTokenView{
		ID:        t.GetId(),
		NodeID:    t.GetNodeId(),
		State:     state,
		CreatedAt: formatTime(unixTime(0, t.GetCreatedAtUnixNano())),
		CreatedBy: t.GetCreatedBy(),
		ExpiresAt: formatTime(unixTime(0, t.GetExpiresAtUnixNano())),
		UsedAt:    formatTime(unixTime(0, t.GetUsedAtUnixNano())),
	}
}

// AuditView is the stable JSON form of one audit entry, printed one per
// line by "pact audit -o json" (JSON lines, for jq or a log shipper).
// Field names are a contract: add fields, never rename or remove them.
type AuditView struct {
	Index uint64 `json:"index"` // Raft log index of the change
	// Time is RFC 3339 with nanoseconds, UTC.
	Time   string `json:"time"`
	Action string `json:"action"`
	NodeID string `json:"node_id"`
	Actor  string `json:"actor"`
	// Via is the journal that forwarded the write to the leader
	// (journal/ID, as the leader authenticated it); empty when the leader
	// took it itself.
	Via           string `json:"via"`
	Source        string `json:"source"`
	Serial        string `json:"serial"`
	CorrelationID string `json:"correlation_id"`
	Detail        string `json:"detail"`
}

// AuditViewOf converts an audit entry to its view.
func AuditViewOf(e *pactv1.AuditEntry) AuditView {
	t := ""
	if at := e.GetAtUnixNano(); at != 0 {
		t = time.Unix(0, at).UTC().Format(time.RFC3339Nano)
	}
	return AuditView{
		Index:         e.GetIndex(),
		Time:          t,
		Action:        e.GetAction(),
		NodeID:        e.GetNodeId(),
		Actor:         e.GetActor(),
		Via:           e.GetVia(),
		Source:        e.GetSource(),
		Serial:        e.GetSerial(),
		CorrelationID: e.GetCorrelationId(),
		Detail:        e.GetDetail(),
	}
}

// ago is a time relative to now for a table: "12s ago", "5m ago", "3h ago",
// "2d ago"; "-" for the zero time. A time ahead of now (clock skew between
// the journal and this machine) reads "just now".
func ago(now, t time.Time) string {
	if t.IsZero() {
		return none
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

// vclusterName is a vCluster for a sentence: empty is "maintenance", the
// word the journal's audit trail uses too.
func vclusterName(v string) string {
	if v == "" {
		return "maintenance"
	}
	return v
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

// Marks the STATE column adds to a state, each also a --state filter.
const (
	markFenced   = "fenced"
	markReleased = "released"
)

// stateFilter is a --state value: a state, marks, or both ("" and false:
// any).
type stateFilter struct {
	state    pactv1.NodeState
	fenced   bool
	released bool
}

// parseState reads a --state value as the STATE column prints it: a
// state (registered, active, inactive, revoked), a mark (fenced,
// released), or several comma-separated, every one of which must hold
// ("inactive,fenced"). "" means every node.
func parseState(s string) (stateFilter, error) {
	var f stateFilter
	if strings.TrimSpace(s) == "" {
		return f, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.ToLower(strings.TrimSpace(part))
		switch part {
		case markFenced:
			f.fenced = true
			continue
		case markReleased:
			f.released = true
			continue
		}
		st, ok := stateOf(part)
		switch {
		case !ok:
			return stateFilter{}, fmt.Errorf("unknown state %q in --state %q: use one of %s, or the marks %s and %s (alone, or after a state as the STATE column shows them, e.g. inactive,fenced)",
				part, s, stateNames(), markFenced, markReleased)
		case f.state != pactv1.NodeState_NODE_STATE_UNSPECIFIED && f.state != st:
			return stateFilter{}, fmt.Errorf("--state %q names two states: a node is in one; pass one of them (or run pact node list twice)", s)
		}
		f.state = st
	}
	if f.released && f.state != pactv1.NodeState_NODE_STATE_UNSPECIFIED && f.state != pactv1.NodeState_NODE_STATE_ACTIVE {
		return stateFilter{}, fmt.Errorf("--state %q: only an active node can be released; use --state released or active,released", s)
	}
	return f, nil
}

func stateOf(name string) (pactv1.NodeState, bool) {
	for _, st := range states {
		if st.name == name {
			return st.state, true
		}
	}
	return 0, false
}

// match reports whether v passes the filter. The journal filters too;
// this also holds for a journal from before the fenced and released
// filters, which ignores them and lists every node.
func (f stateFilter) match(v NodeView) bool {
	return (f.state == pactv1.NodeState_NODE_STATE_UNSPECIFIED || v.State == stateName(f.state)) &&
		(!f.fenced || v.Fenced) && (!f.released || v.Released)
}

// String is the filter as the STATE column would show it.
func (f stateFilter) String() string {
	var parts []string
	if f.state != pactv1.NodeState_NODE_STATE_UNSPECIFIED {
		parts = append(parts, stateName(f.state))
	}
	if f.released {
		parts = append(parts, markReleased)
	}
	if f.fenced {
		parts = append(parts, markFenced)
	}
	return strings.Join(parts, ",")
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
