// The roots a new channel trusts for the journal's server certificate: the
// configured ones (--ca), which never change, and those the latest trust
// bundle a journal streamed adds, so a running agent follows a root
// rollover (docs/rollover.md) without a reboot.

package channel

import (
	"bytes"
	"crypto/x509"
	"slices"
	"sync"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
)

// rootSet is the configured roots and the roots learned from the latest
// trust bundle. Safe for concurrent use.
type rootSet struct {
	static  []*x509.Certificate
	domains map[string]bool // the configured roots' SPIFFE trust domains ("" for a root without one)

	mu      sync.Mutex
	learned []*x509.Certificate // not in static; in the order of the bundle
	foreign []string            // fingerprints of the latest bundle's roots of another domain
}

func newRootSet(static []*x509.Certificate) *rootSet {
	s := &rootSet{static: slices.Clone(static), domains: map[string]bool{}}
	for _, c := range static {
		s.domains[trustDomain(c)] = true
	}
	return s
}

// trustDomain is the host of a certificate's spiffe:// URI SAN, "" if it
// has none.
func trustDomain(c *x509.Certificate) string {
	for _, u := range c.URIs {
		if u.Scheme == "spiffe" {
			return u.Host
		}
	}
	return ""
}

// rootChange is what one trust bundle changed in the learned roots.
type rootChange struct {
	added, removed []*x509.Certificate
	// foreign are the bundle's roots of a trust domain no configured root
	// has, left out; newForeign is whether that list differs from the
	// previous bundle's (it is worth a log line then, not at every stream).
	foreign    []*x509.Certificate
	newForeign bool
}

func (c rootChange) changed() bool { return len(c.added) > 0 || len(c.removed) > 0 }

// learn makes the learned roots the roots of bundle: its self-signed CA
// certificates of a configured root's trust domain that are not configured
// roots. A root the previous bundle had and this one lacks is no longer
// trusted; a configured root always is.
func (s *rootSet) learn(bundle []*x509.Certificate) rootChange {
	var next, foreign []*x509.Certificate
	for _, c := range bundle {
		if !c.IsCA || !bytes.Equal(c.RawSubject, c.RawIssuer) || contains(s.static, c) || contains(next, c) {
			continue
		}
		if !s.domains[trustDomain(c)] {
			foreign = append(foreign, c)
			continue
		}
		next = append(next, c)
	}
	var ch rootChange
	ch.foreign = foreign
	fps := fingerprints(foreign)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range next {
		if !contains(s.learned, c) {
			ch.added = append(ch.added, c)
		}
	}
	for _, c := range s.learned {
		if !contains(next, c) {
			ch.removed = append(ch.removed, c)
		}
	}
	ch.newForeign = len(fps) > 0 && !slices.Equal(fps, s.foreign)
	s.learned, s.foreign = next, fps
	return ch
}

// all is the configured roots, then the learned ones.
func (s *rootSet) all() []*x509.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(slices.Clone(s.static), s.learned...)
}

func contains(certs []*x509.Certificate, c *x509.Certificate) bool {
	return slices.ContainsFunc(certs, func(o *x509.Certificate) bool { return o.Equal(c) })
}

// fingerprints are the certificates' SHA-256 fingerprints
// (pki.CertFingerprint, as openssl prints them), for logs.
func fingerprints(certs []*x509.Certificate) []string {
	out := make([]string, 0, len(certs))
	for _, c := range certs {
		out = append(out, pki.CertFingerprint(c))
	}
	return out
}

// LearnBundle takes a journal's trust bundle, received on an authenticated
// stream (Config.OnEvent sees it): from now on, channels the rotator builds
// also trust its roots (self-signed CA certificates of a configured root's
// trust domain), and no longer trust a root an earlier bundle added that
// this one lacks (it was withdrawn). The configured roots (Config.Roots)
// are always trusted. Channels already built are not touched. It logs,
// at INFO, when the set of trusted roots changes, and returns whether it did.
func (r *Rotator) LearnBundle(bundle []*x509.Certificate) bool {
	ch := r.roots.learn(bundle)
	if ch.newForeign {
		r.log.Warn("the journal's trust bundle holds roots of another trust domain; not trusting them",
			logkey.RootsRefused, fingerprints(ch.foreign), logkey.RootsTrusted, fingerprints(r.roots.all()))
	}
	if !ch.changed() {
		return false
	}
	r.log.Info("trusted roots changed by the journal's trust bundle", logkey.RootsAdded, fingerprints(ch.added),
		logkey.RootsRemoved, fingerprints(ch.removed), logkey.RootsTrusted, fingerprints(r.roots.all()))
	return true
}

// Roots are the roots a channel built now trusts besides its identity's
// bundle: Config.Roots, then those the latest trust bundle added.
func (r *Rotator) Roots() []*x509.Certificate { return r.roots.all() }
