package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/version"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// MemberStatus is this journal's own view of the quorum, as it answers a
// peer's status call.
func (n *Node) MemberStatus() *pactv1.MemberStatusResponse {
	lc := n.raft.LastContact()
	if n.raft.State() == raft.Leader {
		lc = n.cfg.Clock.Now()
	}
	var lcNano int64
	if !lc.IsZero() {
		lcNano = lc.UnixNano()
	}
	var voters, nonvoters []string
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			if srv.Suffrage == raft.Voter {
				voters = append(voters, string(srv.ID))
			} else {
				nonvoters = append(nonvoters, string(srv.ID))
			}
		}
	}
	_, leader := n.raft.LeaderWithID()
	st := &pactv1.MemberStatusResponse{
		Halted:              n.haltedReason(),
		Voters:              voters,
		Nonvoters:           nonvoters,
		LeaderId:            string(leader),
		JournalId:           n.cfg.NodeID,
		RaftState:           n.raft.State().String(),
		Term:                n.raft.CurrentTerm(),
		CommitIndex:         n.raft.CommitIndex(),
		AppliedIndex:        n.raft.AppliedIndex(),
		LastContactUnixNano: lcNano,
		Version:             version.Get().String(),
		QuorumId:            n.quorum.get(),
		FeatureLevel:        raftfsm.FeatureLevel,
		Release:             release(),
		QuorumFeatureLevel:  n.QuorumLevel(),
	}
	if n.cfg.DescribeSelf != nil {
		n.cfg.DescribeSelf(st)
	}
	return st
}

// Members asks every journal of the Raft configuration for its own view,
// in parallel and briefly; an unreachable one is reported as such.
func (n *Node) Members(ctx context.Context) ([]*pactv1.JournalMember, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("journal: raft configuration: %w", err)
	}
	_, leader := n.raft.LeaderWithID()
	servers := f.Configuration().Servers
	out := make([]*pactv1.JournalMember, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		m := &pactv1.JournalMember{JournalId: string(srv.ID), RaftAddr: string(srv.Address), Voter: srv.Suffrage == raft.Voter, Leader: srv.ID == leader}
		if ji, ok := n.fsm.Journal(string(srv.ID)); ok {
			m.GrpcAddr = ji.GetGrpcAddr()
		}
		out[i] = m
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st *pactv1.MemberStatusResponse
			var err error
			switch {
			case string(srv.ID) == n.cfg.NodeID:
				st = n.MemberStatus()
			case m.GetGrpcAddr() == "":
				err = errors.New("its address is not published yet")
			default:
				var c pactv1.JournalPeerServiceClient
				if c, err = n.peers.get(m.GetGrpcAddr()); err == nil {
					cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					st, err = c.MemberStatus(cctx, &pactv1.MemberStatusRequest{})
					cancel()
				}
			}
			if err != nil {
				m.Error = status.Convert(err).Message()
				return
			}
			m.Reachable = true
			m.RaftState, m.Term, m.CommitIndex, m.AppliedIndex = st.GetRaftState(), st.GetTerm(), st.GetCommitIndex(), st.GetAppliedIndex()
			m.LastContactUnixNano = st.GetLastContactUnixNano()
			m.IntermediateSerial, m.IntermediateNotAfterUnix = st.GetIntermediateSerial(), st.GetIntermediateNotAfterUnix()
			m.Version, m.Halted = st.GetVersion(), st.GetHalted()
			m.QuorumId = st.GetQuorumId()
			m.JournalCaSerial, m.JournalCaFileRefused = st.GetJournalCaSerial(), st.GetJournalCaFileRefused()
			m.FeatureLevel, m.Release = st.GetFeatureLevel(), st.GetRelease()
			if c := n.raft.CommitIndex(); c > m.AppliedIndex {
				m.Lag = c - m.AppliedIndex
			}
		}()
	}
	wg.Wait()
	n.trackNonvoters(out)
	sort.Slice(out, func(a, b int) bool { return out[a].GetJournalId() < out[b].GetJournalId() })
	return out, nil
}

// trackNonvoters stamps each non-voter with when this journal first saw
// it as one, and forgets those no longer non-voters.
func (n *Node) trackNonvoters(ms []*pactv1.JournalMember) {
	n.nonvoterMu.Lock()
	defer n.nonvoterMu.Unlock()
	now := n.cfg.Clock.Now()
	seen := map[string]bool{}
	for _, m := range ms {
		if m.GetVoter() {
			continue
		}
		seen[m.GetJournalId()] = true
		since, ok := n.nonvoterSince[m.GetJournalId()]
		if !ok {
			since = now
			n.nonvoterSince[m.GetJournalId()] = now
		}
		m.NonvoterSinceUnixNano = since.UnixNano()
	}
	for id := range n.nonvoterSince {
		if !seen[id] {
			delete(n.nonvoterSince, id)
		}
	}
}
