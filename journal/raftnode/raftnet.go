package raftnode

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/connlimit"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
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

// sweepLoop closes the Raft connections of journals no longer in the
// configuration: removal ends a journal's peer rights at once, on
// connections it opened before as on new ones.
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
		var stale []*peerConn
		for c := range l.conns {
			if !l.n.isMember(c.peer) {
				stale = append(stale, c)
			}
		}
		l.connMu.Unlock()
		for _, c := range stale {
			l.n.CountPeerRefusal("raft port", c.RemoteAddr().String(), refusal(refusedNotMember, "journal %s left the configuration; its Raft connection is closed", c.peer))
			_ = c.Close()
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
		// verifyJournalPeer refuses a peer without a certificate (and
		// names the refusal: ErrPeerNoCertificate).
		ClientAuth:            tls.RequestClientCert,
		VerifyPeerCertificate: n.verifyJournalPeer,
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
		// SPIFFE ID instead of a host name, in verifyJournalPeer.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: n.verifyJournalPeer,
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
	_ = c.SetDeadline(time.Time{})
	return c, nil
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

// verifyJournalPeer accepts a chain that reaches a domain root through the
// CAs the peer presents (its intermediate and journal CA), naming a journal
// of this domain.
func (n *Node) verifyJournalPeer(raw [][]byte, _ [][]*x509.Certificate) error {
	if len(raw) == 0 {
		return ErrPeerNoCertificate
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, d := range raw {
		c, err := x509.ParseCertificate(d)
		if err != nil {
			return fmt.Errorf("journal peer: %w", err)
		}
		certs[i] = c
	}
	return n.CheckJournalCert(certs)
}

// CheckJournalCert checks a peer journal's chain (leaf first): it reaches a
// domain root in a shape a journal's certificate has ([server,
// intermediate, journal CA], or legacy [server, intermediate]), names a
// journal of this domain, its intermediate and journal CA are not revoked,
// and they are that journal's own.
func (n *Node) CheckJournalCert(certs []*x509.Certificate) error {
	now := n.cfg.Clock.Now()
	// A revoked intermediate (pact journal remove --revoke-intermediate)
	// or journal CA (pact journal revoke-ca) cuts its journal off at once,
	// cached chain or not. An intermediate not yet in Raft passes: a
	// journal publishes its new one over this very connection.
	// Every intermediate the peer sent that Raft records, and every
	// journal CA: a journal sends its own and nothing else.
	var recorded []*pactv1.Intermediate
	var journalCAs []*x509.Certificate
	for _, c := range certs[1:] {
		if _, _, ok := caprofile.JournalOf(c); ok {
			journalCAs = append(journalCAs, c)
			continue
		}
		in, ok := n.fsm.Intermediate(pki.SerialHex(c.SerialNumber))
		if !ok {
			continue
		}
		if raftfsm.IntermediateRevoked(in, now.UnixNano()) {
			return &PeerRefusal{reason: refusedRevoked, msg: fmt.Sprintf("intermediate %s of journal %s is revoked", in.GetSerial(), in.GetJournalId()), cause: ErrPeerIntermediateRevoked}
		}
		recorded = append(recorded, in)
	}
	if err := n.checkJournalCAsRevoked(journalCAs); err != nil {
		return err
	}
	if !n.peerCerts.verified(certs, now) {
		if err := n.verifyJournalChain(certs, now); err != nil {
			return err
		}
		n.peerCerts.add(certs, now)
	}
	// A journal is a peer with its own intermediate only: a certificate
	// naming j1 made with j2's intermediate key is no j1. An intermediate
	// not yet in Raft passes on the chain alone (its journal CA, or the
	// root, signed it for a journal that publishes it over this very
	// connection); membership is checked by the caller, per connection and
	// per call. Checked on every call, cached chain or not: Raft's record
	// of whose intermediate it is decides, as it stands now, and the
	// journal CA's name, which the root vouches for.
	if err := checkJournalCABinding(certs[0], journalCAs); err != nil {
		return err
	}
	for _, in := range recorded {
		if err := checkIntermediateBinding(certs[0], in); err != nil {
			return err
		}
	}
	return nil
}

// checkJournalCAsRevoked refuses a chain through a journal CA Raft records
// as revoked. A journal CA not recorded yet (its journal's first publish
// under it) passes.
func (n *Node) checkJournalCAsRevoked(journalCAs []*x509.Certificate) error {
	if len(journalCAs) == 0 {
		return nil
	}
	return revokedJournalCA(n.fsm.AllJournalCAs(), journalCAs)
}

// revokedJournalCA refuses the first of journalCAs that recorded has
// revoked.
func revokedJournalCA(recorded []*pactv1.JournalCA, journalCAs []*x509.Certificate) error {
	for _, c := range journalCAs {
		serial := pki.SerialHex(c.SerialNumber)
		for _, jc := range recorded {
			if jc.GetSerial() == serial && jc.GetRevokedAtUnixNano() != 0 {
				return &PeerRefusal{reason: refusedRevoked, msg: fmt.Sprintf("journal CA %s of journal %s is revoked (%s)", serial, jc.GetJournalId(), jc.GetRevokeReason()), cause: ErrPeerIntermediateRevoked}
			}
		}
	}
	return nil
}

// checkJournalCABinding refuses a journal certificate sent with the journal
// CA of another journal: a journal CA signs its own journal's
// intermediates only. Every journal CA sent counts, whether or not it is
// on the verified path: a journal sends its own only, and a peer that sends
// another's (to hide which one signed) refuses itself.
func checkJournalCABinding(leaf *x509.Certificate, journalCAs []*x509.Certificate) error {
	id, err := pki.IdentityOf(leaf)
	if err != nil || id.Kind != pki.KindJournal {
		return nil // verifyJournalChain refused it already
	}
	for _, c := range journalCAs {
		if of, _, _ := caprofile.JournalOf(c); of != id.Name {
			return &PeerRefusal{reason: refusedIntermediate, msg: fmt.Sprintf("a certificate naming journal %s under the journal CA of journal %s", id.Name, of), cause: ErrPeerWrongIntermediate}
		}
	}
	return nil
}

func (n *Node) verifyJournalChain(certs []*x509.Certificate, now time.Time) error {
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	chains, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         n.roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("journal peer: %w", err)
	}
	id, err := pki.IdentityOf(certs[0])
	if err != nil || id.Kind != pki.KindJournal || id.Domain != n.cfg.Credentials.Domain() {
		return fmt.Errorf("%w (%s)", ErrPeerNotJournal, n.cfg.Credentials.Domain())
	}
	// A journal's certificate comes from its intermediate, never from a
	// journal CA or a root directly.
	var shape error
	for _, c := range chains {
		if shape = auth.ChainShape(pki.KindJournal, c, id.Domain); shape == nil {
			return nil
		}
	}
	return &PeerRefusal{reason: refusedIntermediate, msg: shape.Error(), cause: fmt.Errorf("%w: %w", ErrPeerWrongIntermediate, shape)}
}

// verifiedChains remembers peer journal chains that verified, so a leader
// does not re-verify the same follower's chain (two ECDSA verifications) on
// every forwarded write. A journal chain depends on nothing but the root,
// which never changes while the journal runs, and the clock: an entry
// holds until the earliest NotAfter in the chain.
type verifiedChains struct {
	mu sync.Mutex
	m  map[string]time.Time // the chain's DER, concatenated -> valid until
}

// maxVerifiedChains bounds the cache: a quorum has at most a handful of
// journals, each with one chain per intermediate it held.
const maxVerifiedChains = 64

// chainKey is the chain's certificates, each after its length.
func chainKey(certs []*x509.Certificate) string {
	var b strings.Builder
	for _, c := range certs {
		b.Write(binary.BigEndian.AppendUint32(nil, uint32(len(c.Raw))))
		b.Write(c.Raw)
	}
	return b.String()
}

func (v *verifiedChains) verified(certs []*x509.Certificate, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	until, ok := v.m[chainKey(certs)]
	if !ok {
		return false
	}
	for _, c := range certs {
		if now.Before(c.NotBefore) {
			return false // a clock stepped back: verify again
		}
	}
	return now.Before(until)
}

// clear forgets every verified chain: called when an intermediate is
// retired or revoked, so nothing verified before is trusted from memory.
func (v *verifiedChains) clear() {
	v.mu.Lock()
	v.m = nil
	v.mu.Unlock()
}

func (v *verifiedChains) add(certs []*x509.Certificate, now time.Time) {
	until := certs[0].NotAfter
	for _, c := range certs[1:] {
		if c.NotAfter.Before(until) {
			until = c.NotAfter
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= maxVerifiedChains {
		for k, u := range v.m {
			if !now.Before(u) {
				delete(v.m, k)
			}
		}
		if len(v.m) >= maxVerifiedChains {
			v.m = nil
		}
	}
	if v.m == nil {
		v.m = make(map[string]time.Time, 8)
	}
	v.m[chainKey(certs)] = until
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
