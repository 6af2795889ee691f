package ceremony

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/pki"
)

// Kinds of certificate Describe tells apart.
const (
	KindRoot         = "root"
	KindJournalCA    = "journal-ca"
	KindIntermediate = "intermediate"
	KindAgent        = "agent"
	KindJournal      = "journal"
	KindOperator     = "operator"
	KindOther        = "other"
)

// Description is what a pact certificate is, for people (pact ca show) and
// scripts (-o json). Field names are a contract with scripts: add fields,
// never rename or remove them. Times are RFC 3339 UTC.
type Description struct {
	Kind string `json:"kind"`
	// Label is Kind in words: "domain root", "journal CA", ...
	Label      string `json:"label"`
	Subject    string `json:"subject"`
	Issuer     string `json:"issuer"`
	SelfSigned bool   `json:"self_signed"`
	Serial     string `json:"serial"`
	NotBefore  string `json:"not_before"`
	NotAfter   string `json:"not_after"`
	// Domain is the SPIFFE trust domain; JournalID is set for a journal CA
	// and a journal; Name and Role for agents, journals and operators.
	Domain    string `json:"domain,omitempty"`
	JournalID string `json:"journal_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Role      string `json:"role,omitempty"`
	// Names are the certificate's own SANs.
	DNSNames    []string `json:"dns_names"`
	IPAddresses []string `json:"ip_addresses"`
	URIs        []string `json:"uris"`
	IsCA        bool     `json:"is_ca"`
	// Constraints is what a CA may vouch for (nil on a leaf).
	Constraints *Constraints `json:"constraints,omitempty"`
	KeyUsage    []string     `json:"key_usage"`
	ExtKeyUsage []string     `json:"ext_key_usage"`
	PublicKey   string       `json:"public_key"`
	// SPKISHA256 is the hex SHA-256 of the public key: what
	// pact-journal ca-request printed for a journal CA's key.
	SPKISHA256 string `json:"spki_sha256"`
	// SHA256Fingerprint is the certificate's, as openssl x509 -fingerprint
	// -sha256 writes it.
	SHA256Fingerprint string `json:"sha256_fingerprint"`
	SubjectKeyID      string `json:"subject_key_id"`
	AuthorityKeyID    string `json:"authority_key_id"`
}

// Constraints are a CA's path length and name constraints.
type Constraints struct {
	// MaxPathLen is the number of CAs allowed below; -1 for no limit.
	MaxPathLen          int      `json:"max_path_len"`
	PermittedDNSDomains []string `json:"permitted_dns_domains"`
	ExcludedDNSDomains  []string `json:"excluded_dns_domains"`
	PermittedIPRanges   []string `json:"permitted_ip_ranges"`
	ExcludedIPRanges    []string `json:"excluded_ip_ranges"`
	PermittedURIDomains []string `json:"permitted_uri_domains"`
	ExcludedURIDomains  []string `json:"excluded_uri_domains"`
	ExcludedEmail       []string `json:"excluded_email_addresses"`
}

var labels = map[string]string{
	KindRoot:         "domain root",
	KindJournalCA:    "journal CA",
	KindIntermediate: "journal intermediate",
	KindAgent:        "agent certificate",
	KindJournal:      "journal server certificate",
	KindOperator:     "operator credential",
	KindOther:        "certificate (not one pact makes)",
}

// Describe says what cert is. It trusts nothing and verifies nothing: it
// reads.
func Describe(cert *x509.Certificate) Description {
	d := Description{
		Subject:           cert.Subject.String(),
		Issuer:            cert.Issuer.String(),
		SelfSigned:        bytes.Equal(cert.RawIssuer, cert.RawSubject),
		Serial:            pki.SerialHex(cert.SerialNumber),
		NotBefore:         cert.NotBefore.UTC().Format(time.RFC3339),
		NotAfter:          cert.NotAfter.UTC().Format(time.RFC3339),
		DNSNames:          append([]string{}, cert.DNSNames...),
		IPAddresses:       ipStrings(cert.IPAddresses),
		URIs:              []string{},
		IsCA:              cert.IsCA,
		KeyUsage:          keyUsages(cert.KeyUsage),
		ExtKeyUsage:       extKeyUsages(cert.ExtKeyUsage),
		PublicKey:         PublicKeyName(cert.PublicKey),
		SPKISHA256:        pki.SPKIFingerprint(cert),
		SHA256Fingerprint: pki.CertFingerprint(cert),
		SubjectKeyID:      hex.EncodeToString(cert.SubjectKeyId),
		AuthorityKeyID:    hex.EncodeToString(cert.AuthorityKeyId),
	}
	for _, u := range cert.URIs {
		d.URIs = append(d.URIs, u.String())
	}
	if cert.IsCA {
		c := &Constraints{
			MaxPathLen:          -1,
			PermittedDNSDomains: append([]string{}, cert.PermittedDNSDomains...),
			ExcludedDNSDomains:  append([]string{}, cert.ExcludedDNSDomains...),
			PermittedIPRanges:   netStrings(cert.PermittedIPRanges),
			ExcludedIPRanges:    netStrings(cert.ExcludedIPRanges),
			PermittedURIDomains: append([]string{}, cert.PermittedURIDomains...),
			ExcludedURIDomains:  append([]string{}, cert.ExcludedURIDomains...),
			ExcludedEmail:       append([]string{}, cert.ExcludedEmailAddresses...),
		}
		if cert.MaxPathLen > 0 || cert.MaxPathLenZero {
			c.MaxPathLen = cert.MaxPathLen
		}
		d.Constraints = c
	}
	switch {
	case caprofile.IsRoot(cert):
		d.Kind = KindRoot
		d.Domain, _ = DomainOf(cert)
	case isJournalCA(cert):
		d.Kind = KindJournalCA
		d.JournalID, d.Domain, _ = caprofile.JournalOf(cert)
	case cert.IsCA:
		d.Kind = KindIntermediate
		for _, u := range cert.URIs {
			if u.Scheme == "spiffe" {
				d.Domain = u.Host
			}
		}
	default:
		d.Kind = KindOther
		if id, err := pki.IdentityOf(cert); err == nil {
			d.Domain, d.Name = id.Domain, id.Name
			switch id.Kind {
			case pki.KindAgent:
				d.Kind = KindAgent
			case pki.KindJournal:
				d.Kind, d.JournalID = KindJournal, id.Name
			case pki.KindAdmin:
				d.Kind = KindOperator
				if len(cert.Subject.OrganizationalUnit) == 1 {
					d.Role = cert.Subject.OrganizationalUnit[0]
				}
			}
		}
	}
	d.Label = labels[d.Kind]
	return d
}

func isJournalCA(cert *x509.Certificate) bool {
	_, _, ok := caprofile.JournalOf(cert)
	return ok
}

func ipStrings(ips []net.IP) []string {
	out := []string{}
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

func netStrings(nets []*net.IPNet) []string {
	out := []string{}
	for _, n := range nets {
		out = append(out, n.String())
	}
	return out
}

func keyUsages(ku x509.KeyUsage) []string {
	names := []struct {
		bit  x509.KeyUsage
		name string
	}{
		{x509.KeyUsageDigitalSignature, "digitalSignature"},
		{x509.KeyUsageContentCommitment, "contentCommitment"},
		{x509.KeyUsageKeyEncipherment, "keyEncipherment"},
		{x509.KeyUsageDataEncipherment, "dataEncipherment"},
		{x509.KeyUsageKeyAgreement, "keyAgreement"},
		{x509.KeyUsageCertSign, "keyCertSign"},
		{x509.KeyUsageCRLSign, "cRLSign"},
		{x509.KeyUsageEncipherOnly, "encipherOnly"},
		{x509.KeyUsageDecipherOnly, "decipherOnly"},
	}
	out := []string{}
	for _, n := range names {
		if ku&n.bit != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

func extKeyUsages(ekus []x509.ExtKeyUsage) []string {
	out := []string{}
	for _, e := range ekus {
		switch e {
		case x509.ExtKeyUsageServerAuth:
			out = append(out, "serverAuth")
		case x509.ExtKeyUsageClientAuth:
			out = append(out, "clientAuth")
		case x509.ExtKeyUsageAny:
			out = append(out, "any")
		default:
			out = append(out, fmt.Sprintf("eku-%d", e))
		}
	}
	return out
}

// PublicKeyName names a public key's algorithm and size: "ECDSA P-256".
func PublicKeyName(pub any) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case ed25519.PublicKey:
		return "Ed25519"
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA %d", k.N.BitLen())
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", pub), "*")
}
