package auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/pact-hpc/pact/internal/chaintest"
)

const testDomain = "pact.local"

// testBundle is a trust bundle whose CAs (live journal CAs and
// intermediates) a test sets.
type testBundle struct {
	mu  sync.Mutex
	cur Intermediates
}

func bundleOf(cas ...*x509.Certificate) *testBundle {
	b := &testBundle{}
	b.set(cas...)
	return b
}

func (b *testBundle) set(cas ...*x509.Certificate) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cur = Intermediates{Version: b.cur.Version + 1, Pool: chaintest.Pool(cas...), Certs: cas}
}

func (b *testBundle) LiveIntermediates() Intermediates {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cur
}

// handshakeEnv is what VerifyClientHandshake reads: the domain roots and a
// trust bundle, here empty. No Raft, no listener. jca is journal j1's
// journal CA under root, inter its current intermediate, legacy the
// intermediate of a journal not migrated yet (signed by root).
type handshakeEnv struct {
	*Authenticator
	root, jca, inter, legacy *chaintest.CA
}

func handshakeJournal(tb testing.TB) handshakeEnv {
	tb.Helper()
	root := chaintest.NewRoot(testDomain)
	jca := root.JournalCA("j1", chaintest.Names{DNS: []string{"j1.pact.local"}})
	inter := jca.Intermediate("j1", chaintest.Names{DNS: []string{"j1.pact.local"}})
	legacy := root.Intermediate("j0", chaintest.Names{})
	a := &Authenticator{cfg: Config{Domain: testDomain, Roots: []*x509.Certificate{root.Cert}, Bundle: bundleOf()}}
	return handshakeEnv{Authenticator: a, root: root, jca: jca, inter: inter, legacy: legacy}
}

// splitChain turns fuzz bytes into up to six length-prefixed certificates.
func splitChain(data []byte) [][]byte {
	var out [][]byte
	for len(data) >= 2 && len(out) < 6 {
		n := int(binary.BigEndian.Uint16(data))
		data = data[2:]
		n = min(n, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

func joinChain(certs ...[]byte) []byte {
	var out []byte
	for _, c := range certs {
		out = binary.BigEndian.AppendUint16(out, uint16(len(c)))
		out = append(out, c...)
	}
	return out
}

// FuzzVerifyClientHandshake feeds the handshake check arbitrary client
// chains (what any TCP client can send): it must never panic, and must
// accept only chains whose signatures reach the root.
func FuzzVerifyClientHandshake(f *testing.F) {
	j := handshakeJournal(f)
	leaf := j.inter.Agent("n1")
	old := j.legacy.Agent("n2")
	f.Add(joinChain(leaf.DER()...))
	f.Add(joinChain(old.DER()...))
	f.Add(joinChain(leaf.Cert.Raw))
	f.Add(joinChain(j.root.Cert.Raw))
	f.Add(joinChain(leaf.Cert.Raw, leaf.Cert.Raw, leaf.Cert.Raw))
	f.Add(joinChain(leaf.Cert.Raw, j.jca.Cert.Raw, j.inter.Cert.Raw))
	f.Add([]byte{0, 3, 1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := splitChain(data)
		err := j.VerifyClientHandshake(raw, nil)
		if err != nil || len(raw) == 0 {
			return
		}
		leaf, perr := x509.ParseCertificate(raw[0])
		if perr != nil {
			t.Fatalf("accepted an unparsable leaf")
		}
		var pool []*x509.Certificate
		for _, d := range raw[1:] {
			c, perr := x509.ParseCertificate(d)
			if perr != nil {
				t.Fatalf("accepted a chain with an unparsable certificate")
			}
			pool = append(pool, c)
		}
		if chainsTo(leaf, j.cfg.Roots, nil, pool, j.cfg.Bundle.LiveIntermediates().Certs) == nil {
			t.Fatalf("accepted a chain that does not reach the root")
		}
	})
}

func TestVerifyClientHandshake(t *testing.T) {
	j := handshakeJournal(t)
	leaf := j.inter.Agent("n1")
	old := j.legacy.Agent("n2")
	op := j.root.Operator("alice", "platform-admin")
	onlineOp := j.inter.Operator("bob", "viewer")
	other := handshakeJournal(t) // another domain's root, of the same name
	foreign := other.inter.Agent("n1")
	for _, tc := range []struct {
		name string
		raw  [][]byte
		ok   bool
	}{
		{"no certificate (Enroll)", nil, true},
		{"agent: leaf, intermediate, journal CA", leaf.DER(), true},
		{"agent: leaf, intermediate, journal CA, root", append(leaf.DER(), j.root.Cert.Raw), true},
		{"agent: sent out of order", [][]byte{leaf.Cert.Raw, j.jca.Cert.Raw, j.inter.Cert.Raw}, true},
		{"agent: legacy leaf, intermediate", old.DER(), true},
		{"operator: root-signed", op.DER(), true},
		{"operator: leaf, intermediate, journal CA", onlineOp.DER(), true},
		{"agent leaf alone, its CAs not in the bundle", [][]byte{leaf.Cert.Raw}, false},
		{"agent: journal CA missing", [][]byte{leaf.Cert.Raw, j.inter.Cert.Raw}, false},
		{"chain of another root", foreign.DER(), false},
		{"our CAs under a foreign leaf", [][]byte{foreign.Cert.Raw, j.inter.Cert.Raw, j.jca.Cert.Raw}, false},
		{"garbage", [][]byte{{1, 2, 3}}, false},
		{"too long", [][]byte{leaf.Cert.Raw, j.inter.Cert.Raw, j.inter.Cert.Raw, j.inter.Cert.Raw, j.inter.Cert.Raw, j.jca.Cert.Raw}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Authenticator{cfg: j.cfg} // nothing known from the cases before
			err := a.VerifyClientHandshake(tc.raw, nil)
			if (err == nil) != tc.ok {
				t.Errorf("VerifyClientHandshake = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// The handshake finds a client's CAs in the trust bundle when the client
// sends its leaf alone, and takes either of two roots (a rollover).
func TestVerifyClientHandshakeBundleAndTwoRoots(t *testing.T) {
	j := handshakeJournal(t)
	next := chaintest.NewRoot(testDomain) // same subject, another key
	nextJCA := next.JournalCA("j2", chaintest.Names{})
	nextInter := nextJCA.Intermediate("j2", chaintest.Names{})
	j.cfg.Roots = []*x509.Certificate{j.root.Cert, next.Cert}
	j.cfg.Bundle = bundleOf(j.jca.Cert, j.inter.Cert, nextJCA.Cert, nextInter.Cert)
	for _, leaf := range []*chaintest.Leaf{j.inter.Agent("n1"), nextInter.Agent("n2"), next.Operator("carol", "viewer")} {
		if err := j.VerifyClientHandshake([][]byte{leaf.Cert.Raw}, nil); err != nil {
			t.Errorf("%s alone, its CAs in the bundle: %v", leaf.Cert.Subject.CommonName, err)
		}
	}
}

// Once a handshake proved a chain, both CAs above the leaf are remembered:
// the next handshake under them checks the leaf's signature only.
func TestHandshakeRemembersEveryCAOnThePath(t *testing.T) {
	j := handshakeJournal(t)
	if err := j.VerifyClientHandshake(j.inter.Agent("n1").DER(), nil); err != nil {
		t.Fatal(err)
	}
	if !j.known.has(j.inter.Cert) || !j.known.has(j.jca.Cert) {
		t.Fatalf("after a 3-link handshake: intermediate known %v, journal CA known %v; want both", j.known.has(j.inter.Cert), j.known.has(j.jca.Cert))
	}
	// A leaf issued in the known intermediate's name by another key (a
	// foreign intermediate of the same subject) is refused.
	other := handshakeJournal(t)
	forged := other.inter.Agent("n2")
	if err := j.VerifyClientHandshake([][]byte{forged.Cert.Raw, j.inter.Cert.Raw, j.jca.Cert.Raw}, nil); err == nil {
		t.Error("a leaf not signed by the known intermediate passed")
	}
	// A chain that reaches no root teaches the cache nothing.
	_ = j.VerifyClientHandshake(other.inter.Agent("n3").DER(), nil)
	if j.known.has(other.inter.Cert) || j.known.has(other.jca.Cert) {
		t.Error("a foreign chain's CAs were remembered")
	}
}

// A CA whose key was stolen can sign intermediates without end: the cache
// of known CAs stays bounded, and keeps working.
func TestHandshakeCacheBounded(t *testing.T) {
	j := handshakeJournal(t)
	for i := range maxKnownCAs + 40 {
		inter := j.jca.UnconstrainedIntermediate("j1")
		leaf := inter.Agent("n1")
		if err := j.VerifyClientHandshake(leaf.DER(), nil); err != nil {
			t.Fatalf("handshake %d: %v", i, err)
		}
		if n := j.known.len(); n > maxKnownCAs {
			t.Fatalf("after %d intermediates the cache holds %d CAs, bound %d", i+1, n, maxKnownCAs)
		}
	}
	if err := j.VerifyClientHandshake(j.inter.Agent("n2").DER(), nil); err != nil {
		t.Fatalf("after the flood: %v", err)
	}
}

// BenchmarkVerifyClientHandshake is the cost the handshake check adds to an
// agent's mTLS handshake (leaf, intermediate and journal CA sent, the
// intermediate already known to reach the root): one signature check.
func BenchmarkVerifyClientHandshake(b *testing.B) {
	j := handshakeJournal(b)
	raw := j.inter.Agent("n1").DER()
	b.ReportAllocs()
	for b.Loop() {
		if err := j.VerifyClientHandshake(raw, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyClientHandshakeLegacy is the same for a legacy chain
// (leaf, intermediate signed by the root), for comparison.
func BenchmarkVerifyClientHandshakeLegacy(b *testing.B) {
	j := handshakeJournal(b)
	raw := j.legacy.Agent("n1").DER()
	b.ReportAllocs()
	for b.Loop() {
		if err := j.VerifyClientHandshake(raw, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// len is how many CA certificates the cache holds.
func (c *caCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// VerifyClientHandshake is VerifyClientConnection for a chain not parsed
// yet, as crypto/tls parses it before the journal sees it: the tests and
// fuzz targets give raw chains.
func (a *Authenticator) VerifyClientHandshake(raw [][]byte, _ [][]*x509.Certificate) error {
	certs := make([]*x509.Certificate, len(raw))
	for i, d := range raw {
		c, err := x509.ParseCertificate(d)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrForeignChain, err)
		}
		certs[i] = c
	}
	return a.VerifyClientConnection(tls.ConnectionState{PeerCertificates: certs})
}
