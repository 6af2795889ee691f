package auth

import (
	"bytes"
	"crypto/x509"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/pki"
)

// A client chain is leaf, intermediate, journal CA, root. Verifying it with
// x509 checks three signatures, but only the leaf's changes from one agent
// to the next: in a boot or renewal storm every new connection's first
// call verified the same intermediate's and journal CA's signatures again
// (two thirds of verifyClient, a fifth of a millisecond per agent).
//
// fastVerify splits the verification in two: the intermediate as x509
// verifies it up to a root (remembered per trust-bundle version while
// every certificate above the leaf is valid: upperChains), and the leaf as
// x509 verifies it with that intermediate as its anchor. What the two
// x509 calls do not see of the whole chain (the journal CA's and root's
// path length, name constraints and policies as they bear on the leaf, the
// intermediate's being a CA) is checked here, and only in the plain case
// every pact agent certificate is: a single URI SAN matching a permitted
// URI domain exactly, no policies anywhere. Anything else, and every
// failure, goes through the whole chain's x509 verification as before, so
// this path only ever accepts what that one accepts, and every refusal
// keeps its reason. FuzzFastVerifyMatchesX509 checks that against x509 on
// random chains.
//
// The one signature left, the leaf's, the connection's TLS handshake has
// just checked under the same issuer: when it says so (leafSigs, by the
// exact DER of both), the leaf is verified by x509 alone and the issuer's
// rules on it are checked here as those of the CAs above it are
// (verifiedAlone), and a new connection's first call costs no signature
// check at all.

// upperChains remembers, for the live intermediates of one bundle version,
// the chains x509 verified from each up to a root.
type upperChains struct {
	mu      sync.Mutex
	version uint64
	// m is keyed by the intermediate's DER: the journal parses its bundle
	// afresh every minute without changing its version.
	m map[string]*upperChain
}

type upperChain struct {
	chains      [][]*x509.Certificate // intermediate first, a root last
	from, until time.Time             // when every certificate of them is valid
	anchor      *x509.CertPool        // the intermediate alone
	// shaped[kind][i] reports whether chains[i] is, above the leaf, a
	// chain of a shape kind may have (caprofile.CheckChainAboveLeaf: the
	// journal CA's profile among it), checked once here rather than per
	// leaf.
	shaped map[string][]bool
}

// shapeKinds are the kinds of leaf fastVerify may be asked about.
var shapeKinds = []string{pki.KindAgent, pki.KindJournal, pki.KindAdmin}

// get returns the verified chains above issuer, at bundle version and now,
// or nil when x509 does not verify it (the caller takes the full path).
// Each chain's shape, for each kind of leaf, in domain is checked once, as
// the chain is remembered.
func (u *upperChains) get(issuer *x509.Certificate, bundle Intermediates, roots *x509.CertPool, domain string, now time.Time) *upperChain {
	u.mu.Lock()
	if u.version != bundle.Version || u.m == nil {
		u.version, u.m = bundle.Version, map[string]*upperChain{}
	}
	uc := u.m[string(issuer.Raw)]
	u.mu.Unlock()
	if uc != nil && !now.Before(uc.from) && now.Before(uc.until) {
		return uc
	}
	chains, err := issuer.Verify(x509.VerifyOptions{Roots: roots, Intermediates: bundle.Pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return nil
	}
	uc = &upperChain{chains: chains, from: issuer.NotBefore, until: issuer.NotAfter, anchor: x509.NewCertPool(), shaped: make(map[string][]bool, len(shapeKinds))}
	for _, kind := range shapeKinds {
		ok := make([]bool, len(chains))
		for i, c := range chains {
			ok[i] = caprofile.CheckChainAboveLeaf(kind, c, domain) == nil
		}
		uc.shaped[kind] = ok
	}
	for _, c := range chains {
		for _, cert := range c[1:] {
			if cert.NotBefore.After(uc.from) {
				uc.from = cert.NotBefore
			}
			if cert.NotAfter.Before(uc.until) {
				uc.until = cert.NotAfter
			}
		}
	}
	uc.anchor.AddCert(issuer)
	u.mu.Lock()
	if u.version == bundle.Version {
		u.m[string(issuer.Raw)] = uc
	}
	u.mu.Unlock()
	return uc
}

// fastVerify returns the verified chain of leaf (leaf first, a root last)
// of a shape kind may have, or nil when the caller must verify the whole
// chain with x509 (see above).
func (a *Authenticator) fastVerify(leaf *x509.Certificate, kind string, bundle Intermediates, now time.Time) []*x509.Certificate {
	host, ok := plainLeafHost(leaf)
	if !ok {
		return nil
	}
	issuer := issuerIn(leaf, bundle.Certs)
	if issuer == nil || !issuer.BasicConstraintsValid || !issuer.IsCA || hasPolicies(issuer) {
		return nil
	}
	uc := a.upper.get(issuer, bundle, a.roots, a.cfg.Domain, now)
	if uc == nil {
		return nil
	}
	// first is the first CA of up (below) whose rules on the leaf are
	// checked here: the issuer's are x509's when it verifies the leaf
	// under it, and this code's when the handshake's check of the leaf's
	// signature stands in for that verification (leafSigs).
	first := 1
	if a.signed.take(leaf, issuer) {
		if !verifiedAlone(leaf, issuer, now) {
			return nil
		}
		first = 0
	} else if _, err := leaf.Verify(x509.VerifyOptions{Roots: uc.anchor, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil
	}
next:
	for i, up := range uc.chains {
		// The chain's shape (ChainShape, of which the leaf plays no part:
		// the journal CA's profile, each intermediate's path length 0),
		// checked when the chain was remembered.
		if shaped := uc.shaped[kind]; i >= len(shaped) || !shaped[i] {
			continue
		}
		// up[j] has j intermediates below it in the whole chain (one more
		// than when up was verified): its path length, and its name
		// constraints and policies, bear on the leaf too.
		for j := first; j < len(up); j++ {
			c := up[j]
			if c.BasicConstraintsValid && c.MaxPathLen >= 0 && j > c.MaxPathLen {
				continue next
			}
			if !uriConstraintsAdmit(c, host) || hasPolicies(c) {
				continue next
			}
		}
		return append([]*x509.Certificate{leaf}, up...)
	}
	return nil
}

// verifiedAlone is leaf.Verify with issuer as its anchor, less the check
// of the leaf's signature (a handshake made it: leafSigs) and of the
// issuer's name constraints and path length (fastVerify's loop checks
// them, as it does those of the CAs above). x509 still checks the leaf
// itself (critical extensions, validity at now, extended key usage), with
// the leaf as its own anchor. The rest of what it would check of the
// issuer as anchor holds already: its validity at now and its extended
// key usage (upperChains verified them, and is used only inside that
// validity), that it is the CA the leaf names (issuerIn), that neither
// carries policies (fastVerify); and that it is not the leaf over again
// (the same subject and key) is checked here.
func verifiedAlone(leaf, issuer *x509.Certificate, now time.Time) bool {
	if bytes.Equal(leaf.RawSubject, issuer.RawSubject) && bytes.Equal(leaf.RawSubjectPublicKeyInfo, issuer.RawSubjectPublicKeyInfo) {
		return false
	}
	self := x509.NewCertPool()
	self.AddCert(leaf)
	_, err := leaf.Verify(x509.VerifyOptions{Roots: self, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}

// plainLeafHost returns the host of leaf's one URI SAN when that is the
// only name it carries and it has no policies: what the journal's CA
// signs for an agent, and what name constraints of the CAs above can be
// checked against here without x509.
func plainLeafHost(leaf *x509.Certificate) (string, bool) {
	if len(leaf.URIs) != 1 || len(leaf.DNSNames) != 0 || len(leaf.IPAddresses) != 0 || len(leaf.EmailAddresses) != 0 || hasPolicies(leaf) {
		return "", false
	}
	u := leaf.URIs[0]
	host := strings.ToLower(u.Host)
	if host == "" || u.User != nil || strings.ContainsAny(host, ":[]") {
		return "", false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return "", false
	}
	return host, true
}

// issuerIn returns the one certificate of certs named as leaf's issuer
// (issuedBy, the handshake's rule), or nil when there is none or more than
// one.
func issuerIn(leaf *x509.Certificate, certs []*x509.Certificate) *x509.Certificate {
	var found *x509.Certificate
	for _, c := range certs {
		if !issuedBy(leaf, c) {
			continue
		}
		if found != nil {
			return nil
		}
		found = c
	}
	return found
}

// uriConstraintsAdmit reports whether ca's name constraints admit a leaf
// whose only name is a URI with host: each excluded URI domain is a
// subdomain constraint (".pact.local", as the journal CA excludes) that
// host is not under, and either no domain is permitted or one equal to
// host is. (The other kinds of constraint bear on names of their own
// kind, which the leaf has none of.) Anything less plain is left to x509.
func uriConstraintsAdmit(ca *x509.Certificate, host string) bool {
	for _, d := range ca.ExcludedURIDomains {
		// A leading period excludes names with at least one more label:
		// host is under it only if it ends with it.
		if len(d) < 2 || d[0] != '.' || strings.HasSuffix(host, strings.ToLower(d)) {
			return false
		}
	}
	if len(ca.PermittedURIDomains) == 0 {
		return true
	}
	for _, d := range ca.PermittedURIDomains {
		if d != "" && strings.ToLower(d) == host {
			return true
		}
	}
	return false
}

// hasPolicies reports whether c carries anything RFC 5280's policy
// processing looks at.
func hasPolicies(c *x509.Certificate) bool {
	return len(c.Policies) > 0 || len(c.PolicyIdentifiers) > 0 || len(c.PolicyMappings) > 0 ||
		c.RequireExplicitPolicy > 0 || c.RequireExplicitPolicyZero ||
		c.InhibitPolicyMapping > 0 || c.InhibitPolicyMappingZero ||
		c.InhibitAnyPolicy > 0 || c.InhibitAnyPolicyZero
}
