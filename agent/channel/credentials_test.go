package channel_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
)

// The channel trusts the configured roots and the roots that came with its
// identity's bundle, not the bundle's intermediates: a journal sends its
// intermediate, and as an extra anchor it only doubles Go's signature
// checks.
func TestClientTLSConfigTrustsTheBundlesRootsOnly(t *testing.T) {
	now := time.Now()
	root, rootKey := testCert(t, "root", nil, nil, now)
	inter, _ := testCert(t, "intermediate j1", root, rootKey, now)
	other, _ := testCert(t, "another root in the bundle", nil, nil, now)
	id := &identity.Identity{Source: identity.SourceJournal, Bundle: []*x509.Certificate{root, inter, other}}

	got := channel.ClientTLSConfig([]*x509.Certificate{root}, id, time.Now).RootCAs
	want := x509.NewCertPool()
	want.AddCert(root)
	want.AddCert(other)
	if !got.Equal(want) {
		t.Error("RootCAs is not exactly the configured root and the bundle's other root")
	}
	if got := channel.ClientTLSConfig([]*x509.Certificate{root}, nil, time.Now).RootCAs; !got.Equal(func() *x509.CertPool {
		p := x509.NewCertPool()
		p.AddCert(root)
		return p
	}()) {
		t.Error("without an identity, RootCAs is not exactly the configured root")
	}
}

// testCert makes a CA certificate named cn, self-signed when parent is nil.
func testCert(t *testing.T, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}
