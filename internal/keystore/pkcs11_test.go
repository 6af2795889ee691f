//go:build pkcs11

package keystore_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha512"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/softhsmtest"
)

// These tests run against a real token (SoftHSM2, internal/softhsmtest):
// make test-pkcs11. None runs in parallel: each points SOFTHSM2_CONF at
// its own token.

func pkcs11Spec(t *testing.T, uri string) keystore.Spec {
	t.Helper()
	s, err := keystore.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A key made in the token signs, is a CA key for x509.CreateCertificate,
// and is the same key when found again after Close; a second generate with
// the label is ErrExists.
func TestPKCS11GenerateOpenSign(t *testing.T) {
	tok := softhsmtest.New(t)
	spec := pkcs11Spec(t, tok.URI("journal-ca"))

	k, err := keystore.Generate(spec, keystore.Options{})
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	checkSigner(t, k)
	pub := k.Public().(*ecdsa.PublicKey)
	if !strings.HasPrefix(k.String(), "pkcs11:token=pact;object=journal-ca?") {
		t.Errorf("String() = %q", k.String())
	}
	if err := k.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := k.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}

	k2, err := keystore.Open(spec, keystore.Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if !pub.Equal(k2.Public()) {
		t.Fatal("the key found in the token is not the key generated")
	}
	checkSigner(t, k2)
	d384 := sha512.Sum384([]byte("x"))
	if _, err := k2.Sign(rand.Reader, d384[:], crypto.SHA384); err == nil || !strings.Contains(err.Error(), "SHA-256 digests only") {
		t.Errorf("SHA-384 digest: %v, want a refusal saying SHA-256 only", err)
	}
	k2.Close()

	if _, err := keystore.Generate(spec, keystore.Options{}); !errors.Is(err, keystore.ErrExists) {
		t.Fatalf("second generate: %v, want ErrExists", err)
	}
	// Still the one key.
	k3, err := keystore.Open(spec, keystore.Options{})
	if err != nil {
		t.Fatalf("open after a refused generate: %v", err)
	}
	defer k3.Close()
	if !pub.Equal(k3.Public()) {
		t.Fatal("a refused generate replaced the key")
	}
}

// Options.Label names the key when the URI has no object=; the PIN may
// come from PACT_PKCS11_PIN.
func TestPKCS11LabelFromOptionsAndPINFromEnv(t *testing.T) {
	tok := softhsmtest.New(t)
	t.Setenv(keystore.PINEnv, tok.PIN)
	spec := pkcs11Spec(t, "pkcs11:token="+tok.Label+"?module-path="+tok.Module)
	if _, err := keystore.Generate(spec, keystore.Options{}); !errors.Is(err, keystore.ErrSpec) {
		t.Fatalf("generate without a label: %v, want ErrSpec", err)
	}
	k, err := keystore.Generate(spec, keystore.Options{Label: "root"})
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	pub := k.Public().(*ecdsa.PublicKey)
	k.Close()
	k, err = keystore.Open(pkcs11Spec(t, tok.URI("root")), keystore.Options{})
	if err != nil {
		t.Fatalf("open by object=: %v", err)
	}
	defer k.Close()
	if !pub.Equal(k.Public()) {
		t.Fatal("another key")
	}
}

// A wrong PIN is refused with an error that says so and never holds the
// PIN; an unknown label is ErrNoKey; an unknown token, a missing module, a
// missing PIN and a PIN file others read say what to do.
func TestPKCS11Refusals(t *testing.T) {
	tok := softhsmtest.New(t)
	k, err := keystore.Generate(pkcs11Spec(t, tok.URI("journal-ca")), keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k.Close()

	const wrongPIN = "98761234"
	wrong := filepath.Join(t.TempDir(), "wrong-pin")
	if err := os.WriteFile(wrong, []byte(wrongPIN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongURI := strings.Replace(tok.URI("journal-ca"), tok.PINFile, wrong, 1)
	_, err = keystore.Open(pkcs11Spec(t, wrongURI), keystore.Options{})
	if !errors.Is(err, keystore.ErrPKCS11) || !strings.Contains(err.Error(), "refused the PIN") {
		t.Errorf("wrong PIN: %v, want ErrPKCS11 saying the PIN was refused", err)
	}
	if err != nil && (strings.Contains(err.Error(), wrongPIN) || strings.Contains(err.Error(), tok.PIN)) {
		t.Errorf("the error holds a PIN: %v", err)
	}

	openErr := func(uri string) error {
		t.Helper()
		k, err := keystore.Open(pkcs11Spec(t, uri), keystore.Options{})
		if err == nil {
			k.Close()
		}
		return err
	}
	if err := openErr(tok.URI("no-such-key")); !errors.Is(err, keystore.ErrNoKey) {
		t.Errorf("unknown label: %v, want ErrNoKey", err)
	}
	for _, tc := range []struct {
		name, uri, says string
		is              error
	}{
		{"unknown token", strings.Replace(tok.URI("journal-ca"), "token=pact", "token=other", 1), "no token labelled", keystore.ErrPKCS11},
		{"missing module", strings.Replace(tok.URI("journal-ca"), tok.Module, "/nonexistent/libpkcs11.so", 1), "module-path=", keystore.ErrPKCS11},
		{"no PIN", "pkcs11:token=pact;object=journal-ca?module-path=" + tok.Module, keystore.PINEnv, keystore.ErrPKCS11},
	} {
		err := openErr(tc.uri)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %v saying %q", tc.name, err, tc.is, tc.says)
		}
	}
	if err := os.Chmod(tok.PINFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := openErr(tok.URI("journal-ca")); !errors.Is(err, keystore.ErrPermission) || !strings.Contains(err.Error(), "chmod o-rwx") {
		t.Errorf("world-readable PIN file: %v, want ErrPermission", err)
	}
	if err != nil && strings.Contains(err.Error(), tok.PIN) {
		t.Errorf("the error holds the PIN: %v", err)
	}
}

// Signatures asked for at once each get a session of the token and all
// verify.
func TestPKCS11SignConcurrently(t *testing.T) {
	tok := softhsmtest.New(t)
	k, err := keystore.Generate(pkcs11Spec(t, tok.URI("journal-ca")), keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	checkSignsConcurrently(t, k)
}
