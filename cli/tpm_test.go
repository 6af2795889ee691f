package cli

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// ekCert makes an EK certificate for a fresh RSA-2048 key, as a TPM vendor
// would, and returns its PEM, its DER and the EK hash it must register:
// SHA-256 of the DER SubjectPublicKeyInfo (docs/tpm.md), computed here
// independently of the code under test.
func ekCert(t *testing.T, p *testPKI) (pemBytes, der []byte, hash string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageKeyEncipherment,
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, p.root, &k.PublicKey, p.rootKey)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), der, hex.EncodeToString(sum[:])
}

func TestEnrollWithEKCertificate(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	l := sharedJournal(t)
	pemBytes, der, want := ekCert(t, p)
	pemFile := p.write("ek.pem", pemBytes)
	derFile := p.write("ek.der", der)
	notCert := p.write("junk.pem", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"PEM certificate", []string{"n1", "--mac", "52:54:00:00:00:01", "--tpm-ek-cert", pemFile}, ExitOK, ""},
		{"DER certificate", []string{"n2", "--mac", "52:54:00:00:00:02", "--tpm-ek-cert", derFile}, ExitOK, ""},
		{"certificate and the same hash", []string{"n3", "--mac", "52:54:00:00:00:03", "--tpm-ek-cert", pemFile, "--tpm-ek-hash", strings.ToUpper(want)}, ExitOK, ""},
		{"certificate and another hash", []string{"n4", "--mac", "52:54:00:00:00:04", "--tpm-ek-cert", pemFile, "--tpm-ek-hash", strings.Repeat("ab", 32)}, ExitUsage, "is not the hash of the key in --tpm-ek-cert"},
		{"not a certificate", []string{"n5", "--mac", "52:54:00:00:00:05", "--tpm-ek-cert", notCert}, ExitUsage, "invalid EK certificate"},
		{"no such file", []string{"n6", "--mac", "52:54:00:00:00:06", "--tpm-ek-cert", p.dir + "/missing.pem"}, ExitUsage, "--tpm-ek-cert"},
		{"a directory", []string{"n7", "--mac", "52:54:00:00:00:07", "--tpm-ek-cert", p.dir}, ExitUsage, "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			suffix, mac := l.fresh()
			args := append([]string{}, tt.args...)
			args[0], args[2] = args[0]+suffix, liveMAC(mac+1) // a fresh node and MAC
			rec := &recorder{}
			code, _, stderr := runLive(t, l, l.alice(t), runOpts{rec: rec}, append([]string{"node", "enroll"}, args...)...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d: %s", code, tt.wantCode, stderr)
			}
			if tt.wantErr != "" {
				if !strings.Contains(stderr, tt.wantErr) {
					t.Errorf("stderr %q does not say %q", stderr, tt.wantErr)
				}
				if rec.callCount() != 0 {
					t.Errorf("a refused command called the journal")
				}
				return
			}
			if got := l.node(t, args[0]).GetHardware().GetTpmEkHash(); got != want {
				t.Errorf("registered EK hash %q, want %q", got, want)
			}
			// An EK hash belongs to one live node: free it for the next case.
			if _, err := l.h.AdminClient(t).DecommissionNode(context.Background(), &pactv1.DecommissionNodeRequest{NodeId: args[0]}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestBatchEKCertColumn(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	pemBytes, _, want := ekCert(t, p)
	p.write("ek-n1.pem", pemBytes)
	l := sharedJournal(t)
	suffix, mac := l.fresh()
	n1, n2 := "n1"+suffix, "n2"+suffix
	csv := p.write("rack.csv", []byte("node_id,mac,tpm_ek_cert\n"+n1+","+liveMAC(mac+1)+",ek-n1.pem\n"+n2+","+liveMAC(mac+2)+",missing.pem\n"))
	code, stdout, stderr := runLive(t, l, l.alice(t), runOpts{}, "node", "enroll", "--batch", csv)
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d (one row invalid): %s %s", code, ExitUsage, stdout, stderr)
	}
	if got := l.node(t, n1).GetHardware().GetTpmEkHash(); got != want {
		t.Errorf("n1 registered with EK hash %q, want %q (path relative to the CSV file)", got, want)
	}
	if l.exists(t, n2) {
		t.Errorf("n2, whose certificate is missing, was registered")
	}
	if !strings.Contains(stdout, "tpm_ek_cert") {
		t.Errorf("the n2 row's error does not name the column: %s", stdout)
	}
}
