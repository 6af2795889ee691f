package agent

import (
	"crypto/x509"
	"errors"
	"sync/atomic"
	"time"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/logkey"
)

// Clock skew. Diskless nodes often boot before NTP has set their clock. A
// journal's certificate (and the agent's own, fresh from the journal) is
// valid on the journal's clock, so an agent whose clock is off would refuse
// a good certificate, or fail its health check. Within ClockBridge the agent
// runs its certificate decisions on the journal's time instead: its own
// clock plus an offset it learns from the journal's answers (Enroll's and
// RenewCert's server_time, Ping's through the health check). It reports the
// skew as a warning and as pact_agent_clock_skew_seconds; beyond ClockBridge
// it refuses and classifies the failure as clock_skew.

// skewResolution is the offset change worth making: answers carry the
// journal's time a round trip late, and certificates are backdated by a
// minute anyway.
const skewResolution = 30 * time.Second

// skewClock is the agent's clock plus the learned offset to the journal's.
// Timers are the base clock's: durations do not depend on the offset.
type skewClock struct {
	base   clock.Clock
	offset atomic.Int64 // journal - local, nanoseconds
	// measured is the last skew observed (local - journal), for the metric.
	measured atomic.Int64
}

func (c *skewClock) Now() time.Time                       { return c.base.Now().Add(c.Offset()) }
func (c *skewClock) NewTimer(d time.Duration) clock.Timer { return c.base.NewTimer(d) }

// Offset is what the agent adds to its own clock to get the journal's.
func (c *skewClock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// observeJournalTime takes the journal's time from an answer. It returns
// true when it changed the offset (the caller retries at once), and a
// *channel.ClockSkewError when the skew is beyond what the agent bridges
// and beyond the configured tolerance.
func (a *Agent) observeJournalTime(journal time.Time) (bool, error) {
	if journal.IsZero() {
		return false, nil
	}
	local := a.clk.base.Now()
	skew := local.Sub(journal) // local - journal
	a.clk.measured.Store(int64(skew))
	resid := local.Add(a.clk.Offset()).Sub(journal)
	switch {
	case abs(resid) <= skewResolution:
		return false, nil
	case abs(skew) <= a.cfg.ClockBridge:
		a.clk.offset.Store(int64(-skew))
		a.log.Warn("this node's clock differs from the journal's; using the journal's time for certificates (fix NTP on this node)",
			logkey.Skew, skew.Round(time.Second), logkey.Local, local.UTC().Format(time.RFC3339), logkey.Journal, journal.UTC().Format(time.RFC3339), logkey.Bridge, a.cfg.ClockBridge)
		return true, nil
	case abs(resid) <= a.cfg.MaxClockSkew:
		return false, nil // tolerated by configuration
	}
	return false, &channel.ClockSkewError{Local: local, Journal: journal, Skew: skew, Tolerance: a.cfg.ClockBridge}
}

// bridge looks at a failure for what it says about the journal's time: a
// health check that measured the skew, or a server certificate not valid
// at the agent's time. It reports whether it changed the offset, so the
// operation is worth retrying at once.
func (a *Agent) bridge(err error) bool {
	var cs *channel.ClockSkewError
	if errors.As(err, &cs) {
		// cs.Local is the agent's bridged time: undo the offset.
		changed, _ := a.observeJournalTime(cs.Journal.Add(a.clk.Offset() - (cs.Local.Sub(a.clk.base.Now()))))
		return changed
	}
	var inv x509.CertificateInvalidError
	if !errors.As(err, &inv) || inv.Reason != x509.Expired || inv.Cert == nil || inv.Cert.IsCA {
		return false
	}
	// The journal's server certificate is backdated by a minute from the
	// journal's clock when it was made, and is replaced long before it
	// expires: the journal's time is at least NotBefore plus a minute, and
	// before NotAfter. The estimate gets the agent as far as the journal's
	// first answer, which carries its exact time.
	now := a.clk.Now()
	var est time.Time
	switch {
	case now.Before(inv.Cert.NotBefore):
		est = inv.Cert.NotBefore.Add(time.Minute)
	case now.After(inv.Cert.NotAfter):
		est = inv.Cert.NotAfter.Add(-time.Minute)
	default:
		return false
	}
	changed, _ := a.observeJournalTime(est)
	return changed
}
