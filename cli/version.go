package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/version"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// versionView is "pact version -o json". Field names are a contract with
// scripts: add fields, never rename or remove them.
type versionView struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
	// Journals is each journal of the quorum and the build it reports;
	// absent with --client or when no journal is configured.
	Journals []journalVersionView `json:"journals,omitempty"`
}

type journalVersionView struct {
	JournalID string `json:"journal_id"`
	Reachable bool   `json:"reachable"`
	// Version is empty when the journal did not answer.
	Version string `json:"version"`
	Error   string `json:"error,omitempty"`
}

func (a *app) versionCommand() *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the pact CLI's version and each journal's",
		Long: `Print the version of this pact binary (stamped from git at build time),
the Go release it was built with and its platform, then, when a journal is
configured (--journal or PACT_JOURNAL), the version every journal of the
quorum reports. With --client it does not contact the journal.`,
		Example: `  pact version
  pact version --client
  pact version -o json | jq -r '.journals[].version'`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string) error {
			out, err := a.flags.resolveOutput()
			if err != nil {
				return newUsage(cmd.CommandPath(), err)
			}
			info := version.Get()
			v := versionView{Version: info.Version, Commit: info.Commit, Go: info.Go, Platform: info.Platform}
			if !clientOnly && (a.flags.flagsSet("journal") || a.env.Getenv(EnvJournal) != "") {
				s, err := a.connect(cmd, nil)
				if err != nil {
					return err
				}
				defer s.close()
				resp, err := s.client.JournalStatus(cmd.Context(), &pactv1.JournalStatusRequest{})
				if err != nil {
					return a.explainJournal(cmd.Context(), s, journalAction{verb: "read the journals' versions", help: cmd.CommandPath()}, err)
				}
				for _, m := range memberViews(resp.GetMembers()) {
					v.Journals = append(v.Journals, journalVersionView{JournalID: m.JournalID, Reachable: m.Reachable, Version: m.Version, Error: m.Error})
				}
			}
			if out == outputJSON {
				return writeJSON(a.env.Stdout, v)
			}
			if _, err := fmt.Fprintf(a.env.Stdout, "pact %s\n", info); err != nil {
				return err
			}
			if len(v.Journals) == 0 {
				return nil
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "JOURNAL\tVERSION")
			for _, j := range v.Journals {
				ver := cell(j.Version)
				if !j.Reachable {
					ver = "unreachable: " + cell(j.Error)
				}
				fmt.Fprintf(tw, "%s\t%s\n", cell(j.JournalID), ver)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print only this CLI's version; do not contact the journal")
	return cmd
}
