package launch

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/pact-hpc/pact/internal/ceremony"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
)

// Domain is the trust domain of every quorum the launcher makes.
const Domain = "pact.local"

// RootDir is where the domain root (certificate and key) of a quorum made
// in dir lives: the stand-in for the offline ceremony machine. Its key is
// never given to a journal.
func RootDir(dir string) string { return filepath.Join(dir, "root") }

// JournalCACert is journal id's journal CA certificate.
func (q *ProcQuorum) JournalCACert(id string) string {
	return filepath.Join(q.cfg.Dir, "keys", id+"-ca.pem")
}

// JournalCAKey is the file holding journal id's journal CA key: outside
// the journal's data directory, as docs/ca-keys.md asks of a file key.
func (q *ProcQuorum) JournalCAKey(id string) string {
	return filepath.Join(q.cfg.Dir, "keys", id+"-ca-key.pem")
}

// ceremony makes the root, the admin credential (cfg.Dir/admin.pem), the
// root certificate journals and clients trust (cfg.Dir/ca.pem) and a
// journal CA for each of the first cfg.N journals.
func (q *ProcQuorum) ceremony() error {
	now := time.Now()
	rootDir := RootDir(q.cfg.Dir)
	root, err := ceremony.InitRoot(rootDir, Domain, keystore.Spec{}, keystore.Options{}, 0, now)
	if err != nil {
		return fmt.Errorf("launch: the root: %w", err)
	}
	key, err := keystore.Open(ceremony.DefaultRootKey(rootDir), keystore.Options{})
	if err != nil {
		return fmt.Errorf("launch: the root key: %w", err)
	}
	defer key.Close()
	certPEM, keyPEM, _, err := ceremony.IssueAdmin(root, key, "admin", pki.RolePlatformAdmin, 0, now)
	if err != nil {
		return fmt.Errorf("launch: the admin credential: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(q.cfg.Dir, "keys"), 0o700); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"ca.pem", pki.EncodeCertsPEM(root.Raw), 0o644},
		{"admin.pem", certPEM, 0o644},
		{"admin-key.pem", keyPEM, 0o600},
	} {
		if err := ceremony.WriteNew(filepath.Join(q.cfg.Dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	for i := range q.cfg.N {
		id := fmt.Sprintf("j%d", i+1)
		if err := q.IssueJournalCA(id, root, key, q.servedNames(i)); err != nil {
			return err
		}
	}
	return nil
}

// IssueJournalCA makes journal id's journal CA key (a file, if absent) and
// signs its certificate with root for names, replacing any certificate
// there: the journal host's pact-journal ca-request and the ceremony's pact
// ca sign-journal in one, for names and id.
func (q *ProcQuorum) IssueJournalCA(id string, root *x509.Certificate, rootKey keystore.Key, names []string) error {
	// The journal id is among them, as pact ca sign-journal requires.
	if !slices.Contains(names, id) {
		names = append([]string{id}, names...)
	}
	dns, ips, err := ceremony.ParseNames(names)
	if err != nil {
		return fmt.Errorf("launch: names of %s: %w", id, err)
	}
	req, err := ceremony.NewRequest(id, keystore.Spec{Backend: keystore.BackendFile, Location: q.JournalCAKey(id)}, keystore.Options{}, dns, ips)
	if err != nil {
		return fmt.Errorf("launch: journal CA request of %s: %w", id, err)
	}
	cert, err := ceremony.SignJournalCA(root, rootKey, req.PEM, id, dns, ips, 0, time.Now())
	if err != nil {
		return fmt.Errorf("launch: journal CA of %s: %w", id, err)
	}
	path := q.JournalCACert(id)
	_ = os.Remove(path)
	return ceremony.WriteNew(path, pki.EncodeCertsPEM(cert.Raw), 0o644)
}

// servedNames is every name journal i serves under: its listen addresses,
// and the names every journal adds (localhost, the loopback addresses, the
// host name).
func (q *ProcQuorum) servedNames(i int) []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	for _, svc := range []string{"grpc", "raft"} {
		host, _, err := net.SplitHostPort(q.addr(i, svc))
		if err == nil && host != "127.0.0.1" && host != "::1" && host != "localhost" {
			names = append(names, host)
		}
	}
	return names
}

// RootFiles are the domain root's certificate and key in a directory the
// launcher (RootDir) or pact-journal init (dir itself, the layout before
// journal CAs, which the floor's stub journals keep) made.
func RootFiles(dir string) (cert, key string) {
	if _, err := os.Stat(filepath.Join(RootDir(dir), ceremony.RootCertFile)); err == nil {
		dir = RootDir(dir)
	}
	return filepath.Join(dir, ceremony.RootCertFile), filepath.Join(dir, ceremony.RootKeyFile)
}

// PKIArgs are the flags of journal id's PKI: the root certificate, and
// its journal CA, made now if it has none (a journal beyond the first N,
// started by a test; it serves on loopback).
func (q *ProcQuorum) PKIArgs(id string) ([]string, error) {
	if _, err := os.Stat(q.JournalCACert(id)); errors.Is(err, os.ErrNotExist) {
		certPath, keyPath := RootFiles(q.cfg.Dir)
		root, key, err := ceremony.LoadRoot(certPath, keystore.Spec{Backend: keystore.BackendFile, Location: keyPath}, keystore.Options{}, time.Now())
		if err != nil {
			return nil, err
		}
		defer key.Close()
		names := []string{"localhost", "127.0.0.1", "::1"}
		if h, err := os.Hostname(); err == nil && h != "" {
			names = append(names, h)
		}
		if err := q.IssueJournalCA(id, root, key, names); err != nil {
			return nil, err
		}
	}
	return []string{"--root-cert", filepath.Join(q.cfg.Dir, "ca.pem"),
		"--journal-ca-cert", q.JournalCACert(id), "--journal-ca-key", "file:" + q.JournalCAKey(id)}, nil
}
