package softhsmtest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/softhsmtest"
)

// New makes a token that SoftHSM2's own tool finds, with the label, and a
// PIN file only its owner reads.
func TestNewMakesAToken(t *testing.T) {
	tok := softhsmtest.New(t)
	util, _ := softhsmtest.Require(t)
	out, err := exec.Command(util, "--show-slots").CombinedOutput()
	if err != nil {
		t.Fatalf("softhsm2-util --show-slots: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Label:            "+tok.Label) {
		t.Fatalf("no token labelled %q:\n%s", tok.Label, out)
	}
	st, err := os.Stat(tok.PINFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("PIN file mode %o", st.Mode().Perm())
	}
	if u := tok.URI("k"); !strings.HasPrefix(u, "pkcs11:token=pact;object=k?module-path=/") {
		t.Errorf("URI %q", u)
	}
}
