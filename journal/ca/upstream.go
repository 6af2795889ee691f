package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pact-hpc/pact/internal/atomicfile"
	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
)

// RootAuthority is a domain root with its key: what the ceremony signs
// with (pact-journal admin issue, --dev's root), and what a journal of the
// legacy layout signs its intermediates with (--root-key).
type RootAuthority interface {
	Root() *x509.Certificate
	Signer() crypto.Signer
}

// File names inside a journal data directory.
const (
	RootCertFile  = "ca.pem"
	RootKeyFile   = "ca-key.pem"
	AdminCertFile = "admin.pem"
	AdminKeyFile  = "admin-key.pem"
	// JournalCACertFile is --journal-ca-cert's default; a --dev journal
	// also keeps its journal CA key beside it (JournalCAKeyFile).
	JournalCACertFile = "journal-ca.pem"
	JournalCAKeyFile  = "journal-ca-key.pem"
)

// DefaultOperatorLifetime is how long an operator credential lives unless
// asked otherwise: days, so a lost laptop's credential dies on its own; an
// operator renews with pact admin renew while the old one is valid.
const DefaultOperatorLifetime = 7 * 24 * time.Hour

// KeyFileAuthority holds a root certificate and its key read from files.
type KeyFileAuthority struct {
	root *x509.Certificate
	key  crypto.Signer
}

// Root returns the domain root certificate.
func (a *KeyFileAuthority) Root() *x509.Certificate { return a.root }

// Issuer is the root as the issuer of a legacy-layout journal's
// intermediates.
func (a *KeyFileAuthority) Issuer() Issuer { return Issuer{Certificate: a.root, Signer: a.key} }

// Signer returns the root key.
func (a *KeyFileAuthority) Signer() crypto.Signer { return a.key }

// String never prints key material.
func (a *KeyFileAuthority) String() string {
	return fmt.Sprintf("KeyFileAuthority{root=%s}", a.root.Subject.CommonName)
}

// LoadKeyFileAuthority reads the root certificate and key. The key file must
// not be readable by group or others.
func LoadKeyFileAuthority(certPath, keyPath string) (*KeyFileAuthority, error) {
	certs, err := readCerts(certPath)
	if err != nil {
		return nil, err
	}
	root := certs[0]
	if !root.IsCA {
		return nil, fmt.Errorf("%w: %s is not a CA certificate", ErrUpstream, certPath)
	}
	st, err := os.Stat(keyPath)
	if err != nil {
		return nil, fmt.Errorf("%w: root key: %w", ErrUpstream, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: root key %s has mode %o; run: chmod 600 %s", ErrUpstream, keyPath, st.Mode().Perm(), keyPath)
	}
	key, err := readKey(keyPath)
	if err != nil {
		return nil, err
	}
	if !publicKeysEqual(key.Public(), root.PublicKey) {
		return nil, fmt.Errorf("%w: %s does not belong to %s", ErrUpstream, keyPath, certPath)
	}
	return &KeyFileAuthority{root: root, key: key}, nil
}

// DomainOf returns the domain a root certificate was made for (its SPIFFE
// trust domain URI SAN).
func DomainOf(root *x509.Certificate) (string, error) {
	for _, u := range root.URIs {
		if u.Scheme == "spiffe" && u.Host != "" {
			return u.Host, nil
		}
	}
	return "", fmt.Errorf("%w: root certificate names no spiffe:// trust domain", ErrUpstream)
}

// InitDev creates a domain root and a platform-admin credential in dir if
// the root does not exist yet. It reports whether it created anything. It is
// for development and first trials: production roots are made offline.
func InitDev(dir, domain string, now time.Time) (bool, error) {
	if err := pki.ValidateDomain(domain); err != nil {
		return false, err
	}
	rootPath := filepath.Join(dir, RootCertFile)
	if _, err := os.Stat(rootPath); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("ca: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("ca: create data dir: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return false, fmt.Errorf("ca: root key: %w", err)
	}
	serial, err := pki.NewSerial()
	if err != nil {
		return false, err
	}
	tmpl := caprofile.Root(domain, serial, now.Add(-time.Hour), now.Add(caprofile.DefaultRootLifetime))
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return false, fmt.Errorf("ca: create root: %w", err)
	}
	root, err := x509.ParseCertificate(der)
	if err != nil {
		return false, fmt.Errorf("ca: parse root: %w", err)
	}
	if err := writeKey(filepath.Join(dir, RootKeyFile), key); err != nil {
		return false, err
	}
	auth := &KeyFileAuthority{root: root, key: key}
	certPEM, keyPEM, err := IssueAdmin(auth, "admin", pki.RolePlatformAdmin, DefaultOperatorLifetime, now)
	if err != nil {
		return false, err
	}
	if err := writeFile(filepath.Join(dir, AdminKeyFile), keyPEM, 0o600); err != nil {
		return false, err
	}
	if err := writeFile(filepath.Join(dir, AdminCertFile), certPEM, 0o644); err != nil {
		return false, err
	}
	// The root certificate goes last: its presence marks the set complete.
	if err := writeFile(rootPath, pki.EncodeCertsPEM(der), 0o644); err != nil {
		return false, err
	}
	return true, nil
}

// RenewDevAdmin replaces the development admin credential in dir when it
// expires within a day (operator credentials live days; a --dev journal
// started after a week away should not lock its user out). It reports
// whether it did. The files are replaced whole, key first.
func RenewDevAdmin(dir string, now time.Time) (bool, error) {
	certPath := filepath.Join(dir, AdminCertFile)
	certs, err := readCerts(certPath)
	if err != nil {
		return false, nil // no dev admin to renew
	}
	old := certs[0]
	if old.NotAfter.Sub(now) > 24*time.Hour {
		return false, nil
	}
	auth, err := LoadKeyFileAuthority(filepath.Join(dir, RootCertFile), filepath.Join(dir, RootKeyFile))
	if err != nil {
		return false, err
	}
	id, err := pki.IdentityOf(old)
	if err != nil || len(old.Subject.OrganizationalUnit) != 1 {
		return false, fmt.Errorf("ca: %s names no operator; remove it to have --dev make a new one", certPath)
	}
	certPEM, keyPEM, err := IssueAdmin(auth, id.Name, old.Subject.OrganizationalUnit[0], DefaultOperatorLifetime, now)
	if err != nil {
		return false, err
	}
	if err := replaceFile(filepath.Join(dir, AdminKeyFile), keyPEM, 0o600); err != nil {
		return false, err
	}
	return true, replaceFile(certPath, certPEM, 0o644)
}

// replaceFile replaces path atomically and durably.
func replaceFile(path string, data []byte, mode os.FileMode) error {
	if err := atomicfile.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	return nil
}

// IssueAdmin signs an operator credential with the root, for a fresh key
// it returns with the certificate. The role travels in the subject's
// OrganizationalUnit; the name in the SPIFFE ID.
func IssueAdmin(auth RootAuthority, name, role string, lifetime time.Duration, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: admin key: %w", err)
	}
	cert, err := SignAdmin(auth, key.Public(), name, role, lifetime, now)
	if err != nil {
		return nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: encode admin key: %w", err)
	}
	return pki.EncodeCertsPEM(cert.Raw), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), nil
}

// SignAdmin signs an operator certificate for pub with the root. Only the
// public key comes from the caller; name, role and validity are checked
// here.
func SignAdmin(auth RootAuthority, pub crypto.PublicKey, name, role string, lifetime time.Duration, now time.Time) (*x509.Certificate, error) {
	return signAdmin(auth.Root(), auth.Signer(), pub, name, role, lifetime, now)
}

// signAdmin signs an operator certificate for pub with issuer (a root, or
// a journal's current intermediate), its NotAfter capped at the issuer's.
func signAdmin(issuer *x509.Certificate, signer crypto.Signer, pub crypto.PublicKey, name, role string, lifetime time.Duration, now time.Time) (*x509.Certificate, error) {
	if err := pki.ValidateName("operator name", name); err != nil {
		return nil, err
	}
	if err := ValidateRole(role); err != nil {
		return nil, err
	}
	if lifetime < time.Minute {
		return nil, fmt.Errorf("%w: operator credential lifetime %v is shorter than a minute", ErrInvalidLifetime, lifetime)
	}
	if err := CheckKeyPolicy(pub); err != nil {
		return nil, err
	}
	domain, err := DomainOf(issuer)
	if err != nil {
		return nil, err
	}
	serial, err := pki.NewSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(issuer.NotAfter) {
		notAfter = issuer.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("%w: the signing certificate %s expired at %v", ErrIssuedInvalid, issuer.Subject.CommonName, issuer.NotAfter)
	}
	skid, err := caprofile.KeyID(pub)
	if err != nil {
		return nil, err
	}
	tmpl := caprofile.Operator(caprofile.LeafParams{
		Domain: domain, Name: name, Serial: serial, SubjectKeyID: skid,
		NotBefore: now.Add(-time.Minute), NotAfter: notAfter,
	}, role)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("ca: sign admin: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca: parse admin certificate: %w", err)
	}
	return cert, nil
}

// ValidateRole accepts platform-admin, viewer and pact-ops-{vcluster}.
func ValidateRole(role string) error {
	switch {
	case role == pki.RolePlatformAdmin, role == pki.RoleViewer:
		return nil
	case len(role) > len(pki.RoleOpsPrefix) && role[:len(pki.RoleOpsPrefix)] == pki.RoleOpsPrefix:
		return pki.ValidateName("vcluster", role[len(pki.RoleOpsPrefix):])
	}
	return fmt.Errorf("%w: role %q (want platform-admin, viewer or pact-ops-{vcluster})", ErrInvalidRole, role)
}

func readCerts(path string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUpstream, err)
	}
	certs, err := pki.ParseCertsPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUpstream, path, err)
	}
	return certs, nil
}

func readKey(path string) (crypto.Signer, error) {
	key, err := keystore.ReadPEMKey(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUpstream, err)
	}
	return key, nil
}

// ReadKeyFile loads a PEM private key (PKCS#8 or SEC1).
func ReadKeyFile(path string) (crypto.Signer, error) { return readKey(path) }

func writeKey(path string, key crypto.Signer) error {
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("ca: encode key: %w", err)
	}
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600)
}

// writeFile writes atomically and durably and refuses to overwrite an
// existing file.
func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := atomicfile.WriteNew(path, data, mode); err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	return nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if e, ok := a.(equaler); ok {
		return e.Equal(b)
	}
	return false
}
