package journal

import (
	"crypto/x509"
	"sync"
	"time"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/raftfsm"
)

// bundleCache is the trust bundle (the roots, then the live journal CAs,
// then the live intermediates), rebuilt when an intermediate is published
// and at least once a minute so expired ones drop out.
type bundleCache struct {
	roots []*x509.Certificate
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
	der [][]byte // roots first, then live journal CAs, then live intermediates
	// live maps a live intermediate's serial to its chain up to the root:
	// the intermediate, then the journal CA that signed it (none for one
	// the root signed, in the legacy layout).
	live map[string][][]byte
	// journalCAs maps a live journal CA's serial to its DER.
	journalCAs map[string][]byte
	// intermediates holds the live journal CAs and intermediates for chain
	// verification (never a certificate a client sent); parsed the same,
	// for the handshake's signature walk.
	intermediates *x509.CertPool
	parsed        []*x509.Certificate
	// version changes whenever the set of journal CAs or intermediates
	// changes, so a stream knows when to resend.
	version uint64
}

func newBundleCache(roots []*x509.Certificate, fsm *raftfsm.FSM, c clock.Clock) *bundleCache {
	return &bundleCache{roots: roots, fsm: fsm, clock: c}
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
	jcas := b.fsm.JournalCAsAt(now.UnixNano())
	b.next = time.Time{}
	for _, in := range inters {
		if at := in.GetRevokeAtUnixNano(); at != 0 && (b.next.IsZero() || at < b.next.UnixNano()) {
			b.next = time.Unix(0, at)
		}
	}
	next := &trustBundle{
		der:           make([][]byte, 0, len(b.roots)+len(jcas)+len(inters)),
		live:          make(map[string][][]byte, len(inters)),
		journalCAs:    make(map[string][]byte, len(jcas)),
		intermediates: x509.NewCertPool(),
	}
	for _, r := range b.roots {
		next.der = append(next.der, r.Raw)
	}
	for _, jc := range jcas {
		c, err := x509.ParseCertificate(jc.GetDer())
		if err != nil {
			continue // a journal published garbage; it cannot verify anything
		}
		next.der = append(next.der, jc.GetDer())
		next.journalCAs[jc.GetSerial()] = jc.GetDer()
		next.intermediates.AddCert(c)
		next.parsed = append(next.parsed, c)
	}
	for _, in := range inters {
		c, err := x509.ParseCertificate(in.GetDer())
		if err != nil {
			continue
		}
		chain := [][]byte{in.GetDer()}
		if issuer := in.GetIssuerSerial(); issuer != "" {
			jc, ok := next.journalCAs[issuer]
			if !ok {
				continue // its journal CA is revoked or expired: so is it
			}
			chain = append(chain, jc)
		}
		next.der = append(next.der, in.GetDer())
		next.live[in.GetSerial()] = chain
		next.intermediates.AddCert(c)
		next.parsed = append(next.parsed, c)
	}
	next.version = 1
	if b.cur != nil {
		next.version = b.cur.version
		if !sameKeys(b.cur.live, next.live) || !sameKeys(b.cur.journalCAs, next.journalCAs) {
			next.version++
		}
	}
	b.cur, b.built = next, now
	return next
}

func sameKeys[V any](a, b map[string]V) bool {
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
