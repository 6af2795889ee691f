package identity_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
)

// stub is a provider whose identity the test sets. It is not a Watcher: the
// cascade learns of its changes only by probing.
type stub struct {
	src identity.Source
	mu  sync.Mutex
	id  *identity.Identity
}

func (s *stub) Source() identity.Source { return s.src }

func (s *stub) Current(context.Context) (*identity.Identity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id == nil {
		return nil, identity.Unavailable(s.src, nil, "%s is off", s.src)
	}
	return s.id, nil
}

func (s *stub) set(id *identity.Identity) {
	s.mu.Lock()
	s.id = id
	s.mu.Unlock()
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newCascade(t *testing.T, clk *fakeclock.Clock, log *slog.Logger, ps ...identity.Provider) *identity.Cascade {
	t.Helper()
	cfg := identity.DefaultCascadeConfig()
	cfg.Providers, cfg.Clock, cfg.Logger = ps, clk, log
	c, err := identity.NewCascade(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The tests that wait on the cascade's goroutines run in a synctest
// bubble: synctest.Wait returns once every goroutine in it is blocked, so
// a signal that is coming has come, and one that has not come never will.

// signalled says the cascade has signalled a change once it has settled.
func signalled(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	synctest.Wait()
	select {
	case <-ch:
	default:
		t.Fatalf("no change signalled: %s", what)
	}
}

// noSignal says the cascade has signalled nothing once it has settled.
func noSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	synctest.Wait()
	select {
	case <-ch:
		t.Fatalf("unexpected change signal: %s", what)
	default:
	}
}

// probing says the cascade, once settled, waits on exactly one probe timer.
func probing(t *testing.T, clk *fakeclock.Clock, what string) {
	t.Helper()
	synctest.Wait()
	if n := clk.Timers(); n != 1 {
		t.Fatalf("%d timers pending, want the probe's: %s", n, what)
	}
}

// TestCascadeOrder tries every combination of available providers, each
// given to the cascade in a different order.
func TestCascadeOrder(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	sources := []identity.Source{identity.SourceSPIRE, identity.SourceJournal, identity.SourceStatic}
	ids := map[identity.Source]*identity.Identity{}
	for _, s := range sources {
		ids[s] = ca.Issue(s, nodeID, t0, t0.Add(time.Hour))
	}
	for mask := 0; mask < 8; mask++ {
		var avail []string
		var want identity.Source
		stubs := make([]identity.Provider, 3)
		for i, s := range sources {
			st := &stub{src: s}
			if mask&(1<<i) != 0 {
				st.set(ids[s])
				avail = append(avail, string(s))
				if want == "" {
					want = s
				}
			}
			stubs[(i+mask)%3] = st // a different order each time
		}
		name := strings.Join(avail, "+")
		if name == "" {
			name = "none"
		}
		t.Run(name, func(t *testing.T) {
			c := newCascade(t, fakeclock.New(t0), quiet, stubs...)
			id, err := c.Best(context.Background())
			if want == "" {
				if id != nil || !errors.Is(err, identity.ErrUnavailable) || errors.Is(err, identity.ErrExpired) {
					t.Fatalf("Best = %v, %v; want ErrUnavailable", id, err)
				}
				wantMsg := "identity: no provider has an identity (spire: spire is off; journal: journal is off; static: static is off)"
				if err.Error() != wantMsg {
					t.Errorf("error = %q\nwant    %q", err, wantMsg)
				}
				var pe *identity.ProviderError
				if !errors.As(err, &pe) || pe.Source != identity.SourceSPIRE {
					t.Errorf("errors.As ProviderError = %v", pe)
				}
				if c.Source() != "" {
					t.Errorf("Source = %q after no identity", c.Source())
				}
				return
			}
			if err != nil || id != ids[want] {
				t.Fatalf("Best = %v, %v; want %s's identity", id, err, want)
			}
			if cur, err := c.Current(context.Background()); err != nil || cur != id {
				t.Errorf("Current = %v, %v; want Best's answer", cur, err)
			}
			if c.Source() != want {
				t.Errorf("Source = %q, want %q", c.Source(), want)
			}
		})
	}
}

func TestCascadeExpiredFallsBack(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	clk := fakeclock.New(t0)
	jp := identity.NewJournalProvider(clk)
	jp.Set(ca.Issue(identity.SourceJournal, nodeID, t0.Add(-time.Hour), t0.Add(time.Minute)))
	st := &stub{src: identity.SourceStatic}
	c := newCascade(t, clk, quiet, st, jp)

	if id, err := c.Best(context.Background()); err != nil || id.Source != identity.SourceJournal {
		t.Fatalf("Best = %v, %v; want journal", id, err)
	}
	clk.Advance(time.Minute + time.Second)
	_, err := c.Best(context.Background())
	if !errors.Is(err, identity.ErrUnavailable) || !errors.Is(err, identity.ErrExpired) {
		t.Fatalf("Best with the only identity expired = %v; want ErrUnavailable and ErrExpired", err)
	}
	if !strings.Contains(err.Error(), "expired at 2026-03-17T12:01:00Z") {
		t.Errorf("error does not say when: %v", err)
	}
	boot := ca.Issue(identity.SourceStatic, "", t0, t0.Add(24*time.Hour))
	st.set(boot)
	if id, err := c.Best(context.Background()); err != nil || id != boot {
		t.Fatalf("Best = %v, %v; want the static identity", id, err)
	}
}

// TestCascadeChanges: a Watcher's signal reaches the cascade's Changes at
// once; a provider that is not a Watcher is noticed by the periodic probe;
// a probe that finds nothing new stays quiet; expiry is noticed by a probe.
func TestCascadeChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ca := identitytest.NewCA("pact.local", t0)
		clk := fakeclock.New(t0)
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		spire := &stub{src: identity.SourceSPIRE}
		jp := identity.NewJournalProvider(clk)
		st := &stub{src: identity.SourceStatic}
		boot := ca.Issue(identity.SourceStatic, "", t0, t0.Add(24*time.Hour))
		st.set(boot)
		c := newCascade(t, clk, log, jp, st, spire)
		ctx := context.Background()

		// The journal provider is a Watcher: Set is signalled without a probe.
		jid := ca.Issue(identity.SourceJournal, nodeID, t0, t0.Add(time.Hour))
		jp.Set(jid)
		signalled(t, c.Changes(), "journal identity set")
		if id, _ := c.Best(ctx); id == nil || id.Source != identity.SourceJournal || id.Serial() != jid.Serial() {
			t.Fatalf("Best = %v; want the journal identity", id)
		}

		// SPIRE appears without a signal: only the probe notices.
		probing(t, clk, "the cascade waits to probe")
		sid := ca.Issue(identity.SourceSPIRE, nodeID, t0, t0.Add(time.Hour))
		spire.set(sid)
		noSignal(t, c.Changes(), "before the probe")
		clk.Advance(5 * time.Second)
		signalled(t, c.Changes(), "probe found SPIRE")
		if id, _ := c.Best(ctx); id != sid {
			t.Fatalf("Best = %v; want SPIRE's", id)
		}

		// A probe that finds the same answer signals nothing.
		probing(t, clk, "the cascade waits to probe")
		clk.Advance(5 * time.Second)
		probing(t, clk, "the probe is done and re-armed")
		noSignal(t, c.Changes(), "probe with nothing new")

		// SPIRE goes, the journal certificate expires: the probe falls back to
		// the bootstrap identity.
		spire.set(nil)
		clk.Advance(time.Hour + time.Second)
		signalled(t, c.Changes(), "probe after expiry")
		if id, _ := c.Best(ctx); id != boot {
			t.Fatalf("Best = %v; want the bootstrap identity", id)
		}

		// Clear is signalled too; the answer (static) did not change, but the
		// cascade may say so: a spurious signal is allowed, a missed one is not.
		jp.Clear("node revoked")
		if _, err := jp.Current(ctx); err == nil || !strings.Contains(err.Error(), "node revoked") {
			t.Errorf("journal Current after Clear = %v", err)
		}

		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		out := logs.String()
		for _, want := range []string{"identity source changed", "identity.source=journal", "identity.source=spire", "identity.source=static"} {
			if !strings.Contains(out, want) {
				t.Errorf("logs lack %q:\n%s", want, out)
			}
		}
		for _, id := range []*identity.Identity{boot, jid, sid} {
			for _, s := range secrets(t, id.Key) {
				if strings.Contains(out, s) {
					t.Fatalf("logs contain private key material")
				}
			}
		}
	})
}

func TestCascadeValidate(t *testing.T) {
	cfg := identity.CascadeConfig{Providers: []identity.Provider{
		nil,
		&stub{src: identity.SourceSPIRE},
		&stub{src: identity.SourceSPIRE},
		&stub{src: "vault"},
	}}
	_, err := identity.NewCascade(cfg)
	if err == nil {
		t.Fatal("NewCascade accepted a bad config")
	}
	for _, want := range []string{"provider 0 is nil", "two providers for source spire", `unknown source "vault"`, "ProbeInterval", "Clock is required", "Logger is required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error lacks %q:\n%v", want, err)
		}
	}
	if err := (identity.CascadeConfig{}).Validate(); err == nil || !strings.Contains(err.Error(), "at least one provider") {
		t.Errorf("empty config: %v", err)
	}
	if err := identity.DefaultCascadeConfig().Validate(); err == nil {
		t.Error("DefaultCascadeConfig has no providers but validates")
	}
}

func TestJournalProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ca := identitytest.NewCA("pact.local", t0)
		clk := fakeclock.New(t0)
		ctx := context.Background()

		var zero identity.JournalProvider // the zero value works
		if _, err := zero.Current(ctx); !errors.Is(err, identity.ErrUnavailable) || !strings.Contains(err.Error(), "not enrolled") {
			t.Errorf("empty Current = %v", err)
		}

		jp := identity.NewJournalProvider(clk)
		// An identity made for another source is held as the journal's.
		in := ca.Issue(identity.SourceStatic, nodeID, t0, t0.Add(time.Hour))
		jp.Set(in)
		signalled(t, jp.Changes(), "Set")
		got, err := jp.Current(ctx)
		if err != nil || got.Source != identity.SourceJournal || got.Serial() != in.Serial() || in.Source != identity.SourceStatic {
			t.Fatalf("Current = %v, %v (input now %v)", got, err, in)
		}
		clk.Advance(time.Hour + time.Second)
		if _, err := jp.Current(ctx); !errors.Is(err, identity.ErrExpired) || !errors.Is(err, identity.ErrUnavailable) {
			t.Errorf("expired Current = %v", err)
		}
		jp.Set(nil)
		signalled(t, jp.Changes(), "Set(nil)")
		if _, err := jp.Current(ctx); !errors.Is(err, identity.ErrUnavailable) {
			t.Errorf("after Set(nil) Current = %v", err)
		}
	})
}

func ExampleCascade() {
	ca := identitytest.NewCA("pact.local", time.Now())
	journal := identity.NewJournalProvider(clock.Real{})

	cfg := identity.DefaultCascadeConfig()
	cfg.Providers = []identity.Provider{journal} // plus spire.New(...) and static.New(...)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cascade, err := identity.NewCascade(cfg)
	if err != nil {
		panic(err)
	}
	defer cascade.Close()

	ctx := context.Background()
	_, err = cascade.Best(ctx)
	fmt.Println(err)

	// The agent enrolled: it hands the journal-signed identity over.
	journal.Set(ca.Issue(identity.SourceJournal, "spiffe://pact.local/pact-agent/n1", time.Now(), time.Now().Add(time.Hour)))
	<-cascade.Changes()
	id, _ := cascade.Best(ctx)
	fmt.Println(id.Source, id.SPIFFEID)
	// Output:
	// identity: no provider has an identity (journal: no journal-signed certificate yet (the agent has not enrolled))
	// journal spiffe://pact.local/pact-agent/n1
}

// Offers answers for every provider, best first whatever the order they
// were given in, each with its identity or its reason: the cascade's one
// ranking, for a caller that tries the next identity when the best is
// refused. Best is the first offer with an identity.
func TestCascadeOffers(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	sp := &stub{src: identity.SourceSPIRE}
	jp := &stub{src: identity.SourceJournal}
	st := &stub{src: identity.SourceStatic}
	jp.set(ca.Issue(identity.SourceJournal, nodeID, t0, t0.Add(time.Hour)))
	st.set(ca.Issue(identity.SourceStatic, nodeID, t0, t0.Add(time.Hour)))
	c := newCascade(t, fakeclock.New(t0), quiet, st, sp, jp)

	offers := c.Offers(context.Background())
	var got []string
	for _, o := range offers {
		s := string(o.Source) + "="
		switch {
		case o.Identity != nil && o.Err == nil:
			s += string(o.Identity.Source)
		case o.Identity == nil && errors.Is(o.Err, identity.ErrUnavailable):
			s += "unavailable"
		default:
			s += fmt.Sprintf("%v/%v", o.Identity, o.Err)
		}
		got = append(got, s)
	}
	if want := "spire=unavailable journal=journal static=static"; strings.Join(got, " ") != want {
		t.Errorf("Offers = %s, want %s", strings.Join(got, " "), want)
	}
	if best, err := c.Best(context.Background()); err != nil || best != offers[1].Identity {
		t.Errorf("Best = %v, %v; want the first offer with an identity", best, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, o := range c.Offers(ctx) {
		if o.Identity != nil || !errors.Is(o.Err, context.Canceled) {
			t.Errorf("offer of %s after ctx ended = %v, %v", o.Source, o.Identity, o.Err)
		}
	}
}
