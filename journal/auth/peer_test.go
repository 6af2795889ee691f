package auth

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

const peerDomain = "pact.local"

// peerVerifier is a PeerVerifier of the domain's roots on fsm's records,
// on the real clock.
func peerVerifier(t *testing.T, roots []*x509.Certificate, fsm *raftfsm.FSM) *PeerVerifier {
	t.Helper()
	v, err := NewPeerVerifier(PeerConfig{Domain: peerDomain, Roots: roots, Records: fsm, Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkJournalCert is a peer's check on the peer service and the Raft
// port: its chain and Raft's records.
func checkJournalCert(v *PeerVerifier, chain []*x509.Certificate) error {
	_, err := v.CheckPeer(chain)
	return err
}

// peerReason is the reason pact_journal_peer_refused_total counts err
// under ("" for an error that is no PeerRefusal: the Raft node counts it
// as a bad certificate).
func peerReason(err error) string {
	var r *PeerRefusal
	if errors.As(err, &r) {
		return r.Reason()
	}
	return ""
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

// The Raft port and the peer service (PeerVerifier.CheckPeer) take a journal's chain [server,
// intermediate, journal CA] under either root, and the legacy [server,
// intermediate]; they refuse every other shape, a name outside the journal
// CA's constraints, and a journal using another journal's intermediate or
// journal CA.
func TestPeerVerifierChains(t *testing.T) {
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
	v := peerVerifier(t, []*x509.Certificate{root.Cert, root2.Cert}, fsm)

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
			v.cache.clear()
			err := checkJournalCert(v, tc.chain)
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
			if again := checkJournalCert(v, tc.chain); (again == nil) != (err == nil) {
				t.Errorf("second check (cached chain): %v, first %v", again, err)
			}
		})
	}
	// A refused shape is counted as a wrong intermediate, and says so.
	err := checkJournalCert(v, chainOf(jca1.Server("j1", j1Names)))
	if !errors.Is(err, ErrChainShape) || peerReason(err) != PeerRefusedWrongIntermediate {
		t.Errorf("a server under its journal CA: %v (reason %s), want ErrChainShape counted as %s", err, peerReason(err), PeerRefusedWrongIntermediate)
	}
	if r, _ := HandshakeRefusalReason(err); r != "wrong_intermediate" {
		t.Errorf("handshake refusal reason %q, want wrong_intermediate", r)
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
	v := peerVerifier(t, []*x509.Certificate{root.Cert}, fsm)
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
		_, err := v.CheckPeer(leaf.Chain)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, ErrPeerIntermediateRevoked) || peerReason(err) != PeerRefusedRevoked) {
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
	v := peerVerifier(t, []*x509.Certificate{root.Cert}, fsm)

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
			v.cache.clear()
			published, err := v.CheckPeer(tc.leaf.Chain)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err == nil && published != tc.published {
				t.Errorf("published = %v, want %v", published, tc.published)
			}
			if err != nil && peerReason(err) != PeerRefusedNotBound {
				t.Errorf("counted as %s, want %s", peerReason(err), PeerRefusedNotBound)
			}
		})
	}
}

// peerSignedCA is tmpl signed by parent, as a CA that signs in turn.
func peerSignedCA(parent *chaintest.CA, tmpl *x509.Certificate) *chaintest.CA {
	l := parent.Issue(tmpl)
	return &chaintest.CA{Domain: parent.Domain, Cert: l.Cert, Key: l.Key, Root: parent.Root, Path: l.Chain}
}

// A peer's chain through a journal CA that does not fit its profile, or
// through a root-signed CA that may sign CAs passed off as a legacy
// intermediate, is refused on the Raft port and the peer service as a
// wrong intermediate (caprofile.CheckChainShape), though x509 verifies it
// and Raft records nothing of the journal (whose first publish would
// otherwise pass on the chain alone).
func TestPeerVerifierMisprofiledCAs(t *testing.T) {
	root := chaintest.NewRoot(peerDomain)
	v := peerVerifier(t, []*x509.Certificate{root.Cert}, raftfsm.New())

	journalCA := func(id string, mutate func(*x509.Certificate)) *chaintest.CA {
		now := time.Now()
		tmpl := caprofile.JournalCA(caprofile.JournalCAParams{
			Domain: peerDomain, JournalID: id, DNSNames: []string{id, id + ".pact.local"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		})
		if mutate != nil {
			mutate(tmpl)
		}
		return peerSignedCA(root, tmpl)
	}
	rootSigned := func(pathLen int) *chaintest.CA {
		return peerSignedCA(root, &x509.Certificate{
			Subject:               pkix.Name{CommonName: "pact intermediate j5@" + peerDomain, Organization: []string{"pact"}},
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
			BasicConstraintsValid: true,
			IsCA:                  true,
			MaxPathLen:            pathLen,
			URIs:                  []*url.URL{{Scheme: "spiffe", Host: peerDomain}},
		})
	}
	under := func(jca *chaintest.CA, id string) []*x509.Certificate {
		return jca.Intermediate(id, chaintest.Names{}).Server(id, chaintest.Names{}).Chain
	}
	for _, tc := range []struct {
		name   string
		chain  []*x509.Certificate
		reason string // "" accepted
	}{
		{"a journal CA of its profile, not recorded yet", under(journalCA("j7", nil), "j7"), ""},
		{"a root-signed CA of path length 2 signing a journal directly", rootSigned(2).Server("j5", chaintest.Names{}).Chain, "has path length 2; an intermediate has path length 0"},
		{"a root-signed CA of path length 1 signing a journal directly", rootSigned(1).Server("j5", chaintest.Names{}).Chain, "has path length 1"},
		{"a root-signed CA of no path length limit signing a journal directly", rootSigned(-1).Server("j5", chaintest.Names{}).Chain, "has no path length limit"},
		{"a journal CA without name constraints", under(journalCA("j6", func(c *x509.Certificate) {
			c.PermittedDNSDomainsCritical = false
			c.PermittedDNSDomains, c.ExcludedDNSDomains, c.PermittedURIDomains, c.ExcludedURIDomains = nil, nil, nil, nil
			c.ExcludedIPRanges, c.ExcludedEmailAddresses = nil, nil
		}), "j6"), "no name constraints"},
		{"a journal CA with non-critical name constraints", under(journalCA("j6", func(c *x509.Certificate) { c.PermittedDNSDomainsCritical = false }), "j6"), "not critical"},
		{"a journal CA permitting the trust domain's names", under(journalCA("j6", func(c *x509.Certificate) { c.PermittedDNSDomains = []string{peerDomain} }), "j6"), "every host under the trust domain"},
		{"a journal CA permitting every URI", under(journalCA("j6", func(c *x509.Certificate) { c.PermittedURIDomains = nil }), "j6"), "permits URIs of every domain"},
		{"a journal CA permitting an address range", under(journalCA("j6", func(c *x509.Certificate) {
			c.PermittedIPRanges, c.ExcludedIPRanges = []*net.IPNet{{IP: net.IPv4(10, 0, 0, 0).To4(), Mask: net.CIDRMask(8, 32)}}, nil
		}), "j6"), "wider than one address"},
		{"a journal CA of path length 2", under(journalCA("j6", func(c *x509.Certificate) { c.MaxPathLen = 2 }), "j6"), "path length 2"},
		{"a journal CA of no path length limit", under(journalCA("j6", func(c *x509.Certificate) { c.MaxPathLen = -1 }), "j6"), "no path length limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v.cache.clear()
			err := checkJournalCert(v, tc.chain)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrPeerWrongIntermediate) || !errors.Is(err, ErrChainShape) || peerReason(err) != PeerRefusedWrongIntermediate {
				t.Fatalf("got %v (reason %s), want ErrPeerWrongIntermediate and ErrChainShape, counted as %s", err, peerReason(err), PeerRefusedWrongIntermediate)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("%q does not say %q", err, tc.reason)
			}
			if again := checkJournalCert(v, tc.chain); again == nil {
				t.Error("accepted the second time (a cached chain)")
			}
		})
	}
}

// countedPeers records the refusals the authenticator has counted.
type countedPeers struct {
	chainPeers
	refused []string
}

func (p *countedPeers) RefusedPeer(name string, err error) {
	p.refused = append(p.refused, name+" "+peerReason(err))
}

// A journal whose intermediate Raft has not published may publish it
// (Propose) and read MemberStatus on the peer service, and nothing else;
// a chain Raft's records refuse is refused for every method. Each refusal
// is counted by its reason.
func TestPeerServiceChecksTheRecords(t *testing.T) {
	root := chaintest.NewRoot(peerDomain)
	names := chaintest.Names{}
	jca2 := root.JournalCA("j2", names)
	published := jca2.Intermediate("j2", names)
	fsm, ap := raftfsmtest.AtFeatureLevel()
	publish(t, ap, "j2", published.Cert, jca2.Cert, time.Time{})
	peers := &countedPeers{}
	a := &Authenticator{cfg: Config{PeerVerifier: peerVerifier(t, []*x509.Certificate{root.Cert}, fsm), Peers: peers}}

	newInter := jca2.Intermediate("j2", names)
	unpublished := newInter.Server("j2", names).Chain
	// The same leaf with the published intermediate sent first, beside the
	// unpublished one that signed it: the verified path decides.
	decoy := append([]*x509.Certificate{unpublished[0], published.Cert}, unpublished[1:]...)
	other := root.JournalCA("j2", names).Intermediate("j2", names).Server("j2", names).Chain // another quorum's j2
	for _, tc := range []struct {
		name   string
		chain  []*x509.Certificate
		method string
		want   error // nil: admitted
		// unpublished: admitted with an intermediate Raft has not
		// published, which must be the one that signed the leaf.
		unpublished bool
	}{
		{"published, ReadIndex", published.Server("j2", names).Chain, pactv1.JournalPeerService_ReadIndex_FullMethodName, nil, false},
		{"unpublished, Propose", unpublished, pactv1.JournalPeerService_Propose_FullMethodName, nil, true},
		{"unpublished behind a published decoy, Propose", decoy, pactv1.JournalPeerService_Propose_FullMethodName, nil, true},
		{"unpublished behind a published decoy, ReadIndex", decoy, pactv1.JournalPeerService_ReadIndex_FullMethodName, ErrPeerUnpublished, false},
		{"unpublished, MemberStatus", unpublished, pactv1.JournalPeerService_MemberStatus_FullMethodName, nil, true},
		{"unpublished, ReadIndex", unpublished, pactv1.JournalPeerService_ReadIndex_FullMethodName, ErrPeerUnpublished, false},
		{"unpublished, BootEvidence", unpublished, pactv1.JournalPeerService_BootEvidence_FullMethodName, ErrPeerUnpublished, false},
		{"not bound, Propose", other, pactv1.JournalPeerService_Propose_FullMethodName, ErrPeerNotBound, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peers.refused = nil
			got, err := a.checkPeerCert(tc.chain, "j2", tc.method)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			switch {
			case tc.unpublished && (got == nil || !bytes.Equal(got.Raw, newInter.Cert.Raw)):
				t.Errorf("the unpublished intermediate is %v, want the one that signed the leaf (%s), not the one sent beside it", got, pki.SerialHex(newInter.Cert.SerialNumber))
			case !tc.unpublished && got != nil:
				t.Errorf("an unpublished intermediate %s, want none", pki.SerialHex(got.SerialNumber))
			}
			switch {
			case tc.want == nil && len(peers.refused) != 0:
				t.Errorf("admitted, yet counted: %v", peers.refused)
			case tc.want != nil && (len(peers.refused) != 1 || peers.refused[0] != "j2 "+peerReason(err)):
				t.Errorf("counted %v, want one j2 %s", peers.refused, peerReason(err))
			}
		})
	}
	if r := peerReason(UnpublishedRefusal("x")); r != PeerRefusedUnpublished {
		t.Errorf("an unpublished refusal counts as %q, want %q", r, PeerRefusedUnpublished)
	}
}
