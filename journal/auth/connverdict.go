package auth

import (
	"crypto/x509"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// connAuthInfo is the gRPC port's AuthInfo: the TLS state, and what this
// connection's client chain was found to be the first time a call
// verified it. gRPC hands every call on a connection the same AuthInfo, so
// an agent's Ping and Subscribe (and a renewal's calls) verify its chain
// once, not once per call: two ECDSA verifications each.
type connAuthInfo struct {
	credentials.TLSInfo
	verdict *chainVerdict
}

// tlsInfoOf returns the TLS state of a call's AuthInfo and, on the gRPC
// port, its connection's verdict (nil elsewhere: verify every time).
func tlsInfoOf(ai credentials.AuthInfo) (credentials.TLSInfo, *chainVerdict, bool) {
	switch v := ai.(type) {
	case connAuthInfo:
		return v.TLSInfo, v.verdict, true
	case credentials.TLSInfo:
		return v, nil, true
	}
	return credentials.TLSInfo{}, nil, false
}

// chainVerdict remembers that a connection's client chain verified, against
// which version of the trust bundle and for which span of the journal's
// clock. A call reuses it only while both still hold: a retired or revoked
// intermediate changes the bundle's version, and a clock outside the span
// (the certificate expired, or the clock stepped back) verifies afresh.
// Failures are not remembered: each refused call says why, at its clock.
// Revocation of the certificate itself and the registry binding are not
// part of it; authenticate checks them on every call. It keeps the chain
// that verified: whether an operator credential was signed by a root
// itself or by a journal intermediate decides how it may be recorded
// (checkOperator).
type chainVerdict struct {
	mu          sync.Mutex
	ok          bool
	version     uint64
	from, until time.Time
	chain       []*x509.Certificate
}

// verified is the chain (leaf first, a root last) a verification against
// bundle version at now is already known to yield, or nil.
func (v *chainVerdict) verified(version uint64, now time.Time) []*x509.Certificate {
	if v == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ok && v.version == version && !now.Before(v.from) && now.Before(v.until) {
		return v.chain
	}
	return nil
}

// remember records that chain verified against bundle version: it stays
// valid while every certificate in it is.
func (v *chainVerdict) remember(version uint64, chain []*x509.Certificate) {
	if v == nil || len(chain) == 0 {
		return
	}
	from, until := chain[0].NotBefore, chain[0].NotAfter
	for _, c := range chain[1:] {
		if c.NotBefore.After(from) {
			from = c.NotBefore
		}
		if c.NotAfter.Before(until) {
			until = c.NotAfter
		}
	}
	v.mu.Lock()
	v.ok, v.version, v.from, v.until, v.chain = true, version, from, until, chain
	v.mu.Unlock()
}
