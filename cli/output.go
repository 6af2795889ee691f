package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// Placeholders for empty table cells.
const (
	none        = "-"
	maintenance = "(maintenance)"
)

// Table widths beyond which serials are shortened. Only tables shorten;
// JSON and inspect always print the full value.
const (
	certSerialWidth = 12
	bmcSerialWidth  = 20
)

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeJSONLine writes v as one compact JSON line, with <, > and & as
// themselves (a log line, not HTML).
func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// writeNodeTable prints one row per node. LAST SEEN is relative to now.
func writeNodeTable(w io.Writer, nodes []NodeView, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tVCLUSTER\tLAST SEEN\tMACS\tBMC SERIAL\tCERT SERIAL\tCERT EXPIRES")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			cell(n.NodeID),
			stateCell(n),
			vclusterCell(n.VCluster),
			ago(now, n.lastSeen),
			cell(strings.Join(n.MACs, ",")),
			cell(shorten(n.BMCSerial, bmcSerialWidth)),
			cell(shorten(n.CertSerial, certSerialWidth)),
			cell(n.CertNotAfter),
		)
	}
	return tw.Flush()
}

// writeAuditTable prints one row per audit entry, in the order given.
func writeAuditTable(w io.Writer, entries []AuditView) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tACTION\tNODE\tACTOR\tSOURCE\tSERIAL\tDETAIL")
	for _, e := range entries {
		t := e.Time
		actor := e.Actor
		if e.Via != "" {
			actor += " via " + e.Via
		}
		if parsed, err := time.Parse(time.RFC3339Nano, t); err == nil {
			t = parsed.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			cell(t),
			cell(e.Action),
			cell(e.NodeID),
			cell(actor),
			cell(e.Source),
			cell(shorten(e.Serial, certSerialWidth)),
			cell(e.Detail),
		)
	}
	return tw.Flush()
}

// writeNodeBlock prints one node as aligned "key: value" lines.
func writeNodeBlock(w io.Writer, n NodeView, now time.Time) error {
	lastSeen := none
	if n.LastSeen != "" {
		lastSeen = n.LastSeen + " (" + ago(now, n.lastSeen) + ")"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	rows := []struct{ k, v string }{
		{"node", cell(n.NodeID)},
		{"state", cell(n.State)},
		{"vcluster", vclusterCell(n.VCluster)},
		{"macs", cell(strings.Join(n.MACs, ", "))},
		{"bmc serial", cell(n.BMCSerial)},
		{"tpm ek hash", cell(n.TPMEKHash)},
		{"cert serial", cell(n.CertSerial)},
		{"cert expires", cell(n.CertNotAfter)},
		{"cert issuer serial", cell(n.CertIssuerSerial)},
		{"registered at", cell(n.RegisteredAt)},
		{"registered by", cell(n.RegisteredBy)},
		{"activated at", cell(n.ActivatedAt)},
		{"updated at", cell(n.UpdatedAt)},
		{"last seen", lastSeen},
		{"revoked at", cell(n.RevokedAt)},
		{"revoked by", cell(n.RevokedBy)},
	}
	if n.RequireJoinToken {
		rows = append(rows, struct{ k, v string }{"credentials", "hardware + join token"})
	}
	if n.Released {
		rows = append(rows, struct{ k, v string }{"released", "yes: its agent stopped cleanly holding certificate " + cell(n.CertSerial) + "; the node may enroll again at once"})
	}
	if n.Fenced {
		rows = append(rows,
			struct{ k, v string }{"fenced at", cell(n.FencedAt)},
			struct{ k, v string }{"fenced by", cell(n.FencedBy)},
			struct{ k, v string }{"fence reason", cell(n.FenceReason)})
	}
	if n.StandbySerial != "" {
		rows = append(rows, struct{ k, v string }{"standby serial", cell(n.StandbySerial)},
			struct{ k, v string }{"standby expires", cell(n.StandbyNotAfter)})
	}
	for _, a := range n.AlsoActive {
		rows = append(rows, struct{ k, v string }{"also active in domain", cell(a)})
	}
	for _, c := range n.ClaimsChecked {
		rows = append(rows, struct{ k, v string }{"claims at activation", cell(c)})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r.k, r.v)
	}
	return tw.Flush()
}

// cell is a table or block value: "-" when empty, and never a control
// character, so registry data cannot drive the operator's terminal.
func cell(s string) string {
	if s == "" {
		return none
	}
	return printable(s)
}

// stateCell is a node's state for a table, marked when it is released or
// fenced: "active,released", "inactive,fenced". Each part is also a
// --state filter of pact node list.
func stateCell(n NodeView) string {
	s := cell(n.State)
	if n.Released {
		s += "," + markReleased
	}
	if n.Fenced {
		s += "," + markFenced
	}
	return s
}

// writeTokenTable prints one row per join token.
func writeTokenTable(w io.Writer, tokens []JoinTokenView) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNODE\tSTATE\tEXPIRES\tUSED\tCREATED BY")
	for _, t := range tokens {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(t.ID), cell(t.NodeID), cell(t.State), cell(t.ExpiresAt), cell(t.UsedAt), cell(t.CreatedBy))
	}
	return tw.Flush()
}

func vclusterCell(v string) string {
	if v == "" {
		return maintenance
	}
	return printable(v)
}

func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

// shorten cuts s to width runes, marking the cut with an ellipsis.
func shorten(s string, width int) string {
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	return string(r[:width-1]) + "…"
}
