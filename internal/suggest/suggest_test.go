package suggest

import (
	"slices"
	"strings"
	"testing"
)

func TestClosest(t *testing.T) {
	names := []string{"admin", "alice", "alicia", "bob", "ops-ml", "carol"}
	for _, tt := range []struct {
		word string
		want []string
	}{
		{"alicee", []string{"alice"}},          // one letter too many
		{"Alice", []string{"alice"}},           // case ignored
		{"alic", []string{"alice"}},            // one letter short
		{"alica", []string{"alice", "alicia"}}, // equally near: both
		{"bobb", []string{"bob"}},
		{"ops-m1", []string{"ops-ml"}},
		{"nobody", nil}, // nothing near: no guess
		{"", nil},
		{"zz", nil},
		{strings.Repeat("a", 200), nil},
	} {
		if got := Closest(tt.word, names); !slices.Equal(got, tt.want) {
			t.Errorf("Closest(%q) = %v, want %v", tt.word, got, tt.want)
		}
	}
	if got := Closest("alice", nil); got != nil {
		t.Errorf("no candidates: %v", got)
	}
}

func TestDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"kitten", "sitting", 3}, {"alice", "alcie", 2}, {"flaw", "lawn", 2}} {
		if d := Distance(tt.a, tt.b); d != tt.d || Distance(tt.b, tt.a) != tt.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.a, tt.b, d, tt.d)
		}
	}
}
