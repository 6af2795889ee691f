// Package identity is where a pact node gets its mTLS identity from.
//
// Three sources can supply one, ranked best first:
//
//  1. SPIRE: an X.509-SVID from the local SPIRE agent's Workload API
//     (package identity/spire).
//  2. journal: the certificate the pact journal signed for this node's own
//     key at Enroll or RenewCert (JournalProvider, filled by the agent).
//  3. static: the bootstrap certificate baked into the node image
//     (package identity/static), used before either of the others is there.
//
// Each source is a Provider. A Cascade holds one provider per source and
// answers with the best identity available now; it is itself a Provider, and
// its Changes channel tells its user when to ask again (an SVID rotated,
// SPIRE appeared or went away, a certificate expired).
//
// This package does not speak to a journal. The agent makes the Enroll and
// RenewCert calls and hands the journal provider the certificate they
// return (JournalProvider.Set); the live channel that presents the
// cascade's identity, and moves between identities without a gap, is the
// agent's (package agent/channel).
//
// An Identity's private key never prints: String, every fmt verb, slog and
// JSON show only its source, SPIFFE ID, serial and not_after. Nothing in
// this package or its sub-packages writes an identity anywhere.
package identity

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
)

// Source names where an identity came from. Sources are ranked: SPIRE over
// journal over static.
type Source string

// The sources a cascade knows.
const (
	SourceSPIRE   Source = "spire"
	SourceJournal Source = "journal"
	SourceStatic  Source = "static"
)

// Rank orders sources: the higher, the better. An unknown source ranks 0.
func (s Source) Rank() int {
	switch s {
	case SourceSPIRE:
		return 3
	case SourceJournal:
		return 2
	case SourceStatic:
		return 1
	}
	return 0
}

// Identity is one X.509 identity: a certificate chain, its private key and
// the trust anchors that go with it. Hold it by pointer and do not modify it:
// providers hand the same *Identity to every caller.
//
// The key never prints. String, GoString, Format (every fmt verb), LogValue
// and MarshalJSON show the source, SPIFFE ID, serial and not_after only.
// They have value receivers (LogValue aside, see there) so that a
// dereferenced Identity is covered too.
type Identity struct {
	// Source is where the identity came from.
	Source Source
	// Chain is the certificate chain, leaf first.
	Chain []*x509.Certificate
	// Key is the leaf's private key. It never prints.
	Key crypto.Signer
	// Bundle holds the trust anchors that came with the identity: the SPIRE
	// trust domain's bundle, the journal's trust bundle, or the bootstrap
	// bundle file. It may be empty.
	Bundle []*x509.Certificate
	// NotAfter is when the chain stops being usable: the earliest not_after
	// of the certificates in Chain.
	NotAfter time.Time
	// SPIFFEID is the leaf's spiffe:// URI SAN, or empty when it has none.
	SPIFFEID string
}

// New builds an Identity from a chain (leaf first), the leaf's private key and
// a trust bundle, after checking that the key belongs to the leaf. It copies
// the slices and fills NotAfter and SPIFFEID from the chain.
func New(src Source, chain []*x509.Certificate, key crypto.Signer, bundle []*x509.Certificate) (*Identity, error) {
	if src.Rank() == 0 {
		return nil, fmt.Errorf("identity: unknown source %q (want spire, journal or static)", src)
	}
	if len(chain) == 0 || chain[0] == nil {
		return nil, errors.New("identity: no certificate")
	}
	for i, c := range chain {
		if c == nil {
			return nil, fmt.Errorf("identity: certificate %d of the chain is missing", i)
		}
	}
	for i, c := range bundle {
		if c == nil {
			return nil, fmt.Errorf("identity: bundle certificate %d is missing", i)
		}
	}
	if key == nil {
		return nil, errors.New("identity: no private key")
	}
	if !KeyMatches(chain[0], key) {
		return nil, errors.New("identity: the private key does not belong to the leaf certificate")
	}
	notAfter := chain[0].NotAfter
	for _, c := range chain[1:] {
		if c.NotAfter.Before(notAfter) {
			notAfter = c.NotAfter
		}
	}
	id := &Identity{
		Source:   src,
		Chain:    append([]*x509.Certificate(nil), chain...),
		Key:      key,
		Bundle:   append([]*x509.Certificate(nil), bundle...),
		NotAfter: notAfter,
	}
	for _, u := range chain[0].URIs {
		if u.Scheme == "spiffe" {
			id.SPIFFEID = u.String()
			break
		}
	}
	return id, nil
}

// KeyMatches reports whether key is the private key of cert.
func KeyMatches(cert *x509.Certificate, key crypto.Signer) bool {
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

// Expired reports whether the identity is past its NotAfter at now.
func (id Identity) Expired(now time.Time) bool { return now.After(id.NotAfter) }

// Serial is the leaf's serial in pact's canonical hex form, or "" when the
// identity has no certificate.
func (id Identity) Serial() string {
	if len(id.Chain) == 0 || id.Chain[0] == nil || id.Chain[0].SerialNumber == nil {
		return ""
	}
	return pki.SerialHex(id.Chain[0].SerialNumber)
}

// TLSCertificate returns the chain and key for tls.Config.Certificates or
// GetClientCertificate.
func (id Identity) TLSCertificate() tls.Certificate {
	der := make([][]byte, len(id.Chain))
	for i, c := range id.Chain {
		der[i] = c.Raw
	}
	var leaf *x509.Certificate
	if len(id.Chain) > 0 {
		leaf = id.Chain[0]
	}
	return tls.Certificate{Certificate: der, PrivateKey: id.Key, Leaf: leaf}
}

// BundlePool returns Bundle as a pool, for tls.Config.RootCAs or ClientCAs.
func (id Identity) BundlePool() *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range id.Bundle {
		pool.AddCert(c)
	}
	return pool
}

func (id Identity) notAfterText() string {
	if id.NotAfter.IsZero() {
		return ""
	}
	return id.NotAfter.UTC().Format(time.RFC3339)
}

// String shows the public parts: source, SPIFFE ID, serial and not_after.
func (id Identity) String() string {
	return fmt.Sprintf("identity{source=%s spiffe_id=%s serial=%s not_after=%s}",
		id.Source, id.SPIFFEID, id.Serial(), id.notAfterText())
}

// GoString serves %#v; the key shows as <redacted>.
func (id Identity) GoString() string {
	return fmt.Sprintf("identity.Identity{Source:%q, SPIFFEID:%q, Serial:%q, NotAfter:%q, Key:<redacted>}",
		id.Source, id.SPIFFEID, id.Serial(), id.notAfterText())
}

// Format makes every fmt verb print String (GoString for %#v, quoted for
// %q), so no verb or flag reaches the key.
func (id Identity) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		_, _ = io.WriteString(f, id.GoString())
	case verb == 'q':
		_, _ = io.WriteString(f, strconv.Quote(id.String()))
	default:
		_, _ = io.WriteString(f, id.String())
	}
}

// LogValue is what slog records: a group of the public parts. Unlike the
// other methods it has a pointer receiver, so that a nil *Identity logs as
// "<nil>"; an Identity value is logged through Format or MarshalJSON, which
// redact the key just the same.
func (id *Identity) LogValue() slog.Value {
	if id == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(
		slog.String(logkey.Source, string(id.Source)),
		slog.String(logkey.SPIFFEID, id.SPIFFEID),
		slog.String(logkey.Serial, id.Serial()),
		slog.String(logkey.NotAfter, id.notAfterText()),
	)
}

// MarshalJSON encodes the public parts only; there is no way back.
func (id Identity) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Source   Source `json:"source"`
		SPIFFEID string `json:"spiffe_id,omitempty"`
		Serial   string `json:"serial"`
		NotAfter string `json:"not_after"`
	}{id.Source, id.SPIFFEID, id.Serial(), id.notAfterText()})
}
