// Package chaintest builds pact's certificate chains in code, for the tests
// of every verifier: domain roots, journal CAs and journal intermediates
// made with internal/caprofile's templates (and journal/ca's intermediate
// profile), and the agent, journal server and operator leaves they sign.
//
//	root := chaintest.NewRoot("site.example")
//	jca := root.JournalCA("j1", chaintest.Names{DNS: []string{"j1.site.example"}})
//	inter := jca.Intermediate("j1", chaintest.Names{DNS: []string{"j1.site.example"}})
//	leaf := inter.Agent("n1")        // leaf.Chain: [leaf, intermediate, journal CA]
//	legacy := root.Intermediate("j2", chaintest.Names{}).Agent("n2") // [leaf, intermediate]
//
// Any CA signs anything, so the shapes pact never issues (an agent under a
// journal CA, an operator under a legacy intermediate) are as easy to make
// as the ones it does: that is what the verifiers' tests need. Keys are
// P-256 and live in memory. It is for tests only; it panics on failure,
// which only a broken crypto/rand can cause.
package chaintest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"slices"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/pki"
)

// Validity of what this package makes, around the time it is made: every
// certificate is valid from an hour ago, a leaf for 12 hours, an
// intermediate for a day, a journal CA for two, a root for three.
const (
	leafLife         = 12 * time.Hour
	intermediateLife = 24 * time.Hour
	journalCALife    = 48 * time.Hour
	rootLife         = 72 * time.Hour
)

// Names are the DNS names and addresses a journal serves under.
type Names struct {
	DNS []string
	IPs []net.IP
}

// CA is a certificate authority of a test domain with its key.
type CA struct {
	Domain string
	Cert   *x509.Certificate
	Key    *ecdsa.PrivateKey
	// Root is the domain root this CA chains to (itself for a root).
	Root *x509.Certificate
	// Path is this CA and the CAs above it up to, not including, the root
	// (nil for a root): what a leaf it signs sends after itself.
	Path []*x509.Certificate
}

// Leaf is an end-entity certificate with its key and the chain its holder
// sends in TLS.
type Leaf struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// Chain is the leaf and the CAs above it, not the root.
	Chain []*x509.Certificate
	Root  *x509.Certificate
}

// DER is Chain as DER, as a TLS peer sends it.
func (l *Leaf) DER() [][]byte {
	out := make([][]byte, len(l.Chain))
	for i, c := range l.Chain {
		out[i] = c.Raw
	}
	return out
}

// TLS is the leaf as a TLS certificate sending its whole chain.
func (l *Leaf) TLS() tls.Certificate {
	return tls.Certificate{Certificate: l.DER(), PrivateKey: l.Key, Leaf: l.Cert}
}

// PEM is Chain as concatenated PEM, as a certificate file holds it.
func (l *Leaf) PEM() []byte { return pki.EncodeCertsPEM(l.DER()...) }

// NewRoot makes a domain root from caprofile's template. Two roots of one
// domain (a rollover) share their subject and differ by key.
func NewRoot(domain string) *CA {
	key := newKey()
	now := time.Now()
	tmpl := caprofile.Root(domain, serial(), now.Add(-time.Hour), now.Add(rootLife))
	cert := create(tmpl, tmpl, key, key)
	return &CA{Domain: domain, Cert: cert, Key: key, Root: cert}
}

// JournalCA makes, signed by c, the journal CA of journal id permitting
// names and id itself (caprofile.JournalCA), as pact ca sign-journal makes
// one: it refuses --names without the journal id.
func (c *CA) JournalCA(id string, names Names) *CA {
	now := time.Now()
	dns := names.DNS
	if !slices.Contains(dns, id) {
		dns = append([]string{id}, dns...)
	}
	tmpl := caprofile.JournalCA(caprofile.JournalCAParams{
		Domain: c.Domain, JournalID: id, DNSNames: dns, IPs: names.IPs,
		Serial: serial(), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(journalCALife),
	})
	return c.sub(tmpl)
}

// Intermediate makes, signed by c, a journal intermediate of journal id as
// journal/ca makes one: path length 0, constrained to the domain and names.
// Signed by a root it is a legacy intermediate; by a journal CA, a current
// one.
func (c *CA) Intermediate(id string, names Names) *CA {
	return c.sub(intermediateTemplate(c.Domain, id, names))
}

// UnconstrainedIntermediate is Intermediate without name constraints of its
// own: what a journal whose key was stolen could make. Whatever it signs is
// held to the constraints of the CAs above it only.
func (c *CA) UnconstrainedIntermediate(id string) *CA {
	tmpl := intermediateTemplate(c.Domain, id, Names{})
	tmpl.PermittedDNSDomainsCritical = false
	tmpl.PermittedDNSDomains, tmpl.ExcludedDNSDomains = nil, nil
	tmpl.PermittedIPRanges, tmpl.ExcludedIPRanges = nil, nil
	tmpl.PermittedURIDomains, tmpl.ExcludedURIDomains = nil, nil
	tmpl.PermittedEmailAddresses, tmpl.ExcludedEmailAddresses = nil, nil
	return c.sub(tmpl)
}

func intermediateTemplate(domain, id string, names Names) *x509.Certificate {
	now := time.Now()
	return caprofile.Intermediate(caprofile.IntermediateParams{
		Domain: domain, JournalID: id, DNSNames: names.DNS, IPs: names.IPs,
		Serial: serial(), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(intermediateLife),
	})
}

func (c *CA) sub(tmpl *x509.Certificate) *CA {
	key := newKey()
	cert := create(tmpl, c.Cert, key, c.Key)
	path := append([]*x509.Certificate{cert}, c.Path...)
	return &CA{Domain: c.Domain, Cert: cert, Key: key, Root: c.Root, Path: path}
}

// Agent signs an agent certificate for node of c's domain, as journal/ca
// does.
func (c *CA) Agent(node string) *Leaf {
	return c.Issue(caprofile.Agent(caprofile.LeafParams{Domain: c.Domain, Name: node}))
}

// In is c naming domain in what it makes from now on (c's certificate and
// key unchanged): a CA that signs for another trust domain than its own.
func (c *CA) In(domain string) *CA {
	d := *c
	d.Domain = domain
	return &d
}

// Server signs journal id's server certificate for names, as journal/ca
// does.
func (c *CA) Server(id string, names Names) *Leaf {
	return c.Issue(caprofile.JournalServer(caprofile.LeafParams{Domain: c.Domain, Name: id}, names.DNS, names.IPs))
}

// Operator signs the credential of operator name with role, as the
// ceremony and journal/ca do.
func (c *CA) Operator(name, role string) *Leaf {
	return c.Issue(caprofile.Operator(caprofile.LeafParams{Domain: c.Domain, Name: name}, role))
}

// Issue signs tmpl for a fresh key. A zero serial or validity is filled
// in (valid from an hour ago for 12 hours).
func (c *CA) Issue(tmpl *x509.Certificate) *Leaf {
	now := time.Now()
	if tmpl.SerialNumber == nil {
		tmpl.SerialNumber = serial()
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = now.Add(-time.Hour)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = now.Add(leafLife)
	}
	key := newKey()
	cert := create(tmpl, c.Cert, key, c.Key)
	return &Leaf{Cert: cert, Key: key, Chain: append([]*x509.Certificate{cert}, c.Path...), Root: c.Root}
}

// Pool is a pool of certs.
func Pool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

func create(tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) *x509.Certificate {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		panic("chaintest: " + err.Error())
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		panic("chaintest: " + err.Error())
	}
	return cert
}

func newKey() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic("chaintest: " + err.Error())
	}
	return k
}

func serial() *big.Int {
	n, err := pki.NewSerial()
	if err != nil {
		panic("chaintest: " + err.Error())
	}
	return n
}
