package journal_test

import (
	"crypto/tls"
	"testing"

	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// The journal's listener picks the key exchange its --key-exchange names
// when the client offers it, and X25519 with any client that offers only
// that, so agents and journals set differently still connect.
func TestKeyExchange(t *testing.T) {
	tests := []struct {
		name    string
		journal transport.KeyExchange
		client  []tls.CurveID // nil: Go's default offer
		want    tls.CurveID
	}{
		{"default journal, Go-default client", transport.Classical, nil, tls.X25519},
		{"default journal, agent default", transport.Classical, transport.Classical.Curves(), tls.X25519},
		{"default journal, hybrid agent", transport.Classical, transport.Hybrid.Curves(), tls.X25519},
		{"hybrid journal, Go-default client", transport.Hybrid, nil, tls.X25519MLKEM768},
		{"hybrid journal, hybrid agent", transport.Hybrid, transport.Hybrid.Curves(), tls.X25519MLKEM768},
		{"hybrid journal, agent default", transport.Hybrid, transport.Classical.Curves(), tls.X25519},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := journaltest.Config(t.TempDir())
			cfg.KeyExchange = tc.journal
			h := journaltest.Start(t, cfg)
			conn, err := tls.Dial("tcp", h.Addr, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: h.Roots, NextProtos: []string{"h2"}, CurvePreferences: tc.client})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			st := conn.ConnectionState()
			if st.CurveID != tc.want {
				t.Errorf("negotiated %v, want %v", st.CurveID, tc.want)
			}
			if st.DidResume {
				t.Error("a fresh connection resumed a session")
			}
		})
	}
}

func TestKeyExchangeConfigRefusesUnknown(t *testing.T) {
	cfg := journaltest.Config(t.TempDir())
	cfg.KeyExchange = "p256"
	if err := cfg.Validate(); err == nil {
		t.Fatal("Validate accepted key exchange p256")
	}
}
