package keystore

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// pkcs11URI is what pact takes from an RFC 7512 PKCS#11 URI. It is parsed
// in every build (a spec is checked when a flag is read, whether or not
// the binary can use it); only builds with -tags pkcs11 open the token.
type pkcs11URI struct {
	// Token is the token's label (path attribute token=): required.
	Token string
	// Object is the key's label (CKA_LABEL, path attribute object=);
	// Options.Label stands in when the URI names none.
	Object string
	// ID is the key's CKA_ID (path attribute id=, percent-encoded bytes):
	// optional.
	ID []byte
	// ModulePath is the PKCS#11 library (query attribute module-path=):
	// required.
	ModulePath string
	// PINFile is where the user PIN is read from (query attribute
	// pin-source=file:PATH); empty means the PACT_PKCS11_PIN variable.
	PINFile string
}

// maxPKCS11URI bounds the URI: a real one is a few hundred bytes.
const maxPKCS11URI = 4096

// parsePKCS11URI parses the body of a pkcs11: URI (after "pkcs11:"):
// path attributes separated by ";", then optionally "?" and query
// attributes separated by "&"; values percent-encoded (RFC 7512 section
// 2.3). Every attribute pact does not use is refused rather than ignored:
// an ignored attribute meant to narrow the choice of token or key would
// let pact pick another one. Its errors never echo a PIN: pin-value is
// refused by name, without its value.
func parsePKCS11URI(body string) (pkcs11URI, error) {
	var u pkcs11URI
	if body == "" {
		return u, fmt.Errorf("%w: pkcs11: needs a URI, as in %s", ErrSpec, pkcs11Example)
	}
	if len(body) > maxPKCS11URI {
		return u, fmt.Errorf("%w: pkcs11: URI of %d bytes (at most %d)", ErrSpec, len(body), maxPKCS11URI)
	}
	path, query, _ := strings.Cut(body, "?")
	seen := map[string]bool{}
	attrs := func(part, sep, where string) ([][2]string, error) {
		var out [][2]string
		if part == "" {
			return nil, nil
		}
		for i, a := range strings.Split(part, sep) {
			name, raw, ok := strings.Cut(a, "=")
			if !ok || name == "" {
				// Not echoed: a PIN typed in the wrong place would be.
				return nil, fmt.Errorf("%w: pkcs11: %s attribute %d is not NAME=VALUE (as in %s)", ErrSpec, where, i+1, pkcs11Example)
			}
			if strings.EqualFold(name, "pin-value") {
				return nil, fmt.Errorf("%w: pkcs11: pin-value is not accepted (the URI is printed); give pin-source=file:PATH or set PACT_PKCS11_PIN", ErrSpec)
			}
			if seen[name] {
				return nil, fmt.Errorf("%w: pkcs11: %s= given twice", ErrSpec, clip(name))
			}
			seen[name] = true
			v, err := url.PathUnescape(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: pkcs11: %s=: bad percent-encoding", ErrSpec, clip(name))
			}
			if v == "" {
				return nil, fmt.Errorf("%w: pkcs11: %s= is empty", ErrSpec, clip(name))
			}
			out = append(out, [2]string{name, v})
		}
		return out, nil
	}
	pathAttrs, err := attrs(path, ";", "path")
	if err != nil {
		return pkcs11URI{}, err
	}
	queryAttrs, err := attrs(query, "&", "query")
	if err != nil {
		return pkcs11URI{}, err
	}
	for _, a := range pathAttrs {
		name, v := a[0], a[1]
		switch name {
		case "token":
			u.Token = v
		case "object":
			u.Object = v
		case "id":
			u.ID = []byte(v)
		case "type":
			// p11tool prints type=private in a key's URI: the only kind
			// pact signs with.
			if v != "private" {
				return pkcs11URI{}, fmt.Errorf("%w: pkcs11: type= names another kind of object: pact signs with a private key (type=private, or leave type out)", ErrSpec)
			}
		default:
			return pkcs11URI{}, fmt.Errorf("%w: pkcs11: path attribute %s= is not used by pact: select the token by token= and the key by object= (and id=), nothing else", ErrSpec, clip(name))
		}
	}
	for _, a := range queryAttrs {
		name, v := a[0], a[1]
		switch name {
		case "module-path":
			u.ModulePath = v
		case "pin-source":
			p, ok := strings.CutPrefix(v, "file:")
			if ok && strings.HasPrefix(p, "///") {
				p = p[2:] // file:///PATH: an empty authority
			}
			if !filepath.IsAbs(p) {
				return pkcs11URI{}, fmt.Errorf("%w: pkcs11: pin-source= must be file:/ABSOLUTE/PATH of a file holding the PIN", ErrSpec)
			}
			// Leading slashes beyond one name the same file; kept, a
			// path of "///" would read as file:/// (an empty authority)
			// when the URI is written again, and name another.
			u.PINFile = "/" + strings.TrimLeft(p, "/")
		default:
			return pkcs11URI{}, fmt.Errorf("%w: pkcs11: query attribute %s= is not used by pact: give module-path= and pin-source= only", ErrSpec, clip(name))
		}
	}
	if u.Token == "" {
		return pkcs11URI{}, fmt.Errorf("%w: pkcs11: name the token with token=LABEL, as in %s", ErrSpec, pkcs11Example)
	}
	if u.ModulePath == "" {
		return pkcs11URI{}, fmt.Errorf("%w: pkcs11: name the PKCS#11 library with ?module-path=/PATH/TO/MODULE.so, as in %s", ErrSpec, pkcs11Example)
	}
	if !filepath.IsAbs(u.ModulePath) {
		return pkcs11URI{}, fmt.Errorf("%w: pkcs11: module-path= must be an absolute path (the library is loaded from it)", ErrSpec)
	}
	for name, v := range map[string]string{"token": u.Token, "object": u.Object, "module-path": u.ModulePath, "pin-source": u.PINFile} {
		if strings.ContainsRune(v, 0) {
			return pkcs11URI{}, fmt.Errorf("%w: pkcs11: %s= holds a NUL byte", ErrSpec, name)
		}
	}
	return u, nil
}

const pkcs11Example = "pkcs11:token=pact;object=journal-ca?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/etc/pact/hsm-pin"

// clip bounds what an error repeats of its input.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
