package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/asn1"
	"math/big"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/pki"
)

// FuzzFastVerifyMatchesX509 is the differential proof of the chain fast
// path (upperchain.go, leafsig.go): on random chains (a journal CA or
// none, an intermediate under an intermediate; name constraints as the
// profile has them, absent, for another domain, wider or narrower; path
// lengths 0, 1 or none; CAs that are no CAs, cannot sign certificates,
// carry policies or the wrong extended key usage; leaves naming another
// domain, a subdomain, a second name, signed by the wrong key or the
// wrong CA; certificates expired or not yet valid; bundles missing a CA
// or holding a look-alike; with and without the handshake's record of the
// leaf's signature, at two times on one Authenticator), whatever the fast
// path accepts, x509.Verify of the whole chain accepts, with the same
// chain, of a shape pact accepts (ChainShape). The fast path may decline
// (the caller then runs x509 itself), except on the plain chain of every
// agent, which it must take: it exists for that chain.
func FuzzFastVerifyMatchesX509(f *testing.F) {
	f.Add([]byte{})                          // the plain chain
	f.Add([]byte{1})                         // legacy: intermediate under the root
	f.Add([]byte{2})                         // an intermediate under the intermediate
	f.Add([]byte{0, 1, 0, 0})                // an operator
	f.Add([]byte{0, 0, 1})                   // the journal CA unconstrained
	f.Add([]byte{0, 0, 2, 0, 0, 0, 1})       // the journal CA for another domain; the intermediate unconstrained
	f.Add([]byte{0, 0, 0, 1})                // the journal CA of path length 0
	f.Add([]byte{1, 0, 0, 6})                // legacy, the intermediate excluding the domain's parent
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1}) // the intermediate expired
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 1})
	f.Fuzz(func(t *testing.T, choices []byte) {
		c := &chooser{b: choices}
		ch := newFuzzChain(t, c)
		bundle := bundleOf(ch.bundle...)
		a, _, _ := newChainAuth(t, bundle, ch.root)
		for range 2 {
			at := ch.now.Add([]time.Duration{0, 2 * time.Minute, -2 * time.Hour, 30 * time.Hour}[c.pick(4)])
			if c.pick(2) == 0 {
				// The handshake checks signatures only; a refusal here
				// leaves the call to refuse too.
				_ = a.VerifyClientHandshake(ch.der(), nil)
			}
			live := bundle.LiveIntermediates()
			fast := a.fastVerify(ch.leaf, ch.kind, live, at)
			chains, err := ch.leaf.Verify(x509.VerifyOptions{Roots: a.roots, Intermediates: live.Pool, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			if fast != nil {
				if err != nil {
					t.Fatalf("the fast path accepted a chain x509 refuses (%v); choices %v", err, choices)
				}
				if !shapedAmong(fast, chains, ch.kind) {
					t.Fatalf("the fast path's chain is none of the chains x509 verified of a shape pact accepts; choices %v", choices)
				}
			}
			if !c.mutated && at.Equal(ch.now) && fast == nil {
				t.Fatalf("the fast path declined the plain agent chain (x509: %v)", err)
			}
		}
	})
}

// shapedAmong reports whether chain is, certificate for certificate, one
// of chains, and of a shape pact accepts for kind.
func shapedAmong(chain []*x509.Certificate, chains [][]*x509.Certificate, kind string) bool {
	if ChainShape(kind, chain, testDomain) != nil {
		return false
	}
next:
	for _, c := range chains {
		if len(c) != len(chain) {
			continue
		}
		for i := range c {
			if !c[i].Equal(chain[i]) {
				continue next
			}
		}
		return true
	}
	return false
}

// chooser reads the fuzzer's choices; past their end every choice is 0,
// the plain case. mutated records that one was not.
type chooser struct {
	b       []byte
	mutated bool
}

func (c *chooser) pick(n int) int {
	if len(c.b) == 0 {
		return 0
	}
	v := int(c.b[0]) % n
	c.b = c.b[1:]
	if v != 0 {
		c.mutated = true
	}
	return v
}

// fuzzKeys are made once: key generation would dominate each input.
var fuzzKeys = sync.OnceValue(func() []*ecdsa.PrivateKey {
	keys := make([]*ecdsa.PrivateKey, 7)
	for i := range keys {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		keys[i] = k
	}
	return keys
})

type fuzzChain struct {
	now    time.Time
	root   *x509.Certificate
	chain  []*x509.Certificate // leaf first, the root last
	bundle []*x509.Certificate
	leaf   *x509.Certificate
	kind   string
}

func (ch *fuzzChain) der() [][]byte {
	var raw [][]byte
	for _, c := range ch.chain[:len(ch.chain)-1] {
		raw = append(raw, c.Raw)
	}
	return raw
}

var fuzzSerial int64

func newFuzzChain(t *testing.T, c *chooser) *fuzzChain {
	keys := fuzzKeys()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	serial := func() *big.Int { fuzzSerial++; return big.NewInt(fuzzSerial) }
	create := func(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) *x509.Certificate {
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		if err != nil {
			// A combination x509 will not encode (a path length on a
			// certificate that is no CA): nothing to compare.
			t.Skipf("create %s: %v", tmpl.Subject.CommonName, err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	validity := func(tmpl *x509.Certificate) {
		switch c.pick(4) {
		case 1: // expired
			tmpl.NotBefore, tmpl.NotAfter = now.Add(-48*time.Hour), now.Add(-time.Hour)
		case 2: // not valid yet
			tmpl.NotBefore, tmpl.NotAfter = now.Add(time.Hour), now.Add(48*time.Hour)
		case 3: // expires a minute from now
			tmpl.NotAfter = now.Add(time.Minute)
		}
	}
	// caRules varies what a CA's template says of the certificates below.
	caRules := func(tmpl *x509.Certificate) {
		switch c.pick(7) {
		case 1: // no constraints
			tmpl.PermittedDNSDomainsCritical = false
			tmpl.PermittedDNSDomains, tmpl.ExcludedDNSDomains = nil, nil
			tmpl.PermittedIPRanges, tmpl.ExcludedIPRanges = nil, nil
			tmpl.PermittedURIDomains, tmpl.ExcludedURIDomains = nil, nil
			tmpl.ExcludedEmailAddresses = nil
		case 2: // another domain's
			caprofile.Constrain(tmpl, "other.example", nil, nil)
		case 3: // wider: no permitted URI domain, the subdomains still excluded
			caprofile.Constrain(tmpl, testDomain, nil, nil)
			tmpl.PermittedURIDomains = nil
		case 4: // narrower: the subdomains only
			caprofile.Constrain(tmpl, testDomain, nil, nil)
			tmpl.PermittedURIDomains, tmpl.ExcludedURIDomains = []string{"." + testDomain}, nil
		case 5: // the domain in capitals
			caprofile.Constrain(tmpl, strings.ToUpper(testDomain), nil, nil)
		case 6: // the domain's parent excluded
			caprofile.Constrain(tmpl, testDomain, nil, nil)
			tmpl.ExcludedURIDomains = []string{".local"}
		}
		switch c.pick(4) {
		case 1:
			tmpl.MaxPathLen, tmpl.MaxPathLenZero = 0, true
		case 2:
			tmpl.MaxPathLen, tmpl.MaxPathLenZero = 1, false
		case 3:
			tmpl.MaxPathLen, tmpl.MaxPathLenZero = -1, false
		}
		switch c.pick(7) {
		case 1:
			tmpl.PolicyIdentifiers = []asn1.ObjectIdentifier{{1, 3, 6, 1, 4, 1, 99999, 1}}
		case 2:
			tmpl.IsCA, tmpl.MaxPathLen, tmpl.MaxPathLenZero = false, 0, false
		case 3:
			tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		case 4:
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		case 5:
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		case 6:
			tmpl.BasicConstraintsValid, tmpl.IsCA, tmpl.MaxPathLen, tmpl.MaxPathLenZero = false, false, 0, false
		}
		validity(tmpl)
	}

	structure := c.pick(3) // 0: journal CA, intermediate; 1: legacy; 2: two intermediates
	kind := []string{pki.KindAgent, pki.KindAdmin, pki.KindJournal}[c.pick(3)]

	rootTmpl := caprofile.Root(testDomain, serial(), now.Add(-time.Hour), now.Add(10*24*time.Hour))
	switch c.pick(3) {
	case 1:
		rootTmpl.MaxPathLen, rootTmpl.MaxPathLenZero = 1, false
	case 2:
		caprofile.Constrain(rootTmpl, testDomain, nil, nil)
	}
	root := create(rootTmpl, rootTmpl, keys[0].Public(), keys[0])

	type ca struct {
		cert *x509.Certificate
		key  crypto.Signer
	}
	parent := ca{root, keys[0]}
	var cas []ca // below the root, top down
	if structure != 1 {
		tmpl := caprofile.JournalCA(caprofile.JournalCAParams{Domain: testDomain, JournalID: "j1", DNSNames: []string{"j1"}, Serial: serial(), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(5 * 24 * time.Hour)})
		caRules(tmpl)
		jca := ca{create(tmpl, parent.cert, keys[1].Public(), parent.key), keys[1]}
		cas, parent = append(cas, jca), jca
	}
	levels := 1
	if structure == 2 {
		levels = 2
	}
	for i := range levels {
		tmpl := caprofile.Intermediate(caprofile.IntermediateParams{Domain: testDomain, JournalID: "j1", DNSNames: []string{"j1"}, Serial: serial(), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(2 * 24 * time.Hour)})
		caRules(tmpl)
		inter := ca{create(tmpl, parent.cert, keys[2+i].Public(), parent.key), keys[2+i]}
		cas, parent = append(cas, inter), inter
	}

	lp := caprofile.LeafParams{Domain: testDomain, Name: "n1", Serial: serial(), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)}
	var leafTmpl *x509.Certificate
	switch kind {
	case pki.KindAgent:
		leafTmpl = caprofile.Agent(lp)
	case pki.KindAdmin:
		leafTmpl = caprofile.Operator(lp, pki.RoleViewer)
	default:
		lp.Name = "j1"
		leafTmpl = caprofile.JournalServer(lp, []string{"j1"}, nil)
	}
	spiffe := *leafTmpl.URIs[0]
	switch c.pick(10) {
	case 1:
		spiffe.Host = "other.example"
	case 2:
		spiffe.Host = "sub." + testDomain
	case 3:
		spiffe.Host = strings.ToUpper(testDomain)
	case 4:
		leafTmpl.DNSNames = []string{"j1"}
	case 5:
		leafTmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	case 6:
		leafTmpl.URIs = append(leafTmpl.URIs, &url.URL{Scheme: "spiffe", Host: "evil.example", Path: "/pact-agent/n1"})
	case 7:
		leafTmpl.PolicyIdentifiers = []asn1.ObjectIdentifier{{1, 3, 6, 1, 4, 1, 99999, 2}}
	case 8:
		leafTmpl.BasicConstraintsValid, leafTmpl.IsCA = true, true
	case 9:
		spiffe.Host = "local"
	}
	leafTmpl.URIs[0] = &spiffe
	validity(leafTmpl)
	leafKey := keys[5]
	signer, issuer := parent.key, parent.cert
	switch c.pick(4) {
	case 1: // the wrong key, under the intermediate's name
		signer = keys[6]
	case 2: // the CA above the intermediate, under the intermediate's name
		signer = keys[0]
		if len(cas) >= 2 {
			signer = cas[len(cas)-2].key
		}
	case 3: // the leaf's key is the intermediate's
		leafKey = keys[2+levels-1]
	}
	// x509 signs only as the parent's key: a look-alike of the parent
	// with the signer's key names the intermediate as the issuer.
	forged := *issuer
	forged.PublicKey = signer.Public()
	leaf := create(leafTmpl, &forged, leafKey.Public(), signer)

	ch := &fuzzChain{now: now, root: root, leaf: leaf, kind: kind}
	ch.chain = []*x509.Certificate{leaf}
	for i := len(cas) - 1; i >= 0; i-- {
		ch.chain = append(ch.chain, cas[i].cert)
	}
	ch.chain = append(ch.chain, root)
	for _, x := range cas {
		ch.bundle = append(ch.bundle, x.cert)
	}
	switch c.pick(4) {
	case 1: // the top CA left out
		ch.bundle = ch.bundle[1:]
	case 2: // the leaf's intermediate left out
		ch.bundle = ch.bundle[:len(ch.bundle)-1]
	case 3: // a look-alike of the intermediate: its name, another key
		tmpl := *parent.cert
		tmpl.SerialNumber = serial()
		tmpl.SubjectKeyId = nil
		above := ca{root, keys[0]}
		if len(cas) >= 2 {
			above = cas[len(cas)-2]
		}
		ch.bundle = append(ch.bundle, create(&tmpl, above.cert, keys[6].Public(), above.key))
	}
	return ch
}
