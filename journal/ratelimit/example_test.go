package ratelimit_test

import (
	"fmt"
	"net"
	"time"

	"github.com/pact-hpc/pact/journal/ratelimit"
)

// The Enroll path: ask before the work, then record how it ended.
func Example() {
	cfg := ratelimit.DefaultConfig()
	cfg.PerSourceBurst = 3
	lim, err := ratelimit.New(cfg)
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	src := ratelimit.SourceOf(&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 51515})

	for attempt := 1; ; attempt++ {
		ok, retryAfter := lim.Allow(src, now)
		if !ok {
			// The journal answers RESOURCE_EXHAUSTED; the agent waits
			// retryAfter plus jitter.
			fmt.Printf("attempt %d refused, retry after %v\n", attempt, retryAfter)
			break
		}
		// An unknown hardware identity: a failure.
		warn, n := lim.RecordFailure(src, "aa:bb:cc:dd:ee:01|BMC0042", now)
		fmt.Printf("attempt %d failed (identity failures: %d, warn: %v)\n", attempt, n, warn)
	}
	// A registered node at the same address enrolls later.
	now = now.Add(cfg.PerSourceRefill)
	if ok, _ := lim.Allow(src, now); ok {
		lim.RecordSuccess(src, now)
		fmt.Println("enrolled after", cfg.PerSourceRefill)
	}
	// Output:
	// attempt 1 failed (identity failures: 1, warn: false)
	// attempt 2 failed (identity failures: 2, warn: false)
	// attempt 3 failed (identity failures: 3, warn: false)
	// attempt 4 refused, retry after 6s
	// enrolled after 6s
}
