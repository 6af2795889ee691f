//go:build chaosclock

package journalmain

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/logkey"
)

// In a pact-journal built with -tags chaosclock (make chaos builds one
// beside the real one; releases and images never do), PACT_CHAOS_CLOCK_DIR
// names a directory where the file named after the journal's id holds an
// offset (a Go duration: "3m", "-2m30s", "0s") added to every reading of
// its clock. The file is read every 50 ms, so the chaos harness steps the
// journal's wall clock forward and back while it runs. Timers are
// relative and unaffected, as they are by a real step of the wall clock
// (Go's timers run on the monotonic clock).
func init() {
	chaosClock = func(base clock.Clock, nodeID string, log *slog.Logger) clock.Clock {
		dir := os.Getenv("PACT_CHAOS_CLOCK_DIR")
		if dir == "" {
			return base
		}
		c := &offsetClock{base: base}
		path := filepath.Join(dir, nodeID)
		go func() {
			var last time.Duration
			for {
				if b, err := os.ReadFile(path); err == nil {
					if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil && d != last {
						c.off.Store(int64(d))
						log.Warn("CHAOS: clock stepped (test build)", logkey.Offset, d, logkey.Was, last)
						last = d
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		log.Warn("CHAOS: this pact-journal was built with -tags chaosclock: its clock follows " + path)
		return c
	}
}

type offsetClock struct {
	base clock.Clock
	off  atomic.Int64
}

func (c *offsetClock) Now() time.Time { return c.base.Now().Add(time.Duration(c.off.Load())) }

func (c *offsetClock) NewTimer(d time.Duration) clock.Timer { return c.base.NewTimer(d) }
