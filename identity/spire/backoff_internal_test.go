package spire

import (
	"testing"
	"time"
)

// go-spiffe's retry delay doubles from min to max, each jittered down by
// up to half through the injected jitter (internal/jitter).
func TestBackoffDrawsFromItsJitter(t *testing.T) {
	const ms = time.Millisecond
	longest := func(n time.Duration) time.Duration { return n - 1 }
	b := backoffStrategy{min: 100 * ms, max: 400 * ms, jitter: longest}.NewBackoff()
	for i, want := range []time.Duration{100 * ms, 200 * ms, 400 * ms, 400 * ms} {
		if got := b.Next(); got != want {
			t.Fatalf("delay %d = %v, want %v (the longest draw)", i, got, want)
		}
	}
	b.Reset()
	if got := b.Next(); got != 100*ms {
		t.Fatalf("after Reset, delay = %v, want 100ms", got)
	}
	shortest := backoffStrategy{min: 100 * ms, max: 400 * ms, jitter: func(time.Duration) time.Duration { return 0 }}.NewBackoff()
	if got := shortest.Next(); got != 50*ms {
		t.Fatalf("delay with the shortest draw = %v, want half of min", got)
	}
}
