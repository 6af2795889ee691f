package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	"github.com/pact-hpc/pact/journal/ca"
)

// handshakeEnv is what VerifyClientHandshake reads: the domain root and an
// (empty) trust bundle, and the journal CA that signs the chains. No Raft,
// no listener.
type handshakeEnv struct {
	*Authenticator
	ca *ca.CA
}

// noIntermediates is a trust bundle with no live intermediate yet.
type noIntermediates struct{}

func (noIntermediates) LiveIntermediates() Intermediates {
	return Intermediates{Version: 1, Pool: x509.NewCertPool()}
}

func handshakeJournal(tb testing.TB) handshakeEnv {
	tb.Helper()
	dir := tb.TempDir()
	if _, err := ca.InitDev(dir, "pact.local", time.Now()); err != nil {
		tb.Fatal(err)
	}
	up, err := ca.LoadKeyFileAuthority(filepath.Join(dir, ca.RootCertFile), filepath.Join(dir, ca.RootKeyFile))
	if err != nil {
		tb.Fatal(err)
	}
	cfg := ca.DefaultConfig()
	cfg.Upstream, cfg.JournalID = up, "j1"
	authority, err := ca.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return handshakeEnv{&Authenticator{cfg: Config{Domain: authority.Domain(), Root: authority.Root(), Bundle: noIntermediates{}}}, authority}
}

// splitChain turns fuzz bytes into up to six length-prefixed certificates.
func splitChain(data []byte) [][]byte {
	var out [][]byte
	for len(data) >= 2 && len(out) < 6 {
		n := int(binary.BigEndian.Uint16(data))
		data = data[2:]
		n = min(n, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

func joinChain(certs ...[]byte) []byte {
	var out []byte
	for _, c := range certs {
		out = binary.BigEndian.AppendUint16(out, uint16(len(c)))
		out = append(out, c...)
	}
	return out
}

// FuzzVerifyClientHandshake feeds the handshake check arbitrary client
// chains (what any TCP client can send): it must never panic, and must
// accept only chains whose signatures reach the root.
func FuzzVerifyClientHandshake(f *testing.F) {
	j := handshakeJournal(f)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csrDER, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	csr, err := ca.ParseCSR(csrDER)
	if err != nil {
		f.Fatal(err)
	}
	iss, err := j.ca.SignAgent(csr, "n1")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(joinChain(iss.ChainDER...))
	f.Add(joinChain(iss.DER))
	f.Add(joinChain(j.ca.Root().Raw))
	f.Add(joinChain(iss.DER, iss.DER, iss.DER))
	f.Add([]byte{0, 3, 1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := splitChain(data)
		err := j.VerifyClientHandshake(raw, nil)
		if err != nil || len(raw) == 0 {
			return
		}
		leaf, perr := x509.ParseCertificate(raw[0])
		if perr != nil {
			t.Fatalf("accepted an unparsable leaf")
		}
		var pool []*x509.Certificate
		for _, d := range raw[1:] {
			c, perr := x509.ParseCertificate(d)
			if perr != nil {
				t.Fatalf("accepted a chain with an unparsable certificate")
			}
			pool = append(pool, c)
		}
		if !chainsTo(leaf, []*x509.Certificate{j.ca.Root()}, nil, pool, j.cfg.Bundle.LiveIntermediates().Certs) {
			t.Fatalf("accepted a chain that does not reach the root")
		}
	})
}

func TestVerifyClientHandshake(t *testing.T) {
	j := handshakeJournal(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csrDER, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	csr, _ := ca.ParseCSR(csrDER)
	iss, err := j.ca.SignAgent(csr, "n1")
	if err != nil {
		t.Fatal(err)
	}
	other := handshakeJournal(t)
	foreign, err := other.ca.SignAgent(csr, "n1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		raw  [][]byte
		ok   bool
	}{
		{"no certificate (Enroll)", nil, true},
		{"agent chain with its intermediate", iss.ChainDER, true},
		{"agent leaf alone, intermediate not in the bundle", [][]byte{iss.DER}, false},
		{"chain of another root", foreign.ChainDER, false},
		{"our intermediate under a foreign leaf", [][]byte{foreign.DER, iss.ChainDER[1]}, false},
		{"garbage", [][]byte{{1, 2, 3}}, false},
		{"too long", [][]byte{iss.DER, iss.ChainDER[1], iss.ChainDER[1], iss.ChainDER[1], iss.ChainDER[1], iss.ChainDER[1]}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := j.VerifyClientHandshake(tc.raw, nil)
			if (err == nil) != tc.ok {
				t.Errorf("VerifyClientHandshake = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// BenchmarkVerifyClientHandshake is the cost the handshake check adds to an
// agent's mTLS handshake (leaf and intermediate sent, the intermediate
// already known to be root-signed).
func BenchmarkVerifyClientHandshake(b *testing.B) {
	j := handshakeJournal(b)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csrDER, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	csr, _ := ca.ParseCSR(csrDER)
	iss, err := j.ca.SignAgent(csr, "n1")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := j.VerifyClientHandshake(iss.ChainDER, nil); err != nil {
			b.Fatal(err)
		}
	}
}
