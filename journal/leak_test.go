package journal_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: the journal's hub holds a goroutine per agent stream,
// and each must end when its stream, channel or owner closes.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
