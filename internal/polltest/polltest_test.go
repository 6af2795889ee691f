package polltest_test

import (
	"fmt"
	"sync/atomic"
	"testing"
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

func TestUntilReturnsOnceCondHolds(t *testing.T) {
	var n atomic.Int32
	ft := &fatalT{TB: t}
	polltest.Until(ft, time.Minute, time.Millisecond, func() bool { return n.Add(1) == 3 }, "never")
	if ft.msg != "" || n.Load() != 3 {
		t.Fatalf("calls %d, failure %q", n.Load(), ft.msg)
	}
}

func TestUntilFailsWithTheMessageAfterTheTimeout(t *testing.T) {
	ft := &fatalT{TB: t}
	polltest.Until(ft, 20*time.Millisecond, time.Millisecond, func() bool { return false }, "waiting for %s", "x")
	if ft.msg != "waiting for x" {
		t.Fatalf("failure %q, want %q", ft.msg, "waiting for x")
	}
}

// A wake signal makes UntilWoken look again before its interval (an
// hour) is up.
func TestUntilWokenChecksOnEveryWake(t *testing.T) {
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
	polltest.UntilWoken(ft, wake, 10*time.Second, time.Hour, cond, "not woken")
	if ft.msg != "" {
		t.Fatal(ft.msg)
	}
}
