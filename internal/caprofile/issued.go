package caprofile

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"time"

	"github.com/pact-hpc/pact/internal/pki"
)

// The certificates below the journal CA, one template per kind, used by
// whatever issues that kind (journal/ca, the ceremony) and by the test CAs
// that stand in for them (internal/chaintest).

// IntermediateParams is what a journal intermediate says.
type IntermediateParams struct {
	Domain    string
	JournalID string
	// DNSNames and IPs are the names the journal's server certificates
	// may carry (those its journal CA permits).
	DNSNames  []string
	IPs       []net.IP
	Serial    *big.Int
	NotBefore time.Time
	NotAfter  time.Time
}

// Intermediate is the template of a journal intermediate: a CA of path
// length 0 (it signs leaves only), constrained to the domain and the
// journal's names (Constrain), so a stolen intermediate key, or a bug in
// leaf issuance, cannot mint an identity a verifier of this domain accepts
// outside them.
func Intermediate(p IntermediateParams) *x509.Certificate {
	tmpl := &x509.Certificate{
		SerialNumber:          p.Serial,
		Subject:               pkix.Name{CommonName: "pact intermediate " + p.JournalID + "@" + p.Domain, Organization: []string{journalCAOrg}},
		NotBefore:             p.NotBefore,
		NotAfter:              p.NotAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: p.Domain}},
	}
	Constrain(tmpl, p.Domain, p.DNSNames, p.IPs)
	return tmpl
}

// LeafParams is what every end-entity certificate says: whose it is (the
// name of a node, journal or operator in a domain), its serial, its
// subject key id and its validity.
type LeafParams struct {
	Domain       string
	Name         string
	Serial       *big.Int
	SubjectKeyID []byte
	NotBefore    time.Time
	NotAfter     time.Time
}

func (p LeafParams) leaf(kind string) *x509.Certificate {
	id := pki.Identity{Kind: kind, Name: p.Name, Domain: p.Domain}
	return &x509.Certificate{
		SerialNumber: p.Serial,
		Subject:      pkix.Name{CommonName: id.CommonName()},
		SubjectKeyId: p.SubjectKeyID,
		NotBefore:    p.NotBefore,
		NotAfter:     p.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		URIs:         []*url.URL{id.SPIFFEID()},
	}
}

// Agent is the template of node p.Name's agent certificate (an X.509-SVID).
func Agent(p LeafParams) *x509.Certificate {
	tmpl := p.leaf(pki.KindAgent)
	// X.509-SVID §4.4: when the extension is present, serverAuth and
	// clientAuth must both be set. An agent certificate still cannot pose
	// as a journal: journals are identified by their SPIFFE ID
	// (pact-journal/...) and agent leaves carry no DNS or IP name.
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.BasicConstraintsValid = true
	tmpl.IsCA = false
	return tmpl
}

// JournalServer is the template of journal p.Name's server certificate,
// for the names it serves under (dnsNames, ips: those its journal CA
// permits); it is also the journal's client certificate towards its peers.
func JournalServer(p LeafParams, dnsNames []string, ips []net.IP) *x509.Certificate {
	tmpl := p.leaf(pki.KindJournal)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.DNSNames = dnsNames
	tmpl.IPAddresses = ips
	return tmpl
}

// Operator is the template of operator p.Name's credential; the role
// travels in the subject's OrganizationalUnit.
func Operator(p LeafParams, role string) *x509.Certificate {
	tmpl := p.leaf(pki.KindAdmin)
	tmpl.Subject.OrganizationalUnit = []string{role}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return tmpl
}
