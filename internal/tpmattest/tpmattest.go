// Package tpmattest holds the pure, device-free half of TPM 2.0 credential
// activation: what a journal does with the public areas an agent sends
// (parse them, check them against policy and the registered EK hash) and
// with the answer it gets back. It never talks to a TPM; the agent's side
// is agent/tpm.
//
// The protocol (docs/tpm.md):
//
//  1. The agent sends its EK's and a fresh attestation key's (AK) public
//     areas (TPMT_PUBLIC) with its CSR.
//  2. The journal checks the EK hashes to the registered EK hash and is an
//     endorsement key, checks the AK is a restricted signing key that cannot
//     leave the TPM (fixedTPM, fixedParent), and encrypts a fresh random
//     secret to the EK for the AK's name (TPM2_MakeCredential done in
//     software: CreateChallenge).
//  3. Only the TPM that holds that EK, with that AK loaded, can recover the
//     secret (TPM2_ActivateCredential). The agent answers with
//     Proof(secret, challenge id, the CSR's SPKI hash), which binds the
//     answer to the key the certificate will be issued for.
package tpmattest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"

	"github.com/google/go-tpm/tpm2"
)

// Sentinel errors. Callers match with errors.Is.
var (
	// ErrEKInvalid: the bytes are not the public area of an endorsement key
	// pact can challenge (malformed, not a restricted decryption key, an
	// algorithm the TPM credential protocol does not support here).
	ErrEKInvalid = errors.New("tpmattest: not a usable TPM endorsement key")
	// ErrEKMismatch: a well-formed EK whose hash is not the registered one.
	ErrEKMismatch = errors.New("tpmattest: TPM endorsement key differs from the registered one")
	// ErrAKInvalid: the attestation key is malformed, or not a restricted
	// signing key bound to its TPM (fixedTPM, fixedParent,
	// sensitiveDataOrigin).
	ErrAKInvalid = errors.New("tpmattest: attestation key is not a restricted signing key bound to its TPM")
	// ErrAnswerInvalid: a challenge answer of the wrong shape.
	ErrAnswerInvalid = errors.New("tpmattest: malformed challenge answer")
	// ErrProofMismatch: the answer does not prove the challenge's secret
	// for this CSR key.
	ErrProofMismatch = errors.New("tpmattest: challenge answer does not match")
	// ErrEKCertInvalid: an EK certificate file pact cannot read.
	ErrEKCertInvalid = errors.New("tpmattest: invalid EK certificate")
)

// Limits on untrusted input, checked before anything parses it. An RSA-2048
// TPMT_PUBLIC with a policy is about 350 bytes.
const (
	MaxPublicArea    = 1024
	MaxEKCert        = 16 << 10
	SecretSize       = 32
	ProofSize        = sha256.Size
	ChallengeIDBytes = 16
)

// EK is an endorsement key a journal may challenge.
type EK struct {
	// Hash is the EK hash (EKHash of the public key).
	Hash string
	pub  tpm2.TPMTPublic
}

// EKHash is the definition of a node's TPM EK hash, used by registration
// (pact node enroll --tpm-ek-hash / --tpm-ek-cert), the agent and the
// journal alike: the lower-case hex SHA-256 of the DER (PKIX)
// SubjectPublicKeyInfo of the EK's public key. It is what
// `openssl pkey -pubin -outform DER | sha256sum` prints for the EK's public
// key in PEM, and it is the same whether the key comes from the TPM or from
// the EK certificate.
func EKHash(pub any) (string, error) {
	switch pub.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey:
	default:
		return "", fmt.Errorf("%w: %T is not an RSA or ECDSA public key", ErrEKInvalid, pub)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrEKInvalid, err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// unmarshalPublic parses a TPMT_PUBLIC and insists the encoding is
// canonical and complete: re-marshalling gives the same bytes, so trailing
// garbage or a second reading of the same key cannot change its name.
func unmarshalPublic(b []byte) (pub *tpm2.TPMTPublic, err error) {
	if len(b) == 0 || len(b) > MaxPublicArea {
		return nil, fmt.Errorf("%d bytes (want 1 to %d)", len(b), MaxPublicArea)
	}
	defer func() {
		// The reflection-based decoder of go-tpm is not written for hostile
		// input; a panic in it is a refusal, not a crash.
		if r := recover(); r != nil {
			pub, err = nil, fmt.Errorf("undecodable TPMT_PUBLIC")
		}
	}()
	p, err := tpm2.Unmarshal[tpm2.TPMTPublic](b)
	if err != nil {
		return nil, fmt.Errorf("undecodable TPMT_PUBLIC: %w", err)
	}
	if !bytes.Equal(tpm2.Marshal(*p), b) {
		return nil, fmt.Errorf("TPMT_PUBLIC is not canonically encoded or has trailing bytes")
	}
	return p, nil
}

// ParseEK parses an EK's TPMT_PUBLIC as sent by an agent and checks it is
// an endorsement key: a restricted decryption key that never leaves its TPM,
// with parameters credential activation supports.
func ParseEK(b []byte) (*EK, error) {
	p, err := unmarshalPublic(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEKInvalid, err)
	}
	a := p.ObjectAttributes
	if !a.FixedTPM || !a.FixedParent || !a.Restricted || !a.Decrypt || a.SignEncrypt {
		return nil, fmt.Errorf("%w: attributes fixedTPM=%t fixedParent=%t restricted=%t decrypt=%t sign=%t (want a restricted decryption key bound to its TPM)",
			ErrEKInvalid, a.FixedTPM, a.FixedParent, a.Restricted, a.Decrypt, a.SignEncrypt)
	}
	if p.NameAlg != tpm2.TPMAlgSHA256 && p.NameAlg != tpm2.TPMAlgSHA384 {
		return nil, fmt.Errorf("%w: name algorithm %v (want SHA-256 or SHA-384)", ErrEKInvalid, p.NameAlg)
	}
	key, err := publicKey(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEKInvalid, err)
	}
	if err := checkEKSymmetric(p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEKInvalid, err)
	}
	if _, err := tpm2.ImportEncapsulationKey(p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEKInvalid, err)
	}
	h, err := EKHash(key)
	if err != nil {
		return nil, err
	}
	return &EK{Hash: h, pub: *p}, nil
}

// checkEKSymmetric refuses an EK whose symmetric parameters are not what a
// TPM requires of a restricted decryption key (AES-128 or AES-256 in CFB
// mode, TPM 2.0 Part 2, TPMT_SYM_DEF_OBJECT): the credential is wrapped
// with them, so anything else could not be challenged.
func checkEKSymmetric(p *tpm2.TPMTPublic) error {
	var sym tpm2.TPMTSymDefObject
	if d, err := p.Parameters.RSADetail(); err == nil {
		sym = d.Symmetric
	} else if d, err := p.Parameters.ECCDetail(); err == nil {
		sym = d.Symmetric
	} else {
		return fmt.Errorf("key type %v", p.Type)
	}
	if sym.Algorithm != tpm2.TPMAlgAES {
		return fmt.Errorf("symmetric algorithm %v (want AES)", sym.Algorithm)
	}
	bits, err := sym.KeyBits.AES()
	if err != nil || (*bits != 128 && *bits != 256) {
		return fmt.Errorf("AES key size not 128 or 256")
	}
	mode, err := sym.Mode.AES()
	if err != nil || *mode != tpm2.TPMAlgCFB {
		return fmt.Errorf("symmetric mode not CFB")
	}
	return nil
}

// publicKey extracts the crypto public key and refuses sizes and curves
// pact does not accept for TPM keys.
func publicKey(p *tpm2.TPMTPublic) (pub any, err error) {
	defer func() {
		if r := recover(); r != nil {
			pub, err = nil, fmt.Errorf("undecodable public key")
		}
	}()
	k, err := tpm2.Pub(*p)
	if err != nil {
		return nil, err
	}
	switch k := k.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() != 2048 && k.N.BitLen() != 3072 {
			return nil, fmt.Errorf("RSA-%d (want RSA-2048 or RSA-3072)", k.N.BitLen())
		}
		if k.E < 3 || k.E%2 == 0 {
			return nil, fmt.Errorf("RSA exponent %d", k.E)
		}
		if k.N.Bit(0) == 0 {
			return nil, fmt.Errorf("even RSA modulus")
		}
	case *ecdsa.PublicKey:
		if name := k.Curve.Params().Name; name != "P-256" && name != "P-384" {
			return nil, fmt.Errorf("curve %s (want P-256 or P-384)", name)
		}
		if _, err := k.ECDH(); err != nil {
			return nil, fmt.Errorf("point not on the curve")
		}
	default:
		return nil, fmt.Errorf("key type %T", k)
	}
	return k, nil
}

// PublicKey is the EK's public key (*rsa.PublicKey or *ecdsa.PublicKey).
func (ek *EK) PublicKey() any {
	k, _ := publicKey(&ek.pub)
	return k
}

// Check compares the EK with the registered EK hash (normalised, lower-case
// hex) in constant time.
func (ek *EK) Check(registered string) error {
	if !hmac.Equal([]byte(ek.Hash), []byte(registered)) {
		return fmt.Errorf("%w: the presented EK hashes to %s", ErrEKMismatch, ek.Hash)
	}
	return nil
}

// AK is an attestation key's public area, checked.
type AK struct {
	// Name is the TPM name (nameAlg || H(TPMT_PUBLIC)) the credential is
	// bound to.
	Name []byte
}

// ParseAK parses an AK's TPMT_PUBLIC and checks it is a restricted signing
// key that cannot leave its TPM. A credential bound to its name can only be
// activated in a TPM where an object with exactly these attributes is
// loaded, so the attributes checked here are the ones the TPM enforces.
func ParseAK(b []byte) (*AK, error) {
	p, err := unmarshalPublic(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAKInvalid, err)
	}
	a := p.ObjectAttributes
	if !a.FixedTPM || !a.FixedParent || !a.SensitiveDataOrigin || !a.Restricted || !a.SignEncrypt || a.Decrypt {
		return nil, fmt.Errorf("%w: attributes fixedTPM=%t fixedParent=%t sensitiveDataOrigin=%t restricted=%t sign=%t decrypt=%t",
			ErrAKInvalid, a.FixedTPM, a.FixedParent, a.SensitiveDataOrigin, a.Restricted, a.SignEncrypt, a.Decrypt)
	}
	if p.NameAlg != tpm2.TPMAlgSHA256 {
		return nil, fmt.Errorf("%w: name algorithm %v (want SHA-256)", ErrAKInvalid, p.NameAlg)
	}
	if _, err := publicKey(p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAKInvalid, err)
	}
	name, err := tpm2.ObjectName(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAKInvalid, err)
	}
	return &AK{Name: name.Buffer}, nil
}

// Challenge is what the journal sends back for credential activation: the
// TPM2B_ID_OBJECT and TPM2B_ENCRYPTED_SECRET contents that
// TPM2_ActivateCredential takes.
type Challenge struct {
	CredentialBlob  []byte
	EncryptedSecret []byte
}

// CreateChallenge draws a fresh secret and encrypts it to ek for the AK's
// name (TPM2_MakeCredential in software). The secret stays with the
// journal; only its holder and the TPM ever see it.
func CreateChallenge(rand io.Reader, ek *EK, ak *AK) (Challenge, []byte, error) {
	secret := make([]byte, SecretSize)
	if _, err := io.ReadFull(rand, secret); err != nil {
		return Challenge{}, nil, fmt.Errorf("tpmattest: random secret: %w", err)
	}
	key, err := tpm2.ImportEncapsulationKey(&ek.pub)
	if err != nil {
		return Challenge{}, nil, fmt.Errorf("%w: %w", ErrEKInvalid, err)
	}
	blob, enc, err := tpm2.CreateCredential(rand, key, ak.Name, secret)
	if err != nil {
		return Challenge{}, nil, fmt.Errorf("tpmattest: make credential: %w", err)
	}
	return Challenge{CredentialBlob: blob, EncryptedSecret: enc}, secret, nil
}

// proofLabel separates pact's proof from any other use of the secret.
const proofLabel = "pact tpm credential activation v1\x00"

// Proof is the agent's answer: an HMAC-SHA256 under the activated secret of
// the challenge id and the hex SHA-256 of the CSR's SubjectPublicKeyInfo.
// It binds the answer to this challenge (single-use) and to the key the
// certificate will carry, so an answer cannot be moved to another CSR.
func Proof(secret []byte, challengeID, spkiSHA256 string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(proofLabel))
	m.Write([]byte(challengeID))
	m.Write([]byte{0})
	m.Write([]byte(spkiSHA256))
	return m.Sum(nil)
}

// CheckAnswerShape refuses an answer whose parts cannot be a real answer,
// before any state is looked up.
func CheckAnswerShape(challengeID string, proof []byte) error {
	if len(challengeID) != 2*ChallengeIDBytes {
		return fmt.Errorf("%w: challenge id of %d characters (want %d)", ErrAnswerInvalid, len(challengeID), 2*ChallengeIDBytes)
	}
	if _, err := hex.DecodeString(challengeID); err != nil {
		return fmt.Errorf("%w: challenge id is not hexadecimal", ErrAnswerInvalid)
	}
	if len(proof) != ProofSize {
		return fmt.Errorf("%w: proof of %d bytes (want %d)", ErrAnswerInvalid, len(proof), ProofSize)
	}
	return nil
}

// VerifyProof checks an answer in constant time.
func VerifyProof(secret []byte, challengeID, spkiSHA256 string, proof []byte) error {
	if !hmac.Equal(Proof(secret, challengeID, spkiSHA256), proof) {
		return ErrProofMismatch
	}
	return nil
}

// ParseEKCertificate reads an EK certificate (PEM or DER, as a TPM vendor
// ships it or as `tpm2_getekcertificate` writes it) and returns its EK hash.
// It checks the certificate parses and carries an RSA or ECDSA key; it does
// not verify the manufacturer's chain (docs/tpm.md says how to).
func ParseEKCertificate(b []byte) (string, error) {
	if len(b) == 0 || len(b) > MaxEKCert {
		return "", fmt.Errorf("%w: %d bytes (want 1 to %d)", ErrEKCertInvalid, len(b), MaxEKCert)
	}
	der := b
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type != "CERTIFICATE" {
			return "", fmt.Errorf("%w: PEM block %q (want CERTIFICATE)", ErrEKCertInvalid, blk.Type)
		}
		der = blk.Bytes
	}
	// TPM vendors' EK certificates often carry extensions and encodings
	// (a critical SAN with TPM attributes, negative serials) that
	// x509.ParseCertificate refuses; only the public key matters here.
	pub, err := ekCertPublicKey(der)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrEKCertInvalid, err)
	}
	h, err := EKHash(pub)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrEKCertInvalid, err)
	}
	return h, nil
}

// ekCertPublicKey reads only the SubjectPublicKeyInfo of a certificate:
// Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version,
// serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo,
// ... }, ... }.
func ekCertPublicKey(der []byte) (any, error) {
	var cert struct {
		TBS    asn1.RawValue
		SigAlg asn1.RawValue
		Sig    asn1.RawValue
	}
	rest, err := asn1.Unmarshal(der, &cert)
	if err != nil {
		return nil, fmt.Errorf("not a DER certificate: %w", err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%d trailing bytes after the certificate", len(rest))
	}
	if cert.TBS.Tag != asn1.TagSequence || !cert.TBS.IsCompound {
		return nil, errors.New("tbsCertificate is not a SEQUENCE")
	}
	fields := cert.TBS.Bytes
	var f asn1.RawValue
	if fields, err = asn1.Unmarshal(fields, &f); err != nil {
		return nil, fmt.Errorf("tbsCertificate: %w", err)
	}
	if f.Class == asn1.ClassContextSpecific && f.Tag == 0 {
		// [0] version; the serial follows.
		if fields, err = asn1.Unmarshal(fields, &f); err != nil {
			return nil, fmt.Errorf("tbsCertificate: %w", err)
		}
	}
	// serial (read above), signature, issuer, validity, subject, then the key.
	for range 4 {
		if fields, err = asn1.Unmarshal(fields, &f); err != nil {
			return nil, fmt.Errorf("tbsCertificate: %w", err)
		}
	}
	if _, err = asn1.Unmarshal(fields, &f); err != nil {
		return nil, fmt.Errorf("tbsCertificate: %w", err)
	}
	pub, err := x509.ParsePKIXPublicKey(f.FullBytes)
	if err == nil {
		return pub, nil
	}
	// Some TPM vendors label the EK's RSA key id-RSAES-OAEP instead of
	// rsaEncryption; the key itself is the same PKCS #1 public key.
	var spki struct {
		Alg struct {
			OID    asn1.ObjectIdentifier
			Params asn1.RawValue `asn1:"optional"`
		}
		Key asn1.BitString
	}
	if _, perr := asn1.Unmarshal(f.FullBytes, &spki); perr == nil && spki.Alg.OID.Equal(oidRSAESOAEP) {
		if k, kerr := x509.ParsePKCS1PublicKey(spki.Key.RightAlign()); kerr == nil {
			return k, nil
		}
	}
	return nil, fmt.Errorf("subject public key: %w", err)
}

var oidRSAESOAEP = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 7}
