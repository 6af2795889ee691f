package identity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/logkey"
)

// CascadeConfig configures a Cascade.
type CascadeConfig struct {
	// Providers are the sources to use, at most one per Source, in any
	// order: the cascade ranks them itself (SPIRE > journal > static).
	Providers []Provider
	// ProbeInterval is how often the cascade asks every provider again even
	// without a signal, so an identity that appears or expires without its
	// provider saying so is noticed.
	ProbeInterval time.Duration

	Clock  clock.Clock
	Logger *slog.Logger
}

// DefaultCascadeConfig returns the defaults; Providers is empty.
func DefaultCascadeConfig() CascadeConfig {
	return CascadeConfig{
		ProbeInterval: 5 * time.Second,
		Clock:         clock.Real{},
		Logger:        slog.Default(),
	}
}

// Validate reports every problem at once.
func (c CascadeConfig) Validate() error {
	var errs []error
	if len(c.Providers) == 0 {
		errs = append(errs, errors.New("identity: the cascade needs at least one provider"))
	}
	seen := map[Source]bool{}
	for i, p := range c.Providers {
		if p == nil {
			errs = append(errs, fmt.Errorf("identity: provider %d is nil", i))
			continue
		}
		src := p.Source()
		switch {
		case src.Rank() == 0:
			errs = append(errs, fmt.Errorf("identity: provider %d has unknown source %q (want spire, journal or static)", i, src))
		case seen[src]:
			errs = append(errs, fmt.Errorf("identity: two providers for source %s; give one of each at most", src))
		}
		seen[src] = true
	}
	if c.ProbeInterval <= 0 {
		errs = append(errs, fmt.Errorf("identity: ProbeInterval %v must be positive", c.ProbeInterval))
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("identity: Clock is required"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("identity: Logger is required"))
	}
	return errors.Join(errs...)
}

// Cascade answers with the best identity its providers have now. It is
// itself a Provider and a Watcher. Close it when done.
type Cascade struct {
	providers []Provider // best first
	interval  time.Duration
	clock     clock.Clock
	log       *slog.Logger

	changes chan struct{} // to the user; buffered 1
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once

	mu   sync.Mutex
	last Source // source of the latest answer

	seen *Identity // what the watch loop last saw; only the loop touches it
}

// NewCascade ranks cfg's providers and starts watching them: it fans in the
// change signals of those that are Watchers and asks them all again every
// ProbeInterval.
func NewCascade(cfg CascadeConfig) (*Cascade, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cascade{
		providers: slices.Clone(cfg.Providers),
		interval:  cfg.ProbeInterval,
		clock:     cfg.Clock,
		log:       cfg.Logger,
		changes:   make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
	slices.SortStableFunc(c.providers, func(a, b Provider) int { return b.Source().Rank() - a.Source().Rank() })
	c.seen, _ = c.Best(context.Background())
	var signals []<-chan struct{}
	for _, p := range c.providers {
		if w, ok := p.(Watcher); ok {
			signals = append(signals, w.Changes())
		}
	}
	c.wg.Add(1)
	go c.watch(signals)
	return c, nil
}

// Source returns the source of the cascade's latest answer (from Best,
// Current or its own probes), or "" when that found no identity.
func (c *Cascade) Source() Source {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// Current is Best, so that a Cascade is a Provider.
func (c *Cascade) Current(ctx context.Context) (*Identity, error) { return c.Best(ctx) }

// Best returns the identity of the best-ranked provider that has one now.
// When none has, the error wraps ErrUnavailable (and ErrExpired if any
// provider's certificate expired) and lists every provider's reason; when
// ctx has ended, it is ctx's error.
func (c *Cascade) Best(ctx context.Context) (*Identity, error) {
	var errs noIdentityError
	for _, p := range c.providers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		id, err := p.Current(ctx)
		if err == nil && id == nil {
			err = Unavailable(p.Source(), nil, "the provider returned no identity and no error")
		}
		if err == nil {
			c.setLast(id.Source)
			return id, nil
		}
		errs = append(errs, err)
	}
	c.setLast("")
	return nil, errs
}

// Offer is one provider's answer to the cascade: its identity now, or
// why it has none (an error wrapping ErrUnavailable, or ctx's error).
type Offer struct {
	Source   Source
	Identity *Identity
	Err      error
}

// Offers asks every provider, best first, and returns each answer in
// that order: the cascade's ranking, for a caller that wants more than
// the best identity (the next one to try when the best is refused, what
// each source holds). Best is the first Offer with an Identity. Offers
// does not change Source.
func (c *Cascade) Offers(ctx context.Context) []Offer {
	out := make([]Offer, len(c.providers))
	for i, p := range c.providers {
		out[i].Source = p.Source()
		if err := ctx.Err(); err != nil {
			out[i].Err = err
			continue
		}
		id, err := p.Current(ctx)
		if err == nil && id == nil {
			err = Unavailable(p.Source(), nil, "the provider returned no identity and no error")
		}
		if err == nil {
			out[i].Identity = id
		} else {
			out[i].Err = err
		}
	}
	return out
}

// Changes receives a value whenever Best's answer may have changed: a
// provider signalled, or a periodic probe found a different answer. See
// Watcher for how signals coalesce. It is never closed, not even by Close.
func (c *Cascade) Changes() <-chan struct{} { return c.changes }

// Close stops watching the providers. It does not close them.
func (c *Cascade) Close() error {
	c.once.Do(func() { close(c.stop) })
	c.wg.Wait()
	return nil
}

func (c *Cascade) setLast(s Source) {
	c.mu.Lock()
	c.last = s
	c.mu.Unlock()
}

// watch asks the providers again on every signal of a provider that is a
// Watcher (signals) and every ProbeInterval, and tells the user when the
// answer differs from the last one it saw. One goroutine waits on every
// provider's signals (a goroutine per provider that only passed its
// signals on was a goroutine stack per provider in every agent); a
// provider whose channel is closed is not waited on again.
func (c *Cascade) watch(signals []<-chan struct{}) {
	defer c.wg.Done()
	// cases: stop, the timer, then one per signal channel.
	cases := make([]reflect.SelectCase, 2+len(signals))
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c.stop)}
	for i, ch := range signals {
		cases[2+i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
	}
	for {
		t := c.clock.NewTimer(c.interval)
		cases[1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C())}
		chosen, _, ok := reflect.Select(cases)
		switch {
		case chosen == 0:
			t.Stop()
			return
		case chosen >= 2:
			t.Stop()
			if !ok {
				cases[chosen].Chan = reflect.Value{} // closed: never chosen again
				continue
			}
		}
		c.reevaluate()
	}
}

func (c *Cascade) reevaluate() {
	id, err := c.Best(context.Background())
	prev := c.seen
	if id == prev {
		return
	}
	c.seen = id
	switch {
	case id == nil:
		c.log.Warn("no identity available", logkey.Err, err, logkey.Previous, prev)
	case prev == nil || prev.Source != id.Source:
		c.log.Info("identity source changed", logkey.Identity, id, logkey.Previous, prev)
	default:
		c.log.Debug("identity changed", logkey.Identity, id, logkey.Previous, prev)
	}
	select {
	case c.changes <- struct{}{}:
	default:
	}
}
