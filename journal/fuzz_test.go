package journal_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/journal/ca"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// FuzzEnrollRequest feeds arbitrary wire bytes through what Enroll does
// with an untrusted request before it touches any state: decode, normalise
// the hardware identity, check the CSR. None of it may panic, and every
// refusal must be one of the typed errors the journal maps to a status.
func FuzzEnrollRequest(f *testing.F) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	for _, req := range []*pactv1.EnrollRequest{
		{Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:01"}, BmcSerial: "SN1"}, CsrDer: csr},
		{Hardware: &pactv1.HardwareIdentity{Macs: []string{"zz", "52-54-00-00-00-02"}, TpmEkHash: "00"}},
		{},
	} {
		b, _ := proto.Marshal(req)
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0x0f})
	hwErrs := []error{hwid.ErrInvalidMAC, hwid.ErrInvalidBMCSerial, hwid.ErrInvalidEKHash, hwid.ErrEmpty, hwid.ErrTooMany}
	csrErrs := []error{ca.ErrCSRTooLarge, ca.ErrCSRMalformed, ca.ErrKeyPolicy, ca.ErrCSRSignature, ca.ErrCSRExtensions}
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &pactv1.EnrollRequest{}
		if err := proto.Unmarshal(data, req); err != nil {
			return // gRPC would have refused it before the handler
		}
		h := req.GetHardware()
		if id, err := hwid.Normalize(h.GetMacs(), h.GetBmcSerial(), h.GetTpmEkHash()); err != nil {
			if !isOneOf(err, hwErrs) {
				t.Fatalf("untyped hardware error: %v", err)
			}
		} else if len(id.MACs) == 0 {
			t.Fatal("a normalised identity without a MAC")
		}
		if c, err := ca.ParseCSR(req.GetCsrDer()); err != nil {
			if !isOneOf(err, csrErrs) {
				t.Fatalf("untyped CSR error: %v", err)
			}
		} else if ca.CheckKeyPolicy(c.PublicKey) != nil || len(c.SPKI) == 0 {
			t.Fatal("accepted a CSR outside the key policy")
		}
	})
}

func isOneOf(err error, targets []error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
