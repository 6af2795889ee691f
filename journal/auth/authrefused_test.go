package auth

import (
	"fmt"
	"testing"
	"time"
)

// One warning per key and interval, with the count held back since the
// last; the memory stays bounded when the keys are many.
func TestAuthRefusalsNote(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var r authRefusals
	if warn, n := r.note("k", t0); !warn || n != 0 {
		t.Fatalf("first refusal: warn %v, suppressed %d; want true, 0", warn, n)
	}
	for i := range 3 {
		if warn, _ := r.note("k", t0.Add(time.Duration(i+1)*time.Second)); warn {
			t.Fatalf("repeat %d within the interval warned", i)
		}
	}
	if warn, _ := r.note("other", t0.Add(time.Second)); !warn {
		t.Fatal("another key within the interval did not warn")
	}
	if warn, n := r.note("k", t0.Add(authRefusedLogEvery)); !warn || n != 3 {
		t.Fatalf("after the interval: warn %v, suppressed %d; want true, 3", warn, n)
	}
	// A clock that stepped back does not silence a key for the step.
	if warn, _ := r.note("k", t0.Add(-time.Hour)); !warn {
		t.Fatal("a clock stepped back silenced the key")
	}

	var flood authRefusals
	for i := range authRefusedKeys {
		flood.note(fmt.Sprint(i), t0)
	}
	if warn, _ := flood.note("one more", t0); warn {
		t.Fatal("a new key warned with the memory full of fresh keys")
	}
	if warn, _ := flood.note("one more", t0.Add(authRefusedLogEvery)); !warn {
		t.Fatal("a new key did not warn once the old keys aged out")
	}
	if len(flood.seen) > authRefusedKeys {
		t.Fatalf("%d keys remembered, want at most %d", len(flood.seen), authRefusedKeys)
	}
}
