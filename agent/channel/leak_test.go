package channel_test

import (
	"io"
	"log/slog"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: the
// rotator starts a goroutine per channel and stream, and each must end when
// its stream, channel or owner closes.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// quiet is the tests' logger.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
