package keystore_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/keystore"
)

// checkSigner proves k is a working CA key: its signatures verify with
// crypto/ecdsa against Public(), and as the signer of x509.CreateCertificate
// it makes a CA certificate, then a child certificate that verifies
// against it.
func checkSigner(t *testing.T, k keystore.Key) {
	t.Helper()
	pub, ok := k.Public().(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Fatalf("Public() = %T, want an ECDSA P-256 key", k.Public())
	}
	digest := sha256.Sum256([]byte("pact keystore"))
	sig, err := k.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	if !ecdsa.VerifyASN1(pub, digest[:], sig) {
		t.Fatal("the signature does not verify with crypto/ecdsa")
	}

	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pact keystore test CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, pub, k)
	if err != nil {
		t.Fatalf("CreateCertificate (CA): %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	child, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "child"},
		DNSNames:     []string{"child.pact.test"},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &child.PublicKey, k)
	if err != nil {
		t.Fatalf("CreateCertificate (child): %v", err)
	}
	leaf, err := x509.ParseCertificate(leafDER)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "child.pact.test"}); err != nil {
		t.Fatalf("the child does not verify against the CA the key signed: %v", err)
	}
}

// x509ParseAnyPrivateKey tries every DER private key encoding crypto/x509
// reads.
func x509ParseAnyPrivateKey(der []byte) (any, error) {
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k, nil
	}
	return x509.ParsePKCS1PrivateKey(der)
}

// checkSignsConcurrently asks k for eight signatures at once: each must
// come back and verify.
func checkSignsConcurrently(t *testing.T, k keystore.Key) {
	t.Helper()
	pub := k.Public().(*ecdsa.PublicKey)
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			digest := sha256.Sum256([]byte{byte(g)})
			sig, err := k.Sign(rand.Reader, digest[:], crypto.SHA256)
			if err == nil && !ecdsa.VerifyASN1(pub, digest[:], sig) {
				err = errors.New("signature does not verify")
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
