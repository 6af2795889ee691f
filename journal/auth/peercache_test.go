package auth

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/pact-hpc/pact/raftfsm"
)

func TestVerifiedChains(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	cert := func(raw string, notBefore, notAfter time.Time) *x509.Certificate {
		return &x509.Certificate{Raw: []byte(raw), NotBefore: notBefore, NotAfter: notAfter}
	}
	leaf := cert("leaf", t0.Add(-time.Hour), t0.Add(2*time.Hour))
	inter := cert("inter", t0.Add(-time.Hour), t0.Add(time.Hour)) // expires first
	chain := []*x509.Certificate{leaf, inter}
	otherLeaf := []*x509.Certificate{cert("leaf2", t0.Add(-time.Hour), t0.Add(2*time.Hour)), inter}
	// The same bytes split differently must not match either.
	resplit := []*x509.Certificate{cert("leafin", t0.Add(-time.Hour), t0.Add(2*time.Hour)), cert("ter", t0.Add(-time.Hour), t0.Add(time.Hour))}

	var v verifiedChains
	if _, ok := v.verified(chain, t0); ok {
		t.Fatal("empty cache verified a chain")
	}
	v.add(chain, chain, t0)
	tests := []struct {
		name  string
		chain []*x509.Certificate
		at    time.Time
		want  bool
	}{
		{"same chain, now", chain, t0, true},
		{"same chain, before the intermediate expires", chain, t0.Add(59 * time.Minute), true},
		{"same chain, once the intermediate expired", chain, t0.Add(time.Hour), false},
		{"same chain, clock before NotBefore", chain, t0.Add(-2 * time.Hour), false},
		{"another leaf under the same intermediate", otherLeaf, t0, false},
		{"leaf alone", chain[:1], t0, false},
		{"same bytes, other split", resplit, t0, false},
	}
	for _, tc := range tests {
		if _, got := v.verified(tc.chain, tc.at); got != tc.want {
			t.Errorf("%s: verified = %v, want %v", tc.name, got, tc.want)
		}
	}

	// The cache stays bounded.
	for i := 0; i < 3*maxVerifiedChains; i++ {
		v.add([]*x509.Certificate{cert(string(rune('a'+i%26))+time.Duration(i).String(), t0.Add(-time.Hour), t0.Add(time.Hour))}, nil, t0)
		if len(v.m) > maxVerifiedChains {
			t.Fatalf("cache holds %d chains, bound %d", len(v.m), maxVerifiedChains)
		}
	}
}

// An intermediate retired or revoked clears every remembered chain, so a
// chain through it is verified again (and refused) at once.
func TestVerifiedChainsClear(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	chain := []*x509.Certificate{
		{Raw: []byte("leaf"), NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour)},
		{Raw: []byte("inter"), NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour)},
	}
	var v verifiedChains
	v.add(chain, chain, t0)
	if _, ok := v.verified(chain, t0); !ok {
		t.Fatal("chain not remembered")
	}
	v.clear()
	if _, ok := v.verified(chain, t0); ok {
		t.Error("a chain is still remembered after clear")
	}
	v.add(chain, chain, t0) // usable again after a clear
	if _, ok := v.verified(chain, t0); !ok {
		t.Error("chain not remembered after clear and add")
	}
}

// The verifier clears its cache when the FSM applies a change to the
// bundle (an intermediate published, retired or revoked), and only then.
func TestPeerVerifierForgetsOnBundleChange(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	chain := []*x509.Certificate{
		{Raw: []byte("leaf"), NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour)},
		{Raw: []byte("inter"), NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour)},
	}
	var v PeerVerifier
	v.cache.add(chain, chain, t0)
	v.Applied(raftfsm.Event{QuorumChanged: true})
	if _, ok := v.cache.verified(chain, t0); !ok {
		t.Fatal("an entry that left the bundle alone cleared the cache")
	}
	v.Applied(raftfsm.Event{BundleChanged: true})
	if _, ok := v.cache.verified(chain, t0); ok {
		t.Error("a chain is still remembered after the bundle changed")
	}
}
