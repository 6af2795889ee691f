package tpmattest_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/google/go-tpm/tpm2"

	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/tpmattest"
)

// validEK is an RSA EK public area as a TPM would report it: the TCG
// template with a real modulus.
func validEK(t testing.TB) []byte {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p := tpm2.RSAEKTemplate
	p.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: k.N.Bytes()})
	return tpm2.Marshal(p)
}

// validAK is the agent's AK template with a point on P-256.
func validAK(t testing.TB) []byte {
	p := tpm.AKTemplate
	// The P-256 generator.
	x := []byte{0x6b, 0x17, 0xd1, 0xf2, 0xe1, 0x2c, 0x42, 0x47, 0xf8, 0xbc, 0xe6, 0xe5, 0x63, 0xa4, 0x40, 0xf2, 0x77, 0x03, 0x7d, 0x81, 0x2d, 0xeb, 0x33, 0xa0, 0xf4, 0xa1, 0x39, 0x45, 0xd8, 0x98, 0xc2, 0x96}
	y := []byte{0x4f, 0xe3, 0x42, 0xe2, 0xfe, 0x1a, 0x7f, 0x9b, 0x8e, 0xe7, 0xeb, 0x4a, 0x7c, 0x0f, 0x9e, 0x16, 0x2b, 0xce, 0x33, 0x57, 0x6b, 0x31, 0x5e, 0xce, 0xcb, 0xb6, 0x40, 0x68, 0x37, 0xbf, 0x51, 0xf5}
	p.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{X: tpm2.TPM2BECCParameter{Buffer: x}, Y: tpm2.TPM2BECCParameter{Buffer: y}})
	return tpm2.Marshal(p)
}

func TestFuzzSeedsAreValid(t *testing.T) {
	if _, err := tpmattest.ParseEK(validEK(t)); err != nil {
		t.Fatalf("EK seed: %v", err)
	}
	if _, err := tpmattest.ParseAK(validAK(t)); err != nil {
		t.Fatalf("AK seed: %v", err)
	}
}

func publicSeeds(f *testing.F) {
	f.Add(validEK(f))
	f.Add(validAK(f))
	f.Add(tpm2.Marshal(tpm2.RSAEKTemplate))
	f.Add(tpm2.Marshal(tpm2.ECCEKTemplate))
	f.Add(tpm2.Marshal(tpm.AKTemplate))
	f.Add([]byte{})
	f.Add([]byte{0x00, 0x01})
}

// FuzzParseEK: an agent's EK public area is untrusted. Parsing never
// panics; whatever it accepts is canonical, hashes to a 64-digit hex EK
// hash, and can be challenged.
func FuzzParseEK(f *testing.F) {
	publicSeeds(f)
	ak, err := tpmattest.ParseAK(validAK(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ek, err := tpmattest.ParseEK(b)
		if err != nil {
			return
		}
		if len(ek.Hash) != 64 || strings.ToLower(ek.Hash) != ek.Hash {
			t.Fatalf("EK hash %q", ek.Hash)
		}
		if p, err := tpm2.Unmarshal[tpm2.TPMTPublic](b); err != nil || string(tpm2.Marshal(*p)) != string(b) {
			t.Fatalf("accepted a non-canonical encoding")
		}
		if _, _, err := tpmattest.CreateChallenge(rand.Reader, ek, ak); err != nil {
			t.Fatalf("accepted an EK that cannot be challenged: %v", err)
		}
	})
}

// FuzzParseAK: an agent's AK public area is untrusted. Whatever is accepted
// is a restricted signing key bound to its TPM, and its name is a SHA-256
// name (2-byte algorithm id and a 32-byte digest).
func FuzzParseAK(f *testing.F) {
	publicSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		ak, err := tpmattest.ParseAK(b)
		if err != nil {
			return
		}
		p, err := tpm2.Unmarshal[tpm2.TPMTPublic](b)
		if err != nil {
			t.Fatalf("accepted what does not decode: %v", err)
		}
		a := p.ObjectAttributes
		if !a.Restricted || !a.FixedTPM || !a.FixedParent || !a.SignEncrypt || a.Decrypt {
			t.Fatalf("accepted attributes %+v", a)
		}
		if len(ak.Name) != 2+sha256.Size {
			t.Fatalf("name of %d bytes", len(ak.Name))
		}
	})
}

// FuzzParseEKCertificate: an EK certificate file is operator input from a
// vendor; reading it never panics, and what it accepts hashes to an EK hash.
func FuzzParseEKCertificate(f *testing.F) {
	der := selfSigned(f, mustRSA(f))
	f.Add(der)
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"))
	f.Add([]byte{0x30, 0x03, 0x30, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := tpmattest.ParseEKCertificate(b)
		if err == nil && len(h) != 64 {
			t.Fatalf("hash %q", h)
		}
	})
}

func mustRSA(f *testing.F) *rsa.PublicKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		f.Fatal(err)
	}
	return &k.PublicKey
}

// FuzzAnswer: a round-two answer (challenge id and proof) is untrusted. The
// shape check never panics, and no answer but the right one verifies.
func FuzzAnswer(f *testing.F) {
	secret := make([]byte, tpmattest.SecretSize)
	id := strings.Repeat("0a", tpmattest.ChallengeIDBytes)
	right := tpmattest.Proof(secret, id, "spki")
	f.Add(id, right)
	f.Add("", []byte{})
	f.Add(strings.Repeat("zz", 16), right)
	f.Fuzz(func(t *testing.T, cid string, proof []byte) {
		if tpmattest.CheckAnswerShape(cid, proof) != nil {
			return
		}
		err := tpmattest.VerifyProof(secret, id, "spki", proof)
		if (err == nil) != (string(proof) == string(right)) {
			t.Fatalf("VerifyProof(%x) = %v", proof, err)
		}
	})
}
