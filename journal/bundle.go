package journal

import (
	"crypto/x509"
	"sync"
	"time"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/raftfsm"
)

// bundleCache is the trust bundle (root + live intermediates), rebuilt when
// an intermediate is published and at least once a minute so expired ones
// drop out.
type bundleCache struct {
	root  *x509.Certificate
	fsm   *raftfsm.FSM
	clock clock.Clock

	mu    sync.Mutex
	built time.Time
	// next is when a retiring intermediate turns revoked: the bundle is
	// rebuilt then, not up to a minute later.
	next time.Time
	cur  *trustBundle
}

// trustBundle is one immutable version of the bundle.
type trustBundle struct {
	der  [][]byte          // root first, then live intermediates
	live map[string][]byte // intermediate serial -> DER
	// intermediates holds the live intermediates for chain verification;
	// parsed the same, for the handshake's signature walk.
	intermediates *x509.CertPool
	parsed        []*x509.Certificate
	// version changes whenever the set of intermediates changes, so a
	// stream knows when to resend.
	version uint64
}

func newBundleCache(root *x509.Certificate, fsm *raftfsm.FSM, c clock.Clock) *bundleCache {
	return &bundleCache{root: root, fsm: fsm, clock: c}
}

func (b *bundleCache) invalidate() {
	b.mu.Lock()
	b.built = time.Time{}
	b.mu.Unlock()
}

// get returns the current bundle. Callers must not modify it.
func (b *bundleCache) get() *trustBundle {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur != nil && !b.built.IsZero() && now.Sub(b.built) <= time.Minute && !now.Before(b.built) && (b.next.IsZero() || now.Before(b.next)) {
		return b.cur
	}
	inters := b.fsm.IntermediatesAt(now.UnixNano())
	b.next = time.Time{}
	for _, in := range inters {
		if at := in.GetRevokeAtUnixNano(); at != 0 && (b.next.IsZero() || at < b.next.UnixNano()) {
			b.next = time.Unix(0, at)
		}
	}
	next := &trustBundle{der: make([][]byte, 0, 1+len(inters)), live: make(map[string][]byte, len(inters)), intermediates: x509.NewCertPool()}
	next.der = append(next.der, b.root.Raw)
	for _, in := range inters {
		c, err := x509.ParseCertificate(in.GetDer())
		if err != nil {
			continue // a journal published garbage; it cannot verify anything
		}
		next.der = append(next.der, in.GetDer())
		next.live[in.GetSerial()] = in.GetDer()
		next.intermediates.AddCert(c)
		next.parsed = append(next.parsed, c)
	}
	next.version = 1
	if b.cur != nil {
		next.version = b.cur.version
		if !sameSerials(b.cur.live, next.live) {
			next.version++
		}
	}
	b.cur, b.built = next, now
	return next
}

func sameSerials(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}
