//go:build !chaosclock

package journalmain

import "testing"

// The clock-stepping hook exists only in a test build (-tags chaosclock);
// a normal pact-journal must never follow a file's idea of the time.
func TestChaosClockOnlyInTestBuild(t *testing.T) {
	if chaosClock != nil {
		t.Fatal("chaosClock is set in a build without -tags chaosclock")
	}
}
