// Package keystore keeps the private keys of pact's certificate
// authorities where a site wants them: the domain root's (made and used
// offline, in a ceremony) and each journal CA's (on its journal host). A key
// lives in the host's TPM 2.0 (non-exportable), in a PKCS#11 token (an HSM),
// or, as the documented weaker choice, in a 0600 PEM file.
//
// A Spec names where: "file:PATH" (or a bare path), "tpm:PATH" (PATH holds
// the TPM-wrapped key blob, which only that TPM can load), or an RFC 7512
// "pkcs11:" URI. Every backend gives a crypto.Signer; no caller sees which
// one it is, and none of them returns or prints key material.
package keystore

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
	"strings"
	"time"

	"github.com/pact-hpc/pact/internal/clock"
)

// Sentinel errors.
var (
	ErrSpec       = errors.New("keystore: invalid key location")
	ErrExists     = errors.New("keystore: a key already exists there")
	ErrNoKey      = errors.New("keystore: no key there")
	ErrNotBuilt   = errors.New("keystore: backend not built into this binary")
	ErrKeyFile    = errors.New("keystore: key file")
	ErrPermission = errors.New("keystore: key file readable by others")
)

// Backends.
const (
	BackendFile   = "file"
	BackendTPM    = "tpm"
	BackendPKCS11 = "pkcs11"
)

// Spec is a parsed key location.
type Spec struct {
	// Backend is BackendFile, BackendTPM or BackendPKCS11.
	Backend string
	// Location is the path (file, tpm) or the URI's body after "pkcs11:".
	Location string
}

// String gives the spec back in the form Parse takes. A PKCS#11 URI names
// where its PIN comes from (pin-source), never the PIN itself: Parse
// refuses pin-value.
func (s Spec) String() string { return s.Backend + ":" + s.Location }

// Parse reads a key location. A string with no known scheme is a file path.
func Parse(s string) (Spec, error) {
	if strings.TrimSpace(s) == "" {
		return Spec{}, fmt.Errorf("%w: empty; give file:PATH, tpm:PATH or a pkcs11: URI", ErrSpec)
	}
	if strings.ContainsAny(s, "\x00\n\r") {
		return Spec{}, fmt.Errorf("%w: control character in key location", ErrSpec)
	}
	scheme, rest, ok := strings.Cut(s, ":")
	switch {
	case ok && scheme == BackendFile, ok && scheme == BackendTPM:
		if rest == "" {
			return Spec{}, fmt.Errorf("%w: %s: needs a path, as in %s:/etc/pact/journal-ca.key", ErrSpec, scheme, scheme)
		}
		return Spec{Backend: scheme, Location: rest}, nil
	case ok && scheme == BackendPKCS11:
		if err := checkPKCS11URI(rest); err != nil {
			return Spec{}, err
		}
		return Spec{Backend: BackendPKCS11, Location: rest}, nil
	}
	return Spec{Backend: BackendFile, Location: s}, nil
}

// checkPKCS11URI does the checks every build makes on a pkcs11: URI (RFC
// 7512): it parses it whole (pkcs11uri.go), so a wrong spec is refused when
// the flag is read, even by a binary built without PKCS#11.
func checkPKCS11URI(body string) error {
	if strings.Contains(strings.ToLower(body), "pin-value") {
		// A PIN in the URI would reach flags, unit files and logs.
		return fmt.Errorf("%w: pkcs11: pin-value is not accepted (the URI is printed); give pin-source=file:PATH or set PACT_PKCS11_PIN", ErrSpec)
	}
	_, err := parsePKCS11URI(body)
	return err
}

// Options are what a backend needs beyond the spec.
type Options struct {
	// TPMDevice is the TPM to use for tpm: keys: a device path
	// (/dev/tpmrm0, the default) or unix:PATH for a software TPM's socket.
	TPMDevice string
	// Label names the key inside a token where the backend needs one
	// (PKCS#11 CKA_LABEL when the URI names no object).
	Label string
	// TPMTimeout bounds each TPM operation of a tpm: key: opening the TPM
	// (until it answers a first command) and each command after
	// (DefaultTPMTimeout when zero). A TPM that does not answer in time
	// fails with ErrTPMBusy, naming what holds it.
	TPMTimeout time.Duration
	// Clock times TPMTimeout (the system clock when nil).
	Clock clock.Clock
}

// Key is a CA private key. String never prints key material.
type Key interface {
	crypto.Signer
	// Close releases the backend (TPM connection, token session).
	Close() error
	fmt.Stringer
}

// backend is one place keys live. tpm.go and pkcs11.go register theirs.
type backend interface {
	generate(Spec, Options) (Key, error)
	open(Spec, Options) (Key, error)
}

var backends = map[string]backend{BackendFile: fileBackend{}}

// Generate makes a new ECDSA P-256 key at s. It refuses to replace a key
// that exists there.
func Generate(s Spec, o Options) (Key, error) {
	b, err := backendOf(s)
	if err != nil {
		return nil, err
	}
	return b.generate(s, o)
}

// Open loads the key at s.
func Open(s Spec, o Options) (Key, error) {
	b, err := backendOf(s)
	if err != nil {
		return nil, err
	}
	return b.open(s, o)
}

func backendOf(s Spec) (backend, error) {
	b, ok := backends[s.Backend]
	if !ok {
		if s.Backend == BackendPKCS11 {
			return nil, fmt.Errorf("%w: this binary was built without PKCS#11 (it needs cgo): build it with make build-pkcs11 (docs/ca-keys.md)", ErrNotBuilt)
		}
		return nil, fmt.Errorf("%w: unknown backend %q", ErrSpec, s.Backend)
	}
	return b, nil
}

// fileBackend keeps a key in a PEM file of mode 0600: the documented weaker
// choice, for sites without a TPM or an HSM, and for development.
type fileBackend struct{}

type fileKey struct {
	crypto.Signer
	path string
}

func (k fileKey) Close() error   { return nil }
func (k fileKey) String() string { return "file:" + k.path }

func (fileBackend) generate(s Spec, _ Options) (Key, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("keystore: generate: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("keystore: encode key: %w", err)
	}
	if err := writeExclusive(s.Location, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})); err != nil {
		return nil, err
	}
	return fileKey{Signer: key, path: s.Location}, nil
}

func (fileBackend) open(s Spec, _ Options) (Key, error) {
	st, err := os.Stat(s.Location)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoKey, s.Location)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %o; run: chmod 600 %s", ErrPermission, s.Location, st.Mode().Perm(), s.Location)
	}
	signer, err := ReadPEMKey(s.Location)
	if err != nil {
		return nil, err
	}
	return fileKey{Signer: signer, path: s.Location}, nil
}

// ReadPEMKey loads a PEM private key (PKCS#8 or SEC1) from path. Its
// errors never echo the file's content.
func ReadPEMKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, fmt.Errorf("%w: %s holds no PEM block", ErrKeyFile, path)
	}
	var k any
	switch b.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	default:
		return nil, fmt.Errorf("%w: %s: unsupported PEM type %q", ErrKeyFile, path, b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: cannot parse private key", ErrKeyFile, path)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: %s: key cannot sign", ErrKeyFile, path)
	}
	return signer, nil
}
