package journal_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"maps"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// FuzzEnrollRequest feeds arbitrary wire bytes to the journal's real
// Enroll handler, in process, on a running journal (real Raft, real bbolt)
// whose registry holds nodes the seeds match. Whatever comes in: no panic;
// a refusal is one of pact's typed reasons (never INTERNAL) and changes
// nothing in the registry; a success hands out the certificate the
// registry now holds for the node, for the request's key.
func FuzzEnrollRequest(f *testing.F) {
	cfg := journaltest.Config(f.TempDir())
	h := journaltest.Start(f, cfg)
	h.Register(f, "n1", "SN1", "52:54:00:00:00:01")
	h.Register(f, "n2", "SN2", "52:54:00:00:00:02", "52:54:00:00:00:03")
	h.Register(f, "n3", "", "52:54:00:00:00:04")

	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr2, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, other)
	for _, req := range []*pactv1.EnrollRequest{
		{Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:01"}, BmcSerial: "SN1"}, CsrDer: csr},
		{Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:01"}, BmcSerial: "SN1"}, CsrDer: csr2},
		{Hardware: &pactv1.HardwareIdentity{Macs: []string{"52-54-00-00-00-03", "52:54:00:00:00:02"}, BmcSerial: "SN2"}, CsrDer: csr2},
		{Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:01"}, BmcSerial: "SN2"}, CsrDer: csr},
		{Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:04"}}, CsrDer: csr},
		{Hardware: &pactv1.HardwareIdentity{Macs: []string{"zz", "52-54-00-00-00-02"}, TpmEkHash: "00"}},
		{},
	} {
		b, _ := proto.Marshal(req)
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &pactv1.EnrollRequest{}
		if err := proto.Unmarshal(data, req); err != nil {
			return // gRPC would have refused it before the handler
		}
		before := registrySerials(h)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := h.J.EnrollInProcess(ctx, req)
		after := registrySerials(h)
		if err != nil {
			pe := apierr.FromError(err)
			if pe.Reason == "" || pe.Reason == apierr.Internal || pe.Code != pe.Reason.Code() {
				t.Fatalf("refusal without a typed reason: %v", err)
			}
			if !maps.Equal(before, after) {
				t.Fatalf("a refused enrollment (%v) changed the registry", err)
			}
			return
		}
		got, ok := after[resp.GetNodeId()]
		if !ok || got != resp.GetSerial() {
			t.Fatalf("enrolled %s with serial %s, the registry holds %q", resp.GetNodeId(), resp.GetSerial(), got)
		}
		c, err := ca.ParseCSR(req.GetCsrDer())
		if err != nil {
			t.Fatalf("enrolled with a CSR the journal cannot parse: %v", err)
		}
		leaf, err := x509.ParseCertificate(resp.GetCertChainDer()[0])
		if err != nil || !bytes.Equal(leaf.RawSubjectPublicKeyInfo, c.SPKI) {
			t.Fatalf("the certificate is not for the request's key (%v)", err)
		}
	})
}

// registrySerials maps each node to its state and certificate serial.
func registrySerials(h *journaltest.Harness) map[string]string {
	out := map[string]string{}
	for _, n := range h.J.RegistryForTest() {
		out[n.GetNodeId()] = n.GetCert().GetSerial()
		out[n.GetNodeId()+" state"] = n.GetState().String()
	}
	return out
}
