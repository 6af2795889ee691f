package auth

import (
	"crypto/x509"
	"encoding/binary"
	"testing"
)

// has reports whether s holds the pair, without using it up.
func (s *leafSigs) has(leaf, issuer *x509.Certificate) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[leafSigKeyOf(leaf, issuer)]
	return ok
}

func (s *leafSigs) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// A handshake that proves a chain records the leaf's signature under the
// certificate that made it, the one the client sent or the bundle's; a
// refused handshake records nothing.
func TestHandshakeRecordsTheLeafSignature(t *testing.T) {
	s := newChainSet()
	a, _, _ := newChainAuth(t, s.bundle, s.root.Cert, s.root2.Cert)
	sent := s.inter.Agent("n1")
	alone := s.inter.Agent("n2")
	for _, raw := range [][][]byte{sent.DER(), {alone.Cert.Raw}} {
		if err := a.VerifyClientHandshake(raw, nil); err != nil {
			t.Fatal(err)
		}
	}
	if !a.signed.has(sent.Cert, s.inter.Cert) || !a.signed.has(alone.Cert, s.inter.Cert) {
		t.Fatalf("after the handshakes: chain sent whole recorded %v, leaf sent alone recorded %v; want both",
			a.signed.has(sent.Cert, s.inter.Cert), a.signed.has(alone.Cert, s.inter.Cert))
	}
	foreign := newChainSet().inter.Agent("n3")
	if err := a.VerifyClientHandshake(foreign.DER(), nil); err == nil {
		t.Fatal("a foreign chain passed the handshake")
	}
	if a.signed.has(foreign.Cert, foreign.Chain[1]) || a.signed.len() != 2 {
		t.Fatalf("a refused handshake was recorded (%d pairs held)", a.signed.len())
	}
}

// The record holds at most maxLeafSigs pairs, forgets the oldest first,
// serves each once, and a pair recorded again after its use is kept as
// new.
func TestLeafSignatureRecordBounded(t *testing.T) {
	s := newLeafSigs()
	issuer := &x509.Certificate{Raw: []byte("issuer")}
	leaf := func(i int) *x509.Certificate {
		return &x509.Certificate{Raw: binary.BigEndian.AppendUint64([]byte("leaf"), uint64(i))}
	}
	const extra = 100
	for i := range maxLeafSigs + extra {
		s.add(leaf(i), issuer)
		if n := s.len(); n > maxLeafSigs {
			t.Fatalf("after %d pairs the record holds %d, bound %d", i+1, n, maxLeafSigs)
		}
	}
	if s.has(leaf(extra-1), issuer) || !s.has(leaf(extra), issuer) || !s.has(leaf(maxLeafSigs+extra-1), issuer) {
		t.Fatal("not the oldest pairs forgotten")
	}
	// Used, and recorded again: it lives as long as a new pair, though
	// its first slot is reused sooner.
	used := leaf(extra + 10)
	if !s.take(used, issuer) || s.take(used, issuer) {
		t.Fatal("a pair served other than once")
	}
	s.add(used, issuer)
	for i := range maxLeafSigs - 1 {
		s.add(leaf(maxLeafSigs+extra+i), issuer)
	}
	if !s.has(used, issuer) {
		t.Fatal("a pair recorded again was forgotten with its first slot")
	}
	if s.len() > maxLeafSigs {
		t.Fatalf("the record holds %d, bound %d", s.len(), maxLeafSigs)
	}
	s.add(leaf(2*maxLeafSigs+extra), issuer)
	if s.has(used, issuer) {
		t.Fatal("a pair outlived maxLeafSigs newer ones")
	}
	var none *leafSigs
	none.add(leaf(0), issuer)
	if none.take(leaf(0), issuer) {
		t.Fatal("a nil record remembered")
	}
}
