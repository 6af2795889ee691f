package journal

import (
	"crypto/x509"
	"testing"
	"time"
)

// TestBundleSequenceRisesThroughARollover: the spiffe_sequence rises at
// each step of a root rollover (a newer root added, then the older one
// removed), so a federated domain never keeps the older bundle as newer.
func TestBundleSequenceRisesThroughARollover(t *testing.T) {
	at := func(s string) *x509.Certificate {
		nb, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &x509.Certificate{NotBefore: nb}
	}
	r1, r2 := at("2025-01-01T00:00:00Z"), at("2025-01-01T00:00:01Z")
	steps := [][]*x509.Certificate{{r1}, {r1, r2}, {r2}}
	var prev uint64
	for i, roots := range steps {
		s := bundleSequence(roots)
		if s <= prev {
			t.Fatalf("step %d: sequence %d after %d: want it to rise", i, s, prev)
		}
		prev = s
	}
	if a, b := bundleSequence([]*x509.Certificate{r1, r2}), bundleSequence([]*x509.Certificate{r2, r1}); a != b {
		t.Fatalf("order of roots changed the sequence: %d vs %d", a, b)
	}
}
