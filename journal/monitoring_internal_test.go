package journal

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
		{fmt.Errorf("%w: chain of 9 certificates", errForeignChain), hsForeignRoot, true},
		{fmt.Errorf("journal peer: %w", x509.UnknownAuthorityError{}), hsForeignRoot, true},
		{errPeerNoCertificate, hsNoCertificate, true},
		{fmt.Errorf("%w: 0A of journal j2", errPeerIntermediateRevoked), hsIntermediateRevoked, true},
		{fmt.Errorf("%w (pact.local)", errPeerNotJournal), hsNotJournal, true},
		{fmt.Errorf("journal peer: %w", x509.CertificateInvalidError{Reason: x509.Expired}), hsCertInvalid, true},
		{connlimit.ErrNotTLS, hsNotTLS, true},
		{fmt.Errorf("connlimit: waiting for the ClientHello: %w", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}), hsTimeout, true},
		{io.EOF, hsClientClosed, true},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, hsClientClosed, true},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: unknown certificate authority")}, hsClientAlert, true},
		{errors.New("tls: client offered only unsupported versions"), hsTLSError, true},
	}
	for _, tt := range tests {
		reason, counts := handshakeRefusalReason(tt.err)
		if reason != tt.reason || counts != tt.counts {
			t.Errorf("handshakeRefusalReason(%v) = %q, %v; want %q, %v", tt.err, reason, counts, tt.reason, tt.counts)
		}
	}
}

func TestStreamDropReason(t *testing.T) {
	for _, tt := range []struct {
		decided string
		err     error
		want    string
	}{
		{"", nil, dropClientGone},
		{dropCertExpired, fmt.Errorf("%w: expired", ErrUnauthenticated), dropCertExpired},
		{"", fmt.Errorf("%w: node n1 was decommissioned", errNodeRevoked), dropNodeRevoked},
		{"", fencedError("n1"), dropNodeFenced},
		{"", fmt.Errorf("%w: replaced", errStale), dropSuperseded},
		{"", fmt.Errorf("%w: node n1 is not in the registry", ErrPermission), dropOther},
		{dropShutdown, fmt.Errorf("%w: journal shutting down", ErrNoLeader), dropShutdown},
	} {
		if got := streamDropReason(tt.decided, tt.err); got != tt.want {
			t.Errorf("streamDropReason(%q, %v) = %q, want %q", tt.decided, tt.err, got, tt.want)
		}
	}
}

// Node certificates: the earliest expiry, overdue past five sixths of each
// one's own lifetime (a 3-day certificate and a 1-hour SVID alike), expired.
func TestNodeCertExpiry(t *testing.T) {
	const now = 1_000_000
	e := nodeCertExpiry{now: now}
	day := int64(24 * 3600)
	e.add(now-day, now+2*day)       // a 3-day certificate, a day in: fine
	e.add(now-3*day+3600, now+3600) // a 3-day certificate, an hour left: overdue
	e.add(now-1800, now+1800)       // a 1-hour SVID, half left: fine
	e.add(now-3060, now+540)        // a 1-hour SVID, 9 minutes left: overdue (a sixth is 10)
	e.add(now-3*day-60, now-60)     // expired a minute ago
	if e.overdue != 2 || e.expired != 1 || e.earliest != now-60 {
		t.Errorf("overdue %d, expired %d, earliest %d; want 2, 1, %d", e.overdue, e.expired, e.earliest, now-60)
	}
}
