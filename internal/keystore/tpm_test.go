package keystore_test

import (
	"bytes"
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-tpm/tpm2"

	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/swtpmtest"
	"github.com/pact-hpc/pact/internal/tpmdev"
)

func tpmSpec(t *testing.T) keystore.Spec {
	t.Helper()
	s, err := keystore.Parse("tpm:" + filepath.Join(t.TempDir(), "journal-ca.tpmkey"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A key made in a real (software) TPM signs, is a CA key for
// x509.CreateCertificate, and is the same key when opened again from its
// blob after Close.
func TestTPMGenerateOpenSign(t *testing.T) {
	sw := swtpmtest.Start(t)
	spec := tpmSpec(t)
	opts := keystore.Options{TPMDevice: sw.Device}

	k, err := keystore.Generate(spec, opts)
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	if got := k.String(); got != spec.String() {
		t.Errorf("String() = %q, want %q", got, spec.String())
	}
	checkSigner(t, k)
	pub := k.Public().(*ecdsa.PublicKey)
	if err := k.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := k.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := k.Sign(rand.Reader, make([]byte, 32), crypto.SHA256); !errors.Is(err, keystore.ErrTPM) {
		t.Errorf("sign after close: %v, want ErrTPM", err)
	}

	st, err := os.Stat(spec.Location)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("blob mode %o, want 600", st.Mode().Perm())
	}

	k2, err := keystore.Open(spec, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer k2.Close()
	if !pub.Equal(k2.Public()) {
		t.Fatal("the key opened from the blob is not the key generated")
	}
	checkSigner(t, k2)

	// A second generate at the same place refuses, and leaves the blob.
	before, _ := os.ReadFile(spec.Location)
	if _, err := keystore.Generate(spec, opts); !errors.Is(err, keystore.ErrExists) {
		t.Fatalf("second generate: %v, want ErrExists", err)
	}
	if after, _ := os.ReadFile(spec.Location); !bytes.Equal(before, after) {
		t.Fatal("a refused generate changed the blob")
	}
}

// Only SHA-256 digests: the key's scheme is ECDSA-SHA256.
func TestTPMSignRefusesOtherHashes(t *testing.T) {
	sw := swtpmtest.Start(t)
	k, err := keystore.Generate(tpmSpec(t), keystore.Options{TPMDevice: sw.Device})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	d384 := sha512.Sum384([]byte("x"))
	for _, tc := range []struct {
		name   string
		digest []byte
		opts   crypto.SignerOpts
	}{
		{"SHA-384", d384[:], crypto.SHA384},
		{"SHA-256 label, 48 bytes", d384[:], crypto.SHA256},
		{"no hash", []byte("raw message"), crypto.Hash(0)},
	} {
		_, err := k.Sign(rand.Reader, tc.digest, tc.opts)
		if !errors.Is(err, keystore.ErrTPM) || !strings.Contains(err.Error(), "SHA-256 digests only") {
			t.Errorf("%s: %v, want a refusal saying SHA-256 only", tc.name, err)
		}
	}
}

// The blob made on one TPM is useless on another: loading it fails, and
// the error says why and what to do.
func TestTPMBlobOnAnotherTPM(t *testing.T) {
	a, b := swtpmtest.Start(t), swtpmtest.Start(t)
	spec := tpmSpec(t)
	k, err := keystore.Generate(spec, keystore.Options{TPMDevice: a.Device})
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
	_, err = keystore.Open(spec, keystore.Options{TPMDevice: b.Device})
	if !errors.Is(err, keystore.ErrTPM) {
		t.Fatalf("open on another TPM: %v, want ErrTPM", err)
	}
	for _, want := range []string{"another TPM", "make a new key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The first TPM still loads it.
	k, err = keystore.Open(spec, keystore.Options{TPMDevice: a.Device})
	if err != nil {
		t.Fatalf("open on its own TPM: %v", err)
	}
	k.Close()
}

// tpmKeyFile is the TPM 2.0 key file's ASN.1 (TPMKey), read here without
// the code under test.
type tpmKeyFile struct {
	Type      asn1.ObjectIdentifier
	EmptyAuth bool            `asn1:"optional,explicit,tag:0"`
	Policy    []asn1.RawValue `asn1:"optional,explicit,tag:1"`
	Secret    []byte          `asn1:"optional,explicit,tag:2"`
	Parent    int64
	Public    []byte
	Private   []byte
}

// The blob is not a key: it carries the public area and the private area
// as the TPM exported it, encrypted under the TPM's storage root key. The
// private scalar d (the one with d·G = the public key) appears nowhere in
// it, not as a PEM private key, not as any 32 bytes of the file.
func TestTPMBlobHoldsNoPrivateKey(t *testing.T) {
	sw := swtpmtest.Start(t)
	spec := tpmSpec(t)
	k, err := keystore.Generate(spec, keystore.Options{TPMDevice: sw.Device})
	if err != nil {
		t.Fatal(err)
	}
	pub := k.Public().(*ecdsa.PublicKey)
	k.Close()

	data, err := os.ReadFile(spec.Location)
	if err != nil {
		t.Fatal(err)
	}
	blk, rest := pem.Decode(data)
	if blk == nil || blk.Type != "TSS2 PRIVATE KEY" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("blob is not one TSS2 PRIVATE KEY PEM block:\n%s", data)
	}
	var f tpmKeyFile
	if r, err := asn1.Unmarshal(blk.Bytes, &f); err != nil || len(r) != 0 {
		t.Fatalf("blob is not a TPMKey: %v", err)
	}
	if !f.Type.Equal(asn1.ObjectIdentifier{2, 23, 133, 10, 1, 3}) || !f.EmptyAuth || f.Parent != 0x40000001 {
		t.Errorf("TPMKey type %v emptyAuth %t parent %#x, want a loadable key, emptyAuth, under the owner SRK", f.Type, f.EmptyAuth, f.Parent)
	}
	// TPMA_OBJECT sits after the TPM2B size (2), type (2) and nameAlg (2):
	// fixedTPM (bit 1), fixedParent (bit 4), sensitiveDataOrigin (bit 5).
	if len(f.Public) < 10 {
		t.Fatalf("public area of %d bytes", len(f.Public))
	}
	attrs := uint32(f.Public[6])<<24 | uint32(f.Public[7])<<16 | uint32(f.Public[8])<<8 | uint32(f.Public[9])
	for bit, name := range map[uint]string{1: "fixedTPM", 4: "fixedParent", 5: "sensitiveDataOrigin", 18: "sign"} {
		if attrs&(1<<bit) == 0 {
			t.Errorf("the key is not %s (attributes %#08x)", name, attrs)
		}
	}

	for _, der := range [][]byte{blk.Bytes, f.Private, f.Public} {
		if _, err := x509ParseAnyPrivateKey(der); err == nil {
			t.Fatal("a part of the blob parses as a private key")
		}
	}
	// Every 32-byte window of the file, and of its decoded parts, taken as a
	// scalar, is not the private key.
	for _, b := range [][]byte{data, blk.Bytes} {
		if i := scalarAt(t, b, pub); i >= 0 {
			t.Fatalf("bytes %d..%d of the blob are the private scalar", i, i+32)
		}
	}
	// The search finds a scalar where there is one: in a file key's DER.
	fk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(fk)
	if err != nil {
		t.Fatal(err)
	}
	if scalarAt(t, der, &fk.PublicKey) < 0 {
		t.Fatal("the scalar search does not find the scalar of an EC PRIVATE KEY")
	}
}

// scalarAt is the offset of the first 32 bytes of b that are the private
// scalar of pub, or -1.
func scalarAt(t *testing.T, b []byte, pub *ecdsa.PublicKey) int {
	t.Helper()
	want, err := pub.ECDH()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+32 <= len(b); i++ {
		d, err := ecdh.P256().NewPrivateKey(b[i : i+32])
		if err != nil {
			continue // zero, or not below the group order: no scalar
		}
		if d.PublicKey().Equal(want) {
			return i
		}
	}
	return -1
}

func TestTPMOpenRefusals(t *testing.T) {
	sw := swtpmtest.Start(t)
	opts := keystore.Options{TPMDevice: sw.Device}

	// No blob: ErrNoKey, before the TPM is touched.
	missing := tpmSpec(t)
	if _, err := keystore.Open(missing, opts); !errors.Is(err, keystore.ErrNoKey) {
		t.Errorf("open of a missing blob: %v, want ErrNoKey", err)
	}

	// A blob others can read: on this host it is the right to sign.
	spec := tpmSpec(t)
	k, err := keystore.Generate(spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
	if err := os.Chmod(spec.Location, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := keystore.Open(spec, opts); !errors.Is(err, keystore.ErrPermission) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("open of a 0640 blob: %v, want ErrPermission saying chmod 600", err)
	}

	// A file key given as tpm: is refused as a blob.
	fileSpec, _ := keystore.Parse("file:" + filepath.Join(t.TempDir(), "k.pem"))
	fk, err := keystore.Generate(fileSpec, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fk.Close()
	notBlob := keystore.Spec{Backend: keystore.BackendTPM, Location: fileSpec.Location}
	if _, err := keystore.Open(notBlob, opts); !errors.Is(err, keystore.ErrKeyFile) || !strings.Contains(err.Error(), "not a TPM key blob") {
		t.Errorf("open of a PEM key as tpm: %v, want ErrKeyFile saying not a TPM key blob", err)
	}

	// No TPM: the error names the flag.
	noDev := keystore.Options{TPMDevice: filepath.Join(t.TempDir(), "tpmrm0")}
	if err := os.Chmod(spec.Location, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"open":     func() error { _, err := keystore.Open(spec, noDev); return err },
		"generate": func() error { _, err := keystore.Generate(tpmSpec(t), noDev); return err },
	} {
		err := f()
		if !errors.Is(err, keystore.ErrTPM) || !strings.Contains(err.Error(), "no TPM at") || !strings.Contains(err.Error(), "--tpm-device") {
			t.Errorf("%s without a TPM: %v, want ErrTPM naming --tpm-device", name, err)
		}
	}
}

// Signatures asked for at once (a re-key while an operator retires an
// intermediate) go to the TPM one at a time and all verify.
func TestTPMSignConcurrently(t *testing.T) {
	sw := swtpmtest.Start(t)
	k, err := keystore.Generate(tpmSpec(t), keystore.Options{TPMDevice: sw.Device})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	checkSignsConcurrently(t, k)
}

// A TPM whose owner hierarchy has a password: pact cannot make its storage
// root key, and says how to fix it.
func TestTPMOwnerPassword(t *testing.T) {
	sw := swtpmtest.Start(t)
	tr, err := tpmdev.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpm2.HierarchyChangeAuth{AuthHandle: tpm2.TPMRHOwner, NewAuth: tpm2.TPM2BAuth{Buffer: []byte("owner-pw")}}.Execute(tr)
	tr.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, err = keystore.Generate(tpmSpec(t), keystore.Options{TPMDevice: sw.Device})
	if !errors.Is(err, keystore.ErrTPM) || !strings.Contains(err.Error(), "owner hierarchy has a password") {
		t.Fatalf("generate with an owner password: %v, want ErrTPM saying so", err)
	}
}

// The blob is a TPM 2.0 key file other tools read: OpenSSL with
// tpm2-openssl (Debian's tpm2-openssl and libtss2-tcti-swtpm0) loads it
// from the same TPM, gives the same public key and signs with it. CI
// installs both; elsewhere the test skips without them.
func TestTPMBlobLoadsInOpenSSL(t *testing.T) {
	sw := swtpmtest.Start(t)
	// The provider starts only with a TPM to talk to: this needs both
	// packages.
	check := exec.Command("openssl", "list", "-providers", "-provider", "tpm2")
	check.Env = append(os.Environ(), "TPM2OPENSSL_TCTI="+sw.TCTI)
	if out, err := check.CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("OpenSSL cannot load its tpm2 provider with the swtpm TCTI (apt-get install tpm2-openssl libtss2-tcti-swtpm0); CI must run this test: %v\n%s", err, out)
		}
		t.Skipf("OpenSSL cannot load its tpm2 provider with the swtpm TCTI (apt-get install tpm2-openssl libtss2-tcti-swtpm0): %v", err)
	}
	spec := tpmSpec(t)
	k, err := keystore.Generate(spec, keystore.Options{TPMDevice: sw.Device})
	if err != nil {
		t.Fatal(err)
	}
	pub := k.Public().(*ecdsa.PublicKey)
	// swtpm serves one connection at a time.
	k.Close()

	dir := t.TempDir()
	msg := filepath.Join(dir, "msg")
	if err := os.WriteFile(msg, []byte("signed by OpenSSL with pact's TPM key"), 0o600); err != nil {
		t.Fatal(err)
	}
	openssl := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command("openssl", args...)
		cmd.Env = append(os.Environ(), "TPM2OPENSSL_TCTI="+sw.TCTI)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	out := openssl("pkey", "-provider", "tpm2", "-provider", "default", "-in", spec.Location, "-pubout")
	blk, _ := pem.Decode(out)
	if blk == nil {
		t.Fatalf("openssl printed no public key:\n%s", out)
	}
	got, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil || !pub.Equal(got) {
		t.Fatalf("OpenSSL reads another public key from the blob (%v)", err)
	}
	sigFile := filepath.Join(dir, "sig")
	openssl("dgst", "-sha256", "-provider", "tpm2", "-provider", "default", "-propquery", "?provider=tpm2",
		"-sign", spec.Location, "-out", sigFile, msg)
	sig, err := os.ReadFile(sigFile)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(msg)
	digest := sha256.Sum256(data)
	if !ecdsa.VerifyASN1(pub, digest[:], sig) {
		t.Fatal("OpenSSL's signature with the blob does not verify with pact's public key")
	}
}
