package journal

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
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
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         j.roots,
		Intermediates: inter,
		CurrentTime:   j.cfg.Clock.Now(),
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
