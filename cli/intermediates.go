package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/duration"
	"github.com/pact-hpc/pact/internal/pki"
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
	// IssuerSerial is the journal CA that signed it; empty when the domain
	// root signed it (the layout before journal CAs).
	IssuerSerial string `json:"issuer_serial"`
}

// JournalCAView is the stable JSON form of one journal CA in "pact journal
// intermediates --journal-cas -o json" and of what revoke-ca revoked.
type JournalCAView struct {
	JournalID string `json:"journal_id"`
	Serial    string `json:"serial"`
	// State is active, revoked (out of the trust bundle with every
	// intermediate it signed) or expired.
	State      string `json:"state"`
	NotAfter   string `json:"not_after"`
	RecordedAt string `json:"recorded_at"`
	RevokedAt  string `json:"revoked_at"`
	RevokedBy  string `json:"revoked_by"`
	Reason     string `json:"reason"`
	// LiveIntermediates counts the intermediates it signed that are in
	// the trust bundle (active or retiring, not expired).
	LiveIntermediates int `json:"live_intermediates"`
}

// IntermediateViewOf converts a record; now decides retiring or revoked.
func IntermediateViewOf(in *pactv1.Intermediate, now time.Time) IntermediateView {
	v := IntermediateView{
		JournalID: in.GetJournalId(), Serial: in.GetSerial(),
		NotAfter:  formatTime(unixTime(in.GetNotAfterUnix(), 0)),
		RetiredAt: formatTime(unixTime(0, in.GetRetiredAtUnixNano())),
		RevokeAt:  formatTime(unixTime(0, in.GetRevokeAtUnixNano())),
		RetiredBy: in.GetRetiredBy(), Reason: in.GetRetireReason(),
		IssuerSerial: in.GetIssuerSerial(),
		State:        "active",
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

// JournalCAViewOf converts a record; ins are the intermediates listed
// with it, of which it counts the live ones it signed.
func JournalCAViewOf(jc *pactv1.JournalCA, ins []*pactv1.Intermediate, now time.Time) JournalCAView {
	v := JournalCAView{
		JournalID: jc.GetJournalId(), Serial: jc.GetSerial(),
		NotAfter:   formatTime(unixTime(jc.GetNotAfterUnix(), 0)),
		RecordedAt: formatTime(unixTime(0, jc.GetRecordedAtUnixNano())),
		RevokedAt:  formatTime(unixTime(0, jc.GetRevokedAtUnixNano())),
		RevokedBy:  jc.GetRevokedBy(), Reason: jc.GetRevokeReason(),
		State: "active",
	}
	switch {
	case jc.GetRevokedAtUnixNano() != 0:
		v.State = "revoked"
	case jc.GetNotAfterUnix() < now.Unix():
		v.State = "expired"
	}
	for _, in := range ins {
		if in.GetIssuerSerial() != jc.GetSerial() || in.GetNotAfterUnix() < now.Unix() {
			continue
		}
		if st := IntermediateViewOf(in, now).State; st == "active" || st == "retiring" {
			v.LiveIntermediates++
		}
	}
	return v
}

func journalCAViews(cas []*pactv1.JournalCA, ins []*pactv1.Intermediate, now time.Time) []JournalCAView {
	out := make([]JournalCAView, 0, len(cas))
	for _, jc := range cas {
		out = append(out, JournalCAViewOf(jc, ins, now))
	}
	return out
}

func writeIntermediateTable(w io.Writer, vs []IntermediateView) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOURNAL\tSERIAL\tSTATE\tEXPIRES\tISSUER\tREVOKE AT\tREASON")
	for _, v := range vs {
		issuer := v.IssuerSerial
		if issuer == "" {
			issuer = "root"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.JournalID, v.Serial, v.State, v.NotAfter, issuer, orNone(v.RevokeAt), orNone(v.Reason))
	}
	return tw.Flush()
}

func writeJournalCATable(w io.Writer, vs []JournalCAView) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOURNAL\tJOURNAL CA\tSTATE\tEXPIRES\tLIVE INTERMEDIATES\tREVOKED AT\tREASON")
	for _, v := range vs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", v.JournalID, v.Serial, v.State, v.NotAfter, v.LiveIntermediates, orNone(v.RevokedAt), orNone(v.Reason))
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
	var cas bool
	cmd := &cobra.Command{
		Use:   "intermediates",
		Short: "List the journals' intermediate CA certificates and journal CAs, and their state",
		Long: `List every intermediate CA certificate the journals have published into Raft:
each journal makes a fresh one at start and at half its life. STATE is
active, retiring (an operator retired it: agents holding its certificates
are told to renew; it is revoked at REVOKE AT) or revoked (out of the trust
bundle; its certificates are refused everywhere). ISSUER is the journal CA
that signed it, or root for one the domain root signed (a journal not yet
moved to a journal CA).

Then the journal CAs: each journal host's CA certificate, made in the
ceremony (docs/ceremony.md) and recorded when its journal first publishes an
intermediate under it. STATE is active, revoked (pact journal revoke-ca: out
of the trust bundle with every intermediate it signed) or expired; LIVE
INTERMEDIATES counts those it signed that are in the trust bundle.

-o json prints the intermediates as an array; with --journal-cas, the
journal CAs instead (--journal-cas alone prints only their table). Any
operator role may list.`,
		Example: `  pact journal intermediates
  pact journal intermediates -o json | jq -r '.[] | select(.state=="active") | .serial'
  pact journal intermediates --journal-cas -o json | jq -r '.[] | select(.state=="active") | "\(.journal_id) \(.not_after)"'`,
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
			cv := journalCAViews(resp.GetJournalCas(), resp.GetIntermediates(), now)
			switch {
			case s.cfg.Output == outputJSON && cas:
				return writeJSON(a.env.Stdout, cv)
			case s.cfg.Output == outputJSON:
				return writeJSON(a.env.Stdout, vs)
			case cas:
				return writeJournalCATable(a.env.Stdout, cv)
			}
			if err := writeIntermediateTable(a.env.Stdout, vs); err != nil {
				return err
			}
			if len(cv) == 0 {
				return nil
			}
			fmt.Fprintln(a.env.Stdout)
			return writeJournalCATable(a.env.Stdout, cv)
		}),
	}
	cmd.Flags().BoolVar(&cas, "journal-cas", false, "list the journal CAs only (with -o json: the journal CAs instead of the intermediates)")
	return cmd
}

// RevokedJournalCAs is the JSON form of what pact journal revoke-ca did.
type RevokedJournalCAs struct {
	Revoked []JournalCAView `json:"revoked"`
	// Intermediates are the intermediates they had signed, revoked with
	// them.
	Intermediates []IntermediateView `json:"intermediates"`
}

func (a *app) journalRevokeCACommand() *cobra.Command {
	var yes bool
	var reason string
	cmd := &cobra.Command{
		Use:   "revoke-ca SERIAL|JOURNAL... --reason TEXT --yes",
		Short: "Revoke journal CAs at once, with every intermediate they signed (platform-admin)",
		Long: `Revoke journal CAs, named by serial or by journal id (every journal CA the
registry holds for that journal). At once and on every journal, they and
every intermediate they signed leave the trust bundle, and every certificate
below them (agents, journal servers, operators issued online) is refused:
there is no grace. Agents whose certificate came from them must enroll
again, from another journal.

The journal whose journal CA is revoked signs nothing until it has a new one
from the ceremony (docs/ceremony.md); it logs so at ERROR and answers
JOURNAL_CA_REVOKED, and agents go to the other journals. Revoke when a
journal host or its journal CA key is compromised; a journal leaving the
quorum for good can be removed (pact journal remove) and its journal CA
revoked too.

--reason is required (the audit trail), and --yes confirms: pact journal
intermediates shows the journal CAs and how many live intermediates each
one signed. Revoking an already revoked journal CA changes nothing.`,
		Example: `  pact journal intermediates --journal-cas
  pact journal revoke-ca j3 --reason "host j3 stolen (INC-42)" --yes
  pact journal revoke-ca 3f2a9c... --reason "key file copied" --yes -o json`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			var problems []error
			if len(args) == 0 {
				problems = append(problems, errors.New("name at least one journal CA serial or journal id (pact journal intermediates --journal-cas lists them)"))
			}
			if reason == "" {
				problems = append(problems, errors.New("--reason is required: say why, for the audit trail"))
			}
			if !yes {
				problems = append(problems, errors.New("nothing revoked: a revoked journal CA takes every certificate below it out of the trust bundle at once, on every journal, and its journal stops signing until the ceremony gives it a new one; check what you name with pact journal intermediates --journal-cas, then re-run with --yes"))
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.RevokeJournalCA(cmd.Context(), &pactv1.RevokeJournalCARequest{Targets: args, Reason: reason})
			if err != nil {
				return s.explain(action{verb: "revoke journal CAs", write: true, help: cmd.CommandPath(),
					notFound: "no journal CA or journal by that name in the registry; list them with: pact journal intermediates --journal-cas"}, err)
			}
			now := a.env.Now()
			out := RevokedJournalCAs{Revoked: journalCAViews(resp.GetRevoked(), resp.GetIntermediates(), now), Intermediates: intermediateViews(resp.GetIntermediates(), now)}
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, out)
			}
			for _, v := range out.Revoked {
				n := 0
				for _, in := range out.Intermediates {
					if in.IssuerSerial == v.Serial {
						n++
					}
				}
				fmt.Fprintf(a.env.Stdout, "journal CA %s of journal %s is revoked (%s, by %s); %d intermediates it signed left the trust bundle with it. Journal %s signs nothing until it has a new journal CA (docs/ceremony.md)\n",
					v.Serial, v.JournalID, v.Reason, v.RevokedBy, n, v.JournalID)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit trail (required)")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the revocation")
	return cmd
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

// readJournalCAFile reads a journal CA certificate (PEM, its first
// certificate) and returns its DER.
func readJournalCAFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	certs, err := pki.ParseCertsPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, _, ok := caprofile.JournalOf(certs[0]); !ok {
		return nil, fmt.Errorf("%s: %q is not a journal CA certificate (the ceremony's pact ca sign-journal makes one)", path, certs[0].Subject.CommonName)
	}
	return certs[0].Raw, nil
}

// RecordedJournalCA is the JSON output of journal record-ca.
type RecordedJournalCA struct {
	JournalCA  JournalCAView   `json:"journal_ca"`
	Superseded []JournalCAView `json:"superseded"` // never null
}

func (a *app) journalRecordCACommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "record-ca ID FILE",
		Short: "Bind a journal to a journal CA with a new key: a replaced host's, or one re-issued after a revocation (platform-admin)",
		Long: `Record FILE (PEM), a journal CA the ceremony signed for journal ID, as the
journal CA ID is bound to. Only a chain through the journal CA a journal id
is bound to is that journal to the quorum: on the Raft port, on the peer
service, and when it publishes an intermediate. The binding is made when a
journal first publishes under a journal CA, or when pact journal add adds
it, and moves by itself to a re-issue with the same key (the yearly renewal,
a root rollover). A journal CA with a new key needs an operator's word:

  - a journal CA revoked (pact journal revoke-ca) and re-issued with a new
    key for the same journal, which keeps running;
  - a host replaced in place, keeping its journal id and membership.

The certificate must be a journal CA of this domain for ID, signed by a
domain root the journal trusts, valid now, and not revoked. Recording it
supersedes every journal CA ID had: they give no peer rights and sign no new
intermediate (the intermediates they signed stay in the trust bundle for
the nodes' certificates until they end or are retired). The journal, which
re-reads --journal-ca-cert every few seconds while the quorum refuses its
old journal CA, publishes a new intermediate under it and serves again, with
no restart. Audited as journal-ca-recorded.`,
		Example: `  # j2's journal CA was revoked; the ceremony made j2 a new key and journal CA:
  install -m 0644 j2-ca-new.pem /etc/pact/journal-ca.pem     # on j2's host
  pact journal record-ca j2 j2-ca-new.pem --reason "re-issued after INC-42"
  pact journal intermediates --journal-cas`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			var problems []error
			var der []byte
			if len(args) != 2 {
				problems = append(problems, fmt.Errorf("%s takes ID and FILE, got %d arguments", cmd.CommandPath(), len(args)))
			} else {
				if err := journalIDArg(args[0]); err != nil {
					problems = append(problems, err)
				}
				var err error
				if der, err = readJournalCAFile(args[1]); err != nil {
					problems = append(problems, fmt.Errorf("FILE: %w", err))
				}
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.RecordJournalCA(cmd.Context(), &pactv1.RecordJournalCARequest{JournalId: args[0], Der: der, Reason: reason})
			if err != nil {
				return s.explain(action{verb: "record journal CAs", write: true, help: cmd.CommandPath()}, err)
			}
			now := a.env.Now()
			out := RecordedJournalCA{JournalCA: JournalCAViewOf(resp.GetJournalCa(), nil, now), Superseded: journalCAViews(resp.GetSuperseded(), nil, now)}
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, out)
			}
			fmt.Fprintf(a.env.Stdout, "journal %s is bound to journal CA %s (valid to %s)\n", out.JournalCA.JournalID, out.JournalCA.Serial, out.JournalCA.NotAfter)
			for _, v := range out.Superseded {
				fmt.Fprintf(a.env.Stdout, "journal CA %s (%s) is superseded: it gives no peer rights and signs no new intermediate\n", v.Serial, v.State)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit trail")
	return cmd
}
