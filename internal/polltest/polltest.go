// Package polltest waits, bounded, for a condition that another goroutine
// or process makes true: a journal that elects a leader, an agent that
// reconnects, a log line that appears. It is the one poll loop the tests
// share.
//
// A poll is the last resort (STYLE.md: "a poll loop with a deadline is a
// last resort and never a verdict"): where the code under test runs on an
// injected clock, advance a fakeclock instead. The timeout is a hang guard,
// not a measure: a test must not depend on how long the wait took.
package polltest

import (
	"fmt"
	"testing"
	"time"
)

// Until calls cond at once and then every interval until it returns true,
// and fails t with fmt.Sprintf(format, args...) if it has not done so once
// timeout has passed.
func Until(t testing.TB, timeout, interval time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	UntilWoken(t, nil, timeout, interval, cond, format, args...)
}

// UntilWoken is Until that also calls cond again on every receive from
// wake (a change signal), so a test wakes as soon as the code under test
// says something changed. A nil wake is never ready.
func UntilWoken(t testing.TB, wake <-chan struct{}, timeout, interval time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	if !wait(wake, timeout, interval, cond) {
		t.Fatalf(format, args...)
	}
}

// Within is Until for a caller that explains a failure itself (a diff of
// what it saw last): it reports whether cond came true before timeout
// instead of failing a test.
func Within(timeout, interval time.Duration, cond func() bool) bool {
	return wait(nil, timeout, interval, cond)
}

func wait(wake <-chan struct{}, timeout, interval time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-wake:
		case <-tick.C:
		case <-deadline.C:
			// Like a loop that checks cond before the clock: a
			// condition that came true at the last moment passes.
			return cond()
		}
		if cond() {
			return true
		}
	}
}

// Last keeps what a condition saw last, for the failure message: pass
// &last among the arguments and set last.Err (or last.Value) in cond; the
// message then shows it as it was when the wait gave up, not as it was
// when Until was called.
type Last struct {
	Err   error
	Value any
}

// String prints the last error, else the last value.
func (l *Last) String() string {
	if l.Err != nil {
		return l.Err.Error()
	}
	return fmt.Sprint(l.Value)
}
