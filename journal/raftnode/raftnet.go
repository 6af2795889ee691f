package raftnode

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/connlimit"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// tlsStreamLayer carries Raft between journals over mutual TLS. Both sides
// present their journal certificate (from their own intermediate, sent with
// it and its journal CA) and accept only a peer whose chain reaches a domain
// root and that names a journal of this domain: an agent, an operator or a
// foreign CA cannot speak Raft.
//
// Raft gives every connection it accepts a 256 KiB read buffer, so only
// authenticated connections reach it: the layer accepts on its own,
// authenticates each connection in a goroutine of its own (bounded by the
// connection limiter and the handshake timeout), and hands Raft the ones
// that pass.
type tlsStreamLayer struct {
	net.Listener
	n     *Node
	ready chan net.Conn
	done  chan struct{}
	once  sync.Once

	// conns are the Raft connections accepted, by the journal that
	// dialed them: closed the moment that journal leaves the
	// configuration (sweepRemoved).
	connMu sync.Mutex
	conns  map[*peerConn]struct{}
}

func (n *Node) newStreamLayer(lis net.Listener) *tlsStreamLayer {
	l := &tlsStreamLayer{Listener: lis, n: n, ready: make(chan net.Conn), done: make(chan struct{}), conns: map[*peerConn]struct{}{}}
	go l.acceptLoop()
	go l.sweepLoop()
	return l
}

// peerConn is an accepted Raft connection and the journal it proved.
type peerConn struct {
	*tls.Conn
	peer string
	l    *tlsStreamLayer
	once sync.Once
}

func (c *peerConn) Close() error {
	c.once.Do(func() {
		c.l.connMu.Lock()
		delete(c.l.conns, c)
		c.l.connMu.Unlock()
	})
	return c.Conn.Close()
}

func (l *tlsStreamLayer) track(tc *tls.Conn) net.Conn {
	c := &peerConn{Conn: tc, peer: peerJournalID(tc.ConnectionState()), l: l}
	l.connMu.Lock()
	l.conns[c] = struct{}{}
	l.connMu.Unlock()
	return c
}

// sweepLoop closes the Raft connections, accepted and dialed, of journals
// no longer in the configuration or whose certificate Raft's records no
// longer admit (PeerAuth.CheckPeer): removal, a revoked journal CA or
// intermediate, or a journal id bound to another journal CA end a
// journal's peer rights at once, on connections it opened before as on
// new ones.
func (l *tlsStreamLayer) sweepLoop() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
		}
		l.connMu.Lock()
		conns := make([]*peerConn, 0, len(l.conns))
		for c := range l.conns {
			conns = append(conns, c)
		}
		l.connMu.Unlock()
		for _, c := range conns {
			var why error
			if !l.n.isMember(c.peer) {
				why = refusal(refusedNotMember, "journal %s left the configuration; its Raft connection is closed", c.peer)
			} else if _, err := l.n.cfg.PeerAuth.CheckPeer(c.ConnectionState().PeerCertificates); err != nil {
				// Its journal CA or intermediate revoked, or its journal
				// id bound to another journal CA, since it connected.
				why = fmt.Errorf("journal %s's Raft connection is closed: %w", c.peer, err)
			}
			if why != nil {
				l.n.CountPeerRefusal("raft port", c.RemoteAddr().String(), why)
				_ = c.Close()
			}
		}
	}
}

func (l *tlsStreamLayer) serverConfig() *tls.Config { return l.n.raftServerTLS() }

func (l *tlsStreamLayer) clientConfig() *tls.Config { return l.n.raftClientTLS() }

func (n *Node) raftServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return n.cfg.Credentials.ServerCertificate(), nil
		},
		// verifyJournalPeerChain refuses a peer without a certificate (and
		// names the refusal: ErrPeerNoCertificate). Raft's records are
		// checked after the quorum hello (admitRaftConn): a probe is
		// answered to any journal of the domain.
		ClientAuth:            tls.RequestClientCert,
		VerifyPeerCertificate: n.verifyJournalPeerChain,
		// A dialer offering pact-raft/2 opens with a QuorumHello.
		NextProtos: []string{alpnRaft},
		Time:       n.cfg.Clock.Now,
	}
}

func (n *Node) raftClientTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return n.cfg.Credentials.ServerCertificate(), nil
		},
		// Raft addresses are often bare IPs; the peer is identified by its
		// SPIFFE ID instead of a host name, in verifyJournalPeerChain;
		// Raft's records after the quorum hello (Dial).
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: n.verifyJournalPeerChain,
		NextProtos:            []string{alpnRaft},
		Time:                  n.cfg.Clock.Now,
	}
}

// Accept returns the next authenticated peer connection.
func (l *tlsStreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting.
func (l *tlsStreamLayer) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *tlsStreamLayer) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, say: wait a little, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.n.log.Warn("accepting on the Raft port failed; retrying", logkey.Err, err, logkey.RetryIn, backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		go l.authenticate(c)
	}
}

// authenticate runs the handshake of one accepted connection and hands it
// to Raft if the peer is a journal of this domain. A refusal is logged
// here, at most one line per interval with the count held back: an
// unauthenticated client must not be able to fill the journal's log.
func (l *tlsStreamLayer) authenticate(raw net.Conn) {
	_ = raw.SetDeadline(time.Now().Add(l.n.cfg.HandshakeTimeout))
	tc, err := l.serverHandshake(raw)
	if err != nil {
		l.n.metrics.HandshakeRefused("raft", err)
		var r *PeerRefusal
		if errors.As(err, &r) {
			// A journal certificate refused for what it is, not a
			// stranger: counted as a refused peer too.
			l.n.CountPeerRefusal("raft port", raw.RemoteAddr().String(), err)
		} else if errors.Is(err, connlimit.ErrEvicted) {
			// Closed to make room at the cap (counted in
			// pact_journal_connections_refused_total{limit="evicted"}):
			// a flood's doing, not this connection's, and not worth a line.
		} else if ok, held := l.n.allowRefusalLog(); ok {
			l.n.log.Warn("refused a connection on the Raft port", logkey.Source, raw.RemoteAddr().String(), logkey.Err, err, logkey.RefusalsNotLogged, held)
		}
		_ = raw.Close()
		return
	}
	if err := l.n.admitRaftConn(tc); err != nil {
		if !errors.Is(err, errProbeAnswered) && !errors.Is(err, errRefusalCounted) {
			l.n.CountPeerRefusal("raft port", raw.RemoteAddr().String(), err)
		}
		_ = tc.Close()
		return
	}
	conn := l.track(tc)
	// An idle Raft connection must not be cut.
	_ = raw.SetDeadline(time.Time{})
	select {
	case l.ready <- conn:
	case <-l.done:
		_ = conn.Close()
	}
}

// Dial connects to a peer journal's Raft port.
func (l *tlsStreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	c, err := tls.DialWithDialer(d, "tcp", string(addr), l.clientConfig())
	if err != nil {
		var r *PeerRefusal
		if errors.As(err, &r) {
			l.n.CountPeerRefusal("raft dial", string(addr), err)
		}
		return nil, fmt.Errorf("journal: raft dial %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := l.n.dialHello(c, pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_RAFT); err != nil {
		_ = c.Close()
		l.n.CountPeerRefusal("raft dial", string(addr), err)
		return nil, fmt.Errorf("journal: raft dial %s: %w", addr, err)
	}
	if _, err := l.n.cfg.PeerAuth.CheckPeer(c.ConnectionState().PeerCertificates); err != nil {
		_ = c.Close()
		l.n.CountPeerRefusal("raft dial", string(addr), err)
		return nil, fmt.Errorf("journal: raft dial %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	// Swept like an accepted one: the peer's authority is re-checked
	// against the records while the connection stays open.
	return l.track(c), nil
}

func (l *tlsStreamLayer) serverHandshake(raw net.Conn) (*tls.Conn, error) {
	hello, err := connlimit.AwaitHello(raw)
	if err != nil {
		return nil, err
	}
	release, err := l.n.cfg.Conns.AcquireHandshake()
	if err != nil {
		return nil, err
	}
	defer release()
	tc := tls.Server(hello, l.serverConfig())
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	return tc, nil
}

// verifyJournalPeer accepts a peer journal's chain: one that reaches a
// domain root through the CAs the peer presents (its intermediate and
// journal CA), naming a journal of this domain, that Raft's records admit
// (PeerAuth.CheckPeer).
func (n *Node) verifyJournalPeer(raw [][]byte, _ [][]*x509.Certificate) error {
	certs, err := auth.ParsePeerChain(raw)
	if err != nil {
		return err
	}
	_, err = n.cfg.PeerAuth.CheckPeer(certs)
	return err
}

// verifyJournalPeerChain is verifyJournalPeer without Raft's records: the
// Raft port's handshake, where a probe is answered to any journal of the
// domain and the records are checked after the quorum hello.
func (n *Node) verifyJournalPeerChain(raw [][]byte, _ [][]*x509.Certificate) error {
	certs, err := auth.ParsePeerChain(raw)
	if err != nil {
		return err
	}
	return n.cfg.PeerAuth.VerifyChain(certs)
}

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
