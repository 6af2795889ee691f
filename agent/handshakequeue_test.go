package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/holdproxy"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// A journal may keep a new connection's ClientHello in its handshake
// queue for up to its queue wait before it serves it. Behind a queue that
// holds every connection 4 s, with calls bounded at 3 s: allowed the
// queue wait, the agent enrolls and opens its channel with no failed
// attempt; allowed none, its Enroll gives up on a journal that was about
// to serve it, and tries again, and again.
func TestAgentWaitsOutTheJournalsHandshakeQueue(t *testing.T) {
	for _, tc := range []struct {
		name      string
		queueWait time.Duration
		ok        bool
	}{
		{"queue wait allowed", 8 * time.Second, true},
		{"no queue wait allowed", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := journaltest.Start(t, journaltest.Config(t.TempDir()))
			h.Register(t, "n1", "SN1", mac1)
			cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
			cfg.JournalAddrs = []string{holdproxy.Start(t, h.Addr, 4*time.Second)}
			cfg.CallTimeout = 3 * time.Second
			cfg.HandshakeQueueWait = tc.queueWait
			var mu sync.Mutex
			var failed []string
			timedOut := 0
			cfg.OnAttempt = func(op string, err error) {
				if err == nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				failed = append(failed, fmt.Sprintf("%s: %v", op, err))
				// The handshake given up on (UNAVAILABLE, carrying the
				// context's deadline), or the call.
				if op == "enroll" && (errors.Is(err, context.DeadlineExceeded) || apierr.FromError(err).Code == codes.DeadlineExceeded) {
					timedOut++
				}
			}
			runAgent(t, cfg)
			if !tc.ok {
				eventually(t, "an Enroll attempt timed out", func() bool { mu.Lock(); defer mu.Unlock(); return timedOut > 0 })
				return
			}
			eventually(t, "n1 streams", func() bool { return h.J.OpenStreams("n1") == 1 })
			mu.Lock()
			defer mu.Unlock()
			if len(failed) > 0 {
				t.Fatalf("failed attempts behind a 4 s handshake queue with an 8 s queue wait allowed: %q", failed)
			}
		})
	}
}

// No queue wait is allowed (0); a negative one is a mistake.
func TestConfigHandshakeQueueWait(t *testing.T) {
	for _, tc := range []struct {
		wait    time.Duration
		refused bool
	}{{-time.Second, true}, {0, false}, {8 * time.Second, false}} {
		cfg := DefaultConfig()
		cfg.HandshakeQueueWait = tc.wait
		err := cfg.Validate()
		if got := err != nil && strings.Contains(err.Error(), "HandshakeQueueWait"); got != tc.refused {
			t.Errorf("HandshakeQueueWait %v: Validate = %v, want refused %v", tc.wait, err, tc.refused)
		}
	}
}
