package ca

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseCSR feeds ParseCSR untrusted bytes, as Enroll does. ParseCSR must
// never panic; whatever it accepts must satisfy key policy, and a
// certificate signed for it must carry exactly the key it parsed.
func FuzzParseCSR(f *testing.F) {
	fx := newFixture(f, nil)
	for _, kind := range []string{"P-256", "P-384", "Ed25519"} {
		f.Add(makeCSR(f, newKey(f, kind), nil))
	}
	f.Add(makeCSR(f, newKey(f, "P-256"), &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "pact-service-agent/other@pact.local"},
		DNSNames: []string{"journal.pact.local"},
	}))
	f.Add(makeCSR(f, newKey(f, "P-224"), nil))
	f.Add([]byte{})
	f.Add([]byte("not a CSR"))
	f.Add([]byte{0x30, 0x82, 0xff, 0xff})
	f.Add(bytes.Repeat([]byte{0x30, 0x80}, 64))

	f.Fuzz(func(t *testing.T, der []byte) {
		csr, err := ParseCSR(der)
		if err != nil {
			if csr != nil {
				t.Fatalf("ParseCSR returned a CSR and error %v", err)
			}
			known := false
			for _, s := range csrSentinels {
				known = known || errors.Is(err, s)
			}
			if !known {
				t.Fatalf("ParseCSR error %v wraps no CSR sentinel", err)
			}
			return
		}
		if len(der) > MaxCSRBytes {
			t.Fatalf("accepted %d bytes, over MaxCSRBytes", len(der))
		}
		if err := CheckKeyPolicy(csr.PublicKey); err != nil {
			t.Fatalf("accepted a key that fails policy: %v", err)
		}
		if len(csr.SPKI) == 0 {
			t.Fatal("accepted CSR has an empty SPKI")
		}
		iss, err := fx.ca.SignAgent(csr, "node-fuzz")
		if err != nil {
			t.Fatalf("SignAgent on an accepted CSR: %v", err)
		}
		if !bytes.Equal(iss.Cert.RawSubjectPublicKeyInfo, csr.SPKI) {
			t.Fatal("issued certificate's key differs from the CSR's SPKI")
		}
		if iss.Cert.Subject.CommonName != "pact-service-agent/node-fuzz@"+testDomain || len(iss.Cert.DNSNames) != 0 {
			t.Fatalf("issued certificate took content from the CSR: %v %v", iss.Cert.Subject, iss.Cert.DNSNames)
		}
	})
}

// TestFuzzSeedCorpus pins what each committed seed is, so the corpus keeps
// exercising both the accept path (through SignAgent) and each rejection.
func TestFuzzSeedCorpus(t *testing.T) {
	for _, tc := range []struct {
		file string
		want error // nil: accepted
	}{
		{"valid-p256", nil},
		{"valid-ed25519", nil},
		{"valid-p384-asks-for-sans-and-ca", ErrCSRExtensions},
		{"rsa2048-key-policy", ErrKeyPolicy},
		{"p256-sha1-signature", ErrKeyPolicy},
		{"p256-corrupt-signature", ErrCSRSignature},
		{"ed25519-truncated", ErrCSRMalformed},
		{"garbage", ErrCSRMalformed},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzParseCSR", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			lit, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "go test fuzz v1\n[]byte(")
			if !ok || !strings.HasSuffix(lit, ")") {
				t.Fatalf("%s is not a one-value []byte corpus file", tc.file)
			}
			der, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = ParseCSR([]byte(der))
			if tc.want == nil && err != nil {
				t.Errorf("ParseCSR = %v, want accepted", err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("ParseCSR = %v, want %v", err, tc.want)
			}
		})
	}
}
