package journal

import (
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/ca"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

func certInfo(is *ca.Issued) *pactv1.CertificateInfo {
	return &pactv1.CertificateInfo{
		Serial:        is.Serial,
		SpkiSha256:    is.SPKISHA256,
		NotBeforeUnix: is.Cert.NotBefore.Unix(),
		NotAfterUnix:  is.NotAfter.Unix(),
		IssuerSerial:  is.IssuerSerial,
		Der:           is.DER,
	}
}

func fingerprint(spki []byte) string { return pki.SPKIFingerprintRaw(spki) }
