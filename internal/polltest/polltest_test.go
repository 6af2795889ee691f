package polltest_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pact-hpc/pact/internal/polltest"
)

// fatalT records a Fatalf instead of ending the test; Until returns after
// it (a real testing.T would stop the goroutine).
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

// The tests run in a synctest bubble: its clock moves only when every
// goroutine in it is blocked, so how long Until waited is exact.

// Until looks at once and then once an interval: the third look, two
// intervals in, is the one that returns.
func TestUntilReturnsOnceCondHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		ft := &fatalT{TB: t}
		start := time.Now()
		polltest.Until(ft, time.Minute, time.Millisecond, func() bool { return n.Add(1) == 3 }, "never")
		if ft.msg != "" || n.Load() != 3 {
			t.Fatalf("calls %d, failure %q", n.Load(), ft.msg)
		}
		if waited := time.Since(start); waited != 2*time.Millisecond {
			t.Fatalf("returned after %v, want 2ms (two intervals)", waited)
		}
	})
}

// Until fails at the timeout, not before, having looked once an interval
// and once more at the deadline.
func TestUntilFailsWithTheMessageAfterTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		ft := &fatalT{TB: t}
		start := time.Now()
		polltest.Until(ft, 20*time.Millisecond, time.Millisecond, func() bool { n.Add(1); return false }, "waiting for %s", "x")
		if ft.msg != "waiting for x" {
			t.Fatalf("failure %q, want %q", ft.msg, "waiting for x")
		}
		if waited := time.Since(start); waited != 20*time.Millisecond {
			t.Fatalf("failed after %v, want 20ms (the timeout)", waited)
		}
		// At once, at 1..19 ms, and at the deadline; the 20 ms tick and
		// the deadline are ready together, so one more look may come first.
		if got := n.Load(); got != 21 && got != 22 {
			t.Fatalf("cond called %d times, want 21 or 22", got)
		}
	})
}

// A wake signal makes UntilWoken look again before its interval (an
// hour) is up: at once, with no time passing.
func TestUntilWokenChecksOnEveryWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wake, looked := make(chan struct{}), make(chan struct{})
		var ready atomic.Bool
		go func() {
			<-looked // UntilWoken has seen the condition false once
			ready.Store(true)
			wake <- struct{}{}
		}()
		first := true
		cond := func() bool {
			if first {
				first = false
				close(looked)
				return false
			}
			return ready.Load()
		}
		ft := &fatalT{TB: t}
		start := time.Now()
		polltest.UntilWoken(ft, wake, 10*time.Second, time.Hour, cond, "not woken")
		if ft.msg != "" {
			t.Fatal(ft.msg)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("returned after %v, want at once on the wake", waited)
		}
	})
}

// Last shows in the failure message what cond saw last.
func TestLastShowsWhatCondSawLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var last polltest.Last
		n := 0
		ft := &fatalT{TB: t}
		polltest.Until(ft, 3*time.Millisecond, time.Millisecond, func() bool {
			n++
			last.Err = fmt.Errorf("try %d", n)
			return false
		}, "gave up: %v", &last)
		if want := fmt.Sprintf("gave up: try %d", n); ft.msg != want {
			t.Fatalf("failure %q, want %q", ft.msg, want)
		}
	})
}

// Within reports instead of failing: false at the timeout, true once cond
// holds.
func TestWithinReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if polltest.Within(5*time.Millisecond, time.Millisecond, func() bool { return false }) {
			t.Fatal("a condition never true reported true")
		}
		if waited := time.Since(start); waited != 5*time.Millisecond {
			t.Fatalf("gave up after %v, want 5ms", waited)
		}
		var n atomic.Int32
		if !polltest.Within(time.Minute, time.Millisecond, func() bool { return n.Add(1) == 2 }) {
			t.Fatal("a condition that came true reported false")
		}
	})
}
