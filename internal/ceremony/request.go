package ceremony

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"

	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
)

// Request is a journal CA's certificate request, made on the journal host.
type Request struct {
	// PEM is the PKCS#10 request, signed by the journal CA's key.
	PEM []byte
	// Fingerprint is the hex SHA-256 of the key's SubjectPublicKeyInfo:
	// pact ca sign-journal prints the same for the request it signs.
	Fingerprint string
	// Created is true when the key was made now; false when an existing
	// one was reused (a renewal keeps its key).
	Created bool
	// Key is where the key is (never key material).
	Key string
}

// NewRequest makes the request of journal journalID's CA: it opens the
// key at spec, or makes it there if there is none (a renewal keeps the
// key, so the journal takes the new certificate without a restart), and
// signs a PKCS#10 request with it. The request's subject CN is the journal
// id and its SANs are dnsNames and ips: what the host asks for, shown to
// the ceremony; the ceremony signs only the key and decides the names
// itself.
func NewRequest(journalID string, spec keystore.Spec, opts keystore.Options, dnsNames []string, ips []net.IP) (*Request, error) {
	if err := pki.ValidateName("journal id", journalID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	if err := checkHostNames(dnsNames); err != nil {
		return nil, err
	}
	created := false
	key, err := keystore.Open(spec, opts)
	if errors.Is(err, keystore.ErrNoKey) {
		key, err = keystore.Generate(spec, opts)
		created = true
	}
	if err != nil {
		return nil, err
	}
	defer key.Close()
	if err := CheckKeyPolicy(key.Public()); err != nil {
		return nil, fmt.Errorf("%w (the key at %s; a journal CA key is made by this command when absent)", err, key)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: journalID},
		DNSNames:    dnsNames,
		IPAddresses: ips,
	}, key)
	if err != nil {
		return nil, fmt.Errorf("ceremony: sign the request with %s: %w", key, err)
	}
	csr, err := ParseCSR(der)
	if err != nil {
		return nil, fmt.Errorf("ceremony: the request made does not pass the ceremony's check: %w", err)
	}
	return &Request{
		PEM:         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		Fingerprint: csr.Fingerprint(),
		Created:     created,
		Key:         key.String(),
	}, nil
}
