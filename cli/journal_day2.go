package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/atomicfile"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/snapfile"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// quorumCheck turns a status into an exit code for monitoring.
type quorumCheck struct {
	maxLag     uint64
	stuckAfter time.Duration
}

// QuorumError is a status that needs attention; Code is its exit code.
type QuorumError struct {
	Code     int
	Problems []string
}

func (e *QuorumError) Error() string {
	return "the quorum needs attention: " + strings.Join(e.Problems, "; ")
}

// verdict is nil for a healthy quorum, else the most severe problem's
// exit code with every problem listed.
func (c quorumCheck) verdict(v QuorumView, now time.Time) error {
	var problems []string
	code := ExitOK
	worst := func(c int) {
		rank := map[int]int{ExitOK: 0, ExitQuorumLearnerStuck: 1, ExitQuorumDegraded: 2, ExitQuorumNoLeader: 3}
		if rank[c] > rank[code] {
			code = c
		}
	}
	if v.LeaderID == "" {
		worst(ExitQuorumNoLeader)
		problems = append(problems, fmt.Sprintf("no leader as seen by %s: writes and enrollments are refused until a majority of the voters is up", orUnknown(v.ServedBy)))
	}
	for _, m := range v.Members {
		id := printable(m.JournalID)
		switch {
		case !m.Voter && (!m.Reachable || (!m.nonvoterSince.IsZero() && now.Sub(m.nonvoterSince) > c.stuckAfter)):
			worst(ExitQuorumLearnerStuck)
			why := "unreachable"
			if m.Reachable {
				why = fmt.Sprintf("still a non-voter after %s, %d entries behind", now.Sub(m.nonvoterSince).Round(time.Second), m.Lag)
			}
			problems = append(problems, fmt.Sprintf("non-voter %s is stuck (%s): check its log; remove it (pact journal remove %s) if it cannot catch up", id, why, id))
		case !m.Voter:
		case !m.Reachable:
			worst(ExitQuorumDegraded)
			problems = append(problems, fmt.Sprintf("voter %s is unreachable", id))
		case m.Halted != "":
			worst(ExitQuorumDegraded)
			problems = append(problems, fmt.Sprintf("voter %s is halted: %s", id, printable(m.Halted)))
		case m.Lag > c.maxLag:
			worst(ExitQuorumDegraded)
			problems = append(problems, fmt.Sprintf("voter %s lags %d entries (more than --max-lag %d)", id, m.Lag, c.maxLag))
		}
	}
	if code == ExitOK {
		return nil
	}
	return &QuorumError{Code: code, Problems: problems}
}

// ---------------------------------------------------------------------------
// pact journal snapshot save|inspect

// SnapshotView is "pact journal snapshot save|inspect -o json".
type SnapshotView struct {
	File          string `json:"file"`
	Bytes         int64  `json:"bytes"`
	FormatVersion uint32 `json:"format_version"`
	Domain        string `json:"domain"`
	// RootSHA256 is the fingerprint of the domain root the quorum ran
	// with, as openssl x509 -fingerprint -sha256 prints it; empty for a
	// file from a version that did not record it.
	RootSHA256    string         `json:"root_sha256,omitempty"`
	Index         uint64         `json:"index"`
	Term          uint64         `json:"term"`
	TakenAt       string         `json:"taken_at"`
	TakenBy       string         `json:"taken_by"`
	Version       string         `json:"version"`
	SHA256        string         `json:"sha256"`
	Nodes         int            `json:"nodes"`
	NodesByState  map[string]int `json:"nodes_by_state"`
	Revoked       int            `json:"revoked_serials"`
	Intermediates int            `json:"intermediates"`
	JournalCAs    int            `json:"journal_cas"`
	Audit         int            `json:"audit_entries"`
	// Journals are the quorum's members when the snapshot was taken (for
	// a file from before pact recorded them: every journal whose
	// addresses the state holds, removed ones included).
	Journals []string `json:"journals"`
	// RemovedJournals are journals whose addresses the state still holds
	// but that were no longer members; absent when there are none or the
	// file does not say.
	RemovedJournals []string `json:"removed_journals,omitempty"`
	// MembersUnknown: the file is from before pact recorded the members,
	// so Journals may include removed journals.
	MembersUnknown bool `json:"members_unknown,omitempty"`
	// QuorumID is the quorum the snapshot was taken from (empty for a
	// quorum without one); a restore makes a new one.
	QuorumID string `json:"quorum_id"`
}

func (a *app) journalSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save the replicated state to a file, or inspect such a file",
		Long: `A snapshot file is a consistent copy of everything the quorum replicates:
the registry, the revocation set, the published intermediates, the journals'
addresses and the audit trail. "save" asks the leader for one; "inspect"
reads a file without any journal. Restore one into a new quorum with
pact-journal restore (docs/quorum.md, "Backup and restore").`,
		Example: `  pact journal snapshot save /backup/pact-$(date +%F).snap
  pact journal snapshot inspect /backup/pact-2026-01-31.snap`,
	}
	a.group(cmd)
	cmd.AddCommand(a.snapshotSaveCommand(), a.snapshotInspectCommand())
	return cmd
}

func (a *app) snapshotSaveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "save FILE",
		Short: "Save a consistent snapshot of the quorum's state to FILE",
		Long: `Save a consistent, linearizable snapshot of the whole replicated state to
FILE: the leader takes it after a Raft barrier (every write acknowledged
before the command started is in it) and streams it. The file starts with a
header (format version, domain, Raft index and term, when and by which
journal it was taken, the pact version, a SHA-256 of the state); the CLI
checks the whole file before it gives it its name, so FILE is never a
partial copy. An existing FILE is not overwritten.

The file holds no private key: certificates, serials and hardware
identities only. It does hold the site's inventory; keep it like one.

Needs a platform-admin credential. The call goes to the leader (pact tries
each --journal address in turn).`,
		Example: `  pact journal snapshot save pact.snap
  pact journal snapshot save pact.snap -o json`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			return a.snapshotSave(cmd, args)
		}),
	}
}

func (a *app) snapshotSave(cmd *cobra.Command, args []string) error {
	var problems []error
	var file string
	switch len(args) {
	case 1:
		file = args[0]
		if _, err := os.Stat(file); err == nil {
			problems = append(problems, fmt.Errorf("%s already exists; choose a new file name (snapshots are never overwritten)", file))
		}
	default:
		problems = append(problems, fmt.Errorf("give one FILE to write, e.g. %s pact.snap", cmd.CommandPath()))
	}
	s, err := a.connect(cmd, problems)
	if err != nil {
		return err
	}
	defer s.close()
	tmp, err := atomicfile.Create(file, 0o600)
	if err != nil {
		return newUsage(cmd.CommandPath(), fmt.Errorf("cannot write next to %s: %w", file, err))
	}
	defer tmp.Cleanup()
	n, err := saveSnapshot(cmd.Context(), s.client, tmp.File)
	if err != nil {
		return a.explainJournal(cmd.Context(), s, journalAction{verb: "save a snapshot", write: true, help: cmd.CommandPath(), retry: "re-running takes a new snapshot"}, err)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	v, err := inspectFile(tmp.Name())
	if err != nil {
		return fmt.Errorf("the snapshot received is not valid (%w); nothing was written to %s: retry", err, file)
	}
	if err := tmp.Link(); err != nil {
		return fmt.Errorf("cannot name the snapshot %s: %w", file, err)
	}
	v.File, v.Bytes = file, n
	if s.cfg.Output == outputJSON {
		return writeJSON(a.env.Stdout, v)
	}
	fmt.Fprintf(a.env.Stdout, "saved snapshot of domain %s to %s: %d nodes, Raft index %d, term %d, %d bytes, taken by %s at %s\n",
		v.Domain, file, v.Nodes, v.Index, v.Term, n, v.TakenBy, v.TakenAt)
	return nil
}

func (a *app) snapshotInspectCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect FILE",
		Short: "Print a snapshot file's header and contents, without a journal",
		Long: `Check a snapshot file completely (format, size, SHA-256, that its registry
decodes and keeps its rules) and print its header and what it holds: the
domain, and the SHA-256 fingerprint of the domain root the quorum ran with
(compare it with: openssl x509 -noout -fingerprint -sha256 -in ca.pem;
pact-journal restore takes the file only with that very root). No
journal and no credential is needed. A truncated, corrupt or newer-format
file exits 2 with the reason.

"journals" are the members of the quorum when the snapshot was taken; the
state also keeps the addresses of journals removed before it, listed apart
as "removed journals". A file from before pact recorded the members lists
every journal the state names, and says so.`,
		Example: `  pact journal snapshot inspect pact.snap
  pact journal snapshot inspect pact.snap -o json | jq .nodes`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return newUsage(cmd.CommandPath(), fmt.Errorf("give one FILE, e.g. %s pact.snap", cmd.CommandPath()))
			}
			out, err := a.flags.resolveOutput()
			if err != nil {
				return newUsage(cmd.CommandPath(), err)
			}
			v, err := inspectFile(args[0])
			if err != nil {
				return newUsage(cmd.CommandPath(), fmt.Errorf("%s: %w", args[0], err))
			}
			if out == outputJSON {
				return writeJSON(a.env.Stdout, v)
			}
			return printSnapshot(a.env.Stdout, v)
		}),
	}
}

// inspectFile reads and checks a whole snapshot file.
func inspectFile(path string) (SnapshotView, error) {
	f, err := os.Open(path)
	if err != nil {
		return SnapshotView{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return SnapshotView{}, err
	}
	h, state, nodes, err := snapfile.Read(f)
	if err != nil {
		return SnapshotView{}, explainSnapshotErr(err)
	}
	c, err := snapfile.Count(state)
	if err != nil {
		return SnapshotView{}, err
	}
	byState := map[string]int{}
	for k, n := range c.Nodes {
		byState[strings.ToLower(strings.TrimPrefix(k, "NODE_STATE_"))] = n
	}
	journals, removed, unknown := snapshotMembers(h.GetMembers(), c.Journals)
	return SnapshotView{
		File: path, Bytes: fi.Size(), FormatVersion: h.GetFormatVersion(), Domain: h.GetDomain(), RootSHA256: rootFingerprint(h.GetRootSha256()),
		Index: h.GetIndex(), Term: h.GetTerm(), TakenAt: formatTime(unixTime(0, h.GetTakenAtUnixNano())),
		TakenBy: h.GetTakenBy(), Version: h.GetVersion(), SHA256: fmt.Sprintf("%x", h.GetSha256()),
		Nodes: nodes, NodesByState: byState, Revoked: c.Revoked, Intermediates: c.Intermediates, JournalCAs: c.JournalCAs, Audit: c.Audit,
		Journals: journals, RemovedJournals: removed, MembersUnknown: unknown, QuorumID: h.GetQuorumId(),
	}, nil
}

// snapshotMembers splits the journals whose addresses a snapshot's state
// holds into the members its header names and the rest (removed before
// the snapshot; the state keeps their addresses). A file without members
// (written before pact recorded them) lists every journal, unknown set.
func snapshotMembers(members, recorded []string) (journals, removed []string, unknown bool) {
	if len(members) == 0 {
		journals = slices.Sorted(slices.Values(recorded))
		return append([]string{}, journals...), nil, true
	}
	journals = slices.Sorted(slices.Values(members))
	for _, id := range recorded {
		if !slices.Contains(members, id) {
			removed = append(removed, id)
		}
	}
	slices.Sort(removed)
	return journals, removed, false
}

func rootFingerprint(sum []byte) string {
	if len(sum) == 0 {
		return ""
	}
	return pki.FormatFingerprint(sum)
}

func explainSnapshotErr(err error) error {
	switch {
	case errors.Is(err, snapfile.ErrTruncated):
		return fmt.Errorf("%w: the file is incomplete (an interrupted copy?); use another snapshot", err)
	case errors.Is(err, snapfile.ErrCorrupt):
		return fmt.Errorf("%w: the file was altered or damaged; use another snapshot", err)
	case errors.Is(err, snapfile.ErrNewer):
		return fmt.Errorf("%w: read it with the pact version that wrote it, or newer", err)
	}
	return err
}

func printSnapshot(w io.Writer, v SnapshotView) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, val string) { fmt.Fprintf(tw, "%s\t%s\n", k, val) }
	row("file:", v.File)
	row("format:", fmt.Sprint(v.FormatVersion))
	row("domain:", v.Domain)
	if v.RootSHA256 != "" {
		row("root sha256:", v.RootSHA256)
	} else {
		row("root sha256:", "(not recorded: written by a version before snapshots recorded the root)")
	}
	row("raft index:", fmt.Sprint(v.Index))
	row("raft term:", fmt.Sprint(v.Term))
	row("taken at:", v.TakenAt)
	row("taken by:", cell(v.TakenBy))
	row("quorum id:", cell(v.QuorumID))
	row("version:", cell(v.Version))
	row("sha256:", v.SHA256)
	var states []string
	for k, n := range v.NodesByState {
		states = append(states, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(states)
	row("nodes:", fmt.Sprintf("%d (%s)", v.Nodes, strings.Join(states, ", ")))
	row("revoked serials:", fmt.Sprint(v.Revoked))
	row("intermediates:", fmt.Sprint(v.Intermediates))
	row("journal CAs:", fmt.Sprint(v.JournalCAs))
	row("audit entries:", fmt.Sprint(v.Audit))
	switch {
	case v.MembersUnknown:
		row("journals:", strings.Join(v.Journals, ", ")+" (every journal the state names: this file does not record which were members)")
	default:
		row("journals:", strings.Join(v.Journals, ", "))
	}
	if len(v.RemovedJournals) > 0 {
		row("removed journals:", strings.Join(v.RemovedJournals, ", ")+" (removed before the snapshot; not members)")
	}
	return tw.Flush()
}

// saveSnapshot streams the leader's snapshot into w and returns the bytes
// written. The client moves on from followers (they answer NO_LEADER) and
// bounds only the first message by --timeout.
func saveSnapshot(ctx context.Context, c pactv1.AdminServiceClient, w io.Writer) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.SaveSnapshot(ctx, &pactv1.SaveSnapshotRequest{})
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		chunk, err := stream.Recv()
		if err == io.EOF {
			return n, nil
		} else if err != nil {
			return n, err
		}
		k, err := w.Write(chunk.GetData())
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
}
