// Each identity source as the operator sees it: what it offers now, and
// the last identity it gave up, when and why (pact-agent status). An
// identity given up while the channel streams on it (a SPIRE SVID near its
// end that SPIRE did not rotate, the Workload API gone past its grace, a
// registration entry deleted) is logged once as a warning, with its expiry
// and the identity the agent falls back to.

package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/logkey"
)

// ReasonIdentityGivenUp: an identity source stopped offering the identity
// it had (an SVID SPIRE did not rotate before its end, a Workload API gone
// past its grace, a certificate expired or dropped). It shows in
// `pact-agent status` only: no attempt failed, so it is not counted in
// pact_agent_cert_renewal_failures_total.
const ReasonIdentityGivenUp = "identity_given_up"

// SourceStatus is one identity source in Status.
type SourceStatus struct {
	// Source is spire, journal or static.
	Source string `json:"source"`
	// Serial and NotAfter are the identity it offers now (empty: none).
	Serial   string    `json:"serial,omitempty"`
	NotAfter time.Time `json:"not_after,omitzero"`
	// Unavailable is why it offers none now.
	Unavailable string `json:"unavailable,omitempty"`
	// LastFailure is why it last gave an identity up (LastFailureSerial),
	// at LastFailureAt; empty if it never did since the agent started.
	LastFailure       string    `json:"last_failure,omitempty"`
	LastFailureSerial string    `json:"last_failure_serial,omitempty"`
	LastFailureAt     time.Time `json:"last_failure_at,omitzero"`
}

// sourceRecord is what the agent remembers of one source between steps.
type sourceRecord struct {
	held   *identity.Identity // the identity it offered when last looked at
	failed *identity.Identity // the identity it last gave up
	msg    string             // why
	at     time.Time
}

// noteSources looks at every source at the start of a step and records
// each identity a source gave up since the last look. One that the live
// channel presents is the agent's last failure too (cert_expired if it
// has expired, identity_given_up otherwise), and is logged as a
// warning with what the agent falls back to (the step's move does it).
func (a *Agent) noteSources(ctx context.Context, act *channel.Channel, now time.Time) {
	all := a.offers(ctx)
	if ctx.Err() != nil {
		return
	}
	offers := make([]*identity.Identity, len(all))
	errs := make([]error, len(all))
	for i, o := range all {
		offers[i], errs[i] = o.Identity, o.Err
	}
	for i, o := range all {
		src := o.Source
		a.mu.Lock()
		if a.sources == nil {
			a.sources = map[identity.Source]*sourceRecord{}
		}
		rec := a.sources[src]
		if rec == nil {
			rec = &sourceRecord{}
			a.sources[src] = rec
		}
		prev := rec.held
		if errs[i] == nil && offers[i] != nil {
			rec.held = offers[i]
			a.mu.Unlock()
			continue
		}
		rec.held = nil
		if prev == nil || errs[i] == nil {
			a.mu.Unlock()
			continue
		}
		rec.failed, rec.msg, rec.at = prev, errs[i].Error(), now
		// Only a live channel moves away from it; a channel whose stream
		// ended is replaced by a connect, whose own failures say why.
		active := act != nil && act.StreamAlive() && idKey(act.Identity()) == idKey(prev)
		if active {
			reason := ReasonIdentityGivenUp
			if prev.Expired(now) {
				reason = ReasonCertExpired
			}
			a.failure = failureRecord{reason: reason, op: "identity " + string(src), msg: rec.msg, at: now}
		}
		a.mu.Unlock()
		if !active {
			a.log.Info("identity source gave its identity up", logkey.Identity, prev, logkey.Reason, rec.msg)
			continue
		}
		a.log.Warn(fmt.Sprintf("%s identity given up; moving the channel to the next identity", src),
			logkey.Identity, prev, logkey.Reason, rec.msg, logkey.FallBackTo, fallbackText(offers[i+1:], now))
	}
}

// fallbackText names the identity the agent falls back to: the best
// lower-ranked offer but the bootstrap identity, which never replaces a
// live channel (wanted).
func fallbackText(lower []*identity.Identity, now time.Time) string {
	for _, id := range lower {
		if id != nil && id.Source != identity.SourceStatic && !id.Expired(now) {
			return fmt.Sprintf("%s serial %s, not after %s", id.Source, id.Serial(), id.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	return "none yet: the channel stays until the journal ends it; the agent then connects with what it has, or enrolls"
}

// sourceStatus reports every source, best first.
func (a *Agent) sourceStatus(ctx context.Context) []SourceStatus {
	var out []SourceStatus
	for _, o := range a.offers(ctx) {
		st := SourceStatus{Source: string(o.Source)}
		if o.Identity != nil {
			st.Serial, st.NotAfter = o.Identity.Serial(), o.Identity.NotAfter
		} else if o.Err != nil {
			st.Unavailable = o.Err.Error()
		}
		a.mu.Lock()
		if rec := a.sources[o.Source]; rec != nil && rec.failed != nil {
			st.LastFailure, st.LastFailureSerial, st.LastFailureAt = rec.msg, rec.failed.Serial(), rec.at
		}
		a.mu.Unlock()
		out = append(out, st)
	}
	return out
}
