package journal_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Operator credentials are what Raft recorded (DESIGN.md §8;
// docs/security.md, "Operator credentials"): one signed by a journal
// intermediate authenticates only if pact admin issue or renew recorded
// it; only one signed by a root itself is recorded at its first use.

// mintOperator makes an operator credential the way someone holding a
// journal intermediate's key (and nothing of pact's) would: a certificate
// of pact's operator form, signed with key under inter, sent with its
// chain up to the root.
func mintOperator(t testing.TB, key crypto.Signer, inter, journalCA *x509.Certificate, name, role string, now time.Time) tls.Certificate {
	t.Helper()
	id := pki.Identity{Kind: pki.KindAdmin, Name: name, Domain: journaltest.Domain}
	opKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	notAfter := now.Add(time.Hour)
	if notAfter.After(inter.NotAfter) {
		notAfter = inter.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: id.CommonName(), OrganizationalUnit: []string{role}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{id.SPIFFEID()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, inter, opKey.Public(), key)
	if err != nil {
		t.Fatalf("mint an operator credential: %v", err)
	}
	chain := [][]byte{der, inter.Raw}
	if journalCA != nil {
		chain = append(chain, journalCA.Raw)
	}
	return tls.Certificate{Certificate: chain, PrivateKey: opKey}
}

// refusedNotIssued checks err is the refusal of a credential the quorum
// did not issue, naming its serial and name and what to do.
func refusedNotIssued(t testing.TB, err error, cred tls.Certificate, name string) {
	t.Helper()
	pe := wantErr(t, err, codes.Unauthenticated, apierr.OperatorNotIssued)
	for _, want := range []string{"credential " + serialOf(t, cred) + " of " + name + " was not issued by this quorum", "no record in the registry", "pact admin issue"} {
		if !strings.Contains(pe.Message, want) {
			t.Errorf("refusal %q does not say %q", pe.Message, want)
		}
	}
}

// operatorsOn lists every operator record of h's registry, by serial.
func operatorsOn(t testing.TB, h *journaltest.Harness) map[string]*pactv1.Operator {
	t.Helper()
	resp, err := h.AdminClient(t).ListOperators(callCtx(t), &pactv1.ListOperatorsRequest{All: true})
	if err != nil {
		t.Fatalf("list operators on %s: %v", h.Cfg.NodeID, err)
	}
	out := map[string]*pactv1.Operator{}
	for _, o := range resp.GetOperators() {
		out[o.GetSerial()] = o
	}
	return out
}

// (a) A platform-admin credential minted with a running journal's live
// intermediate key is refused UNAUTHENTICATED (OPERATOR_NOT_ISSUED): on
// RegisterNode, and on a read; nothing is written (no record, no node, no
// audit entry, no Raft entry); the refusal is counted and logged. A first-use
// record the release before this rule made for such a credential does not
// make it authenticate either. (c) A credential the root signed itself is
// still recorded at its first use and accepted.
func TestMintedOperatorCredentialRefused(t *testing.T) {
	logs := &lockedBuffer{}
	e := newEnv(t, func(c *journal.Config) {
		c.MetricsListen = "127.0.0.1:0"
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	key, inter, journalCA := e.h.J.IntermediateKeyForTest()
	if journalCA == nil {
		t.Fatal("the harness journal has no journal CA")
	}
	mallory := mintOperator(t, key, inter, journalCA, "mallory", pki.RolePlatformAdmin, e.fc.Now())
	client := pactv1.NewAdminServiceClient(e.h.Dial(t, &mallory))

	before := e.registry(t)
	_, err := client.RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: "n-mallory", Hardware: hw("SN-M", mac1)})
	e.refusedUnwritten(t, before, nil, err, codes.Unauthenticated, apierr.OperatorNotIssued)
	refusedNotIssued(t, err, mallory, "mallory")
	_, err = client.ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
	e.refusedUnwritten(t, before, nil, err, codes.Unauthenticated, apierr.OperatorNotIssued)
	_, err = client.JournalStatus(callCtx(t), &pactv1.JournalStatusRequest{})
	e.refusedUnwritten(t, before, nil, err, codes.Unauthenticated, apierr.OperatorNotIssued)
	if o, ok := operators(t, e)[serialOf(t, mallory)]; ok {
		t.Fatalf("the minted credential was recorded: %v", o)
	}
	if body := scrape(t, e.h); !strings.Contains(body, `pact_journal_auth_refused_total{reason="OPERATOR_NOT_ISSUED"} 3`) {
		t.Errorf("/metrics does not count the 3 refusals as OPERATOR_NOT_ISSUED")
	}
	logged := false
	for _, line := range strings.Split(logs.String(), "\n") {
		logged = logged || (strings.Contains(line, "level=WARN") && strings.Contains(line, `msg="authentication refused"`) &&
			strings.Contains(line, "reason=OPERATOR_NOT_ISSUED") && strings.Contains(line, "method=RegisterNode") && strings.Contains(line, "serial="+serialOf(t, mallory)))
	}
	if !logged {
		t.Errorf("the refusal is not logged with its reason and serial:\n%s", logs.String())
	}

	// What the release before this rule wrote at the minted credential's
	// first use: a record of it, issued_by first-use. It is still no
	// credential the quorum issued.
	leaf, err := x509.ParseCertificate(mallory.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := e.h.J.RecordOperatorForTest(callCtx(t), "admin/mallory", auth.OperatorRecord(leaf, "mallory", pki.RolePlatformAdmin, raftfsm.IssuedAtFirstUse)); err != nil {
		t.Fatal(err)
	}
	before = e.registry(t)
	_, err = client.RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: "n-mallory", Hardware: hw("SN-M", mac1)})
	e.refusedUnwritten(t, before, nil, err, codes.Unauthenticated, apierr.OperatorNotIssued)

	// A record of an issued credential's serial is no record of another
	// certificate with that serial: the serial is public, the key is not.
	bob, resp, err := issueOperator(t, e, &e.h.Admin, &pactv1.IssueOperatorRequest{Name: "bob", Role: pki.RolePlatformAdmin})
	if err != nil {
		t.Fatal(err)
	}
	twin := mintOperator(t, key, inter, journalCA, "bob", pki.RolePlatformAdmin, e.fc.Now())
	twinLeaf, _ := x509.ParseCertificate(twin.Certificate[0])
	issued, _ := x509.ParseCertificate(resp.GetCertDer())
	tmpl := *twinLeaf
	tmpl.SerialNumber, tmpl.NotAfter = issued.SerialNumber, issued.NotAfter
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, inter, twin.PrivateKey.(crypto.Signer).Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	twin.Certificate[0] = der
	before = e.registry(t)
	_, err = pactv1.NewAdminServiceClient(e.h.Dial(t, &twin)).RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: "n-mallory", Hardware: hw("SN-M", mac1)})
	e.refusedUnwritten(t, before, nil, err, codes.Unauthenticated, apierr.OperatorNotIssued)
	if _, err := pactv1.NewAdminServiceClient(e.h.Dial(t, &bob)).ListNodes(callCtx(t), &pactv1.ListNodesRequest{}); err != nil {
		t.Errorf("bob's issued credential: %v", err)
	}

	// (c) Signed by the root itself: recorded at its first use, accepted.
	dave := e.h.IssueAdmin(t, "dave", pki.RolePlatformAdmin)
	if _, ok := operators(t, e)[serialOf(t, dave)]; ok {
		t.Fatal("dave's credential is recorded before its first use")
	}
	if _, err := pactv1.NewAdminServiceClient(e.h.Dial(t, &dave)).RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: "n-dave", Hardware: hw("SN-D", mac2)}); err != nil {
		t.Fatalf("the root-signed credential: %v", err)
	}
	if o := operators(t, e)[serialOf(t, dave)]; o.GetName() != "dave" || o.GetIssuedBy() != raftfsm.IssuedAtFirstUse {
		t.Errorf("dave's record = %v, want one issued_by %s", o, raftfsm.IssuedAtFirstUse)
	}
	if n, err := e.admin.InspectNode(callCtx(t), &pactv1.InspectNodeRequest{NodeId: "n-mallory"}); err == nil {
		t.Errorf("the minted credential registered a node: %v", n)
	}
}

// quorumState is what a refused credential must leave untouched on a
// journal of a quorum: its nodes, its operator records, its audit trail
// and its Raft log.
type quorumState struct {
	nodes, operators, audit int
	applied                 uint64
}

func stateOf(t testing.TB, h *journaltest.Harness) quorumState {
	t.Helper()
	admin := h.AdminClient(t)
	nodes, err := admin.ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
	if err != nil {
		t.Fatalf("list nodes on %s: %v", h.Cfg.NodeID, err)
	}
	audit, err := admin.ListAudit(callCtx(t), &pactv1.ListAuditRequest{Limit: 10000})
	if err != nil {
		t.Fatalf("list audit on %s: %v", h.Cfg.NodeID, err)
	}
	return quorumState{nodes: len(nodes.GetNodes()), operators: len(operatorsOn(t, h)), audit: len(audit.GetEntries()), applied: nodes.GetAppliedIndex()}
}

// issueOn has journal h issue an operator credential with caller.
func issueOn(t testing.TB, h *journaltest.Harness, caller *tls.Certificate, req *pactv1.IssueOperatorRequest) (tls.Certificate, error) {
	t.Helper()
	key := journaltest.NewKey(t)
	req.CsrDer = key.CSR
	resp, err := pactv1.NewAdminServiceClient(h.Dial(t, caller)).IssueOperator(callCtx(t), req)
	if err != nil {
		return tls.Certificate{}, err
	}
	return key.TLSCert([][]byte{resp.GetCertDer()}), nil
}

// registerWith registers a node on h as cred.
func registerWith(t testing.TB, h *journaltest.Harness, cred *tls.Certificate, node, bmc, mac string) error {
	t.Helper()
	_, err := pactv1.NewAdminServiceClient(h.Dial(t, cred)).RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: node, Hardware: hw(bmc, mac)})
	return err
}

// (b) The intermediate key of a journal removed from a quorum of three
// (its intermediates left in the trust bundle: removed without
// --revoke-intermediate) authorizes no operator from the moment the removal
// commits: a platform-admin credential minted with it after the removal is
// refused on every remaining journal, and nothing is written; the removed
// journal itself cannot record one either.
func TestRemovedJournalKeyMintsNoOperator(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	victim, other := (leader+1)%3, (leader+2)%3
	lh, vh, oh := c.Nodes[leader], c.Nodes[victim], c.Nodes[other]
	// What an attacker read from the journal's memory, before or after
	// its removal.
	key, inter, journalCA := vh.J.IntermediateKeyForTest()
	if _, err := lh.AdminClient(t).RemoveJournal(callCtx(t), &pactv1.RemoveJournalRequest{JournalId: vh.Cfg.NodeID}); err != nil {
		t.Fatalf("remove %s: %v", vh.Cfg.NodeID, err)
	}

	// The removed journal, asked at once, records nothing: it is no
	// member, so neither its forwarded proposal nor its Raft is heard.
	before := stateOf(t, lh)
	if _, err := issueOn(t, vh, &vh.Admin, &pactv1.IssueOperatorRequest{Name: "mallory", Role: pki.RolePlatformAdmin}); err == nil {
		t.Fatalf("the removed journal %s issued an operator credential", vh.Cfg.NodeID)
	}
	if after := stateOf(t, lh); after.operators != before.operators || after.audit != before.audit {
		t.Fatalf("the removed journal's attempt reached the registry: %+v, then %+v", before, after)
	}

	// Its intermediate is still live in the bundle: the record rule, not
	// the bundle, refuses what it signs now.
	ints, err := lh.AdminClient(t).ListIntermediates(callCtx(t), &pactv1.ListIntermediatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	live := false
	for _, in := range ints.GetIntermediates() {
		live = live || (in.GetSerial() == pki.SerialHex(inter.SerialNumber) && in.GetRevokeAtUnixNano() == 0)
	}
	if !live {
		t.Fatalf("the removed journal's intermediate %s is not live in the bundle", pki.SerialHex(inter.SerialNumber))
	}

	mallory := mintOperator(t, key, inter, journalCA, "mallory", pki.RolePlatformAdmin, time.Now())
	for _, h := range []*journaltest.Harness{lh, oh} {
		before := stateOf(t, h)
		err := registerWith(t, h, &mallory, "n-mallory", "SN-M", mac1)
		refusedNotIssued(t, err, mallory, "mallory")
		_, err = pactv1.NewAdminServiceClient(h.Dial(t, &mallory)).JournalStatus(callCtx(t), &pactv1.JournalStatusRequest{})
		refusedNotIssued(t, err, mallory, "mallory")
		if after := stateOf(t, h); after != before {
			t.Errorf("the refusal on %s changed its registry: %+v, then %+v", h.Cfg.NodeID, before, after)
		}
		if _, ok := operatorsOn(t, h)[serialOf(t, mallory)]; ok {
			t.Errorf("%s recorded the minted credential", h.Cfg.NodeID)
		}
	}
}

// (d) pact admin issue's credential is recorded before it is returned: the
// moment the call returns through one journal, the leader's registry holds
// it; and it works on every journal. (e) pact admin renew's credential
// likewise. A credential minted with the issuing journal's key for the same
// name and role, never issued, is refused on every journal.
func TestIssuedOperatorRecordedBeforeReturn(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	f1, f2 := (leader+1)%3, (leader+2)%3
	lh, h1, h2 := c.Nodes[leader], c.Nodes[f1], c.Nodes[f2]

	alice, err := issueOn(t, h1, &h1.Admin, &pactv1.IssueOperatorRequest{Name: "alice", Role: pki.RolePlatformAdmin})
	if err != nil {
		t.Fatalf("issue through %s: %v", h1.Cfg.NodeID, err)
	}
	if o := operatorsOn(t, lh)[serialOf(t, alice)]; o.GetName() != "alice" || o.GetIssuedBy() != "admin/admin" {
		t.Fatalf("right after issue returned, the leader's record of alice's credential is %v", o)
	}
	for i, h := range []*journaltest.Harness{h2, lh, h1} {
		if err := registerWith(t, h, &alice, "n-alice-"+h.Cfg.NodeID, "SN-A"+h.Cfg.NodeID, mac(10+i)); err != nil {
			t.Fatalf("alice's issued credential on %s: %v", h.Cfg.NodeID, err)
		}
	}

	// pact admin renew: the same name and role, asked with the credential
	// held.
	alice2, err := issueOn(t, h2, &alice, &pactv1.IssueOperatorRequest{})
	if err != nil {
		t.Fatalf("renew through %s: %v", h2.Cfg.NodeID, err)
	}
	if o := operatorsOn(t, lh)[serialOf(t, alice2)]; o.GetName() != "alice" || o.GetRole() != pki.RolePlatformAdmin || o.GetIssuedBy() != "admin/alice" {
		t.Fatalf("right after renew returned, the leader's record of alice's renewed credential is %v", o)
	}
	for i, h := range []*journaltest.Harness{h1, lh, h2} {
		if err := registerWith(t, h, &alice2, "n-alice2-"+h.Cfg.NodeID, "SN-B"+h.Cfg.NodeID, mac(20+i)); err != nil {
			t.Fatalf("alice's renewed credential on %s: %v", h.Cfg.NodeID, err)
		}
	}

	key, inter, journalCA := h1.J.IntermediateKeyForTest()
	twin := mintOperator(t, key, inter, journalCA, "alice", pki.RolePlatformAdmin, time.Now())
	// Every journal has applied the registrations above before its state
	// is compared: a follower applying one of them late is no write of
	// the refusal's.
	want := stateOf(t, lh).applied
	for _, h := range c.Nodes {
		waitFor(t, h.Cfg.NodeID+" to apply what the leader applied", func() bool { return stateOf(t, h).applied >= want })
	}
	for _, h := range c.Nodes {
		before := stateOf(t, h)
		refusedNotIssued(t, registerWith(t, h, &twin, "n-twin", "SN-T", mac(30)), twin, "alice")
		if after := stateOf(t, h); after != before {
			t.Errorf("the refusal on %s changed its registry: %+v, then %+v", h.Cfg.NodeID, before, after)
		}
	}
}
