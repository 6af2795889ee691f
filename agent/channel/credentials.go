// The client side of pact's mTLS, for the live channel and for Enroll
// alike: the TLS configuration, and gRPC credentials that put a failed
// handshake's typed error (an untrusted journal, a busy answer) back into
// the call's error.

package channel

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/tlsalert"
	"github.com/pact-hpc/pact/internal/transport"
)

// ClientTLSConfig is the client side of pact's mTLS: TLS 1.3, the server
// verified against roots (one, or two during a rollover) plus the roots in
// id's Bundle at now's time, and id presented as the client certificate
// (none when id is nil, as for Enroll). A journal sends its server
// certificate with its intermediate and journal CA. Verification is never
// turned off.
//
// Besides its chain and the address's name, the server's leaf must carry
// the SPIFFE ID of a journal of the roots' trust domain
// (spiffe://DOMAIN/pact-journal/ID; pki.AuthorizeJournal): an agent's
// certificate, which chains to the same roots and may carry serverAuth, is
// refused as a journal whatever names it carries.
func ClientTLSConfig(roots []*x509.Certificate, id *identity.Identity, now func() time.Time) *tls.Config {
	pool := x509.NewCertPool()
	for _, c := range roots {
		pool.AddCert(c)
	}
	cfg := &tls.Config{
		MinVersion:       tls.VersionTLS13,
		RootCAs:          pool,
		Time:             now,
		VerifyConnection: pki.VerifyConnection(pki.AuthorizeJournal(pki.TrustDomains(roots)...)),
	}
	if id != nil {
		for _, c := range id.Bundle {
			// Only the bundle's roots (self-signed). Its journal CAs and
			// intermediates are no anchors: a journal sends them with its
			// certificate, and they chain to a root here; as anchors they
			// would make Go check the same signatures on several paths,
			// and trust a journal CA on its own, revoked or not. An SVID's
			// bundle is SPIRE's: a journal's certificate is always the
			// pact one (docs/spire.md), and SPIRE, which may sign
			// spiffe://DOMAIN/pact-journal/ID in the pact trust domain,
			// never vouches for a journal.
			if id.Source != identity.SourceSPIRE && bytes.Equal(c.RawSubject, c.RawIssuer) {
				pool.AddCert(c)
			}
		}
		cert := id.TLSCertificate()
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return cfg
}

// ClientCredentials are gRPC TLS credentials that remember how the latest
// handshake ended, and the alert by which the journal refused it after
// the agent's side of it was done (TLS 1.3 checks the client's
// certificate then): tlsalert.Credentials records both. gRPC reports
// either as UNAVAILABLE with the reason in text only; Explain puts the
// typed TLS error (an x509.UnknownAuthorityError, a
// tls.CertificateVerificationError, the journal's alert...) back into the
// call's error, so callers can tell an untrusted server, a refused
// certificate and an unreachable journal apart with errors.As and
// tlsalert.Received.
type ClientCredentials struct {
	*tlsalert.Credentials
}

// NewClientCredentials wraps cfg. A journal's busy answer
// (internal/transport) ends a handshake with a *transport.BusyError.
func NewClientCredentials(cfg *tls.Config) *ClientCredentials {
	return &ClientCredentials{Credentials: tlsalert.NewCredentials(busyAware{credentials.NewTLS(cfg)})}
}

// busyAware reads a journal's busy answer on the raw connection before
// the TLS handshake does (transport.BusyAware).
type busyAware struct {
	credentials.TransportCredentials
}

func (b busyAware) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return b.TransportCredentials.ClientHandshake(ctx, authority, transport.BusyAware(raw))
}

func (b busyAware) Clone() credentials.TransportCredentials {
	return busyAware{b.TransportCredentials.Clone()}
}

// HandshakeError is the TLS handshake's own error in a call's error
// (Explain): the connection reached a handshake, and it failed with Err
// (io.EOF: the journal closed the connection before it answered the
// ClientHello). It reads as Err.
type HandshakeError struct{ Err error }

func (e *HandshakeError) Error() string { return e.Err.Error() }

func (e *HandshakeError) Unwrap() error { return e.Err }

// Explain adds the latest handshake error to a call's UNAVAILABLE error,
// or the alert the journal sent after the handshake (which adds nothing to
// the text); it returns other errors as they are. A call that failed UNAVAILABLE or
// DEADLINE_EXCEEDED before any connection reached a handshake (refused,
// no route, timed out) is marked ErrNoConnection: no journal spent work on
// it. The result still carries the gRPC status.
func (c *ClientCredentials) Explain(err error) error {
	code := status.Code(err)
	if err == nil || (code != codes.Unavailable && code != codes.DeadlineExceeded) {
		return err
	}
	tried, herr, alert := c.Latest()
	switch {
	case !tried:
		return fmt.Errorf("%w: %w", ErrNoConnection, err)
	case herr != nil && code == codes.Unavailable:
		return fmt.Errorf("%w (TLS handshake: %w)", err, &HandshakeError{Err: herr})
	case herr == nil && alert != nil && code == codes.Unavailable:
		// gRPC's message names the alert already.
		return tlsalert.Attach(err, alert)
	}
	return err
}
