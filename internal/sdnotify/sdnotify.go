// Package sdnotify tells systemd about a service's state (sd_notify(3))
// without cgo: one datagram to the socket named by $NOTIFY_SOCKET. A unit
// with Type=notify waits for Ready before it counts the service as
// started; Reloading and Stopping keep `systemctl` honest during a SIGHUP
// reload and a shutdown.
//
// Outside systemd (no NOTIFY_SOCKET) every call does nothing, so the
// binaries call it unconditionally.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// The states pact sends (sd_notify(3)).
const (
	Ready     = "READY=1"
	Stopping  = "STOPPING=1"
	Reloading = "RELOADING=1"
)

// Notifier sends state lines to one socket.
type Notifier struct {
	// Socket is the NOTIFY_SOCKET path; "@name" is an abstract socket.
	// Empty: Notify does nothing.
	Socket string
}

// FromEnv is the notifier for this process: $NOTIFY_SOCKET, if set.
func FromEnv() Notifier { return Notifier{Socket: os.Getenv("NOTIFY_SOCKET")} }

// ErrBadSocket is returned for a NOTIFY_SOCKET this package cannot use
// (systemd only hands out unix sockets; vsock is not supported).
var ErrBadSocket = errors.New("sdnotify: NOTIFY_SOCKET is not a unix socket path")

// Notify sends the state lines as one datagram, e.g. Notify(Ready,
// "STATUS=serving"). RELOADING=1 gets the MONOTONIC_USEC systemd 253+
// wants with it (older systemd ignores the extra line).
func (n Notifier) Notify(states ...string) error {
	if n.Socket == "" {
		return nil
	}
	addr := n.Socket
	switch {
	case strings.HasPrefix(addr, "@"):
		addr = "\x00" + addr[1:]
	case strings.HasPrefix(addr, "/"):
	default:
		return fmt.Errorf("%w: %q", ErrBadSocket, n.Socket)
	}
	for _, s := range states {
		if s == Reloading {
			states = append(states, fmt.Sprintf("MONOTONIC_USEC=%d", monotonicUsec()))
			break
		}
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(states, "\n") + "\n")); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	return nil
}
