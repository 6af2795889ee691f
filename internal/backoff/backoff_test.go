package backoff

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
)

const ms = time.Millisecond

// lowest and highest are the ends of every draw.
func lowest(time.Duration) time.Duration    { return 0 }
func highest(n time.Duration) time.Duration { return n - 1 }

func TestDelay(t *testing.T) {
	p := Policy{Min: 250 * ms, Max: 30 * time.Second}
	for _, tc := range []struct {
		name       string
		rand       func(time.Duration) time.Duration
		attempt    int
		retryAfter time.Duration
		want       time.Duration
	}{
		{"first, low draw", lowest, 0, 0, 125 * ms},
		{"first, high draw", highest, 0, 0, 125*ms + 250*ms - 1},
		{"third doubles twice", highest, 2, 0, 125*ms + 1000*ms - 1},
		{"capped at Max", highest, 10, 0, 125*ms + 30*time.Second - 1},
		{"huge attempt does not overflow", highest, 1 << 30, 0, 125*ms + 30*time.Second - 1},
		{"negative attempt is the first", highest, -3, 0, 125*ms + 250*ms - 1},
		{"retry-after wins, low draw", lowest, 0, 2 * time.Second, 2 * time.Second},
		{"retry-after plus up to half", highest, 0, 2 * time.Second, 3*time.Second - 1},
		{"jitter longer than retry-after wins", highest, 10, 100 * ms, 125*ms + 30*time.Second - 1},
		{"tiny retry-after: no half to add", highest, 0, 1, 125*ms + 250*ms - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := p
			p.Rand = tc.rand
			if got := p.Delay(tc.attempt, tc.retryAfter); got != tc.want {
				t.Errorf("Delay(%d, %v) = %v, want %v", tc.attempt, tc.retryAfter, got, tc.want)
			}
		})
	}
}

// The draws Delay asks for are the jitter's ceilings: the policy's shape,
// independent of what the source answers.
func TestDelayAsksForTheCeilings(t *testing.T) {
	var asked []time.Duration
	p := Policy{Min: 100 * ms, Max: 1 * time.Second, Rand: func(n time.Duration) time.Duration {
		asked = append(asked, n)
		return 0
	}}
	for attempt := range 6 {
		p.Delay(attempt, 0)
	}
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}
	if fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Errorf("ceilings %v, want %v", asked, want)
	}
}

func TestAfterHonoursTheJournalsRetryAfter(t *testing.T) {
	p := Policy{Min: 250 * ms, Max: 30 * time.Second, Rand: lowest}
	err := apierr.Status(apierr.RateLimited, 5*time.Second, "slow down").Err()
	if got := p.After(0, err); got != 5*time.Second {
		t.Errorf("After(rate limited, 5s) = %v, want 5s", got)
	}
	if got := p.After(0, fmt.Errorf("wrapped: %w", apierr.FromError(err))); got != 5*time.Second {
		t.Errorf("After(wrapped) = %v, want 5s", got)
	}
	if got := p.After(0, errors.New("connection refused")); got != 125*ms {
		t.Errorf("After(plain error) = %v, want 125ms", got)
	}
	if got := p.After(0, nil); got != 125*ms {
		t.Errorf("After(nil) = %v, want 125ms", got)
	}
}

func TestDefaultRandStaysInRange(t *testing.T) {
	p := Default()
	for attempt := range 20 {
		hi := min(p.Min<<attempt, p.Max)
		for range 50 {
			d := p.Delay(attempt, 0)
			if d < p.Min/2 || d >= p.Min/2+hi {
				t.Fatalf("Delay(%d) = %v outside [%v, %v)", attempt, d, p.Min/2, p.Min/2+hi)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Errorf("Default: %v", err)
	}
	for _, p := range []Policy{{}, {Min: ms}, {Min: 2 * ms, Max: ms}, {Min: -ms, Max: ms}} {
		if err := p.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", p, err)
		}
	}
}

func TestJitterDraws(t *testing.T) {
	var asked []time.Duration
	injected := Jitter(func(n time.Duration) time.Duration { asked = append(asked, n); return n / 2 })
	if got := injected.Draw(10 * ms); got != 5*ms {
		t.Errorf("injected Draw(10ms) = %v, want the injected 5ms", got)
	}
	for _, n := range []time.Duration{0, -ms} {
		if got := injected.Draw(n); got != 0 {
			t.Errorf("Draw(%v) = %v, want 0", n, got)
		}
	}
	if len(asked) != 1 {
		t.Errorf("the injected jitter was asked %v, want only for 10ms", asked)
	}
	var random Jitter
	for range 1000 {
		if got := random.Draw(3 * ms); got < 0 || got >= 3*ms {
			t.Fatalf("nil Jitter's Draw(3ms) = %v, want in [0, 3ms)", got)
		}
	}
}
