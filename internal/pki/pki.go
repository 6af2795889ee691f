// Package pki holds the naming rules and small certificate helpers that the
// journal, the agent and the CLI share: how a node, a journal and an operator
// are named in a certificate, and how a certificate is fingerprinted.
package pki

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"regexp"
	"strings"
)

// Sentinel errors.
var (
	ErrNoPEM        = errors.New("pki: no PEM block of the expected type")
	ErrNotPactIdent = errors.New("pki: certificate carries no pact identity")
	ErrInvalidName  = errors.New("pki: invalid name")
)

// Kinds of principal a pact certificate names. The kind is the first path
// segment of the certificate's SPIFFE ID.
const (
	KindAgent   = "pact-agent"
	KindJournal = "pact-journal"
	KindAdmin   = "pact-admin"
)

// Roles an operator credential may carry (E10).
const (
	RolePlatformAdmin = "platform-admin"
	RoleViewer        = "viewer"
	RoleOpsPrefix     = "pact-ops-"
)

var (
	nameRE   = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$`)
	domainRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,253}[a-z0-9])?$`)
)

// ValidateName checks a node, journal, operator or vCluster name: 1–63
// characters of letters, digits, '.', '_' and '-', starting alphanumeric.
// The same rule keeps names safe inside SPIFFE IDs and certificate subjects.
func ValidateName(kind, s string) error {
	if !nameRE.MatchString(s) {
		return fmt.Errorf("%w: %s %q must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalidName, kind, s)
	}
	return nil
}

// ValidateDomain checks a domain id, which is also the SPIFFE trust domain.
func ValidateDomain(s string) error {
	if !domainRE.MatchString(s) {
		return fmt.Errorf("%w: domain %q must be lower-case letters, digits, '.', '_' or '-'", ErrInvalidName, s)
	}
	return nil
}

// Identity is who a pact certificate names.
type Identity struct {
	Kind   string // KindAgent, KindJournal or KindAdmin
	Name   string // node id, journal id or operator name
	Domain string
}

// SPIFFEID returns spiffe://{domain}/{kind}/{name}.
func (id Identity) SPIFFEID() *url.URL {
	return &url.URL{Scheme: "spiffe", Host: id.Domain, Path: "/" + id.Kind + "/" + id.Name}
}

// CommonName returns the subject CN for the identity. Agents use the ADR-008
// form pact-service-agent/{node_id}@{domain_id}.
func (id Identity) CommonName() string {
	if id.Kind == KindAgent {
		return "pact-service-agent/" + id.Name + "@" + id.Domain
	}
	return id.Kind + "/" + id.Name + "@" + id.Domain
}

// IdentityOf reads the pact identity from a certificate's URI SAN. It trusts
// nothing: callers verify the chain first.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	for _, u := range cert.URIs {
		if u.Scheme != "spiffe" {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
		if len(parts) != 2 {
			continue
		}
		switch parts[0] {
		case KindAgent, KindJournal, KindAdmin:
			return Identity{Kind: parts[0], Name: parts[1], Domain: u.Host}, nil
		}
	}
	return Identity{}, ErrNotPactIdent
}

// SerialHex is the canonical text form of a certificate serial.
func SerialHex(n *big.Int) string { return hex.EncodeToString(n.Bytes()) }

// NewSerial returns a random positive serial of 128 random bits (RFC 5280
// allows up to 20 octets; DER may add a leading zero octet).
func NewSerial() (*big.Int, error) {
	b := make([]byte, 16)
	for {
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("pki: serial: %w", err)
		}
		if n := new(big.Int).SetBytes(b); n.Sign() > 0 {
			return n, nil
		}
	}
}

// SPKIFingerprint is the hex SHA-256 of a certificate's public key info.
func SPKIFingerprint(cert *x509.Certificate) string {
	return SPKIFingerprintRaw(cert.RawSubjectPublicKeyInfo)
}

// SPKIFingerprintRaw fingerprints DER SubjectPublicKeyInfo.
func SPKIFingerprintRaw(spki []byte) string {
	sum := sha256.Sum256(spki)
	return hex.EncodeToString(sum[:])
}

// CertFingerprint is the SHA-256 of a certificate's DER, written as
// openssl x509 -noout -fingerprint -sha256 writes it (upper-case hex
// pairs joined by colons), so an operator can compare the two by eye.
func CertFingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return FormatFingerprint(sum[:])
}

// FormatFingerprint writes a digest as CertFingerprint does.
func FormatFingerprint(sum []byte) string {
	var b strings.Builder
	for i, c := range sum {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02X", c)
	}
	return b.String()
}

// EncodeCertsPEM encodes DER certificates as concatenated PEM.
func EncodeCertsPEM(ders ...[]byte) []byte {
	var out []byte
	for _, d := range ders {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: d})...)
	}
	return out
}

// ParseCertsPEM parses every CERTIFICATE block in data.
func ParseCertsPEM(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("pki: parse certificate: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, ErrNoPEM
	}
	return certs, nil
}

// LoadCertPool reads a PEM bundle file into a pool.
func LoadCertPool(path string) (*x509.CertPool, []*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: read CA bundle: %w", err)
	}
	certs, err := ParseCertsPEM(data)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: %w", path, err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, certs, nil
}

// SignedByARoot reports whether one of roots signed cert directly.
func SignedByARoot(cert *x509.Certificate, roots []*x509.Certificate) bool {
	for _, r := range roots {
		if bytes.Equal(cert.RawIssuer, r.RawSubject) && cert.CheckSignatureFrom(r) == nil {
			return true
		}
	}
	return false
}
