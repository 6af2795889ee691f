package auth

import (
	"crypto/x509"
	"testing"
	"time"
)

// A remembered verdict holds for its bundle version and within the span
// every certificate of the chain is valid, and for nothing else.
func TestChainVerdict(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: t0, NotAfter: t0.Add(72 * time.Hour)}
	inter := &x509.Certificate{NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(48 * time.Hour)}

	var none *chainVerdict
	none.remember(1, []*x509.Certificate{leaf}) // the Raft port has none: a no-op
	if none.valid(1, t0) {
		t.Fatal("a nil verdict is valid")
	}
	v := &chainVerdict{}
	if v.valid(1, t0.Add(time.Hour)) {
		t.Fatal("valid before any chain verified")
	}
	v.remember(7, []*x509.Certificate{leaf, inter})
	for _, tt := range []struct {
		name    string
		version uint64
		at      time.Time
		want    bool
	}{
		{"same version, within both", 7, t0.Add(time.Hour), true},
		{"from the leaf's not_before", 7, t0, true},
		{"before the leaf's not_before (the clock stepped back)", 7, t0.Add(-time.Second), false},
		{"once the intermediate expired, the leaf still valid", 7, t0.Add(48 * time.Hour), false},
		{"another bundle version (an intermediate retired)", 8, t0.Add(time.Hour), false},
	} {
		if got := v.valid(tt.version, tt.at); got != tt.want {
			t.Errorf("%s: valid = %v, want %v", tt.name, got, tt.want)
		}
	}
}
