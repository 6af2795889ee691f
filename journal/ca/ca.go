// Package ca is a journal's local certificate authority: an ephemeral
// intermediate key that lives only in memory, signed by the journal's
// journal CA (internal/caprofile; or, in the layout before journal CAs, by
// the domain root itself), used to sign agent, operator and standby
// certificates and the journal's own server certificate.
//
// Signing is safe for concurrent use and takes no lock: the current
// intermediate is swapped atomically on rotation.
package ca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
)

// Sentinel errors.
var (
	ErrUpstream        = errors.New("ca: upstream authority")
	ErrInvalidRole     = errors.New("ca: invalid role")
	ErrCSRTooLarge     = errors.New("ca: CSR too large")
	ErrCSRMalformed    = errors.New("ca: malformed CSR")
	ErrKeyPolicy       = errors.New("ca: CSR key not allowed")
	ErrCSRSignature    = errors.New("ca: CSR signature invalid")
	ErrCSRExtensions   = errors.New("ca: CSR requests extensions")
	ErrIssuedInvalid   = errors.New("ca: issued certificate failed validation")
	ErrInvalidLifetime = errors.New("ca: invalid lifetime")
	// ErrJournalCA: the journal CA certificate does not fit this journal
	// (caprofile.CheckJournalCA), or not its key.
	ErrJournalCA = errors.New("ca: journal CA")
	// ErrJournalCAKept: Rotate re-read the journal CA certificate and
	// refused the one it found; it rotated under the journal CA it had.
	ErrJournalCAKept = errors.New("ca: new journal CA certificate refused; the one in use is kept")
)

// Issuer is what signs a journal's intermediates: its journal CA (the
// certificate from --journal-ca-cert, the key opened with
// internal/keystore), or, in the legacy layout, the domain root itself.
type Issuer struct {
	Certificate *x509.Certificate
	Signer      crypto.Signer
}

// MaxCSRBytes caps a CSR before any parsing: a P-384 CSR is ~500 bytes.
const MaxCSRBytes = 4096

// Config configures a journal's CA.
type Config struct {
	// Issuer signs the intermediates: the journal CA, or (legacy layout)
	// one of Roots with its key.
	Issuer Issuer
	// Roots are the domain roots the journal trusts: one, or two of the
	// same trust domain during a root rollover. A journal CA must be
	// signed by one of them.
	Roots []*x509.Certificate
	// ReloadIssuer, if set, reads the journal CA certificate again (its
	// file): Rotate calls it, and takes a changed certificate for the same
	// key that passes caprofile.CheckJournalCA (the renewal ceremony, with
	// no restart). Not called in the legacy layout.
	ReloadIssuer func() (*x509.Certificate, error)
	// Upstream is the legacy layout's shorthand (tests and tools that sign
	// with a root they hold): the root signs the intermediates (Issuer) and
	// is the only root (Roots). It excludes Issuer and Roots.
	Upstream  RootAuthority
	JournalID string
	// LeafLifetime is the validity of agent certificates.
	LeafLifetime time.Duration
	// IntermediateLifetime is the validity of the ephemeral intermediate; it
	// should be a few multiples of LeafLifetime so rotation at half life
	// never cuts a leaf short.
	IntermediateLifetime time.Duration
	// Backdate is subtracted from NotBefore to tolerate clock skew.
	Backdate time.Duration
	// ServerDNSNames and ServerIPs go into the journal's server certificate.
	ServerDNSNames []string
	ServerIPs      []net.IP
	// ServerNames, if set, gives the names for the server certificate
	// under a journal CA (nil: the legacy layout's root) in place of
	// ServerDNSNames and ServerIPs: a journal's own names (localhost, its
	// host name) go in only where its journal CA permits them, so a
	// renewed journal CA may permit fewer of them.
	ServerNames func(journalCA *x509.Certificate) ([]string, []net.IP)
	Clock       clock.Clock
}

// DefaultConfig returns the defaults: 3-day leaves, 9-day intermediates.
func DefaultConfig() Config {
	return Config{
		LeafLifetime:         72 * time.Hour,
		IntermediateLifetime: 9 * 24 * time.Hour,
		Backdate:             time.Minute,
		Clock:                clock.Real{},
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	switch {
	case c.Upstream != nil && (c.Issuer.Certificate != nil || c.Issuer.Signer != nil || len(c.Roots) > 0):
		errs = append(errs, errors.New("ca: Upstream and Issuer/Roots exclude each other"))
	case c.Upstream == nil && (c.Issuer.Certificate == nil || c.Issuer.Signer == nil):
		errs = append(errs, errors.New("ca: Issuer (certificate and signer) is required"))
	case c.Upstream == nil && len(c.Roots) == 0:
		errs = append(errs, errors.New("ca: Roots are required"))
	}
	if err := pki.ValidateName("journal id", c.JournalID); err != nil {
		errs = append(errs, err)
	}
	if c.LeafLifetime < time.Minute {
		errs = append(errs, fmt.Errorf("ca: LeafLifetime %v is shorter than a minute", c.LeafLifetime))
	}
	if c.IntermediateLifetime < 2*c.LeafLifetime {
		errs = append(errs, fmt.Errorf("ca: IntermediateLifetime %v must be at least twice LeafLifetime %v", c.IntermediateLifetime, c.LeafLifetime))
	}
	if c.Backdate < 0 {
		errs = append(errs, errors.New("ca: Backdate must not be negative"))
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("ca: Clock is required"))
	}
	for _, n := range c.ServerDNSNames {
		// Each name is also a name constraint of the intermediate, which
		// cannot hold an empty label.
		if n == "" || strings.Contains(n, "..") || strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".") {
			errs = append(errs, fmt.Errorf("ca: server name %q has an empty label; give names like j1.site.example", n))
		}
	}
	return errors.Join(errs...)
}

// CA signs agent certificates with an in-memory intermediate.
type CA struct {
	cfg    Config
	domain string
	// issuer signs the next intermediate; Rotate may replace it (a renewed
	// journal CA certificate).
	issuer atomic.Pointer[issuer]
	cur    atomic.Pointer[intermediate]
}

// issuer is Config.Issuer as the CA holds it.
type issuer struct {
	cert   *x509.Certificate
	signer crypto.Signer
	// legacy: the issuer is a domain root (no journal CA).
	legacy bool
	serial string
	// dnsNames and ips are the names the journal's server certificates
	// carry under this issuer (Config.ServerNames).
	dnsNames []string
	ips      []net.IP
}

type intermediate struct {
	key    crypto.Signer // never leaves this struct
	cert   *x509.Certificate
	serial string
	server *tls.Certificate
	// issuer signed cert.
	issuer *issuer
}

// New creates the CA and its first intermediate.
func New(cfg Config) (*CA, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.ServerDNSNames = append([]string(nil), cfg.ServerDNSNames...)
	cfg.ServerIPs = append([]net.IP(nil), cfg.ServerIPs...)
	if cfg.Upstream != nil {
		cfg.Issuer = Issuer{Certificate: cfg.Upstream.Root(), Signer: cfg.Upstream.Signer()}
		cfg.Roots = []*x509.Certificate{cfg.Upstream.Root()}
		cfg.Upstream = nil
	}
	cfg.Roots = append([]*x509.Certificate(nil), cfg.Roots...)
	domain, err := CheckRoots(cfg.Roots)
	if err != nil {
		return nil, err
	}
	c := &CA{cfg: cfg, domain: domain}
	iss, err := c.checkIssuer(cfg.Issuer.Certificate, cfg.Issuer.Signer)
	if err != nil {
		return nil, err
	}
	c.issuer.Store(iss)
	if err := c.rotate(); err != nil {
		return nil, err
	}
	return c, nil
}

// CheckRoots checks the domain roots a journal is given: one or two CA
// certificates naming one SPIFFE trust domain (two during a root
// rollover), and returns that domain.
func CheckRoots(roots []*x509.Certificate) (string, error) {
	switch {
	case len(roots) == 0:
		return "", fmt.Errorf("%w: no domain root certificate", ErrUpstream)
	case len(roots) > 2:
		return "", fmt.Errorf("%w: %d root certificates; give one domain root, or two of the same domain during a root rollover", ErrUpstream, len(roots))
	}
	domain := ""
	for i, r := range roots {
		if r == nil || !r.IsCA {
			return "", fmt.Errorf("%w: root certificate %d is not a CA certificate", ErrUpstream, i+1)
		}
		d, err := DomainOf(r)
		if err != nil {
			return "", err
		}
		if domain != "" && d != domain {
			return "", fmt.Errorf("%w: the roots name two trust domains, %s and %s; a root rollover keeps the domain: give only roots of the journal's domain", ErrUpstream, domain, d)
		}
		domain = d
	}
	return domain, nil
}

// checkIssuer checks an issuer against the roots, the journal's id and its
// names: a root itself (legacy) or a journal CA for this journal.
func (c *CA) checkIssuer(cert *x509.Certificate, signer crypto.Signer) (*issuer, error) {
	if !publicKeysEqual(signer.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("%w: the signing key does not belong to certificate %s", ErrUpstream, cert.Subject.CommonName)
	}
	for _, r := range c.cfg.Roots {
		if bytes.Equal(r.Raw, cert.Raw) {
			dnsNames, ips := c.namesUnder(nil)
			return &issuer{cert: cert, signer: signer, legacy: true, dnsNames: dnsNames, ips: ips}, nil
		}
	}
	dnsNames, ips := c.namesUnder(cert)
	if err := caprofile.CheckJournalCA(cert, c.cfg.Roots, c.cfg.JournalID, c.domain, dnsNames, ips, c.cfg.Clock.Now()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrJournalCA, err)
	}
	// Nothing wider than this journal: a journal CA that permits another
	// journal's names, or a whole zone, is refused before it signs
	// anything (and so before the journal publishes it into Raft).
	if err := caprofile.CheckJournalCANames(cert, c.cfg.JournalID, dnsNames, ips); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrJournalCA, err)
	}
	return &issuer{cert: cert, signer: signer, serial: pki.SerialHex(cert.SerialNumber), dnsNames: dnsNames, ips: ips}, nil
}

// namesUnder is the server certificate's names under journalCA (nil: the
// root).
func (c *CA) namesUnder(journalCA *x509.Certificate) ([]string, []net.IP) {
	if c.cfg.ServerNames != nil {
		return c.cfg.ServerNames(journalCA)
	}
	return c.cfg.ServerDNSNames, c.cfg.ServerIPs
}

// Domain is the domain id (SPIFFE trust domain) of the root.
func (c *CA) Domain() string { return c.domain }

// Root is the first domain root certificate (Roots).
func (c *CA) Root() *x509.Certificate { return c.cfg.Roots[0] }

// Roots are the domain roots this CA's chains lead to (one or two).
func (c *CA) Roots() []*x509.Certificate { return append([]*x509.Certificate(nil), c.cfg.Roots...) }

// Legacy reports whether the domain root signs the intermediates itself
// (no journal CA: the layout before issue 23).
func (c *CA) Legacy() bool { return c.cur.Load().issuer.legacy }

// JournalCA is the journal CA certificate that signed the current
// intermediate; nil in the legacy layout.
func (c *CA) JournalCA() *x509.Certificate {
	if iss := c.cur.Load().issuer; !iss.legacy {
		return iss.cert
	}
	return nil
}

// JournalCASerial is the hex serial of JournalCA ("" in the legacy layout):
// the issuer serial Raft records for the current intermediate.
func (c *CA) JournalCASerial() string { return c.cur.Load().issuer.serial }

// OperatorIssuer is what signed an operator credential SignOperator made:
// the intermediate and the journal CA above it, or a domain root itself
// (the legacy layout). The registry records it with the credential.
type OperatorIssuer struct {
	IntermediateSerial string
	JournalCASerial    string
	Root               bool
}

// SignOperator signs an operator credential for a CSR's public key with the
// current intermediate: the chain is [operator, intermediate, journal CA],
// and the credential's NotAfter is capped at the intermediate's (compare
// the certificate's NotAfter with what was asked). Never with the journal
// CA, which signs intermediates only. In the legacy layout the domain root
// signs it, as before. It returns what signed, read with the key used.
func (c *CA) SignOperator(csr *CSR, name, role string, lifetime time.Duration) (*x509.Certificate, OperatorIssuer, error) {
	inter := c.cur.Load()
	now := c.cfg.Clock.Now()
	if inter.issuer.legacy {
		cert, err := signAdmin(inter.issuer.cert, inter.issuer.signer, csr.PublicKey, name, role, lifetime, now)
		return cert, OperatorIssuer{Root: true}, err
	}
	cert, err := signAdmin(inter.cert, inter.key, csr.PublicKey, name, role, lifetime, now)
	return cert, OperatorIssuer{IntermediateSerial: inter.serial, JournalCASerial: inter.issuer.serial}, err
}

// Intermediate is the current intermediate certificate.
func (c *CA) Intermediate() *x509.Certificate { return c.cur.Load().cert }

// IntermediateSerial is the current intermediate's serial in hex, as the
// registry records it (kept with the intermediate: Enroll asks twice).
func (c *CA) IntermediateSerial() string { return c.cur.Load().serial }

// Current is the current intermediate and the journal CA that signed it
// (nil in the legacy layout), read together: what the journal publishes.
func (c *CA) Current() (inter, journalCA *x509.Certificate) {
	in := c.cur.Load()
	if in.issuer.legacy {
		return in.cert, nil
	}
	return in.cert, in.issuer.cert
}

// chainAbove is the intermediate's chain up to (not including) the root:
// the intermediate, then its journal CA unless the root signed it.
func (in *intermediate) chainAbove() [][]byte {
	if in.issuer.legacy {
		return [][]byte{in.cert.Raw}
	}
	return [][]byte{in.cert.Raw, in.issuer.cert.Raw}
}

// ServerCertificate is the journal's TLS certificate with its chain.
func (c *CA) ServerCertificate() *tls.Certificate { return c.cur.Load().server }

// RotationDue reports whether the intermediate has passed half its life.
func (c *CA) RotationDue(now time.Time) bool {
	cert := c.cur.Load().cert
	half := cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) / 2)
	return !now.Before(half)
}

// Rotate makes a fresh intermediate key and certificate and swaps them in.
// Certificates signed by the previous one stay valid while it is in the
// trust bundle.
//
// With Config.ReloadIssuer it first reads the journal CA certificate
// again: a changed one for the same key that fits this journal is taken
// (the renewal ceremony). One that does not is refused: the rotation still
// happens, under the journal CA in use, and Rotate returns an error that
// wraps ErrJournalCAKept saying why.
func (c *CA) Rotate() error {
	kept := c.reloadIssuer()
	if err := c.rotate(); err != nil {
		return errors.Join(err, kept)
	}
	return kept
}

// reloadIssuer takes a renewed journal CA certificate (ReloadIssuer).
func (c *CA) reloadIssuer() error {
	cur := c.issuer.Load()
	if c.cfg.ReloadIssuer == nil || cur.legacy {
		return nil
	}
	keep := fmt.Sprintf("still signing with journal CA %s (valid until %s)", cur.serial, cur.cert.NotAfter.UTC().Format(time.RFC3339))
	cert, err := c.cfg.ReloadIssuer()
	if err != nil {
		return fmt.Errorf("%w: reading it: %w; %s", ErrJournalCAKept, err, keep)
	}
	if bytes.Equal(cert.Raw, cur.cert.Raw) {
		return nil
	}
	if !publicKeysEqual(cert.PublicKey, cur.signer.Public()) {
		return fmt.Errorf("%w: journal CA %s is for another key than this journal's journal CA key: have the ceremony sign a CSR made with this journal's key (pact-journal ca-request); %s", ErrJournalCAKept, pki.SerialHex(cert.SerialNumber), keep)
	}
	next, err := c.checkIssuer(cert, cur.signer)
	if err != nil {
		return fmt.Errorf("%w: journal CA %s: %w; %s", ErrJournalCAKept, pki.SerialHex(cert.SerialNumber), err, keep)
	}
	c.issuer.Store(next)
	return nil
}

func (c *CA) rotate() error {
	now := c.cfg.Clock.Now()
	iss := c.issuer.Load()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("ca: intermediate key: %w", err)
	}
	serial, err := pki.NewSerial()
	if err != nil {
		return err
	}
	id := pki.Identity{Kind: pki.KindJournal, Name: c.cfg.JournalID, Domain: c.domain}
	notAfter := now.Add(c.cfg.IntermediateLifetime)
	if notAfter.After(iss.cert.NotAfter) {
		notAfter = iss.cert.NotAfter
	}
	if !notAfter.After(now) {
		if iss.legacy {
			return fmt.Errorf("%w: root certificate expired at %v", ErrUpstream, iss.cert.NotAfter)
		}
		return fmt.Errorf("%w: journal CA %s expired at %v: renew it (docs/ceremony.md)", ErrUpstream, iss.serial, iss.cert.NotAfter)
	}
	// A stolen intermediate key, or a bug in leaf issuance, cannot mint an
	// identity a verifier of this domain accepts outside the domain and
	// the journal's names (RFC 5280 name constraints; caprofile.Constrain).
	tmpl := caprofile.Intermediate(caprofile.IntermediateParams{
		Domain: c.domain, JournalID: c.cfg.JournalID, DNSNames: iss.dnsNames, IPs: iss.ips,
		Serial: serial, NotBefore: now.Add(-c.cfg.Backdate), NotAfter: notAfter,
	})
	der, err := x509.CreateCertificate(rand.Reader, tmpl, iss.cert, key.Public(), iss.signer)
	if err != nil {
		return fmt.Errorf("%w: sign intermediate: %w", ErrUpstream, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("ca: parse intermediate: %w", err)
	}
	inter := &intermediate{key: key, cert: cert, serial: pki.SerialHex(cert.SerialNumber), issuer: iss}
	server, err := c.issueServer(inter, id, now)
	if err != nil {
		return err
	}
	inter.server = server
	c.cur.Store(inter)
	return nil
}

func (c *CA) issueServer(inter *intermediate, id pki.Identity, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca: server key: %w", err)
	}
	serial, err := pki.NewSerial()
	if err != nil {
		return nil, err
	}
	skid, err := caprofile.KeyID(key.Public())
	if err != nil {
		return nil, err
	}
	tmpl := caprofile.JournalServer(caprofile.LeafParams{
		Domain: id.Domain, Name: id.Name, Serial: serial, SubjectKeyID: skid,
		NotBefore: now.Add(-c.cfg.Backdate), NotAfter: inter.cert.NotAfter,
	}, inter.issuer.dnsNames, inter.issuer.ips)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, inter.cert, key.Public(), inter.key)
	if err != nil {
		return nil, fmt.Errorf("ca: sign server certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca: parse server certificate: %w", err)
	}
	return &tls.Certificate{Certificate: append([][]byte{der}, inter.chainAbove()...), PrivateKey: key, Leaf: leaf}, nil
}

// CSR is a certificate request that passed policy and signature checks.
// Only its public key is ever used.
type CSR struct {
	PublicKey crypto.PublicKey
	// SPKI is the DER SubjectPublicKeyInfo; its SHA-256 binds a node to its key.
	SPKI []byte
}

// ParseCSR checks an untrusted CSR: size first, then key policy (ECDSA
// P-256/P-384 or Ed25519), then the self-signature. Everything in the
// request except the public key is ignored.
func ParseCSR(der []byte) (*CSR, error) {
	if len(der) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrCSRMalformed)
	}
	if len(der) > MaxCSRBytes {
		return nil, fmt.Errorf("%w: %d bytes (limit %d)", ErrCSRTooLarge, len(der), MaxCSRBytes)
	}
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCSRMalformed, err)
	}
	if err := CheckKeyPolicy(req.PublicKey); err != nil {
		return nil, err
	}
	if !caprofile.SignatureAllowed(req.SignatureAlgorithm) {
		return nil, fmt.Errorf("%w: signature algorithm %v", ErrKeyPolicy, req.SignatureAlgorithm)
	}
	// The journal decides every extension (SANs, key usage, basic
	// constraints) from the registry; a CSR asking for any is refused
	// rather than silently trimmed, so a confused or hostile client learns
	// at once.
	if len(req.Extensions) > 0 {
		return nil, fmt.Errorf("%w: %d requested (SANs, key usage, CA flags...); send a CSR with a public key only", ErrCSRExtensions, len(req.Extensions))
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCSRSignature, err)
	}
	return &CSR{PublicKey: req.PublicKey, SPKI: req.RawSubjectPublicKeyInfo}, nil
}

// CheckKeyPolicy accepts ECDSA P-256, ECDSA P-384 and Ed25519 keys.
func CheckKeyPolicy(pub crypto.PublicKey) error {
	if why := caprofile.KeyPolicy(pub); why != "" {
		return fmt.Errorf("%w: %s", ErrKeyPolicy, why)
	}
	return nil
}

// Issued is an agent certificate with what the registry records about it.
type Issued struct {
	Cert         *x509.Certificate
	DER          []byte
	ChainDER     [][]byte // leaf, intermediate, journal CA (none in the legacy layout)
	Serial       string
	SPKISHA256   string
	NotAfter     time.Time
	IssuerSerial string
}

// SignAgent issues an agent certificate for csr's public key. Subject, SANs,
// extensions and validity come from the node id and config alone.
func (c *CA) SignAgent(csr *CSR, nodeID string) (*Issued, error) {
	if err := pki.ValidateName("node id", nodeID); err != nil {
		return nil, err
	}
	inter := c.cur.Load()
	now := c.cfg.Clock.Now()
	serial, err := pki.NewSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(c.cfg.LeafLifetime)
	if notAfter.After(inter.cert.NotAfter) {
		notAfter = inter.cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("%w: intermediate %s expired at %v; Rotate first", ErrIssuedInvalid, inter.serial, inter.cert.NotAfter)
	}
	id := pki.Identity{Kind: pki.KindAgent, Name: nodeID, Domain: c.domain}
	skid, err := caprofile.SPKIKeyID(csr.SPKI)
	if err != nil {
		return nil, err
	}
	tmpl := caprofile.Agent(caprofile.LeafParams{
		Domain: c.domain, Name: nodeID, Serial: serial, SubjectKeyID: skid,
		NotBefore: now.Add(-c.cfg.Backdate), NotAfter: notAfter,
	})
	der, err := x509.CreateCertificate(rand.Reader, tmpl, inter.cert, csr.PublicKey, inter.key)
	if err != nil {
		return nil, fmt.Errorf("ca: sign agent certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca: parse agent certificate: %w", err)
	}
	if err := validateAgentCert(cert, id, csr); err != nil {
		return nil, err
	}
	return &Issued{
		Cert:         cert,
		DER:          der,
		ChainDER:     append([][]byte{der}, inter.chainAbove()...),
		Serial:       pki.SerialHex(cert.SerialNumber),
		SPKISHA256:   pki.SPKIFingerprint(cert),
		NotAfter:     cert.NotAfter,
		IssuerSerial: inter.serial,
	}, nil
}

// validateAgentCert checks what leaves the CA against what was meant, so a
// template mistake can never ship a CA or a foreign-key certificate.
func validateAgentCert(cert *x509.Certificate, id pki.Identity, csr *CSR) error {
	var errs []error
	if cert.IsCA || cert.KeyUsage&(x509.KeyUsageCertSign|x509.KeyUsageCRLSign) != 0 {
		errs = append(errs, errors.New("is a CA"))
	}
	if cert.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		errs = append(errs, errors.New("key usage lacks digitalSignature (X.509-SVID §4.3)"))
	}
	if len(cert.ExtKeyUsage) != 2 || !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) || !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || len(cert.UnknownExtKeyUsage) != 0 {
		errs = append(errs, errors.New("EKU is not exactly serverAuth and clientAuth (X.509-SVID §4.4)"))
	}
	if len(cert.URIs) != 1 || cert.URIs[0].String() != id.SPIFFEID().String() {
		errs = append(errs, errors.New("URI SAN mismatch"))
	}
	if len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.EmailAddresses) != 0 {
		errs = append(errs, errors.New("unexpected SANs"))
	}
	if string(cert.RawSubjectPublicKeyInfo) != string(csr.SPKI) {
		errs = append(errs, errors.New("public key differs from the CSR"))
	}
	if want, err := caprofile.SPKIKeyID(cert.RawSubjectPublicKeyInfo); err != nil || !bytes.Equal(cert.SubjectKeyId, want) {
		errs = append(errs, errors.New("subject key identifier is not the key's (RFC 5280 §4.2.1.2, RFC 7093 §2 method 1)"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrIssuedInvalid, errors.Join(errs...))
	}
	return nil
}
