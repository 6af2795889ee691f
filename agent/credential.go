package agent

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/backoff"
	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/pki"
)

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

// certParser parses DER certificates, handing back a certificate already
// parsed (one of held, or one it parsed before) for the same DER instead
// of parsing it again. A journal sends the same CA certificates in every
// answer and stream (the roots, journal CAs and intermediates of its
// trust bundle, the intermediate and journal CA of each chain); parsed
// afresh each time, an agent held each of them two or three times, some
// 4 KB each with their DER. Certificates are never modified once parsed,
// so sharing them is safe.
type certParser struct {
	held []*x509.Certificate
}

// newCertParser reuses held (nil entries allowed).
func newCertParser(held ...[]*x509.Certificate) *certParser {
	p := &certParser{}
	for _, cs := range held {
		for _, c := range cs {
			if c != nil {
				p.held = append(p.held, c)
			}
		}
	}
	return p
}

// parse returns the certificate der encodes.
func (p *certParser) parse(der []byte) (*x509.Certificate, error) {
	if p != nil {
		for _, c := range p.held {
			if bytes.Equal(c.Raw, der) {
				return c, nil
			}
		}
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if p != nil {
		p.held = append(p.held, c)
	}
	return c, nil
}

// heldCerts are the certificates the agent holds parsed: the roots, the
// latest journal-signed chain and bundle, the latest streamed bundle. A
// new answer's certificates are taken from them where they are the same
// (certParser).
func (a *Agent) heldCerts() *certParser {
	a.mu.Lock()
	defer a.mu.Unlock()
	var chain, bundle []*x509.Certificate
	if a.lastJournal != nil {
		chain, bundle = a.lastJournal.Chain, a.lastJournal.Bundle
	}
	return newCertParser(a.roots, a.streamBundle, bundle, chain)
}

// journalIdentity checks what a journal returned (Enroll or RenewCert)
// before the agent uses it: the chain must verify to a domain root it
// already trusts (--ca-file: one, or two during a rollover) in the shape
// the journals accept ([leaf, intermediate, journal CA], or legacy [leaf,
// intermediate]), name a pact agent, and carry the agent's own public key.
// It returns the journal-signed identity (its key lives only in memory and
// never prints) and who the certificate names. Certificates parse reuses
// (nil: none) are not parsed again.
func journalIdentity(key crypto.Signer, roots *x509.CertPool, chainDER, bundleDER [][]byte, now time.Time, parse *certParser) (*identity.Identity, pki.Identity, error) {
	if len(chainDER) == 0 {
		return nil, pki.Identity{}, fmt.Errorf("agent: journal returned no certificate")
	}
	if parse == nil {
		parse = newCertParser()
	}
	certs := make([]*x509.Certificate, len(chainDER))
	for i, d := range chainDER {
		c, err := parse.parse(d)
		if err != nil {
			return nil, pki.Identity{}, fmt.Errorf("agent: journal returned an unparsable certificate: %w", err)
		}
		certs[i] = c
	}
	leaf := certs[0]
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		// A certificate the journal has just issued is valid now on its
		// clock: on ours it is not, so ours is off.
		return nil, pki.Identity{}, fmt.Errorf("agent: the journal's new certificate is valid from %s to %s, but this node's clock says %s (fix NTP on this node): %w",
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), channel.ErrClockSkew)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, pki.Identity{}, fmt.Errorf("agent: journal returned a certificate that does not verify against the domain root: %w", err)
	}
	if !identity.KeyMatches(leaf, key) {
		return nil, pki.Identity{}, fmt.Errorf("agent: journal returned a certificate for another key")
	}
	who, err := pki.IdentityOf(leaf)
	if err != nil || who.Kind != pki.KindAgent {
		return nil, pki.Identity{}, fmt.Errorf("agent: journal returned a certificate that names no pact agent")
	}
	// The journals accept an agent certificate only from a journal
	// intermediate (under its journal CA, or the root for a journal not
	// migrated yet): one of another shape would be refused at every call.
	var shape error
	for _, c := range chains {
		if shape = caprofile.CheckChainShape(pki.KindAgent, c, who.Domain); shape == nil {
			break
		}
	}
	if shape != nil {
		return nil, pki.Identity{}, fmt.Errorf("agent: journal returned %w", shape)
	}
	var bundle []*x509.Certificate
	for _, d := range bundleDER {
		if c, err := parse.parse(d); err == nil {
			bundle = append(bundle, c)
		}
	}
	id, err := identity.New(identity.SourceJournal, certs, key, bundle)
	if err != nil {
		return nil, pki.Identity{}, fmt.Errorf("agent: %w", err)
	}
	return id, who, nil
}

// renewalTime is when a journal-signed certificate is due for renewal:
// fraction of the way through the leaf's lifetime, plus jitter of up to a
// twentieth of the lifetime so a fleet enrolled at once does not renew at
// once. It is chosen once per certificate, drawn from j (the agent's
// backoff.Jitter).
func renewalTimeWith(id *identity.Identity, fraction float64, j backoff.Jitter) time.Time {
	leaf := id.Chain[0]
	return renewalAt(leaf.NotBefore, id.NotAfter, fraction, j.Draw(id.NotAfter.Sub(leaf.NotBefore)/20))
}

// readJoinToken reads the join token file. Its content never reaches a log
// or an error: only the file name does.
func readJoinToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: --join-token-file: %w", ErrBadConfig, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%w: --join-token-file %s is empty; write the token pact node token create printed into it", ErrBadConfig, path)
	}
	return tok, nil
}
