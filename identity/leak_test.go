package identity_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// cascade watches its providers on a goroutine of its own, which must end
// when it closes.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
