package settings

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseFile feeds arbitrary bytes to the configuration-file parser, as
// an operator's typo or a corrupted file would: it must never panic, every
// problem must be an *Error of the file with a known sentinel, and every
// value it returns must belong to a setting that may be in the file.
func FuzzParseFile(f *testing.F) {
	for _, seed := range []string{
		"node-id: j1\nmax-conns: 10\ncert-lifetime: 72h\nmac: [aa, bb]\ndev: true\n",
		"mac:\n  - aa\n  - bb\n",
		"bogus: 1\nnode-id: [a]\nmac: {a: b}\n",
		"node-id: a\nnode-id: b\n",
		"a: &x 1\nnode-id: *x\nmac: [*x, *x]\n",
		"--- \n- 1\n",
		"node-id: \"\\x00\"\n",
		"key-exchange: x25519mlkem768\nconfig: x\n",
		"\t",
		"{",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, s := newTarget()
		values, errs := s.ParseFile("fuzz.yaml", data)
		for _, err := range errs {
			var e *Error
			if !errors.As(err, &e) || e.Source != FromFile || e.File != "fuzz.yaml" || e.Line < 0 {
				t.Fatalf("problem %v is not a file *Error", err)
			}
			if !errors.Is(e, ErrFile) && !errors.Is(e, ErrUnknownKey) && !errors.Is(e, ErrBadValue) {
				t.Fatalf("problem %v wraps no sentinel", err)
			}
			if !strings.HasPrefix(e.Error(), "fuzz.yaml") {
				t.Fatalf("problem %q does not name the file", e.Error())
			}
		}
		for name, v := range values {
			st, ok := s.Lookup(name)
			if !ok || !st.file || v.Line < 1 || len(v.Raw) == 0 || (len(v.Raw) > 1 && !st.list) {
				t.Fatalf("value %q %+v is not one of a file setting", name, v)
			}
			// Applying a parsed value never panics either.
			_ = st.apply(v.Raw)
		}
	})
}
