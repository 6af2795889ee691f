package raftnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/tlsalert"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Channels to the other journals' peer service (forwarding, read index,
// member status), and which of them leads.

// peerMaxBackoff bounds the wait between reconnection attempts to another
// journal, and so how long after a heal a journal still cannot reach it.
const peerMaxBackoff = time.Second

// peerConns caches gRPC channels to the other journals, authenticated with
// this journal's certificate.
type peerConns struct {
	n     *Node
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	// creds are the credentials of conns' channels, by address: they
	// know the TLS alert a peer refused this journal with (explain).
	creds map[string]*tlsalert.Credentials
	// retired are channels of a previous certificate, closed once the
	// calls in flight on them are over (reset), or at close.
	retired []*grpc.ClientConn
}

func newPeerConns(n *Node) *peerConns {
	return &peerConns{n: n, conns: map[string]*grpc.ClientConn{}, creds: map[string]*tlsalert.Credentials{}}
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
	creds := tlsalert.NewCredentials(credentials.NewTLS(tlsCfg))
	c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds),
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
	p.conns[addr], p.creds[addr] = c, creds
	return c, nil
}

// explain returns the error of a call to addr with the TLS alert the peer
// refused this journal with, if it did, attached for tlsalert.Received
// (tlsalert.Credentials.Explain); its text and status are the call's.
func (p *peerConns) explain(addr string, err error) error {
	p.mu.Lock()
	creds := p.creds[addr]
	p.mu.Unlock()
	if creds == nil {
		return err
	}
	return creds.Explain(err)
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

// CredentialsChanged is told that this journal re-keyed: the channels to
// the other journals authenticated with the certificate of the previous
// intermediate, which an operator may have retired (and which is revoked
// at the end of its grace). They are closed, so every later peer call
// opens a channel with the current certificate: a channel kept open would
// be refused on every call once that intermediate is revoked, and never
// reconnect, since the refusal is the call's, not the connection's.
// Calls in flight on the old channels finish first: those are closed a
// forward's time later.
func (n *Node) CredentialsChanged() { n.peers.reset() }

func (p *peerConns) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.conns) == 0 {
		return
	}
	old := p.conns
	p.conns, p.creds = map[string]*grpc.ClientConn{}, map[string]*tlsalert.Credentials{}
	for _, c := range old {
		p.retired = append(p.retired, c)
	}
	time.AfterFunc(2*forwardTimeout, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		closed := make(map[*grpc.ClientConn]bool, len(old))
		for _, c := range old {
			_ = c.Close()
			closed[c] = true
		}
		p.retired = slices.DeleteFunc(p.retired, func(c *grpc.ClientConn) bool { return closed[c] })
	})
}

func (p *peerConns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	for _, c := range p.retired {
		_ = c.Close()
	}
	p.conns, p.creds, p.retired = map[string]*grpc.ClientConn{}, map[string]*tlsalert.Credentials{}, nil
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
