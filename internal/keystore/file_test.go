package keystore_test

import (
	"crypto/ecdsa"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/keystore"
)

// The file backend, the weaker choice: a 0600 PEM key that signs as a CA,
// is found again, is not replaced, and is refused when others can read it.
func TestFileGenerateOpenSign(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal-ca-key.pem")
	for _, s := range []string{"file:" + path, path} {
		spec, err := keystore.Parse(s)
		if err != nil || spec.Backend != keystore.BackendFile || spec.Location != path {
			t.Fatalf("Parse(%q) = %+v, %v", s, spec, err)
		}
	}
	spec, _ := keystore.Parse("file:" + path)
	k, err := keystore.Generate(spec, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkSigner(t, k)
	if k.String() != "file:"+path {
		t.Errorf("String() = %q", k.String())
	}
	k.Close()
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", st, err)
	}
	k2, err := keystore.Open(spec, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !k2.Public().(*ecdsa.PublicKey).Equal(k.Public()) {
		t.Fatal("another key")
	}
	if _, err := keystore.Generate(spec, keystore.Options{}); !errors.Is(err, keystore.ErrExists) {
		t.Fatalf("second generate: %v, want ErrExists", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := keystore.Open(spec, keystore.Options{}); !errors.Is(err, keystore.ErrPermission) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("open of a 0644 key: %v, want ErrPermission", err)
	}
	missing, _ := keystore.Parse("file:" + path + ".missing")
	if _, err := keystore.Open(missing, keystore.Options{}); !errors.Is(err, keystore.ErrNoKey) {
		t.Fatalf("open of a missing key: %v, want ErrNoKey", err)
	}
}
