// Package tpmchallenge keeps a journal's pending TPM credential-activation
// challenges between the two rounds of an Enroll: in memory only (a
// challenge's secret must never reach Raft or disk), bounded, single-use,
// and expiring on the time the caller passes in.
//
// Like journal/ratelimit it is a pure function of the times given to it:
// no goroutines, no timers, no clock. A challenge is live until its
// expiry; after that it is kept for one more TTL as a tombstone, so a late
// answer is told it was late (ErrExpired) rather than that it is unknown.
// Taking a challenge removes it whatever the outcome, so an answer (right or
// wrong) can be tried once. A challenge exists only on the journal that
// issued it: an answer that reaches another journal (or this one after a
// restart) is ErrUnknown, and the agent starts over with round one.
package tpmchallenge

import (
	"container/list"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Sentinel errors.
var (
	// ErrFull: too many challenges are pending; retry later.
	ErrFull = errors.New("tpmchallenge: too many pending TPM challenges")
	// ErrUnknown: no such challenge here: already answered (a replay),
	// issued by another journal, or forgotten after a restart.
	ErrUnknown = errors.New("tpmchallenge: unknown or already answered TPM challenge")
	// ErrExpired: the answer came after the challenge's TTL.
	ErrExpired = errors.New("tpmchallenge: TPM challenge expired")
)

// Config bounds the store.
type Config struct {
	// TTL is how long an agent has to answer.
	TTL time.Duration
	// MaxPending bounds the challenges (and tombstones) held at once.
	MaxPending int
	// MaxPerNode bounds the live challenges of one node: a new one evicts
	// the node's oldest. Round one costs the caller nothing (a storm of
	// TPM nodes must not drain the failure limiter), so without this bound
	// whoever knows one node's identifiers could fill the store and block
	// every other TPM node's enrollment on this journal.
	MaxPerNode int
}

// DefaultConfig: 30 s is far more than a TPM needs for one
// ActivateCredential (tens of milliseconds to a second) plus a round trip;
// 4,096 covers a boot storm of that many nodes in round one at once on one
// journal, at about 200 bytes each.
func DefaultConfig() Config { return Config{TTL: 30 * time.Second, MaxPending: 4096, MaxPerNode: 4} }

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.TTL <= 0 {
		errs = append(errs, fmt.Errorf("tpmchallenge: TTL %v must be positive", c.TTL))
	}
	if c.MaxPending <= 0 {
		errs = append(errs, fmt.Errorf("tpmchallenge: MaxPending %d must be positive", c.MaxPending))
	}
	if c.MaxPerNode <= 0 {
		errs = append(errs, fmt.Errorf("tpmchallenge: MaxPerNode %d must be positive", c.MaxPerNode))
	}
	return errors.Join(errs...)
}

// Pending is what a challenge was issued for. The round-two answer must
// come for the same node, EK, AK and CSR key.
type Pending struct {
	NodeID string
	EKHash string
	AKName []byte
	// SPKI is the hex SHA-256 of the CSR's SubjectPublicKeyInfo.
	SPKI string
	// Secret is the credential's plaintext; never logged.
	Secret []byte
	// QuoteNonce is the nonce the round-two quote must carry.
	QuoteNonce []byte
}

// String keeps the secret out of any log or error that is handed a Pending.
func (p Pending) String() string {
	return fmt.Sprintf("tpm challenge for node %s (EK %s)", p.NodeID, p.EKHash)
}

type entry struct {
	id      string
	p       Pending
	expires time.Time
}

// Store holds pending challenges. Safe for concurrent use.
type Store struct {
	cfg   Config
	mu    sync.Mutex
	byID  map[string]*list.Element
	order *list.List // oldest first; TTL is fixed, so also by expiry
}

// New makes a store.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{cfg: cfg, byID: map[string]*list.Element{}, order: list.New()}, nil
}

// Put stores p and returns a fresh random id and when it expires. When the
// store is full even after dropping every expired challenge, it returns
// ErrFull and the time after which the oldest live one expires.
func (s *Store) Put(now time.Time, p Pending) (id string, expires time.Time, err error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", time.Time{}, err
	}
	id = hex.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune(now.Add(-s.cfg.TTL))
	if s.liveCount(now, p.NodeID) >= s.cfg.MaxPerNode {
		s.evictOldestOf(now, p.NodeID)
	}
	if s.order.Len() >= s.cfg.MaxPending {
		// Tombstones go first: a late answer then reads "unknown".
		s.prune(now)
	}
	if s.order.Len() >= s.cfg.MaxPending {
		oldest := s.order.Front().Value.(*entry)
		return "", oldest.expires, fmt.Errorf("%w (%d); retry in %v", ErrFull, s.cfg.MaxPending, oldest.expires.Sub(now).Round(time.Second))
	}
	e := &entry{id: id, p: p, expires: now.Add(s.cfg.TTL)}
	s.byID[id] = s.order.PushBack(e)
	return id, e.expires, nil
}

// prune drops entries that expired before cutoff.
func (s *Store) prune(cutoff time.Time) {
	for f := s.order.Front(); f != nil; f = s.order.Front() {
		e := f.Value.(*entry)
		if !e.expires.Before(cutoff) {
			return
		}
		s.remove(f)
	}
}

func (s *Store) remove(el *list.Element) {
	e := el.Value.(*entry)
	clear(e.p.Secret)
	delete(s.byID, e.id)
	s.order.Remove(el)
}

// liveCount is how many of node's challenges are still live at now.
func (s *Store) liveCount(now time.Time, node string) int {
	n := 0
	for el := s.order.Back(); el != nil; el = el.Prev() {
		e := el.Value.(*entry)
		if e.expires.Before(now) {
			break // older ones expired too
		}
		if e.p.NodeID == node {
			n++
		}
	}
	return n
}

// evictOldestOf drops node's oldest live challenge.
func (s *Store) evictOldestOf(now time.Time, node string) {
	for el := s.order.Front(); el != nil; el = el.Next() {
		e := el.Value.(*entry)
		if e.p.NodeID == node && !e.expires.Before(now) {
			s.remove(el)
			return
		}
	}
}

// Take removes the challenge id and returns it if it is still live. The
// caller owns the returned secret (a copy) and should clear it.
func (s *Store) Take(now time.Time, id string) (Pending, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byID[id]
	if !ok {
		return Pending{}, ErrUnknown
	}
	e := el.Value.(*entry)
	p := e.p
	p.Secret = append([]byte(nil), e.p.Secret...)
	p.AKName = append([]byte(nil), e.p.AKName...)
	expires := e.expires
	s.remove(el)
	if now.After(expires) {
		clear(p.Secret)
		return Pending{}, fmt.Errorf("%w %v ago", ErrExpired, now.Sub(expires).Round(time.Millisecond))
	}
	return p, nil
}

// Len is how many challenges and tombstones the store holds.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}
