package auth

import (
	"crypto/sha256"
	"crypto/x509"
	"sync"
)

// The TLS handshake checks an agent's leaf signature under its journal
// intermediate (VerifyClientHandshake); the connection's first call checked
// the same signature again when it verified the chain (fastVerify), one
// ECDSA verification per new connection for nothing. leafSigs carries the
// handshake's result to that call.
//
// What it holds is a fact about two byte strings: CheckSignatureFrom
// accepted the leaf of this exact DER under the issuer of this exact DER.
// That result depends on nothing else (the leaf's signed bytes, algorithm
// and signature; the issuer's key, CA flag and key usage, all inside the
// two encodings) and not on time, so it holds for as long as it is kept.
// Both halves of the key are SHA-256 of the whole DER: a leaf that differs
// anywhere, its signature included, or an issuer of the same name and key
// identifier but another key, is another key of the map, and is checked in
// full.

// maxLeafSigs bounds leafSigs. A fact is needed from a handshake to the
// connection's first call, a moment later; thousands cover the handshakes
// of a storm whose first calls wait behind them for the CPU. Past the
// bound the oldest are forgotten, and their first calls check the
// signature themselves.
const maxLeafSigs = 4096

// leafSigKey is the SHA-256 of a leaf's DER and of its issuer's.
type leafSigKey [2][sha256.Size]byte

func leafSigKeyOf(leaf, issuer *x509.Certificate) leafSigKey {
	return leafSigKey{sha256.Sum256(leaf.Raw), sha256.Sum256(issuer.Raw)}
}

// leafSigs is the set of (leaf, issuer) pairs a handshake found signed, at
// most maxLeafSigs of them, the oldest forgotten first; each is used once.
// A nil *leafSigs remembers nothing.
type leafSigs struct {
	mu sync.Mutex
	// m maps a pair to its place in order, the sequence number it was
	// added with.
	m map[leafSigKey]uint64
	// order holds the pairs by sequence number modulo maxLeafSigs; next
	// is the next sequence number. A pair whose slot is reused is
	// forgotten unless it was added again since.
	order []leafSigKey
	next  uint64
}

func newLeafSigs() *leafSigs {
	return &leafSigs{m: make(map[leafSigKey]uint64), order: make([]leafSigKey, maxLeafSigs)}
}

// add records that leaf's signature verified under issuer (CheckSignatureFrom).
func (s *leafSigs) add(leaf, issuer *x509.Certificate) {
	if s == nil {
		return
	}
	k := leafSigKeyOf(leaf, issuer)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[k]; ok {
		return
	}
	slot := s.next % maxLeafSigs
	if s.next >= maxLeafSigs {
		old := s.order[slot]
		if seq, ok := s.m[old]; ok && seq == s.next-maxLeafSigs {
			delete(s.m, old)
		}
	}
	s.order[slot] = k
	s.m[k] = s.next
	s.next++
}

// take reports whether a handshake found leaf signed by issuer, and
// forgets it: the first call's verdict serves the connection's later
// calls (connverdict.go), and another connection's handshake records it
// again.
func (s *leafSigs) take(leaf, issuer *x509.Certificate) bool {
	if s == nil {
		return false
	}
	k := leafSigKeyOf(leaf, issuer)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[k]; !ok {
		return false
	}
	delete(s.m, k)
	return true
}
