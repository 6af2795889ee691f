package keystore

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// fuzzPIN is a PIN no error message may ever repeat.
const fuzzPIN = "Qx7-fuzz-PIN-4921"

// FuzzParse feeds Parse (and, for pkcs11: specs, the RFC 7512 parser)
// what an operator or a unit file could put in --journal-ca-key. Parse
// must never panic; every refusal wraps ErrSpec; an accepted spec gives
// itself back through String; an accepted pkcs11: URI names a token and an
// absolute module path and holds no NUL, and rebuilt from its parts it
// parses to the same parts; a PIN given as pin-value is refused without
// being repeated, wherever it is put.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"file:/etc/pact/journal-ca-key.pem",
		"/etc/pact/journal-ca-key.pem",
		"tpm:/var/lib/pact/journal-ca.tpmkey",
		"pkcs11:token=pact;object=journal-ca?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/etc/pact/hsm-pin",
		"pkcs11:object=CA%20key;id=%01%ff;type=private;token=site%3Bhsm?pin-source=file:///run/pin&module-path=/m.so",
		"pkcs11:token=pact;token=x?module-path=/m.so",
		"pkcs11:token=pact?module-path=/m.so&pin-value=1234",
		"pkcs11:token=a;object=%zz?module-path=/m.so",
		"pkcs11:",
		"tpm:",
		"file:",
		"",
		"\x00",
		"pkcs11:?&;==",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("Parse(%q): %v wraps no ErrSpec", s, err)
			}
		} else {
			again, err := Parse(spec.String())
			if err != nil || again != spec {
				t.Fatalf("Parse(%q) = %+v, but its String %q parses to %+v, %v", s, spec, spec.String(), again, err)
			}
			if spec.Backend == BackendPKCS11 {
				checkAcceptedURI(t, spec.Location)
			}
		}
		if body, ok := strings.CutPrefix(s, "pkcs11:"); ok {
			if _, err := parsePKCS11URI(body); err == nil {
				checkAcceptedURI(t, body)
			}
		}
		// A PIN as pin-value, in the query or the path: always refused, never
		// repeated.
		for _, withPIN := range []string{
			s + "?pin-value=" + fuzzPIN,
			s + "&pin-value=" + fuzzPIN,
			s + ";pin-value=" + fuzzPIN,
			"pkcs11:pin-value=" + fuzzPIN + ";" + strings.TrimPrefix(s, "pkcs11:"),
		} {
			if !strings.HasPrefix(withPIN, "pkcs11:") {
				continue
			}
			_, err := Parse(withPIN)
			if err == nil {
				t.Fatalf("Parse(%q) accepted a pin-value", withPIN)
			}
			if strings.Contains(err.Error(), fuzzPIN) {
				t.Fatalf("Parse(%q): the error repeats the PIN: %v", withPIN, err)
			}
			_, err = parsePKCS11URI(strings.TrimPrefix(withPIN, "pkcs11:"))
			if err != nil && strings.Contains(err.Error(), fuzzPIN) {
				t.Fatalf("parsePKCS11URI(%q): the error repeats the PIN: %v", withPIN, err)
			}
		}
	})
}

// checkAcceptedURI holds what an accepted URI must be, and rebuilds it
// from its parts: it must parse to the same parts.
func checkAcceptedURI(t *testing.T, body string) {
	t.Helper()
	u, err := parsePKCS11URI(body)
	if err != nil {
		t.Fatalf("parsePKCS11URI(%q) refuses what Parse accepted: %v", body, err)
	}
	if u.Token == "" || !strings.HasPrefix(u.ModulePath, "/") {
		t.Fatalf("parsePKCS11URI(%q) = %+v: no token or no absolute module path", body, u)
	}
	if u.PINFile != "" && !strings.HasPrefix(u.PINFile, "/") {
		t.Fatalf("parsePKCS11URI(%q): pin-source %q is not absolute", body, u.PINFile)
	}
	for _, v := range []string{u.Token, u.Object, u.ModulePath, u.PINFile} {
		if strings.ContainsRune(v, 0) {
			t.Fatalf("parsePKCS11URI(%q) = %+v: holds a NUL", body, u)
		}
	}
	rebuilt := "token=" + pctEncode(u.Token)
	if u.Object != "" {
		rebuilt += ";object=" + pctEncode(u.Object)
	}
	if len(u.ID) > 0 {
		rebuilt += ";id=" + pctEncode(string(u.ID))
	}
	rebuilt += "?module-path=" + pctEncode(u.ModulePath)
	if u.PINFile != "" {
		rebuilt += "&pin-source=file:" + pctEncode(u.PINFile)
	}
	v, err := parsePKCS11URI(rebuilt)
	if err != nil {
		t.Fatalf("%q rebuilt as %q: %v", body, rebuilt, err)
	}
	if fmt.Sprintf("%+v", v) != fmt.Sprintf("%+v", u) {
		t.Fatalf("%q parses to %+v, rebuilt as %q to %+v", body, u, rebuilt, v)
	}
}

// pctEncode percent-encodes every byte but RFC 3986's unreserved ones and
// "/", written without the code under test.
func pctEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~/", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if _, err := url.PathUnescape(b.String()); err != nil {
		panic(err)
	}
	return b.String()
}
