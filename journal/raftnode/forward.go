package raftnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/version"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// forwardTimeout bounds a call to the leader, so a journal cut off from it
// answers Unavailable quickly instead of hanging.
const forwardTimeout = 3 * time.Second

// appliedWait bounds how long a journal waits to apply an entry the
// leader has committed (waitApplied) before it gives up on showing it.
const appliedWait = 2 * time.Second

// peerMaxBackoff bounds the wait between reconnection attempts to another
// journal, and so how long after a heal a journal still cannot reach it.
const peerMaxBackoff = time.Second

// raftTransport is the injected transport (tests), an in-memory one for a
// journal alone, or Raft over mutual TLS for a member of a quorum.
func (n *Node) raftTransport() (raft.ServerAddress, raft.Transport, error) {
	if n.cfg.Transport != nil {
		n.raftAddr = string(n.cfg.Transport.LocalAddr())
		return n.cfg.Transport.LocalAddr(), n.cfg.Transport, nil
	}
	if n.cfg.RaftListen == "" {
		addr, t := raft.NewInmemTransport(raft.ServerAddress(n.cfg.NodeID))
		return addr, t, nil
	}
	lis, err := net.Listen("tcp", n.cfg.RaftListen)
	if err != nil {
		return "", nil, fmt.Errorf("journal: raft listen on %s: %w", n.cfg.RaftListen, err)
	}
	n.raftAddr = n.cfg.AdvertiseRaft
	if n.raftAddr == "" {
		n.raftAddr = lis.Addr().String()
	}
	t := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  &advertisedStream{tlsStreamLayer: n.newStreamLayer(n.cfg.Conns.Listener(lis)), addr: n.raftAddr},
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  newRaftLogger(n.log),
	})
	n.netTrans = t
	return raft.ServerAddress(n.raftAddr), t, nil
}

// advertisedStream reports the advertised address as the listener's, which
// is what Raft tells its peers.
type advertisedStream struct {
	*tlsStreamLayer
	addr string
}

func (s *advertisedStream) Addr() net.Addr { return stringAddr(s.addr) }

type stringAddr string

func (a stringAddr) Network() string { return "tcp" }
func (a stringAddr) String() string  { return string(a) }

// peerConns caches gRPC channels to the other journals, authenticated with
// this journal's certificate.
type peerConns struct {
	n     *Node
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newPeerConns(n *Node) *peerConns {
	return &peerConns{n: n, conns: map[string]*grpc.ClientConn{}}
}

func (p *peerConns) get(addr string) (pactv1.JournalPeerServiceClient, error) {
	c, err := p.conn(addr)
	if err != nil {
		return nil, err
	}
	return pactv1.NewJournalPeerServiceClient(c), nil
}

func (p *peerConns) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	tlsCfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return p.n.cfg.Credentials.ServerCertificate(), nil
		},
		// Identified by SPIFFE ID (a journal of this domain), not host name.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: p.n.verifyJournalPeer,
		Time:                  p.n.cfg.Clock.Now,
	}
	c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		// Every peer call proves this journal's quorum.
		grpc.WithUnaryInterceptor(p.n.withQuorumID),
		// gRPC's default backoff grows to two minutes: a journal cut off
		// from the leader for a while would keep answering NO_LEADER that
		// long after the heal. Peers are few; retry them often.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: peerMaxBackoff},
			MinConnectTimeout: forwardTimeout,
		}))
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

// ready waits briefly for the channel to addr to be connected, so a
// failure before that point is known to have sent nothing.
func (p *peerConns) ready(ctx context.Context, addr string, wait time.Duration) (*grpc.ClientConn, bool) {
	c, err := p.conn(addr)
	if err != nil {
		return nil, false
	}
	c.Connect()
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		st := c.GetState()
		if st == connectivity.Ready {
			return c, true
		}
		if !c.WaitForStateChange(wctx, st) {
			return c, false
		}
	}
}

func (p *peerConns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[string]*grpc.ClientConn{}
}

// leaderAddr returns the current leader's id and gRPC address.
func (n *Node) leaderAddr() (string, string, error) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return "", "", fmt.Errorf("%w: this journal knows no leader (is a majority of the quorum reachable?)", ErrNoLeader)
	}
	ji, ok := n.fsm.Journal(string(id))
	if !ok || ji.GetGrpcAddr() == "" {
		return "", "", fmt.Errorf("%w: the address of leader %s is not known yet", ErrNoLeader, id)
	}
	return string(id), ji.GetGrpcAddr(), nil
}

// leaderClient returns a channel to the current leader.
func (n *Node) leaderClient() (pactv1.JournalPeerServiceClient, string, error) {
	id, addr, err := n.leaderAddr()
	if err != nil {
		return nil, "", err
	}
	c, err := n.peers.get(addr)
	return c, id, err
}

// forward sends an encoded command to the leader and waits until this
// journal has applied it too, so a read that follows sees it.
func (n *Node) forward(ctx context.Context, data []byte) (*raftfsm.Result, error) {
	leader, addr, err := n.leaderAddr()
	if err != nil {
		return nil, err
	}
	// Only a failure before the request could leave is "not written"; so
	// wait for a connected channel first, and treat any transport failure
	// after that as an unknown outcome.
	conn, ok := n.peers.ready(ctx, addr, time.Second)
	if !ok {
		return nil, fmt.Errorf("%w: cannot connect to leader %s at %s", ErrNoLeader, leader, addr)
	}
	fctx, cancel := context.WithTimeout(ctx, min(forwardTimeout, n.cfg.ApplyTimeout))
	defer cancel()
	resp, err := pactv1.NewJournalPeerServiceClient(conn).Propose(fctx, &pactv1.ProposeRequest{Command: data})
	if err != nil {
		pe := apierr.FromError(err)
		switch {
		case pe.Reason == apierr.NoLeader:
			// A leader that stepped down refuses before taking the entry.
			return nil, fmt.Errorf("%w: %s", ErrNoLeader, pe.Message)
		case pe.Reason == apierr.OutcomeUnknown:
			return nil, fmt.Errorf("%w: %s", ErrOutcomeUnknown, pe.Message)
		case pe.Code == codes.PermissionDenied || pe.Code == codes.Unauthenticated:
			// The leader refused this journal as a peer (removed, another
			// quorum): nothing was written, and the caller's answer is
			// elsewhere, not a refusal of its own.
			return nil, fmt.Errorf("%w: leader %s refuses this journal as a peer: %s; try another journal", ErrNoLeader, leader, pe.Message)
		case pe.Reason != "":
			// Any other answer of the leader stands as it is.
			return nil, err
		case pe.Code == codes.Unavailable, pe.Code == codes.DeadlineExceeded, pe.Code == codes.Canceled:
			// The request may have reached the leader and committed.
			return nil, fmt.Errorf("%w: forwarded to leader %s, no answer: %s", ErrOutcomeUnknown, leader, pe.Message)
		}
		return nil, fmt.Errorf("journal: forwarding to leader %s: %w", leader, err)
	}
	res := resultOf(resp)
	for _, r := range resp.GetBatch() {
		res.Batch = append(res.Batch, resultOf(r))
	}
	if !n.waitApplied(ctx, resp.GetIndex()) {
		// Committed, but this journal cannot show it yet: answering now
		// would break propose's promise that the caller sees the new state.
		return nil, fmt.Errorf("%w: leader %s committed the write (Raft index %d), but this journal (%s) lags the leader and has not applied it yet, so it cannot show the result; check with a read before retrying", ErrOutcomeUnknown, leader, resp.GetIndex(), n.cfg.NodeID)
	}
	return res, res.Err
}

// resultOf reads the leader's answer to one command.
func resultOf(resp *pactv1.ProposeResponse) *raftfsm.Result {
	res := &raftfsm.Result{Node: resp.GetNode(), Idempotent: resp.GetIdempotent()}
	if code := resp.GetErrorCode(); code != "" {
		res.Err = raftfsm.ErrorFromCode(code, resp.GetErrorMessage())
		if res.Err == nil {
			res.Err = fmt.Errorf("journal: leader answered unknown error %s: %s", code, resp.GetErrorMessage())
		}
	}
	return res
}

// proposeResponse is the answer to a forwarded command applied at index.
func proposeResponse(index uint64, res *raftfsm.Result) *pactv1.ProposeResponse {
	out := &pactv1.ProposeResponse{Index: index, Node: res.Node, Idempotent: res.Idempotent}
	if res.Err != nil {
		out.ErrorCode = raftfsm.ErrorCode(res.Err)
		out.ErrorMessage = res.Err.Error()
	}
	for _, r := range res.Batch {
		out.Batch = append(out.Batch, proposeResponse(index, r))
	}
	return out
}

// waitApplied waits (bounded by appliedWait and ctx) until this journal's
// FSM reflects index, and reports whether it does. The FSM wakes it on
// every entry it applies; entries Raft applies without the FSM (no-ops,
// barriers) are caught by a short poll.
func (n *Node) waitApplied(ctx context.Context, index uint64) bool {
	if n.applied(index) {
		return true
	}
	wait := appliedWait
	if d := n.hooks.ApplyWait.Load(); d > 0 {
		wait = time.Duration(d)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for {
		woken := n.appliedSignal.wait()
		if n.applied(index) {
			return true
		}
		select {
		case <-woken:
		case <-poll.C:
		case <-deadline.C:
			return n.applied(index)
		case <-ctx.Done():
			return n.applied(index)
		}
	}
}

// applied reports whether the FSM reflects every entry through index.
// Raft hands entries to the FSM asynchronously and never hands it no-op or
// barrier entries, so the FSM's own index can stay below the commit index:
// the FSM is current once Raft has dispatched through index and the FSM
// has applied the last command among them (or they lie in a snapshot it
// restored).
func (n *Node) applied(index uint64) bool {
	if n.raft.AppliedIndex() < index {
		return false
	}
	fsmIndex := n.fsm.AppliedIndex()
	for i := index; i > fsmIndex; i-- {
		var l raft.Log
		if err := n.logs.GetLog(i, &l); err != nil {
			return true // compacted into a snapshot the FSM has restored
		}
		if l.Type == raft.LogCommand {
			// Entries up to a restored snapshot are in the FSM although
			// its own index restarted from zero.
			return i <= n.restoredThrough()
		}
	}
	return true
}

// restoredThrough is the index of the newest snapshot the FSM may have
// restored. Raft's Stats goes through its main loop, so it is asked only
// after the FSM has restored a snapshot it has not asked about yet.
func (n *Node) restoredThrough() uint64 {
	n.snapMu.Lock()
	defer n.snapMu.Unlock()
	if r := n.fsm.Restores(); r != n.snapRestores {
		if idx, err := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64); err == nil {
			n.snapIndex, n.snapRestores = idx, r
		}
	}
	return n.snapIndex
}

// ReadBarrier makes the next local read reflect every write committed
// before it started (the Raft read-index protocol). It is the one way a
// journal confirms its copy with the leader; the index comes from
// leaderReads, here or at the leader through ReadIndex. It fails with
// ErrNoLeader (retryable) when the leader cannot vouch for the state.
func (n *Node) ReadBarrier(ctx context.Context) error {
	var idx uint64
	if n.raft.State() == raft.Leader {
		var err error
		if idx, err = n.reads.readIndex(ctx); err != nil {
			return err
		}
	} else {
		c, leader, err := n.leaderClient()
		if err != nil {
			return err
		}
		fctx, cancel := context.WithTimeout(ctx, forwardTimeout)
		defer cancel()
		// Wait for the channel (it may be reconnecting after a heal) within
		// the bound rather than fail at once.
		resp, err := c.ReadIndex(fctx, &pactv1.ReadIndexRequest{}, grpc.WaitForReady(true))
		if err != nil {
			return fmt.Errorf("%w: read index from leader %s: %s", ErrNoLeader, leader, apierr.FromError(err).Message)
		}
		idx = resp.GetCommitIndex()
	}
	if !n.waitApplied(ctx, idx) {
		return fmt.Errorf("%w: this journal is behind the leader", ErrNoLeader)
	}
	return nil
}

// ReadIndex is this leader's read index, for a follower's ReadBarrier
// (leaderReads: only once it has committed an entry of its term).
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	return n.reads.readIndex(ctx)
}

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
