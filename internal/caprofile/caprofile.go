// Package caprofile is the shape of pact's two long-lived CA certificates,
// shared by the ceremony that makes them (pact ca) and the journal that
// checks the one it is given:
//
//	domain root (offline, ceremony)        spiffe://DOMAIN, self-signed
//	└── journal CA (one per journal host)  key in the host's TPM, a PKCS#11 token or a 0600 file;
//	    │                                  name-constrained to DOMAIN and the journal's names;
//	    │                                  path length 1; a lifetime the site chooses (a year by default)
//	    └── journal intermediate           key in memory only; re-keyed at half life
//	        └── agent, journal server, standby and operator certificates
//
// The journal CA signs nothing but its journal's intermediates, so the TPM or
// token is never on the per-node signing path.
package caprofile

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Sentinel errors.
var (
	ErrProfile = errors.New("caprofile: certificate does not fit its profile")
	ErrNames   = errors.New("caprofile: name outside the journal CA's constraints")
)

// Defaults the ceremony uses unless told otherwise.
const (
	DefaultRootLifetime      = 10 * 365 * 24 * time.Hour
	DefaultJournalCALifetime = 365 * 24 * time.Hour
)

const (
	rootCNPrefix      = "pact root CA "
	journalCANPrefix  = "pact journal CA "
	journalCAOrg      = "pact"
	maxJournalCANames = 64
)

// Root is the template of a domain root.
func Root(domain string, serial *big.Int, notBefore, notAfter time.Time) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: rootCNPrefix + domain, Organization: []string{journalCAOrg}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: domain}},
	}
}

// JournalCAParams is what a journal CA certificate says.
type JournalCAParams struct {
	Domain    string
	JournalID string
	// DNSNames and IPs are every name the journal serves under (its
	// --listen and --raft-listen addresses, its host names); its server
	// certificates may carry no other.
	DNSNames  []string
	IPs       []net.IP
	Serial    *big.Int
	NotBefore time.Time
	NotAfter  time.Time
}

// JournalCA is the template of a journal CA certificate.
func JournalCA(p JournalCAParams) *x509.Certificate {
	tmpl := &x509.Certificate{
		SerialNumber:          p.Serial,
		Subject:               pkix.Name{CommonName: journalCANPrefix + p.JournalID + "@" + p.Domain, Organization: []string{journalCAOrg}},
		NotBefore:             p.NotBefore,
		NotAfter:              p.NotAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// One CA below: the journal's in-memory intermediate.
		MaxPathLen: 1,
		URIs:       []*url.URL{{Scheme: "spiffe", Host: p.Domain}},
	}
	Constrain(tmpl, p.Domain, p.DNSNames, p.IPs)
	return tmpl
}

// Constrain limits what a CA can vouch for (RFC 5280 name constraints,
// checked by every verifier that walks the chain): SPIFFE IDs of this trust
// domain only (not of its subdomains, which are other trust domains), and
// the DNS names and addresses the journal serves under. No certificate below
// carries an e-mail address.
func Constrain(tmpl *x509.Certificate, domain string, dnsNames []string, ips []net.IP) {
	tmpl.PermittedDNSDomainsCritical = true
	tmpl.PermittedURIDomains = []string{domain}
	tmpl.ExcludedURIDomains = []string{"." + domain}
	tmpl.PermittedDNSDomains = append([]string(nil), dnsNames...)
	if len(tmpl.PermittedDNSDomains) == 0 {
		// An empty permitted list would permit every name: exclude them all.
		tmpl.ExcludedDNSDomains = []string{""}
	}
	for _, ip := range ips {
		bits := 8 * len(ip)
		if v4 := ip.To4(); v4 != nil {
			ip, bits = v4, 32
		}
		tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
	}
	if len(tmpl.PermittedIPRanges) == 0 {
		tmpl.ExcludedIPRanges = []*net.IPNet{{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}, {IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}}
	}
	tmpl.ExcludedEmailAddresses = []string{""}
}

// JournalOf names the journal and domain a journal CA certificate was made
// for; ok is false for any other certificate (a root, a legacy
// intermediate signed by the root itself).
func JournalOf(cert *x509.Certificate) (journalID, domain string, ok bool) {
	rest, found := strings.CutPrefix(cert.Subject.CommonName, journalCANPrefix)
	if !found || !cert.IsCA || cert.MaxPathLen != 1 {
		return "", "", false
	}
	journalID, domain, found = strings.Cut(rest, "@")
	if !found || journalID == "" || domain == "" {
		return "", "", false
	}
	return journalID, domain, true
}

// IsRoot reports whether cert is shaped as a pact domain root.
func IsRoot(cert *x509.Certificate) bool {
	return cert.IsCA && strings.HasPrefix(cert.Subject.CommonName, rootCNPrefix) && bytes.Equal(cert.RawIssuer, cert.RawSubject)
}

// CheckJournalCA checks the journal CA a journal was given before it signs
// anything with it: issued by one of roots, for this journal of this
// domain, of a journal CA's profile (CheckJournalCAProfile), valid at now,
// and permitting every name the journal serves under (its server
// certificates would fail every verifier otherwise). That it permits
// nothing more is CheckJournalCANames's to check. Each problem says what to
// do.
func CheckJournalCA(cert *x509.Certificate, roots []*x509.Certificate, journalID, domain string, dnsNames []string, ips []net.IP, now time.Time) error {
	rest, found := strings.CutPrefix(cert.Subject.CommonName, journalCANPrefix)
	id, dom, cut := strings.Cut(rest, "@")
	if !found || !cut || id == "" || dom == "" {
		return fmt.Errorf("%w: %q is not a journal CA certificate (make one with pact ca sign-journal)", ErrProfile, cert.Subject.CommonName)
	}
	if id != journalID || dom != domain {
		return fmt.Errorf("%w: the journal CA is for journal %s of domain %s, this is journal %s of domain %s: point --journal-ca-cert at this journal's own, or have the ceremony sign one for it (pact-journal ca-request --journal-id %s, then pact ca sign-journal)", ErrProfile, id, dom, journalID, domain, journalID)
	}
	// Its profile: what the ceremony makes, and nothing wider.
	if err := CheckJournalCAProfile(cert, domain); err != nil {
		return err
	}
	signed := false
	for _, r := range roots {
		if bytes.Equal(cert.RawIssuer, r.RawSubject) && cert.CheckSignatureFrom(r) == nil {
			signed = true
			break
		}
	}
	if !signed {
		return fmt.Errorf("%w: the journal CA %s is not signed by the domain root this journal trusts (--root-cert)", ErrProfile, cert.Subject.CommonName)
	}
	if now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		return fmt.Errorf("%w: the journal CA is valid from %s to %s, and it is %s: renew it (docs/ceremony.md)", ErrProfile,
			cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	for _, n := range dnsNames {
		if !dnsPermitted(cert, n) {
			return fmt.Errorf("%w: this journal serves as %s, which its journal CA does not permit (it permits %s): re-issue the journal CA with that name, or drop it from --server-names", ErrNames, n, describeDNS(cert))
		}
	}
	for _, ip := range ips {
		if !ipPermitted(cert, ip) {
			return fmt.Errorf("%w: this journal serves on %s, which its journal CA does not permit: re-issue the journal CA with that address", ErrNames, ip)
		}
	}
	return nil
}

// PermitsDNS reports whether a certificate below cert may carry the DNS
// name name.
func PermitsDNS(cert *x509.Certificate, name string) bool { return dnsPermitted(cert, name) }

// PermitsIP reports whether a certificate below cert may carry ip.
func PermitsIP(cert *x509.Certificate, ip net.IP) bool { return ipPermitted(cert, ip) }

// dnsPermitted follows RFC 5280's rule for dNSName constraints as Go's
// verifier applies it: a permitted name covers itself and its subdomains.
func dnsPermitted(cert *x509.Certificate, name string) bool {
	name = strings.ToLower(name)
	for _, c := range cert.ExcludedDNSDomains {
		if c == "" || matchDNS(name, c) {
			return false
		}
	}
	if len(cert.PermittedDNSDomains) == 0 {
		return true
	}
	return slices.ContainsFunc(cert.PermittedDNSDomains, func(c string) bool { return matchDNS(name, c) })
}

func matchDNS(name, constraint string) bool {
	constraint = strings.ToLower(strings.TrimPrefix(constraint, "."))
	return name == constraint || strings.HasSuffix(name, "."+constraint)
}

func ipPermitted(cert *x509.Certificate, ip net.IP) bool {
	for _, r := range cert.ExcludedIPRanges {
		if r.Contains(ip) {
			return false
		}
	}
	if len(cert.PermittedIPRanges) == 0 {
		return true
	}
	for _, r := range cert.PermittedIPRanges {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

func describeDNS(cert *x509.Certificate) string {
	if len(cert.PermittedDNSDomains) == 0 {
		return "no DNS name"
	}
	return strings.Join(cert.PermittedDNSDomains, ", ")
}

// ValidateNames checks the names a journal CA is asked to permit.
func ValidateNames(dnsNames []string, ips []net.IP) error {
	if len(dnsNames)+len(ips) > maxJournalCANames {
		return fmt.Errorf("%w: %d names; a journal CA permits at most %d", ErrNames, len(dnsNames)+len(ips), maxJournalCANames)
	}
	for _, n := range dnsNames {
		if n == "" || strings.Contains(n, "..") || strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".") || strings.ContainsAny(n, " *,/:@") {
			return fmt.Errorf("%w: %q is not a host name (give names like j1.site.example)", ErrNames, n)
		}
	}
	return nil
}

// KeyID is SPKIKeyID of a public key.
func KeyID(pub crypto.PublicKey) ([]byte, error) {
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("caprofile: encode public key: %w", err)
	}
	return SPKIKeyID(spki)
}

// SPKIKeyID is the key identifier pact gives every certificate, CA or
// not, for a DER SubjectPublicKeyInfo: the leftmost 160 bits of the
// SHA-256 of its subjectPublicKey bits (RFC 7093 §2 method 1, one of the
// methods RFC 5280 §4.2.1.2 allows). It is the method crypto/x509 uses for
// the CA certificates it fills in itself, so roots, journal CAs,
// intermediates and leaves name their keys alike. Go fills it in for CAs
// only; RFC 5280 says end-entity certificates should carry one too, and
// path builders and operators use it to match a key across renewals.
func SPKIKeyID(spki []byte) ([]byte, error) {
	var info struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if rest, err := asn1.Unmarshal(spki, &info); err != nil || len(rest) != 0 {
		return nil, errors.New("caprofile: subject key identifier: subject public key info does not parse")
	}
	sum := sha256.Sum256(info.PublicKey.Bytes)
	return sum[:20], nil
}

// KeyPolicy says why pub may not be certified, or "" if it may: pact
// certifies ECDSA P-256 and P-384 and Ed25519 keys only (the journal's CA
// for nodes and operators, the ceremony for journal CAs).
func KeyPolicy(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return ""
		}
		return fmt.Sprintf("ECDSA curve %s (want P-256 or P-384)", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return ""
	}
	return fmt.Sprintf("%T (want ECDSA P-256, P-384 or Ed25519)", pub)
}

// SignatureAllowed reports whether a certificate request may be signed
// with alg: the algorithms of the keys KeyPolicy accepts.
func SignatureAllowed(alg x509.SignatureAlgorithm) bool {
	switch alg {
	case x509.ECDSAWithSHA256, x509.ECDSAWithSHA384, x509.ECDSAWithSHA512, x509.PureEd25519:
		return true
	}
	return false
}
