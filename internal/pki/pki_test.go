package pki

import (
	"crypto/x509"
	"errors"
	"net/url"
	"testing"
)

func TestIdentityRoundTrip(t *testing.T) {
	for _, id := range []Identity{
		{Kind: KindAgent, Name: "node-001", Domain: "pact.local"},
		{Kind: KindJournal, Name: "j1", Domain: "site.example"},
		{Kind: KindAdmin, Name: "alice", Domain: "pact.local"},
	} {
		cert := &x509.Certificate{URIs: []*url.URL{id.SPIFFEID()}}
		got, err := IdentityOf(cert)
		if err != nil || got != id {
			t.Errorf("IdentityOf(%v) = %v, %v", id.SPIFFEID(), got, err)
		}
	}
	if got := (Identity{Kind: KindAgent, Name: "n1", Domain: "d"}).CommonName(); got != "pact-service-agent/n1@d" {
		t.Errorf("agent CN = %q", got)
	}
}

func TestIdentityOfRejectsForeign(t *testing.T) {
	for _, raw := range []string{"spiffe://d/other/x", "spiffe://d/pact-agent", "spiffe://d/pact-agent/a/b", "https://d/pact-agent/x"} {
		u, _ := url.Parse(raw)
		if _, err := IdentityOf(&x509.Certificate{URIs: []*url.URL{u}}); !errors.Is(err, ErrNotPactIdent) {
			t.Errorf("IdentityOf(%s) err = %v, want ErrNotPactIdent", raw, err)
		}
	}
}

func TestValidateName(t *testing.T) {
	good := []string{"n1", "node-001", "rack3.node_7", "A"}
	bad := []string{"", "-x", ".x", "a/b", "a b", "=cmd()", string(make([]byte, 64))}
	for _, s := range good {
		if err := ValidateName("node id", s); err != nil {
			t.Errorf("ValidateName(%q) = %v", s, err)
		}
	}
	for _, s := range bad {
		if err := ValidateName("node id", s); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", s, err)
		}
	}
}

func TestNewSerialIs128Bit(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		s, err := NewSerial()
		if err != nil {
			t.Fatal(err)
		}
		if s.Sign() <= 0 || s.BitLen() > 128 || s.BitLen() < 96 {
			t.Fatalf("serial %x: sign %d bitlen %d", s, s.Sign(), s.BitLen())
		}
		h := SerialHex(s)
		if seen[h] {
			t.Fatalf("duplicate serial %s", h)
		}
		seen[h] = true
	}
}

// CertFingerprint writes the SHA-256 of the DER as openssl x509
// -fingerprint -sha256 does, so an operator can compare the two.
func TestCertFingerprint(t *testing.T) {
	cert := &x509.Certificate{Raw: []byte("abc")}
	// SHA-256("abc"), FIPS 180-2's example.
	want := "BA:78:16:BF:8F:01:CF:EA:41:41:40:DE:5D:AE:22:23:B0:03:61:A3:96:17:7A:9C:B4:10:FF:61:F2:00:15:AD"
	if got := CertFingerprint(cert); got != want {
		t.Errorf("CertFingerprint = %s, want %s", got, want)
	}
}
