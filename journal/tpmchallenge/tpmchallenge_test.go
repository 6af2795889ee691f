package tpmchallenge

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func newStore(t *testing.T, max int) *Store {
	t.Helper()
	s, err := New(Config{TTL: 30 * time.Second, MaxPending: max, MaxPerNode: max})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSingleUseAndTTL(t *testing.T) {
	p := Pending{NodeID: "n1", EKHash: "ek", AKName: []byte("ak"), SPKI: "spki", Secret: []byte("secret")}
	tests := []struct {
		name    string
		answer  time.Duration // after Put
		wantErr error
	}{
		{"answered at once", 0, nil},
		{"answered just in time", 30 * time.Second, nil},
		{"answered late", 30*time.Second + time.Millisecond, ErrExpired},
		{"answered long after (forgotten)", 61 * time.Second, ErrUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, 10)
			pp := p
			pp.Secret = append([]byte(nil), p.Secret...)
			id, exp, err := s.Put(t0, pp)
			if err != nil {
				t.Fatal(err)
			}
			if !exp.Equal(t0.Add(30 * time.Second)) {
				t.Errorf("expires %v", exp)
			}
			// A later Put prunes what is past its tombstone.
			if _, _, err := s.Put(t0.Add(tt.answer), Pending{}); err != nil {
				t.Fatal(err)
			}
			got, err := s.Take(t0.Add(tt.answer), id)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Take = %v, want %v", err, tt.wantErr)
			}
			if err == nil && (got.NodeID != "n1" || string(got.Secret) != "secret" || string(got.AKName) != "ak") {
				t.Errorf("took %+v", got)
			}
			// Single use, whatever the first outcome was.
			if _, err := s.Take(t0.Add(tt.answer), id); !errors.Is(err, ErrUnknown) {
				t.Errorf("second Take = %v, want ErrUnknown", err)
			}
		})
	}
}

func TestIDsAreFreshAndSecretsCleared(t *testing.T) {
	s := newStore(t, 100)
	seen := map[string]bool{}
	for range 50 {
		id, _, err := s.Put(t0, Pending{})
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] || len(id) != 32 {
			t.Fatalf("id %q repeated or of the wrong length", id)
		}
		seen[id] = true
	}
	secret := []byte("secret")
	id, _, _ := s.Put(t0, Pending{Secret: secret})
	if _, err := s.Take(t0.Add(time.Hour), id); !errors.Is(err, ErrExpired) {
		t.Fatal(err)
	}
	if string(secret) == "secret" {
		t.Error("an expired challenge's secret was not cleared")
	}
	if got := (Pending{NodeID: "n", Secret: []byte("topsecret")}).String(); got == "" || strings.Contains(got, "topsecret") {
		t.Errorf("String() = %q", got)
	}
}

func TestBounded(t *testing.T) {
	s := newStore(t, 3)
	for i := range 3 {
		if _, _, err := s.Put(t0.Add(time.Duration(i)*time.Second), Pending{NodeID: fmt.Sprint("n", i)}); err != nil {
			t.Fatal(err)
		}
	}
	_, oldest, err := s.Put(t0.Add(5*time.Second), Pending{NodeID: "n9"})
	if !errors.Is(err, ErrFull) {
		t.Fatalf("fourth Put = %v, want ErrFull", err)
	}
	if !oldest.Equal(t0.Add(30 * time.Second)) {
		t.Errorf("retry hint %v, want the oldest's expiry", oldest)
	}
	// Once the oldest expired, its room is reused (tombstones go first).
	if _, _, err := s.Put(t0.Add(31*time.Second), Pending{NodeID: "n9"}); err != nil {
		t.Fatalf("Put after an expiry: %v", err)
	}
	if s.Len() != 3 {
		t.Errorf("Len %d, want 3", s.Len())
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	err := Config{}.Validate()
	if err == nil || len(err.(interface{ Unwrap() []error }).Unwrap()) != 3 {
		t.Errorf("zero config: %v, want both problems", err)
	}
}

// One node's identifiers cannot fill the store: its fifth challenge evicts
// its first, and other nodes keep theirs.
func TestPerNodeBound(t *testing.T) {
	s, err := New(Config{TTL: 30 * time.Second, MaxPending: 100, MaxPerNode: 4})
	if err != nil {
		t.Fatal(err)
	}
	other, _, _ := s.Put(t0, Pending{NodeID: "n2"})
	var ids []string
	for i := range 10 {
		id, _, err := s.Put(t0.Add(time.Duration(i)*time.Millisecond), Pending{NodeID: "n1"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if s.Len() != 5 {
		t.Errorf("Len %d, want n1's newest 4 and n2's", s.Len())
	}
	now := t0.Add(time.Second)
	if _, err := s.Take(now, ids[5]); !errors.Is(err, ErrUnknown) {
		t.Errorf("n1's sixth challenge: %v, want evicted", err)
	}
	if _, err := s.Take(now, ids[9]); err != nil {
		t.Errorf("n1's newest: %v", err)
	}
	if _, err := s.Take(now, other); err != nil {
		t.Errorf("n2's challenge: %v", err)
	}
}
