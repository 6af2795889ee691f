package identity

import (
	"context"
	"sync"
	"time"

	"github.com/pact-hpc/pact/internal/clock"
)

// JournalProvider holds the journal-signed identity (the "self-signed"
// provider of ADR-008: the agent's own key, signed by a journal at Enroll or
// RenewCert). The agent makes those calls and puts the result here with Set;
// this type only holds it, checks its expiry and signals changes.
//
// The zero value is ready to use with the system clock; NewJournalProvider
// injects another. It is safe for concurrent use.
type JournalProvider struct {
	clock clock.Clock

	mu      sync.Mutex
	id      *Identity
	reason  string
	changes chan struct{}
}

// NewJournalProvider returns an empty provider that reads time from clk
// (nil: the system clock).
func NewJournalProvider(clk clock.Clock) *JournalProvider {
	return &JournalProvider{clock: clk}
}

// Source returns SourceJournal.
func (p *JournalProvider) Source() Source { return SourceJournal }

// Set makes id the journal identity, replacing any earlier one, and signals
// Changes. The provider keeps a copy whose Source is SourceJournal. Set(nil)
// is Clear("").
func (p *JournalProvider) Set(id *Identity) {
	if id == nil {
		p.Clear("")
		return
	}
	c := *id
	c.Source = SourceJournal
	p.mu.Lock()
	p.id, p.reason = &c, ""
	p.mu.Unlock()
	p.signal()
}

// Clear drops the journal identity (the node was revoked, its renewal was
// refused...) and signals Changes. reason says why, for the error Current
// returns; empty means "not enrolled yet".
func (p *JournalProvider) Clear(reason string) {
	p.mu.Lock()
	p.id, p.reason = nil, reason
	p.mu.Unlock()
	p.signal()
}

// Current returns the identity last Set, unless it has expired.
func (p *JournalProvider) Current(context.Context) (*Identity, error) {
	p.mu.Lock()
	id, reason := p.id, p.reason
	p.mu.Unlock()
	if id == nil {
		if reason == "" {
			reason = "no journal-signed certificate yet (the agent has not enrolled)"
		}
		return nil, Unavailable(SourceJournal, nil, "%s", reason)
	}
	if now := p.now(); id.Expired(now) {
		return nil, Unavailable(SourceJournal, ErrExpired,
			"journal-signed certificate serial %s expired at %s and was not renewed; see the agent's renewal errors",
			id.Serial(), id.NotAfter.UTC().Format(time.RFC3339))
	}
	return id, nil
}

// Changes signals every Set and Clear. See Watcher.
func (p *JournalProvider) Changes() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changesLocked()
}

func (p *JournalProvider) changesLocked() chan struct{} {
	if p.changes == nil {
		p.changes = make(chan struct{}, 1)
	}
	return p.changes
}

func (p *JournalProvider) signal() {
	p.mu.Lock()
	ch := p.changesLocked()
	p.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (p *JournalProvider) now() time.Time {
	if p.clock == nil {
		return time.Now()
	}
	return p.clock.Now()
}
