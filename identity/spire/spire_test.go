package spire_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/identity/spire"
	"github.com/pact-hpc/pact/identity/spire/spiretest"
	"github.com/pact-hpc/pact/identity/static"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/polltest"
)

var t0 = time.Date(2026, 3, 17, 12, 0, 0, 0, time.UTC)

const (
	nodeID = "spiffe://pact.local/pact-agent/n1"
	grace  = 10 * time.Second
)

// logBuffer collects log lines from many goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func newProvider(t *testing.T, addr string, clk *fakeclock.Clock, grace time.Duration, log *slog.Logger) *spire.Provider {
	t.Helper()
	cfg := spire.DefaultConfig()
	cfg.Socket, cfg.LostGrace, cfg.Clock, cfg.Logger = addr, grace, clk, log
	cfg.RetryMin, cfg.RetryMax = 5*time.Millisecond, 50*time.Millisecond
	p, err := spire.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func issue(ca *identitytest.CA) *identity.Identity {
	return ca.Issue(identity.SourceSPIRE, nodeID, t0.Add(-time.Hour), t0.Add(time.Hour))
}

// waitFor waits, bounded, until cond holds: it checks again on every signal
// from wake and every few milliseconds.
func waitFor(t *testing.T, wake <-chan struct{}, what string, cond func() bool) {
	t.Helper()
	polltest.UntilWoken(t, wake, 20*time.Second, 5*time.Millisecond, cond, "timed out waiting for %s", what)
}

func waitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("no change signalled: %s", what)
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func best(c *identity.Cascade) *identity.Identity {
	id, _ := c.Best(context.Background())
	return id
}

func is(c *identity.Cascade, src identity.Source, serial string) func() bool {
	return func() bool {
		id := best(c)
		return id != nil && id.Source == src && (serial == "" || id.Serial() == serial)
	}
}

// TestCascadeFollowsSPIRE walks a node through SPIRE being there, rotating,
// going away and coming back, with and without a journal certificate to
// fall back on.
func TestCascadeFollowsSPIRE(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	var logs logBuffer
	log := logs.logger()
	ctx := context.Background()

	srv := spiretest.New(t)
	svid1 := issue(ca)
	srv.SetSVID(svid1)
	srv.Start()

	spClk := fakeclock.New(t0) // drives the SPIRE provider's grace
	sp := newProvider(t, srv.Addr(), spClk, grace, log)

	boot := ca.Issue(identity.SourceStatic, "spiffe://pact.local/pact-bootstrap/image", t0.Add(-time.Hour), t0.Add(24*time.Hour))
	files := identitytest.WriteFiles(t, t.TempDir(), boot)
	casClk := fakeclock.New(t0) // drives the cascade's probe and the other expiries
	scfg := static.DefaultConfig()
	scfg.CertFile, scfg.KeyFile, scfg.BundleFile, scfg.Clock = files.Cert, files.Key, files.Bundle, casClk
	st, err := static.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	jp := identity.NewJournalProvider(casClk)

	ccfg := identity.DefaultCascadeConfig()
	ccfg.Providers, ccfg.Clock, ccfg.Logger = []identity.Provider{st, sp, jp}, casClk, log
	cas, err := identity.NewCascade(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cas.Close()

	// SPIRE is there: the cascade picks its SVID, with its bundle.
	waitFor(t, cas.Changes(), "the first SVID", is(cas, identity.SourceSPIRE, svid1.Serial()))
	id := best(cas)
	if id.SPIFFEID != nodeID || len(id.Bundle) != 1 || !id.Bundle[0].Equal(ca.Cert) || !identity.KeyMatches(id.Chain[0], id.Key) {
		t.Fatalf("SPIRE identity %v: bundle %d", id, len(id.Bundle))
	}
	if _, err := id.Chain[0].Verify(x509.VerifyOptions{Roots: id.BundlePool(), CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("SVID does not verify against its bundle: %v", err)
	}

	// SPIRE rotates the SVID: Changes fires and the new serial is served.
	drain(cas.Changes())
	svid2 := issue(ca)
	srv.SetSVID(svid2)
	waitSignal(t, cas.Changes(), "rotation")
	waitFor(t, cas.Changes(), "the rotated SVID", is(cas, identity.SourceSPIRE, svid2.Serial()))
	if cur, err := sp.Current(ctx); err != nil || cur.Serial() != svid2.Serial() {
		t.Fatalf("provider Current = %v, %v; want serial %s", cur, err, svid2.Serial())
	}

	// The SPIRE agent dies. Within the grace the SVID is still served;
	// after it the cascade falls back to the bootstrap identity (no journal
	// certificate yet).
	srv.Stop()
	if !spClk.WaitForTimers(1, 20*time.Second) {
		t.Fatal("the provider did not notice the stream break")
	}
	if !is(cas, identity.SourceSPIRE, svid2.Serial())() {
		t.Fatalf("within the grace Best = %v; want the SVID still", best(cas))
	}
	drain(cas.Changes())
	spClk.Advance(grace)
	waitSignal(t, cas.Changes(), "SPIRE given up")
	waitFor(t, cas.Changes(), "fallback to static", is(cas, identity.SourceStatic, boot.Serial()))
	_, err = sp.Current(ctx)
	if !errors.Is(err, identity.ErrUnavailable) || !strings.Contains(err.Error(), "stream lost") || !strings.Contains(err.Error(), srv.Addr()) {
		t.Errorf("provider Current after the grace = %v", err)
	}

	// It comes back with a new SVID: the cascade upgrades.
	svid3 := issue(ca)
	srv.SetSVID(svid3)
	srv.Start()
	waitSignal(t, cas.Changes(), "SPIRE back")
	waitFor(t, cas.Changes(), "upgrade to SPIRE", is(cas, identity.SourceSPIRE, svid3.Serial()))

	// Now the agent also holds a journal certificate; SPIRE still wins.
	jid := ca.Issue(identity.SourceJournal, nodeID, t0.Add(-time.Hour), t0.Add(72*time.Hour))
	jp.Set(jid)
	if !is(cas, identity.SourceSPIRE, svid3.Serial())() {
		t.Fatalf("Best = %v; SPIRE should outrank the journal", best(cas))
	}

	// SPIRE dies again: this time the fallback is the journal certificate.
	srv.Stop()
	if !spClk.WaitForTimers(1, 20*time.Second) {
		t.Fatal("the provider did not notice the second stream break")
	}
	spClk.Advance(grace)
	waitFor(t, cas.Changes(), "fallback to the journal", is(cas, identity.SourceJournal, jid.Serial()))

	// And back once more, with the same SVID it had.
	drain(cas.Changes())
	srv.Start()
	waitSignal(t, cas.Changes(), "SPIRE back again")
	waitFor(t, cas.Changes(), "upgrade to SPIRE again", is(cas, identity.SourceSPIRE, svid3.Serial()))

	if err := cas.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{"SPIRE SVID received", "SPIRE Workload API stream lost", "identity source changed", "identity.source=static", "identity.source=journal"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q", want)
		}
	}
	for _, id := range []*identity.Identity{svid1, svid2, svid3, boot, jid} {
		if strings.Contains(out, base64.StdEncoding.EncodeToString(identitytest.KeyPKCS8(id.Key))[8:48]) {
			t.Fatal("logs contain private key material")
		}
	}
}

// TestSPIREAbsentAtStart: New does not wait for SPIRE; Current says the
// socket is not reachable; an agent that appears later is picked up.
func TestSPIREAbsentAtStart(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	var logs logBuffer
	srv := spiretest.New(t) // not started: nothing listens on its socket
	clk := fakeclock.New(t0)

	start := time.Now()
	sp := newProvider(t, srv.Addr(), clk, grace, logs.logger())
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("New took %v without SPIRE", d)
	}
	_, err := sp.Current(context.Background())
	if !errors.Is(err, identity.ErrUnavailable) {
		t.Fatalf("Current = %v; want ErrUnavailable", err)
	}
	var last error
	waitFor(t, nil, "the reason", func() bool {
		_, last = sp.Current(context.Background())
		return last != nil && strings.Contains(last.Error(), "not reachable")
	})
	want := "identity: spire: no SVID (agent socket " + srv.Addr() + " not reachable: "
	if !strings.HasPrefix(last.Error(), want) || !strings.HasSuffix(last.Error(), "; start spire-agent there or set --spire-socket)") {
		t.Errorf("error = %q\nwant it to start %q", last, want)
	}
	waitFor(t, nil, "the absence of SPIRE logged", func() bool {
		return strings.Contains(logs.String(), noAgent)
	})

	svid := issue(ca)
	srv.SetSVID(svid)
	srv.Start()
	waitSignal(t, sp.Changes(), "SPIRE appeared")
	waitFor(t, sp.Changes(), "the SVID", func() bool {
		id, err := sp.Current(context.Background())
		return err == nil && id.Serial() == svid.Serial()
	})
	out := logs.String()
	if n := strings.Count(out, noAgent); n != 1 {
		t.Errorf("absence logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "SPIRE Workload API still not reachable"); n > 1 {
		t.Errorf("the same failure logged %d times at debug, want once at most:\n%s", n, out)
	}
}

// noAgent is what the provider logs, once, when no SPIRE agent answers.
const noAgent = "msg=\"no SPIRE agent answers at the socket; going on without SPIRE"

// TestSPIRENoEntry: an agent that has no registration entry for the caller
// answers PermissionDenied, and the error says what to do.
func TestSPIRENoEntry(t *testing.T) {
	srv := spiretest.New(t)
	srv.Start() // no SetSVID: no entry
	sp := newProvider(t, srv.Addr(), fakeclock.New(t0), grace, slog.New(slog.DiscardHandler))
	waitFor(t, nil, "PermissionDenied", func() bool {
		_, err := sp.Current(context.Background())
		return err != nil && strings.Contains(err.Error(), "no registration entry")
	})
}

// TestSPIREZeroGrace: with no grace the SVID is given up, and Changes
// fires, as soon as the stream breaks.
func TestSPIREZeroGrace(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	srv := spiretest.New(t)
	srv.SetSVID(issue(ca))
	srv.Start()
	sp := newProvider(t, srv.Addr(), fakeclock.New(t0), 0, slog.New(slog.DiscardHandler))
	waitFor(t, sp.Changes(), "the SVID", func() bool { _, err := sp.Current(context.Background()); return err == nil })
	drain(sp.Changes())
	srv.Stop()
	waitSignal(t, sp.Changes(), "stream lost")
	if _, err := sp.Current(context.Background()); !errors.Is(err, identity.ErrUnavailable) {
		t.Fatalf("Current = %v; want ErrUnavailable at once", err)
	}
}

// TestSPIRESVIDExpires: an SVID SPIRE fails to rotate stops being served at
// its not_after although the stream is up.
func TestSPIRESVIDExpires(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	srv := spiretest.New(t)
	svid := issue(ca)
	srv.SetSVID(svid)
	srv.Start()
	clk := fakeclock.New(t0)
	sp := newProvider(t, srv.Addr(), clk, grace, slog.New(slog.DiscardHandler))
	waitFor(t, sp.Changes(), "the SVID", func() bool { _, err := sp.Current(context.Background()); return err == nil })
	clk.Advance(time.Hour + time.Second)
	_, err := sp.Current(context.Background())
	if !errors.Is(err, identity.ErrExpired) || !errors.Is(err, identity.ErrUnavailable) || !strings.Contains(err.Error(), svid.Serial()) {
		t.Fatalf("Current = %v; want ErrExpired naming serial %s", err, svid.Serial())
	}
}

// TestSPIREEntryDeleted: a SPIRE agent that is up and answers "no identity
// issued" (the registration entry was deleted) is no restart to ride out:
// the SVID is given up at once, grace or not, and the error says why.
func TestSPIREEntryDeleted(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	srv := spiretest.New(t)
	srv.SetSVID(issue(ca))
	srv.Start()
	sp := newProvider(t, srv.Addr(), fakeclock.New(t0), time.Hour, slog.New(slog.DiscardHandler))
	waitFor(t, sp.Changes(), "the SVID", func() bool { _, err := sp.Current(context.Background()); return err == nil })
	drain(sp.Changes())
	srv.SetSVID(nil)
	waitSignal(t, sp.Changes(), "entry deleted")
	_, err := sp.Current(context.Background())
	if !errors.Is(err, identity.ErrUnavailable) || !strings.Contains(err.Error(), "no registration entry") {
		t.Fatalf("Current = %v; want ErrUnavailable at once, saying there is no registration entry", err)
	}
}

// TestSPIREEntryDeletedLogs: the deletion is logged once, as what it is;
// the retries that follow, each answered PermissionDenied by a SPIRE agent
// that is up, log nothing about SPIRE being absent. When SPIRE then goes
// away, that is told once too.
func TestSPIREEntryDeletedLogs(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	var logs logBuffer
	srv := spiretest.New(t)
	srv.SetSVID(issue(ca))
	srv.Start()
	sp := newProvider(t, srv.Addr(), fakeclock.New(t0), grace, logs.logger())
	waitFor(t, sp.Changes(), "the SVID", func() bool { _, err := sp.Current(context.Background()); return err == nil })
	calls := srv.Calls()
	srv.SetSVID(nil)
	waitFor(t, nil, "five retries refused", func() bool { return srv.Calls() >= calls+5 })
	out := logs.String()
	if n := strings.Count(out, "SPIRE issues no identity for this process any more"); n != 1 {
		t.Errorf("the deletion logged %d times, want once:\n%s", n, out)
	}
	for _, wrong := range []string{"no SPIRE agent", "no SVID from SPIRE", "stream lost"} {
		if strings.Contains(out, wrong) {
			t.Errorf("with SPIRE up and the entry deleted, the log says %q:\n%s", wrong, out)
		}
	}
	srv.Stop()
	waitFor(t, nil, "SPIRE's absence logged", func() bool { return strings.Contains(logs.String(), noAgent) })
}

// TestSPIRENoEntryLogs: an agent with no entry for pact-agent from the
// start is logged once as a warning that says what to do, not as an
// absent SPIRE agent.
func TestSPIRENoEntryLogs(t *testing.T) {
	var logs logBuffer
	srv := spiretest.New(t)
	srv.Start()
	newProvider(t, srv.Addr(), fakeclock.New(t0), grace, logs.logger())
	waitFor(t, nil, "five calls refused", func() bool { return srv.Calls() >= 5 })
	out := logs.String()
	if n := strings.Count(out, "level=WARN msg=\"no SVID from SPIRE"); n != 1 || !strings.Contains(out, "register pact-agent with spire-server entry create") {
		t.Errorf("no entry logged %d times, want once with what to do:\n%s", n, out)
	}
	if strings.Contains(out, "no SPIRE agent") {
		t.Errorf("the log says there is no SPIRE agent; there is one:\n%s", out)
	}
}

// TestSPIRERestartWithinGrace: a SPIRE agent that restarts (its socket
// removed and made anew, 5 s later) within the grace is reached again as
// soon as its new socket appears, not after the Workload API client's and
// gRPC's backoffs, which together can outlast the grace: the SVID is never
// given up. Here those backoffs are an hour, so only the socket poll can
// bring the stream back in time (with SocketPoll 0 this test fails).
func TestSPIRERestartWithinGrace(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	var logs logBuffer
	srv := spiretest.New(t)
	svid := issue(ca)
	srv.SetSVID(svid)
	srv.Start()
	clk := fakeclock.New(t0)
	cfg := spire.DefaultConfig()
	cfg.Socket, cfg.Clock, cfg.Logger = srv.Addr(), clk, logs.logger()
	cfg.RetryMin, cfg.RetryMax = time.Hour, time.Hour
	sp, err := spire.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Close() })
	serving := func() bool {
		id, err := sp.Current(context.Background())
		return err == nil && id.Serial() == svid.Serial()
	}
	waitFor(t, sp.Changes(), "the SVID", serving)

	srv.Stop()
	if !clk.WaitForTimers(2, 20*time.Second) {
		t.Fatal("the provider set no grace timer and no socket poll")
	}
	clk.Advance(5 * time.Second) // SPIRE takes 5 s to restart; the polls find no socket
	if !clk.WaitForTimers(2, 20*time.Second) {
		t.Fatal("the socket poll was not set again")
	}
	if !serving() {
		t.Fatal("the SVID was given up within the grace")
	}
	drain(sp.Changes())
	srv.Start()
	clk.Advance(cfg.SocketPoll)
	waitSignal(t, sp.Changes(), "the SVID again, from the restarted SPIRE agent")
	waitFor(t, sp.Changes(), "the stream back", func() bool { return strings.Count(logs.String(), "SPIRE SVID received") == 2 })

	clk.Advance(cfg.LostGrace) // past the grace of the loss: nothing is given up
	if !serving() {
		t.Fatalf("after the restart and past the grace: %v", func() error { _, err := sp.Current(context.Background()); return err }())
	}
	out := logs.String()
	if !strings.Contains(out, "SPIRE agent socket made anew; connecting again") || strings.Contains(out, "did not come back within the grace") {
		t.Errorf("log:\n%s", out)
	}
}

// TestSPIRESVIDNearExpiry: an SVID SPIRE has not rotated is given up
// ExpiryMargin before its not_after, while it is still valid, so the agent
// moves to its standby before the journal closes the SVID's stream.
func TestSPIRESVIDNearExpiry(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	srv := spiretest.New(t)
	svid := issue(ca)
	srv.SetSVID(svid)
	srv.Start()
	clk := fakeclock.New(t0)
	sp := newProvider(t, srv.Addr(), clk, grace, slog.New(slog.DiscardHandler))
	waitFor(t, sp.Changes(), "the SVID", func() bool { _, err := sp.Current(context.Background()); return err == nil })
	giveUp := sp.GiveUpAt(svid)
	if want := svid.NotAfter.Add(-spire.DefaultConfig().ExpiryMargin); !giveUp.Equal(want) {
		t.Fatalf("GiveUpAt = %v, want %v", giveUp, want)
	}
	clk.Advance(giveUp.Sub(clk.Now()) - time.Second)
	if _, err := sp.Current(context.Background()); err != nil {
		t.Fatalf("a second before the margin: %v", err)
	}
	clk.Advance(time.Second)
	_, err := sp.Current(context.Background())
	if !errors.Is(err, identity.ErrUnavailable) || errors.Is(err, identity.ErrExpired) || !strings.Contains(err.Error(), "given up") || !strings.Contains(err.Error(), svid.Serial()) {
		t.Fatalf("Current = %v; want unavailable (not expired) naming serial %s", err, svid.Serial())
	}
}

func TestSPIREClose(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	srv := spiretest.New(t)
	srv.SetSVID(issue(ca))
	srv.Start()
	sp := newProvider(t, srv.Addr(), fakeclock.New(t0), grace, slog.New(slog.DiscardHandler))
	waitFor(t, sp.Changes(), "the SVID", func() bool { _, err := sp.Current(context.Background()); return err == nil })
	if srv.Streams() != 1 {
		t.Errorf("%d streams open, want 1", srv.Streams())
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sp.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := sp.Current(context.Background()); !errors.Is(err, identity.ErrUnavailable) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Current after Close = %v", err)
	}
	waitFor(t, nil, "the stream to close", func() bool { return srv.Streams() == 0 })
}

func TestValidate(t *testing.T) {
	cfg := spire.Config{Socket: "http://spire", LostGrace: -time.Second, ExpiryMargin: -time.Second, RetryMin: 0, RetryMax: time.Second, SocketPoll: -time.Second}
	err := cfg.Validate()
	for _, want := range []string{`--spire-socket "http://spire"`, "LostGrace", "ExpiryMargin", "RetryMin", "SocketPoll", "Clock is required", "Logger is required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error lacks %q: %v", want, err)
		}
	}
	if err := spire.DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
	if spire.DefaultConfig().Socket != "unix:///run/spire/agent.sock" {
		t.Errorf("default socket %q", spire.DefaultConfig().Socket)
	}
	if _, err := spire.New(spire.Config{}); err == nil {
		t.Error("New accepted an empty config")
	}
}
