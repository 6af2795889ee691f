package keystore

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"sync"

	"github.com/google/go-tpm/tpm2"

	"github.com/pact-hpc/pact/internal/atomicfile"
	"github.com/pact-hpc/pact/internal/tpmdev"
)

// ErrTPM: the TPM is absent, unreachable, or refused a command; the
// message says which and what to do.
var ErrTPM = errors.New("keystore: TPM")

// DefaultTPMDevice is where tpm: keys are used when Options.TPMDevice is
// empty: the kernel's TPM resource manager.
const DefaultTPMDevice = tpmdev.DefaultDevice

func init() { backends[BackendTPM] = tpmBackend{} }

// tpmBackend keeps a key inside the host's TPM 2.0. The key is an ECDSA
// P-256 signing key the TPM generated (sensitiveDataOrigin) and will never
// export (fixedTPM, fixedParent): its private scalar exists only inside the
// TPM. It is a child of the storage root key (SRK) that the TPM derives
// from its owner-hierarchy seed and the TCG's ECC P-256 storage template
// (srkTemplate), so the SRK is made again, identically, at every use and
// nothing is left persistent in the TPM.
//
// What the file at the spec's path holds is therefore not a key: it is the
// key's public area and its private area as the TPM exported it, encrypted
// and integrity-protected under the SRK (TPM2_Create's outPrivate). Only the
// TPM whose owner seed made that SRK can load it; off the host, or after the
// TPM's owner hierarchy is cleared, it is useless. On the host it is the
// right to use the key (its authorisation is empty), so it is kept 0600 like
// a key file.
//
// The file is PEM "TSS2 PRIVATE KEY" (the ASN.1 TPMKey of the TPM 2.0 key
// file format of tpm2-tss-engine and tpm2-openssl): a loadable key (OID
// 2.23.133.10.1.3) with emptyAuth, parent TPM_RH_OWNER, and the
// TPM2B_PUBLIC and TPM2B_PRIVATE. OpenSSL with tpm2-openssl loads it from
// the same TPM and signs with it (TestTPMBlobLoadsInOpenSSL).
type tpmBackend struct{}

const (
	tpmBlobPEMType = "TSS2 PRIVATE KEY"
	// maxTPMBlob bounds what open reads: a P-256 blob is about 300 bytes.
	maxTPMBlob = 16 << 10
)

var oidTPMLoadableKey = asn1.ObjectIdentifier{2, 23, 133, 10, 1, 3}

// tssKey is the TPMKey ASN.1 structure of the TPM 2.0 key file format.
type tssKey struct {
	Type      asn1.ObjectIdentifier
	EmptyAuth bool            `asn1:"optional,explicit,tag:0"`
	Policy    []asn1.RawValue `asn1:"optional,explicit,tag:1"`
	Secret    []byte          `asn1:"optional,explicit,tag:2"`
	Parent    int64
	Public    []byte // TPM2B_PUBLIC
	Private   []byte // TPM2B_PRIVATE
}

// tpmKeyTemplate is the CA key: ECDSA P-256 with SHA-256, generated in the
// TPM and bound to it. NoDA: its authorisation is empty, so dictionary-
// attack protection guards nothing here, and without NoDA a lockout
// provoked by another program on the host would stop the CA from signing.
var tpmKeyTemplate = tpm2.TPMTPublic{
	Type:    tpm2.TPMAlgECC,
	NameAlg: tpm2.TPMAlgSHA256,
	ObjectAttributes: tpm2.TPMAObject{
		FixedTPM:            true,
		FixedParent:         true,
		SensitiveDataOrigin: true,
		UserWithAuth:        true,
		NoDA:                true,
		SignEncrypt:         true,
	},
	Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{
		Symmetric: tpm2.TPMTSymDefObject{Algorithm: tpm2.TPMAlgNull},
		Scheme:    tpmSigScheme(),
		CurveID:   tpm2.TPMECCNistP256,
		KDF:       tpm2.TPMTKDFScheme{Scheme: tpm2.TPMAlgNull},
	}),
}

func tpmSigScheme() tpm2.TPMTECCScheme {
	return tpm2.TPMTECCScheme{
		Scheme:  tpm2.TPMAlgECDSA,
		Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgECDSA, &tpm2.TPMSSigSchemeECDSA{HashAlg: tpm2.TPMAlgSHA256}),
	}
}

func tpmDevice(o Options) string {
	if o.TPMDevice == "" {
		return DefaultTPMDevice
	}
	return o.TPMDevice
}

// srkTemplate is the TCG's ECC P-256 storage key template with an empty
// unique field: the parent that the TPM 2.0 key file format names by
// TPM_RH_OWNER, as tpm2-openssl makes it, so that tools built on it load
// pact's blobs too.
func srkTemplate() tpm2.TPMTPublic {
	t := tpm2.ECCSRKTemplate
	t.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{})
	return t
}

// createSRK makes the storage root key again from the owner seed; the
// connection flushes it when it closes, if the caller has not.
func createSRK(c *tpmConn) (*tpm2.CreatePrimaryResponse, error) {
	srk, err := tpm2.CreatePrimary{
		PrimaryHandle: tpm2.TPMRHOwner,
		InPublic:      tpm2.New2B(srkTemplate()),
	}.Execute(c)
	if errors.Is(err, tpm2.TPMRCBadAuth) || errors.Is(err, tpm2.TPMRCAuthFail) {
		return nil, fmt.Errorf("%w: %s: the TPM's owner hierarchy has a password; pact's TPM keys need it empty, as the TCG provisioning guidance leaves it (remove it: tpm2_changeauth -c owner -p CURRENT-PASSWORD): %w", ErrTPM, c.device, err)
	}
	if err != nil {
		return nil, tpmCommandError(c, "create the storage root key", "load the storage root key", err)
	}
	return srk, nil
}

// tpmCommandError wraps a failed command's error: ErrTPMBusy and
// ErrTPMFull as they are (full: what could not be loaded), any other as
// ErrTPM with what failed.
func tpmCommandError(c *tpmConn, what, load string, err error) error {
	if errors.Is(err, ErrTPMBusy) {
		return err
	}
	if full := c.memoryError(load, err); full != nil {
		return full
	}
	return fmt.Errorf("%w: %s: %s: %w", ErrTPM, c.device, what, err)
}

// withTPM opens the TPM at device, runs use, and closes it: everything
// use loaded is flushed, on success, on error and after a timeout.
func withTPM(device string, o Options, use func(*tpmConn) error) (err error) {
	c, err := dialTPM(device, o)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := c.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	return use(c)
}

func (tpmBackend) generate(s Spec, o Options) (_ Key, err error) {
	if _, err := os.Lstat(s.Location); err == nil {
		return nil, fmt.Errorf("%w: %s (remove it first if you mean to replace it: the key it holds is then lost)", ErrExists, s.Location)
	}
	k := newTPMKey(s, o)
	var blob tssKey
	err = withTPM(k.device, o, func(c *tpmConn) error {
		srk, err := createSRK(c)
		if err != nil {
			return err
		}
		created, err := tpm2.Create{
			ParentHandle: tpm2.AuthHandle{Handle: srk.ObjectHandle, Name: srk.Name, Auth: tpm2.PasswordAuth(nil)},
			InPublic:     tpm2.New2B(tpmKeyTemplate),
		}.Execute(c)
		if err != nil {
			return tpmCommandError(c, "create the key", "create the key", err)
		}
		blob = tssKey{
			Type:      oidTPMLoadableKey,
			EmptyAuth: true,
			Parent:    int64(tpm2.TPMRHOwner),
			Public:    tpm2.Marshal(created.OutPublic),
			Private:   tpm2.Marshal(created.OutPrivate),
		}
		_, err = k.load(c, srk, blob)
		return err
	})
	if err != nil {
		return nil, err
	}
	der, err := asn1.Marshal(blob)
	if err != nil {
		return nil, fmt.Errorf("keystore: encode the TPM key blob: %w", err)
	}
	if err := writeExclusive(s.Location, pem.EncodeToMemory(&pem.Block{Type: tpmBlobPEMType, Bytes: der})); err != nil {
		return nil, err
	}
	return k, nil
}

func (tpmBackend) open(s Spec, o Options) (_ Key, err error) {
	blob, err := readTPMBlob(s.Location)
	if err != nil {
		return nil, err
	}
	k := newTPMKey(s, o)
	// The TPM must load the blob now, so that a key this TPM cannot use is
	// refused when it is opened (--check-config, a journal's start), not
	// at its first signature.
	err = withTPM(k.device, o, func(c *tpmConn) error {
		srk, err := createSRK(c)
		if err != nil {
			return err
		}
		_, err = k.load(c, srk, blob)
		return err
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// readTPMBlob reads and checks a key blob: only what generate writes is
// accepted (a non-exportable ECDSA P-256 key under the owner SRK, empty
// authorisation, no policy).
func readTPMBlob(path string) (tssKey, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return tssKey{}, fmt.Errorf("%w: %s does not exist (make the key first: pact-journal ca-request or pact ca init)", ErrNoKey, path)
	}
	if err != nil {
		return tssKey{}, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		// The blob is useless off this host, but on it, with the TPM, it
		// is the right to sign as the CA.
		return tssKey{}, fmt.Errorf("%w: %s has mode %o; run: chmod 600 %s", ErrPermission, path, st.Mode().Perm(), path)
	}
	if st.Size() > maxTPMBlob {
		return tssKey{}, fmt.Errorf("%w: %s: %d bytes is not a TPM key blob", ErrKeyFile, path, st.Size())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return tssKey{}, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	return parseTPMBlob(path, data)
}

func parseTPMBlob(path string, data []byte) (k tssKey, err error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != tpmBlobPEMType {
		return tssKey{}, fmt.Errorf("%w: %s is not a TPM key blob (no %s PEM block): give tpm: only a file pact made for a TPM key", ErrKeyFile, path, tpmBlobPEMType)
	}
	rest, err := asn1.Unmarshal(b.Bytes, &k)
	if err != nil || len(rest) != 0 {
		return tssKey{}, fmt.Errorf("%w: %s: malformed TPM key blob", ErrKeyFile, path)
	}
	switch {
	case !k.Type.Equal(oidTPMLoadableKey):
		return tssKey{}, fmt.Errorf("%w: %s: TPM key of type %v (want a loadable key, %v)", ErrKeyFile, path, k.Type, oidTPMLoadableKey)
	case !k.EmptyAuth || len(k.Policy) != 0 || len(k.Secret) != 0:
		return tssKey{}, fmt.Errorf("%w: %s: TPM key with a password, a policy or an imported secret: pact uses only keys it made", ErrKeyFile, path)
	case k.Parent != int64(tpm2.TPMRHOwner):
		return tssKey{}, fmt.Errorf("%w: %s: TPM key under parent %#x (want the owner hierarchy's storage root key, %#x)", ErrKeyFile, path, k.Parent, uint32(tpm2.TPMRHOwner))
	}
	_, pub, err := tpmPublicArea(k.Public)
	if err != nil {
		return tssKey{}, fmt.Errorf("%w: %s: %w", ErrKeyFile, path, err)
	}
	if _, err := tpmPrivateArea(k.Private); err != nil {
		return tssKey{}, fmt.Errorf("%w: %s: %w", ErrKeyFile, path, err)
	}
	a := pub.ObjectAttributes
	if pub.Type != tpm2.TPMAlgECC || !a.FixedTPM || !a.FixedParent || !a.SensitiveDataOrigin || !a.SignEncrypt || a.Decrypt || a.Restricted {
		return tssKey{}, fmt.Errorf("%w: %s: not a non-exportable TPM signing key", ErrKeyFile, path)
	}
	if _, err := tpmECDSAPublic(pub); err != nil {
		return tssKey{}, fmt.Errorf("%w: %s: %w", ErrKeyFile, path, err)
	}
	return k, nil
}

// tpmPublicArea decodes a TPM2B_PUBLIC. go-tpm's reflection-based decoder
// is not written for hostile input: a panic in it is a refusal.
func tpmPublicArea(b []byte) (p2b *tpm2.TPM2BPublic, pub *tpm2.TPMTPublic, err error) {
	defer func() {
		if r := recover(); r != nil {
			p2b, pub, err = nil, nil, errors.New("undecodable TPM public area")
		}
	}()
	p2b, err = tpm2.Unmarshal[tpm2.TPM2BPublic](b)
	if err != nil {
		return nil, nil, fmt.Errorf("undecodable TPM public area: %w", err)
	}
	if !bytes.Equal(tpm2.Marshal(*p2b), b) {
		return nil, nil, errors.New("TPM public area with trailing bytes")
	}
	pub, err = p2b.Contents()
	if err != nil {
		return nil, nil, fmt.Errorf("undecodable TPM public area: %w", err)
	}
	return p2b, pub, nil
}

// tpmPrivateArea decodes a TPM2B_PRIVATE (opaque to all but its TPM).
func tpmPrivateArea(b []byte) (priv *tpm2.TPM2BPrivate, err error) {
	defer func() {
		if r := recover(); r != nil {
			priv, err = nil, errors.New("undecodable TPM private area")
		}
	}()
	priv, err = tpm2.Unmarshal[tpm2.TPM2BPrivate](b)
	if err != nil || len(priv.Buffer) == 0 || len(priv.Buffer)+2 != len(b) {
		return nil, errors.New("undecodable TPM private area")
	}
	return priv, nil
}

func tpmECDSAPublic(pub *tpm2.TPMTPublic) (*ecdsa.PublicKey, error) {
	k, err := tpm2.Pub(*pub)
	if err != nil {
		return nil, fmt.Errorf("TPM public key: %w", err)
	}
	e, ok := k.(*ecdsa.PublicKey)
	if !ok || e.Curve != elliptic.P256() {
		return nil, errors.New("TPM key is not ECDSA P-256")
	}
	if _, err := e.ECDH(); err != nil {
		return nil, errors.New("TPM public key is not a point on P-256")
	}
	return e, nil
}

// writeExclusive writes a new 0600 file, refusing to replace one.
func writeExclusive(path string, data []byte) error {
	err := atomicfile.WriteNew(path, data, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s (remove it first if you mean to replace it)", ErrExists, path)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	return nil
}

// tpmKey is a key kept in the TPM. It holds the TPM only while it uses
// it: each signature opens the TPM, loads the key under a fresh storage
// root key, signs and flushes both (the TPM signs a handful of
// intermediates a year, and a key held loaded for months would keep an
// exclusive /dev/tpm0, or swtpm's one connection, from every other
// program, and stay loaded if the journal were killed). Its methods are
// safe for concurrent use: one signature at a time goes to the TPM.
type tpmKey struct {
	mu     sync.Mutex
	closed bool
	path   string
	device string
	opts   Options
	blob   tssKey
	pub    *ecdsa.PublicKey
}

func newTPMKey(s Spec, o Options) *tpmKey {
	return &tpmKey{path: s.Location, device: tpmDevice(o), opts: o}
}

// load loads the blob under srk and flushes srk; the connection flushes
// the key when it closes. It keeps the blob and its public key.
func (k *tpmKey) load(c *tpmConn, srk *tpm2.CreatePrimaryResponse, blob tssKey) (*tpm2.LoadResponse, error) {
	defer c.flush(srk.ObjectHandle)
	p2b, pub, err := tpmPublicArea(blob.Public)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKeyFile, k.path, err)
	}
	ecPub, err := tpmECDSAPublic(pub)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKeyFile, k.path, err)
	}
	priv, err := tpmPrivateArea(blob.Private)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKeyFile, k.path, err)
	}
	loaded, err := tpm2.Load{
		ParentHandle: tpm2.AuthHandle{Handle: srk.ObjectHandle, Name: srk.Name, Auth: tpm2.PasswordAuth(nil)},
		InPrivate:    *priv,
		InPublic:     *p2b,
	}.Execute(c)
	if errors.Is(err, tpm2.TPMRCIntegrity) || errors.Is(err, tpm2.TPMRCBinding) {
		return nil, fmt.Errorf("%w: the TPM at %s cannot load the key blob %s: it was made by another TPM, or this TPM's owner hierarchy was cleared since. A TPM key cannot move: make a new key on this host and have its certificate signed again (docs/ca-keys.md): %w", ErrTPM, c.device, k.path, err)
	}
	if err != nil {
		if errors.Is(err, ErrTPMBusy) {
			return nil, err
		}
		if full := c.memoryError("load the key "+k.path, err); full != nil {
			return nil, full
		}
		return nil, fmt.Errorf("%w: the TPM at %s refused the key blob %s: %w", ErrTPM, c.device, k.path, err)
	}
	k.blob, k.pub = blob, ecPub
	return loaded, nil
}

func (k *tpmKey) Public() crypto.PublicKey { return k.pub }

func (k *tpmKey) String() string { return BackendTPM + ":" + k.path }

// Sign signs a SHA-256 digest with TPM2_Sign and returns an ASN.1 DER
// ECDSA signature, as crypto.Signer requires. The key's scheme is
// ECDSA-SHA256: other hashes are refused. The signature is checked against
// the public key before it is returned, so a failing TPM cannot make the CA
// issue a certificate nobody can verify. Each TPM command is bounded by
// Options.TPMTimeout.
func (k *tpmKey) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts == nil || opts.HashFunc() != crypto.SHA256 || len(digest) != sha256.Size {
		h := crypto.Hash(0)
		if opts != nil {
			h = opts.HashFunc()
		}
		return nil, fmt.Errorf("%w: %s: signs SHA-256 digests only (got %v, %d bytes): the key is ECDSA P-256 with SHA-256", ErrTPM, k, h, len(digest))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, fmt.Errorf("%w: %s: key closed", ErrTPM, k)
	}
	var sig []byte
	err := withTPM(k.device, k.opts, func(c *tpmConn) error {
		srk, err := createSRK(c)
		if err != nil {
			return err
		}
		loaded, err := k.load(c, srk, k.blob)
		if err != nil {
			return err
		}
		rsp, err := tpm2.Sign{
			KeyHandle: tpm2.AuthHandle{Handle: loaded.ObjectHandle, Name: loaded.Name, Auth: tpm2.PasswordAuth(nil)},
			Digest:    tpm2.TPM2BDigest{Buffer: digest},
			InScheme: tpm2.TPMTSigScheme{
				Scheme:  tpm2.TPMAlgECDSA,
				Details: tpm2.NewTPMUSigScheme(tpm2.TPMAlgECDSA, &tpm2.TPMSSchemeHash{HashAlg: tpm2.TPMAlgSHA256}),
			},
			// An unrestricted key signs any digest: a NULL ticket.
			Validation: tpm2.TPMTTKHashCheck{Tag: tpm2.TPMSTHashCheck, Hierarchy: tpm2.TPMRHNull},
		}.Execute(c)
		if err != nil {
			if errors.Is(err, ErrTPMBusy) {
				return err
			}
			return fmt.Errorf("%w: %s: sign: %w", ErrTPM, k, err)
		}
		ecc, err := rsp.Signature.Signature.ECDSA()
		if err != nil {
			return fmt.Errorf("%w: %s: sign: %w", ErrTPM, k, err)
		}
		sig, err = asn1.Marshal(struct{ R, S *big.Int }{
			new(big.Int).SetBytes(ecc.SignatureR.Buffer),
			new(big.Int).SetBytes(ecc.SignatureS.Buffer),
		})
		if err != nil {
			return fmt.Errorf("%w: %s: encode the signature: %w", ErrTPM, k, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !ecdsa.VerifyASN1(k.pub, digest, sig) {
		return nil, fmt.Errorf("%w: %s: the TPM returned a signature that does not verify", ErrTPM, k)
	}
	return sig, nil
}

// Close marks the key closed: it holds nothing in the TPM between uses.
// A second Close does nothing.
func (k *tpmKey) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	return nil
}
