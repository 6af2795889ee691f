//go:build !unix

package connlimit

import "net"

// helloWaiting cannot peek here: a connection is silent until its reader
// has read its ClientHello.
func helloWaiting(net.Conn, *[recordHeaderLen + maxRecordLen]byte) bool { return false }
