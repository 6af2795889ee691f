package ratelimit_test

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pact-hpc/pact/journal/ratelimit"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newLimiter(tb testing.TB, cfg ratelimit.Config) *ratelimit.Limiter {
	tb.Helper()
	l, err := ratelimit.New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return l
}

func config(edit func(*ratelimit.Config)) ratelimit.Config {
	cfg := ratelimit.DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

// fail is one admitted failed attempt.
func fail(tb testing.TB, l *ratelimit.Limiter, src string, now time.Time) {
	tb.Helper()
	if ok, after := l.Allow(src, now); !ok {
		tb.Fatalf("Allow(%q) at %v refused (retry after %v), want allowed", src, now.Sub(t0), after)
	}
	l.RecordFailure(src, "", now)
}

func wantAllowed(tb testing.TB, l *ratelimit.Limiter, src string, now time.Time) {
	tb.Helper()
	if ok, after := l.Allow(src, now); !ok {
		tb.Fatalf("Allow(%q) at t0%+v refused (retry after %v), want allowed", src, now.Sub(t0), after)
	}
}

// wantRefused checks a refusal and its retry-after hint, and returns it.
func wantRefused(tb testing.TB, l *ratelimit.Limiter, src string, now time.Time) time.Duration {
	tb.Helper()
	ok, after := l.Allow(src, now)
	if ok {
		tb.Fatalf("Allow(%q) at t0%+v allowed, want refused", src, now.Sub(t0))
	}
	if after < ratelimit.MinRetryAfter || after%(100*time.Millisecond) != 0 {
		tb.Fatalf("Allow(%q) retry after %v, want at least %v in whole 100ms", src, after, ratelimit.MinRetryAfter)
	}
	return after
}

func TestSourceBudget(t *testing.T) {
	tests := []struct {
		name string
		cfg  ratelimit.Config
	}{
		{"default", ratelimit.DefaultConfig()},
		{"burst 3 refill 1s", config(func(c *ratelimit.Config) { c.PerSourceBurst, c.PerSourceRefill = 3, time.Second })},
		{"burst 1 refill 250ms", config(func(c *ratelimit.Config) { c.PerSourceBurst, c.PerSourceRefill = 1, 250*time.Millisecond })},
		{"burst 2 refill 1h", config(func(c *ratelimit.Config) { c.PerSourceBurst, c.PerSourceRefill = 2, time.Hour })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, tc.cfg)
			const src = "10.0.0.1"
			refill := tc.cfg.PerSourceRefill
			for range tc.cfg.PerSourceBurst {
				fail(t, l, src, t0)
			}
			after := wantRefused(t, l, src, t0)
			if after < refill {
				t.Errorf("retry after %v is shorter than the refill %v", after, refill)
			}
			// Another source is not affected.
			wantAllowed(t, l, "10.0.0.2", t0)

			// Exactly one more attempt after one refill interval.
			wantRefused(t, l, src, t0.Add(refill-time.Nanosecond))
			t1 := t0.Add(refill)
			fail(t, l, src, t1)
			after = wantRefused(t, l, src, t1)

			// Honouring the retry-after is enough.
			wantAllowed(t, l, src, t1.Add(after))

			// A long quiet period refills only up to the burst.
			t2 := t1.Add(1000 * refill)
			for range tc.cfg.PerSourceBurst {
				fail(t, l, src, t2)
			}
			wantRefused(t, l, src, t2)
		})
	}
}

// TestSourceDebt: failures admitted together are all charged, so a source
// that overdraws waits until every one of them is paid for.
func TestSourceDebt(t *testing.T) {
	cfg := config(func(c *ratelimit.Config) { c.PerSourceBurst, c.PerSourceRefill = 2, time.Second })
	l := newLimiter(t, cfg)
	const src, inFlight = "10.0.0.1", 10
	for range inFlight {
		wantAllowed(t, l, src, t0) // all admitted before any fails
	}
	for range inFlight {
		l.RecordFailure(src, "", t0)
	}
	// 10 failures against a burst of 2: 8 in debt, plus 1 to have a token.
	if after := wantRefused(t, l, src, t0); after != 9*time.Second {
		t.Errorf("retry after %v, want 9s", after)
	}
	wantRefused(t, l, src, t0.Add(9*time.Second-time.Nanosecond))
	wantAllowed(t, l, src, t0.Add(9*time.Second))
}

func TestSuccessesNeverThrottle(t *testing.T) {
	const sources, attempts = 10_000, 100_000
	srcs := make([]string, sources)
	for i := range srcs {
		srcs[i] = fmt.Sprintf("10.1.%d.%d", i/256, i%256)
	}
	tests := []struct {
		name  string
		setup func(*ratelimit.Limiter)
	}{
		{"fresh", func(*ratelimit.Limiter) {}},
		{"global budget empty, sources known good", func(l *ratelimit.Limiter) {
			for _, s := range srcs {
				l.RecordSuccess(s, t0)
			}
			for i := range ratelimit.DefaultConfig().GlobalBurst {
				l.RecordFailure("192.168.0."+strconv.Itoa(i%250), "", t0)
			}
			if ok, _ := l.Allow("192.168.1.1", t0); ok {
				t.Fatal("the global budget is not empty")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, ratelimit.DefaultConfig())
			tc.setup(l)
			for i := range attempts {
				src := srcs[i%sources]
				if ok, after := l.Allow(src, t0); !ok {
					t.Fatalf("attempt %d from %s refused (retry after %v)", i, src, after)
				}
				l.RecordSuccess(src, t0)
			}
		})
	}
}

func TestGlobalBudget(t *testing.T) {
	// Without the fresh budget every failure spends the global one.
	cfg := config(func(c *ratelimit.Config) { c.FreshBurst = 0 })
	l := newLimiter(t, cfg)
	const stale, good, unknown = "10.9.0.1", "10.9.0.2", "10.9.0.3"
	// stale enrolled long enough ago to be unknown again.
	staleAt := t0.Add(-time.Duration(cfg.PerSourceBurst) * cfg.PerSourceRefill)
	l.RecordSuccess(stale, staleAt)
	l.RecordSuccess(good, t0.Add(-time.Second))

	// GlobalBurst failures, spread so that no source runs out.
	for i := range cfg.GlobalBurst {
		fail(t, l, "10.8.0."+strconv.Itoa(i%(cfg.GlobalBurst/cfg.PerSourceBurst)), t0)
	}
	if got := l.Stats().GlobalTokens; got != 0 {
		t.Errorf("GlobalTokens = %d, want 0", got)
	}
	after := wantRefused(t, l, unknown, t0)
	wantRefused(t, l, stale, t0)
	wantAllowed(t, l, good, t0)
	wantRefused(t, l, unknown, t0.Add(cfg.GlobalRefill-time.Nanosecond))
	wantAllowed(t, l, unknown, t0.Add(cfg.GlobalRefill))
	if got := l.Stats().GlobalTokens; got != 1 {
		t.Errorf("GlobalTokens = %d, want 1", got)
	}

	// The regained token is spent by the first failure.
	fail(t, l, unknown, t0.Add(cfg.GlobalRefill))
	wantRefused(t, l, "10.9.0.4", t0.Add(cfg.GlobalRefill))

	// Honouring the first retry-after is enough.
	wantAllowed(t, l, "10.9.0.4", t0.Add(after))
}

// TestFreshBudget: a source's first failure spends the fresh budget, its
// later ones the global budget, so sources that have failed cannot keep a
// fresh source (a booting node) out, and the other way round.
func TestFreshBudget(t *testing.T) {
	cfg := config(func(c *ratelimit.Config) {
		c.GlobalBurst, c.GlobalRefill = 10, time.Second
		c.FreshBurst, c.FreshRefill = 3, 100*time.Millisecond
		c.PerSourceBurst = 10
	})
	l := newLimiter(t, cfg)
	const a, b, c, d = "10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4"
	if v := l.Check(a, t0); !v.OK || !v.Fresh || !v.NeedsGlobal {
		t.Fatalf("unknown source: %+v, want allowed, fresh, needing a shared budget", v)
	}
	for _, src := range []string{a, b, c} {
		fail(t, l, src, t0)
	}
	if st := l.Stats(); st.FreshTokens != 0 || st.GlobalTokens != 10 {
		t.Fatalf("after three first failures: %+v, want the fresh budget spent and the global one whole", st)
	}
	// A fresh source waits for the fresh budget, and is told it is the
	// shared budget, not its own.
	v := l.Check(d, t0)
	if v.OK || v.Scope != ratelimit.ScopeGlobal || !v.Fresh {
		t.Fatalf("fresh source with the fresh budget spent: %+v, want refused for the shared budget", v)
	}
	// A source that has failed is not fresh and spends the global budget.
	if v := l.Check(a, t0); !v.OK || v.Fresh {
		t.Fatalf("a failed source: %+v, want allowed and not fresh", v)
	}
	for range 9 { // a's own budget: 10, one spent while fresh
		fail(t, l, a, t0)
	}
	fail(t, l, b, t0)
	if st := l.Stats(); st.GlobalTokens != 0 {
		t.Fatalf("after ten later failures: %+v, want the global budget spent", st)
	}
	if v := l.Check(c, t0); v.OK || v.Scope != ratelimit.ScopeGlobal {
		t.Fatalf("failed source with the global budget spent: %+v, want refused", v)
	}
	// The fresh budget comes back on its own schedule.
	wantAllowed(t, l, d, t0.Add(cfg.FreshRefill))
	if n, next := l.Tokens(true, t0.Add(cfg.FreshRefill)); n != 1 || next != cfg.FreshRefill {
		t.Fatalf("Tokens(fresh) = %d, %v; want 1 and a refill", n, next)
	}
	if n, _ := l.Tokens(false, t0.Add(cfg.FreshRefill)); n != 0 {
		t.Fatalf("Tokens(global) = %d, want 0", n)
	}
}

// TestGlobalDebtCapped: failures admitted together drive the global budget
// into debt of at most one burst.
func TestGlobalDebtCapped(t *testing.T) {
	cfg := config(func(c *ratelimit.Config) {
		c.GlobalBurst, c.GlobalRefill = 10, time.Second
		c.PerSourceBurst = 1
		c.FreshBurst = 0
	})
	l := newLimiter(t, cfg)
	for i := range 1000 {
		l.RecordFailure("10.0."+strconv.Itoa(i/250)+"."+strconv.Itoa(i%250), "", t0)
	}
	// 10s of debt at most, then 1s for a token.
	if after := wantRefused(t, l, "10.9.9.9", t0); after != 11*time.Second {
		t.Errorf("retry after %v, want 11s", after)
	}
	wantAllowed(t, l, "10.9.9.9", t0.Add(11*time.Second))
}

func TestMemoryBound(t *testing.T) {
	cfg := ratelimit.DefaultConfig()
	l := newLimiter(t, cfg)
	const n = 1_000_000
	now := t0
	for i := range n {
		if i%1000 == 0 {
			now = now.Add(time.Millisecond)
		}
		src := strconv.Itoa(i)
		l.RecordFailure(src, "id-"+src, now)
	}
	st := l.Stats()
	if st.Sources != cfg.MaxSources || st.Identities != cfg.MaxIdentities {
		t.Errorf("tracked %d sources and %d identities, want %d and %d", st.Sources, st.Identities, cfg.MaxSources, cfg.MaxIdentities)
	}
	if want := uint64(n - cfg.MaxSources); st.SourceEvictions != want || st.IdentityEvictions != want {
		t.Errorf("evicted %d sources and %d identities, want %d each", st.SourceEvictions, st.IdentityEvictions, want)
	}
}

func TestLRUEvictsLeastRecentlyUsed(t *testing.T) {
	cfg := config(func(c *ratelimit.Config) {
		c.PerSourceBurst, c.PerSourceRefill = 2, time.Hour
		c.GlobalBurst, c.GlobalRefill = 1000, time.Millisecond
		c.MaxSources = 3
	})
	l := newLimiter(t, cfg)
	empty := func(src string) {
		t.Helper()
		fail(t, l, src, t0)
		fail(t, l, src, t0)
	}
	stats := func(sources int, evictions uint64) {
		t.Helper()
		if st := l.Stats(); st.Sources != sources || st.SourceEvictions != evictions {
			t.Fatalf("Stats: %d sources, %d evictions; want %d, %d", st.Sources, st.SourceEvictions, sources, evictions)
		}
	}
	empty("victim")
	empty("s1")
	empty("s2")
	stats(3, 0)
	wantRefused(t, l, "victim", t0) // touching it makes it the most recent

	empty("s3") // evicts s1, the least recently used
	stats(3, 1)
	wantAllowed(t, l, "s1", t0) // forgotten; Allow does not track it again
	stats(3, 1)
	wantRefused(t, l, "victim", t0) // still tracked
	wantRefused(t, l, "s3", t0)
	wantRefused(t, l, "s2", t0) // now victim is the least recently used

	empty("s4")
	stats(3, 2)
	wantAllowed(t, l, "victim", t0)
	wantRefused(t, l, "s2", t0)
	wantRefused(t, l, "s3", t0)
	wantRefused(t, l, "s4", t0)
}

func TestIdentityWarning(t *testing.T) {
	type failure struct {
		at        time.Duration
		wantWarn  bool
		wantCount int
	}
	s := time.Second
	m := time.Minute
	tests := []struct {
		name     string
		failures []failure
	}{
		{"crossing warns once, again after the window", []failure{
			{0, false, 1}, {1 * s, false, 2}, {2 * s, false, 3}, {3 * s, false, 4},
			{4 * s, true, 5}, {5 * s, false, 6}, {9 * m, false, 7},
			// Quiet for a whole window: the count starts again.
			{20 * m, false, 1}, {20*m + s, false, 2}, {20*m + 2*s, false, 3}, {20*m + 3*s, false, 4},
			{20*m + 4*s, true, 5}, {20*m + 5*s, false, 6},
		}},
		{"sustained failures remind once a window", func() []failure {
			// One failure a minute: warnings at 4m, 14m and 24m.
			var fs []failure
			for i := range 30 {
				fs = append(fs, failure{time.Duration(i) * m, i%10 == 4, i + 1})
			}
			return fs
		}()},
		{"window slides across any boundary", []failure{
			{0, false, 1},
			{9*m + 58*s, false, 2}, {9*m + 59*s, false, 3}, {10 * m, false, 4}, {10*m + 1*s, false, 5},
			{10*m + 2*s, true, 6},
		}},
		{"only failures within the window count", []failure{
			{0, false, 1}, {1 * s, false, 2}, {2 * s, false, 3}, {3 * s, false, 4},
			// The window is half-open: a failure exactly one window old is out.
			{10 * m, false, 5}, {10*m + 1*s, false, 6}, {10*m + 2*s, false, 7}, {10*m + 3*s, false, 8},
			{10*m + 4*s, true, 9},
		}},
		{"slow failures keep counting without a warning", []failure{
			{0, false, 1}, {3 * m, false, 2}, {6 * m, false, 3}, {9 * m, false, 4},
			{12 * m, false, 5}, {15 * m, false, 6}, {18 * m, false, 7},
			{29 * m, false, 1},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, ratelimit.DefaultConfig())
			const id = "aa:bb:cc:dd:ee:01|BMC123"
			for i, f := range tc.failures {
				// Vary the source so no source budget gets in the way.
				warn, count := l.RecordFailure("10.0.0."+strconv.Itoa(i), id, t0.Add(f.at))
				if warn != f.wantWarn || count != f.wantCount {
					t.Errorf("failure %d at %v: warn=%v count=%d, want warn=%v count=%d", i, f.at, warn, count, f.wantWarn, f.wantCount)
				}
				// Another identity's failures are counted apart.
				if warn, count := l.RecordFailure("10.0.1.1", "other-"+strconv.Itoa(i), t0.Add(f.at)); warn || count != 1 {
					t.Errorf("other identity: warn=%v count=%d, want false, 1", warn, count)
				}
			}
		})
	}
}

func TestIdentityUntracked(t *testing.T) {
	l := newLimiter(t, ratelimit.DefaultConfig())
	for i := range 10 {
		if warn, count := l.RecordFailure("10.0.0."+strconv.Itoa(i), "", t0); warn || count != 0 {
			t.Fatalf("empty identity key: warn=%v count=%d, want false, 0", warn, count)
		}
	}
	if n := l.Stats().Identities; n != 0 {
		t.Errorf("tracked %d identities, want 0", n)
	}
}

func TestTimeGoingBackwards(t *testing.T) {
	cfg := config(func(c *ratelimit.Config) { c.PerSourceBurst, c.PerSourceRefill = 2, 10*time.Second })
	refill := cfg.PerSourceRefill
	const src = "10.0.0.1"
	tests := []struct {
		name string
		run  func(t *testing.T, l *ratelimit.Limiter)
	}{
		{"a step back grants nothing", func(t *testing.T, l *ratelimit.Limiter) {
			wantRefused(t, l, src, t0.Add(-time.Hour))
			wantRefused(t, l, src, time.Time{})
			wantRefused(t, l, src, t0.Add(refill-time.Nanosecond))
			wantAllowed(t, l, src, t0.Add(refill))
		}},
		{"time elapsed before a step back is not counted twice", func(t *testing.T, l *ratelimit.Limiter) {
			wantRefused(t, l, src, t0.Add(refill/2))
			wantRefused(t, l, src, t0.Add(-time.Hour))
			wantRefused(t, l, src, t0.Add(refill/2))
			wantRefused(t, l, src, t0.Add(refill-time.Nanosecond))
			wantAllowed(t, l, src, t0.Add(refill))
		}},
		{"failures in the past are still charged", func(t *testing.T, l *ratelimit.Limiter) {
			l.RecordFailure(src, "", t0.Add(-time.Hour))
			wantRefused(t, l, src, t0.Add(refill))
			wantAllowed(t, l, src, t0.Add(2*refill))
		}},
		{"a success in the past still counts from now", func(t *testing.T, l *ratelimit.Limiter) {
			for i := range cfg.GlobalBurst {
				l.RecordFailure("10.1.0."+strconv.Itoa(i%250), "", t0)
			}
			l.RecordSuccess("10.2.0.1", t0.Add(-time.Hour))
			wantAllowed(t, l, "10.2.0.1", t0)
			wantRefused(t, l, "10.2.0.2", t0.Add(-time.Hour))
		}},
		{"identity failures in the past", func(t *testing.T, l *ratelimit.Limiter) {
			for i := range cfg.IdentityWarnAfter - 1 {
				if warn, _ := l.RecordFailure("10.3.0."+strconv.Itoa(i), "id", t0.Add(-time.Duration(i)*time.Hour)); warn {
					t.Fatalf("failure %d warned", i)
				}
			}
			if warn, count := l.RecordFailure("10.3.1.1", "id", time.Time{}); !warn || count != cfg.IdentityWarnAfter {
				t.Fatalf("warn=%v count=%d, want true, %d", warn, count, cfg.IdentityWarnAfter)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, cfg)
			fail(t, l, src, t0)
			fail(t, l, src, t0)
			tc.run(t, l)
		})
	}
}

type fakeAddr string

func (fakeAddr) Network() string  { return "fake" }
func (a fakeAddr) String() string { return string(a) }

func TestSourceOf(t *testing.T) {
	tests := []struct {
		addr string
		want string
	}{
		{"10.1.2.3:5555", "10.1.2.3"},
		{"[::ffff:10.1.2.3]:1", "10.1.2.3"},
		{"[2001:db8:1:2:3:4:5:6]:9", "2001:db8:1:2:3:4:5:6"},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:9", "2001:db8:1:2:ffff:ffff:ffff:ffff"},
		{"[2001:db8:1:3::1]:9", "2001:db8:1:3::1"},
		{"[fe80::1%eth0]:7443", "fe80::1"},
		{"[::1]:7443", "::1"},
		{"127.0.0.1:7443", "127.0.0.1"},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			if got := ratelimit.SourceOf(fakeAddr(tc.addr)); got != tc.want {
				t.Errorf("SourceOf(%q) = %q, want %q", tc.addr, got, tc.want)
			}
			tcp, err := net.ResolveTCPAddr("tcp", tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			if got := ratelimit.SourceOf(tcp); got != tc.want {
				t.Errorf("SourceOf(%#v) = %q, want %q", tcp, got, tc.want)
			}
		})
	}

	others := []struct {
		name string
		addr net.Addr
		want string
	}{
		{"nil", nil, ""},
		{"nil TCPAddr", (*net.TCPAddr)(nil), ""},
		{"TCPAddr without IP", &net.TCPAddr{Port: 1}, ""},
		{"unix socket", &net.UnixAddr{Name: "/run/pact.sock", Net: "unix"}, ""},
		{"unparseable", fakeAddr("bufconn"), ""},
		{"empty", fakeAddr(""), ""},
		{"host name", fakeAddr("journal.example:7443"), ""},
		{"IP without port", fakeAddr("10.1.2.3"), "10.1.2.3"},
		{"IPAddr", &net.IPAddr{IP: net.ParseIP("10.1.2.3")}, "10.1.2.3"},
		{"UDPAddr v6", &net.UDPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1}, "2001:db8::1"},
		{"TCPAddr 4-byte IPv4", &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3).To4(), Port: 1}, "10.1.2.3"},
	}
	for _, tc := range others {
		t.Run(tc.name, func(t *testing.T) {
			if got := ratelimit.SourceOf(tc.addr); got != tc.want {
				t.Errorf("SourceOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  ratelimit.Config
		want []string // substrings of the error, one per problem; nil = valid
	}{
		{"default", ratelimit.DefaultConfig(), nil},
		{"zero", ratelimit.Config{}, []string{
			"PerSourceBurst 0", "PerSourceRefill 0s", "GlobalBurst 0", "GlobalRefill 0s",
			"MaxSources 0", "IdentityWarnAfter 0", "IdentityWindow 0s", "MaxIdentities 0",
		}},
		{"negative", config(func(c *ratelimit.Config) {
			c.PerSourceRefill, c.GlobalRefill, c.IdentityWindow = -time.Second, -time.Second, -time.Second
			c.MaxSources, c.MaxIdentities = -1, -1
		}), []string{"PerSourceRefill -1s", "GlobalRefill -1s", "IdentityWindow -1s", "MaxSources -1", "MaxIdentities -1"}},
		{"values against each other", config(func(c *ratelimit.Config) {
			c.PerSourceBurst, c.GlobalBurst = 50, 20
			c.GlobalRefill = 1 << 60
			c.IdentityWarnAfter = ratelimit.MaxIdentityWarnAfter + 1
		}), []string{"GlobalBurst 20 is below PerSourceBurst 50", "GlobalBurst*GlobalRefill", "IdentityWarnAfter 101"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate: nil, want errors")
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("Validate error lacks %q:\n%s", w, msg)
				}
			}
			if lines := strings.Count(msg, "\n") + 1; lines != len(tc.want) {
				t.Errorf("Validate reported %d problems, want %d:\n%s", lines, len(tc.want), msg)
			}
			for line := range strings.SplitSeq(msg, "\n") {
				if !strings.HasPrefix(line, "ratelimit: ") {
					t.Errorf("error %q lacks the package prefix", line)
				}
			}
			if _, err := ratelimit.New(tc.cfg); err == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
}

func TestNewCopiesConfig(t *testing.T) {
	cfg := config(func(c *ratelimit.Config) { c.PerSourceBurst = 1 })
	l := newLimiter(t, cfg)
	cfg.PerSourceBurst = 100
	fail(t, l, "10.0.0.1", t0)
	wantRefused(t, l, "10.0.0.1", t0)
}

func TestConcurrentUse(t *testing.T) {
	cfg := config(func(c *ratelimit.Config) {
		c.MaxSources, c.MaxIdentities = 64, 16
		c.PerSourceBurst, c.PerSourceRefill = 3, time.Millisecond
		c.GlobalBurst, c.GlobalRefill = 50, 10*time.Microsecond
	})
	l := newLimiter(t, cfg)
	var clock atomic.Int64 // nanoseconds after t0; each call moves it on
	var allowed, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				now := t0.Add(time.Duration(clock.Add(int64(time.Microsecond))))
				src := "10.0." + strconv.Itoa(g) + "." + strconv.Itoa(i%100)
				ok, after := l.Allow(src, now)
				switch {
				case !ok:
					refused.Add(1)
					if after < ratelimit.MinRetryAfter {
						t.Errorf("refused with retry after %v", after)
						return
					}
				case i%3 == 0:
					allowed.Add(1)
					l.RecordFailure(src, "id-"+strconv.Itoa(i%40), now)
				default:
					allowed.Add(1)
					l.RecordSuccess(src, now)
				}
				if i%100 == 0 {
					if st := l.Stats(); st.Sources > cfg.MaxSources || st.Identities > cfg.MaxIdentities {
						t.Errorf("Stats %+v exceed the bounds", st)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if allowed.Load() == 0 || refused.Load() == 0 {
		t.Errorf("allowed %d, refused %d; want some of each", allowed.Load(), refused.Load())
	}
	st := l.Stats()
	if st.Sources != cfg.MaxSources || st.Identities != cfg.MaxIdentities {
		t.Errorf("Stats %+v, want the bounds reached", st)
	}
}

// TestTrackedSourceAllocs keeps the boot-storm path allocation-free.
func TestTrackedSourceAllocs(t *testing.T) {
	l := newLimiter(t, ratelimit.DefaultConfig())
	const src = "10.0.0.1"
	l.RecordSuccess(src, t0)
	now := t0
	allocs := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		if ok, _ := l.Allow(src, now); !ok {
			t.Fatal("refused")
		}
		l.RecordSuccess(src, now)
	})
	if allocs != 0 {
		t.Errorf("Allow+RecordSuccess of a tracked source: %v allocations, want 0", allocs)
	}
}

func benchSources(n int) []string {
	srcs := make([]string, n)
	for i := range srcs {
		srcs[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	}
	return srcs
}

// BenchmarkAllowRecordSuccess is the boot-storm hot path: a source already
// tracked, admitted and then enrolled.
func BenchmarkAllowRecordSuccess(b *testing.B) {
	for _, tracked := range []int{1024, 1 << 16} {
		srcs := benchSources(tracked)
		mask := tracked - 1
		b.Run(fmt.Sprintf("sources=%d", tracked), func(b *testing.B) {
			l := newLimiter(b, ratelimit.DefaultConfig())
			for _, s := range srcs {
				l.RecordSuccess(s, t0)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				src := srcs[i&mask]
				now := t0.Add(time.Duration(i))
				if ok, _ := l.Allow(src, now); !ok {
					b.Fatal("refused")
				}
				l.RecordSuccess(src, now)
				i++
			}
		})
		b.Run(fmt.Sprintf("sources=%d/parallel", tracked), func(b *testing.B) {
			l := newLimiter(b, ratelimit.DefaultConfig())
			for _, s := range srcs {
				l.RecordSuccess(s, t0)
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919))
				for pb.Next() {
					src := srcs[i&mask]
					if ok, _ := l.Allow(src, t0); !ok {
						b.Error("refused")
						return
					}
					l.RecordSuccess(src, t0)
					i++
				}
			})
		})
	}
}

// BenchmarkRecordFailure is a failure from a new source with a new
// identity once both LRUs are full, so every call evicts.
func BenchmarkRecordFailure(b *testing.B) {
	srcs := benchSources(1 << 20)
	ids := make([]string, len(srcs))
	for i, s := range srcs {
		ids[i] = "aa:bb:cc:dd:ee:ff|" + s
	}
	cfg := config(func(c *ratelimit.Config) { c.MaxSources, c.MaxIdentities = 1<<12, 1<<12 })
	l := newLimiter(b, cfg)
	mask := len(srcs) - 1
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l.RecordFailure(srcs[i&mask], ids[i&mask], t0.Add(time.Duration(i)))
		i++
	}
}
