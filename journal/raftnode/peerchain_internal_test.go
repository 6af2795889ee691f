package raftnode

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"

	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/raftfsm"
)

const peerDomain = "pact.local"

// peerCreds are a journal's credentials with one or two roots.
type peerCreds struct {
	cert  *chaintest.Leaf
	roots []*x509.Certificate
}

func (c peerCreds) ServerCertificate() *tls.Certificate {
	t := c.cert.TLS()
	return &t
}
func (c peerCreds) Root() *x509.Certificate    { return c.roots[0] }
func (c peerCreds) Roots() []*x509.Certificate { return c.roots }
func (peerCreds) Domain() string               { return peerDomain }

// peerAuth is journal/auth's peer authentication of creds' domain on
// fsm's records, as the journal gives a node.
func peerAuth(t *testing.T, creds peerCreds, fsm *raftfsm.FSM) *auth.PeerVerifier {
	t.Helper()
	v, err := auth.NewPeerVerifier(auth.PeerConfig{Domain: creds.Domain(), Roots: creds.Roots(), Records: fsm, Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// chainNode is a Node with what the Raft port's TLS needs: credentials,
// its peer authentication, a clock and an FSM. No Raft runs.
func chainNode(t *testing.T, creds peerCreds, fsm *raftfsm.FSM) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Clock, cfg.Credentials, cfg.FSM = "j1", clock.Real{}, creds, fsm
	cfg.PeerAuth = peerAuth(t, creds, fsm)
	return &Node{cfg: cfg, fsm: fsm}
}

// Two journals whose certificates come [server, intermediate, journal CA]
// under the two roots of a rollover complete the Raft port's mutual TLS
// handshake, each verifying the other (verifyJournalPeer, both sides).
func TestRaftTLSWithJournalCAs(t *testing.T) {
	root, root2 := chaintest.NewRoot(peerDomain), chaintest.NewRoot(peerDomain)
	loop := chaintest.Names{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	roots := []*x509.Certificate{root.Cert, root2.Cert}
	j1 := chainNode(t, peerCreds{cert: root.JournalCA("j1", loop).Intermediate("j1", loop).Server("j1", loop), roots: roots}, raftfsm.New())
	j2 := chainNode(t, peerCreds{cert: root2.JournalCA("j2", loop).Intermediate("j2", loop).Server("j2", loop), roots: roots}, raftfsm.New())
	// j3 sends its certificate without its journal CA: refused.
	bare := root.JournalCA("j3", loop).Intermediate("j3", loop).Server("j3", loop)
	bare.Chain = bare.Chain[:2]
	j3 := chainNode(t, peerCreds{cert: bare, roots: roots}, raftfsm.New())

	lis, err := tls.Listen("tcp", "127.0.0.1:0", j1.raftServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	served := make(chan error, 4)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			served <- c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	for _, tc := range []struct {
		name string
		from *Node
		ok   bool
	}{
		{"j2 under the second root", j2, true},
		{"j3 without its journal CA", j3, false},
	} {
		c, err := tls.Dial("tcp", lis.Addr().String(), tc.from.raftClientTLS())
		if err == nil {
			err = c.Handshake()
			c.Close()
		}
		if err != nil && tc.ok {
			t.Errorf("%s: client side: %v", tc.name, err)
		}
		serr := <-served
		if (serr == nil) != tc.ok {
			t.Errorf("%s: server side: %v, want ok=%v", tc.name, serr, tc.ok)
		}
	}
}

// appliedPeerAuth records what the node tells its peer authentication.
type appliedPeerAuth struct {
	PeerAuth
	events []raftfsm.Event
}

func (a *appliedPeerAuth) Applied(ev raftfsm.Event) { a.events = append(a.events, ev) }

// The node tells its peer authentication of every entry the FSM applies
// before the journal (which is how a retired or revoked intermediate ends
// the chains it remembered).
func TestNodeTellsPeerAuthWhatWasApplied(t *testing.T) {
	pa := &appliedPeerAuth{}
	var journalSaw int
	n := &Node{cfg: Config{PeerAuth: pa, OnApply: func(raftfsm.Event) {
		if len(pa.events) == 0 {
			t.Error("the journal was told before the peer authentication")
		}
		journalSaw++
	}}}
	n.onApply(raftfsm.Event{BundleChanged: true})
	if len(pa.events) != 1 || !pa.events[0].BundleChanged || journalSaw != 1 {
		t.Fatalf("peer authentication told %+v, journal %d times", pa.events, journalSaw)
	}
}
