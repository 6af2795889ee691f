package raftnode

import (
	"context"
	"crypto/x509"
	"flag"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/porttest"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/connlimit"
	"github.com/pact-hpc/pact/raftfsm"
)

var bootstrapRounds = flag.Int("bootstrap-rounds", 10, "quorums TestFoundersAgreeWhateverTheirTiming starts (make test-bootstrap: 100)")

// Founding journals started together agree on one quorum whatever the
// order and timing of their starts: each starts after a random delay, and
// each is held a random time after its Raft port listens, before it goes
// on (a loaded host). A founder that answered a co-founder's probe in that
// window without a bootstrap candidate was taken for a journal waiting to
// join, and the co-founder refused to bootstrap (seen twice in ~15 starts
// of a real quorum).
func TestFoundersAgreeWhateverTheirTiming(t *testing.T) {
	root := chaintest.NewRoot(peerDomain)
	loop := chaintest.Names{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	ids := []string{"j1", "j2", "j3"}
	creds := map[string]peerCreds{}
	for _, id := range ids {
		creds[id] = peerCreds{cert: root.JournalCA(id, loop).Intermediate(id, loop).Server(id, loop), roots: []*x509.Certificate{root.Cert}}
	}
	for round := range *bootstrapRounds {
		var peers []Peer
		for _, id := range ids {
			l, err := porttest.Listen()
			if err != nil {
				t.Fatal(err)
			}
			peers = append(peers, Peer{ID: id, RaftAddr: l.Addr().String()})
			l.Close()
		}
		nodes := make([]*Node, len(ids))
		errs := make([]error, len(ids))
		var wg sync.WaitGroup
		for i, id := range ids {
			startAfter := time.Duration(rand.IntN(150)) * time.Millisecond
			holdAfterListen := time.Duration(rand.IntN(150)) * time.Millisecond
			dir := t.TempDir()
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(startAfter) // the random start order is the point
				nodes[i], errs[i] = newFounder(id, dir, peers, creds[id], holdAfterListen)
			}()
		}
		wg.Wait()
		quorum := ""
		for i, n := range nodes {
			if errs[i] != nil {
				t.Errorf("round %d: %s: %v", round, ids[i], errs[i])
				continue
			}
			if quorum == "" {
				quorum = n.quorum.get()
			}
			if got := n.quorum.get(); got == "" || got != quorum {
				t.Errorf("round %d: %s bootstrapped quorum %q, another %q", round, ids[i], got, quorum)
			}
		}
		for _, n := range nodes {
			if n != nil {
				_ = n.Close()
			}
		}
		if t.Failed() {
			return
		}
	}
}

// newFounder starts journal id as a founder of peers, held hold after its
// Raft port listens.
func newFounder(id, dir string, peers []Peer, creds peerCreds, hold time.Duration) (*Node, error) {
	limits := connlimit.DefaultConfig()
	limits.ProveWithin = 0
	conns, err := connlimit.New(limits)
	if err != nil {
		return nil, err
	}
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.RaftListen, cfg.InitialCluster = id, dir, addrOf(peers, id), peers
	cfg.Credentials, cfg.Conns, cfg.FSM = creds, conns, raftfsm.New()
	if cfg.PeerAuth, err = auth.NewPeerVerifier(auth.PeerConfig{Domain: creds.Domain(), Roots: creds.Roots(), Records: cfg.FSM, Clock: clock.Real{}}); err != nil {
		return nil, err
	}
	cfg.Logger, cfg.Clock = slog.New(slog.NewTextHandler(io.Discard, nil)), clock.Real{}
	cfg.Hooks = &Hooks{}
	wait := func() { time.Sleep(hold) } // a host slow to go on
	cfg.Hooks.RaftListening.Store(&wait)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return New(ctx, cfg)
}

func addrOf(peers []Peer, id string) string {
	for _, p := range peers {
		if p.ID == id {
			return p.RaftAddr
		}
	}
	return ""
}
