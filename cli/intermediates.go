package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
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
	// State is active (its journal's current intermediate: it signs),
	// superseded (its journal has made a newer one since, at a restart or
	// a re-key: it signs nothing new, and what it signed stays valid until
	// it expires), retiring (holders told to renew) or revoked (out of the
	// trust bundle, its certificates refused). superseded is given by pact
	// journal intermediates, from the registry's records.
	State     string `json:"state"`
	RetiredAt string `json:"retired_at"`
	RevokeAt  string `json:"revoke_at"`
	RetiredBy string `json:"retired_by"`
	Reason    string `json:"reason"`
	// IssuerSerial is the journal CA that signed it; empty when the domain
	// root signed it (the layout before journal CAs).
	IssuerSerial string `json:"issuer_serial"`
	// Nodes counts the nodes whose current certificate it signed (not
	// expired, not revoked, of nodes not decommissioned): the nodes that
	// still chain to it. Given by pact journal intermediates.
	Nodes int `json:"nodes"`
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
	// the trust bundle (active, superseded or retiring, not expired).
	LiveIntermediates int `json:"live_intermediates"`
	// Nodes counts the nodes whose current certificate one of its
	// intermediates signed: the nodes that still chain to it (and so to
	// the root that signed it). Given by pact journal intermediates.
	Nodes int `json:"nodes"`
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

// listedViews are the views of a listing: an active intermediate its
// journal has replaced by a newer one is superseded (the journal says
// which is current, from the records; a journal from before says nothing,
// and every one stays active), and each counts the nodes whose current
// certificate it signed; each journal CA, those of its intermediates.
func listedViews(resp *pactv1.ListIntermediatesResponse) ([]IntermediateView, []JournalCAView) {
	now := time.Unix(0, resp.GetServerTimeUnixNano())
	vs := intermediateViews(resp.GetIntermediates(), now)
	current := resp.GetCurrentIntermediates()
	counts := resp.GetNodeCertificates()
	byCA := map[string]int{}
	for i := range vs {
		v := &vs[i]
		v.Nodes = int(counts[v.Serial])
		byCA[v.IssuerSerial] += v.Nodes
		if len(current) > 0 && v.State == "active" && !slices.Contains(current, v.Serial) {
			v.State = "superseded"
		}
	}
	cv := journalCAViews(resp.GetJournalCas(), resp.GetIntermediates(), now)
	for i := range cv {
		cv[i].Nodes = byCA[cv[i].Serial]
	}
	return vs, cv
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
	fmt.Fprintln(tw, "JOURNAL\tSERIAL\tSTATE\tEXPIRES\tISSUER\tNODES\tREVOKE AT\tREASON")
	for _, v := range vs {
		issuer := v.IssuerSerial
		if issuer == "" {
			issuer = "root"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", v.JournalID, v.Serial, v.State, v.NotAfter, issuer, v.Nodes, orNone(v.RevokeAt), orNone(v.Reason))
	}
	return tw.Flush()
}

func writeJournalCATable(w io.Writer, vs []JournalCAView) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOURNAL\tJOURNAL CA\tSTATE\tEXPIRES\tLIVE INTERMEDIATES\tNODES\tREVOKED AT\tREASON")
	for _, v := range vs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", v.JournalID, v.Serial, v.State, v.NotAfter, v.LiveIntermediates, v.Nodes, orNone(v.RevokedAt), orNone(v.Reason))
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
active (its journal's current intermediate, the one it signs with),
superseded (its journal has made a newer one since, at a restart or a
re-key: it signs nothing new, and the certificates it signed stay valid
until they expire), retiring (an operator retired it: agents holding its
certificates are told to renew; it is revoked at REVOKE AT) or revoked (out
of the trust bundle; its certificates are refused everywhere). ISSUER is
the journal CA that signed it, or root for one the domain root signed (a
journal not yet moved to a journal CA). NODES counts the nodes whose
current certificate it signed: the nodes that still chain to it.

Then the journal CAs: each journal host's CA certificate, made in the
ceremony (docs/ceremony.md) and recorded when its journal first publishes an
intermediate under it. STATE is active, revoked (pact journal revoke-ca: out
of the trust bundle with every intermediate it signed) or expired; LIVE
INTERMEDIATES counts those it signed that are in the trust bundle, and NODES
the nodes whose current certificate one of them signed: during a root
rollover (docs/rollover.md), the nodes still under the old root are those
counted by its journal CAs (pact node list --issuer SERIAL names them).

-o json prints the intermediates as an array; with --journal-cas, the
journal CAs instead (--journal-cas alone prints only their table). Any
operator role may list.`,
		Example: `  pact journal intermediates
  pact journal intermediates -o json | jq -r '.[] | select(.state=="active") | .serial'
  pact journal intermediates --journal-cas -o json | jq -r '.[] | select(.state=="active") | "\(.journal_id) \(.not_after)"'

  # Nodes still chaining to each journal CA (a root rollover's step 4)
  pact journal intermediates --journal-cas -o json | jq -r '.[] | "\(.serial) \(.nodes)"'`,
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
			vs, cv := listedViews(resp)
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
	// Bound is, for each journal concerned, the journal CA it is bound to
	// afterwards: a live one (a re-issue recorded earlier, as in a root
	// rollover) lets it go on signing; a revoked one means it signs nothing
	// until an operator records a new one. Empty from a journal of a
	// release that does not say.
	Bound []JournalCAView `json:"bound"` // never null
	// OwnCredential is set when the caller's own credential went with
	// them (--yes-including-my-credential).
	OwnCredential *OwnCredentialView `json:"own_credential,omitempty"`
	// Operators are the valid credentials, of other operators, whose
	// recorded chain went with them, of operators left with no other valid
	// credential: they are cut off.
	Operators []OperatorView `json:"operators"` // never null
}

// OwnCredentialView is the caller's own operator credential as a
// retirement or a journal CA revocation touched it.
type OwnCredentialView struct {
	Serial             string `json:"serial"`
	Name               string `json:"name"`
	IntermediateSerial string `json:"intermediate_serial"`
	JournalID          string `json:"journal_id"`
	JournalCASerial    string `json:"journal_ca_serial"`
	// StopsAt is when it stops being accepted.
	StopsAt string `json:"stops_at"`

	stopsAt time.Time
}

func ownCredentialView(o *pactv1.OwnCredential) *OwnCredentialView {
	if o == nil {
		return nil
	}
	at := unixTime(0, o.GetStopsAtUnixNano())
	return &OwnCredentialView{
		Serial: o.GetSerial(), Name: o.GetName(), IntermediateSerial: o.GetIntermediateSerial(),
		JournalID: o.GetJournalId(), JournalCASerial: o.GetJournalCaSerial(), StopsAt: formatTime(at), stopsAt: at,
	}
}

// chain names the chain the credential needs.
func (v *OwnCredentialView) chain() string {
	s := "intermediate " + v.IntermediateSerial + " of journal " + v.JournalID
	if v.JournalCASerial != "" {
		s += ", under journal CA " + v.JournalCASerial
	}
	return s
}

// warnOwnCredential tells the caller her own credential was cut off, or
// when it will be, and what to do.
func (a *app) warnOwnCredential(v *OwnCredentialView) {
	if v == nil {
		return
	}
	if !v.stopsAt.After(a.env.Now()) {
		fmt.Fprintf(a.env.Stderr, "warning: your own credential %s (%s; %s) is refused from now on: get a new one from another platform-admin (pact admin issue) or from the ceremony (pact ca issue-admin)\n",
			v.Serial, v.Name, v.chain())
		return
	}
	fmt.Fprintf(a.env.Stderr, "warning: your own credential %s (%s) was signed by %s: it stops working at %s. Renew it before then, from a journal signing under a chain that stays (pact journal status shows each journal's; a retired journal re-keys at once): pact admin renew\n",
		v.Serial, v.Name, v.chain(), v.StopsAt)
}

func (a *app) journalRevokeCACommand() *cobra.Command {
	var yes, yesOwn bool
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

A journal whose journal CA is revoked signs nothing until it is bound to a
new one (docs/ceremony.md); it logs so at ERROR and answers
JOURNAL_CA_REVOKED, and agents go to the other journals. A journal that
already publishes under a re-issue of its journal CA for the same key (the
yearly renewal, a root rollover: docs/rollover.md) is bound to that one and
goes on signing: the answer says which. Revoke when a journal host or its journal CA key is
compromised, or to withdraw an old root's journal CAs; a journal leaving
the quorum for good can be removed (pact journal remove) and its journal
CA revoked too.

Your own operator credential goes too if a journal CA named is above it
(one pact admin renew or issue had a journal sign under it): its next call
fails the TLS handshake. The journal refuses such a revocation, changing
nothing (exit 6, REVOKES_OWN_CREDENTIAL), and says which of your
credential's chain it names and where to renew it first (pact admin renew
--journal ADDR); --yes-including-my-credential revokes anyway. The answer
names the operators it leaves with no valid credential (pact admin list
shows each credential's intermediate and journal CA).

--reason is required (the audit trail), and --yes confirms: pact journal
intermediates shows the journal CAs and how many live intermediates and
nodes each one has. Revoking an already revoked journal CA changes nothing.`,
		Example: `  pact journal intermediates --journal-cas
  pact journal revoke-ca j3 --reason "host j3 stolen (INC-42)" --yes
  pact journal revoke-ca 3f2a9c... --reason "key file copied" --yes -o json

  # A root rollover's step 5 (docs/rollover.md): the old root's journal CAs, by serial
  pact journal revoke-ca $(cat old-journal-cas.txt) --reason "root rollover" --yes`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			var problems []error
			if len(args) == 0 {
				problems = append(problems, errors.New("name at least one journal CA serial or journal id (pact journal intermediates --journal-cas lists them)"))
			}
			if reason == "" {
				problems = append(problems, errors.New("--reason is required: say why, for the audit trail"))
			}
			if !yes && !yesOwn {
				problems = append(problems, errors.New("nothing revoked: a revoked journal CA takes every certificate below it out of the trust bundle at once, on every journal, and its journal stops signing unless it is bound to another; check what you name with pact journal intermediates --journal-cas, then re-run with --yes"))
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.RevokeJournalCA(cmd.Context(), &pactv1.RevokeJournalCARequest{Targets: args, Reason: reason, RevokeOwnCredential: yesOwn})
			if err != nil {
				return s.explain(action{verb: "revoke journal CAs", write: true, help: cmd.CommandPath(),
					notFound: "no journal CA or journal by that name in the registry; list them with: pact journal intermediates --journal-cas"}, err)
			}
			now := a.env.Now()
			out := RevokedJournalCAs{
				Revoked: journalCAViews(resp.GetRevoked(), resp.GetIntermediates(), now), Intermediates: intermediateViews(resp.GetIntermediates(), now),
				Bound: journalCAViews(resp.GetBound(), nil, now), OwnCredential: ownCredentialView(resp.GetOwnCredential()), Operators: []OperatorView{},
			}
			for _, o := range resp.GetOperators() {
				out.Operators = append(out.Operators, OperatorViewOf(o, now))
			}
			if s.cfg.Output == outputJSON {
				if err := writeJSON(a.env.Stdout, out); err != nil {
					return err
				}
			} else {
				a.printRevokedJournalCAs(out)
			}
			a.warnOwnCredential(out.OwnCredential)
			if len(out.Operators) > 0 {
				var names []string
				for _, o := range out.Operators {
					names = append(names, o.Name+" ("+o.Serial+")")
				}
				fmt.Fprintf(a.env.Stderr, "warning: the credentials of %s chained to the revoked journal CAs and are refused from now on, and %s no other valid one: %s; a platform-admin issues new ones (pact admin issue NAME)\n",
					plural(len(names), "this operator", "these operators"), plural(len(names), "it has", "they have"), strings.Join(names, ", "))
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit trail (required)")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the revocation")
	cmd.Flags().BoolVar(&yesOwn, "yes-including-my-credential", false, "confirm the revocation even though it cuts off the credential running this command")
	return cmd
}

// printRevokedJournalCAs says what revoke-ca did, and what each journal
// concerned signs under now.
func (a *app) printRevokedJournalCAs(out RevokedJournalCAs) {
	w := a.env.Stdout
	var journals []string
	for _, v := range out.Revoked {
		n := 0
		for _, in := range out.Intermediates {
			if in.IssuerSerial == v.Serial {
				n++
			}
		}
		fmt.Fprintf(w, "journal CA %s of journal %s is revoked (%s, by %s); %d %s it signed left the trust bundle with it\n",
			v.Serial, v.JournalID, v.Reason, v.RevokedBy, n, plural(n, "intermediate", "intermediates"))
		if !slices.Contains(journals, v.JournalID) {
			journals = append(journals, v.JournalID)
		}
	}
	for _, id := range journals {
		i := slices.IndexFunc(out.Bound, func(b JournalCAView) bool { return b.JournalID == id })
		switch {
		case i < 0:
			// A journal that does not say.
			fmt.Fprintf(w, "journal %s signs nothing until it has a new journal CA, unless pact journal intermediates --journal-cas shows it another active one (docs/ceremony.md)\n", id)
		case out.Bound[i].State == "active":
			fmt.Fprintf(w, "journal %s goes on signing under its journal CA %s (valid until %s)\n", id, out.Bound[i].Serial, out.Bound[i].NotAfter)
		default:
			fmt.Fprintf(w, "journal %s signs nothing until it has a new journal CA: the ceremony signs one, and pact journal record-ca %s FILE binds it (docs/ceremony.md)\n", id, id)
		}
	}
}

func (a *app) journalRetireCommand() *cobra.Command {
	var grace, wait time.Duration
	var now, yesOwn bool
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
that have not renewed must enroll again. An intermediate already revoked, or
retiring with an earlier revoke time, is left as it is (the answer says so).

A journal whose own current intermediate is retired makes a new one at once,
re-reading its --journal-ca-cert file: a new journal CA there for its key is
taken (the renewal ceremony, a root rollover). The command then waits (up to
--wait, default 30s; 0 not at all) for each journal named to re-key, and
says what each signs under now. A journal that refused the certificate in
its file re-keys under the journal CA it had: the command says why and
exits 6 (the retirement itself is made; fix the file and retire again).

Your own operator credential is cut off with the intermediate that signed it
(one pact admin renew or issue had a journal sign). With a grace the answer
says when it stops working: renew it before then (pact admin renew). With
--now the journal refuses, changing nothing (exit 6,
REVOKES_OWN_CREDENTIAL), and says where to renew first;
--yes-including-my-credential revokes anyway.

To cut off a compromised journal, remove it and revoke its intermediates in
one step: pact journal remove ID --revoke-intermediate.`,
		Example: `  pact journal retire-intermediate j3
  pact journal retire-intermediate 5c0d1e... --grace 1h --reason "key in a backup"
  pact journal retire-intermediate j3 --now

  # A root rollover's re-key (docs/rollover.md): every journal at once
  pact journal retire-intermediate j1 j2 j3 --grace 30m --reason "root rollover"`,
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
			if wait < 0 {
				problems = append(problems, fmt.Errorf("--wait %v: want 0 (do not wait) or more", wait))
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.RetireIntermediate(cmd.Context(), &pactv1.RetireIntermediateRequest{
				Targets: args, GraceSeconds: int64(grace / time.Second), Now: now, Reason: reason, RevokeOwnCredential: yesOwn,
			})
			if err != nil {
				return s.explain(action{verb: "retire intermediates", write: true, help: cmd.CommandPath(),
					notFound: "no intermediate or journal by that name; list them with: pact journal intermediates"}, err)
			}
			vs := intermediateViews(resp.GetRetired(), a.env.Now())
			own := ownCredentialView(resp.GetOwnCredential())
			if s.cfg.Output == outputJSON {
				if err := writeJSON(a.env.Stdout, vs); err != nil {
					return err
				}
			} else {
				for _, v := range vs {
					fmt.Fprintln(a.env.Stdout, retiredLine(v, slices.Contains(resp.GetUnchanged(), v.Serial)))
				}
			}
			a.warnOwnCredential(own)
			if wait == 0 || (own != nil && !own.stopsAt.After(a.env.Now())) {
				// Cut off: the journals would refuse the status calls.
				return nil
			}
			return a.reportRekeys(cmd, s, vs, wait)
		}),
	}
	cmd.Flags().Var(duration.NewValue(&grace, 0), "grace", "how long agents have to renew before the intermediates are revoked (default: the journal's, 15m)")
	cmd.Flags().BoolVar(&now, "now", false, "revoke at once, with no grace")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit trail and the agents' logs")
	cmd.Flags().BoolVar(&yesOwn, "yes-including-my-credential", false, "with --now: revoke even the intermediate that signed the credential running this command")
	cmd.Flags().Var(duration.NewValue(&wait, 30*time.Second), "wait", "how long to wait for the journals named to re-key and say what they sign under (0: do not wait)")
	return cmd
}

// errJournalCAFileRefused: a journal retired re-keyed under its old
// journal CA, having refused the one in its --journal-ca-cert file (exit
// 6: the retirement is made, the re-key is not what was meant).
var errJournalCAFileRefused = &apierr.Error{Code: codes.FailedPrecondition, Message: "a journal refused the journal CA in its --journal-ca-cert file"}

// retiredLine says what became of one intermediate named.
func retiredLine(v IntermediateView, unchanged bool) string {
	switch {
	case unchanged && v.State == "revoked":
		return fmt.Sprintf("intermediate %s of journal %s was already revoked (at %s): unchanged", v.Serial, v.JournalID, v.RevokeAt)
	case unchanged:
		return fmt.Sprintf("intermediate %s of journal %s was already retiring: unchanged, revoked at %s", v.Serial, v.JournalID, v.RevokeAt)
	case v.State == "revoked":
		return fmt.Sprintf("intermediate %s of journal %s is revoked: the certificates it signed are refused from now on, and agents holding one enroll again", v.Serial, v.JournalID)
	}
	return fmt.Sprintf("intermediate %s of journal %s is retiring: its agents renew now; revoked at %s", v.Serial, v.JournalID, v.RevokeAt)
}

// reportRekeys waits, up to wait, until every journal named in retired
// signs with an intermediate not among them, and says what each signs
// under; a journal that refused its --journal-ca-cert file at that re-key
// is an error (exit 6): it went on signing under its old journal CA.
func (a *app) reportRekeys(cmd *cobra.Command, s *session, retired []IntermediateView, wait time.Duration) error {
	gone := map[string]bool{}
	var ids []string
	for _, v := range retired {
		gone[v.Serial] = true
		if !slices.Contains(ids, v.JournalID) {
			ids = append(ids, v.JournalID)
		}
	}
	slices.Sort(ids)
	out := a.env.Stdout
	if s.cfg.Output == outputJSON {
		out = a.env.Stderr
	}
	deadline := time.Now().Add(wait)
	var members map[string]*pactv1.JournalMember
	published := map[string]bool{}
	for {
		resp, err := s.client.JournalStatus(cmd.Context(), &pactv1.JournalStatusRequest{})
		if err != nil {
			fmt.Fprintf(a.env.Stderr, "warning: could not read the journals' status to see them re-key (%v); check with: pact journal status\n", apierr.FromError(err).Message)
			return nil
		}
		members = map[string]*pactv1.JournalMember{}
		for _, m := range resp.GetMembers() {
			members[m.GetJournalId()] = m
		}
		// A journal has re-keyed once it signs with an intermediate it
		// has published.
		if list, err := s.client.ListIntermediates(cmd.Context(), &pactv1.ListIntermediatesRequest{}); err == nil {
			for _, in := range list.GetIntermediates() {
				published[in.GetSerial()] = true
			}
		}
		pending := false
		for _, id := range ids {
			if m, ok := members[id]; ok && m.GetReachable() && (gone[m.GetIntermediateSerial()] || !published[m.GetIntermediateSerial()]) {
				pending = true
			}
		}
		if !pending || !time.Now().Before(deadline) {
			break
		}
		select {
		case <-cmd.Context().Done():
			return nil
		case <-time.After(250 * time.Millisecond):
		}
	}
	var refused []string
	for _, id := range ids {
		m, ok := members[id]
		switch {
		case !ok:
			// Not a member (removed): nothing re-keys.
		case !m.GetReachable():
			fmt.Fprintf(out, "journal %s did not answer; once it is up, check what it signs under with: pact journal status\n", id)
		case gone[m.GetIntermediateSerial()] || !published[m.GetIntermediateSerial()]:
			fmt.Fprintf(out, "journal %s has not re-keyed (and published its new intermediate) within %s; check with: pact journal status\n", id, wait)
		case m.GetJournalCaFileRefused() != "":
			refused = append(refused, id)
			fmt.Fprintf(a.env.Stderr, "journal %s re-keyed under its OLD journal CA %s (intermediate %s): it refused the certificate in its --journal-ca-cert file: %s\n",
				id, m.GetJournalCaSerial(), m.GetIntermediateSerial(), m.GetJournalCaFileRefused())
		case m.GetJournalCaSerial() != "":
			fmt.Fprintf(out, "journal %s signs with intermediate %s under journal CA %s\n", id, m.GetIntermediateSerial(), m.GetJournalCaSerial())
		default:
			fmt.Fprintf(out, "journal %s signs with intermediate %s\n", id, m.GetIntermediateSerial())
		}
	}
	if len(refused) > 0 {
		msg := fmt.Sprintf("the intermediates are retired, but %s refused the journal CA in %s --journal-ca-cert file and signed under the one %s had: fix the file (docs/ceremony.md: a request reusing the journal's key, signed for its id and every name it serves under), then retire again (pact journal status shows each journal's journal CA and why a file was refused)",
			strings.Join(refused, ", "), plural(len(refused), "its", "their"), plural(len(refused), "it", "they"))
		return &hintError{msg: msg, err: errJournalCAFileRefused}
	}
	return nil
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
