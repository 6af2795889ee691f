package auth

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/connlimit"
)

// maxChainDepth bounds the walk from a leaf to an authority, in links: a
// pact chain has three (leaf, journal intermediate, journal CA, root; a
// legacy chain, with the intermediate signed by the root, two); SPIRE may
// add an intermediate.
const maxChainDepth = 4

// VerifyClientConnection is the gRPC port's tls.Config.VerifyConnection.
// It accepts a client chain whose signatures reach a domain root (directly,
// for a root-signed operator credential; through a journal intermediate
// and its journal CA, or a legacy intermediate the root signed, sent by
// the client or live in the trust bundle, for the rest), or, on a SPIRE
// site, an authority of the SPIRE bundle. It checks signatures only: which
// shapes of chain are accepted, validity dates, revocation (of the leaf,
// an intermediate or a journal CA) and the registry binding are checked on
// every call, at the journal's clock and against the trust bundle only
// (verifyClient), so that an expired or revoked certificate of this domain
// gets a typed error saying what to do rather than a bare TLS alert. A
// connection with no client certificate (Enroll) passes. It takes the
// chain crypto/tls has already parsed: VerifyPeerCertificate gets the raw
// chain, and parsing it again cost every mTLS handshake of a storm about
// 0.06 ms (docs/benchmarks.md).
func (a *Authenticator) VerifyClientConnection(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	if len(cs.PeerCertificates) > maxChainDepth+1 {
		return fmt.Errorf("%w: chain of %d certificates", ErrForeignChain, len(cs.PeerCertificates))
	}
	certs := cs.PeerCertificates
	leaf := certs[0]
	pool := certs[1:]
	if issuer := chainsTo(leaf, a.cfg.Roots, &a.known, pool, a.cfg.Bundle.LiveIntermediates().Certs); issuer != nil {
		// The connection's first call verifies this chain again, at its
		// clock against the bundle: it need not check this signature twice.
		a.signed.add(leaf, issuer)
		return nil
	}
	if a.spire != nil {
		// On a SPIRE site an agent may present an SVID: a chain to the
		// SPIRE bundle passes here, and the call decides whether its
		// SPIFFE ID is acceptable. So does an agent SVID the bundle does
		// not verify (a SPIRE CA rotation the journal has not picked up
		// yet, another trust domain): the call answers with a typed reason
		// (SPIRE_BUNDLE_UNTRUSTED, TRUST_DOMAIN_NOT_ACCEPTED...) on which
		// the agent falls back to its journal certificate. Operator and
		// journal identities are never SVIDs: from another root they fail
		// here.
		b := a.spire.src.current()
		if b == nil || chainsTo(leaf, b.X509Authorities(), nil, pool) != nil || agentSVIDShaped(leaf) {
			return nil
		}
	}
	return ErrForeignChain
}

// agentSVIDShaped reports whether leaf carries a SPIFFE ID that is not a
// pact operator's or journal's: what a node agent's SVID looks like.
func agentSVIDShaped(leaf *x509.Certificate) bool {
	for _, u := range leaf.URIs {
		if u.Scheme != "spiffe" {
			continue
		}
		if strings.HasPrefix(u.Path, "/"+pki.KindAdmin+"/") || strings.HasPrefix(u.Path, "/"+pki.KindJournal+"/") {
			return false
		}
		return true
	}
	return false
}

// chainsTo returns the certificate whose signature of leaf it checked, when
// leaf's signatures lead to one of roots through the intermediates given
// (an issuer is tried only when its subject is the name the certificate
// was issued by, and its key the one the certificate names, when both
// say), and nil when they do not. known, if not nil, remembers the CA
// certificates found to reach a root, each one on the path (a journal's
// intermediate as well as its journal CA): in steady state a handshake
// costs one signature check, the leaf's, however long the chain above it.
func chainsTo(leaf *x509.Certificate, roots []*x509.Certificate, known *caCache, pools ...[]*x509.Certificate) *x509.Certificate {
	cur := leaf
	var issuer *x509.Certificate
	// fresh are the CA certificates on the walk not known yet: remembered
	// once the walk reaches a root.
	var fresh [maxChainDepth]*x509.Certificate
	n := 0
	for range maxChainDepth {
		if cur != leaf {
			if known.has(cur) {
				known.add(fresh[:n])
				return issuer
			}
			fresh[n] = cur
			n++
		}
		for _, r := range roots {
			if issuedBy(cur, r) && cur.CheckSignatureFrom(r) == nil {
				known.add(fresh[:n])
				if issuer == nil {
					issuer = r
				}
				return issuer
			}
		}
		var next *x509.Certificate
	search:
		for _, pool := range pools {
			for _, c := range pool {
				if c != cur && c.IsCA && issuedBy(cur, c) && cur.CheckSignatureFrom(c) == nil {
					next = c
					break search
				}
			}
		}
		if next == nil {
			return nil
		}
		if issuer == nil {
			issuer = next
		}
		cur = next
	}
	return nil
}

// issuedBy reports whether cert names ca as its issuer: ca's subject, and
// ca's key identifier when both carry one (a journal's intermediates all
// share a subject, and so do a domain's two roots during a rollover). It
// saves signature checks; it proves nothing.
func issuedBy(cert, ca *x509.Certificate) bool {
	if !bytes.Equal(cert.RawIssuer, ca.RawSubject) {
		return false
	}
	return len(cert.AuthorityKeyId) == 0 || len(ca.SubjectKeyId) == 0 || bytes.Equal(cert.AuthorityKeyId, ca.SubjectKeyId)
}

// maxKnownCAs bounds caCache. A domain has a handful of journals, each
// with a journal CA and one or two live intermediates at a time; a CA
// whose key was stolen could sign new intermediates without end.
const maxKnownCAs = 256

// caCache is the set of CA certificates (DER) a handshake found to reach a
// root. Only a certificate whose signatures were checked up to a root
// enters it, and it is emptied when full: a stolen CA key can make it cost
// the signature checks it saves, never grow it past maxKnownCAs. A nil
// cache remembers nothing.
type caCache struct {
	mu sync.RWMutex
	m  map[string]struct{}
}

func (c *caCache) has(cert *x509.Certificate) bool {
	if c == nil {
		return false
	}
	c.mu.RLock()
	_, ok := c.m[string(cert.Raw)]
	c.mu.RUnlock()
	return ok
}

func (c *caCache) add(certs []*x509.Certificate) {
	if c == nil || len(certs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m)+len(certs) > maxKnownCAs {
		c.m = make(map[string]struct{}, 16)
	}
	for _, cert := range certs {
		c.m[string(cert.Raw)] = struct{}{}
	}
}

// refusalDrain bounds how long a connection whose client certificate was
// refused is kept to deliver the refusal.
const refusalDrain = 250 * time.Millisecond

// ServerCreds wraps the gRPC port's TLS credentials: the connection limits
// admit a handshake first (limitedCreds), and a refused client chain gets
// its alert (refusingCreds). refused, if set, is told every failed
// handshake (pact_journal_handshakes_refused_total).
func ServerCreds(tlsCreds credentials.TransportCredentials, lim *connlimit.Limiter, refused func(error)) credentials.TransportCredentials {
	return refusingCreds{&limitedCreds{TransportCredentials: tlsCreds, lim: lim}, refused}
}

// limitedCreds makes the gRPC port's TLS handshake wait for the client's
// ClientHello without a handshake slot, and take a slot (or answer busy)
// only once it has arrived. gRPC runs ServerHandshake in the connection's
// own goroutine under its ConnectionTimeout deadline, so a silent client
// blocks nobody and is closed when the timeout passes. The admission and
// the busy answer are connlimit's (Limiter.AdmitHandshake).
type limitedCreds struct {
	credentials.TransportCredentials
	lim *connlimit.Limiter
}

func (c *limitedCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	hello, release, err := c.lim.AdmitHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	conn, info, err := c.TransportCredentials.ServerHandshake(hello)
	release(err == nil)
	return conn, info, err
}

func (c *limitedCreds) Clone() credentials.TransportCredentials {
	return &limitedCreds{TransportCredentials: c.TransportCredentials.Clone(), lim: c.lim}
}

// refusingCreds delivers a handshake refusal reliably. In TLS 1.3 the client
// finishes its side of the handshake before the server verifies the client
// certificate, and sends its first bytes at once; a server that then closes
// with those bytes unread resets the connection, and the client sees
// "connection reset" instead of the bad_certificate alert. Half-closing and
// draining briefly lets the alert arrive, so an operator or an agent learns
// that its certificate was refused, not that the journal is down.
type refusingCreds struct {
	credentials.TransportCredentials
	// refused counts a failed handshake (pact_journal_handshakes_refused_total).
	refused func(error)
}

func (c refusingCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	// The TLS credentials close the connection when the handshake fails:
	// hold that close until the refusal has been delivered.
	held := &holdClose{Conn: raw, hold: true}
	conn, info, err := c.TransportCredentials.ServerHandshake(held)
	held.release()
	if err != nil {
		if c.refused != nil {
			c.refused(err)
		}
		if errors.Is(err, ErrForeignChain) {
			if tc, ok := raw.(interface{ CloseWrite() error }); ok {
				_ = tc.CloseWrite()
				_ = raw.SetReadDeadline(time.Now().Add(refusalDrain))
				_, _ = io.Copy(io.Discard, io.LimitReader(raw, 64<<10))
			}
		}
		_ = raw.Close()
		return nil, nil, err
	}
	if ti, ok := info.(credentials.TLSInfo); ok {
		info = connAuthInfo{TLSInfo: ti, verdict: &chainVerdict{}}
	}
	return conn, info, nil
}

// holdClose ignores Close while held; after release it closes for real.
type holdClose struct {
	net.Conn
	mu   sync.Mutex
	hold bool
}

func (h *holdClose) Close() error {
	h.mu.Lock()
	held := h.hold
	h.mu.Unlock()
	if held {
		return nil
	}
	return h.Conn.Close()
}

// CloseWrite half-closes the connection underneath (a busy answer is
// delivered so), which a held Close does not.
func (h *holdClose) CloseWrite() error {
	if cw, ok := h.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (h *holdClose) release() {
	h.mu.Lock()
	h.hold = false
	h.mu.Unlock()
}

func (c refusingCreds) Clone() credentials.TransportCredentials {
	return refusingCreds{c.TransportCredentials.Clone(), c.refused}
}
