package agent

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: the agent starts goroutines per stream and channel,
// and each must end when its stream, channel or owner closes.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
