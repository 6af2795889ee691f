package raftnode

import (
	"bytes"
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

// sweepLoop closes the Raft connections, accepted and dialed, of journals
// no longer in the configuration or whose certificate Raft's records no
// longer admit (checkPeerRecords): removal, a revoked journal CA or
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
		now := l.n.cfg.Clock.Now()
		for _, c := range conns {
			var why error
			if !l.n.isMember(c.peer) {
				why = refusal(refusedNotMember, "journal %s left the configuration; its Raft connection is closed", c.peer)
			} else if _, err := l.n.checkPeerRecords(c.ConnectionState().PeerCertificates, now); err != nil {
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
	if _, err := l.n.checkPeerRecords(c.ConnectionState().PeerCertificates, l.n.cfg.Clock.Now()); err != nil {
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
// (CheckPeer).
func (n *Node) verifyJournalPeer(raw [][]byte, _ [][]*x509.Certificate) error {
	certs, err := parsePeerChain(raw)
	if err != nil {
		return err
	}
	return n.CheckJournalCert(certs)
}

// verifyJournalPeerChain is verifyJournalPeer without Raft's records: the
// Raft port's handshake, where a probe is answered to any journal of the
// domain and the records are checked after the quorum hello.
func (n *Node) verifyJournalPeerChain(raw [][]byte, _ [][]*x509.Certificate) error {
	certs, err := parsePeerChain(raw)
	if err != nil {
		return err
	}
	_, err = n.peerPath(certs, n.cfg.Clock.Now())
	return err
}

func parsePeerChain(raw [][]byte) ([]*x509.Certificate, error) {
	if len(raw) == 0 {
		return nil, ErrPeerNoCertificate
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, d := range raw {
		c, err := x509.ParseCertificate(d)
		if err != nil {
			return nil, fmt.Errorf("journal peer: %w", err)
		}
		certs[i] = c
	}
	return certs, nil
}

// CheckJournalCert checks a peer journal's chain (leaf first): it is a
// peer of this quorum as far as certificates and records go (CheckPeer),
// whether or not its intermediate is published yet.
func (n *Node) CheckJournalCert(certs []*x509.Certificate) error {
	_, err := n.CheckPeer(certs)
	return err
}

// CheckPeer checks a peer journal's chain (leaf first) and reports whether
// its intermediate is one Raft published.
//
// The chain must reach a domain root in a shape a journal's certificate
// has ([server, intermediate, journal CA], or legacy [server,
// intermediate]) and name a journal of this domain; that much any journal
// of the domain has, a second quorum's and a replaced host's included.
// What makes it a peer is what Raft recorded (checkPeerRecords): the
// journal CA its journal id is bound to, and an intermediate of that
// journal. Membership and the quorum id are checked by the callers, per
// connection and per call.
func (n *Node) CheckPeer(certs []*x509.Certificate) (published bool, err error) {
	return n.checkPeerRecords(certs, n.cfg.Clock.Now())
}

// checkPeerRecords checks a verified journal chain against Raft's records,
// as they stand now: on every call and connection, and again by the Raft
// port's sweep for connections already open, so authority the records
// withdraw is withdrawn from open connections too.
//
//   - Every journal CA sent is the one the journal id is bound to (or a
//     re-issue of it with the same key, which the journal's publish under
//     it will bind), and not revoked. A journal id bound to a journal CA
//     has no peer without one.
//   - An intermediate Raft records is that journal's, under that journal
//     CA, and not revoked; one it does not record is unpublished: the
//     journal re-keyed or started, and publishes it over the peer service
//     (the only peer call it may make, journal/authwire.go). On the Raft
//     port it is taken under the bound journal CA only: after a whole
//     quorum restarts every journal holds an intermediate nobody has
//     published yet, and publishing needs a leader, which needs Raft.
//   - A legacy chain (the root signed its intermediate) is a peer only
//     with an intermediate Raft records for that journal, or while the
//     quorum has no journal CA at all (the layout before journal CAs,
//     whose bootstrap has nothing else).
//
// A journal id with nothing recorded (a founding member before its first
// publish) is decided by the chain alone; pact journal add binds a new
// journal's journal CA before it becomes a member.
func (n *Node) checkPeerRecords(certs []*x509.Certificate, now time.Time) (published bool, err error) {
	id, ierr := pki.IdentityOf(certs[0])
	if ierr != nil || id.Kind != pki.KindJournal {
		return false, fmt.Errorf("%w (%s)", ErrPeerNotJournal, n.cfg.Credentials.Domain())
	}
	// What was sent: every journal CA in it must be this journal's and
	// none revoked, on the verified path or beside it (a journal sends
	// its own and nothing else).
	var sentCAs []*x509.Certificate
	for _, c := range certs[1:] {
		if _, _, ok := caprofile.JournalOf(c); ok {
			sentCAs = append(sentCAs, c)
		}
	}
	if err := n.checkJournalCAsRevoked(sentCAs); err != nil {
		return false, err
	}
	if err := checkJournalCABinding(certs[0], sentCAs); err != nil {
		return false, err
	}
	// What vouches for the leaf: the verified path's intermediate and
	// journal CA (none: the legacy shape), not whatever was sent beside.
	path, err := n.peerPath(certs, now)
	if err != nil {
		return false, err
	}
	inter := path[1]
	var jc *x509.Certificate
	if len(path) == 4 {
		jc = path[2]
	}
	bound, isBound := n.fsm.BoundJournalCA(id.Name)
	switch {
	case isBound && jc == nil:
		return false, &PeerRefusal{reason: refusedNotBound, msg: fmt.Sprintf("journal %s is bound to journal CA %s; a chain without it (the root signed its intermediate) is no peer", id.Name, bound.GetSerial()), cause: ErrPeerNotBound}
	case isBound:
		if err := provesBound(id.Name, jc, bound); err != nil {
			return false, err
		}
	}
	in, published := n.fsm.Intermediate(pki.SerialHex(inter.SerialNumber))
	if published {
		if raftfsm.IntermediateRevoked(in, now.UnixNano()) {
			return false, &PeerRefusal{reason: refusedRevoked, msg: fmt.Sprintf("intermediate %s of journal %s is revoked", in.GetSerial(), in.GetJournalId()), cause: ErrPeerIntermediateRevoked}
		}
		if err := checkIntermediateBinding(certs[0], in); err != nil {
			return false, err
		}
		if !bytes.Equal(in.GetDer(), inter.Raw) {
			return false, &PeerRefusal{reason: refusedNotBound, msg: fmt.Sprintf("intermediate %s of journal %s is not the certificate Raft records under that serial", in.GetSerial(), id.Name), cause: ErrPeerNotBound}
		}
		if jc != nil && in.GetIssuerSerial() != pki.SerialHex(jc.SerialNumber) {
			return false, &PeerRefusal{reason: refusedNotBound, msg: fmt.Sprintf("intermediate %s of journal %s is recorded under journal CA %q, not the one on its path", in.GetSerial(), id.Name, in.GetIssuerSerial()), cause: ErrPeerNotBound}
		}
	}
	// A legacy chain of a journal not bound to a journal CA is a legacy
	// journal not migrated yet, which restarts with a fresh root-signed
	// intermediate (the migration runs through such restarts), or a
	// founder before its first publish: decided by its chain, as a journal
	// with the root key on its host is as strong as that key anyway
	// (docs/migration.md). A bound journal has no legacy chain (refused
	// above), and pact journal add refuses a legacy journal in a quorum
	// with journal CAs.
	return published, nil
}

// provesBound refuses a journal CA that is not the one journalID is bound
// to, nor a re-issue of it with the same key that Raft has not recorded
// yet (the yearly renewal, a rollover: the journal's publish under it
// binds it).
func provesBound(journalID string, jc *x509.Certificate, bound *pactv1.JournalCA) error {
	serial := pki.SerialHex(jc.SerialNumber)
	if serial == bound.GetSerial() {
		if !bytes.Equal(jc.Raw, bound.GetDer()) {
			return &PeerRefusal{reason: refusedNotBound, msg: fmt.Sprintf("journal CA %s of journal %s is not the certificate Raft records under that serial", serial, journalID), cause: ErrPeerNotBound}
		}
		return nil
	}
	if bound.GetRevokedAtUnixNano() == 0 && sameKey(jc, bound.GetDer()) {
		return nil
	}
	return &PeerRefusal{reason: refusedNotBound, msg: fmt.Sprintf("journal CA %s is not the one journal %s is bound to (%s): a journal CA of another quorum, of a replaced host, or superseded (docs/security.md, \"Peers are what Raft records\")", serial, journalID, bound.GetSerial()), cause: ErrPeerNotBound}
}

func sameKey(c *x509.Certificate, der []byte) bool {
	other, err := x509.ParseCertificate(der)
	return err == nil && bytes.Equal(c.RawSubjectPublicKeyInfo, other.RawSubjectPublicKeyInfo)
}

// checkJournalCAsRevoked refuses a chain through a journal CA Raft records
// as revoked.
func (n *Node) checkJournalCAsRevoked(journalCAs []*x509.Certificate) error {
	for _, c := range journalCAs {
		serial := pki.SerialHex(c.SerialNumber)
		if jc, ok := n.fsm.JournalCA(serial); ok && jc.GetRevokedAtUnixNano() != 0 {
			return &PeerRefusal{reason: refusedRevoked, msg: fmt.Sprintf("journal CA %s of journal %s is revoked (%s)", serial, jc.GetJournalId(), jc.GetRevokeReason()), cause: ErrPeerIntermediateRevoked}
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
	_, err := n.verifyJournalPath(certs, now)
	return err
}

// verifyJournalPath verifies a peer journal's chain and returns the path
// that verified, leaf first and a root last, in a journal's shape: the
// path, not what else was sent beside it, says which intermediate and
// journal CA vouch for the leaf.
func (n *Node) verifyJournalPath(certs []*x509.Certificate, now time.Time) ([]*x509.Certificate, error) {
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
		return nil, fmt.Errorf("journal peer: %w", err)
	}
	id, err := pki.IdentityOf(certs[0])
	if err != nil || id.Kind != pki.KindJournal || id.Domain != n.cfg.Credentials.Domain() {
		return nil, fmt.Errorf("%w (%s)", ErrPeerNotJournal, n.cfg.Credentials.Domain())
	}
	// A journal's certificate comes from its intermediate, never from a
	// journal CA or a root directly.
	var shape error
	for _, c := range chains {
		if shape = auth.ChainShape(pki.KindJournal, c, id.Domain); shape == nil {
			return c, nil
		}
	}
	return nil, &PeerRefusal{reason: refusedIntermediate, msg: shape.Error(), cause: fmt.Errorf("%w: %w", ErrPeerWrongIntermediate, shape)}
}

// peerPath returns the verified path of a peer's chain, from the cache
// or verified now.
func (n *Node) peerPath(certs []*x509.Certificate, now time.Time) ([]*x509.Certificate, error) {
	if path, ok := n.peerCerts.verified(certs, now); ok {
		return path, nil
	}
	path, err := n.verifyJournalPath(certs, now)
	if err != nil {
		return nil, err
	}
	n.peerCerts.add(certs, path, now)
	return path, nil
}

// verifiedChains remembers peer journal chains that verified, so a leader
// does not re-verify the same follower's chain (two ECDSA verifications) on
// every forwarded write. A journal chain depends on nothing but the root,
// which never changes while the journal runs, and the clock: an entry
// holds until the earliest NotAfter in the chain.
type verifiedChains struct {
	mu sync.Mutex
	m  map[string]verifiedChain // the chain's DER, concatenated -> its verification
}

type verifiedChain struct {
	until time.Time
	path  []*x509.Certificate // the path that verified, leaf first
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

func (v *verifiedChains) verified(certs []*x509.Certificate, now time.Time) ([]*x509.Certificate, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.m[chainKey(certs)]
	if !ok {
		return nil, false
	}
	for _, c := range certs {
		if now.Before(c.NotBefore) {
			return nil, false // a clock stepped back: verify again
		}
	}
	return e.path, now.Before(e.until)
}

// clear forgets every verified chain: called when an intermediate is
// retired or revoked, so nothing verified before is trusted from memory.
func (v *verifiedChains) clear() {
	v.mu.Lock()
	v.m = nil
	v.mu.Unlock()
}

func (v *verifiedChains) add(certs, path []*x509.Certificate, now time.Time) {
	until := certs[0].NotAfter
	for _, c := range certs[1:] {
		if c.NotAfter.Before(until) {
			until = c.NotAfter
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= maxVerifiedChains {
		for k, e := range v.m {
			if !now.Before(e.until) {
				delete(v.m, k)
			}
		}
		if len(v.m) >= maxVerifiedChains {
			v.m = nil
		}
	}
	if v.m == nil {
		v.m = make(map[string]verifiedChain, 8)
	}
	v.m[chainKey(certs)] = verifiedChain{until: until, path: path}
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
