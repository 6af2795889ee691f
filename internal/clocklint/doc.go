// Package clocklint holds the check that tests do not race the clock
// (clocklint_test.go; make lint and make test run it): no time.Sleep and
// no hand-rolled deadline loop in a test or a test helper package, outside
// internal/polltest and a short allow-list, each entry with its reason.
// A test waits on state (internal/polltest), advances the injected fake
// clock (internal/clock/fakeclock) or runs in a testing/synctest bubble.
package clocklint
