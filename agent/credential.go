package agent

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"time"

	"github.com/pact-hpc/pact/internal/pki"
)

// credential is the agent's journal-signed identity. Its private key lives
// only in memory and never prints: String, the fmt verbs and slog all show
// the public parts alone.
type credential struct {
	nodeID   string
	domain   string
	vcluster string
	serial   string
	notAfter time.Time
	leaf     *x509.Certificate
	tlsCert  tls.Certificate
	bundle   *x509.CertPool
}

func (c *credential) String() string {
	return fmt.Sprintf("credential{node=%s serial=%s not_after=%s}", c.nodeID, c.serial, c.notAfter.UTC().Format(time.RFC3339))
}

// GoString covers %#v, which would otherwise print the key.
func (c *credential) GoString() string { return c.String() }

func (c *credential) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("node_id", c.nodeID),
		slog.String("serial", c.serial),
		slog.String("not_after", c.notAfter.UTC().Format(time.RFC3339)),
	)
}

// newKey makes the agent's key pair, in RAM only.
func newKey() (crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: generate key: %w", err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: create CSR: %w", err)
	}
	return key, csr, nil
}

// newCredential checks what the journal returned before the agent uses it:
// the chain must verify to the domain root it already trusts, name a pact
// agent, and carry the agent's own public key.
func newCredential(key crypto.Signer, roots *x509.CertPool, chainDER, bundleDER [][]byte, vcluster string, now time.Time) (*credential, error) {
	if len(chainDER) == 0 {
		return nil, fmt.Errorf("agent: journal returned no certificate")
	}
	certs := make([]*x509.Certificate, len(chainDER))
	for i, d := range chainDER {
		c, err := x509.ParseCertificate(d)
		if err != nil {
			return nil, fmt.Errorf("agent: journal returned an unparsable certificate: %w", err)
		}
		certs[i] = c
	}
	leaf := certs[0]
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, fmt.Errorf("agent: journal returned a certificate that does not verify against the domain root: %w", err)
	}
	pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("agent: journal returned a certificate for another key")
	}
	id, err := pki.IdentityOf(leaf)
	if err != nil || id.Kind != pki.KindAgent {
		return nil, fmt.Errorf("agent: journal returned a certificate that names no pact agent")
	}
	bundle := x509.NewCertPool()
	for _, d := range bundleDER {
		if c, err := x509.ParseCertificate(d); err == nil {
			bundle.AddCert(c)
		}
	}
	return &credential{
		nodeID:   id.Name,
		domain:   id.Domain,
		vcluster: vcluster,
		serial:   pki.SerialHex(leaf.SerialNumber),
		notAfter: leaf.NotAfter,
		leaf:     leaf,
		tlsCert:  tls.Certificate{Certificate: chainDER, PrivateKey: key, Leaf: leaf},
		bundle:   bundle,
	}, nil
}

// renewAt is when to renew: RenewAt of the way through the lifetime.
func (c *credential) renewAt(fraction float64) time.Time {
	life := c.leaf.NotAfter.Sub(c.leaf.NotBefore)
	return c.leaf.NotBefore.Add(time.Duration(float64(life) * fraction))
}
