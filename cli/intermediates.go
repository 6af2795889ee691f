package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/duration"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// IntermediateView is the stable JSON form of one journal intermediate in
// "pact journal intermediates -o json" and of what retire-intermediate and
// remove --revoke-intermediate retired.
type IntermediateView struct {
	JournalID string `json:"journal_id"`
	Serial    string `json:"serial"`
	NotAfter  string `json:"not_after"`
	// State is active, retiring (holders told to renew) or revoked (out of
	// the trust bundle, its certificates refused).
	State     string `json:"state"`
	RetiredAt string `json:"retired_at"`
	RevokeAt  string `json:"revoke_at"`
	RetiredBy string `json:"retired_by"`
	Reason    string `json:"reason"`
}

// IntermediateViewOf converts a record; now decides retiring or revoked.
func IntermediateViewOf(in *pactv1.Intermediate, now time.Time) IntermediateView {
	v := IntermediateView{
		JournalID: in.GetJournalId(), Serial: in.GetSerial(),
		NotAfter:  formatTime(unixTime(in.GetNotAfterUnix(), 0)),
		RetiredAt: formatTime(unixTime(0, in.GetRetiredAtUnixNano())),
		RevokeAt:  formatTime(unixTime(0, in.GetRevokeAtUnixNano())),
		RetiredBy: in.GetRetiredBy(), Reason: in.GetRetireReason(),
		State: "active",
	}
	switch at := in.GetRevokeAtUnixNano(); {
	case at == 0:
	case now.UnixNano() >= at:
		v.State = "revoked"
	default:
		v.State = "retiring"
	}
	return v
}

func intermediateViews(ins []*pactv1.Intermediate, now time.Time) []IntermediateView {
	out := make([]IntermediateView, 0, len(ins))
	for _, in := range ins {
		out = append(out, IntermediateViewOf(in, now))
	}
	return out
}

func writeIntermediateTable(w io.Writer, vs []IntermediateView) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOURNAL\tSERIAL\tSTATE\tEXPIRES\tREVOKE AT\tREASON")
	for _, v := range vs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.JournalID, v.Serial, v.State, v.NotAfter, orNone(v.RevokeAt), orNone(v.Reason))
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

func (a *app) journalIntermediatesCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "intermediates",
		Short: "List the journals' intermediate CA certificates and their state",
		Long: `List every intermediate CA certificate the journals have published into Raft:
each journal makes a fresh one at start and at half its life. STATE is
active, retiring (an operator retired it: agents holding its certificates
are told to renew; it is revoked at REVOKE AT) or revoked (out of the trust
bundle; its certificates are refused everywhere). Any operator role may list.`,
		Example: `  pact journal intermediates
  pact journal intermediates -o json | jq -r '.[] | select(.state=="active") | .serial'`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			var problems []error
			if len(args) > 0 {
				problems = append(problems, fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args[0]))
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.ListIntermediates(cmd.Context(), &pactv1.ListIntermediatesRequest{})
			if err != nil {
				return s.explain(action{verb: "list intermediates", help: cmd.CommandPath()}, err)
			}
			now := time.Unix(0, resp.GetServerTimeUnixNano())
			vs := intermediateViews(resp.GetIntermediates(), now)
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, vs)
			}
			return writeIntermediateTable(a.env.Stdout, vs)
		}),
	}
}

func (a *app) journalRetireCommand() *cobra.Command {
	var grace time.Duration
	var now bool
	var reason string
	cmd := &cobra.Command{
		Use:   "retire-intermediate SERIAL|JOURNAL...",
		Short: "Retire journal intermediates: holders renew, then the intermediate is revoked (platform-admin)",
		Long: `Retire intermediate CA certificates, named by serial or by journal id (every
intermediate that journal published). Agents holding certificates from them
are told on their stream to renew at once, and do (from a live
intermediate). After --grace (default: the journal's, 15m) the intermediates
leave the trust bundle and every certificate they signed is refused on every
journal, on the gRPC and Raft ports alike. --now skips the grace: agents
that have not renewed must enroll again.

A journal whose own current intermediate is retired makes a new one at once.
To cut off a compromised journal, remove it and revoke its intermediates in
one step: pact journal remove ID --revoke-intermediate.`,
		Example: `  pact journal retire-intermediate j3
  pact journal retire-intermediate 5c0d1e... --grace 1h --reason "key in a backup"
  pact journal retire-intermediate j3 --now`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			var problems []error
			if len(args) == 0 {
				problems = append(problems, errors.New("name at least one intermediate serial or journal id (pact journal intermediates lists them)"))
			}
			if now && cmd.Flags().Changed("grace") {
				problems = append(problems, errors.New("--now and --grace exclude each other"))
			}
			if grace < 0 || (cmd.Flags().Changed("grace") && grace < time.Second) {
				problems = append(problems, fmt.Errorf("--grace %v: want at least 1s, or --now", grace))
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.RetireIntermediate(cmd.Context(), &pactv1.RetireIntermediateRequest{
				Targets: args, GraceSeconds: int64(grace / time.Second), Now: now, Reason: reason,
			})
			if err != nil {
				return s.explain(action{verb: "retire intermediates", write: true, help: cmd.CommandPath(),
					notFound: "no intermediate or journal by that name; list them with: pact journal intermediates"}, err)
			}
			vs := intermediateViews(resp.GetRetired(), a.env.Now())
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, vs)
			}
			for _, v := range vs {
				fmt.Fprintf(a.env.Stdout, "intermediate %s of journal %s is %s: its agents renew now; revoked at %s\n", v.Serial, v.JournalID, v.State, v.RevokeAt)
			}
			return nil
		}),
	}
	cmd.Flags().Var(duration.NewValue(&grace, 0), "grace", "how long agents have to renew before the intermediates are revoked (default: the journal's, 15m)")
	cmd.Flags().BoolVar(&now, "now", false, "revoke at once, with no grace")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit trail and the agents' logs")
	return cmd
}
