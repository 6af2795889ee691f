package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/duration"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// QuorumView is the stable JSON form of "pact journal status -o json": the
// journal quorum as the answering journal sees it. Field names are a
// contract with scripts: add fields, never rename or remove them.
type QuorumView struct {
	// LeaderID is the leader the answering journal knows; empty: none.
	LeaderID     string `json:"leader_id"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// ServedBy is the journal that answered.
	ServedBy string              `json:"served_by"`
	Members  []JournalMemberView `json:"members"` // never null
	// QuorumID is the quorum's identity as the answering journal knows it
	// (minted at bootstrap, new after a recover or restore).
	QuorumID string `json:"quorum_id"`
	// QuorumFeatureLevel is the feature level the answering journal's
	// registry records (docs/upgrade.md); 0 from a journal of a release
	// before feature levels. FeatureLevel is the highest its binary
	// speaks; BelowFeatureLevel names the members still to upgrade to it.
	QuorumFeatureLevel uint32   `json:"quorum_feature_level"`
	FeatureLevel       uint32   `json:"feature_level"`
	BelowFeatureLevel  []string `json:"below_feature_level"` // never null
}

// JournalMemberView is one journal of the quorum. The Raft fields are as
// the member itself reported them; they are zero when it is unreachable.
// Times are RFC 3339 in UTC, empty when unknown.
type JournalMemberView struct {
	JournalID string `json:"journal_id"`
	// State is leader, follower or candidate (the member's own Raft
	// state, lower-case), unreachable, or unknown.
	State     string `json:"state"`
	Voter     bool   `json:"voter"`
	Leader    bool   `json:"leader"`
	Reachable bool   `json:"reachable"`
	// Error says why an unreachable member did not answer.
	Error        string `json:"error"`
	RaftAddr     string `json:"raft_addr"`
	GRPCAddr     string `json:"grpc_addr"`
	RaftState    string `json:"raft_state"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// LastContact is when the member last heard from the leader (for the
	// leader: when it answered), with nanoseconds.
	LastContact          string `json:"last_contact"`
	IntermediateSerial   string `json:"intermediate_serial"`
	IntermediateNotAfter string `json:"intermediate_not_after"`
	// Version is the build the member reports; empty when unreachable.
	Version string `json:"version"`
	// Halted says why the member stopped serving (removed from the quorum,
	// it met a log entry of a newer version, or its Raft store write is
	// stuck); empty while it serves.
	Halted string `json:"halted"`
	// Lag is how many log entries its registry is behind the commit index
	// of the answering journal.
	Lag uint64 `json:"lag"`
	// NonvoterSince is when the answering journal first saw it as a
	// non-voter (it is promoted once caught up); empty for a voter.
	NonvoterSince string `json:"nonvoter_since"`
	// QuorumID is the quorum the member says it belongs to.
	QuorumID string `json:"quorum_id"`
	// FeatureLevel is the highest quorum feature level the member's
	// binary speaks, and Release its release, as it reports them: 0 and
	// "" when unreachable or of a release before feature levels (which
	// speaks level 1: VERSION says which).
	FeatureLevel uint32 `json:"feature_level"`
	Release      string `json:"release"`
	// The member's journal CA as the registry records it (pact journal
	// intermediates): the one that signed its current intermediate, else
	// its last-expiring one. Empty for a journal whose intermediate the
	// domain root signs. JournalCAState is active, revoked or expired.
	JournalCASerial   string `json:"journal_ca_serial"`
	JournalCANotAfter string `json:"journal_ca_not_after"`
	JournalCAState    string `json:"journal_ca_state"`
	// JournalCAFileRefused says why the member refused the certificate in
	// its --journal-ca-cert file at its last re-key: it went on signing
	// under the journal CA it had (JournalCASerial). Empty when none was
	// refused (or the member does not say).
	JournalCAFileRefused string `json:"journal_ca_file_refused"`

	lastContact   time.Time // for the relative LAST CONTACT column
	nonvoterSince time.Time
}

// MembershipView is the JSON of "pact journal add|remove -o json": the
// journal changed and the quorum's members afterwards.
type MembershipView struct {
	JournalID string `json:"journal_id"`
	// RaftAddr is the address added; empty for remove.
	RaftAddr string              `json:"raft_addr,omitempty"`
	Members  []JournalMemberView `json:"members"` // never null
	// Retired lists the intermediates remove --revoke-intermediate retired.
	Retired []IntermediateView `json:"retired_intermediates,omitempty"`
	// JournalCA is the journal CA add bound the journal id to (absent in
	// the layout without journal CAs).
	JournalCA *JournalCAView `json:"journal_ca,omitempty"`
	// OwnCredential is set when remove --revoke-intermediate retired the
	// intermediate of the caller's own credential
	// (--yes-including-my-credential): when it stops working.
	OwnCredential *OwnCredentialView `json:"own_credential,omitempty"`
}

// QuorumViewOf converts a status answer to its view, members sorted by id.
func QuorumViewOf(r *pactv1.JournalStatusResponse) QuorumView {
	return QuorumView{
		LeaderID:     r.GetLeaderId(),
		Term:         r.GetTerm(),
		CommitIndex:  r.GetCommitIndex(),
		AppliedIndex: r.GetAppliedIndex(),
		ServedBy:     r.GetServedBy(),
		Members:      memberViews(r.GetMembers()),
		QuorumID:     r.GetQuorumId(),

		QuorumFeatureLevel: r.GetQuorumFeatureLevel(),
		FeatureLevel:       r.GetFeatureLevel(),
		BelowFeatureLevel:  append([]string{}, r.GetBelowFeatureLevel()...),
	}
}

func memberViews(ms []*pactv1.JournalMember) []JournalMemberView {
	out := make([]JournalMemberView, 0, len(ms))
	for _, m := range ms {
		out = append(out, JournalMemberViewOf(m))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].JournalID < out[j].JournalID })
	return out
}

// JournalMemberViewOf converts one member to its view.
func JournalMemberViewOf(m *pactv1.JournalMember) JournalMemberView {
	lc := unixTime(0, m.GetLastContactUnixNano())
	v := JournalMemberView{
		JournalID:            m.GetJournalId(),
		State:                memberState(m),
		Voter:                m.GetVoter(),
		Leader:               m.GetLeader(),
		Reachable:            m.GetReachable(),
		Error:                m.GetError(),
		RaftAddr:             m.GetRaftAddr(),
		GRPCAddr:             m.GetGrpcAddr(),
		RaftState:            m.GetRaftState(),
		Term:                 m.GetTerm(),
		CommitIndex:          m.GetCommitIndex(),
		AppliedIndex:         m.GetAppliedIndex(),
		IntermediateSerial:   m.GetIntermediateSerial(),
		IntermediateNotAfter: formatTime(unixTime(m.GetIntermediateNotAfterUnix(), 0)),
		Version:              m.GetVersion(),
		Halted:               m.GetHalted(),
		Lag:                  m.GetLag(),
		QuorumID:             m.GetQuorumId(),
		JournalCASerial:      m.GetJournalCaSerial(),
		JournalCAFileRefused: m.GetJournalCaFileRefused(),
		FeatureLevel:         m.GetFeatureLevel(),
		Release:              m.GetRelease(),
		lastContact:          lc,
	}
	if !m.GetVoter() && m.GetNonvoterSinceUnixNano() != 0 {
		v.nonvoterSince = unixTime(0, m.GetNonvoterSinceUnixNano())
		v.NonvoterSince = v.nonvoterSince.UTC().Format(time.RFC3339)
	}
	if !lc.IsZero() {
		v.LastContact = lc.UTC().Format(time.RFC3339Nano)
	}
	return v
}

// memberState is the STATE of a member: its own Raft state in lower case,
// or "unreachable" when it did not answer.
func memberState(m *pactv1.JournalMember) string {
	if !m.GetReachable() {
		return "unreachable"
	}
	s := strings.ToLower(strings.TrimSpace(m.GetRaftState()))
	if s == "" {
		return "unknown"
	}
	return s
}

// majority is how many of n voters must be up for the quorum to serve.
func majority(n int) int { return n/2 + 1 }

func voters(ms []JournalMemberView) (all, answered int) {
	for _, m := range ms {
		if m.Voter {
			all++
			if m.Reachable {
				answered++
			}
		}
	}
	return all, answered
}

func (a *app) journalCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "journal",
		Short: "Show the journal quorum; add and remove journals; save and inspect snapshots",
		Long: `Commands on the journal quorum: the pact-journal servers that keep the
registry in Raft. Every journal serves reads and writes; writes reach the
Raft leader, and the quorum serves while a majority of its voting journals
is up: 2 of 3, 3 of 5. Run an odd number of journals.

"pact journal status" shows every journal, its Raft state and how far it has
applied the log, as the answering journal sees it. "pact journal add" and
"pact journal remove" change the membership, one journal at a time; they go
to the leader (pact tries each --journal address in turn), and need a
platform-admin credential.`,
		Example: `  pact journal status
  pact journal status -o json

  # Grow the quorum: start the new journal empty, then add it
  pact-journal --node-id j4 --join --raft-listen 10.0.0.4:7500 --listen 10.0.0.4:7443 ...
  pact journal add j4 10.0.0.4:7500

  # Retire a journal, then stop it
  pact journal remove j3`,
	}
	a.group(cmd)
	cmd.AddCommand(a.journalStatusCommand(), a.journalAddCommand(), a.journalRemoveCommand(), a.journalSnapshotCommand(),
		a.journalIntermediatesCommand(), a.journalRetireCommand(), a.journalRevokeCACommand(), a.journalRecordCACommand())
	return cmd
}

func (a *app) journalStatusCommand() *cobra.Command {
	var chk quorumCheck
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the journal quorum: leader, term, and each journal's state",
		Long: `Show the journal quorum as the answering journal (the first --journal address
that answers) sees it: the leader, the Raft term and commit index, then one
row per journal of the Raft configuration. The answering journal asks each
member for its own view, briefly, so the rows are fresh.

STATE is the member's own Raft state (leader, follower or candidate), or
unreachable when it did not answer: its ERROR column says why. VOTER says
whether it counts towards the majority. APPLIED is the Raft index up to
which its registry is current; a follower a little behind the commit index
is normal. LAST CONTACT is when it last heard from the leader. INTERMEDIATE
and EXPIRES are its current intermediate CA certificate (serial shortened;
-o json has it in full), which it renews at half its life. JOURNAL CA
EXPIRES, shown once a journal has a journal CA (docs/ceremony.md), is when
the one that signed its current intermediate expires, or revoked (pact
journal revoke-ca: it signs nothing until it has a new one). A journal that
refused the certificate in its --journal-ca-cert file at its last re-key
(another key, another journal, names it does not serve) signs under the
journal CA it had: its ERROR column says "journal CA file refused" and why,
and stderr warns; -o json has journal_ca_serial and journal_ca_file_refused.

LAG is how many log entries a member's registry is behind the answering
journal's commit index; VERSION is its pact-journal version (all equal
outside a rolling upgrade) and LEVEL the highest quorum feature level its
binary speaks. The headline says the quorum's feature level, which the
leader raises once every journal speaks a higher one: until then features
new in the release are refused (QUORUM_VERSION) and stderr names the
journals still to upgrade (docs/upgrade.md). A non-voter ("no (catching up)") is a journal
just added: it copies the registry, and the leader makes it a voter once it
has caught up. A halted member stopped serving: the ERROR column says why.

For monitoring, the exit code says what needs attention (docs/exit-codes.md):
0 all is well; 10 no leader (writes and enrollments are refused);
11 a voter is unreachable or halted, or lags more than --max-lag entries;
12 a non-voter has not become a voter within --stuck-after, or is
unreachable; 7 no --journal address answers at all. The table (or JSON) is
printed first either way, and stderr says what is wrong.

Any admin role may read the status.`,
		Example: `  pact journal status

  # Ask two journals: the second answers if the first is down
  pact --journal 10.0.0.1:7443,10.0.0.2:7443 journal status

  # Journals that are not up, with jq
  pact journal status -o json | jq -r '.members[] | select(.reachable | not) | .journal_id'`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			return a.journalStatus(cmd, args, chk)
		}),
	}
	cmd.Flags().Uint64Var(&chk.maxLag, "max-lag", 1000, "a member whose registry is more than this many log entries behind counts as lagging (exit 11)")
	cmd.Flags().Var(duration.NewValue(&chk.stuckAfter, 5*time.Minute), "stuck-after", "a non-voter not promoted within this long counts as stuck (exit 12)")
	return cmd
}

func (a *app) journalStatus(cmd *cobra.Command, args []string, chk quorumCheck) error {
	var problems []error
	if len(args) > 0 {
		problems = append(problems, fmt.Errorf("%s takes no arguments, got %q; to ask a particular journal, pass its address: pact --journal HOST:PORT journal status", cmd.CommandPath(), args[0]))
	}
	s, err := a.connect(cmd, problems)
	if err != nil {
		return err
	}
	defer s.close()

	resp, err := s.client.JournalStatus(cmd.Context(), &pactv1.JournalStatusRequest{})
	if err != nil {
		return a.explainJournal(cmd.Context(), s, journalAction{verb: "read the journal quorum's status", help: cmd.CommandPath()}, err)
	}
	v := QuorumViewOf(resp)
	// The members' journal CAs, from the registry: best effort, the
	// quorum's state is the answer.
	if list, err := s.client.ListIntermediates(cmd.Context(), &pactv1.ListIntermediatesRequest{}); err == nil {
		addJournalCAs(v.Members, list)
	}
	if s.cfg.Output == outputJSON {
		if err := writeJSON(a.env.Stdout, v); err != nil {
			return err
		}
	} else {
		if _, err := fmt.Fprintln(a.env.Stdout, quorumHeadline(v)); err != nil {
			return err
		}
		if len(v.Members) > 0 {
			if err := writeJournalTable(a.env.Stdout, v.Members, a.env.Now(), v.QuorumFeatureLevel != 0); err != nil {
				return err
			}
		}
	}
	a.warnQuorum(v)
	return chk.verdict(v, a.env.Now())
}

// addJournalCAs fills each member's journal CA from a listing of the
// registry's intermediates and journal CAs.
func addJournalCAs(ms []JournalMemberView, list *pactv1.ListIntermediatesResponse) {
	now := time.Unix(0, list.GetServerTimeUnixNano())
	issuer := map[string]string{}
	for _, in := range list.GetIntermediates() {
		issuer[in.GetSerial()] = in.GetIssuerSerial()
	}
	for i := range ms {
		m := &ms[i]
		var pick *pactv1.JournalCA
		for _, jc := range list.GetJournalCas() {
			if jc.GetJournalId() != m.JournalID {
				continue
			}
			// The one the member says signed its intermediate, or the
			// registry does.
			if jc.GetSerial() == m.JournalCASerial || jc.GetSerial() == issuer[m.IntermediateSerial] {
				pick = jc
				break
			}
			// Else the live one that expires last, or the one revoked last.
			if pick == nil || better(jc, pick) {
				pick = jc
			}
		}
		if pick == nil {
			continue
		}
		v := JournalCAViewOf(pick, nil, now)
		m.JournalCASerial, m.JournalCANotAfter, m.JournalCAState = v.Serial, v.NotAfter, v.State
	}
}

// better reports whether journal CA a describes its journal better than
// b: live over revoked, then the later expiry or revocation.
func better(a, b *pactv1.JournalCA) bool {
	ar, br := a.GetRevokedAtUnixNano() != 0, b.GetRevokedAtUnixNano() != 0
	switch {
	case ar != br:
		return br
	case ar:
		return a.GetRevokedAtUnixNano() > b.GetRevokedAtUnixNano()
	}
	return a.GetNotAfterUnix() > b.GetNotAfterUnix()
}

// quorumHeadline is "leader j1, term 3, commit index 120 (served by j2)".
func quorumHeadline(v QuorumView) string {
	leader := "no leader"
	if v.LeaderID != "" {
		leader = "leader " + printable(v.LeaderID)
	}
	served := ""
	if v.ServedBy != "" {
		served = " (served by " + printable(v.ServedBy) + ")"
	}
	quorum := ""
	if v.QuorumID != "" {
		quorum = ", quorum " + printable(v.QuorumID)
	}
	level := ""
	if v.QuorumFeatureLevel != 0 {
		level = fmt.Sprintf(", feature level %d", v.QuorumFeatureLevel)
		if v.FeatureLevel > v.QuorumFeatureLevel {
			level += fmt.Sprintf(" (upgrade under way: %d once every journal speaks it)", v.FeatureLevel)
		}
	}
	return fmt.Sprintf("%s, term %d, commit index %d%s%s%s", leader, v.Term, v.CommitIndex, quorum, level, served)
}

// warnQuorum prints to stderr what in a status needs the operator: no
// leader, no members, members that did not answer.
func (a *app) warnQuorum(v QuorumView) {
	w := a.env.Stderr
	from := ""
	if v.ServedBy != "" {
		from = " from " + printable(v.ServedBy)
	}
	if len(v.Members) == 0 {
		fmt.Fprintf(w, "warning: journal%s reports no members; check its log\n", from)
		return
	}
	var down []string
	for _, m := range v.Members {
		if !m.Reachable {
			down = append(down, printable(m.JournalID))
		}
	}
	all, answered := voters(v.Members)
	if len(down) > 0 {
		msg := fmt.Sprintf("warning: %d of %d journals unreachable%s: %s; %d of %d voters answered, a majority is %d",
			len(down), len(v.Members), from, strings.Join(down, ", "), answered, all, majority(all))
		if answered < majority(all) {
			msg += ": without a majority the quorum refuses writes"
		}
		msg += "; check pact-journal is running on those hosts and reachable from the others"
		fmt.Fprintln(w, msg)
	}
	if v.LeaderID == "" {
		fmt.Fprintf(w, "warning: no leader%s: writes are refused until a majority of the %d voters is up and elects one\n", from, all)
	}
	if v.QuorumFeatureLevel == 0 && len(v.Members) > 0 {
		fmt.Fprintf(w, "note: journal %s runs a release before feature levels and does not report them (LEVEL ?): ask an upgraded journal (--journal ADDR) during an upgrade (docs/upgrade.md)\n", printable(v.ServedBy))
	}
	if len(v.BelowFeatureLevel) > 0 && v.FeatureLevel > v.QuorumFeatureLevel {
		fmt.Fprintf(w, "note: the quorum runs at feature level %d until every journal speaks %d; still to upgrade: %s (features new in this release are refused until then: docs/upgrade.md)\n",
			v.QuorumFeatureLevel, v.FeatureLevel, strings.Join(v.BelowFeatureLevel, ", "))
	}
	for _, m := range v.Members {
		if m.JournalCAFileRefused != "" {
			fmt.Fprintf(w, "warning: journal %s refused the certificate in its --journal-ca-cert file at its last re-key and signs under the journal CA it had, %s: %s\n",
				printable(m.JournalID), cell(m.JournalCASerial), printable(m.JournalCAFileRefused))
		}
	}
}

// writeJournalTable prints one row per member. An ERROR column is added
// only when some member did not answer.
//
// levelsKnown says the answering journal reports feature levels (a
// release before them leaves every LEVEL unknown: "?").
func writeJournalTable(w io.Writer, ms []JournalMemberView, now time.Time, levelsKnown bool) error {
	withErr := slices.ContainsFunc(ms, func(m JournalMemberView) bool {
		return m.Error != "" || !m.Reachable || m.Halted != "" || m.JournalCAFileRefused != ""
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	withCA := slices.ContainsFunc(ms, func(m JournalMemberView) bool { return m.JournalCASerial != "" })
	header := "ID\tSTATE\tVOTER\tRAFT ADDR\tGRPC ADDR\tAPPLIED\tLAG\tLAST CONTACT\tINTERMEDIATE\tEXPIRES\tVERSION\tLEVEL"
	if withCA {
		header += "\tJOURNAL CA EXPIRES"
	}
	if withErr {
		header += "\tERROR"
	}
	fmt.Fprintln(tw, header)
	for _, m := range ms {
		voter := "no (catching up)"
		if m.Voter {
			voter = "yes"
		}
		applied, contact, lag, level := none, none, none, none
		if m.Reachable {
			// A release before feature levels advertises none: level 1.
			switch {
			case m.FeatureLevel != 0:
				level = strconv.FormatUint(uint64(m.FeatureLevel), 10)
			case levelsKnown:
				level = "1"
			default:
				level = "?"
			}
			applied = strconv.FormatUint(m.AppliedIndex, 10)
			contact = contactAgo(now, m.lastContact, m.State == "leader")
			lag = strconv.FormatUint(m.Lag, 10)
		}
		state := m.State
		if m.Halted != "" {
			state += " (halted)"
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s",
			cell(m.JournalID),
			cell(state),
			voter,
			cell(m.RaftAddr),
			cell(m.GRPCAddr),
			applied,
			lag,
			contact,
			cell(shorten(m.IntermediateSerial, certSerialWidth)),
			cell(m.IntermediateNotAfter),
			cell(shortVersion(m.Version)),
			level,
		)
		if withCA {
			ca := m.JournalCANotAfter
			if m.JournalCAState != "" && m.JournalCAState != "active" {
				ca = m.JournalCAState
			}
			row += "\t" + cell(ca)
		}
		if withErr {
			msg := m.Error
			switch {
			case m.Halted != "":
				msg = m.Halted
			case m.JournalCAFileRefused != "":
				msg = "journal CA file refused: " + m.JournalCAFileRefused
			}
			row += "\t" + cell(msg)
		}
		fmt.Fprintln(tw, row)
	}
	return tw.Flush()
}

// levelsReported says whether the journal that answered with these
// members reports feature levels: one of them (the answering journal
// among them) advertises one.
func levelsReported(ms []JournalMemberView) bool {
	return slices.ContainsFunc(ms, func(m JournalMemberView) bool { return m.FeatureLevel != 0 })
}

// shortVersion is the release part of a journal's version line, the
// column's width; -o json has the whole line.
func shortVersion(v string) string {
	if i := strings.IndexByte(v, ' '); i > 0 {
		return v[:i]
	}
	return v
}

// contactAgo is LAST CONTACT: "-" for the leader (it is the one others
// hear from), "never" for no contact, else a short relative time such as
// "120ms ago". A time ahead of now (clock skew) reads "just now".
func contactAgo(now, t time.Time, leader bool) string {
	switch {
	case leader:
		return none
	case t.IsZero():
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Second:
		return fmt.Sprintf("%dms ago", int(d/time.Millisecond))
	}
	return ago(now, t)
}

func (a *app) journalAddCommand() *cobra.Command {
	var journalCAFile string
	var force bool
	cmd := &cobra.Command{
		Use:   "add ID RAFT_ADDR",
		Short: "Add a journal to the quorum: a non-voter first, a voter once caught up",
		Long: `Add journal ID, reachable for Raft at RAFT_ADDR (host:port), to the quorum as
a voting member. Add one journal at a time, and wait until "pact journal
status" shows it as a follower that has caught up before the next change.

First start pact-journal on the new host, empty and waiting to be added:
--join, its own --node-id (the ID given here), and --raft-listen (or
--advertise-raft) at RAFT_ADDR, with the domain's root certificate and key
like the other journals. It logs the exact "pact journal add" command to run.
Then run this command: it goes to the leader (pact tries each --journal
address in turn; a follower answers NO_LEADER and names the leader). The new
journal copies the registry from the leader, publishes its addresses and
intermediate certificate, and starts serving.

The leader first checks that a journal answers at RAFT_ADDR with a
certificate of this domain for ID, so a mistyped address or id is refused
before it becomes a member. It then binds ID to the journal CA that journal
presents (recorded in Raft, audited): from then on only a chain through that
journal CA is journal ID to the quorum, and a journal CA ID had before (a
replaced host's) gives no peer rights. --journal-ca FILE pins the journal
CA the ceremony made for it: the add is refused if another one answers. The journal joins as a non-voter: it copies the
registry (a snapshot and the log) without counting towards the majority, and
the leader promotes it to voter once it has caught up ("pact journal status"
shows it as "no (catching up)" and its LAG until then).

The add is refused when, once the new journal votes, the journals that
answer now would not be a majority: the quorum would stop at the next
failure. The error spells out the arithmetic. Bring the unreachable journals
back or remove the dead ones first; --force adds anyway. A journal started
without --raft-listen (a development journal) cannot be grown at all.

RAFT_ADDR is the Raft address, not the gRPC address clients use. Adding an ID
that is already a member at another address, or an address another member
uses, is refused: remove the old member first. Adding a member again with the
same address changes nothing, so re-running after a timeout is safe.

Needs a platform-admin credential.`,
		Example: `  # On the new host (10.0.0.4), with its journal CA from the ceremony
  # (pact-journal ca-request there, pact ca sign-journal offline: docs/ceremony.md), first:
  pact-journal --node-id j4 --join --raft-listen 10.0.0.4:7500 --listen 10.0.0.4:7443 \
      --data-dir /var/lib/pact-journal --root-cert /etc/pact/ca.pem \
      --journal-ca-cert /etc/pact/journal-ca.pem --journal-ca-key tpm:/etc/pact/journal-ca.tpmkey

  # Then, from an operator machine:
  pact journal add j4 10.0.0.4:7500 --journal-ca j4-ca.pem

  # Give every journal address, so the call reaches the leader wherever it is
  pact --journal 10.0.0.1:7443,10.0.0.2:7443,10.0.0.3:7443 journal add j4 10.0.0.4:7500

  # Watch it catch up
  pact journal status`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			return a.journalAdd(cmd, args, force, journalCAFile)
		}),
	}
	cmd.Flags().StringVar(&journalCAFile, "journal-ca", "", "the new journal's journal CA certificate (PEM, the ceremony's ID-ca.pem): the add is refused unless the journal at RAFT_ADDR presents exactly this one")
	cmd.Flags().BoolVar(&force, "force", false, "add even though the journals that answer now would not be a majority of the grown quorum (it then stops accepting writes whenever fewer than a majority are up)")
	return cmd
}

// journalIDArg checks a journal ID argument.
func journalIDArg(id string) error {
	if err := pki.ValidateName("journal", id); err != nil {
		return fmt.Errorf("ID: %w", err)
	}
	return nil
}

// checkRaftAddr accepts host:port with a numeric, non-zero port.
func checkRaftAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host == "" {
		err = errors.New("missing host")
	}
	if err == nil {
		var n uint64
		if n, err = strconv.ParseUint(port, 10, 16); err == nil && n == 0 {
			err = errors.New("port 0")
		}
	}
	if err != nil {
		return fmt.Errorf("RAFT_ADDR %q: want host:port, the new journal's --raft-listen (or --advertise-raft) address, e.g. 10.0.0.4:7500", addr)
	}
	return nil
}

func (a *app) journalAdd(cmd *cobra.Command, args []string, force bool, journalCAFile string) error {
	path := cmd.CommandPath()
	var id, raftAddr string
	var problems []error
	var expectCA []byte
	if journalCAFile != "" {
		var err error
		if expectCA, err = readJournalCAFile(journalCAFile); err != nil {
			problems = append(problems, fmt.Errorf("--journal-ca: %w", err))
		}
	}
	switch len(args) {
	case 0:
		problems = append(problems, fmt.Errorf("missing ID and RAFT_ADDR: name the journal and its Raft address, e.g. %s j4 10.0.0.4:7500", path))
	case 1:
		id = args[0]
		if err := journalIDArg(id); err != nil {
			problems = append(problems, err)
		}
		problems = append(problems, fmt.Errorf("missing RAFT_ADDR: give the Raft address of journal %s, its --raft-listen, e.g. %s %s 10.0.0.4:7500", id, path, id))
	case 2:
		id, raftAddr = args[0], args[1]
		if err := journalIDArg(id); err != nil {
			problems = append(problems, err)
		}
		if err := checkRaftAddr(raftAddr); err != nil {
			problems = append(problems, err)
		} else if cfg, _ := a.flags.resolve(a.env.Getenv); slices.Contains(cfg.Journals, raftAddr) {
			problems = append(problems, fmt.Errorf("RAFT_ADDR %s is in --journal, so it is a journal's gRPC address; give the new journal's Raft address, its --raft-listen, e.g. 10.0.0.4:7500", raftAddr))
		}
	default:
		problems = append(problems, fmt.Errorf("%s takes ID and RAFT_ADDR, got %d arguments: %s; add one journal at a time", path, len(args), strings.Join(args, " ")))
	}
	s, err := a.connect(cmd, problems)
	if err != nil {
		return err
	}
	defer s.close()
	ctx := cmd.Context()
	act := journalAction{verb: "add journals to the quorum", id: id, write: true, help: path, retry: "re-running the same add is safe"}

	// Look first: Raft would silently re-address a member added again
	// with another address, and a second member at one address breaks both.
	pre, err := s.client.JournalStatus(ctx, &pactv1.JournalStatusRequest{})
	if err != nil {
		return a.explainJournal(ctx, s, journalAction{verb: "read the journal quorum's status", help: path}, err)
	}
	already := false
	for _, m := range pre.GetMembers() {
		switch {
		case m.GetJournalId() == id && m.GetRaftAddr() != raftAddr:
			return conflict(fmt.Sprintf("journal %s is already a member, at Raft address %s; to move it, remove it first (pact journal remove %s), then add it with its new address", id, printable(m.GetRaftAddr()), id))
		case m.GetJournalId() != id && m.GetRaftAddr() == raftAddr:
			return conflict(fmt.Sprintf("Raft address %s belongs to journal %s; give journal %s its own --raft-listen address, or remove %s first (pact journal remove %s)", raftAddr, printable(m.GetJournalId()), id, printable(m.GetJournalId()), printable(m.GetJournalId())))
		case m.GetJournalId() != id && m.GetGrpcAddr() == raftAddr:
			return newUsage(path, fmt.Errorf("RAFT_ADDR %s is the gRPC address of journal %s; give the new journal's Raft address, its --raft-listen, e.g. 10.0.0.4:7500", raftAddr, printable(m.GetJournalId())))
		case m.GetJournalId() == id && m.GetVoter():
			already = true
		}
	}
	resp, err := s.client.AddJournal(ctx, &pactv1.AddJournalRequest{JournalId: id, RaftAddr: raftAddr, Force: force, ExpectJournalCaDer: expectCA})
	if err != nil {
		return a.explainJournal(ctx, s, act, err)
	}
	members := memberViews(resp.GetMembers())
	if s.cfg.Output == outputJSON {
		mv := MembershipView{JournalID: id, RaftAddr: raftAddr, Members: members}
		if jc := resp.GetJournalCa(); jc != nil {
			v := JournalCAViewOf(jc, nil, a.env.Now())
			mv.JournalCA = &v
		}
		if err := writeJSON(a.env.Stdout, mv); err != nil {
			return err
		}
	} else {
		all, _ := voters(members)
		voter := slices.ContainsFunc(members, func(m JournalMemberView) bool { return m.JournalID == id && m.Voter })
		switch {
		case already:
			fmt.Fprintf(a.env.Stdout, "journal %s was already a voting member at %s; nothing changed. %s\n", id, raftAddr, quorumSize(all))
		case voter:
			fmt.Fprintf(a.env.Stdout, "added journal %s (raft %s) to the quorum; it caught up and votes: %s\n", id, raftAddr, quorumSize(all))
		default:
			fmt.Fprintf(a.env.Stdout, "added journal %s (raft %s) as a non-voter; it is copying the registry and the leader makes it a voter once it has caught up (watch: pact journal status). Meanwhile: %s\n", id, raftAddr, quorumSize(all))
		}
		if jc := resp.GetJournalCa(); jc != nil {
			fmt.Fprintf(a.env.Stdout, "journal %s is bound to journal CA %s (valid to %s): only a chain through it is journal %s to the quorum\n", id, jc.GetSerial(), formatTime(unixTime(jc.GetNotAfterUnix(), 0)), id)
		}
		if err := writeJournalTable(a.env.Stdout, members, a.env.Now(), levelsReported(members)); err != nil {
			return err
		}
	}
	for _, m := range members {
		if m.JournalID == id && !m.Reachable {
			reason := ""
			if m.Error != "" {
				reason = " (" + printable(m.Error) + ")"
			}
			fmt.Fprintf(a.env.Stderr, "journal %s has not answered yet%s: it joins once pact-journal runs on its host with --node-id %s --join --raft-listen %s, then copies the registry from the leader; watch it with: pact journal status\n", id, reason, id, raftAddr)
		}
	}
	return nil
}

// quorumSize is "4 voters, a majority is 3: it serves with up to 1 down".
func quorumSize(n int) string {
	if n == 0 {
		return "no voters"
	}
	m := majority(n)
	return fmt.Sprintf("%d %s, a majority is %d: it serves with up to %d down", n, plural(n, "voter", "voters"), m, n-m)
}

// conflict is a membership change refused before it was sent, with the
// exit code of a conflict.
func conflict(msg string) error {
	return &hintError{msg: msg, err: &apierr.Error{Code: codes.AlreadyExists, Message: msg}}
}

func (a *app) journalRemoveCommand() *cobra.Command {
	var force, revoke, yesOwn bool
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a journal from the quorum",
		Long: `Remove journal ID from the quorum's Raft configuration: it no longer votes or
receives the log, and the majority is counted without it. Then stop
pact-journal on its host. Removing the leader is allowed: it steps down and
the others elect a new one.

Remove a journal before retiring its host for good, or to replace a dead
one: a dead voter still counts towards the majority until it is removed.
Change one journal at a time, and keep a majority of the remaining voters up.
The command goes to the leader (pact tries each --journal address in turn; a
follower answers NO_LEADER and names the leader).

The remove is refused when the voters left that answer now would not be a
majority of the voters left: the quorum could not elect a leader. The error
spells out the arithmetic; --force removes anyway. A leader whose journal CA
was revoked (pact journal revoke-ca) cannot commit its own removal: it
answers NO_LEADER (exit 7) and steps down within seconds; run the remove
again and the leader the others elect takes it out. The removed journal
notices, stops serving and exits with code 3, and refuses to start again
from the same data directory.

With --revoke-intermediate every intermediate the journal published is
retired first: agents holding its certificates are told to renew at once,
and after --grace (default 15m) its intermediates are revoked, so nothing it
signed authenticates anywhere, and the journal itself is refused on every
journal's Raft and gRPC ports. Use it for a compromised journal host: the
nodes it served keep working through another journal. If one of those
intermediates signed your own operator credential (pact admin renew through
that journal), the removal is refused, changing nothing (exit 6,
REVOKES_OWN_CREDENTIAL): renew it through another journal first, as the
refusal says, or add --yes-including-my-credential.

An ID that is not a member exits 3 (see "pact journal status"). Needs a
platform-admin credential.`,
		Example: `  pact journal remove j3

  # A compromised journal: cut it off, let its agents renew elsewhere
  pact journal remove j3 --revoke-intermediate --grace 10m

  # Replace a dead journal j3 with a new one, j5
  pact journal remove j3
  pact journal add j5 10.0.0.5:7500

  # The remaining members as JSON
  pact journal remove j3 -o json`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			return a.journalRemove(cmd, args, force, revoke, yesOwn, grace)
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove even though the voters left that answer now are not a majority (the quorum then accepts no write until enough of them are up)")
	cmd.Flags().BoolVar(&revoke, "revoke-intermediate", false, "also retire the journal's intermediates: agents renew, then they are revoked")
	cmd.Flags().Var(duration.NewValue(&grace, 0), "grace", "with --revoke-intermediate: how long agents have to renew (default: the journal's, 15m)")
	cmd.Flags().BoolVar(&yesOwn, "yes-including-my-credential", false, "with --revoke-intermediate: retire them even though one signed the credential running this command")
	return cmd
}

func (a *app) journalRemove(cmd *cobra.Command, args []string, force, revoke, yesOwn bool, grace time.Duration) error {
	path := cmd.CommandPath()
	var id string
	var problems []error
	switch len(args) {
	case 0:
		problems = append(problems, fmt.Errorf("missing ID: name the journal, e.g. %s j3 (pact journal status lists them)", path))
	case 1:
		id = args[0]
		if err := journalIDArg(id); err != nil {
			problems = append(problems, err)
		}
	default:
		problems = append(problems, fmt.Errorf("%s takes one ID, got %d arguments: %s; remove one journal at a time", path, len(args), strings.Join(args, " ")))
	}
	if cmd.Flags().Changed("grace") && (!revoke || grace < time.Second) {
		problems = append(problems, errors.New("--grace goes with --revoke-intermediate and must be at least 1s"))
	}
	if yesOwn && !revoke {
		problems = append(problems, errors.New("--yes-including-my-credential goes with --revoke-intermediate"))
	}
	s, err := a.connect(cmd, problems)
	if err != nil {
		return err
	}
	defer s.close()
	ctx := cmd.Context()

	resp, err := s.client.RemoveJournal(ctx, &pactv1.RemoveJournalRequest{JournalId: id, Force: force, RevokeIntermediate: revoke, GraceSeconds: int64(grace / time.Second), RevokeOwnCredential: yesOwn})
	if err != nil {
		return a.explainJournal(ctx, s, journalAction{
			verb: "remove journals from the quorum", id: id, write: true, help: path,
			retry: "if it is gone, re-running reports it is not a member",
		}, err)
	}
	members := memberViews(resp.GetMembers())
	retired := intermediateViews(resp.GetRetired(), a.env.Now())
	own := ownCredentialView(resp.GetOwnCredential())
	if s.cfg.Output == outputJSON {
		v := MembershipView{JournalID: id, Members: members, OwnCredential: own}
		if revoke {
			v.Retired = retired
		}
		if err := writeJSON(a.env.Stdout, v); err != nil {
			return err
		}
		a.warnOwnCredential(own)
		return nil
	}
	defer a.warnOwnCredential(own)
	all, _ := voters(members)
	fmt.Fprintf(a.env.Stdout, "removed journal %s from the quorum: %s\n", id, quorumSize(all))
	for _, r := range retired {
		fmt.Fprintf(a.env.Stdout, "retired intermediate %s: its agents are renewing; revoked at %s\n", r.Serial, r.RevokeAt)
	}
	if len(members) > 0 {
		if err := writeJournalTable(a.env.Stdout, members, a.env.Now(), levelsReported(members)); err != nil {
			return err
		}
	}
	fmt.Fprintf(a.env.Stderr, "pact-journal on %s's host notices it was removed, stops serving and exits with code 3, and will not start again from the same data directory; to bring it back later, start it with an empty --data-dir and --join, then run: pact journal add %s RAFT_ADDR\n", id, id)
	return nil
}

// journalAction describes what a journal command was doing, so an error
// can say what to do next.
type journalAction struct {
	verb  string
	id    string // the journal the command names, if any
	write bool
	help  string
	// retry is what re-running a timed-out change does.
	retry string
}

// explainJournal is session.explain for the journal commands: the same
// rules, with advice about journals rather than nodes.
func (a *app) explainJournal(ctx context.Context, s *session, act journalAction, err error) error {
	if err == nil {
		return nil
	}
	generic := action{
		verb: act.verb, write: act.write, help: act.help,
		denied: "changing the journal quorum needs a credential with role platform-admin",
	}
	if !act.write {
		generic.denied = "reading the quorum's status is open to every admin role: check --cert is an admin credential of this domain"
	}
	var unreachable *UnreachableError
	if errors.As(err, &unreachable) {
		if act.write {
			if msg := s.leaderHint(ctx, unreachable); msg != "" {
				return &hintError{msg: msg, err: err}
			}
		}
		return s.explain(generic, err)
	}
	var je *JournalError
	addr := ""
	if errors.As(err, &je) {
		addr = je.Addr
	}
	e := apierr.FromError(err)
	said := ""
	if e.Message != "" {
		detail := e.Message
		if e.Reason != "" {
			detail = string(e.Reason) + ": " + e.Message
		}
		said = " (journal: " + detail + ")"
	}
	var msg string
	switch e.Code {
	case codes.NotFound:
		msg = fmt.Sprintf("no journal %s in the quorum%s; list the members with: pact journal status", act.id, said)
	case codes.AlreadyExists, codes.Aborted:
		msg = fmt.Sprintf("cannot %s: the change conflicts with the quorum's membership%s; check the members with: pact journal status", act.verb, said)
	case codes.FailedPrecondition:
		msg = fmt.Sprintf("cannot %s now%s; check the quorum with: pact journal status", act.verb, said)
	case codes.DeadlineExceeded, codes.Unavailable:
		if !act.write {
			return s.explain(generic, err)
		}
		msg = fmt.Sprintf("journal %s did not answer within %s%s; the change may or may not have been made: check with pact journal status before retrying (%s)", orUnknown(addr), s.cfg.Timeout, said, act.retry)
	default:
		return s.explain(generic, err)
	}
	return &hintError{msg: msg, err: err}
}

// leaderHint explains a membership change that no --journal address took
// because none is the leader: it names the leader's address to use. It
// returns "" when the leader is unknown or already among the addresses.
// It asks for the status afresh: the leader may have changed meanwhile.
func (s *session) leaderHint(ctx context.Context, u *UnreachableError) string {
	redirected := slices.ContainsFunc(u.Attempts, func(at Attempt) bool { return at.Err.Reason == apierr.NoLeader })
	if !redirected {
		return ""
	}
	st, err := s.client.JournalStatus(ctx, &pactv1.JournalStatusRequest{})
	if err != nil {
		return ""
	}
	leader := st.GetLeaderId()
	var addr string
	for _, m := range st.GetMembers() {
		if m.GetJournalId() == leader {
			addr = m.GetGrpcAddr()
		}
	}
	if leader == "" || addr == "" || slices.Contains(s.cfg.Journals, addr) {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "membership changes go to the leader, journal %s at %s, and no --journal address reached it:", printable(leader), printable(addr))
	for _, at := range u.Attempts {
		fmt.Fprintf(&b, "\n  %s: %s", at.Addr, at.reason())
	}
	fmt.Fprintf(&b, "\nre-run with the leader's address: --journal %s (or add it to %s)", printable(addr), EnvJournal)
	return b.String()
}
