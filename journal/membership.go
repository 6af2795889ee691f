package journal

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/version"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// A journal stops serving when it finds itself removed from the quorum,
// meets a log entry it may not skip, or, leading, has a Raft store write
// stuck (watchdog.go, until the write finishes); errHalted answers every
// call but the status ones then, as Unavailable so clients move to another
// journal.
var (
	errHalted = errors.New("journal: halted")
	// ErrRemoved: this journal was removed from the quorum's configuration.
	ErrRemoved = errors.New("journal: removed from the quorum")
	// ErrNoCluster: --raft-listen without --initial-cluster or --join.
	ErrNoCluster = errors.New("journal: no cluster to form or join")
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
	removed chan struct{}
	once    sync.Once
}

// halt stops serving for reason (the first reason wins).
func (j *Journal) halt(reason string) {
	j.halted.mu.Lock()
	defer j.halted.mu.Unlock()
	if j.halted.reason == "" {
		j.halted.reason = reason
	}
}

// setStalled sets (or, with "", clears) the write watchdog's reason.
func (j *Journal) setStalled(reason string) {
	j.halted.mu.Lock()
	defer j.halted.mu.Unlock()
	j.halted.stalled = reason
}

// haltedReason is why this journal stopped serving, or "".
func (j *Journal) haltedReason() string {
	j.halted.mu.Lock()
	defer j.halted.mu.Unlock()
	if j.halted.reason != "" {
		return j.halted.reason
	}
	return j.halted.stalled
}

// Removed is closed once this journal found itself removed from the
// quorum; pact-journal then exits with its own code.
func (j *Journal) Removed() <-chan struct{} { return j.halted.removed }

// Halted is why this journal stopped serving, or "" while it serves.
func (j *Journal) Halted() string { return j.haltedReason() }

// serving refuses a call while the journal is halted. The status calls
// still answer, so pact journal status can say why.
func (j *Journal) serving(method string) error {
	r := j.haltedReason()
	if r == "" {
		return nil
	}
	switch method {
	case pactv1.AdminService_JournalStatus_FullMethodName, pactv1.JournalPeerService_MemberStatus_FullMethodName:
		return nil
	}
	return fmt.Errorf("%w: journal %s does not serve: %s", errHalted, j.cfg.NodeID, r)
}

// onFSMHalt is called by the FSM, on Raft's apply goroutine, when it meets
// an entry it does not know and may not skip.
func (j *Journal) onFSMHalt(index uint64, reason string) {
	j.log.Error("STOPPED APPLYING THE LOG: "+reason+"; a newer pact-journal wrote it. This journal serves nothing until it is upgraded: install the newer pact-journal and restart it (docs/quorum.md, rolling upgrades)",
		logkey.Index, index, logkey.Version, version.Get().String())
	j.halt("stopped applying the log at entry " + fmt.Sprint(index) + ": " + reason + "; upgrade this journal")
}

// ---------------------------------------------------------------------------
// Adding and removing journals.

// majority is how many of n voters elect a leader.
func majority(n int) int { return n/2 + 1 }

// quorumArithmetic counts the voters of the configuration and those that
// answered the status round just now.
func quorumArithmetic(members []*pactv1.JournalMember) (voters, reachable int, down []string) {
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

func downList(down []string) string {
	if len(down) == 0 {
		return "none unreachable"
	}
	return strings.Join(down, ", ") + " unreachable"
}

func (s *adminServer) AddJournal(ctx context.Context, req *pactv1.AddJournalRequest) (*pactv1.AddJournalResponse, error) {
	j := s.j
	id, addr := req.GetJournalId(), req.GetRaftAddr()
	if err := pki.ValidateName("journal id", id); err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("%w: raft address %q: want host:port", ErrInvalidArgument, addr)
	}
	if j.cfg.RaftListen == "" {
		return nil, fmt.Errorf("%w: journal %s runs alone without --raft-listen (a development journal): it has no Raft network, so journal %s could never reach it, and a second voter it cannot reach would leave it without a majority for good. To run a quorum, start every journal with --raft-listen and --initial-cluster (docs/quorum.md)", errMembership, j.cfg.NodeID, id)
	}
	if j.raft.State() != raft.Leader {
		return nil, j.notLeader()
	}
	f := j.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("journal: raft configuration: %w", err)
	}
	for _, srv := range f.Configuration().Servers {
		switch {
		case string(srv.ID) == id && string(srv.Address) != addr:
			return nil, fmt.Errorf("%w: journal %s is already a member at %s; remove it first to move it", errMembership, id, srv.Address)
		case string(srv.ID) != id && string(srv.Address) == addr:
			return nil, fmt.Errorf("%w: raft address %s belongs to journal %s", errMembership, addr, srv.ID)
		case string(srv.ID) == id:
			// Already a member: re-running add is safe; a non-voter is
			// promoted by the leader once caught up.
			members, err := j.members(ctx)
			return &pactv1.AddJournalResponse{Members: members}, err
		}
	}
	if err := j.probeJournal(ctx, id, addr); err != nil {
		return nil, err
	}
	members, err := j.members(ctx)
	if err != nil {
		return nil, err
	}
	voters, reachable, down := quorumArithmetic(members)
	if need := majority(voters + 1); reachable+1 < need {
		if !req.GetForce() {
			return nil, fmt.Errorf("%w: with %s the quorum would have %d voters, and %d of them must be up to elect a leader; %d of the %d voters answer now (%s), so with %s there would be %d: one more failure or restart and the quorum could not elect a leader. Bring the unreachable journals back, or remove the dead ones first (pact journal remove ID); --force adds anyway, and then the quorum stops accepting writes whenever fewer than %d journals are up", errMembership, id, voters+1, need, reachable, voters, downList(down), id, reachable+1, need)
		}
		j.log.Warn("adding a journal although the reachable voters are not a safe majority (--force)", logkey.Journal, id, logkey.VotersAfter, voters+1, logkey.ReachableAfter, reachable+1)
	}
	// A non-voter first: it copies the registry without counting towards
	// the majority, so a slow or wrong new journal cannot stall commits.
	// promoteLoop makes it a voter once it has caught up.
	if err := j.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, j.cfg.ApplyTimeout).Error(); err != nil {
		return nil, membershipError("add "+id, err)
	}
	j.log.Info("journal added to the quorum as a non-voter; it becomes a voter once caught up", logkey.Journal, id, logkey.RaftAddr, addr, logkey.Actor, principalFrom(ctx).ID.Name, logkey.Forced, req.GetForce())
	j.nudgePromote()
	// Wait briefly for the promotion, so a small registry is answered
	// with the new voter in place.
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for wait.Err() == nil && !j.isVoter(id) {
		select {
		case <-wait.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	members, err = j.members(ctx)
	return &pactv1.AddJournalResponse{Members: members}, err
}

func (j *Journal) isVoter(id string) bool {
	f := j.raft.GetConfiguration()
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

// probeJournal checks that a journal answers at addr, the Raft address it
// is to be added with, and presents a certificate of this domain for id:
// a mistyped address or id is refused before it becomes a member.
func (j *Journal) probeJournal(ctx context.Context, id, addr string) error {
	var got string
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return j.ca.ServerCertificate(), nil
		},
		InsecureSkipVerify: true, // identified by SPIFFE ID below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if err := j.verifyJournalPeer(raw, nil); err != nil {
				return err
			}
			leaf, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			pid, err := pki.IdentityOf(leaf)
			if err != nil {
				return err
			}
			got = pid.Name
			return nil
		},
		Time: j.cfg.Clock.Now,
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: journal %s does not answer at Raft address %s as a journal of domain %s (%v); start it first with --node-id %s --join --raft-listen %s and this domain's root, then re-run the add", errMembership, id, addr, j.ca.Domain(), err, id, addr)
	}
	_ = c.Close()
	if got != id {
		return fmt.Errorf("%w: the journal at %s is %s, not %s; check the id and the address (pact journal add ID RAFT_ADDR)", errMembership, addr, got, id)
	}
	return nil
}

func (s *adminServer) RemoveJournal(ctx context.Context, req *pactv1.RemoveJournalRequest) (*pactv1.RemoveJournalResponse, error) {
	j := s.j
	id := req.GetJournalId()
	if j.raft.State() != raft.Leader {
		return nil, j.notLeader()
	}
	members, err := j.members(ctx)
	if err != nil {
		return nil, err
	}
	var target *pactv1.JournalMember
	for _, m := range members {
		if m.GetJournalId() == id {
			target = m
		}
	}
	if target == nil {
		return nil, fmt.Errorf("%w: no journal %q in the quorum; see pact journal status", ErrNotFound, id)
	}
	voters, reachable, down := quorumArithmetic(members)
	if target.GetVoter() {
		voters--
		if target.GetReachable() {
			reachable--
		} else {
			down = slices.DeleteFunc(down, func(d string) bool { return d == id })
		}
		if voters == 0 {
			return nil, fmt.Errorf("%w: %s is the last voter; a quorum needs at least one", errMembership, id)
		}
		if need := majority(voters); reachable < need {
			if !req.GetForce() {
				return nil, fmt.Errorf("%w: without %s the quorum would have %d voters, and %d of them must be up to elect a leader; only %d of them answer now (%s). Removing %s now would leave the quorum unable to elect a leader: bring the unreachable journals back first; --force removes anyway, and then no write or enrollment is accepted until %d of the remaining voters are up", errMembership, id, voters, need, reachable, downList(down), id, need)
			}
			j.log.Warn("removing a journal although the remaining reachable voters are not a majority (--force)", logkey.Journal, id, logkey.VotersAfter, voters, logkey.ReachableAfter, reachable)
		}
	}
	if req.GetGraceSeconds() < 0 || (req.GetGraceSeconds() > 0 && !req.GetRevokeIntermediate()) {
		return nil, fmt.Errorf("%w: --grace goes with --revoke-intermediate and must be positive", ErrInvalidArgument)
	}
	resp := &pactv1.RemoveJournalResponse{}
	if req.GetRevokeIntermediate() {
		// Retire first: should the removal fail, the intermediates are on
		// their way out anyway, and the leader may be removing itself (it
		// could not commit anything afterwards).
		if serials := j.intermediatesOf(id); len(serials) > 0 {
			retired, err := j.retire(ctx, serials, req.GetGraceSeconds(), false, "journal "+id+" removed")
			if err != nil {
				return nil, err
			}
			resp.Retired = retired
		}
	}
	if err := j.raft.RemoveServer(raft.ServerID(id), 0, j.cfg.ApplyTimeout).Error(); err != nil {
		return nil, membershipError("remove "+id, err)
	}
	j.log.Info("journal removed from the quorum", logkey.Journal, id, logkey.Actor, principalFrom(ctx).ID.Name, logkey.Forced, req.GetForce(), logkey.IntermediatesRetired, len(resp.Retired))
	members, err = j.members(ctx)
	resp.Members = members
	return resp, err
}

// ---------------------------------------------------------------------------
// Promotion of caught-up non-voters (leader only).

func (j *Journal) nudgePromote() {
	select {
	case j.promoteNow <- struct{}{}:
	default:
	}
}

// promoteLoop runs on every journal; while it leads, it promotes each
// non-voter whose registry has caught up with the leader's commit index.
func (j *Journal) promoteLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
		case <-j.promoteNow:
		}
		if j.raft.State() == raft.Leader && j.haltedReason() == "" {
			j.promoteCaughtUp()
		}
	}
}

func (j *Journal) promoteCaughtUp() {
	f := j.raft.GetConfiguration()
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
	commit := j.raft.CommitIndex()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	members, err := j.members(ctx)
	if err != nil {
		return
	}
	voters, reachable, _ := quorumArithmetic(members)
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
		if reachable+1 < majority(voters+1) {
			j.log.Warn("a caught-up non-voter is not promoted: with it the reachable voters would not be a majority", logkey.Journal, srv.ID)
			continue
		}
		if err := j.raft.AddVoter(srv.ID, srv.Address, f.Index(), j.cfg.ApplyTimeout).Error(); err != nil {
			j.log.Warn("promoting a caught-up non-voter failed; retrying", logkey.Journal, srv.ID, logkey.Err, err)
			return
		}
		j.log.Info("journal caught up and promoted to voter", logkey.Journal, srv.ID, logkey.Applied, m.GetAppliedIndex())
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
func (j *Journal) removalLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	wasMember := false
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
		}
		f := j.raft.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		servers := f.Configuration().Servers
		in := slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == j.cfg.NodeID })
		// A journal with Raft state (log or snapshot) got it as a member;
		// an empty joining one is not a member yet.
		if in || j.raft.LastIndex() > 0 {
			wasMember = true
		}
		if !wasMember {
			continue // a joining journal, not added yet
		}
		by := ""
		if !in && len(servers) > 0 {
			by = "its own copy of the configuration"
		} else if _, leader := j.raft.LeaderWithID(); leader == "" || j.raft.State() == raft.Candidate {
			by = j.removedPerPeers(servers)
		}
		if by != "" {
			j.markRemoved(by)
			return
		}
	}
}

// removedPerPeers asks the other journals this one knows whether it is
// still in their configuration; it returns who said it is not, or "".
//
// Only the journals of its own configuration are asked: they are the
// quorum it belonged to (the registry may name journals of another quorum,
// after a restore).
func (j *Journal) removedPerPeers(servers []raft.Server) string {
	for _, ji := range j.knownJournals() {
		ours := slices.ContainsFunc(servers, func(s raft.Server) bool {
			return string(s.ID) == ji.GetJournalId() && string(s.Address) == ji.GetRaftAddr()
		})
		if !ours || ji.GetJournalId() == j.cfg.NodeID || ji.GetGrpcAddr() == "" {
			continue
		}
		c, err := j.peers.get(ji.GetGrpcAddr())
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.MemberStatus(ctx, &pactv1.MemberStatusRequest{})
		cancel()
		if err != nil || st.GetJournalId() != ji.GetJournalId() || st.GetLeaderId() == "" || len(st.GetVoters())+len(st.GetNonvoters()) == 0 {
			continue
		}
		if !slices.Contains(st.GetVoters(), j.cfg.NodeID) && !slices.Contains(st.GetNonvoters(), j.cfg.NodeID) {
			return "journal " + ji.GetJournalId() + ", whose leader is " + st.GetLeaderId()
		}
	}
	return ""
}

func (j *Journal) markRemoved(by string) {
	reason := "removed from the quorum (according to " + by + ")"
	j.halt(reason)
	j.log.Error("THIS JOURNAL WAS REMOVED FROM THE QUORUM ("+by+"): it stops serving and exits. To bring it back: stop it, empty its --data-dir, start it with --join and run pact journal add "+j.cfg.NodeID+" RAFT_ADDR (docs/quorum.md)",
		logkey.DataDir, j.cfg.DataDir)
	msg := fmt.Sprintf("journal %s was removed from the quorum (according to %s) at %s.\nIt must not serve from this directory again: to bring it back, empty this directory,\nstart pact-journal with --join and run: pact journal add %s RAFT_ADDR\n",
		j.cfg.NodeID, by, j.cfg.Clock.Now().UTC().Format(time.RFC3339), j.cfg.NodeID)
	if err := os.WriteFile(filepath.Join(j.cfg.DataDir, RemovedMarker), []byte(msg), 0o600); err != nil {
		j.log.Error("cannot write the removed marker", logkey.Err, err)
	}
	j.halted.once.Do(func() { close(j.halted.removed) })
}

// checkRemovedMarker refuses to start from a data directory whose journal
// was removed from its quorum.
func checkRemovedMarker(dataDir string) error {
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
func (j *Journal) knownJournals() []*pactv1.JournalInfo {
	known := map[string]*pactv1.JournalInfo{}
	for _, ji := range j.fsm.Journals() {
		known[ji.GetJournalId()] = ji
	}
	first, err1 := j.store.FirstIndex()
	last, err2 := j.store.LastIndex()
	if err1 == nil && err2 == nil && first > 0 {
		// Bounded: the log holds at most a snapshot threshold and the
		// trailing entries.
		first = max(first, last-min(last, 50000))
		for i := first; i <= last; i++ {
			var l raft.Log
			if j.logs.GetLog(i, &l) != nil || l.Type != raft.LogCommand {
				continue
			}
			cmd, err := raftfsm.Decode(l.Data)
			if err != nil {
				continue
			}
			if ji := cmd.GetPublishIntermediate().GetJournal(); ji.GetJournalId() != "" {
				known[ji.GetJournalId()] = ji // the newest entry wins
			}
		}
	}
	out := make([]*pactv1.JournalInfo, 0, len(known))
	for _, ji := range known {
		out = append(out, ji)
	}
	return out
}
