package integration

// Process-level proof that a journal peer is what Raft records, not what
// chains to the domain root (docs/security.md, "Peers are what Raft
// records"), against a quorum of three journal processes in the production
// layout (a root in launch.RootDir, a journal CA per journal): another
// quorum's journal of the same domain, a replaced host's journal CA, and
// every other certificate that chains to the root but is not the recorded
// peer write nothing into the quorum, on the Raft port (hashicorp/raft's
// own wire format: rawraft_test.go) as on the peer service.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/integration/launch"
	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/ceremony"
	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// TestAnotherQuorumOfTheDomainWritesNothing: quorum B's journal of the
// same domain (a journal CA for a member id of A, signed by the same root,
// an intermediate under it and a journal certificate) tries, as that
// member, to write into A: Propose of a RegisterNode to A's leader with
// A's quorum id and without; on A's Raft port, claiming A's id in the
// hello, a RequestVote for term+1 claiming a leadership transfer, an
// AppendEntries at term+5 committing a forged RegisterNode, a TimeoutNow
// and an InstallSnapshot; and the same with no ALPN and no hello. Every
// one is refused, no vote is granted, A's term and leader stay, every
// journal of A keeps its registry (no forged node, no audit entry), and
// the leader counts the refusals as not_bound.
func TestAnotherQuorumOfTheDomainWritesNothing(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	p := newPeerCheck(t, q)
	live := []int{0, 1, 2}
	leader := q.leader()
	asIdx := (leader + 1) % 3
	as := q.members[asIdx].id
	bound := p.waitBound(leader, "", q.members[0].id, q.members[1].id, q.members[2].id)
	t.Logf("A's journal CAs: %v; A's leader %s; quorum B's journal claims to be %s", bound, q.members[leader].id, as)

	// Quorum B's journal, from the same root.
	bCA := p.root.JournalCA(as, loopbackNames())
	bCert := bCA.Intermediate(as, chaintest.Names{}).Server(as, chaintest.Names{}).TLS()

	// A's quorum id: public, so the attacker is taken to know it. A probe
	// with B's certificate is tried first (and logged); the id itself is
	// read from pact journal status.
	probe, perr := probeRaft(q.members[leader].raft, bCert)
	t.Logf("B's PROBE hello on A's Raft port: reply %v, error %v", probe, perr)
	quorumID := p.status(leader).GetQuorumId()
	if quorumID == "" {
		t.Fatal("A has no quorum id")
	}
	if probe != nil && probe.GetQuorumId() != "" && probe.GetQuorumId() != quorumID {
		t.Fatalf("the probe says quorum %s, status %s", probe.GetQuorumId(), quorumID)
	}

	before := p.registries(live)
	st := p.status(leader)
	refusedBefore := peerRefusals(t, q.members[leader].metrics)
	since := time.Now().UnixNano()
	var forged []string

	// (a) The peer service, with A's quorum id and without.
	for _, qid := range []string{quorumID, ""} {
		node := "b-propose-" + map[bool]string{true: "with-id", false: "without-id"}[qid != ""]
		forged = append(forged, node)
		resp, err := p.propose(leader, bCert, qid, forgedRegister(node))
		p.wantRefusedCall(fmt.Sprintf("B's %s: Propose of RegisterNode %s (quorum id %q)", as, node, qid), resp, err)
	}

	// (b) The Raft port, claiming A's quorum id in the hello; (c) no ALPN
	// and no hello at all. The forged entry goes right after the leader's
	// last entry at the time.
	for _, c := range []struct {
		name  string
		hello *pactv1.QuorumHello
	}{
		{"with A's quorum id in the hello", &pactv1.QuorumHello{QuorumId: quorumID, Kind: pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_RAFT}},
		{"without ALPN and hello", nil},
	} {
		node := "b-raft-" + strconv.Itoa(len(forged))
		forged = append(forged, node)
		rr := newRawRaft(bCert, c.hello, as, q.members[asIdx].raft)
		outs := rr.attack(q.members[leader].raft, viewOf(p.status(leader)), mustEncode(t, forgedRegister(node)))
		rr.Close()
		for _, o := range outs {
			t.Logf("B's %s on A's Raft port %s: %v", as, c.name, o)
			if o.err == nil || o.granted || o.success {
				t.Errorf("B's %s %s: %s reached A's Raft: %v", as, c.name, o.rpc, o)
			}
		}
	}

	// Counted on the leader (a TLS 1.3 server verifies the client's
	// certificate after the client is done, so the count may trail the
	// refusal): the 2 calls and the 4 connections with a hello not_bound,
	// the 4 without a hello no_quorum_id (proving no quorum id is refused
	// before the records are read) or not_bound.
	delta := p.waitRefused(leader, refusedBefore, "not_bound", 6)
	if got := delta["not_bound"] + delta["no_quorum_id"]; got < 10 {
		t.Errorf("leader %s counted %d not_bound and no_quorum_id refusals, want at least 10 (%v)", q.members[leader].id, got, delta)
	}
	t.Logf("refusals counted by leader %s: %v", q.members[leader].id, delta)
	p.checkUntouched(live, before, forged, as, since)
	p.checkTerm(live, st)
}

// TestUpgradeModeStillReadsTheRecords: a quorum in the upgrade mode
// (--accept-peers-without-quorum-id) admits peers that prove no quorum id
// by their chain, Raft's records and membership alone: quorum B's journal
// without a hello (and with an empty id in one) is still refused
// (not_bound) on the Raft port, and its Propose without the id on the
// peer service; nothing lands.
func TestUpgradeModeStillReadsTheRecords(t *testing.T) {
	skipShort(t)
	q := startQuorumWith(t, 3, "--accept-peers-without-quorum-id")
	p := newPeerCheck(t, q)
	live := []int{0, 1, 2}
	leader := q.leader()
	asIdx := (leader + 1) % 3
	as := q.members[asIdx].id
	p.waitBound(leader, "", q.members[0].id, q.members[1].id, q.members[2].id)
	cert := p.root.JournalCA(as, loopbackNames()).Intermediate(as, chaintest.Names{}).Server(as, chaintest.Names{}).TLS()

	before := p.registries(live)
	st := p.status(leader)
	refusedBefore := peerRefusals(t, q.members[leader].metrics)
	since := time.Now().UnixNano()
	forged := []string{"upgrade-propose"}
	resp, err := p.propose(leader, cert, "", forgedRegister(forged[0]))
	p.wantRefusedCall("B's "+as+" in the upgrade mode: Propose of RegisterNode without the quorum id", resp, err)
	for _, c := range []struct {
		name  string
		hello *pactv1.QuorumHello
	}{
		{"without ALPN and hello", nil},
		{"with an empty quorum id in the hello", &pactv1.QuorumHello{Kind: pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_RAFT}},
	} {
		node := "upgrade-raft-" + strconv.Itoa(len(forged))
		forged = append(forged, node)
		rr := newRawRaft(cert, c.hello, as, q.members[asIdx].raft)
		outs := rr.attack(q.members[leader].raft, viewOf(p.status(leader)), mustEncode(t, forgedRegister(node)))
		rr.Close()
		for _, o := range outs {
			t.Logf("B's %s %s: %v", as, c.name, o)
			if o.err == nil || o.granted || o.success {
				t.Errorf("B's %s in the upgrade mode %s: %s reached the quorum's Raft: %v", as, c.name, o.rpc, o)
			}
		}
	}
	delta := p.waitRefused(leader, refusedBefore, "not_bound", 9)
	t.Logf("refusals counted by leader %s: %v", q.members[leader].id, delta)
	p.checkUntouched(live, before, forged, as, since)
	p.checkTerm(live, st)
}

// TestLegacyChainDressedWithTheBoundJournalCAIsNoPeer: a journal leaf
// from a root-signed ("legacy") intermediate that Raft never published
// (another quorum's of the legacy layout, under the same root) is no peer
// of a quorum whose members are bound to journal CAs. Sent with the
// member's bound journal CA appended (a public certificate: it is in the
// trust bundle), not on the path its chain verifies through, it must be
// refused all the same: on the Raft port (RequestVote, AppendEntries of a
// forged RegisterNode, TimeoutNow, InstallSnapshot) and on the peer
// service; nothing lands, the term and the leader stay.
func TestLegacyChainDressedWithTheBoundJournalCAIsNoPeer(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	p := newPeerCheck(t, q)
	live := []int{0, 1, 2}
	leader := q.leader()
	asIdx := (leader + 1) % 3
	as := q.members[asIdx].id
	p.waitBound(leader, "", q.members[0].id, q.members[1].id, q.members[2].id)
	quorumID := p.status(leader).GetQuorumId()
	boundCA := loadCA(t, q.pq.JournalCACert(as), q.pq.JournalCAKey(as), p.root)
	cert := withExtra(*journaltest.NewIntermediate(t, launch.RootDir(q.dir)).JournalCert(t, as, launch.Domain), boundCA.Cert)

	before := p.registries(live)
	st := p.status(leader)
	since := time.Now().UnixNano()
	forged := []string{"dressed-propose", "dressed-raft"}
	resp, err := p.propose(leader, cert, quorumID, forgedRegister(forged[0]))
	p.wantRefusedCall("a legacy chain dressed with "+as+"'s journal CA: Propose of RegisterNode", resp, err)
	rr := newRawRaft(cert, &pactv1.QuorumHello{QuorumId: quorumID, Kind: pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_RAFT}, as, q.members[asIdx].raft)
	outs := rr.attack(q.members[leader].raft, viewOf(p.status(leader)), mustEncode(t, forgedRegister(forged[1])))
	rr.Close()
	for _, o := range outs {
		t.Logf("a legacy chain dressed with %s's journal CA on the Raft port: %v", as, o)
		if o.err == nil || o.granted || o.success {
			t.Errorf("a legacy chain dressed with %s's journal CA: %s reached the quorum's Raft: %v", as, o.rpc, o)
		}
	}
	p.checkUntouched(live, before, forged, as, since)
	p.checkTerm(live, st)
}

// TestReplacedHostIsNoPeer: a member is removed plainly (its journal CA
// not revoked) and a new host takes its id with a new journal CA (started
// with --join, added with pact journal add, which binds the new journal
// CA). The old host's journal CA then makes a new intermediate and a
// certificate for that id: its Propose and its Raft RPCs are refused
// (not_bound) and nothing of it lands.
func TestReplacedHostIsNoPeer(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	p := newPeerCheck(t, q)
	leader := q.leader()
	v := (leader + 1) % 3
	id := q.members[v].id
	bound := p.waitBound(leader, "", q.members[0].id, q.members[1].id, q.members[2].id)
	oldCA := loadCA(t, q.pq.JournalCACert(id), q.pq.JournalCAKey(id), p.root)

	var live []int
	var liveAddrs []string
	for i := range q.members {
		if i != v {
			live = append(live, i)
			liveAddrs = append(liveAddrs, q.members[i].grpc)
		}
	}
	if stdout, stderr, code := runPact(t, q.env(liveAddrs...), "journal", "remove", id); code != 0 {
		t.Fatalf("pact journal remove %s: exit %d\n%s%s", id, code, stdout, stderr)
	}
	select {
	case <-q.exited(v):
	case <-time.After(30 * time.Second):
		t.Logf("removed %s did not exit within 30 s; killing it", id)
		q.kill(v)
	}

	// The new host: its own data directory, addresses and journal CA
	// (a new key, from the same root).
	a := freeAddrs(t, 3)
	m := &member{id: id, grpc: a[0], raft: a[1], metrics: a[2]}
	keys := filepath.Join(q.dir, "keys")
	newCert, newKey := filepath.Join(keys, id+"-host2-ca.pem"), filepath.Join(keys, id+"-host2-ca-key.pem")
	issueJournalCAFiles(t, q.dir, id, newCert, newKey)
	n := q.add(m, []string{
		"--node-id", id, "--data-dir", filepath.Join(q.dir, id+"-host2"), "--join",
		"--listen", m.grpc, "--raft-listen", m.raft, "--metrics-listen", m.metrics,
		"--root-cert", filepath.Join(q.dir, "ca.pem"), "--journal-ca-cert", newCert, "--journal-ca-key", "file:" + newKey,
	})
	q.launch(n)
	if err := q.pq.WaitUp(n, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if stdout, stderr, code := runPact(t, q.env(liveAddrs...), "journal", "add", id, m.raft); code != 0 {
		t.Fatalf("pact journal add %s %s: exit %d\n%s%s", id, m.raft, code, stdout, stderr)
	}
	q.waitServing(n)
	live = append(live, n)
	leader = q.leader(live...)
	rebound := p.waitBound(leader, bound[id], id)
	t.Logf("%s's journal CA: %s on the old host, %s on the new one", id, bound[id], rebound[id])

	quorumID := p.status(leader).GetQuorumId()
	before := p.registries(live)
	st := p.status(leader)
	refusedBefore := peerRefusals(t, q.members[leader].metrics)
	since := time.Now().UnixNano()

	// The old host's journal CA, never revoked, makes a new intermediate.
	cert := oldCA.Intermediate(id, chaintest.Names{}).Server(id, chaintest.Names{}).TLS()
	forged := []string{"old-host-propose", "old-host-raft"}
	resp, err := p.propose(leader, cert, quorumID, forgedRegister(forged[0]))
	p.wantRefusedCall("the old host's "+id+": Propose of RegisterNode", resp, err)
	rr := newRawRaft(cert, &pactv1.QuorumHello{QuorumId: quorumID, Kind: pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_RAFT}, id, m.raft)
	outs := rr.attack(q.members[leader].raft, viewOf(p.status(leader)), mustEncode(t, forgedRegister(forged[1])))
	rr.Close()
	for _, o := range outs {
		t.Logf("the old host's %s on the Raft port: %v", id, o)
		if o.err == nil || o.granted || o.success {
			t.Errorf("the old host's %s: %s reached the quorum's Raft: %v", id, o.rpc, o)
		}
	}
	delta := p.waitRefused(leader, refusedBefore, "not_bound", 5)
	t.Logf("refusals counted by leader %s: %v", q.members[leader].id, delta)
	p.checkUntouched(live, before, forged, id, since)
	p.checkTerm(live, st)
}

// TestOnlyTheRecordedPeerIsAPeer: every kind of certificate that chains to
// the domain root but is not the recorded peer of a member id, on the Raft
// port (hello with the quorum's id, then a RequestVote) and on the peer
// service (Propose of a RegisterNode): refused, and the registry, the term
// and the leader stay. The bound journal CA's own unpublished intermediate
// may publish itself (accepted) and nothing else; without the quorum id it
// may do nothing (no_quorum_id).
func TestOnlyTheRecordedPeerIsAPeer(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	p := newPeerCheck(t, q)
	live := []int{0, 1, 2}
	leader := q.leader()
	asIdx := (leader + 1) % 3
	as := q.members[asIdx].id
	other := q.members[(leader+2)%3].id
	p.waitBound(leader, "", q.members[0].id, q.members[1].id, q.members[2].id)
	quorumID := p.status(leader).GetQuorumId()
	boundCA := loadCA(t, q.pq.JournalCACert(as), q.pq.JournalCAKey(as), p.root)
	otherCA := loadCA(t, q.pq.JournalCACert(other), q.pq.JournalCAKey(other), p.root)

	// A real agent's certificate: a node registered and enrolled.
	agentNode := testNode{id: "peer-agent", mac: "52:54:00:aa:00:01", bmc: "SN-PEER-AGENT"}
	if _, err := p.adminAt(leader).RegisterNode(p.ctx(), &pactv1.RegisterNodeRequest{NodeId: agentNode.id,
		Hardware: &pactv1.HardwareIdentity{Macs: []string{agentNode.mac}, BmcSerial: agentNode.bmc}}); err != nil {
		t.Fatalf("register %s: %v", agentNode.id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	enrolled := newEnroller(t, filepath.Join(q.dir, "ca.pem"), []string{q.members[leader].grpc}).enroll(ctx, agentNode)
	cancel()
	if enrolled.err != nil || enrolled.resp == nil {
		t.Fatalf("enroll %s: %v", agentNode.id, enrolled.err)
	}
	agent := tls.Certificate{Certificate: enrolled.resp.GetCertChainDer(), PrivateKey: enrolled.key.key}

	// A CA of path length 2 the root signed, used as a legacy intermediate.
	wide := signCA(p.root, &x509.Certificate{
		SerialNumber: newSerial(t), Subject: pkix.Name{CommonName: "pact intermediate " + as + "@" + launch.Domain, Organization: []string{"pact"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLen: 2,
		URIs: []*url.URL{{Scheme: "spiffe", Host: launch.Domain}},
	})
	// A journal CA of the member id without name constraints.
	loose := caprofile.JournalCA(caprofile.JournalCAParams{Domain: launch.Domain, JournalID: as, DNSNames: []string{as, "localhost"},
		Serial: newSerial(t), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour)})
	loose.PermittedDNSDomainsCritical = false
	loose.PermittedDNSDomains, loose.ExcludedDNSDomains = nil, nil
	loose.PermittedIPRanges, loose.ExcludedIPRanges = nil, nil
	loose.PermittedURIDomains, loose.ExcludedURIDomains = nil, nil
	loose.PermittedEmailAddresses, loose.ExcludedEmailAddresses = nil, nil
	looseCA := signCA(p.root, loose)

	// The bound journal CA's own intermediates, not published: one that
	// publishes itself, one that proves no quorum id.
	unpublished := boundCA.Intermediate(as, chaintest.Names{})
	noID := boundCA.Intermediate(as, chaintest.Names{})

	legacy := journaltest.NewIntermediate(t, launch.RootDir(q.dir))
	cases := []struct {
		name string
		cert tls.Certificate
		// raft: the Raft port is tried (hello with the quorum id, then a
		// RequestVote). The bound journal CA's unpublished intermediate
		// is taken there by design (after a whole quorum restarts no
		// intermediate is published yet): the publish is its test.
		raft bool
		// publish, if set: the chain's intermediate publishing itself,
		// which must be accepted after the RegisterNode is refused.
		publish *pactv1.Intermediate
		// counted: the leader counts the refusals in
		// pact_journal_peer_refused_total (a certificate that names no
		// journal is refused before it is a peer at all).
		counted bool
	}{
		{name: "agent certificate", cert: agent, raft: true},
		{name: "operator credential", cert: q.pq.Admin(), raft: true},
		{name: "journal leaf signed by the bound journal CA itself", cert: boundCA.Server(as, chaintest.Names{}).TLS(), raft: true, counted: true},
		{name: "journal leaf from a root-signed intermediate Raft never published", cert: *legacy.JournalCert(t, as, launch.Domain), raft: true, counted: true},
		{name: "journal leaf from another member's journal CA", cert: otherCA.Intermediate(as, chaintest.Names{}).Server(as, chaintest.Names{}).TLS(), raft: true, counted: true},
		{name: "root-signed CA of path length 2 as a legacy intermediate", cert: wide.Server(as, chaintest.Names{}).TLS(), raft: true, counted: true},
		{name: "journal CA without name constraints", cert: looseCA.Intermediate(as, chaintest.Names{}).Server(as, chaintest.Names{}).TLS(), raft: true, counted: true},
		{name: "the bound journal CA's unpublished intermediate", cert: unpublished.Server(as, chaintest.Names{}).TLS(), counted: true,
			publish: &pactv1.Intermediate{JournalId: as, Serial: pki.SerialHex(unpublished.Cert.SerialNumber), Der: unpublished.Cert.Raw,
				NotAfterUnix: unpublished.Cert.NotAfter.Unix(), IssuerSerial: pki.SerialHex(boundCA.Cert.SerialNumber)}},
	}

	before := p.registries(live)
	st := p.status(leader)
	since := time.Now().UnixNano()
	var forged []string
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := p.in(t)
			// The leader as it stands (it stays, unless a refusal failed).
			leader := q.leader()
			refusedBefore := peerRefusals(t, q.members[leader].metrics)
			want := 0
			if c.raft {
				rr := newRawRaft(c.cert, &pactv1.QuorumHello{QuorumId: quorumID, Kind: pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_RAFT}, as, q.members[asIdx].raft)
				o := rr.requestVote(q.members[leader].raft, viewOf(p.status(leader)))
				rr.Close()
				t.Logf("Raft port: %v", o)
				if o.err == nil || o.granted {
					t.Errorf("%s on the Raft port: %v", c.name, o)
				}
				want++
			}
			node := fmt.Sprintf("peer-case-%d", i)
			forged = append(forged, node)
			resp, err := p.propose(leader, c.cert, quorumID, forgedRegister(node))
			p.wantRefusedCall(c.name+": Propose of RegisterNode", resp, err)
			want++
			if c.publish != nil {
				// Rule 3: MemberStatus and the publish only. Its other
				// Proposes are refused in the handler (not counted as
				// peer refusals); a ReadIndex by authentication.
				conn := dialJournal(t, p.roots, q.members[leader].grpc, &c.cert)
				ctx := metadata.AppendToOutgoingContext(p.ctx(), "pact-quorum-id", quorumID)
				peer := pactv1.NewJournalPeerServiceClient(conn)
				if _, err := peer.ReadIndex(ctx, &pactv1.ReadIndexRequest{}); status.Code(err) != codes.Unauthenticated && status.Code(err) != codes.PermissionDenied {
					t.Errorf("%s: ReadIndex: %v, want it refused", c.name, err)
				} else {
					t.Logf("ReadIndex: refused %v", err)
				}
				if ms, err := peer.MemberStatus(ctx, &pactv1.MemberStatusRequest{}); err != nil {
					t.Errorf("%s: MemberStatus: %v, want an answer", c.name, err)
				} else {
					t.Logf("MemberStatus: answered by %s", ms.GetJournalId())
				}
				conn.Close()
				want = 1
				cmd := &pactv1.Command{AtUnixNano: time.Now().UnixNano(), Actor: "journal/" + as,
					Op: &pactv1.Command_PublishIntermediate{PublishIntermediate: &pactv1.PublishIntermediateOp{Intermediate: c.publish}}}
				resp, err := p.propose(leader, c.cert, quorumID, cmd)
				if err != nil || resp.GetErrorCode() != "" {
					t.Errorf("%s publishing itself: %v %s %s, want it accepted", c.name, err, resp.GetErrorCode(), resp.GetErrorMessage())
				} else {
					t.Logf("publishing itself: accepted at index %d", resp.GetIndex())
				}
			}
			if c.counted {
				t.Logf("refusals counted by the leader: %v", p.waitRefused(leader, refusedBefore, "", want))
			} else {
				// Nothing to wait for: none is expected, and the log asserts nothing.
				t.Logf("refusals counted by the leader so far (none expected: it names no journal): %v", diffRefusals(refusedBefore, peerRefusals(t, q.members[leader].metrics)))
			}
		})
	}

	// The quorum id is required of the recorded peer itself: no ALPN and
	// no hello, a hello with an empty id, a Propose without the id.
	t.Run("the bound journal CA's unpublished intermediate without the quorum id", func(t *testing.T) {
		p := p.in(t)
		leader := q.leader()
		cert := noID.Server(as, chaintest.Names{}).TLS()
		refusedBefore := peerRefusals(t, q.members[leader].metrics)
		for _, h := range []*pactv1.QuorumHello{nil, {Kind: pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_RAFT}} {
			rr := newRawRaft(cert, h, as, q.members[asIdx].raft)
			o := rr.requestVote(q.members[leader].raft, viewOf(p.status(leader)))
			rr.Close()
			t.Logf("Raft port (hello %v): %v", h, o)
			if o.err == nil || o.granted {
				t.Errorf("a Raft connection without a quorum id (hello %v): %v", h, o)
			}
		}
		in := &pactv1.Intermediate{JournalId: as, Serial: pki.SerialHex(noID.Cert.SerialNumber), Der: noID.Cert.Raw,
			NotAfterUnix: noID.Cert.NotAfter.Unix(), IssuerSerial: pki.SerialHex(boundCA.Cert.SerialNumber)}
		cmd := &pactv1.Command{AtUnixNano: time.Now().UnixNano(), Actor: "journal/" + as,
			Op: &pactv1.Command_PublishIntermediate{PublishIntermediate: &pactv1.PublishIntermediateOp{Intermediate: in}}}
		resp, err := p.propose(leader, cert, "", cmd)
		p.wantRefusedCall("a Propose without the quorum id", resp, err)
		t.Logf("refusals counted by the leader: %v", p.waitRefused(leader, refusedBefore, "no_quorum_id", 3))
	})

	p.checkUntouched(live, before, forged, as, since)
	p.checkTerm(live, st)
}

// ---------------------------------------------------------------------------

// peerCheck reaches a quorum's journals as its operator and as attackers.
type peerCheck struct {
	t     *testing.T
	q     *quorum
	roots *x509.CertPool
	admin tls.Certificate
	conns map[string]*grpc.ClientConn
	// root is the domain root with its key (launch.RootDir).
	root *chaintest.CA
}

func newPeerCheck(t *testing.T, q *quorum) *peerCheck {
	certPath, keyPath := launch.RootFiles(q.dir)
	return &peerCheck{t: t, q: q, roots: q.pq.Roots(), admin: q.pq.Admin(), conns: map[string]*grpc.ClientConn{}, root: loadCA(t, certPath, keyPath, nil)}
}

// in is p reporting to t (a subtest).
func (p *peerCheck) in(t *testing.T) *peerCheck {
	c := *p
	c.t = t
	return &c
}

func (p *peerCheck) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	p.t.Cleanup(cancel)
	return ctx
}

func (p *peerCheck) adminAt(i int) pactv1.AdminServiceClient {
	addr := p.q.members[i].grpc
	c, ok := p.conns[addr]
	if !ok {
		c = dialJournal(p.t, p.roots, addr, &p.admin)
		p.conns[addr] = c
	}
	return pactv1.NewAdminServiceClient(c)
}

// retry runs f until it succeeds or fails other than Unavailable (a
// journal between leaders), for up to 20 s.
func (p *peerCheck) retry(what string, f func(ctx context.Context) error) {
	p.t.Helper()
	var last polltest.Last
	polltest.Until(p.t, 20*time.Second, 100*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last.Err = f(ctx)
		cancel()
		if c := status.Code(last.Err); last.Err != nil && c != codes.Unavailable && c != codes.DeadlineExceeded {
			p.t.Fatalf("%s: %v", what, last.Err)
		}
		return last.Err == nil
	}, "%s: %v", what, &last)
}

func (p *peerCheck) status(i int) *pactv1.JournalStatusResponse {
	p.t.Helper()
	var st *pactv1.JournalStatusResponse
	p.retry("journal status of "+p.q.members[i].id, func(ctx context.Context) (err error) {
		st, err = p.adminAt(i).JournalStatus(ctx, &pactv1.JournalStatusRequest{})
		return err
	})
	return st
}

// waitBound waits until each of ids is bound to a journal CA other than
// not (the newest recorded, not revoked) as journal at sees it, and
// returns their serials.
func (p *peerCheck) waitBound(at int, not string, ids ...string) map[string]string {
	p.t.Helper()
	var out map[string]string
	var last polltest.Last
	polltest.Until(p.t, 30*time.Second, 200*time.Millisecond, func() bool {
		var resp *pactv1.ListIntermediatesResponse
		p.retry("list intermediates", func(ctx context.Context) (err error) {
			resp, err = p.adminAt(at).ListIntermediates(ctx, &pactv1.ListIntermediatesRequest{})
			return err
		})
		newest := map[string]*pactv1.JournalCA{}
		for _, jc := range resp.GetJournalCas() {
			if b := newest[jc.GetJournalId()]; b == nil || jc.GetRecordedAtUnixNano() > b.GetRecordedAtUnixNano() {
				newest[jc.GetJournalId()] = jc
			}
		}
		out = map[string]string{}
		for _, id := range ids {
			if jc := newest[id]; jc != nil && jc.GetRevokedAtUnixNano() == 0 && jc.GetSerial() != not {
				out[id] = jc.GetSerial()
			}
		}
		last.Value = resp.GetJournalCas()
		return len(out) == len(ids)
	}, "journal CAs recorded for %v within 30 s: %v", ids, &last)
	return out
}

// registries is each live journal's node ids, sorted, after a
// linearizable read there.
func (p *peerCheck) registries(live []int) map[int][]string {
	p.t.Helper()
	out := map[int][]string{}
	for _, i := range live {
		p.retry("barrier on "+p.q.members[i].id, func(ctx context.Context) error {
			_, err := p.adminAt(i).InspectNode(ctx, &pactv1.InspectNodeRequest{NodeId: "no-such-node"})
			if status.Code(err) == codes.NotFound {
				return nil
			}
			return err
		})
		var resp *pactv1.ListNodesResponse
		p.retry("list nodes on "+p.q.members[i].id, func(ctx context.Context) (err error) {
			resp, err = p.adminAt(i).ListNodes(ctx, &pactv1.ListNodesRequest{})
			return err
		})
		if resp.GetNextPageToken() != "" {
			p.t.Fatalf("%s lists more than a page of nodes", p.q.members[i].id)
		}
		ids := []string{}
		for _, n := range resp.GetNodes() {
			ids = append(ids, n.GetNodeId())
		}
		sort.Strings(ids)
		out[i] = ids
	}
	return out
}

// checkUntouched checks that every live journal still has the registry
// it had, that no forged node is in it (a linearizable inspect), and that
// its audit since holds no entry about a forged node nor a registration
// through journal as.
func (p *peerCheck) checkUntouched(live []int, before map[int][]string, forged []string, as string, since int64) {
	p.t.Helper()
	// Every attempt has had its answer, so anything that got through is
	// committed: once each live journal has applied the highest commit
	// index they report now, it is in every registry and audit read below.
	var committed uint64
	for _, i := range live {
		committed = max(committed, p.status(i).GetCommitIndex())
	}
	var applied polltest.Last
	polltest.Until(p.t, 30*time.Second, 50*time.Millisecond, func() bool {
		for _, i := range live {
			if a := p.status(i).GetAppliedIndex(); a < committed {
				applied.Value = fmt.Sprintf("%s applied %d", p.q.members[i].id, a)
				return false
			}
		}
		return true
	}, "the live journals did not all apply index %d: %v", committed, &applied)
	for _, i := range live {
		id := p.q.members[i].id
		for _, node := range forged {
			var got *pactv1.InspectNodeResponse
			p.retry("inspect "+node+" on "+id, func(ctx context.Context) error {
				var err error
				got, err = p.adminAt(i).InspectNode(ctx, &pactv1.InspectNodeRequest{NodeId: node})
				if status.Code(err) == codes.NotFound {
					got = nil
					return nil
				}
				return err
			})
			if got != nil {
				p.t.Errorf("journal %s holds forged node %s: %v", id, node, got.GetNode())
			}
		}
	}
	after := p.registries(live)
	for _, i := range live {
		if !slices.Equal(before[i], after[i]) {
			p.t.Errorf("journal %s's registry changed: %v, then %v", p.q.members[i].id, before[i], after[i])
		}
		var resp *pactv1.ListAuditResponse
		p.retry("audit of "+p.q.members[i].id, func(ctx context.Context) (err error) {
			resp, err = p.adminAt(i).ListAudit(ctx, &pactv1.ListAuditRequest{SinceUnixNano: since})
			return err
		})
		for _, e := range resp.GetEntries() {
			if slices.Contains(forged, e.GetNodeId()) || e.GetVia() == "journal/"+as && e.GetAction() == "register" {
				p.t.Errorf("journal %s audits a forged write: %v", p.q.members[i].id, e)
			}
		}
	}
	if !p.t.Failed() {
		p.t.Logf("registries unchanged on %d journals (%v); no forged node, no forged audit entry", len(live), after)
	}
}

// checkTerm checks that every live journal is still in the term before,
// under the same leader.
func (p *peerCheck) checkTerm(live []int, before *pactv1.JournalStatusResponse) {
	p.t.Helper()
	for _, i := range live {
		st := p.status(i)
		if st.GetTerm() != before.GetTerm() || st.GetLeaderId() != before.GetLeaderId() {
			p.t.Errorf("journal %s: term %d under leader %q, was term %d under %q", p.q.members[i].id, st.GetTerm(), st.GetLeaderId(), before.GetTerm(), before.GetLeaderId())
		}
	}
	if !p.t.Failed() {
		p.t.Logf("term %d under leader %s on every journal, as before", before.GetTerm(), before.GetLeaderId())
	}
}

// propose calls the peer service's Propose on journal i as cert, with
// quorumID in the metadata (none if empty).
func (p *peerCheck) propose(i int, cert tls.Certificate, quorumID string, cmd *pactv1.Command) (*pactv1.ProposeResponse, error) {
	p.t.Helper()
	c := dialJournal(p.t, p.roots, p.q.members[i].grpc, &cert)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if quorumID != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "pact-quorum-id", quorumID)
	}
	return pactv1.NewJournalPeerServiceClient(c).Propose(ctx, &pactv1.ProposeRequest{Command: mustEncode(p.t, cmd)})
}

// wantRefusedCall fails unless a peer call was refused by authentication
// (UNAUTHENTICATED or PERMISSION_DENIED): an error of another code (a
// journal down, no leader) proves nothing.
func (p *peerCheck) wantRefusedCall(what string, resp *pactv1.ProposeResponse, err error) {
	p.t.Helper()
	switch c := status.Code(err); {
	case err == nil:
		p.t.Errorf("%s: ACCEPTED (index %d, error code %q %s)", what, resp.GetIndex(), resp.GetErrorCode(), resp.GetErrorMessage())
	case c == codes.Unauthenticated || c == codes.PermissionDenied:
		p.t.Logf("%s: refused %s: %s", what, c, status.Convert(err).Message())
	default:
		p.t.Errorf("%s: %v, want UNAUTHENTICATED or PERMISSION_DENIED", what, err)
	}
}

var peerRefusedRE = regexp.MustCompile(`(?m)^pact_journal_peer_refused_total\{reason="([a-z_]+)"\} (\d+)$`)

// peerRefusals reads every pact_journal_peer_refused_total series of a
// journal's /metrics.
func peerRefusals(t *testing.T, metrics string) map[string]int {
	t.Helper()
	out := map[string]int{}
	b := scrapeAll(t, metrics)
	for _, m := range peerRefusedRE.FindAllStringSubmatch(b, -1) {
		n, _ := strconv.Atoi(m[2])
		out[m[1]] = n
	}
	return out
}

func scrapeAll(t *testing.T, metrics string) string {
	t.Helper()
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Errorf("metrics of %s: %v", metrics, err)
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("metrics of %s: %v", metrics, err)
	}
	return string(b)
}

// diffRefusals is after-before, the reasons that grew.
func diffRefusals(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for r, n := range after {
		if d := n - before[r]; d != 0 {
			out[r] = d
		}
	}
	return out
}

// waitRefused waits (bounded) until journal i counted at least n more
// refusals of reason (any reason if empty) than before, and returns what
// grew.
func (p *peerCheck) waitRefused(i int, before map[string]int, reason string, n int) map[string]int {
	p.t.Helper()
	var d map[string]int
	got := 0
	if !polltest.Within(10*time.Second, 50*time.Millisecond, func() bool {
		d = diffRefusals(before, peerRefusals(p.t, p.q.members[i].metrics))
		got = d[reason]
		if reason == "" {
			got = 0
			for _, v := range d {
				got += v
			}
		}
		return got >= n
	}) {
		p.t.Errorf("journal %s counted %d %q peer refusals, want at least %d (all that grew: %v)", p.q.members[i].id, got, reason, n, d)
	}
	return d
}

// forgedRegister is a RegisterNode of node in an operator's name.
func forgedRegister(node string) *pactv1.Command {
	sum := 0
	for _, c := range node {
		sum = sum*31 + int(c)
	}
	return &pactv1.Command{AtUnixNano: time.Now().UnixNano(), Actor: "admin/admin",
		Op: &pactv1.Command_RegisterNode{RegisterNode: &pactv1.RegisterNodeOp{NodeId: node,
			Hardware: &pactv1.HardwareIdentity{Macs: []string{fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", byte(sum>>24), byte(sum>>16), byte(sum>>8), byte(sum))}, BmcSerial: "SN-" + strings.ToUpper(node)}}}}
}

func mustEncode(t *testing.T, cmd *pactv1.Command) []byte {
	t.Helper()
	data, err := raftfsm.Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// viewOf is the Raft position a journal's status shows (its last entry
// taken to be of its current term: a leader's first entry of a term is
// its own), with its members as the configuration.
func viewOf(st *pactv1.JournalStatusResponse) raftView {
	v := raftView{term: st.GetTerm(), lastIndex: max(st.GetCommitIndex(), st.GetAppliedIndex()), lastTerm: st.GetTerm()}
	for _, m := range st.GetMembers() {
		v.servers = append(v.servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.GetJournalId()), Address: raft.ServerAddress(m.GetRaftAddr())})
	}
	return v
}

// probeRaft says a PROBE hello on a Raft port as cert.
func probeRaft(addr string, cert tls.Certificate) (*pactv1.QuorumHelloReply, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, NextProtos: []string{"pact-raft/2"}, Certificates: []tls.Certificate{cert}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	return sayHello(c, &pactv1.QuorumHello{Kind: pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_PROBE})
}

// loadCA reads a CA certificate and its file key; root nil: it is the
// domain root itself.
func loadCA(t *testing.T, certPath, keyPath string, root *chaintest.CA) *chaintest.CA {
	t.Helper()
	data, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.ParseCertsPEM(data)
	if err != nil || len(certs) == 0 {
		t.Fatalf("%s: %v", certPath, err)
	}
	signer, err := keystore.ReadPEMKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	key, ok := signer.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("%s holds a %T, not an ECDSA key", keyPath, signer)
	}
	if root == nil {
		return &chaintest.CA{Domain: launch.Domain, Cert: certs[0], Key: key, Root: certs[0]}
	}
	return &chaintest.CA{Domain: launch.Domain, Cert: certs[0], Key: key, Root: root.Cert, Path: []*x509.Certificate{certs[0]}}
}

// signCA signs tmpl for a fresh key with parent.
func signCA(parent *chaintest.CA, tmpl *x509.Certificate) *chaintest.CA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent.Cert, key.Public(), parent.Key)
	if err != nil {
		panic(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	return &chaintest.CA{Domain: parent.Domain, Cert: cert, Key: key, Root: parent.Root, Path: append([]*x509.Certificate{cert}, parent.Path...)}
}

func newSerial(t *testing.T) *big.Int {
	t.Helper()
	s, err := pki.NewSerial()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// withExtra is cert sending extra CA certificates after its own chain.
func withExtra(cert tls.Certificate, extra ...*x509.Certificate) tls.Certificate {
	c := cert
	c.Certificate = slices.Clone(cert.Certificate)
	for _, e := range extra {
		c.Certificate = append(c.Certificate, e.Raw)
	}
	return c
}

// loopbackNames are the names a journal on this host serves under.
func loopbackNames() chaintest.Names {
	names := chaintest.Names{DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback}}
	if h, err := os.Hostname(); err == nil && h != "" {
		names.DNS = append(names.DNS, h)
	}
	return names
}

// issueJournalCAFiles makes journal id's journal CA as the ceremony does
// (a request for a new file key at keyPath, signed by the domain root of
// the quorum in dir), its certificate at certPath.
func issueJournalCAFiles(t *testing.T, dir, id, certPath, keyPath string) {
	t.Helper()
	rootCert, rootKey := launch.RootFiles(dir)
	root, key, err := ceremony.LoadRoot(rootCert, keystore.Spec{Backend: keystore.BackendFile, Location: rootKey}, keystore.Options{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer key.Close()
	names := []string{id, "localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	dns, ips, err := ceremony.ParseNames(names)
	if err != nil {
		t.Fatal(err)
	}
	req, err := ceremony.NewRequest(id, keystore.Spec{Backend: keystore.BackendFile, Location: keyPath}, keystore.Options{}, dns, ips)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ceremony.SignJournalCA(root, key, req.PEM, id, dns, ips, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := ceremony.WriteNew(certPath, pki.EncodeCertsPEM(cert.Raw), 0o644); err != nil {
		t.Fatal(err)
	}
}
