package journal_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// Failed enrollments from one source are limited; the refusal carries a
// retry-after, and the budget comes back with time (the injected clock).
func TestFailedEnrollmentsAreRateLimitedPerSource(t *testing.T) {
	fc := fakeclock.New(time.Now())
	cfg := journaltest.Config(t.TempDir())
	cfg.Clock = fc
	cfg.RateLimit.PerSourceBurst = 3
	cfg.RateLimit.PerSourceRefill = 10 * time.Second
	cfg.MetricsListen = "127.0.0.1:0"
	h := journaltest.Start(t, cfg)
	h.Register(t, "n1", "SN1", mac1)

	for i := 0; i < 3; i++ {
		_, err := h.Enroll(t, journaltest.NewKey(t), "", "52:54:00:00:00:09")
		wantReason(t, err, codes.NotFound, apierr.NodeNotEnrolled)
	}
	// The budget is spent: even a registered node from this source waits.
	_, err := h.Enroll(t, journaltest.NewKey(t), "SN1", mac1)
	wantReason(t, err, codes.ResourceExhausted, apierr.RateLimited)
	if pe := apierr.FromError(err); pe.RetryAfter <= 0 || pe.RetryAfter > 10*time.Second {
		t.Errorf("retry-after %v, want within the refill interval", pe.RetryAfter)
	}
	fc.Advance(11 * time.Second)
	if _, err := h.Enroll(t, journaltest.NewKey(t), "SN1", mac1); err != nil {
		t.Fatalf("after the refill: %v", err)
	}

	resp, err := http.Get("http://" + h.J.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`pact_journal_enroll_total{result="rate_limited"} 1`,
		`pact_journal_enroll_total{result="ok"} 1`,
		`pact_journal_enroll_failures_total{reason="NODE_NOT_ENROLLED"} 3`,
		`pact_journal_nodes{state="active"} 1`,
		`pact_journal_is_leader 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for path, code := range map[string]int{"/healthz": 200, "/readyz": 200} {
		r, err := http.Get("http://" + h.J.MetricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != code {
			t.Errorf("%s = %d, want %d", path, r.StatusCode, code)
		}
	}
}
