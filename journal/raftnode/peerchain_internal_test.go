package raftnode

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/auth"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
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

// chainNode is a Node with what CheckJournalCert and the Raft port's TLS
// need: credentials, a clock and an FSM. No Raft runs.
func chainNode(t *testing.T, creds peerCreds, fsm *raftfsm.FSM) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Clock, cfg.Credentials, cfg.FSM = "j1", clock.Real{}, creds, fsm
	n := &Node{cfg: cfg, fsm: fsm, roots: x509.NewCertPool()}
	for _, r := range creds.Roots() {
		n.roots.AddCert(r)
	}
	return n
}

// publish records in Raft that inter is journal's intermediate, under
// journalCA (nil: signed by the root).
func publish(t *testing.T, ap *raftfsmtest.Applier, journal string, inter, journalCA *x509.Certificate, revokeAt time.Time) {
	t.Helper()
	in := &pactv1.Intermediate{JournalId: journal, Serial: pki.SerialHex(inter.SerialNumber), Der: inter.Raw, NotAfterUnix: inter.NotAfter.Unix()}
	op := &pactv1.PublishIntermediateOp{Intermediate: in}
	if journalCA != nil {
		in.IssuerSerial = pki.SerialHex(journalCA.SerialNumber)
		op.JournalCa = &pactv1.JournalCA{JournalId: journal, Serial: in.IssuerSerial, Der: journalCA.Raw, NotAfterUnix: journalCA.NotAfter.Unix()}
	}
	cmd := &pactv1.Command{AtUnixNano: time.Now().UnixNano(), Actor: "journal/" + journal, Op: &pactv1.Command_PublishIntermediate{PublishIntermediate: op}}
	if res := ap.Apply(cmd); res.Err != nil {
		t.Fatal(res.Err)
	}
	if !revokeAt.IsZero() {
		p := raftfsmtest.Proposer{Actor: "admin/alice", AtUnixNano: time.Now().UnixNano()}
		if res := ap.Apply(p.RetireIntermediate(revokeAt.UnixNano(), pki.SerialHex(inter.SerialNumber))); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
}

// The Raft port and the peer service take a journal's chain [server,
// intermediate, journal CA] under either root, and the legacy [server,
// intermediate]; they refuse every other shape, a name outside the journal
// CA's constraints, and a journal using another journal's intermediate or
// journal CA.
func TestCheckJournalCertChains(t *testing.T) {
	j1Names := chaintest.Names{DNS: []string{"j1.pact.local"}, IPs: []net.IP{net.IPv4(10, 0, 0, 1)}}
	root, root2 := chaintest.NewRoot(peerDomain), chaintest.NewRoot(peerDomain)
	jca1 := root.JournalCA("j1", j1Names)
	inter1 := jca1.Intermediate("j1", j1Names)
	jca2 := root2.JournalCA("j2", chaintest.Names{})
	inter2 := jca2.Intermediate("j2", chaintest.Names{})
	jca3 := root.JournalCA("j3", chaintest.Names{})
	inter3 := jca3.Intermediate("j3", chaintest.Names{}) // recorded for j3
	legacy1 := root.Intermediate("j1", chaintest.Names{})
	legacy4 := root.Intermediate("j4", chaintest.Names{}) // recorded for j4
	retired := jca1.Intermediate("j1", j1Names)           // revoked an hour ago
	loose := jca1.UnconstrainedIntermediate("j1")         // a stolen journal CA key's work
	foreign := chaintest.NewRoot(peerDomain)              // another domain's root, same name
	foreignInter := foreign.JournalCA("j1", j1Names).Intermediate("j1", j1Names)

	fsm := raftfsm.New()
	ap := &raftfsmtest.Applier{FSM: fsm}
	publish(t, ap, "j3", inter3.Cert, jca3.Cert, time.Time{})
	publish(t, ap, "j4", legacy4.Cert, nil, time.Time{})
	publish(t, ap, "j1", retired.Cert, jca1.Cert, time.Now().Add(-time.Hour))
	n := chainNode(t, peerCreds{cert: inter1.Server("j1", j1Names), roots: []*x509.Certificate{root.Cert, root2.Cert}}, fsm)

	chainOf := func(l *chaintest.Leaf, extra ...*chaintest.CA) []*x509.Certificate {
		c := l.Chain
		for _, e := range extra {
			c = append(c, e.Cert)
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		chain []*x509.Certificate
		want  error // nil: accepted
	}{
		{"[server, intermediate, journal CA]", chainOf(inter1.Server("j1", j1Names)), nil},
		{"[server, intermediate, journal CA] under the second root", chainOf(inter2.Server("j2", chaintest.Names{})), nil},
		{"[server, intermediate, journal CA, root]", chainOf(inter1.Server("j1", j1Names), root), nil},
		{"legacy [server, intermediate], recorded for its journal", chainOf(legacy4.Server("j4", chaintest.Names{})), nil},
		{"legacy [server, intermediate] of a journal bound to a journal CA", chainOf(legacy1.Server("j1", chaintest.Names{})), ErrPeerNotBound},
		{"[server, journal CA]", chainOf(jca1.Server("j1", j1Names)), ErrPeerWrongIntermediate},
		{"[server] signed by the root", chainOf(root.Server("j1", chaintest.Names{})), ErrPeerWrongIntermediate},
		{"j1 from j3's intermediate and journal CA, recorded", chainOf(inter3.Server("j1", chaintest.Names{})), ErrPeerWrongIntermediate},
		{"j1 from j2's intermediate and journal CA, not recorded", chainOf(inter2.Server("j1", chaintest.Names{})), ErrPeerWrongIntermediate},
		{"j1 from j2's intermediate, with j1's journal CA sent too", chainOf(inter2.Server("j1", chaintest.Names{}), jca1), ErrPeerWrongIntermediate},
		{"j1 from j4's legacy intermediate, recorded", chainOf(legacy4.Server("j1", chaintest.Names{})), ErrPeerWrongIntermediate},
		{"j1 from its own intermediate, revoked", chainOf(retired.Server("j1", j1Names)), ErrPeerIntermediateRevoked},
		{"DNS name outside the journal CA's", chainOf(loose.Server("j1", chaintest.Names{DNS: []string{"evil.example"}})), x509.CertificateInvalidError{}},
		{"subdomain of a permitted name is permitted", chainOf(loose.Server("j1", chaintest.Names{DNS: []string{"raft.j1.pact.local"}})), nil},
		{"address outside the journal CA's", chainOf(loose.Server("j1", chaintest.Names{IPs: []net.IP{net.IPv4(10, 0, 0, 2)}})), x509.CertificateInvalidError{}},
		{"journal CA missing", []*x509.Certificate{inter1.Server("j1", j1Names).Cert, inter1.Cert}, x509.UnknownAuthorityError{}},
		{"another domain's root", chainOf(foreignInter.Server("j1", j1Names)), x509.UnknownAuthorityError{}},
		{"an agent", chainOf(inter1.Agent("n1")), ErrPeerNotJournal},
		{"an operator", chainOf(inter1.Operator("alice", "platform-admin")), ErrPeerNotJournal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.peerCerts.clear()
			err := n.CheckJournalCert(tc.chain)
			switch want := tc.want.(type) {
			case nil:
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case x509.CertificateInvalidError:
				if !errors.As(err, &want) || want.Reason != x509.CANotAuthorizedForThisName {
					t.Fatalf("got %v, want a name constraint refusal", err)
				}
			case x509.UnknownAuthorityError:
				if !errors.As(err, &want) {
					t.Fatalf("got %v, want an unknown authority", err)
				}
			default:
				if !errors.Is(err, tc.want) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
			}
			// Checked again from the verified-chain cache: the same answer.
			if again := n.CheckJournalCert(tc.chain); (again == nil) != (err == nil) {
				t.Errorf("second check (cached chain): %v, first %v", again, err)
			}
		})
	}
	// A refused shape is counted as a wrong intermediate, and says so.
	err := n.CheckJournalCert(chainOf(jca1.Server("j1", j1Names)))
	if !errors.Is(err, auth.ErrChainShape) || refusalReason(err) != refusedIntermediate {
		t.Errorf("a server under its journal CA: %v (reason %s), want ErrChainShape counted as %s", err, refusalReason(err), refusedIntermediate)
	}
	if r, _ := auth.HandshakeRefusalReason(err); r != "wrong_intermediate" {
		t.Errorf("handshake refusal reason %q, want wrong_intermediate", r)
	}
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

// A journal CA Raft records as revoked refuses the chains that send it;
// one not recorded yet (its journal's first publish under it) or live
// passes.
func TestRevokedJournalCARefusesItsJournal(t *testing.T) {
	root := chaintest.NewRoot(peerDomain)
	live, revoked, unrecorded := root.JournalCA("j1", chaintest.Names{}), root.JournalCA("j2", chaintest.Names{}), root.JournalCA("j3", chaintest.Names{})
	fsm := raftfsm.New()
	ap := &raftfsmtest.Applier{FSM: fsm}
	publish(t, ap, "j1", live.Intermediate("j1", chaintest.Names{}).Cert, live.Cert, time.Time{})
	publish(t, ap, "j2", revoked.Intermediate("j2", chaintest.Names{}).Cert, revoked.Cert, time.Time{})
	p := raftfsmtest.Proposer{Actor: "admin/alice", AtUnixNano: time.Now().UnixNano()}
	if res := ap.Apply(p.RevokeJournalCA("host compromised", pki.SerialHex(revoked.Cert.SerialNumber))); res.Err != nil {
		t.Fatal(res.Err)
	}
	n := chainNode(t, peerCreds{cert: live.Intermediate("j1", chaintest.Names{}).Server("j1", chaintest.Names{}), roots: []*x509.Certificate{root.Cert}}, fsm)
	for _, tc := range []struct {
		name string
		ca   *chaintest.CA
		id   string
		ok   bool
	}{
		{"live", live, "j1", true},
		{"not recorded yet", unrecorded, "j3", true},
		{"revoked", revoked, "j2", false},
	} {
		leaf := tc.ca.Intermediate(tc.id, chaintest.Names{}).Server(tc.id, chaintest.Names{})
		_, err := n.checkPeerRecords(leaf.Chain, time.Now())
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, ErrPeerIntermediateRevoked) || refusalReason(err) != refusedRevoked) {
			t.Errorf("%s: %v is not counted as a revoked intermediate", tc.name, err)
		}
	}
}

// A peer is what Raft recorded: a journal id is bound to the journal CA it
// published under first (or an operator recorded), and a chain that merely
// reaches the same root through another journal CA naming that journal is
// no peer: a second quorum's journal, a replaced host's, a superseded
// journal CA, a legacy chain in a quorum with journal CAs. An intermediate
// Raft has not published, under the bound journal CA, is reported as such
// (it may only publish itself on the peer service).
func TestPeersAreWhatRaftRecords(t *testing.T) {
	root := chaintest.NewRoot(peerDomain)
	names := chaintest.Names{}
	jcaA2 := root.JournalCA("j2", names)      // quorum A's j2, bound
	jcaB2 := root.JournalCA("j2", names)      // quorum B's j2: same root, same id, its own key
	jcaOld4 := root.JournalCA("j4", names)    // the host j4 was before it was replaced
	jcaNew4 := root.JournalCA("j4", names)    // the new j4 host, recorded by pact journal add
	legacy5 := root.Intermediate("j5", names) // a legacy journal, never published
	published2 := jcaA2.Intermediate("j2", names)
	oldInter4 := jcaOld4.Intermediate("j4", names)

	// A quorum of this release: the binding rules are those of its level.
	fsm, ap := raftfsmtest.AtFeatureLevel()
	publish(t, ap, "j2", published2.Cert, jcaA2.Cert, time.Time{})
	publish(t, ap, "j4", oldInter4.Cert, jcaOld4.Cert, time.Time{})
	p := raftfsmtest.Proposer{Actor: "admin/alice", AtUnixNano: time.Now().UnixNano()}
	rec := &pactv1.JournalCA{JournalId: "j4", Serial: pki.SerialHex(jcaNew4.Cert.SerialNumber), Der: jcaNew4.Cert.Raw, NotAfterUnix: jcaNew4.Cert.NotAfter.Unix()}
	if res := ap.Apply(p.RecordJournalCA(rec)); res.Err != nil {
		t.Fatal(res.Err)
	}
	n := chainNode(t, peerCreds{cert: published2.Server("j2", names), roots: []*x509.Certificate{root.Cert}}, fsm)

	for _, tc := range []struct {
		name      string
		leaf      *chaintest.Leaf
		want      error
		published bool
	}{
		{"the bound journal CA, a published intermediate", published2.Server("j2", names), nil, true},
		{"the bound journal CA, an intermediate not published yet", jcaA2.Intermediate("j2", names).Server("j2", names), nil, false},
		{"another quorum's j2 under the same root", jcaB2.Intermediate("j2", names).Server("j2", names), ErrPeerNotBound, false},
		{"the replaced host's journal CA, a new intermediate", jcaOld4.Intermediate("j4", names).Server("j4", names), ErrPeerNotBound, false},
		{"the replaced host's published intermediate", oldInter4.Server("j4", names), ErrPeerNotBound, false},
		{"the new host's journal CA", jcaNew4.Intermediate("j4", names).Server("j4", names), nil, false},
		// A founder before its first publish, or a legacy journal not
		// migrated yet: its chain decides (membership is checked apart).
		{"a legacy chain of a journal id with nothing recorded", legacy5.Server("j5", names), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.peerCerts.clear()
			published, err := n.CheckPeer(tc.leaf.Chain)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err == nil && published != tc.published {
				t.Errorf("published = %v, want %v", published, tc.published)
			}
			if err != nil && refusalReason(err) != refusedNotBound {
				t.Errorf("counted as %s, want %s", refusalReason(err), refusedNotBound)
			}
		})
	}
}
