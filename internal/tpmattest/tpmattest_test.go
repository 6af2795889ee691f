package tpmattest_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"

	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/swtpmtest"
	"github.com/pact-hpc/pact/internal/tpmattest"
)

// sha256SPKI is the EK hash as docs/tpm.md defines it, computed without the
// code under test.
func sha256SPKI(t testing.TB, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(der)
	return hex.EncodeToString(s[:])
}

func selfSigned(t testing.TB, pub any) []byte {
	t.Helper()
	signer, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), Subject: pkix.Name{CommonName: "EK"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, signer)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestEKHashDefinition(t *testing.T) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpmattest.EKHash(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256SPKI(t, &k.PublicKey); got != want {
		t.Fatalf("EKHash = %s, want SHA-256 of the SPKI %s", got, want)
	}
	if _, err := tpmattest.EKHash("not a key"); !errors.Is(err, tpmattest.ErrEKInvalid) {
		t.Errorf("EKHash of a string: %v", err)
	}
}

// replaceSPKIAlgorithm re-encodes a certificate with its SPKI algorithm
// OID replaced, as some TPM vendors label RSA EKs id-RSAES-OAEP.
func oaepLabelled(t *testing.T, der []byte) []byte {
	t.Helper()
	rsaEnc := []byte{0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01}
	oaep := []byte{0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x07}
	if !bytes.Contains(der, rsaEnc) {
		t.Fatal("no rsaEncryption OID in the certificate")
	}
	return bytes.Replace(der, rsaEnc, oaep, 1)
}

func TestParseEKCertificate(t *testing.T) {
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rsaDER := selfSigned(t, &rk.PublicKey)
	tests := []struct {
		name string
		in   []byte
		want string
		err  error
	}{
		{"RSA, DER", rsaDER, sha256SPKI(t, &rk.PublicKey), nil},
		{"RSA, PEM", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rsaDER}), sha256SPKI(t, &rk.PublicKey), nil},
		{"RSA labelled id-RSAES-OAEP", oaepLabelled(t, rsaDER), sha256SPKI(t, &rk.PublicKey), nil},
		{"ECC P-256", selfSigned(t, &ek.PublicKey), sha256SPKI(t, &ek.PublicKey), nil},
		{"empty", nil, "", tpmattest.ErrEKCertInvalid},
		{"PEM of another type", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: rsaDER}), "", tpmattest.ErrEKCertInvalid},
		{"trailing bytes", append(append([]byte{}, rsaDER...), 0), "", tpmattest.ErrEKCertInvalid},
		{"truncated", rsaDER[:len(rsaDER)/2], "", tpmattest.ErrEKCertInvalid},
		{"too large", make([]byte, tpmattest.MaxEKCert+1), "", tpmattest.ErrEKCertInvalid},
		{"not ASN.1", []byte(strings.Repeat("x", 100)), "", tpmattest.ErrEKCertInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tpmattest.ParseEKCertificate(tt.in)
			if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if got != tt.want {
				t.Errorf("hash %s, want %s", got, tt.want)
			}
		})
	}
}

func TestProof(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, 32)
	id := strings.Repeat("ab", 16)
	p := tpmattest.Proof(secret, id, "spki-1")
	if err := tpmattest.CheckAnswerShape(id, p); err != nil {
		t.Fatal(err)
	}
	if err := tpmattest.VerifyProof(secret, id, "spki-1", p); err != nil {
		t.Fatalf("a right proof: %v", err)
	}
	for name, err := range map[string]error{
		"another key":       tpmattest.VerifyProof(secret, id, "spki-2", p),
		"another challenge": tpmattest.VerifyProof(secret, strings.Repeat("cd", 16), "spki-1", p),
		"another secret":    tpmattest.VerifyProof(bytes.Repeat([]byte{8}, 32), id, "spki-1", p),
	} {
		if !errors.Is(err, tpmattest.ErrProofMismatch) {
			t.Errorf("%s: %v, want ErrProofMismatch", name, err)
		}
	}
	for _, bad := range []struct {
		id    string
		proof []byte
	}{{"", p}, {"zz" + id[2:], p}, {id, p[:31]}, {id + "00", p}} {
		if err := tpmattest.CheckAnswerShape(bad.id, bad.proof); !errors.Is(err, tpmattest.ErrAnswerInvalid) {
			t.Errorf("CheckAnswerShape(%q, %d bytes) = %v", bad.id, len(bad.proof), err)
		}
	}
}

// The public areas a real TPM produces pass; the same areas with one
// required attribute cleared, or with bytes added, do not.
func TestParsePublicAreasFromSWTPM(t *testing.T) {
	sw := swtpmtest.Start(t)
	tr, err := tpm.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	a, err := tpm.NewAttestor(tr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ek, err := tpmattest.ParseEK(a.EKPublic())
	if err != nil {
		t.Fatalf("swtpm's EK: %v", err)
	}
	if err := ek.Check(a.EKHash()); err != nil {
		t.Fatal(err)
	}
	if err := ek.Check(strings.Repeat("0", 64)); !errors.Is(err, tpmattest.ErrEKMismatch) {
		t.Errorf("Check against another hash: %v", err)
	}
	if got, want := ek.Hash, sha256SPKI(t, ek.PublicKey()); got != want {
		t.Errorf("EK hash %s, want %s", got, want)
	}
	if _, err := tpmattest.ParseAK(a.AKPublic()); err != nil {
		t.Fatalf("the agent's AK: %v", err)
	}
	tweak := func(pub []byte, f func(*tpm2.TPMTPublic)) []byte {
		p, err := tpm2.Unmarshal[tpm2.TPMTPublic](pub)
		if err != nil {
			t.Fatal(err)
		}
		f(p)
		return tpm2.Marshal(*p)
	}
	for name, pub := range map[string][]byte{
		"not restricted":          tweak(a.AKPublic(), func(p *tpm2.TPMTPublic) { p.ObjectAttributes.Restricted = false }),
		"not fixedTPM":            tweak(a.AKPublic(), func(p *tpm2.TPMTPublic) { p.ObjectAttributes.FixedTPM = false }),
		"not fixedParent":         tweak(a.AKPublic(), func(p *tpm2.TPMTPublic) { p.ObjectAttributes.FixedParent = false }),
		"not sensitiveDataOrigin": tweak(a.AKPublic(), func(p *tpm2.TPMTPublic) { p.ObjectAttributes.SensitiveDataOrigin = false }),
		"also decrypts":           tweak(a.AKPublic(), func(p *tpm2.TPMTPublic) { p.ObjectAttributes.Decrypt = true }),
		"SHA-1 name":              tweak(a.AKPublic(), func(p *tpm2.TPMTPublic) { p.NameAlg = tpm2.TPMAlgSHA1 }),
		"trailing byte":           append(append([]byte{}, a.AKPublic()...), 0),
		"the EK":                  a.EKPublic(),
		"empty":                   nil,
		"over the size bound":     make([]byte, tpmattest.MaxPublicArea+1),
	} {
		if _, err := tpmattest.ParseAK(pub); !errors.Is(err, tpmattest.ErrAKInvalid) {
			t.Errorf("AK %s: %v, want ErrAKInvalid", name, err)
		}
	}
	for name, pub := range map[string][]byte{
		"the AK":         a.AKPublic(),
		"not restricted": tweak(a.EKPublic(), func(p *tpm2.TPMTPublic) { p.ObjectAttributes.Restricted = false }),
		"not fixedTPM":   tweak(a.EKPublic(), func(p *tpm2.TPMTPublic) { p.ObjectAttributes.FixedTPM = false }),
		"trailing byte":  append(append([]byte{}, a.EKPublic()...), 0),
		"garbage":        []byte("EK"),
	} {
		if _, err := tpmattest.ParseEK(pub); !errors.Is(err, tpmattest.ErrEKInvalid) {
			t.Errorf("EK %s: %v, want ErrEKInvalid", name, err)
		}
	}
}
