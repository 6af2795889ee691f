// Package identitytest makes identities for tests: a CA made in code that
// issues SPIFFE-shaped leaves with real keys, and the PEM files a bootstrap
// identity is read from. It is for tests only.
package identitytest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/pki"
)

// CA is a self-signed root for one trust domain, with its key in memory.
type CA struct {
	Domain string
	Cert   *x509.Certificate
	Key    crypto.Signer
}

// NewCA makes a P-256 root for domain, valid from an hour before now for ten
// years. It panics on failure, which only a broken crypto/rand can cause.
func NewCA(domain string, now time.Time) *CA {
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	tmpl := &x509.Certificate{
		SerialNumber:          must(pki.NewSerial()),
		Subject:               pkix.Name{CommonName: "test root " + domain},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: domain}},
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key))
	return &CA{Domain: domain, Cert: must(x509.ParseCertificate(der)), Key: key}
}

// Issue makes a P-256 key and a leaf for it naming spiffeID (a full
// spiffe:// URI, or "" for none), valid over [notBefore, notAfter], and
// returns them as an Identity from src whose Bundle is the CA.
func (ca *CA) Issue(src identity.Source, spiffeID string, notBefore, notAfter time.Time) *identity.Identity {
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	return ca.IssueFor(src, key, spiffeID, notBefore, notAfter)
}

// IssueFor is Issue with the caller's key (any crypto.Signer x509 supports).
func (ca *CA) IssueFor(src identity.Source, key crypto.Signer, spiffeID string, notBefore, notAfter time.Time) *identity.Identity {
	tmpl := &x509.Certificate{
		SerialNumber: must(pki.NewSerial()),
		Subject:      pkix.Name{CommonName: "test leaf"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	if spiffeID != "" {
		u, err := url.Parse(spiffeID)
		if err != nil {
			panic(fmt.Sprintf("identitytest: SPIFFE ID %q: %v", spiffeID, err))
		}
		tmpl.URIs = []*url.URL{u}
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key))
	id, err := identity.New(src, []*x509.Certificate{must(x509.ParseCertificate(der))}, key, []*x509.Certificate{ca.Cert})
	if err != nil {
		panic("identitytest: " + err.Error())
	}
	return id
}

// CertsPEM encodes certificates as concatenated PEM.
func CertsPEM(certs ...*x509.Certificate) []byte {
	der := make([][]byte, len(certs))
	for i, c := range certs {
		der[i] = c.Raw
	}
	return pki.EncodeCertsPEM(der...)
}

// KeyPKCS8 returns the key as PKCS#8 DER.
func KeyPKCS8(key crypto.Signer) []byte { return must(x509.MarshalPKCS8PrivateKey(key)) }

// KeyPEM returns the key as a PKCS#8 "PRIVATE KEY" PEM block.
func KeyPEM(key crypto.Signer) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: KeyPKCS8(key)})
}

// Files are the paths WriteFiles wrote.
type Files struct {
	Dir, Cert, Key, Bundle string
}

// WriteFiles writes id as the bootstrap files of a node image into dir:
// cert.pem (chain), key.pem (PKCS#8) and bundle.pem.
func WriteFiles(tb testing.TB, dir string, id *identity.Identity) Files {
	tb.Helper()
	f := Files{
		Dir:    dir,
		Cert:   filepath.Join(dir, "cert.pem"),
		Key:    filepath.Join(dir, "key.pem"),
		Bundle: filepath.Join(dir, "bundle.pem"),
	}
	for path, data := range map[string][]byte{
		f.Cert:   CertsPEM(id.Chain...),
		f.Key:    KeyPEM(id.Key),
		f.Bundle: CertsPEM(id.Bundle...),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return f
}

func must[T any](v T, err error) T {
	if err != nil {
		panic("identitytest: " + err.Error())
	}
	return v
}
