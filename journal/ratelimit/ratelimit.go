// Package ratelimit limits failed Enroll attempts, so that guessing a
// registered hardware identity is impractical while a boot storm of
// registered nodes is never throttled here.
//
// Only failures cost anything. Each source address has a small failure
// budget (a token bucket), and all sources share a global one; a success
// never consumes a token. A source is refused when its own budget is empty,
// or when the global budget is empty and the source has not enrolled
// successfully in the last PerSourceBurst*PerSourceRefill ("known good").
// Failures are also counted per hardware identity, so that one identity
// failing again and again (a replaced BMC, a typo in the inventory, or
// someone guessing) raises a warning.
//
// The limiter is a pure function of the times passed to it: no goroutines,
// no timers, no clock. Buckets refill lazily from the now given to each
// call, and a now earlier than one already seen counts as no elapsed time,
// so a clock stepping back never grants tokens. Memory is bounded by
// MaxSources and MaxIdentities, each an LRU; keys are kept as 64-bit
// seeded hashes, so an entry's size does not depend on what the caller
// passes.
//
// The intended use on the Enroll path:
//
//	src := ratelimit.SourceOf(peerAddr)
//	if ok, after := lim.Allow(src, now); !ok {
//		return RESOURCE_EXHAUSTED with retry-after `after`
//	}
//	... check identity and CSR, sign ...
//	if failed {
//		if warn, n := lim.RecordFailure(src, identityKey, now); warn {
//			log a warning with n, count a metric
//		}
//	} else {
//		lim.RecordSuccess(src, now)
//	}
//
// Allow only checks; RecordFailure is what spends. Requests from one source
// that are admitted together and then fail together are all charged, and a
// source's budget may go into debt (it is then refused until the debt is
// repaid at the refill rate), so over time a source gets no more than
// PerSourceBurst + elapsed/PerSourceRefill failures plus however many of its
// requests were in flight at once. Call Allow as close to the work as is
// convenient (after acquiring an enrollment slot bounds that overshoot by
// the slot count).
package ratelimit

import (
	"container/list"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"net/netip"
	"sync"
	"time"
)

const (
	// MinRetryAfter is the least retry-after Allow returns when it refuses:
	// sub-second hints are noise next to the agent's jitter.
	MinRetryAfter = time.Second
	// retryAfterStep is the granularity retry-after is rounded up to.
	retryAfterStep = 100 * time.Millisecond
	// maxSpan bounds burst*refill (about 73 years), and maxDebt bounds how
	// far a bucket may be overdrawn, so the bucket arithmetic cannot
	// overflow int64.
	maxSpan = time.Duration(1 << 61)
	maxDebt = time.Duration(1 << 61)
	// MaxIdentityWarnAfter bounds IdentityWarnAfter: each tracked identity
	// keeps up to that many failure times.
	MaxIdentityWarnAfter = 100
)

// Config configures a Limiter.
type Config struct {
	// PerSourceBurst is how many failures a source may have before it is
	// refused, and PerSourceRefill how often it regains one.
	PerSourceBurst  int
	PerSourceRefill time.Duration
	// GlobalBurst and GlobalRefill are the same for all sources together.
	// When the global budget is empty only known-good sources are admitted.
	// Its debt is capped at one GlobalBurst, so failures admitted together
	// shut unknown sources out for at most 2*GlobalBurst*GlobalRefill; a
	// source's own debt is not capped, so it pays for every failure.
	GlobalBurst  int
	GlobalRefill time.Duration
	// FreshBurst and FreshRefill are a second shared budget, for the
	// first failure of a source that has none on record. A booting node
	// is such a source, and so is each address of a flood until it has
	// failed once; with its own budget a flood's addresses, once they
	// have failed, no longer compete with booting nodes, and a flood from
	// A fresh addresses keeps a booting node waiting at most about
	// A*FreshRefill (if the caller serves fresh sources in the order they
	// were first seen). Zero FreshBurst turns it off: first failures
	// spend the global budget like any other.
	FreshBurst  int
	FreshRefill time.Duration
	// MaxSources bounds the sources tracked (failure budgets and known-good
	// marks); the least recently used is forgotten first.
	//
	// Forgetting a source gives it a full budget again, so eviction must
	// not be a cheap reset. Only RecordFailure and RecordSuccess add
	// sources (Allow does not), and a refused source is touched by its own
	// refusals, so to push out its own entry a source must first make
	// MaxSources other sources more recent: as failures that costs
	// MaxSources global tokens (about 5.5 hours at the defaults), far more
	// than waiting PerSourceBurst*PerSourceRefill for a full budget; as
	// successes it needs that many distinct sources that really enrol. A
	// boot storm of more than MaxSources registered nodes does evict, so a
	// source can get at most one extra PerSourceBurst per such storm, and
	// known-good marks older than the storm are lost (which only matters
	// while the global budget is empty).
	MaxSources int
	// IdentityWarnAfter failures of one hardware identity within
	// IdentityWindow raise a warning (see RecordFailure).
	IdentityWarnAfter int
	IdentityWindow    time.Duration
	// MaxIdentities bounds the hardware identities tracked (LRU).
	MaxIdentities int
}

// DefaultConfig returns the defaults: 10 failures a minute per source with a
// burst of 10, 200 a minute globally with a burst of 200, first failures
// of fresh sources 200 a second with a burst of 200, a warning after 5
// failures of one identity within 10 minutes, and 65536 sources and
// identities tracked (a few megabytes each).
func DefaultConfig() Config {
	return Config{
		PerSourceBurst:    10,
		PerSourceRefill:   6 * time.Second,
		GlobalBurst:       200,
		GlobalRefill:      300 * time.Millisecond,
		FreshBurst:        200,
		FreshRefill:       5 * time.Millisecond,
		MaxSources:        1 << 16,
		IdentityWarnAfter: 5,
		IdentityWindow:    10 * time.Minute,
		MaxIdentities:     1 << 16,
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	bucket := func(name string, burst int, refill time.Duration) {
		if burst < 1 {
			errs = append(errs, fmt.Errorf("ratelimit: %sBurst %d must be at least 1", name, burst))
		}
		if refill <= 0 {
			errs = append(errs, fmt.Errorf("ratelimit: %sRefill %v must be positive", name, refill))
		}
		if burst >= 1 && refill > 0 && refill > maxSpan/time.Duration(burst) {
			errs = append(errs, fmt.Errorf("ratelimit: %sBurst*%sRefill (%d*%v) is too long", name, name, burst, refill))
		}
	}
	bucket("PerSource", c.PerSourceBurst, c.PerSourceRefill)
	bucket("Global", c.GlobalBurst, c.GlobalRefill)
	if c.FreshBurst < 0 {
		errs = append(errs, fmt.Errorf("ratelimit: FreshBurst %d must not be negative (0 turns the fresh budget off)", c.FreshBurst))
	} else if c.FreshBurst > 0 {
		bucket("Fresh", c.FreshBurst, c.FreshRefill)
	}
	if c.PerSourceBurst >= 1 && c.GlobalBurst < c.PerSourceBurst {
		errs = append(errs, fmt.Errorf("ratelimit: GlobalBurst %d is below PerSourceBurst %d, so one source could empty the global budget", c.GlobalBurst, c.PerSourceBurst))
	}
	if c.MaxSources < 1 {
		errs = append(errs, fmt.Errorf("ratelimit: MaxSources %d must be at least 1", c.MaxSources))
	}
	if c.IdentityWarnAfter < 1 || c.IdentityWarnAfter > MaxIdentityWarnAfter {
		errs = append(errs, fmt.Errorf("ratelimit: IdentityWarnAfter %d must be between 1 and %d", c.IdentityWarnAfter, MaxIdentityWarnAfter))
	}
	if c.IdentityWindow <= 0 {
		errs = append(errs, fmt.Errorf("ratelimit: IdentityWindow %v must be positive", c.IdentityWindow))
	}
	if c.MaxIdentities < 1 {
		errs = append(errs, fmt.Errorf("ratelimit: MaxIdentities %d must be at least 1", c.MaxIdentities))
	}
	return errors.Join(errs...)
}

// Stats is a snapshot for metrics.
type Stats struct {
	// Sources and Identities are the entries tracked now; they never exceed
	// MaxSources and MaxIdentities.
	Sources    int
	Identities int
	// GlobalTokens is the whole failures left in the global budget as of
	// the most recent call (0 when it is empty or in debt).
	GlobalTokens int
	// FreshTokens is the same for the fresh-source budget.
	FreshTokens int
	// SourceEvictions and IdentityEvictions count entries forgotten to make
	// room. A steady rate of source evictions under failures means
	// MaxSources is too small for the sources failing at once (or someone
	// is spreading failures over very many addresses).
	SourceEvictions   uint64
	IdentityEvictions uint64
}

// Limiter limits failed enrollments. It is safe for concurrent use; every
// method is O(1) under one mutex.
type Limiter struct {
	cfg Config
	// sourceCap and globalCap are the bucket capacities (burst*refill);
	// goodFor is how long a success keeps a source known good.
	sourceCap, globalCap, freshCap, goodFor time.Duration
	seed                                    maphash.Seed

	mu sync.Mutex
	// epoch is the first now seen; times are kept as offsets from it, and
	// now is the latest offset seen, so time never runs backwards here.
	started    bool
	epoch      time.Time
	now        time.Duration
	global     bucket
	fresh      bucket
	sources    lru[sourceState]
	identities lru[identityState]
}

// New returns a Limiter. It copies cfg.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{
		cfg:       cfg,
		sourceCap: time.Duration(cfg.PerSourceBurst) * cfg.PerSourceRefill,
		globalCap: time.Duration(cfg.GlobalBurst) * cfg.GlobalRefill,
		seed:      maphash.MakeSeed(),
	}
	l.goodFor = l.sourceCap
	l.global = bucket{credit: l.globalCap}
	if cfg.FreshBurst > 0 {
		l.freshCap = time.Duration(cfg.FreshBurst) * cfg.FreshRefill
		l.fresh = bucket{credit: l.freshCap}
	}
	l.sources.init(cfg.MaxSources)
	l.identities.init(cfg.MaxIdentities)
	return l, nil
}

// Allow reports whether an Enroll from source may be processed. It refuses
// when the source's failure budget is empty, or when the global budget is
// empty and the source is not known good (it enrolled successfully within
// the last PerSourceBurst*PerSourceRefill). A refusal comes with the time
// until the budget that refused regains a failure, rounded up to 100ms and
// at least MinRetryAfter; callers should add jitter before retrying.
//
// Allow spends nothing and never adds a source to the tracked set, so
// unknown sources cost no memory until they fail or succeed.
func (l *Limiter) Allow(source string, now time.Time) (ok bool, retryAfter time.Duration) {
	v := l.Check(source, now)
	return v.OK, v.RetryAfter
}

// Scope names the budget behind a refusal.
type Scope int

const (
	// ScopeNone: not refused.
	ScopeNone Scope = iota
	// ScopeSource: the source's own failure budget is empty.
	ScopeSource
	// ScopeGlobal: the budget of all sources together is empty, and the
	// source is not known good. The source itself is not to blame.
	ScopeGlobal
)

// Verdict is Check's answer.
type Verdict struct {
	OK bool
	// Scope is the budget that refused (ScopeNone when OK). When both are
	// empty it is ScopeSource: the source would be refused on its own.
	Scope      Scope
	RetryAfter time.Duration
	// NeedsGlobal reports that the source is not known good, so it is
	// admitted only while a shared budget lasts (the fresh one when Fresh).
	// A caller that queues such sources while the budget is spent uses it
	// to let known good sources pass the queue.
	NeedsGlobal bool
	// Fresh reports that the source has no failure on record, so its
	// failure would spend the fresh budget (when there is one).
	Fresh bool
}

// Check is Allow saying which budget refused and whether the global one
// applies to the source. Like Allow it spends and adds nothing.
func (l *Limiter) Check(source string, now time.Time) Verdict {
	h := maphash.String(l.seed, source)
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tick(now)
	var v Verdict
	knownGood := false
	v.Fresh = true
	if s := l.sources.get(h); s != nil {
		s.fill(t, l.sourceCap)
		if w := s.wait(l.cfg.PerSourceRefill); w > 0 {
			v.Scope, v.RetryAfter = ScopeSource, w
		}
		knownGood = t < s.goodUntil
		v.Fresh = !s.failed
	}
	if !knownGood {
		v.NeedsGlobal = true
		b, capacity, refill := l.shared(v.Fresh)
		b.fill(t, capacity)
		if w := b.wait(refill); w > 0 {
			if v.Scope == ScopeNone {
				v.Scope = ScopeGlobal
			}
			v.RetryAfter = max(v.RetryAfter, w)
		}
	}
	if v.Scope == ScopeNone {
		v.OK = true
		return v
	}
	v.RetryAfter = roundRetry(v.RetryAfter)
	return v
}

// shared is the budget a failure of a fresh (or not fresh) source spends.
func (l *Limiter) shared(fresh bool) (b *bucket, capacity, refill time.Duration) {
	if fresh && l.cfg.FreshBurst > 0 {
		return &l.fresh, l.freshCap, l.cfg.FreshRefill
	}
	return &l.global, l.globalCap, l.cfg.GlobalRefill
}

// Tokens is how many whole failures the budget a fresh (or not fresh)
// source spends holds now (0 when it is empty or in debt), and how long
// until it holds one more. A caller that admits requests against a shared
// budget before they fail (and so before RecordFailure spends) uses it to
// admit no more at once than the budget can pay for.
func (l *Limiter) Tokens(fresh bool, now time.Time) (tokens int, next time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, capacity, refill := l.shared(fresh)
	b.fill(l.tick(now), capacity)
	c := b.credit
	if c < 0 {
		return 0, -c + refill
	}
	tokens = int(c / refill)
	if c >= capacity {
		return tokens, refill
	}
	return tokens, refill - c%refill
}

// Refill is how often the budget a fresh (or not fresh) source spends
// regains a failure.
func (l *Limiter) Refill(fresh bool) time.Duration {
	_, _, refill := l.shared(fresh)
	return refill
}

// RecordFailure records a failed Enroll from source (unknown identity, bad
// CSR, anything the caller counts as a guess): it spends one failure from
// the source's budget and one from the global budget, and counts it against
// the hardware identity identityKey. identityKey should be canonical (for
// example the sorted MACs, "|", the BMC serial); "" means do not track.
//
// warn is true when this failure brings the identity's failures within the
// last IdentityWindow to IdentityWarnAfter, at most once per IdentityWindow
// for one identity: later failures in the same window do not warn again,
// and an identity that keeps failing warns again once a window after its
// last warning. count is the identity's failures since it last went a whole
// IdentityWindow without one (so at least IdentityWarnAfter when warn is
// true); it is 0 when identityKey is "".
func (l *Limiter) RecordFailure(source, identityKey string, now time.Time) (warn bool, count int) {
	sh := maphash.String(l.seed, source)
	var ih uint64
	if identityKey != "" {
		ih = maphash.String(l.seed, identityKey)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tick(now)
	s, added := l.sources.getOrAdd(sh)
	if added {
		*s = sourceState{bucket: bucket{credit: l.sourceCap, last: t}}
	}
	b, capacity, refill := l.shared(!s.failed)
	b.fill(t, capacity)
	b.take(refill, capacity)
	s.failed = true
	s.fill(t, l.sourceCap)
	s.take(l.cfg.PerSourceRefill, maxDebt)

	if identityKey == "" {
		return false, 0
	}
	id, added := l.identities.getOrAdd(ih)
	if added {
		id.reset()
	}
	return id.fail(t, l.cfg.IdentityWarnAfter, l.cfg.IdentityWindow)
}

// RecordSuccess records a successful Enroll from source, which makes it
// known good for PerSourceBurst*PerSourceRefill. It spends nothing and
// leaves the source's failure budget as it is.
func (l *Limiter) RecordSuccess(source string, now time.Time) {
	h := maphash.String(l.seed, source)
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tick(now)
	s, added := l.sources.getOrAdd(h)
	if added {
		*s = sourceState{bucket: bucket{credit: l.sourceCap, last: t}}
	}
	s.goodUntil = t + l.goodFor
}

// Stats returns the current counts.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{
		Sources:           l.sources.len(),
		Identities:        l.identities.len(),
		GlobalTokens:      int(max(l.global.credit, 0) / l.cfg.GlobalRefill),
		FreshTokens:       l.freshTokens(),
		SourceEvictions:   l.sources.evictions,
		IdentityEvictions: l.identities.evictions,
	}
}

func (l *Limiter) freshTokens() int {
	if l.cfg.FreshBurst == 0 {
		return 0
	}
	return int(max(l.fresh.credit, 0) / l.cfg.FreshRefill)
}

// tick converts now to the limiter's time: the offset from the first now
// seen, never less than an offset already returned. A clock that steps back
// therefore looks like a clock that stood still until it catches up.
func (l *Limiter) tick(now time.Time) time.Duration {
	if !l.started {
		l.started, l.epoch = true, now
		return 0
	}
	if t := now.Sub(l.epoch); t > l.now {
		l.now = t
	}
	return l.now
}

// roundRetry turns the wait for a token into a retry-after hint.
func roundRetry(d time.Duration) time.Duration {
	d = max(d, MinRetryAfter)
	if r := d % retryAfterStep; r != 0 {
		d += retryAfterStep - r
	}
	return d
}

// bucket is a token bucket kept as banked refill time: it holds
// credit/refill tokens, up to capacity/refill. Negative credit is debt.
type bucket struct {
	credit time.Duration
	last   time.Duration // limiter time of the last fill
}

// fill banks the time elapsed since the last fill, up to capacity. Times
// at or before the last fill add nothing.
func (b *bucket) fill(t, capacity time.Duration) {
	if t <= b.last {
		return
	}
	elapsed := t - b.last
	b.last = t
	if elapsed >= capacity-b.credit {
		b.credit = capacity
	} else {
		b.credit += elapsed
	}
}

// take spends one token (cost), going into debt down to -debtLimit.
func (b *bucket) take(cost, debtLimit time.Duration) {
	b.credit = max(b.credit-cost, -debtLimit)
}

// wait is how long after the last fill until one token (cost) is
// available; 0 if one is available now.
func (b *bucket) wait(cost time.Duration) time.Duration {
	if b.credit >= cost {
		return 0
	}
	return cost - b.credit
}

// sourceState is what is tracked per source address.
type sourceState struct {
	bucket
	goodUntil time.Duration // known good while the limiter time is before this
	failed    bool          // a failure is on record: the source is not fresh
}

// identityState is what is tracked per hardware identity.
type identityState struct {
	recent   []time.Duration // the last IdentityWarnAfter failure times, a ring
	next     int             // index in recent of the oldest, once full
	streak   int             // failures since a whole window without one
	last     time.Duration   // time of the latest failure
	warned   bool
	lastWarn time.Duration
}

func (id *identityState) reset() {
	*id = identityState{recent: id.recent[:0]}
}

func (id *identityState) fail(t time.Duration, warnAfter int, window time.Duration) (warn bool, count int) {
	if id.streak > 0 && t-id.last >= window {
		id.streak = 0
	}
	id.streak++
	id.last = t
	if len(id.recent) < warnAfter {
		id.recent = append(id.recent, t)
	} else {
		id.recent[id.next] = t
		id.next = (id.next + 1) % warnAfter
	}
	// recent[next] is the warnAfter-th most recent failure, this one
	// included: the threshold is reached when it is inside the window.
	reached := len(id.recent) == warnAfter && t-id.recent[id.next] < window
	if reached && (!id.warned || t-id.lastWarn >= window) {
		id.warned, id.lastWarn = true, t
		return true, id.streak
	}
	return false, id.streak
}

// lru is a bounded map from key hashes to values, forgetting the least
// recently used entry to make room.
type lru[V any] struct {
	limit     int
	order     list.List // of *lruEntry[V], most recently used first
	index     map[uint64]*list.Element
	evictions uint64
}

type lruEntry[V any] struct {
	key uint64
	val V
}

func (c *lru[V]) init(limit int) {
	c.limit = limit
	c.index = make(map[uint64]*list.Element)
}

func (c *lru[V]) len() int { return c.order.Len() }

// get returns the value for key, marking it used, or nil.
func (c *lru[V]) get(key uint64) *V {
	e, ok := c.index[key]
	if !ok {
		return nil
	}
	c.order.MoveToFront(e)
	return &e.Value.(*lruEntry[V]).val
}

// getOrAdd returns the value for key, marking it used. When key was not
// there it returns added=true and a value the caller must initialise: a
// zero value, or the evicted entry's value to be reset (reusing it keeps
// an insert at capacity allocation-free).
func (c *lru[V]) getOrAdd(key uint64) (v *V, added bool) {
	if v := c.get(key); v != nil {
		return v, false
	}
	if c.order.Len() >= c.limit {
		e := c.order.Back()
		ent := e.Value.(*lruEntry[V])
		delete(c.index, ent.key)
		c.evictions++
		ent.key = key
		c.order.MoveToFront(e)
		c.index[key] = e
		return &ent.val, true
	}
	ent := &lruEntry[V]{key: key}
	c.index[key] = c.order.PushFront(ent)
	return &ent.val, true
}

// SourceOf returns the rate-limit key for a peer address: the IP without
// port or zone, with IPv4-mapped IPv6 addresses as plain IPv4 ("10.1.2.3").
// IPv6 addresses are keyed whole, not by /64: an HPC cluster network
// usually puts hundreds of nodes in one /64, and a /64 key would let one
// failing node get its registered neighbours refused in a boot storm. A
// host that rotates through the addresses of its /64 is still bounded by
// the global failure budget. It returns "" for nil or an address without
// an IP (a Unix socket); "" is one shared source like any other.
func SourceOf(addr net.Addr) string {
	ip, ok := ipOf(addr)
	if !ok {
		return ""
	}
	return ip.Unmap().WithZone("").String()
}

func ipOf(addr net.Addr) (netip.Addr, bool) {
	var ip net.IP
	switch a := addr.(type) {
	case nil:
		return netip.Addr{}, false
	case *net.TCPAddr:
		if a == nil {
			return netip.Addr{}, false
		}
		ip = a.IP
	case *net.UDPAddr:
		if a == nil {
			return netip.Addr{}, false
		}
		ip = a.IP
	case *net.IPAddr:
		if a == nil {
			return netip.Addr{}, false
		}
		ip = a.IP
	case *net.UnixAddr:
		return netip.Addr{}, false
	default:
		s := addr.String()
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr(), true
		}
		parsed, err := netip.ParseAddr(s)
		return parsed, err == nil
	}
	return netip.AddrFromSlice(ip)
}
