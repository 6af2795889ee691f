package journal

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

	"github.com/pact-hpc/pact/internal/pki"
)

// tlsStreamLayer carries Raft between journals over mutual TLS. Both sides
// present their journal certificate (from their own intermediate) and accept
// only a peer whose chain reaches the domain root and that names a journal
// of this domain: an agent, an operator or a foreign CA cannot speak Raft.
type tlsStreamLayer struct {
	net.Listener
	j *Journal
}

func (j *Journal) newStreamLayer(lis net.Listener) *tlsStreamLayer {
	return &tlsStreamLayer{Listener: lis, j: j}
}

func (l *tlsStreamLayer) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return l.j.ca.ServerCertificate(), nil
		},
		ClientAuth:            tls.RequireAnyClientCert,
		VerifyPeerCertificate: l.j.verifyJournalPeer,
		Time:                  l.j.cfg.Clock.Now,
	}
}

func (l *tlsStreamLayer) clientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return l.j.ca.ServerCertificate(), nil
		},
		// Raft addresses are often bare IPs; the peer is identified by its
		// SPIFFE ID instead of a host name, in verifyJournalPeer.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: l.j.verifyJournalPeer,
		Time:                  l.j.cfg.Clock.Now,
	}
}

// Accept wraps each connection in TLS; the handshake (and so the peer
// check) runs on the first read, in Raft's per-connection goroutine, so a
// silent client cannot stall the accept loop.
func (l *tlsStreamLayer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Server(c, l.serverConfig())
	return &handshakeDeadlineConn{Conn: tc, raw: c}, nil
}

// Dial connects to a peer journal's Raft port.
func (l *tlsStreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	c, err := tls.DialWithDialer(d, "tcp", string(addr), l.clientConfig())
	if err != nil {
		return nil, fmt.Errorf("journal: raft dial %s: %w", addr, err)
	}
	return c, nil
}

// handshakeDeadlineConn clears the handshake deadline once the handshake
// is done, so an idle Raft connection is not cut.
type handshakeDeadlineConn struct {
	*tls.Conn
	raw  net.Conn
	done bool
}

func (c *handshakeDeadlineConn) Read(b []byte) (int, error) {
	if !c.done {
		if err := c.Conn.Handshake(); err != nil {
			return 0, err
		}
		c.done = true
		_ = c.raw.SetDeadline(time.Time{})
	}
	return c.Conn.Read(b)
}

// verifyJournalPeer accepts a chain that reaches the domain root through
// the intermediate the peer presents, naming a journal of this domain.
func (j *Journal) verifyJournalPeer(raw [][]byte, _ [][]*x509.Certificate) error {
	if len(raw) == 0 {
		return errors.New("journal peer: no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, d := range raw {
		c, err := x509.ParseCertificate(d)
		if err != nil {
			return fmt.Errorf("journal peer: %w", err)
		}
		certs[i] = c
	}
	return j.checkJournalCert(certs)
}

func (j *Journal) checkJournalCert(certs []*x509.Certificate) error {
	now := j.cfg.Clock.Now()
	if j.peerCerts.verified(certs, now) {
		return nil
	}
	if err := j.verifyJournalChain(certs, now); err != nil {
		return err
	}
	j.peerCerts.add(certs, now)
	return nil
}

func (j *Journal) verifyJournalChain(certs []*x509.Certificate, now time.Time) error {
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         j.roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return fmt.Errorf("journal peer: %w", err)
	}
	id, err := pki.IdentityOf(certs[0])
	if err != nil || id.Kind != pki.KindJournal || id.Domain != j.ca.Domain() {
		return fmt.Errorf("journal peer: certificate names no journal of domain %s", j.ca.Domain())
	}
	return nil
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
