package journal_test

import (
	"crypto/tls"
	"net"
	"testing"

	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// A journal listening on a loopback address other than 127.0.0.1 (one
// journal per address on a test host) has that address in its server
// certificate, so the CLI and agents that dial it complete the handshake.
// Before, serverNames skipped every loopback address but 127.0.0.1 and
// ::1: its journal CA permitted the address, --check-config called the
// settings valid, and every client failed the handshake.
func TestAnotherLoopbackListenAddressIsInTheCertificate(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.11:0")
	if err != nil {
		t.Skipf("127.0.0.11 cannot be bound here: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := journaltest.Config(dir)
	cfg.ListenAddr = addr
	if err := journaltest.JournalCA(&cfg, dir); err != nil {
		t.Fatal(err)
	}
	if _, ips := journal.ServerNames(addr, nil); !containsIP(ips, net.IPv4(127, 0, 0, 11)) {
		t.Fatalf("ServerNames(%s) = %v: the listen address is missing", addr, ips)
	}
	h := journaltest.Start(t, cfg)
	c, err := tls.Dial("tcp", h.Addr, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: h.Roots, ServerName: "127.0.0.11", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("a client dialing %s: %v", h.Addr, err)
	}
	c.Close()
}

func containsIP(ips []net.IP, ip net.IP) bool {
	for _, i := range ips {
		if i.Equal(ip) {
			return true
		}
	}
	return false
}
