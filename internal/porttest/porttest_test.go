package porttest

import (
	"net"
	"testing"
)

// A port is never handed out twice in one process, even when each
// listener is closed before the next pick (as journaltest.FreeAddr does).
func TestListenNeverRepeatsAPort(t *testing.T) {
	seen := map[int]bool{}
	// Far more picks than the 1-in-12,000 chance of a repeat needs to show.
	for range 3000 {
		l, err := Listen()
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}
