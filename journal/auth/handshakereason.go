package auth

import (
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/pact-hpc/pact/journal/connlimit"
)

// Why a TLS handshake failed (pact_journal_handshakes_refused_total{port,reason}).
// Busy answers, connection caps and evictions are not here: they are counted by
// pact_journal_connections_busy_total and pact_journal_connections_refused_total.
const (
	hsForeignRoot         = "foreign_root"         // a client chain that reaches no authority of this domain
	hsNoCertificate       = "no_certificate"       // no client certificate where one is required (Raft port)
	hsIntermediateRevoked = "intermediate_revoked" // a peer journal's intermediate is revoked (Raft port)
	hsWrongIntermediate   = "wrong_intermediate"   // a journal certificate not from that journal's own intermediate (Raft port)
	hsNotJournal          = "not_journal"          // a certificate of this domain that names no journal (Raft port)
	hsCertInvalid         = "certificate_invalid"  // expired, not yet valid or the wrong usage (Raft port)
	hsClientAlert         = "client_alert"         // the client refused the journal's certificate (a stale ca.pem, another domain)
	hsNotTLS              = "not_tls"              // the first bytes were not a TLS handshake
	hsTimeout             = "timeout"              // the handshake did not finish within HandshakeTimeout
	hsClientClosed        = "client_closed"        // the client closed the connection mid-handshake
	hsTLSError            = "tls_error"            // any other TLS failure (no common version or cipher, a malformed message)
)

// HandshakeReasons are every reason HandshakeRefusalReason gives.
var HandshakeReasons = []string{hsForeignRoot, hsNoCertificate, hsIntermediateRevoked, hsWrongIntermediate, hsNotJournal, hsCertInvalid, hsClientAlert, hsNotTLS, hsTimeout, hsClientClosed, hsTLSError}

// Sentinels of the Raft port's peer verification, so its refusals are
// counted by reason.
var (
	ErrPeerNoCertificate       = errors.New("journal peer: no certificate")
	ErrPeerIntermediateRevoked = errors.New("journal peer: intermediate revoked")
	ErrPeerNotJournal          = errors.New("journal peer: certificate names no journal of this domain")
	ErrPeerWrongIntermediate   = errors.New("journal peer: certificate not from its journal's own intermediate")
)

// HandshakeRefusalReason classifies a failed server handshake; ok is false
// for a busy answer or a cap, which other metrics count.
func HandshakeRefusalReason(err error) (reason string, ok bool) {
	var busy *connlimit.BusyError
	var unknownAuthority x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var op *net.OpError
	switch {
	case errors.As(err, &busy) || errors.Is(err, connlimit.ErrHandshakesBusy) || errors.Is(err, connlimit.ErrEvicted):
		return "", false
	case errors.Is(err, ErrForeignChain), errors.As(err, &unknownAuthority):
		return hsForeignRoot, true
	case errors.Is(err, ErrPeerNoCertificate):
		return hsNoCertificate, true
	case errors.Is(err, ErrPeerIntermediateRevoked):
		return hsIntermediateRevoked, true
	case errors.Is(err, ErrPeerWrongIntermediate):
		return hsWrongIntermediate, true
	case errors.Is(err, ErrPeerNotJournal):
		return hsNotJournal, true
	case errors.As(err, &invalid):
		return hsCertInvalid, true
	case errors.Is(err, connlimit.ErrNotTLS):
		return hsNotTLS, true
	case errors.Is(err, os.ErrDeadlineExceeded):
		return hsTimeout, true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, net.ErrClosed), errors.Is(err, syscall.EPIPE):
		return hsClientClosed, true
	case errors.As(err, &op) && op.Op == "remote error":
		// crypto/tls reports an alert the client sent as a net.OpError
		// with this Op (the alert type itself is unexported).
		return hsClientAlert, true
	}
	return hsTLSError, true
}
