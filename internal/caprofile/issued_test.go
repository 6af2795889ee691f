package caprofile_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/pki"
)

// The templates each issuer wrote by hand before caprofile held them
// (journal/ca's rotate, issueServer, SignAgent and SignAdmin; the
// ceremony's operator credential, which was SignAdmin's twin), kept here
// as they were: a certificate from caprofile's template must come out
// byte for byte the same. Ed25519 signatures are deterministic, so equal
// templates give equal DER.
func TestTemplatesIssueWhatTheIssuersDid(t *testing.T) {
	const domain, journal, node, operator, role = "example.org", "j1", "node-001", "alice", "pact-ops-blue"
	dns, ips := []string{"j1", "j1.example.org"}, []net.IP{net.ParseIP("10.0.0.1").To4()}
	serial := big.NewInt(0x5eed)
	skid := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	nb, na := now.Add(-time.Minute), now.Add(24*time.Hour)
	lp := caprofile.LeafParams{Domain: domain, Serial: serial, SubjectKeyID: skid, NotBefore: nb, NotAfter: na}

	intermediate := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "pact intermediate " + journal + "@" + domain, Organization: []string{"pact"}},
		NotBefore:             nb,
		NotAfter:              na,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: domain}},
	}
	caprofile.Constrain(intermediate, domain, dns, ips)
	jid := pki.Identity{Kind: pki.KindJournal, Name: journal, Domain: domain}
	aid := pki.Identity{Kind: pki.KindAgent, Name: node, Domain: domain}
	oid := pki.Identity{Kind: pki.KindAdmin, Name: operator, Domain: domain}

	for _, tc := range []struct {
		kind    string
		was, is *x509.Certificate
	}{
		{"intermediate", intermediate, caprofile.Intermediate(caprofile.IntermediateParams{
			Domain: domain, JournalID: journal, DNSNames: dns, IPs: ips, Serial: serial, NotBefore: nb, NotAfter: na,
		})},
		{"journal server", &x509.Certificate{
			SerialNumber: serial,
			Subject:      pkix.Name{CommonName: jid.CommonName()},
			SubjectKeyId: skid,
			NotBefore:    nb,
			NotAfter:     na,
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			DNSNames:     dns,
			IPAddresses:  ips,
			URIs:         []*url.URL{jid.SPIFFEID()},
		}, caprofile.JournalServer(with(lp, journal), dns, ips)},
		{"agent", &x509.Certificate{
			SerialNumber:          serial,
			Subject:               pkix.Name{CommonName: aid.CommonName()},
			SubjectKeyId:          skid,
			NotBefore:             nb,
			NotAfter:              na,
			KeyUsage:              x509.KeyUsageDigitalSignature,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			BasicConstraintsValid: true,
			IsCA:                  false,
			URIs:                  []*url.URL{aid.SPIFFEID()},
		}, caprofile.Agent(with(lp, node))},
		{"operator", &x509.Certificate{
			SerialNumber: serial,
			Subject:      pkix.Name{CommonName: oid.CommonName(), OrganizationalUnit: []string{role}},
			SubjectKeyId: skid,
			NotBefore:    nb,
			NotAfter:     na,
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			URIs:         []*url.URL{oid.SPIFFEID()},
		}, caprofile.Operator(with(lp, operator), role)},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			was, is := signFixed(t, tc.was), signFixed(t, tc.is)
			if !bytes.Equal(was, is) {
				t.Fatalf("caprofile's %s template issues other bytes than the issuer's own did", tc.kind)
			}
		})
	}
}

func with(p caprofile.LeafParams, name string) caprofile.LeafParams {
	p.Name = name
	return p
}

// issuerKey and issuer are a fixed Ed25519 CA: deterministic signatures.
var (
	issuerKey   = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	fixedIssuer = &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test issuer"},
		SubjectKeyId: []byte{9, 9, 9}, IsCA: true, BasicConstraintsValid: true,
	}
	subjectKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, ed25519.SeedSize))
)

func signFixed(t *testing.T, tmpl *x509.Certificate) []byte {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, fixedIssuer, subjectKey.Public(), issuerKey)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
