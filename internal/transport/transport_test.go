package transport

import (
	"crypto/tls"
	"slices"
	"testing"
)

func TestParseKeyExchange(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    KeyExchange
		wantErr bool
	}{
		{"", Classical, false},
		{"x25519", Classical, false},
		{" X25519MLKEM768 ", Hybrid, false},
		{"mlkem", "", true},
		{"p256", "", true},
	} {
		got, err := ParseKeyExchange(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseKeyExchange(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestCurves(t *testing.T) {
	if got := Classical.Curves(); !slices.Equal(got, []tls.CurveID{tls.X25519}) {
		t.Errorf("Classical.Curves() = %v", got)
	}
	if got := Hybrid.Curves(); !slices.Equal(got, []tls.CurveID{tls.X25519MLKEM768, tls.X25519}) {
		t.Errorf("Hybrid.Curves() = %v", got)
	}
}

// A Config holds the parsed value; an unnormalised one must not pass for
// the classical exchange.
func TestValidate(t *testing.T) {
	for _, k := range []KeyExchange{Classical, Hybrid} {
		if err := k.Validate(); err != nil {
			t.Errorf("%q: %v", k, err)
		}
	}
	for _, k := range []KeyExchange{"", " X25519MLKEM768", "X25519", "p256"} {
		if err := k.Validate(); err == nil {
			t.Errorf("%q: accepted", k)
		}
	}
}
