// Package static is the bootstrap identity baked into the node image: a
// certificate chain, its key and a trust bundle, read from PEM files once at
// start and then held in memory only. It is the lowest-ranked source of a
// pact identity, there so the agent can authenticate before SPIRE or the
// journal has given it a better one.
//
// Nothing here writes the identity anywhere: not to disk, not to a log.
package static

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
)

// MaxFileSize bounds each bootstrap file: real ones are a few kilobytes, and
// a path pointing at something else should fail rather than fill memory.
const MaxFileSize = 1 << 20

// Config says where the bootstrap files are.
type Config struct {
	// CertFile is the certificate chain, PEM, leaf first (--bootstrap-cert).
	CertFile string
	// KeyFile is the leaf's unencrypted private key, PEM: PKCS#8 "PRIVATE
	// KEY", SEC 1 "EC PRIVATE KEY" or PKCS#1 "RSA PRIVATE KEY"
	// (--bootstrap-key). It may be the same file as CertFile.
	KeyFile string
	// BundleFile holds the trust anchors that go with the bootstrap
	// identity, PEM (--bootstrap-bundle). Optional: without it the
	// identity's Bundle is empty and the caller relies on its own roots.
	BundleFile string

	// Clock decides when the certificate has expired.
	Clock clock.Clock
}

// DefaultConfig returns the defaults: no files, the system clock.
func DefaultConfig() Config { return Config{Clock: clock.Real{}} }

// Validate reports every problem at once. It does not touch the files; New
// reads them.
func (c Config) Validate() error {
	var errs []error
	if c.CertFile == "" {
		errs = append(errs, errors.New("identity/static: no bootstrap certificate file (--bootstrap-cert FILE)"))
	}
	if c.KeyFile == "" {
		errs = append(errs, errors.New("identity/static: no bootstrap key file (--bootstrap-key FILE)"))
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("identity/static: Clock is required"))
	}
	return errors.Join(errs...)
}

// Provider serves the bootstrap identity until it expires or is discarded.
// It is safe for concurrent use.
type Provider struct {
	clock    clock.Clock
	certFile string

	mu sync.Mutex
	id *identity.Identity // nil once discarded
}

// New reads and checks the bootstrap files. Every problem with them is
// reported at once, each wrapping identity.ErrBadFiles. An expired
// certificate is not an error here: Current reports it.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cert := readInput("--bootstrap-cert "+cfg.CertFile, cfg.CertFile)
	key := readInput("--bootstrap-key "+cfg.KeyFile, cfg.KeyFile)
	bundle := input{}
	if cfg.BundleFile != "" {
		bundle = readInput("--bootstrap-bundle "+cfg.BundleFile, cfg.BundleFile)
	}
	// Best effort: the key's PEM, in whichever file it is, does not outlive
	// New.
	defer func() { clear(cert.data); clear(key.data); clear(bundle.data) }()
	id, err := build(cert, key, bundle)
	if err != nil {
		return nil, err
	}
	return &Provider{clock: cfg.Clock, certFile: cfg.CertFile, id: id}, nil
}

// Source returns identity.SourceStatic.
func (p *Provider) Source() identity.Source { return identity.SourceStatic }

// Current returns the bootstrap identity unless it has expired or been
// discarded.
func (p *Provider) Current(context.Context) (*identity.Identity, error) {
	p.mu.Lock()
	id := p.id
	p.mu.Unlock()
	if id == nil {
		return nil, identity.Unavailable(identity.SourceStatic, nil,
			"bootstrap identity discarded after a better one was established; restart the agent to use it again")
	}
	if id.Expired(p.clock.Now()) {
		return nil, identity.Unavailable(identity.SourceStatic, identity.ErrExpired,
			"bootstrap certificate %s (serial %s) expired at %s; rebuild the node image with a current bootstrap certificate",
			p.certFile, id.Serial(), id.NotAfter.UTC().Format(time.RFC3339))
	}
	return id, nil
}

// Discard drops the bootstrap identity from memory for good (ADR-008 PB4:
// once the node holds a better identity, the shared bootstrap one goes).
// Afterwards Current is unavailable, so there is nothing to fall back to if
// the better sources fail: call it only when that is the site's policy.
func (p *Provider) Discard() {
	p.mu.Lock()
	p.id = nil
	p.mu.Unlock()
}

// input is one file's contents, or why it could not be read.
type input struct {
	label   string // "--bootstrap-key /etc/pact/key.pem", or "key" for Parse
	data    []byte
	err     error
	present bool
}

func readInput(label, path string) input {
	in := input{label: label, present: true}
	f, err := os.Open(path)
	if err != nil {
		why := err
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			why = pe.Err // the label already names the file
		}
		in.err = bad(label, err, "cannot read it: %v (the file comes from the node image; check the path)", why)
		return in
	}
	defer f.Close()
	in.data, err = io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	switch {
	case err != nil:
		in.err = bad(label, err, "cannot read it: %v", err)
	case len(in.data) > MaxFileSize:
		clear(in.data)
		in.data = nil
		in.err = bad(label, nil, "larger than %d bytes; is it the right file?", MaxFileSize)
	}
	return in
}

func bad(label string, cause error, format string, args ...any) error {
	return &fileError{msg: label + ": " + fmt.Sprintf(format, args...), cause: cause}
}

// fileError is one problem with one bootstrap file. It matches
// identity.ErrBadFiles and unwraps to its cause (fs.ErrNotExist...), whose
// text its message already carries where useful.
type fileError struct {
	msg   string
	cause error
}

func (e *fileError) Error() string        { return identity.ErrBadFiles.Error() + ": " + e.msg }
func (e *fileError) Is(target error) bool { return target == identity.ErrBadFiles }
func (e *fileError) Unwrap() error        { return e.cause }

func build(cert, key, bundle input) (*identity.Identity, error) {
	var errs []error
	chain, err := parseCerts(cert)
	if err != nil {
		errs = append(errs, err)
	}
	signer, err := parseKey(key)
	if err != nil {
		errs = append(errs, err)
	}
	var anchors []*x509.Certificate
	if bundle.present {
		if anchors, err = parseCerts(bundle); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if !identity.KeyMatches(chain[0], signer) {
		return nil, bad(key.label, nil, "the key does not belong to the certificate in %s (leaf serial %s); take both from the same issuance",
			cert.label, pki.SerialHex(chain[0].SerialNumber))
	}
	id, err := identity.New(identity.SourceStatic, chain, signer, anchors)
	if err != nil {
		return nil, bad(cert.label, err, "%v", err)
	}
	return id, nil
}

func parseCerts(in input) ([]*x509.Certificate, error) {
	if in.err != nil {
		return nil, in.err
	}
	certs, err := pki.ParseCertsPEM(in.data) // other blocks (a key kept in the same file) are skipped
	switch {
	case errors.Is(err, pki.ErrNoPEM):
		return nil, bad(in.label, err, "no PEM \"CERTIFICATE\" block")
	case err != nil:
		return nil, bad(in.label, err, "%v", err)
	}
	return certs, nil
}

// parseKey finds the one private key block in the input. Its messages never
// quote the input.
func parseKey(in input) (crypto.Signer, error) {
	if in.err != nil {
		return nil, in.err
	}
	var key crypto.Signer
	found := 0
	rest := in.data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		switch b.Type {
		case "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY":
		case "ENCRYPTED PRIVATE KEY":
			return nil, bad(in.label, nil, "the key is encrypted; the bootstrap key must be unencrypted (the image protects it)")
		default:
			continue // a certificate kept in the same file
		}
		found++
		if _, ok := b.Headers["DEK-Info"]; ok {
			clear(b.Bytes)
			return nil, bad(in.label, nil, "the key is encrypted; the bootstrap key must be unencrypted (the image protects it)")
		}
		k, err := parseKeyBlock(b)
		clear(b.Bytes)
		if err != nil {
			return nil, bad(in.label, err, "%q block: %v", b.Type, err)
		}
		key = k
	}
	switch {
	case found == 0:
		return nil, bad(in.label, nil, "no private key (want a PEM \"PRIVATE KEY\", \"EC PRIVATE KEY\" or \"RSA PRIVATE KEY\" block)")
	case found > 1:
		return nil, bad(in.label, nil, "%d private keys; want exactly one", found)
	}
	return key, nil
}

func parseKeyBlock(b *pem.Block) (crypto.Signer, error) {
	var k any
	var err error
	switch b.Type {
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	default:
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	}
	if err != nil {
		return nil, err
	}
	switch k := k.(type) {
	case *ecdsa.PrivateKey:
		return k, nil
	case *rsa.PrivateKey:
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	}
	return nil, fmt.Errorf("unsupported key type %T (want ECDSA, RSA or Ed25519)", k)
}
