//go:build !pkcs11

package keystore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/keystore"
)

// The default build (CGO_ENABLED=0) parses a pkcs11: spec, then says how
// to get a binary that can use it.
func TestPKCS11NotBuilt(t *testing.T) {
	spec, err := keystore.Parse("pkcs11:token=pact;object=journal-ca?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/etc/pact/hsm-pin")
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"generate": func() error { _, err := keystore.Generate(spec, keystore.Options{}); return err },
		"open":     func() error { _, err := keystore.Open(spec, keystore.Options{}); return err },
	} {
		if err := f(); !errors.Is(err, keystore.ErrNotBuilt) || !strings.Contains(err.Error(), "make build-pkcs11") {
			t.Errorf("%s: %v, want ErrNotBuilt saying make build-pkcs11", name, err)
		}
	}
}
