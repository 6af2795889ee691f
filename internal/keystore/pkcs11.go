//go:build pkcs11

package keystore

// The PKCS#11 backend links the token's vendor library (dlopen, through
// cgo), so it is built only with -tags pkcs11 and CGO_ENABLED=1 (make
// build-pkcs11). Without it a pkcs11: spec still parses (pkcs11uri.go) and
// then answers ErrNotBuilt.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/ThalesGroup/crypto11"
	"github.com/miekg/pkcs11"
)

// ErrPKCS11: the token or its library is unusable, refused the PIN, or
// failed a command; the message says which and what to do.
var ErrPKCS11 = errors.New("keystore: PKCS#11")

// PINEnv is where the user PIN is read from when the URI gives no
// pin-source.
const PINEnv = "PACT_PKCS11_PIN"

func init() { backends[BackendPKCS11] = pkcs11Backend{} }

// pkcs11Backend keeps a key in a PKCS#11 token (an HSM, a smart card,
// SoftHSM2): an ECDSA P-256 key pair the token generates, the private half
// sensitive and not extractable, found by its label (CKA_LABEL) and, when
// the URI gives one, its CKA_ID.
type pkcs11Backend struct{}

// pkcs11Session is a logged-in connection to the token and the key's label.
type pkcs11Session struct {
	ctx   *crypto11.Context
	uri   pkcs11URI
	label string
	// name is how the key is printed: the spec (no PIN can be in it, Parse
	// refuses pin-value) with the label Options supplied.
	name string
}

func (pkcs11Backend) connect(s Spec, o Options) (*pkcs11Session, error) {
	u, err := parsePKCS11URI(s.Location)
	if err != nil {
		return nil, err
	}
	label := u.Object
	if label == "" {
		label = o.Label
	}
	if label == "" {
		return nil, fmt.Errorf("%w: pkcs11: name the key with object=LABEL in the URI", ErrSpec)
	}
	name := s.String()
	if u.Object == "" {
		name += " (object " + label + ")"
	}
	if _, err := os.Stat(u.ModulePath); err != nil {
		return nil, fmt.Errorf("%w: %s: cannot read the PKCS#11 module: give module-path= the token vendor's library (SoftHSM2: /usr/lib/softhsm/libsofthsm2.so): %w", ErrPKCS11, name, err)
	}
	pin, err := readPIN(u, name)
	if err != nil {
		return nil, err
	}
	ctx, err := crypto11.Configure(&crypto11.Config{Path: u.ModulePath, TokenLabel: u.Token, Pin: pin})
	if err != nil {
		return nil, pkcs11ConfigError(err, u, name)
	}
	return &pkcs11Session{ctx: ctx, uri: u, label: label, name: name}, nil
}

// readPIN reads the user PIN from pin-source's file, or from PINEnv. Its
// errors name where the PIN was looked for, never the PIN.
func readPIN(u pkcs11URI, name string) (string, error) {
	if u.PINFile == "" {
		pin, ok := os.LookupEnv(PINEnv)
		if !ok || pin == "" {
			return "", fmt.Errorf("%w: %s: the token needs its user PIN: give pin-source=file:PATH in the URI, or set %s", ErrPKCS11, name, PINEnv)
		}
		return pin, nil
	}
	st, err := os.Stat(u.PINFile)
	if err != nil {
		return "", fmt.Errorf("%w: %s: PIN file: %w", ErrPKCS11, name, err)
	}
	if st.Mode().Perm()&0o007 != 0 {
		return "", fmt.Errorf("%w: %s: PIN file %s has mode %o, readable by any user; run: chmod o-rwx %s", ErrPermission, name, u.PINFile, st.Mode().Perm(), u.PINFile)
	}
	if st.Size() > 1024 {
		return "", fmt.Errorf("%w: %s: PIN file %s: %d bytes is not a PIN", ErrPKCS11, name, u.PINFile, st.Size())
	}
	b, err := os.ReadFile(u.PINFile)
	if err != nil {
		return "", fmt.Errorf("%w: %s: PIN file: %w", ErrPKCS11, name, err)
	}
	pin := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if pin == "" {
		return "", fmt.Errorf("%w: %s: PIN file %s is empty", ErrPKCS11, name, u.PINFile)
	}
	return pin, nil
}

// pkcs11ConfigError says what a failed login means. crypto11's errors
// never carry the PIN; neither does this.
func pkcs11ConfigError(err error, u pkcs11URI, name string) error {
	var rv pkcs11.Error
	if errors.As(err, &rv) {
		switch rv {
		case pkcs11.CKR_PIN_INCORRECT, pkcs11.CKR_PIN_LEN_RANGE:
			return fmt.Errorf("%w: %s: token %q refused the PIN (from %s): check it before trying again: most tokens lock the PIN after a few failures", ErrPKCS11, name, u.Token, pinSource(u))
		case pkcs11.CKR_PIN_LOCKED:
			return fmt.Errorf("%w: %s: token %q has locked its user PIN after failed logins: its security officer must set a new one with the token's tools (OpenSC: pkcs11-tool --module MODULE --login --login-type so --init-pin)", ErrPKCS11, name, u.Token)
		case pkcs11.CKR_PIN_EXPIRED:
			return fmt.Errorf("%w: %s: token %q: the user PIN has expired: change it with the token's tools", ErrPKCS11, name, u.Token)
		}
	}
	switch msg := err.Error(); {
	case strings.Contains(msg, "could not find PKCS#11 token"):
		return fmt.Errorf("%w: %s: no token labelled %q in %s: list the tokens (softhsm2-util --show-slots, or p11tool --list-tokens) and give token= one of them", ErrPKCS11, name, u.Token, u.ModulePath)
	case strings.Contains(msg, "module context"):
		return fmt.Errorf("%w: %s: cannot load the PKCS#11 module %s: give module-path= the token vendor's library: %w", ErrPKCS11, name, u.ModulePath, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrPKCS11, name, err)
}

func pinSource(u pkcs11URI) string {
	if u.PINFile != "" {
		return u.PINFile
	}
	return PINEnv
}

// find gives the key pairs with the session's label (and id, when the URI
// names one).
func (p *pkcs11Session) find() ([]crypto11.Signer, error) {
	keys, err := p.ctx.FindKeyPairs(p.uri.ID, []byte(p.label))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: look for the key: %w", ErrPKCS11, p.name, err)
	}
	return keys, nil
}

func (b pkcs11Backend) generate(s Spec, o Options) (_ Key, err error) {
	p, err := b.connect(s, o)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.ctx.Close()
		}
	}()
	keys, err := p.find()
	if err != nil {
		return nil, err
	}
	// A private key alone (no public half with the same CKA_ID) is a key
	// too: it must not be shadowed by a new one of the same label.
	priv, err := p.ctx.FindPrivateKeys(nil, []byte(p.label))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: look for the key: %w", ErrPKCS11, p.name, err)
	}
	if len(keys) > 0 || len(priv) > 0 {
		return nil, fmt.Errorf("%w: %s: token %q already holds a key labelled %q (delete it with the token's tools first if you mean to replace it: the key is then lost)", ErrExists, p.name, p.uri.Token, p.label)
	}
	id := p.uri.ID
	if len(id) == 0 {
		// FindKeyPair pairs the halves by CKA_ID: it must not be empty.
		id = make([]byte, 16)
		if _, err := rand.Read(id); err != nil {
			return nil, fmt.Errorf("keystore: key id: %w", err)
		}
	}
	signer, err := p.ctx.GenerateECDSAKeyPairWithLabel(id, []byte(p.label), elliptic.P256())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: generate an ECDSA P-256 key in token %q: %w", ErrPKCS11, p.name, p.uri.Token, err)
	}
	return newPKCS11Key(p, signer)
}

func (b pkcs11Backend) open(s Spec, o Options) (_ Key, err error) {
	p, err := b.connect(s, o)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.ctx.Close()
		}
	}()
	keys, err := p.find()
	if err != nil {
		return nil, err
	}
	switch len(keys) {
	case 0:
		return nil, fmt.Errorf("%w: %s: token %q holds no key pair labelled %q (list them: pkcs11-tool --module %s --token-label %s --login --list-objects)", ErrNoKey, p.name, p.uri.Token, p.label, p.uri.ModulePath, p.uri.Token)
	case 1:
	default:
		return nil, fmt.Errorf("%w: %s: token %q holds %d key pairs labelled %q: add id= to the URI to say which", ErrPKCS11, p.name, p.uri.Token, len(keys), p.label)
	}
	return newPKCS11Key(p, keys[0])
}

func newPKCS11Key(p *pkcs11Session, signer crypto11.Signer) (*pkcs11Key, error) {
	pub, ok := signer.Public().(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%w: %s: the key is %T, not ECDSA P-256: pact's CA keys are ECDSA P-256", ErrPKCS11, p.name, signer.Public())
	}
	return &pkcs11Key{signer: signer, pub: pub, ctx: p.ctx, name: p.name}, nil
}

// pkcs11Key is a key in a token. crypto11 gives each signature a session
// from its pool: Sign is safe for concurrent use.
type pkcs11Key struct {
	signer crypto11.Signer
	pub    *ecdsa.PublicKey
	name   string

	mu  sync.Mutex
	ctx *crypto11.Context // nil once closed
}

func (k *pkcs11Key) Public() crypto.PublicKey { return k.pub }

func (k *pkcs11Key) String() string { return k.name }

// Sign signs a SHA-256 digest in the token (CKM_ECDSA) and returns an
// ASN.1 DER signature, checked against the public key before it is
// returned.
func (k *pkcs11Key) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts == nil || opts.HashFunc() != crypto.SHA256 || len(digest) != sha256.Size {
		h := crypto.Hash(0)
		if opts != nil {
			h = opts.HashFunc()
		}
		return nil, fmt.Errorf("%w: %s: signs SHA-256 digests only (got %v, %d bytes): the key is ECDSA P-256 with SHA-256", ErrPKCS11, k, h, len(digest))
	}
	k.mu.Lock()
	closed := k.ctx == nil
	k.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: %s: key closed", ErrPKCS11, k)
	}
	sig, err := k.signer.Sign(rand.Reader, digest, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: sign: %w", ErrPKCS11, k, err)
	}
	if !ecdsa.VerifyASN1(k.pub, digest, sig) {
		return nil, fmt.Errorf("%w: %s: the token returned a signature that does not verify", ErrPKCS11, k)
	}
	return sig, nil
}

// Close logs out and closes the token's sessions (crypto11 waits for
// signatures under way). A second Close does nothing.
func (k *pkcs11Key) Close() error {
	k.mu.Lock()
	ctx := k.ctx
	k.ctx = nil
	k.mu.Unlock()
	if ctx == nil {
		return nil
	}
	return ctx.Close()
}
