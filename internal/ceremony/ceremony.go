// Package ceremony makes pact's long-lived CA certificates offline, so the
// domain root's key never has to be on a journal host (docs/ceremony.md):
//
//	on the ceremony machine (offline)   InitRoot: the domain root, its key in a file or a token
//	on each journal host                Request: the journal CA's key (TPM, token or file) and a CSR
//	on the ceremony machine             SignJournalCA: the journal CA certificate for that CSR's key
//	on the ceremony machine             IssueAdmin: the first platform-admin credential
//
// The templates and checks are internal/caprofile's; the keys are
// internal/keystore's. Nothing here imports the journal: pact ca runs on a
// machine that has none.
package ceremony

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pact-hpc/pact/internal/atomicfile"
	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
)

// Sentinel errors.
var (
	ErrExists    = errors.New("ceremony: file exists")
	ErrRoot      = errors.New("ceremony: domain root")
	ErrCSR       = errors.New("ceremony: certificate request")
	ErrKeyPolicy = errors.New("ceremony: key not allowed")
	ErrInput     = errors.New("ceremony: invalid input")
	ErrName      = errors.New("ceremony: not a host name or address")
)

// File names the ceremony uses by default.
const (
	RootCertFile  = "ca.pem"
	RootKeyFile   = "ca-key.pem"
	AdminCertFile = "admin.pem"
	AdminKeyFile  = "admin-key.pem"
)

// DefaultAdminLifetime is the first credential's validity unless asked
// otherwise: days, as every operator credential (pact admin renew keeps it
// alive once the quorum is up).
const DefaultAdminLifetime = 7 * 24 * time.Hour

// MaxCSRBytes bounds a certificate request read from a file.
const MaxCSRBytes = 16 << 10

// backdate is how far before now a CA certificate's validity starts, so a
// journal host whose clock runs behind the ceremony machine's accepts it.
const backdate = time.Hour

// DefaultRootKey is where InitRoot puts the root key unless told: a 0600
// file beside the certificate.
func DefaultRootKey(dir string) keystore.Spec {
	return keystore.Spec{Backend: keystore.BackendFile, Location: filepath.Join(dir, RootKeyFile)}
}

// InitRoot makes a domain root: a new key at key (DefaultRootKey(dir) when
// key is the zero Spec) and DIR/ca.pem, the self-signed certificate of the
// caprofile.Root template. It refuses, writing nothing, when DIR/ca.pem or
// the key exists.
func InitRoot(dir, domain string, key keystore.Spec, opts keystore.Options, lifetime time.Duration, now time.Time) (*x509.Certificate, error) {
	if err := pki.ValidateDomain(domain); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	if lifetime <= 0 {
		lifetime = caprofile.DefaultRootLifetime
	}
	if lifetime < 24*time.Hour {
		return nil, fmt.Errorf("%w: root lifetime %v is shorter than a day (the default is %v)", ErrInput, lifetime, caprofile.DefaultRootLifetime)
	}
	if dir == "" {
		return nil, fmt.Errorf("%w: no directory for the root", ErrInput)
	}
	if key == (keystore.Spec{}) {
		key = DefaultRootKey(dir)
	}
	certPath := filepath.Join(dir, RootCertFile)
	if _, err := os.Lstat(certPath); err == nil {
		// Never advise removing it: the site may trust it.
		return nil, fmt.Errorf("%w: %s already holds a domain root; nothing was written. A root is made once per domain: use it (pact ca show %s), or give another --dir for a new one (a rollover: docs/rollover.md)", ErrExists, dir, certPath)
	}
	if err := absent(certPath); err != nil {
		return nil, err
	}
	_, statErr := os.Stat(dir)
	madeDir := errors.Is(statErr, os.ErrNotExist)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ceremony: create %s: %w", dir, err)
	}
	signer, err := keystore.Generate(key, opts)
	if err != nil {
		if madeDir {
			_ = os.Remove(dir) // only if still empty
		}
		return nil, err
	}
	defer signer.Close()
	cert, err := selfSign(domain, signer, lifetime, now)
	if err == nil {
		err = writeNew(certPath, pki.EncodeCertsPEM(cert.Raw), 0o644)
	}
	if err != nil {
		// Nothing half-made is left behind where we can take it back: a
		// key file without its certificate would block the next try.
		if key.Backend == keystore.BackendFile {
			_ = os.Remove(key.Location)
		}
		if madeDir {
			_ = os.Remove(dir)
		}
		return nil, err
	}
	return cert, nil
}

func selfSign(domain string, key crypto.Signer, lifetime time.Duration, now time.Time) (*x509.Certificate, error) {
	serial, err := pki.NewSerial()
	if err != nil {
		return nil, err
	}
	tmpl := caprofile.Root(domain, serial, now.Add(-backdate), now.Add(lifetime))
	if tmpl.SubjectKeyId, err = caprofile.KeyID(key.Public()); err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("ceremony: sign the root: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ceremony: parse the root: %w", err)
	}
	if !caprofile.IsRoot(cert) {
		return nil, fmt.Errorf("%w: the certificate made does not fit the root profile", ErrRoot)
	}
	return cert, nil
}

// LoadRoot reads the domain root certificate at certPath and opens its key
// at key. It checks that the certificate is a pact root, valid at now, and
// that the key is its key. The caller closes the key.
func LoadRoot(certPath string, key keystore.Spec, opts keystore.Options, now time.Time) (*x509.Certificate, keystore.Key, error) {
	data, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w (make one with pact ca init)", ErrRoot, err)
	}
	certs, err := pki.ParseCertsPEM(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrRoot, certPath, err)
	}
	root := certs[0]
	if !caprofile.IsRoot(root) {
		return nil, nil, fmt.Errorf("%w: %s is not a pact domain root (%q); give the ca.pem pact ca init wrote", ErrRoot, certPath, root.Subject.CommonName)
	}
	if _, err := DomainOf(root); err != nil {
		return nil, nil, err
	}
	if now.Before(root.NotBefore) || now.After(root.NotAfter) {
		return nil, nil, fmt.Errorf("%w: %s is valid from %s to %s, and it is %s: check this machine's clock, or make a new root", ErrRoot, certPath,
			root.NotBefore.UTC().Format(time.RFC3339), root.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	signer, err := keystore.Open(key, opts)
	if err != nil {
		return nil, nil, err
	}
	if !samePublicKey(signer.Public(), root.PublicKey) {
		signer.Close()
		return nil, nil, fmt.Errorf("%w: the key at %s is not the key of %s (give --key the root's key)", ErrRoot, signer, certPath)
	}
	return root, signer, nil
}

// DomainOf is the trust domain a root was made for: its spiffe:// URI.
func DomainOf(root *x509.Certificate) (string, error) {
	for _, u := range root.URIs {
		if u.Scheme == "spiffe" && u.Host != "" && u.Path == "" {
			return u.Host, nil
		}
	}
	return "", fmt.Errorf("%w: %q names no spiffe:// trust domain", ErrRoot, root.Subject.CommonName)
}

// CSR is a journal CA's certificate request that passed the checks. Only
// PublicKey is signed; the rest is what the journal host asked for, shown
// to the ceremony so it can compare.
type CSR struct {
	PublicKey crypto.PublicKey
	// SPKI is the DER SubjectPublicKeyInfo.
	SPKI []byte
	// JournalID is the request's subject CN (pact-journal ca-request puts
	// the journal id there).
	JournalID string
	DNSNames  []string
	IPs       []net.IP
}

// Fingerprint is the hex SHA-256 of the request's public key, as
// pact-journal ca-request prints it.
func (c *CSR) Fingerprint() string { return pki.SPKIFingerprintRaw(c.SPKI) }

// ParseCSR checks an untrusted request: size, key policy (ECDSA P-256,
// P-384 or Ed25519), signature algorithm, then its self-signature (the
// journal host holds the key). It accepts DER or PEM.
func ParseCSR(data []byte) (*CSR, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrCSR)
	}
	if len(data) > MaxCSRBytes {
		return nil, fmt.Errorf("%w: %d bytes (limit %d): this is not a pact-journal ca-request file", ErrCSR, len(data), MaxCSRBytes)
	}
	der := data
	if b, _ := pem.Decode(data); b != nil {
		if b.Type != "CERTIFICATE REQUEST" && b.Type != "NEW CERTIFICATE REQUEST" {
			return nil, fmt.Errorf("%w: PEM block %q, want CERTIFICATE REQUEST (the file pact-journal ca-request wrote)", ErrCSR, b.Type)
		}
		der = b.Bytes
	}
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("%w: does not parse (%v): give the file pact-journal ca-request wrote", ErrCSR, err)
	}
	if err := CheckKeyPolicy(req.PublicKey); err != nil {
		return nil, err
	}
	if !caprofile.SignatureAllowed(req.SignatureAlgorithm) {
		return nil, fmt.Errorf("%w: signature algorithm %v", ErrKeyPolicy, req.SignatureAlgorithm)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: its signature does not verify with its own key (%v): the file was changed or not made by pact-journal ca-request", ErrCSR, err)
	}
	return &CSR{PublicKey: req.PublicKey, SPKI: req.RawSubjectPublicKeyInfo, JournalID: req.Subject.CommonName, DNSNames: req.DNSNames, IPs: req.IPAddresses}, nil
}

// CheckKeyPolicy accepts ECDSA P-256, ECDSA P-384 and Ed25519 keys, as the
// journal's CA does.
func CheckKeyPolicy(pub crypto.PublicKey) error {
	if why := caprofile.KeyPolicy(pub); why != "" {
		return fmt.Errorf("%w: %s", ErrKeyPolicy, why)
	}
	return nil
}

// ParseNames splits host names from addresses ("j1.site,10.0.0.1") and
// checks both: host names as caprofile.ValidateNames does, addresses
// neither unspecified nor multicast. Empty items are skipped.
func ParseNames(items []string) (dnsNames []string, ips []net.IP, err error) {
	var errs []error
	for _, raw := range items {
		n := strings.TrimSpace(raw)
		if n == "" {
			continue
		}
		if h, p, e := net.SplitHostPort(n); e == nil && p != "" {
			errs = append(errs, fmt.Errorf("%w: %q has a port; give the host alone (%s)", ErrName, n, h))
			continue
		}
		if ip := net.ParseIP(strings.Trim(n, "[]")); ip != nil {
			if ip.IsUnspecified() || ip.IsMulticast() {
				errs = append(errs, fmt.Errorf("%w: %s is not an address a journal is reached at; give the host's own address", ErrName, n))
				continue
			}
			if v4 := ip.To4(); v4 != nil {
				ip = v4
			}
			ips = append(ips, ip)
			continue
		}
		n = strings.ToLower(n)
		if err := checkHostNames([]string{n}); err != nil {
			errs = append(errs, err)
			continue
		}
		dnsNames = append(dnsNames, n)
	}
	if err := caprofile.ValidateNames(dnsNames, ips); err != nil {
		errs = append(errs, err)
	}
	return dnsNames, ips, errors.Join(errs...)
}

// checkHostNames refuses what is not a host name: caprofile.ValidateNames,
// then RFC 1123 labels (letters, digits and inner hyphens, 1-63 each, 253
// in all), so a wildcard, a URL or a typo never becomes a constraint.
func checkHostNames(names []string) error {
	if err := caprofile.ValidateNames(names, nil); err != nil {
		return err
	}
	for _, n := range names {
		ok := len(n) <= 253
		for _, l := range strings.Split(n, ".") {
			ok = ok && len(l) >= 1 && len(l) <= 63 && l[0] != '-' && l[len(l)-1] != '-'
			for _, c := range l {
				ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-')
			}
		}
		if !ok {
			return fmt.Errorf("%w: %q (letters, digits and '-' in dot-separated labels, like j1.site.example)", ErrName, n)
		}
	}
	return nil
}

// SignJournalCA signs the journal CA certificate of journal journalID for
// the public key of csrDER (nothing else of the request is used), with the
// domain root: the caprofile.JournalCA template, name-constrained to the
// root's trust domain and to dnsNames and ips (every name the journal
// serves under), valid for lifetime (caprofile.DefaultJournalCALifetime
// when 0) but never past the root.
func SignJournalCA(root *x509.Certificate, rootKey crypto.Signer, csrDER []byte, journalID string, dnsNames []string, ips []net.IP, lifetime time.Duration, now time.Time) (*x509.Certificate, error) {
	domain, err := checkRoot(root, rootKey, now)
	if err != nil {
		return nil, err
	}
	if err := pki.ValidateName("journal id", journalID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	if len(dnsNames)+len(ips) == 0 {
		return nil, fmt.Errorf("%w: no names: give every host name and address the journal serves under (its --listen and --raft-listen hosts); a journal CA without them could sign no server certificate for its journal", caprofile.ErrNames)
	}
	dnsNames = lowerAll(dnsNames)
	if err := caprofile.ValidateNames(dnsNames, ips); err != nil {
		return nil, err
	}
	if err := checkHostNames(dnsNames); err != nil {
		return nil, err
	}
	for _, ip := range ips {
		if len(ip) != net.IPv4len && len(ip) != net.IPv6len || ip.IsUnspecified() {
			return nil, fmt.Errorf("%w: %v is not an address a journal is reached at", ErrName, ip)
		}
	}
	if err := JournalIDNamed(journalID, dnsNames, ips); err != nil {
		return nil, err
	}
	if lifetime == 0 {
		lifetime = caprofile.DefaultJournalCALifetime
	}
	if lifetime < time.Hour {
		return nil, fmt.Errorf("%w: journal CA lifetime %v is shorter than an hour (the default is %v)", ErrInput, lifetime, caprofile.DefaultJournalCALifetime)
	}
	csr, err := ParseCSR(csrDER)
	if err != nil {
		return nil, err
	}
	if samePublicKey(csr.PublicKey, root.PublicKey) {
		return nil, fmt.Errorf("%w: the request carries the root's own key; a journal CA needs a key of its own (pact-journal ca-request on the journal host)", ErrCSR)
	}
	serial, err := pki.NewSerial()
	if err != nil {
		return nil, err
	}
	notBefore := now.Add(-backdate)
	if notBefore.Before(root.NotBefore) {
		notBefore = root.NotBefore
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(root.NotAfter) {
		notAfter = root.NotAfter
	}
	tmpl := caprofile.JournalCA(caprofile.JournalCAParams{
		Domain: domain, JournalID: journalID, DNSNames: dnsNames, IPs: ips,
		Serial: serial, NotBefore: notBefore, NotAfter: notAfter,
	})
	if tmpl.SubjectKeyId, err = caprofile.SPKIKeyID(csr.SPKI); err != nil {
		return nil, err
	}
	tmpl.AuthorityKeyId = root.SubjectKeyId
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root, csr.PublicKey, rootKey)
	if err != nil {
		return nil, fmt.Errorf("ceremony: sign the journal CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ceremony: parse the journal CA: %w", err)
	}
	// What leaves the ceremony is what the journal will check at start.
	if err := caprofile.CheckJournalCA(cert, []*x509.Certificate{root}, journalID, domain, dnsNames, ips, now); err != nil {
		return nil, fmt.Errorf("ceremony: the journal CA made does not pass the journal's own check: %w", err)
	}
	if string(cert.RawSubjectPublicKeyInfo) != string(csr.SPKI) {
		return nil, fmt.Errorf("ceremony: the journal CA made carries another key than the request's")
	}
	return cert, nil
}

// JournalIDNamed checks that the names a journal CA is asked to permit
// (dnsNames, ips: pact ca sign-journal --names) can serve the journal it
// names: the journal serves as its id (journal.ServerNames: its peers and
// operators may dial it by the id), so the id must be among the DNS
// names. A journal id that is not a host name (it holds a '_') cannot be
// one, and is not asked for. The error (ErrInput) says what to add.
func JournalIDNamed(journalID string, dnsNames []string, ips []net.IP) error {
	id := strings.ToLower(journalID)
	if checkHostNames([]string{id}) != nil {
		return nil
	}
	for _, n := range dnsNames {
		if strings.EqualFold(n, id) {
			return nil
		}
	}
	given := make([]string, 0, 1+len(dnsNames)+len(ips))
	given = append(given, id)
	given = append(given, dnsNames...)
	for _, ip := range ips {
		given = append(given, ip.String())
	}
	return fmt.Errorf("%w: --names lacks the journal id %s: journal %s serves as its id, so its journal CA must permit it; add it: --names %s", ErrInput, id, journalID, strings.Join(given, ","))
}

func lowerAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.ToLower(n)
	}
	return out
}

// IssueAdmin signs the first operator credential with the root itself, for
// a fresh P-256 key it returns (PEM) with the certificate: the profile
// pact-journal admin issue uses (CN pact-admin/NAME@DOMAIN, the role in
// OU, the SPIFFE ID, clientAuth only). The journal records it at its first
// use.
func IssueAdmin(root *x509.Certificate, rootKey crypto.Signer, name, role string, lifetime time.Duration, now time.Time) (certPEM, keyPEM []byte, cert *x509.Certificate, err error) {
	domain, err := checkRoot(root, rootKey, now)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := pki.ValidateName("operator name", name); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	if err := ValidateRole(role); err != nil {
		return nil, nil, nil, err
	}
	if lifetime == 0 {
		lifetime = DefaultAdminLifetime
	}
	if lifetime < time.Minute {
		return nil, nil, nil, fmt.Errorf("%w: operator credential lifetime %v is shorter than a minute", ErrInput, lifetime)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("ceremony: admin key: %w", err)
	}
	serial, err := pki.NewSerial()
	if err != nil {
		return nil, nil, nil, err
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(root.NotAfter) {
		notAfter = root.NotAfter
	}
	skid, err := caprofile.KeyID(key.Public())
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := caprofile.Operator(caprofile.LeafParams{
		Domain: domain, Name: name, Serial: serial, SubjectKeyID: skid,
		NotBefore: now.Add(-time.Minute), NotAfter: notAfter,
	}, role)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root, key.Public(), rootKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("ceremony: sign the admin credential: %w", err)
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		return nil, nil, nil, fmt.Errorf("ceremony: parse the admin credential: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("ceremony: encode the admin key: %w", err)
	}
	return pki.EncodeCertsPEM(der), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), cert, nil
}

// ValidateRole accepts platform-admin, viewer and pact-ops-{vcluster}, as
// the journal does.
func ValidateRole(role string) error {
	switch {
	case role == pki.RolePlatformAdmin, role == pki.RoleViewer:
		return nil
	case strings.HasPrefix(role, pki.RoleOpsPrefix) && len(role) > len(pki.RoleOpsPrefix):
		if err := pki.ValidateName("vcluster", strings.TrimPrefix(role, pki.RoleOpsPrefix)); err != nil {
			return fmt.Errorf("%w: role %q: %w", ErrInput, role, err)
		}
		return nil
	}
	return fmt.Errorf("%w: role %q (want platform-admin, viewer or pact-ops-{vcluster})", ErrInput, role)
}

// checkRoot is what signing with root needs: a pact root of a domain,
// valid now, whose key is rootKey.
func checkRoot(root *x509.Certificate, rootKey crypto.Signer, now time.Time) (string, error) {
	if root == nil || rootKey == nil {
		return "", fmt.Errorf("%w: no root", ErrRoot)
	}
	if !caprofile.IsRoot(root) {
		return "", fmt.Errorf("%w: %q is not a pact domain root", ErrRoot, root.Subject.CommonName)
	}
	if !samePublicKey(rootKey.Public(), root.PublicKey) {
		return "", fmt.Errorf("%w: the key given is not the root's", ErrRoot)
	}
	if now.Before(root.NotBefore) || !now.Before(root.NotAfter) {
		return "", fmt.Errorf("%w: the root is valid from %s to %s, and it is %s", ErrRoot,
			root.NotBefore.UTC().Format(time.RFC3339), root.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return DomainOf(root)
}

func samePublicKey(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// absent refuses a path that exists.
func absent(path string) error {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return fmt.Errorf("%w: %s already exists; nothing was written (remove it, or choose another path)", ErrExists, path)
	case errors.Is(err, os.ErrNotExist):
		return nil
	default:
		return fmt.Errorf("ceremony: %w", err)
	}
}

// WriteNew writes data to a new file of mode perm, synced; it refuses to
// replace an existing file.
func WriteNew(path string, data []byte, perm os.FileMode) error { return writeNew(path, data, perm) }

func writeNew(path string, data []byte, perm os.FileMode) error {
	err := atomicfile.WriteNew(path, data, perm)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s already exists; nothing was written (remove it, or choose another path)", ErrExists, path)
	}
	if err != nil {
		return fmt.Errorf("ceremony: %w", err)
	}
	return nil
}
