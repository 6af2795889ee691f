package sdnotify_test

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/sdnotify"
)

// listen is what systemd does: a unixgram socket the service writes to.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func read(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listen(t, path)
	n := sdnotify.Notifier{Socket: path}
	if err := n.Notify(sdnotify.Ready, "STATUS=serving"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, c); got != "READY=1\nSTATUS=serving\n" {
		t.Errorf("got %q", got)
	}
	if err := n.Notify(sdnotify.Reloading); err != nil {
		t.Fatal(err)
	}
	if got := read(t, c); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") || strings.HasSuffix(got, "MONOTONIC_USEC=0\n") {
		t.Errorf("got %q", got)
	}
}

func TestNotifyAbstract(t *testing.T) {
	name := "@pact-sdnotify-test-" + filepath.Base(t.TempDir())
	c := listen(t, name)
	if err := (sdnotify.Notifier{Socket: name}).Notify(sdnotify.Stopping); err != nil {
		t.Fatal(err)
	}
	if got := read(t, c); got != "STOPPING=1\n" {
		t.Errorf("got %q", got)
	}
}

func TestNotifyOff(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n := sdnotify.FromEnv()
	if n.Enabled() || n.Notify(sdnotify.Ready) != nil {
		t.Error("without NOTIFY_SOCKET, Notify must do nothing")
	}
	if err := (sdnotify.Notifier{Socket: "vsock:2:99"}).Notify(sdnotify.Ready); !errors.Is(err, sdnotify.ErrBadSocket) {
		t.Errorf("vsock: %v", err)
	}
	if err := (sdnotify.Notifier{Socket: filepath.Join(t.TempDir(), "absent")}).Notify(sdnotify.Ready); err == nil {
		t.Error("a socket nobody listens on must be an error")
	}
}
