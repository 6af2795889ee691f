package raftnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/atomicfile"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/tlsalert"
	"github.com/pact-hpc/pact/internal/version"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// RemovedMarker is the file a journal writes into its data directory when
// it finds itself removed, so a restart refuses instead of serving stale
// reads.
const RemovedMarker = "REMOVED"

// haltState records why a journal stopped serving.
type haltState struct {
	mu     sync.Mutex
	reason string
	// stalled is why the write watchdog cut this journal off (watchdog.go),
	// or "": unlike reason, it clears once the stuck write finishes.
	stalled string
	// cutOff is why the quorum refuses this journal as a peer (its
	// journal CA or intermediate revoked, its journal id bound to another
	// journal CA), or "": it clears once a peer takes it again.
	cutOff  string
	removed chan struct{}
	once    sync.Once
}

// halt stops serving for reason (the first reason wins).
func (n *Node) halt(reason string) {
	n.halted.mu.Lock()
	defer n.halted.mu.Unlock()
	if n.halted.reason == "" {
		n.halted.reason = reason
	}
}

// setStalled sets (or, with "", clears) the write watchdog's reason.
func (n *Node) setStalled(reason string) {
	n.halted.mu.Lock()
	defer n.halted.mu.Unlock()
	n.halted.stalled = reason
}

// haltedReason is why this journal stopped serving, or "".
func (n *Node) haltedReason() string {
	n.halted.mu.Lock()
	defer n.halted.mu.Unlock()
	if n.halted.reason != "" {
		return n.halted.reason
	}
	if n.halted.stalled != "" {
		return n.halted.stalled
	}
	return n.halted.cutOff
}

// CutOff is why the quorum refuses this journal as a peer, or "".
func (n *Node) CutOff() string {
	n.halted.mu.Lock()
	defer n.halted.mu.Unlock()
	return n.halted.cutOff
}

// setCutOff sets (or, with "", clears) why the quorum refuses this
// journal as a peer, and tells the journal when it changes (its streams
// end, so their agents go to a journal of the quorum).
func (n *Node) setCutOff(reason string) {
	n.halted.mu.Lock()
	changed := n.halted.cutOff != reason
	n.halted.cutOff = reason
	n.halted.mu.Unlock()
	if !changed {
		return
	}
	if reason != "" {
		n.log.Error("THE QUORUM REFUSES THIS JOURNAL AS A PEER: it serves nothing until the quorum takes it again (docs/quorum.md, \"Peers are what Raft records\")", logkey.Reason, reason)
	} else {
		n.log.Info("the quorum takes this journal as a peer again; serving")
	}
	if n.cfg.OnCutOff != nil {
		n.cfg.OnCutOff(reason)
	}
}

// Removed is closed once this journal found itself removed from the
// quorum; pact-journal then exits with its own code.
func (n *Node) Removed() <-chan struct{} { return n.halted.removed }

// Halted is why this journal stopped serving, or "" while it serves: it
// was removed, met a log entry it may not skip, or, leading, has a Raft
// store write stuck (watchdog.go, until the write finishes).
func (n *Node) Halted() string { return n.haltedReason() }

// onFSMHalt is called by the FSM, on Raft's apply goroutine, when it meets
// an entry it does not know and may not skip.
func (n *Node) onFSMHalt(index uint64, reason string) {
	n.log.Error("STOPPED APPLYING THE LOG: "+reason+"; a newer pact-journal wrote it. This journal serves nothing until it is upgraded: install the newer pact-journal and restart it (docs/quorum.md, rolling upgrades)",
		logkey.Index, index, logkey.Version, version.Get().String())
	n.halt("stopped applying the log at entry " + fmt.Sprint(index) + ": " + reason + "; upgrade this journal")
}

// ---------------------------------------------------------------------------
// Adding and removing journals.

// Majority is how many of n voters elect a leader.
func Majority(n int) int { return n/2 + 1 }

// QuorumArithmetic counts the voters of the configuration and those that
// answered the status round just now.
func QuorumArithmetic(members []*pactv1.JournalMember) (voters, reachable int, down []string) {
	for _, m := range members {
		if !m.GetVoter() {
			continue
		}
		voters++
		if m.GetReachable() {
			reachable++
		} else {
			down = append(down, m.GetJournalId())
		}
	}
	return voters, reachable, down
}

// RefusingVoters asks again, in parallel and for a few seconds at most,
// each voter of members other than this journal that did not answer the
// status round, and returns, sorted, those that answer now by refusing
// this journal itself: their peer service refused its certificate
// (UNAUTHENTICATED or PERMISSION_DENIED) or was too busy for it
// (RESOURCE_EXHAUSTED), or their TLS stack sent an alert. They are up, but
// no longer take this journal as a peer (its journal CA or intermediate
// was revoked, say), on the Raft port either: a leader removing itself
// learns from them that it cannot commit the change, rather than that the
// quorum left behind could not elect. One that answers normally now is
// not returned: it is no refusal.
func (n *Node) RefusingVoters(ctx context.Context, members []*pactv1.JournalMember) []string {
	var (
		mu  sync.Mutex
		out []string
		wg  sync.WaitGroup
	)
	for _, m := range members {
		if !m.GetVoter() || m.GetReachable() || m.GetJournalId() == n.cfg.NodeID || m.GetGrpcAddr() == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := n.peers.get(m.GetGrpcAddr())
			if err != nil {
				return
			}
			// A few tries within a bound: the journal asking may have
			// re-keyed a moment ago (its intermediate went with its journal
			// CA), and its channels with it.
			wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			for wctx.Err() == nil {
				cctx, cancelCall := context.WithTimeout(wctx, time.Second)
				_, err = c.MemberStatus(cctx, &pactv1.MemberStatusRequest{})
				cancelCall()
				if err == nil {
					return
				}
				if refusedUs(n.peers.explain(m.GetGrpcAddr(), err)) {
					mu.Lock()
					out = append(out, m.GetJournalId())
					mu.Unlock()
					return
				}
				select {
				case <-wctx.Done():
				case <-time.After(250 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(out)
	return out
}

// refusedUs reports whether a peer call's error (peerConns.explain) is the
// peer's own refusal of this journal: an authentication refusal or a busy
// answer its service sent, or a TLS alert its TLS stack sent (a refusal
// of ours is no alert received). Either way the peer is up and answered.
func refusedUs(err error) bool {
	if err == nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.ResourceExhausted:
		return true
	case codes.Unavailable:
		_, alert := tlsalert.Received(err)
		return alert
	}
	return false
}

// IsVoter reports whether journal id is a voter of the configuration.
func (n *Node) IsVoter(id string) bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == id {
			return srv.Suffrage == raft.Voter
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// Promotion of caught-up non-voters (leader only).

// AddNonvoter adds journal id at Raft address addr as a non-voter, which
// copies the registry without counting towards the majority, so a slow or
// wrong new journal cannot stall commits; the leader's promote loop makes
// it a voter once it has caught up.
func (n *Node) AddNonvoter(id, addr string) error {
	if err := n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return membershipError("add "+id, err)
	}
	n.nudgePromote()
	return nil
}

// RemoveServer removes journal id from the configuration.
func (n *Node) RemoveServer(id string) error {
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return membershipError("remove "+id, err)
	}
	return nil
}

func (n *Node) nudgePromote() {
	select {
	case n.promoteNow <- struct{}{}:
	default:
	}
}

// promoteLoop runs on every journal; while it leads, it promotes each
// non-voter whose registry has caught up with the leader's commit index.
func (n *Node) promoteLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		case <-n.promoteNow:
		}
		if n.raft.State() == raft.Leader && n.haltedReason() == "" {
			n.promoteCaughtUp()
		}
	}
}

func (n *Node) promoteCaughtUp() {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	var learners []raft.Server
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Nonvoter {
			learners = append(learners, srv)
		}
	}
	if len(learners) == 0 {
		return
	}
	commit := n.raft.CommitIndex()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	members, err := n.Members(ctx)
	if err != nil {
		return
	}
	voters, reachable, _ := QuorumArithmetic(members)
	for _, srv := range learners {
		var m *pactv1.JournalMember
		for _, x := range members {
			if x.GetJournalId() == string(srv.ID) {
				m = x
			}
		}
		if m == nil || !m.GetReachable() || m.GetHalted() != "" || m.GetAppliedIndex() < commit {
			continue
		}
		if reachable+1 < Majority(voters+1) {
			n.log.Warn("a caught-up non-voter is not promoted: with it the reachable voters would not be a majority", logkey.Journal, srv.ID)
			continue
		}
		if err := n.raft.AddVoter(srv.ID, srv.Address, f.Index(), n.cfg.ApplyTimeout).Error(); err != nil {
			n.log.Warn("promoting a caught-up non-voter failed; retrying", logkey.Journal, srv.ID, logkey.Err, err)
			return
		}
		n.log.Info("journal caught up and promoted to voter", logkey.Journal, srv.ID, logkey.Applied, m.GetAppliedIndex())
		return // the configuration changed: look again next round
	}
}

// ---------------------------------------------------------------------------
// Noticing a removal.

// removalLoop watches for this journal's removal from the configuration:
// in its own copy of the configuration, or, since a removed journal may
// never receive the entry that removes it, in what the other journals
// report. Once removed it stops serving, writes RemovedMarker and closes
// Removed().
// joiningRemovedTicks is how many ticks of removalLoop in a row a journal
// that started empty must find itself absent from the configuration it
// holds before it counts as removed.
const joiningRemovedTicks = 3

func (n *Node) removalLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	wasMember := false
	// notIn counts the ticks in a row a journal that started empty has
	// had state and found itself absent from its configuration.
	notIn := 0
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		servers := f.Configuration().Servers
		in := slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == n.cfg.NodeID })
		// A journal that had Raft state when it started got it as a
		// member, as did one seen in its configuration since.
		if in || n.startedWithState() {
			wasMember = true
		}
		if in {
			notIn = 0
		} else if len(servers) > 0 && n.raft.LastIndex() > 0 {
			notIn++
		}
		// One that started empty (joining) and has state but is absent
		// from its configuration was added and removed between two ticks,
		// or installed a snapshot that predates its addition (the entries
		// adding it follow within moments): only the first lasts.
		if !wasMember && notIn < joiningRemovedTicks {
			continue
		}
		by := ""
		if !in && len(servers) > 0 {
			by = "its own copy of the configuration"
		} else if _, leader := n.raft.LeaderWithID(); leader == "" || n.raft.State() == raft.Candidate {
			var withdrawn string
			by, withdrawn = n.removedPerPeers(servers)
			if withdrawn != "" {
				n.setCutOff(withdrawn)
			}
		} else if n.raft.State() == raft.Follower || n.raft.State() == raft.Leader {
			// A leader's entries reach it, or it leads: a peer again.
			n.setCutOff("")
		}
		if by != "" {
			n.markRemoved(by)
			return
		}
	}
}

// startedWithState reports whether this journal's Raft stores held state
// when it started.
func (n *Node) startedWithState() bool {
	n.quorum.mu.Lock()
	defer n.quorum.mu.Unlock()
	return n.quorum.hasState
}

// removedPerPeers asks the other journals this one knows whether it is
// still in their configuration; it returns who said it is not, or "",
// and, if one refused this journal as a peer because Raft's records
// withdrew its peer rights (apierr.PeerWithdrawn), why.
//
// Only the journals of its own configuration are asked: they are the
// quorum it belonged to (the registry may name journals of another quorum,
// after a restore).
func (n *Node) removedPerPeers(servers []raft.Server) (removedBy, withdrawn string) {
	accepted := false
	for _, ji := range n.knownJournals() {
		ours := slices.ContainsFunc(servers, func(s raft.Server) bool {
			return string(s.ID) == ji.GetJournalId() && string(s.Address) == ji.GetRaftAddr()
		})
		if !ours || ji.GetJournalId() == n.cfg.NodeID || ji.GetGrpcAddr() == "" {
			continue
		}
		c, err := n.peers.get(ji.GetGrpcAddr())
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.MemberStatus(ctx, &pactv1.MemberStatusRequest{})
		cancel()
		if pe := apierr.FromError(err); err != nil && pe.Reason == apierr.PeerRemoved {
			// Cut off and removed: it could not learn it otherwise.
			return "journal " + ji.GetJournalId() + ", which refuses it as a peer and no longer lists it", ""
		}
		if pe := apierr.FromError(err); err != nil && pe.Reason == apierr.PeerWithdrawn {
			withdrawn = "journal " + ji.GetJournalId() + " refuses it: " + pe.Message
			continue
		}
		if err != nil || st.GetJournalId() != ji.GetJournalId() || st.GetLeaderId() == "" || len(st.GetVoters())+len(st.GetNonvoters()) == 0 {
			continue
		}
		if !slices.Contains(st.GetVoters(), n.cfg.NodeID) && !slices.Contains(st.GetNonvoters(), n.cfg.NodeID) {
			return "journal " + ji.GetJournalId() + ", whose leader is " + st.GetLeaderId(), ""
		}
		// A journal of the quorum answered it as a peer.
		accepted = true
	}
	if accepted {
		return "", ""
	}
	return "", withdrawn
}

func (n *Node) markRemoved(by string) {
	reason := "removed from the quorum (according to " + by + ")"
	n.halt(reason)
	n.log.Error("THIS JOURNAL WAS REMOVED FROM THE QUORUM ("+by+"): it stops serving and exits. To bring it back: stop it, empty its --data-dir, start it with --join and run pact journal add "+n.cfg.NodeID+" RAFT_ADDR (docs/quorum.md)",
		logkey.DataDir, n.cfg.DataDir)
	msg := fmt.Sprintf("journal %s was removed from the quorum (according to %s) at %s.\nIt must not serve from this directory again: to bring it back, empty this directory,\nstart pact-journal with --join and run: pact journal add %s RAFT_ADDR\n",
		n.cfg.NodeID, by, n.cfg.Clock.Now().UTC().Format(time.RFC3339), n.cfg.NodeID)
	if err := atomicfile.WriteFile(filepath.Join(n.cfg.DataDir, RemovedMarker), []byte(msg), 0o600); err != nil {
		n.log.Error("cannot write the removed marker", logkey.Err, err)
	}
	n.halted.once.Do(func() { close(n.halted.removed) })
}

// CheckRemovedMarker refuses to start from a data directory whose journal
// was removed from its quorum.
func CheckRemovedMarker(dataDir string) error {
	b, err := os.ReadFile(filepath.Join(dataDir, RemovedMarker))
	if err != nil {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrRemoved, strings.TrimSpace(string(b)))
}

// knownJournals is how the other journals are reached: from the registry,
// and, for a journal that restarted without a leader (its registry is
// replayed only once a leader tells it what is committed), from the
// PublishIntermediate entries in its own log.
//
// The log part is read incrementally (logScan): removalLoop asks every
// second while this journal knows no leader, which in a storm on a busy
// machine is when it can least afford to decode the whole log again.
func (n *Node) knownJournals() []*pactv1.JournalInfo {
	known := map[string]*pactv1.JournalInfo{}
	for _, ji := range n.fsm.Journals() {
		known[ji.GetJournalId()] = ji
	}
	first, err1 := n.logs.FirstIndex()
	last, err2 := n.logs.LastIndex()
	if err1 == nil && err2 == nil && first > 0 {
		// Bounded: the log holds at most a snapshot threshold and the
		// trailing entries.
		first = max(first, last-min(last, 50000))
		n.logScan.update(n.logs, first, last)
		for id, e := range n.logScan.found {
			if e.index >= first {
				known[id] = e.info // the newest entry wins
			}
		}
	}
	out := make([]*pactv1.JournalInfo, 0, len(known))
	for _, ji := range known {
		out = append(out, ji)
	}
	return out
}

// logScan remembers what knownJournals found in the log, up to which entry
// and that entry's term, so the next call reads only the entries appended
// since. Raft's log matching property makes that exact: if the entry at
// through still has the term it had, every entry before it is the one
// that was read; if not (a new leader truncated the log and wrote other
// entries there), or the log now ends before through, it is read again
// from the start. Only removalLoop uses it.
type logScan struct {
	through, term uint64
	found         map[string]logJournal
}

// logJournal is the newest JournalInfo a journal published in the log, and
// the entry it came in.
type logJournal struct {
	info  *pactv1.JournalInfo
	index uint64
}

func (s *logScan) update(logs raft.LogStore, first, last uint64) {
	var l raft.Log
	from := first
	if s.found != nil && s.through >= first && s.through <= last && logs.GetLog(s.through, &l) == nil && l.Term == s.term {
		from = s.through + 1
	} else {
		s.found, s.through, s.term = map[string]logJournal{}, 0, 0
	}
	for i := from; i <= last; i++ {
		l = raft.Log{}
		if logs.GetLog(i, &l) != nil {
			continue
		}
		s.through, s.term = i, l.Term
		if l.Type != raft.LogCommand {
			continue
		}
		cmd, err := raftfsm.Decode(l.Data)
		if err != nil {
			continue
		}
		if ji := cmd.GetPublishIntermediate().GetJournal(); ji.GetJournalId() != "" {
			s.found[ji.GetJournalId()] = logJournal{info: ji, index: i}
		}
	}
}

// NotLeaderError answers a membership change sent to a follower: the CLI
// moves on to the next journal address on Unavailable.
func (n *Node) NotLeaderError() error {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return fmt.Errorf("%w: no leader; a majority of the quorum must be up to change it", ErrNoLeader)
	}
	addr := ""
	if ji, ok := n.fsm.Journal(string(id)); ok {
		addr = " at " + ji.GetGrpcAddr()
	}
	return fmt.Errorf("%w: membership changes go to the leader, %s%s", ErrNoLeader, id, addr)
}

func membershipError(what string, err error) error {
	if errors.Is(err, raft.ErrLeadershipLost) {
		// The change is in the log; a later leader may still commit it.
		return fmt.Errorf("%w: %s: leadership lost before the change was known committed; it may or may not take effect: check pact journal status", ErrOutcomeUnknown, what)
	}
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrRaftShutdown) {
		return fmt.Errorf("%w: %s: %w", ErrNoLeader, what, err)
	}
	return fmt.Errorf("%w: %s: %v; check pact journal status and retry", ErrMembership, what, err)
}
