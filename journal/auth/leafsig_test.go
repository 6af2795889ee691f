package auth

import (
	"crypto/x509"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/pki"
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

// The fact a first call takes from the handshake is about the leaf and
// the issuer exactly, byte for byte. An intermediate of the same subject
// and key identifier as the one that signed a leaf, but another key,
// does not inherit its check: the leaf is verified under it in full, and
// refused. Nor does a copy of a recorded leaf whose signature was
// altered: it is another certificate, and its signature is checked.
func TestLeafSignatureRecordIsKeyedOnBothCertificates(t *testing.T) {
	s := newChainSet()
	leaf := s.inter.Agent("n1")
	id, err := pki.IdentityOf(leaf.Cert)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("another issuer of the same name", func(t *testing.T) {
		twin := twinOf(s.inter, s.jca)
		bundle := bundleOf(s.jca.Cert, twin)
		a, _, _ := newChainAuth(t, bundle, s.root.Cert)
		if issuerIn(leaf.Cert, bundle.LiveIntermediates().Certs) != twin {
			t.Fatal("the twin is not taken for the leaf's issuer: the test proves nothing")
		}
		// The client sends the real intermediate: the handshake passes
		// and records the leaf under it.
		if err := a.VerifyClientHandshake(leaf.DER(), nil); err != nil {
			t.Fatal(err)
		}
		if !a.signed.has(leaf.Cert, s.inter.Cert) {
			t.Fatal("the handshake recorded nothing")
		}
		if chain := a.fastVerify(leaf.Cert, id.Kind, bundle.LiveIntermediates(), time.Now()); chain != nil {
			t.Fatal("a leaf recorded under one intermediate was accepted under another of the same name")
		}
		if err := a.verifyClient(leaf.Cert, id, &chainVerdict{}); !errors.Is(err, ErrUnknownIssuer) {
			t.Fatalf("verifyClient: %v, want %v", err, ErrUnknownIssuer)
		}
	})

	t.Run("a recorded leaf with another signature", func(t *testing.T) {
		a, _, _ := newChainAuth(t, s.bundle, s.root.Cert, s.root2.Cert)
		if err := a.VerifyClientHandshake(leaf.DER(), nil); err != nil {
			t.Fatal(err)
		}
		forged := withBrokenSignature(t, leaf.Cert)
		if chain := a.fastVerify(forged, id.Kind, s.bundle.LiveIntermediates(), time.Now()); chain != nil {
			t.Fatal("a leaf whose signature was altered was accepted on the record of the original")
		}
		if err := a.verifyClient(forged, id, &chainVerdict{}); err == nil {
			t.Fatal("verifyClient accepted a leaf whose signature was altered")
		}
		if !a.signed.has(leaf.Cert, s.inter.Cert) {
			t.Fatal("the original's record was used up by another certificate")
		}
	})
}

// The fast path takes the handshake's word for the leaf's signature. To
// show it does, the record here is false: a leaf whose signature does not
// verify, recorded as if a handshake had checked it. The first call
// accepts it (no signature check was made), once (the record is used up),
// and not at all where anything else is wrong (here, its validity). Were
// the signature checked again, this test would fail.
func TestFastVerifyTakesTheHandshakesWordForTheSignature(t *testing.T) {
	s := newChainSet()
	a, _, _ := newChainAuth(t, s.bundle, s.root.Cert, s.root2.Cert)
	leaf := s.inter.Agent("n1").Cert
	forged := withBrokenSignature(t, leaf)
	bundle := s.bundle.LiveIntermediates()
	now := time.Now()
	if a.fastVerify(forged, pki.KindAgent, bundle, now) != nil {
		t.Fatal("a leaf whose signature does not verify was accepted with no record")
	}
	a.signed.add(forged, s.inter.Cert)
	if a.fastVerify(forged, pki.KindAgent, bundle, now) == nil {
		t.Fatal("the leaf's signature was checked again after the handshake's record of it")
	}
	if a.fastVerify(forged, pki.KindAgent, bundle, now) != nil {
		t.Fatal("the handshake's record served a second time")
	}
	a.signed.add(forged, s.inter.Cert)
	if a.fastVerify(forged, pki.KindAgent, bundle, leaf.NotAfter.Add(time.Second)) != nil {
		t.Fatal("an expired leaf was accepted on the handshake's record")
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

// twinOf makes, signed by parent, an intermediate with inter's subject and
// key identifier and constraints but a key of its own: what a leaf
// signed by inter names as its issuer, and cannot verify under.
func twinOf(inter, parent *chaintest.CA) *x509.Certificate {
	tmpl := *inter.Cert
	tmpl.SerialNumber = nil
	return parent.Issue(&tmpl).Cert
}

// withBrokenSignature returns leaf with the last byte of its signature
// changed: the same certificate to every parser, another to its
// signature check and its hash.
func withBrokenSignature(t *testing.T, leaf *x509.Certificate) *x509.Certificate {
	t.Helper()
	der := append([]byte(nil), leaf.Raw...)
	der[len(der)-1] ^= 1
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
