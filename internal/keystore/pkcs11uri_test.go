package keystore

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

const softhsm = "module-path=/usr/lib/softhsm/libsofthsm2.so"

func TestParsePKCS11URI(t *testing.T) {
	for _, tc := range []struct {
		body string
		want pkcs11URI
	}{
		{"token=pact;object=journal-ca?" + softhsm + "&pin-source=file:/etc/pact/hsm-pin",
			pkcs11URI{Token: "pact", Object: "journal-ca", ModulePath: "/usr/lib/softhsm/libsofthsm2.so", PINFile: "/etc/pact/hsm-pin"}},
		// No pin-source: PACT_PKCS11_PIN.
		{"token=pact;object=journal-ca?" + softhsm,
			pkcs11URI{Token: "pact", Object: "journal-ca", ModulePath: "/usr/lib/softhsm/libsofthsm2.so"}},
		// Percent-encoding, an id of raw bytes, type=private, attribute
		// order free, file:// and a bare absolute path as pin-source, "+"
		// is not a space.
		{"object=CA%20key;id=%01%ff;type=private;token=site%3Bhsm+1?pin-source=file:///run/pin&" + softhsm,
			pkcs11URI{Token: "site;hsm+1", Object: "CA key", ID: []byte{1, 0xff}, ModulePath: "/usr/lib/softhsm/libsofthsm2.so", PINFile: "/run/pin"}},
		{"token=pact?module-path=/opt/hsm/lib.so&pin-source=/etc/pact/pin",
			pkcs11URI{Token: "pact", ModulePath: "/opt/hsm/lib.so", PINFile: "/etc/pact/pin"}},
	} {
		got, err := parsePKCS11URI(tc.body)
		if err != nil {
			t.Errorf("%s: %v", tc.body, err)
			continue
		}
		if got.Token != tc.want.Token || got.Object != tc.want.Object || !bytes.Equal(got.ID, tc.want.ID) ||
			got.ModulePath != tc.want.ModulePath || got.PINFile != tc.want.PINFile {
			t.Errorf("%s: got %+v, want %+v", tc.body, got, tc.want)
		}
		if _, err := Parse("pkcs11:" + tc.body); err != nil {
			t.Errorf("Parse(pkcs11:%s): %v", tc.body, err)
		}
	}
}

func TestParsePKCS11URIRefusals(t *testing.T) {
	for _, tc := range []struct{ body, says string }{
		{"", "needs a URI"},
		{"object=k?" + softhsm, "token=LABEL"},
		{"token=pact;object=k", "module-path"},
		{"token=pact?module-path=lib.so", "absolute"},
		{"token=pact;object=k?module-name=softhsm2", "module-name= is not used"},
		{"token=pact;serial=1234;object=k?" + softhsm, "serial= is not used"},
		{"token=pact;type=public?" + softhsm, "type=private"},
		{"token=pact;type=x&pin-value=s3cr3t-pin?" + softhsm, "type=private"},
		{"token=pact;token=other?" + softhsm, "token= given twice"},
		{"token=pact;object=?" + softhsm, "object= is empty"},
		{"token=pact;object=%zz?" + softhsm, "percent-encoding"},
		{"token=pact;object?" + softhsm, "not NAME=VALUE"},
		{"token=pa%00ct?" + softhsm, "NUL"},
		{"token=pact?" + softhsm + "&pin-source=|/bin/get-pin", "file:/ABSOLUTE/PATH"},
		{"token=pact?" + softhsm + "&pin-source=file:pin", "file:/ABSOLUTE/PATH"},
		{"token=pact?" + softhsm + "&PIN-VALUE=s3cr3t-pin", "pin-value is not accepted"},
		{"token=pact;" + strings.Repeat("x", maxPKCS11URI), "at most"},
	} {
		_, err := parsePKCS11URI(tc.body)
		if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%.60s: %v, want ErrSpec saying %q", tc.body, err, tc.says)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t-pin") {
			t.Errorf("%.60s: the error repeats the PIN: %v", tc.body, err)
		}
		if _, err := Parse("pkcs11:" + tc.body); !errors.Is(err, ErrSpec) {
			t.Errorf("Parse(pkcs11:%.60s) = %v, want ErrSpec", tc.body, err)
		}
	}
}
