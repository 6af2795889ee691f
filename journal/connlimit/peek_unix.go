//go:build unix

package connlimit

import (
	"net"
	"syscall"
)

// helloWaiting reports whether a whole first TLS record (a ClientHello)
// is waiting unread in c's socket: a client that has spoken, though the
// goroutine that will read it has not run yet. It peeks without blocking
// and without the connection's read lock (which its reader holds while it
// waits), into buf.
func helloWaiting(c net.Conn, buf *[recordHeaderLen + maxRecordLen]byte) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n, perr := 0, error(nil)
	if err := rc.Control(func(fd uintptr) {
		n, _, perr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil || perr != nil {
		return false
	}
	return wholeRecord(buf[:n])
}
