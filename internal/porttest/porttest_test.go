package porttest

import (
	"net"
	"testing"
)

// A port is never handed out twice in one process, even when each
// listener is closed before the next pick (as journaltest.FreeAddr does).
func TestListenNeverRepeatsAPort(t *testing.T) {
	seen := map[int]bool{}
	// Without the check, 500 picks repeat one with a probability of
	// 1 - e^-10; -count=20 still stays within the 12,000 ports.
	for range 500 {
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
