package ca

import (
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
)

// The files of the layout since issue 23: the domain roots (--root-cert,
// one or two), and the journal's own journal CA (--journal-ca-cert) whose
// key lives where --journal-ca-key says (internal/keystore). The root key
// is not on the journal host.

// LoadRoots reads --root-cert: one domain root, or two of the same trust
// domain during a root rollover (CheckRoots). It returns them and their
// domain.
func LoadRoots(path string) ([]*x509.Certificate, string, error) {
	certs, err := readCerts(path)
	if err != nil {
		return nil, "", err
	}
	domain, err := CheckRoots(certs)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return certs, domain, nil
}

// ReadJournalCACert reads the journal CA certificate (the first of the
// file): at start, and again at each re-key (Config.ReloadIssuer).
func ReadJournalCACert(path string) (*x509.Certificate, error) {
	certs, err := readCerts(path)
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}

// OpenJournalCA reads the journal CA certificate and opens its key at
// spec. The key must be the certificate's; the caller closes it when the
// journal stops. The certificate's fit (caprofile.CheckJournalCA) is
// New's to check.
func OpenJournalCA(certPath string, spec keystore.Spec, opts keystore.Options) (*x509.Certificate, keystore.Key, error) {
	cert, err := ReadJournalCACert(certPath)
	if err != nil {
		return nil, nil, err
	}
	key, err := keystore.Open(spec, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: key %s: %w", ErrJournalCA, spec, err)
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		_ = key.Close()
		return nil, nil, fmt.Errorf("%w: the key at %s does not belong to journal CA certificate %s: give --journal-ca-key the key the CSR for that certificate was made with, or have the ceremony sign this key's CSR (pact-journal ca-request)", ErrJournalCA, spec, certPath)
	}
	return cert, key, nil
}

// DevJournalCA makes (or, when it no longer fits, makes again) a --dev
// journal's journal CA: its key a file at keyPath (kept when it exists),
// its certificate at certPath signed by the development root in dir
// (ca.pem, ca-key.pem) with caprofile.JournalCA for journalID and the
// names the journal serves under. It reports whether it wrote a
// certificate. For development only: a production journal CA is signed
// offline (docs/ceremony.md).
func DevJournalCA(dir, certPath, keyPath, journalID string, dnsNames []string, ips []net.IP, now time.Time) (bool, error) {
	auth, err := LoadKeyFileAuthority(filepath.Join(dir, RootCertFile), filepath.Join(dir, RootKeyFile))
	if err != nil {
		return false, err
	}
	domain, err := DomainOf(auth.Root())
	if err != nil {
		return false, err
	}
	spec := keystore.Spec{Backend: keystore.BackendFile, Location: keyPath}
	if cert, err := ReadJournalCACert(certPath); err == nil {
		fits := caprofile.CheckJournalCA(cert, []*x509.Certificate{auth.Root()}, journalID, domain, dnsNames, ips, now) == nil &&
			caprofile.CheckJournalCANames(cert, journalID, dnsNames, ips) == nil &&
			cert.NotAfter.Sub(now) > 30*24*time.Hour
		if key, err := keystore.Open(spec, keystore.Options{}); err == nil {
			same := publicKeysEqual(key.Public(), cert.PublicKey)
			_ = key.Close()
			if fits && same {
				return false, nil
			}
		}
	}
	key, err := keystore.Open(spec, keystore.Options{})
	if errors.Is(err, keystore.ErrNoKey) {
		key, err = keystore.Generate(spec, keystore.Options{})
	}
	if err != nil {
		return false, fmt.Errorf("%w: development journal CA key: %w", ErrJournalCA, err)
	}
	defer key.Close()
	cert, err := SignJournalCA(auth, key.Public(), caprofile.JournalCAParams{
		Domain: domain, JournalID: journalID, DNSNames: dnsNames, IPs: ips,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(caprofile.DefaultJournalCALifetime),
	})
	if err != nil {
		return false, err
	}
	return true, replaceFile(certPath, pki.EncodeCertsPEM(cert.Raw), 0o644)
}

// SignJournalCA signs a journal CA certificate for pub with a root, as the
// ceremony does (caprofile.JournalCA; a fresh serial if p names none). For
// --dev and tests; production journal CAs come from pact ca sign-journal.
func SignJournalCA(root RootAuthority, pub any, p caprofile.JournalCAParams) (*x509.Certificate, error) {
	if err := caprofile.ValidateNames(p.DNSNames, p.IPs); err != nil {
		return nil, err
	}
	if p.Serial == nil {
		serial, err := pki.NewSerial()
		if err != nil {
			return nil, err
		}
		p.Serial = serial
	}
	if p.NotAfter.After(root.Root().NotAfter) {
		p.NotAfter = root.Root().NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, caprofile.JournalCA(p), root.Root(), pub, root.Signer())
	if err != nil {
		return nil, fmt.Errorf("%w: sign journal CA: %w", ErrUpstream, err)
	}
	return x509.ParseCertificate(der)
}

// LoadRootIssuer reads the domain root key of the legacy layout
// (--root-key: mode 0600 or stricter) and pairs it with the root among
// roots it belongs to.
func LoadRootIssuer(roots []*x509.Certificate, keyPath string) (Issuer, error) {
	st, err := os.Stat(keyPath)
	if err != nil {
		return Issuer{}, fmt.Errorf("%w: root key: %w", ErrUpstream, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return Issuer{}, fmt.Errorf("%w: root key %s has mode %o; run: chmod 600 %s", ErrUpstream, keyPath, st.Mode().Perm(), keyPath)
	}
	key, err := readKey(keyPath)
	if err != nil {
		return Issuer{}, err
	}
	for _, r := range roots {
		if publicKeysEqual(key.Public(), r.PublicKey) {
			return Issuer{Certificate: r, Signer: key}, nil
		}
	}
	return Issuer{}, fmt.Errorf("%w: %s is the key of none of the root certificates given (--root-cert)", ErrUpstream, keyPath)
}
