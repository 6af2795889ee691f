package journal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/raftnode"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// A journal stops serving when its Raft node halts (raftnode: removed
// from the quorum, a log entry it may not skip, or, leading, a Raft store
// write stuck until it finishes); errHalted answers every call but the
// status ones then, as Unavailable so clients move to another journal.
var (
	errHalted = errors.New("journal: halted")
	// ErrRemoved: this journal was removed from the quorum's configuration.
	ErrRemoved = raftnode.ErrRemoved
	// ErrNoCluster: --raft-listen without --initial-cluster or --join.
	ErrNoCluster = raftnode.ErrNoCluster
	// errMembership: a membership change refused for a reason other than
	// leadership.
	errMembership = raftnode.ErrMembership
)

// RemovedMarker is the file a journal writes into its data directory when
// it finds itself removed, so a restart refuses instead of serving stale
// reads.
const RemovedMarker = raftnode.RemovedMarker

// Removed is closed once this journal found itself removed from the
// quorum; pact-journal then exits with its own code.
func (j *Journal) Removed() <-chan struct{} { return j.raft.Removed() }

// Halted is why this journal stopped serving, or "" while it serves.
func (j *Journal) Halted() string { return j.raft.Halted() }

// serving refuses a call while the journal is halted. The status calls
// still answer, so pact journal status can say why.
func (j *Journal) serving(method string) error {
	r := j.raft.Halted()
	if r == "" {
		return nil
	}
	switch method {
	case pactv1.AdminService_JournalStatus_FullMethodName, pactv1.JournalPeerService_MemberStatus_FullMethodName:
		return nil
	}
	return fmt.Errorf("%w: journal %s does not serve: %s", errHalted, j.cfg.NodeID, r)
}

// ---------------------------------------------------------------------------
// Adding and removing journals (pact journal add, remove): checked here,
// carried out by the Raft node.

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
	if !j.raft.IsLeader() {
		return nil, j.raft.NotLeaderError()
	}
	servers, _, err := j.raft.Servers()
	if err != nil {
		return nil, err
	}
	for _, srv := range servers {
		switch {
		case string(srv.ID) == id && string(srv.Address) != addr:
			return nil, fmt.Errorf("%w: journal %s is already a member at %s; remove it first to move it", errMembership, id, srv.Address)
		case string(srv.ID) != id && string(srv.Address) == addr:
			return nil, fmt.Errorf("%w: raft address %s belongs to journal %s", errMembership, addr, srv.ID)
		case string(srv.ID) == id:
			// Already a member: re-running add is safe; a non-voter is
			// promoted by the leader once caught up.
			members, err := j.raft.Members(ctx)
			return &pactv1.AddJournalResponse{Members: members}, err
		}
	}
	if err := j.removals.awaitQuiet(ctx, id, addr, time.Now()); err != nil {
		return nil, err
	}
	// Probed, and bound to the journal CA it presents, before it is a
	// member: from here on only a chain through that journal CA is id.
	bound, err := j.bindJoiningJournal(ctx, id, addr, req.GetExpectJournalCaDer())
	if err != nil {
		return nil, err
	}
	members, err := j.raft.Members(ctx)
	if err != nil {
		return nil, err
	}
	voters, reachable, down := raftnode.QuorumArithmetic(members)
	if need := raftnode.Majority(voters + 1); reachable+1 < need {
		if !req.GetForce() {
			return nil, fmt.Errorf("%w: with %s the quorum would have %d voters, and %d of them must be up to elect a leader; %d of the %d voters answer now (%s), so with %s there would be %d: one more failure or restart and the quorum could not elect a leader. Bring the unreachable journals back, or remove the dead ones first (pact journal remove ID); --force adds anyway, and then the quorum stops accepting writes whenever fewer than %d journals are up", errMembership, id, voters+1, need, reachable, voters, downList(down), id, reachable+1, need)
		}
		j.log.Warn("adding a journal although the reachable voters are not a safe majority (--force)", logkey.Journal, id, logkey.VotersAfter, voters+1, logkey.ReachableAfter, reachable+1)
	}
	// A non-voter first: it copies the registry without counting towards
	// the majority, so a slow or wrong new journal cannot stall commits.
	// The leader's promote loop makes it a voter once it has caught up.
	if err := j.raft.AddNonvoter(id, addr); err != nil {
		return nil, err
	}
	j.log.Info("journal added to the quorum as a non-voter; it becomes a voter once caught up", logkey.Journal, id, logkey.RaftAddr, addr, logkey.Actor, principalFrom(ctx).ID.Name, logkey.Forced, req.GetForce())
	// Wait briefly for the promotion, so a small registry is answered
	// with the new voter in place.
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for wait.Err() == nil && !j.raft.IsVoter(id) {
		select {
		case <-wait.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	members, err = j.raft.Members(ctx)
	resp := &pactv1.AddJournalResponse{Members: members}
	if bound != nil {
		resp.JournalCa = journalCAView(bound)
	}
	return resp, err
}

func (s *adminServer) RemoveJournal(ctx context.Context, req *pactv1.RemoveJournalRequest) (*pactv1.RemoveJournalResponse, error) {
	j := s.j
	id := req.GetJournalId()
	if !j.raft.IsLeader() {
		return nil, j.raft.NotLeaderError()
	}
	if jc := j.revokedJournalCA(); id == j.cfg.NodeID && jc != nil {
		// The journal to take out leads, but its journal CA was revoked:
		// the other journals drop its Raft connections, so it could not
		// commit its own removal (the change would end as OUTCOME_UNKNOWN)
		// and it loses the leadership within seconds. The leader they
		// elect removes it (UNAVAILABLE: the CLI moves on).
		return nil, fmt.Errorf("%w: journal %s leads, but its journal CA %s was revoked: the other journals no longer take it as a peer, so it cannot commit its own removal, and it steps down within seconds. Run the remove again against the other journals once they have elected a leader (pact journal status)", ErrNoLeader, id, jc.GetSerial())
	}
	members, err := j.raft.Members(ctx)
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
	voters, reachable, down := raftnode.QuorumArithmetic(members)
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
		if need := raftnode.Majority(voters); reachable < need && id == j.cfg.NodeID {
			// This journal removes itself, and the others may not answer
			// because they refuse it as a peer (its intermediate withdrawn,
			// its journal id bound to another journal CA): then they drop
			// its Raft connections too, it could not commit the change, and
			// it loses the leadership within seconds. The leader they elect
			// removes it.
			if refusing := j.raft.RefusingVoters(ctx, members); len(refusing) > 0 {
				return nil, fmt.Errorf("%w: journal %s leads, but %s refuse it as a peer: it cannot commit its own removal, and it steps down within seconds. Run the remove again against the other journals once they have elected a leader (pact journal status)", ErrNoLeader, id, strings.Join(refusing, ", "))
			}
		}
		if need := raftnode.Majority(voters); reachable < need {
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
			// The caller's own credential from the journal removed would
			// be cut off at the end of the grace, with its journal gone:
			// refused unless the request says so (owncredential.go).
			p := principalFrom(ctx)
			cut := func(in *pactv1.Intermediate) bool {
				return in.GetJournalId() == id && slices.Contains(serials, in.GetSerial())
			}
			own := j.callerIntermediate(p)
			if own != nil && !cut(own) {
				own = nil
			}
			if own != nil && !req.GetRevokeOwnCredential() && !raftfsm.IntermediateRevoked(own, j.cfg.Clock.Now().UnixNano()) {
				return nil, j.ownCredentialRefusal(p, own, "this removal retires with the journal's other intermediates (revoked at the end of the grace)", cut)
			}
			retired, _, err := j.retire(ctx, serials, req.GetGraceSeconds(), false, "journal "+id+" removed")
			if err != nil {
				return nil, err
			}
			resp.Retired = retired
			resp.OwnCredential = j.ownCredentialAfter(p, own)
		}
	}
	if err := j.raft.RemoveServer(id); err != nil {
		return nil, err
	}
	j.removals.noteRemoved(id, target.GetRaftAddr(), time.Now())
	j.log.Info("journal removed from the quorum", logkey.Journal, id, logkey.Actor, principalFrom(ctx).ID.Name, logkey.Forced, req.GetForce(), logkey.IntermediatesRetired, len(resp.Retired))
	members, err = j.raft.Members(ctx)
	resp.Members = members
	return resp, err
}

// staleReplicationQuiet is how long after this leader removed a journal it
// waits before adding a journal of the same id at the same Raft address
// again. hashicorp/raft's replication to the removed journal does not
// watch its stop signal while it backs off from failures (10 ms doubling
// to 10.24 s) and makes one last attempt with its old position after it:
// sent to a new journal at that address, that stale attempt installs an
// old snapshot (one whose configuration predates the new journal) or
// entries the new journal cannot place. A leader elected since the removal
// never replicated to the old journal, and a journal at another address is
// out of the stale attempt's reach. It is timed by the wall clock, not the
// domain's: hashicorp/raft's backoff is.
const staleReplicationQuiet = 12 * time.Second

// removals remembers when this leader removed each journal, and from
// which Raft address.
type removals struct {
	mu sync.Mutex
	at map[string]removal
}

type removal struct {
	addr string
	at   time.Time
}

func (r *removals) noteRemoved(id, addr string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[string]removal{}
	}
	for k, rm := range r.at {
		if now.Sub(rm.at) > staleReplicationQuiet {
			delete(r.at, k)
		}
	}
	r.at[id] = removal{addr: addr, at: now}
}

// awaitQuiet waits until journal id's removal from addr by this leader is
// staleReplicationQuiet old, or refuses if ctx ends first.
func (r *removals) awaitQuiet(ctx context.Context, id, addr string, now time.Time) error {
	r.mu.Lock()
	rm, ok := r.at[id]
	r.mu.Unlock()
	if !ok || rm.addr != addr {
		return nil
	}
	wait := staleReplicationQuiet - now.Sub(rm.at)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: journal %s was removed from %s %s ago, and the leader's replication to the journal it was may still make one last attempt there for %s: add it again after that (it is safe to re-run)", errMembership, id, addr, now.Sub(rm.at).Round(time.Second), wait.Round(time.Second))
	}
}
