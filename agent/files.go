package agent

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/atomicfile"
	"github.com/pact-hpc/pact/internal/pki"
)

// Names of the identity files in --identity-dir.
const (
	ChainFile  = "chain.pem"
	BundleFile = "bundle.pem"
)

// identityFiles hands the active identity to other services on the node:
// the chain and bundle into a directory, and (only when configured) the key
// to a file on a tmpfs. Every file is replaced atomically (a temporary file
// in the same directory, synced, then renamed), so a reader sees the old
// content or the new, never part of one. bundle.pem is replaced before
// chain.pem, so a reader that sees a new chain finds its bundle already
// there.
type identityFiles struct {
	dir    string
	keyOut string
	// sink, when set (tests only), is where a temporary file's bytes are
	// written instead of the file itself: /dev/full stands in for a full
	// disk.
	sink func(*os.File) io.Writer
}

func (w *identityFiles) enabled() bool { return w.dir != "" || w.keyOut != "" }

// write writes id's chain and bundle (bundle: the trust anchors to publish)
// and, if configured, its key.
func (w *identityFiles) write(id *identity.Identity, bundle []*x509.Certificate) error {
	var errs []error
	if w.dir != "" {
		if err := os.MkdirAll(w.dir, 0o755); err != nil {
			errs = append(errs, fmt.Errorf("agent: --identity-dir: %w", err))
		} else {
			errs = append(errs,
				w.replace(filepath.Join(w.dir, BundleFile), certsPEM(bundle), 0o644),
				w.replace(filepath.Join(w.dir, ChainFile), certsPEM(id.Chain), 0o644))
		}
	}
	if w.keyOut != "" {
		der, err := x509.MarshalPKCS8PrivateKey(id.Key)
		if err != nil {
			errs = append(errs, fmt.Errorf("agent: --key-out: encode the key: %w", err))
		} else {
			key := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
			errs = append(errs, w.replace(w.keyOut, key, 0o600))
			clear(key)
			clear(der)
		}
	}
	return errors.Join(errs...)
}

// replace writes data to path atomically and durably with mode perm
// (internal/atomicfile): a key is never readable by anyone else, not even
// for a moment.
func (w *identityFiles) replace(path string, data []byte, perm os.FileMode) error {
	p, err := atomicfile.Create(path, perm)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer p.Cleanup()
	var out io.Writer = p
	if w.sink != nil {
		out = w.sink(p.File)
	}
	if _, err := out.Write(data); err != nil {
		return fmt.Errorf("agent: write %s: %w", path, err)
	}
	if err := p.Replace(); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

func certsPEM(certs []*x509.Certificate) []byte {
	der := make([][]byte, len(certs))
	for i, c := range certs {
		der[i] = c.Raw
	}
	return pki.EncodeCertsPEM(der...)
}
