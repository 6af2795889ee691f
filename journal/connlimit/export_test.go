package connlimit

import (
	"net"
	"net/netip"
)

// HelloWaiting reports whether a whole ClientHello waits unread in the
// socket of c, a connection the limiter's listener accepted.
func HelloWaiting(c net.Conn) bool {
	var buf [recordHeaderLen + maxRecordLen]byte
	return helloWaiting(c.(*conn).Conn, &buf)
}

// AdmitReporting is Admit with the release AdmitHandshake returns, which
// says whether the handshake succeeded.
func (l *Limiter) AdmitReporting() (release func(ok bool), err error) {
	s, err := l.admit(netip.Addr{})
	if err != nil {
		return nil, err
	}
	return l.releaser(s), nil
}

// AdmitFrom is Admit for a client from src.
func (l *Limiter) AdmitFrom(src netip.Addr) (release func(), err error) {
	s, err := l.admit(src)
	if err != nil {
		return nil, err
	}
	return l.okReleaser(s), nil
}

// BusyInARow is how many busy answers in a row src has had.
func (l *Limiter) BusyInARow(src netip.Addr) int {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	return l.bounced[src].answers
}

// IsVouched reports whether src is vouched for now.
func (l *Limiter) IsVouched(src netip.Addr) bool { return l.vouched(src) }
