package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/duration"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// maxAuditLimit is the most entries one ListAudit call returns.
const maxAuditLimit = 10000

type auditOptions struct {
	node  string
	since string
	limit uint32
}

func (a *app) auditCommand() *cobra.Command {
	var o auditOptions
	cmd := &cobra.Command{
		Use:   "audit [--node NODE] [--since TIME] [--limit N]",
		Short: "Show the audit trail: who changed what in the registry, and when",
		Long: `Show the audit trail the journal quorum keeps in Raft: every committed change
to the registry (register, enroll, takeover, renew, decommission, assign,
unassign, move, inactive, active), oldest first, with who asked (admin/NAME,
agent/NODE or journal/ID), from which network address, the certificate
serial involved and the request's correlation id.

--since takes an RFC 3339 time (2026-03-04T05:06:07Z) or a duration back
from now (90s, 15m, 1h, 2d). --limit caps the answer to the newest N entries
(default 1000, at most 10000).

-o json prints JSON lines: one object per entry, with snake_case fields
(index, time, action, node_id, actor, source, serial, correlation_id,
detail), ready for jq or a log shipper such as Loki's promtail.`,
		Example: `  # The last hour
  pact audit --since 1h

  # Everything about one node
  pact audit --node node-001

  # Decommissions since a date, with jq
  pact audit --since 2026-03-01T00:00:00Z -o json | jq -c 'select(.action == "decommission")'`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			return a.audit(cmd, args, o)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.node, "node", "", "only entries about this node")
	f.StringVar(&o.since, "since", "", "only entries at or after this time: RFC 3339, or a duration back from now such as 1h")
	f.Uint32Var(&o.limit, "limit", 0, "at most this many entries, the newest (default 1000, at most 10000)")
	return cmd
}

func (a *app) audit(cmd *cobra.Command, args []string, o auditOptions) error {
	var problems []error
	if len(args) > 0 {
		problems = append(problems, fmt.Errorf("%s takes no arguments, got %q; for one node use: pact audit --node %s", cmd.CommandPath(), args[0], args[0]))
	}
	if o.node != "" {
		if err := pki.ValidateName("node", o.node); err != nil {
			problems = append(problems, fmt.Errorf("--node: %w", err))
		}
	}
	var since time.Time
	if o.since != "" {
		var err error
		if since, err = parseSince(o.since, a.env.Now()); err != nil {
			problems = append(problems, err)
		}
	}
	if o.limit > maxAuditLimit {
		problems = append(problems, fmt.Errorf("--limit %d: at most %d; narrow the range with --since or --node", o.limit, maxAuditLimit))
	}
	s, err := a.connect(cmd, problems)
	if err != nil {
		return err
	}
	defer s.close()

	req := &pactv1.ListAuditRequest{NodeId: o.node, Limit: o.limit}
	if !since.IsZero() {
		req.SinceUnixNano = since.UnixNano()
	}
	resp, err := s.client.ListAudit(cmd.Context(), req)
	if err != nil {
		return s.explain(action{verb: "read the audit trail", help: cmd.CommandPath()}, err)
	}
	views := make([]AuditView, len(resp.GetEntries()))
	for i, e := range resp.GetEntries() {
		views[i] = AuditViewOf(e)
	}
	if s.cfg.Output == outputJSON {
		for _, v := range views {
			if err := writeJSONLine(a.env.Stdout, v); err != nil {
				return err
			}
		}
		return nil
	}
	if len(views) == 0 {
		var filters []string
		if o.node != "" {
			filters = append(filters, "about node "+o.node)
		}
		if !since.IsZero() {
			filters = append(filters, "since "+since.UTC().Format(time.RFC3339))
		}
		msg := "no audit entries"
		if len(filters) > 0 {
			msg += " " + strings.Join(filters, ", ") + "; widen the search with an earlier --since"
		}
		fmt.Fprintln(a.env.Stderr, msg)
		return nil
	}
	return writeAuditTable(a.env.Stdout, views)
}

var errSince = errors.New("bad --since")

// parseSince reads --since: an RFC 3339 time, or a positive duration back
// from now (Go syntax such as 90m or 1h30m, days such as 2d or 1d12h: internal/duration).
func parseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := duration.Parse(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%w %q: want an RFC 3339 time such as 2026-03-04T05:06:07Z, or a duration back from now such as 90s, 15m, 1h or 2d", errSince, s)
	}
	return now.Add(-d), nil
}
