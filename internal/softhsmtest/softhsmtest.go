// Package softhsmtest makes a real PKCS#11 token for tests: a SoftHSM2
// token (Debian's softhsm2 package) in a temporary directory, initialised
// with softhsm2-util. Tests that need it skip when SoftHSM2 is not
// installed, except under CI=true, where they fail: CI installs it
// (.ci/run), and a silently skipped token test would prove nothing.
package softhsmtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Token is an initialised SoftHSM2 token.
type Token struct {
	// Module is the PKCS#11 library (module-path=).
	Module string
	// Label is the token's label (token=).
	Label string
	// PIN and SOPIN are the user's and the security officer's PINs.
	PIN, SOPIN string
	// PINFile holds PIN, mode 0600 (pin-source=file:PINFile).
	PINFile string
	// Dir holds the configuration and the token's files.
	Dir string
}

// Modules are where Debian and others install the SoftHSM2 library.
var Modules = []string{
	"/usr/lib/softhsm/libsofthsm2.so",
	"/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib64/pkcs11/libsofthsm2.so",
	"/usr/local/lib/softhsm/libsofthsm2.so",
}

// Require fails the test under CI=true and skips it otherwise when
// SoftHSM2 is not installed. It returns softhsm2-util's path and the
// module's.
func Require(t testing.TB) (util, module string) {
	t.Helper()
	missing := func(what string, err error) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("SoftHSM2 is not installed (apt-get install softhsm2); CI must run the PKCS#11 tests: %s: %v", what, err)
		}
		t.Skipf("SoftHSM2 is not installed (apt-get install softhsm2): %s: %v", what, err)
	}
	util, err := exec.LookPath("softhsm2-util")
	if err != nil {
		missing("softhsm2-util", err)
	}
	for _, m := range Modules {
		if _, err := os.Stat(m); err == nil {
			return util, m
		}
	}
	missing("libsofthsm2.so", os.ErrNotExist)
	return "", ""
}

// New makes a fresh token labelled "pact" (user PIN 1234, SO PIN 5678)
// in a temporary directory and points SOFTHSM2_CONF at it for the rest of
// the test (t.Setenv: such tests cannot run in parallel). SoftHSM2 reads
// SOFTHSM2_CONF when its library is initialised, so a test must close every
// PKCS#11 session it opened before the next test makes its token.
func New(t testing.TB) *Token {
	t.Helper()
	util, module := Require(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.Mkdir(tokens, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "softhsm2.conf")
	body := "directories.tokendir = " + tokens + "\nobjectstore.backend = file\nlog.level = ERROR\nslots.removable = false\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOFTHSM2_CONF", conf)
	tok := &Token{Module: module, Label: "pact", PIN: "1234", SOPIN: "5678", Dir: dir, PINFile: filepath.Join(dir, "pin")}
	out, err := exec.Command(util, "--init-token", "--free", "--label", tok.Label, "--pin", tok.PIN, "--so-pin", tok.SOPIN).CombinedOutput()
	if err != nil {
		t.Fatalf("softhsm2-util --init-token: %v\n%s", err, out)
	}
	if err := os.WriteFile(tok.PINFile, []byte(tok.PIN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tok
}

// URI is a pkcs11: key location for the key labelled object in this
// token, its PIN read from PINFile.
func (tok *Token) URI(object string) string {
	return "pkcs11:token=" + tok.Label + ";object=" + object + "?module-path=" + tok.Module + "&pin-source=file:" + tok.PINFile
}
