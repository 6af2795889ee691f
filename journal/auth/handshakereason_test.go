package auth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/pact-hpc/pact/journal/connlimit"
)

func TestHandshakeRefusalReason(t *testing.T) {
	tests := []struct {
		err    error
		reason string
		counts bool
	}{
		{&connlimit.BusyError{RetryAfter: time.Second}, "", false},
		{connlimit.ErrHandshakesBusy, "", false},
		{fmt.Errorf("connlimit: waiting for the ClientHello: %w", fmt.Errorf("%w: %w", connlimit.ErrEvicted, net.ErrClosed)), "", false},
		{fmt.Errorf("%w: chain of 9 certificates", ErrForeignChain), hsForeignRoot, true},
		{fmt.Errorf("journal peer: %w", x509.UnknownAuthorityError{}), hsForeignRoot, true},
		{ErrPeerNoCertificate, hsNoCertificate, true},
		{fmt.Errorf("%w: 0A of journal j2", ErrPeerIntermediateRevoked), hsIntermediateRevoked, true},
		{fmt.Errorf("%w (pact.local)", ErrPeerNotJournal), hsNotJournal, true},
		{fmt.Errorf("journal peer: j2 from j1: %w", ErrPeerWrongIntermediate), hsWrongIntermediate, true},
		{fmt.Errorf("journal peer: %w", x509.CertificateInvalidError{Reason: x509.Expired}), hsCertInvalid, true},
		{connlimit.ErrNotTLS, hsNotTLS, true},
		{fmt.Errorf("connlimit: waiting for the ClientHello: %w", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}), hsTimeout, true},
		{io.EOF, hsClientClosed, true},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, hsClientClosed, true},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: unknown certificate authority")}, hsClientAlert, true},
		{errors.New("tls: client offered only unsupported versions"), hsTLSError, true},
	}
	for _, tt := range tests {
		reason, counts := HandshakeRefusalReason(tt.err)
		if reason != tt.reason || counts != tt.counts {
			t.Errorf("HandshakeRefusalReason(%v) = %q, %v; want %q, %v", tt.err, reason, counts, tt.reason, tt.counts)
		}
	}
}
