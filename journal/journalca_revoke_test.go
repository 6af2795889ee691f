package journal_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// selfSigned is a CA certificate of serial, valid until notAfter: it
// stands for a journal CA or an intermediate in the registry (nothing
// chains to it).
func selfSigned(t testing.TB, serial int64, notAfter time.Time) *x509.Certificate {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: notAfter.Add(-400 * 24 * time.Hour), NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// selfSignedJournalCA is selfSigned in the journal CA's shape for
// journalID (the registry reads its journal and key, not its signature).
func selfSignedJournalCA(t testing.TB, journalID string, serial int64, notAfter time.Time) *x509.Certificate {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "pact journal CA " + journalID + "@pact.local"},
		NotBefore: notAfter.Add(-400 * 24 * time.Hour), NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, MaxPathLen: 1, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// publishUnderJournalCA records in the journal's registry an intermediate
// of journalID under a journal CA, as that journal would publish it, and
// returns the journal CA's serial and the intermediate's. Today's journals
// publish root-signed intermediates: this stands for one of the journal
// CA layout.
func (e *env) publishUnderJournalCA(t *testing.T, journalID string, caSerial, interSerial int64, caNotAfter time.Time) (string, string) {
	t.Helper()
	jc, in := selfSignedJournalCA(t, journalID, caSerial, caNotAfter), selfSigned(t, interSerial, e.fc.Now().Add(24*time.Hour))
	cmd := &pactv1.Command{Actor: "journal/" + journalID, AtUnixNano: e.fc.Now().UnixNano(), Op: &pactv1.Command_PublishIntermediate{PublishIntermediate: &pactv1.PublishIntermediateOp{
		Intermediate: &pactv1.Intermediate{JournalId: journalID, Serial: pki.SerialHex(in.SerialNumber), Der: in.Raw, NotAfterUnix: in.NotAfter.Unix(), IssuerSerial: pki.SerialHex(jc.SerialNumber)},
		JournalCa:    &pactv1.JournalCA{JournalId: journalID, Serial: pki.SerialHex(jc.SerialNumber), Der: jc.Raw, NotAfterUnix: jc.NotAfter.Unix()},
	}}}
	data, err := raftfsm.Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-e.h.J.ApplyRaw(data, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	return pki.SerialHex(jc.SerialNumber), pki.SerialHex(in.SerialNumber)
}

// RevokeJournalCA by journal id or serial: refusals change nothing, the
// answer names the journal CAs and the intermediates that left the bundle
// with them, a second revocation answers the same, and the listing, the
// audit trail and the metrics show it.
func TestRevokeJournalCA(t *testing.T) {
	e := newEnv(t)
	now := e.fc.Now()
	caX, inX := e.publishUnderJournalCA(t, "jx", 0x0a01, 0x0b01, now.Add(365*24*time.Hour))
	caY, inY := e.publishUnderJournalCA(t, "jy", 0x0a02, 0x0b02, now.Add(20*24*time.Hour))
	reg := e.h.J.MetricsRegistry()
	for id, want := range map[string]time.Time{"jx": now.Add(365 * 24 * time.Hour), "jy": now.Add(20 * 24 * time.Hour)} {
		if got := must(t, reg, "pact_journal_ca_expiry_timestamp_seconds", "journal_id", id); got != float64(want.Unix()) {
			t.Errorf("journal CA expiry of %s = %v, want %d", id, got, want.Unix())
		}
	}
	if got := must(t, reg, "pact_journal_ca_revoked"); got != 0 {
		t.Errorf("pact_journal_ca_revoked = %v before any revocation", got)
	}

	list, err := e.admin.ListIntermediates(callCtx(t), &pactv1.ListIntermediatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The journal's own journal CA first (j1 sorts before jx), then jx's
	// and jy's.
	own := pki.SerialHex(e.h.J.JournalCA().SerialNumber)
	if cas := list.GetJournalCas(); len(cas) != 3 || cas[0].GetSerial() != own || cas[1].GetSerial() != caX || cas[2].GetSerial() != caY || cas[1].GetJournalId() != "jx" || len(cas[1].GetDer()) != 0 || cas[1].GetRecordedAtUnixNano() != now.UnixNano() {
		t.Fatalf("listed journal CAs %v", cas)
	}
	issuers := map[string]string{}
	for _, in := range list.GetIntermediates() {
		issuers[in.GetSerial()] = in.GetIssuerSerial()
	}
	if issuers[inX] != caX || issuers[inY] != caY || issuers[e.h.J.Intermediate()] != own {
		t.Errorf("listed issuers %v", issuers)
	}

	before := e.registry(t)
	_, err = e.admin.RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Reason: "x"})
	e.refused(t, before, nil, err, codes.InvalidArgument, apierr.InvalidArgument)
	_, err = e.admin.RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Targets: []string{"jx", "nope"}, Reason: "x"})
	pe := e.refused(t, before, nil, err, codes.NotFound, apierr.NotFound)
	if !strings.Contains(pe.Message, `"nope"`) || !strings.Contains(pe.Message, "pact journal intermediates") {
		t.Errorf("the refusal does not say what to do: %s", pe.Message)
	}
	// An intermediate's serial is no journal CA's.
	_, err = e.admin.RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Targets: []string{inX}, Reason: "x"})
	e.refused(t, before, nil, err, codes.NotFound, apierr.NotFound)

	e.fc.Advance(time.Minute)
	revokedAt := e.fc.Now().UnixNano()
	for _, targets := range [][]string{{"jx"}, {caX, "jx"}} {
		resp, err := e.admin.RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Targets: targets, Reason: "host stolen"})
		if err != nil {
			t.Fatalf("revoke %v: %v", targets, err)
		}
		r := resp.GetRevoked()
		if len(r) != 1 || r[0].GetSerial() != caX || r[0].GetRevokedAtUnixNano() != revokedAt ||
			r[0].GetRevokeReason() != "host stolen" || !strings.HasPrefix(r[0].GetRevokedBy(), "admin/") || len(r[0].GetDer()) != 0 {
			t.Errorf("revoke %v: revoked %v", targets, r)
		}
		if ins := resp.GetIntermediates(); len(ins) != 1 || ins[0].GetSerial() != inX || ins[0].GetRevokeAtUnixNano() != revokedAt || ins[0].GetIssuerSerial() != caX {
			t.Errorf("revoke %v: intermediates %v", targets, ins)
		}
	}
	var revokes int
	for _, a := range e.audit(t, "") {
		if a.GetAction() == "journal-ca-revoke" {
			revokes++
			if a.GetSerial() != caX || !strings.Contains(a.GetDetail(), "host stolen") {
				t.Errorf("audit entry %v", a)
			}
		}
	}
	if revokes != 1 {
		t.Errorf("%d journal-ca-revoke audit entries, want 1", revokes)
	}
	list, err = e.admin.ListIntermediates(callCtx(t), &pactv1.ListIntermediatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, jc := range list.GetJournalCas() {
		if revoked := jc.GetRevokedAtUnixNano() != 0; revoked != (jc.GetSerial() == caX) {
			t.Errorf("listed after the revocation: %v", jc)
		}
	}
	if _, ok := gathered(t, reg, "pact_journal_ca_expiry_timestamp_seconds", "journal_id", "jx"); ok {
		t.Error("a revoked journal CA still has an expiry series")
	}
	must(t, reg, "pact_journal_ca_expiry_timestamp_seconds", "journal_id", "jy")
	// This journal's own journal CA is not concerned.
	if got := must(t, reg, "pact_journal_ca_revoked"); got != 0 {
		t.Errorf("pact_journal_ca_revoked = %v for a journal whose own journal CA is live", got)
	}
	// and it goes on signing.
	e.activate(t, "n1", "SN1", mac1)
}

// A journal whose journal CA is revoked refuses to sign: Enroll and
// IssueOperator are answered UNAVAILABLE (JOURNAL_CA_REVOKED), so the
// agent goes to another journal, pact_journal_ca_revoked says so, and a
// certificate it had signed is refused (UNAUTHENTICATED).
func TestJournalCARevokedStopsSigning(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	e.register(t, "n2", "SN2", mac2)
	id := e.cfg.NodeID
	caSerial := pki.SerialHex(e.h.J.JournalCA().SerialNumber)
	reg := e.h.J.MetricsRegistry()
	if got := must(t, reg, "pact_journal_ca_revoked"); got != 0 {
		t.Fatalf("pact_journal_ca_revoked = %v with a live journal CA", got)
	}
	rekeyedFrom, appliedBefore := e.h.J.Intermediate(), e.registry(t).applied
	if _, err := e.admin.RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Targets: []string{id}, Reason: "host stolen"}); err != nil {
		t.Fatal(err)
	}
	// Its intermediate went with its journal CA: the journal re-keys at
	// once, and the registry refuses to publish the new intermediate — a
	// Raft entry after the revocation's, applied before the refusals below
	// are counted (whatever the machine's speed).
	waitFor(t, "the re-key after the revocation", func() bool { return e.h.J.Intermediate() != rekeyedFrom })
	waitFor(t, "the refused publication applied", func() bool { return e.registry(t).applied >= appliedBefore+2 })
	if got := must(t, reg, "pact_journal_ca_revoked"); got != 1 {
		t.Errorf("pact_journal_ca_revoked = %v, want 1", got)
	}
	before := e.registry(t)
	resp, err := e.enroll(t, journaltest.NewKey(t), "SN2", mac2)
	pe := e.refusedUnwritten(t, before, resp, err, codes.Unavailable, apierr.JournalCARevoked)
	if !strings.Contains(pe.Message, caSerial) || !strings.Contains(pe.Message, "another journal") || strings.Contains(pe.Message, "host stolen") {
		t.Errorf("the refusal: %s", pe.Message)
	}
	// n1's certificate is under the revoked journal CA: cut off, as on
	// every journal (TestRevokingAJournalCACutsItOffEverywhere).
	_, err = e.renew(t, a)
	e.refusedUnwritten(t, before, nil, err, codes.Unauthenticated, apierr.Unauthenticated)
	_, err = e.admin.IssueOperator(callCtx(t), &pactv1.IssueOperatorRequest{Name: "bob", Role: "viewer", CsrDer: operatorCSR()})
	e.refusedUnwritten(t, before, nil, err, codes.Unavailable, apierr.JournalCARevoked)
}

// TestRevokingAJournalCACutsItOffEverywhere is the compromised journal
// host of docs/security.md: what its journal CA signed — an agent's
// certificate, an operator credential issued online — is accepted on every
// journal until an operator revokes the journal CA at another journal;
// from then on it is refused on every journal (the other journals' agents
// and operators unaffected), and the revoked journal signs nothing.
func TestRevokingAJournalCACutsItOffEverywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	c := journaltest.StartCluster(t, root, cfgs)
	leader := c.Leader(t)
	for i := range 3 {
		c.Nodes[leader].Register(t, fmt.Sprintf("n%d", i), fmt.Sprintf("SN%d", i), mac(i))
	}
	// n0 enrolls at j1 (the journal to be revoked), n1 at j2.
	certs := make([]tls.Certificate, 2)
	for i := range 2 {
		key := journaltest.NewKey(t)
		resp, err := c.Nodes[i].Enroll(t, key, fmt.Sprintf("SN%d", i), mac(i))
		if err != nil {
			t.Fatalf("enroll n%d at %s: %v", i, c.Nodes[i].Cfg.NodeID, err)
		}
		certs[i] = key.TLSCert(resp.GetCertChainDer())
	}
	// bob's credential, issued online by j1: under j1's intermediate.
	bobKey := journaltest.NewKey(t)
	issued, err := c.Nodes[0].AdminClient(t).IssueOperator(context.Background(), &pactv1.IssueOperatorRequest{Name: "bob", Role: "viewer", CsrDer: bobKey.CSR})
	if err != nil {
		t.Fatal(err)
	}
	bob := tls.Certificate{Certificate: [][]byte{issued.GetCertDer()}, PrivateKey: bobKey.Signer}

	agentCall := func(h *journaltest.Harness, cert tls.Certificate) error {
		ctx, cancel := context.WithCancel(callCtx(t))
		defer cancel() // the stream ends: a node holds at most 3
		stream, err := pactv1.NewEnrollmentServiceClient(h.Dial(t, &cert)).Subscribe(ctx, &pactv1.SubscribeRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		return err
	}
	operatorCall := func(h *journaltest.Harness, cert tls.Certificate) error {
		_, err := pactv1.NewAdminServiceClient(h.Dial(t, &cert)).ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
		return err
	}
	for _, h := range c.Nodes {
		if err := agentCall(h, certs[0]); err != nil {
			t.Fatalf("before the revocation, n0 (under j1's journal CA) at %s: %v", h.Cfg.NodeID, err)
		}
		if err := operatorCall(h, bob); err != nil {
			t.Fatalf("before the revocation, bob (issued by j1) at %s: %v", h.Cfg.NodeID, err)
		}
	}

	// The operator revokes j1's journal CA at j2.
	resp, err := c.Nodes[1].AdminClient(t).RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Targets: []string{"j1"}, Reason: "host j1 compromised"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetRevoked()) != 1 || resp.GetRevoked()[0].GetSerial() != pki.SerialHex(c.Nodes[0].J.JournalCA().SerialNumber) {
		t.Fatalf("revoked %v, want j1's journal CA", resp.GetRevoked())
	}
	// bob sent his certificate alone: the handshake finds no live CA for
	// it and refuses with the bad_certificate alert. j1 itself — the
	// compromised journal — is no longer a peer of the quorum from the
	// commit on (its intermediate went with its journal CA): it may never
	// learn of its own revocation, and it can neither write nor confirm a
	// read with the leader. What counts is every other journal.
	refused := func(err error) bool {
		return status.Code(err) == codes.Unauthenticated || (err != nil && strings.Contains(err.Error(), "bad certificate"))
	}
	// A copy that lags the revocation admits n0 for that moment; if j1
	// led, j2 and j3 elect another leader first (about 2 s) and until then
	// answer retryably (NO_LEADER, or JOURNAL_HALTED from the cut-off j1
	// they still forward to). Then the answer is a refusal.
	unavailable := func(err error) bool { return status.Code(err) == codes.Unavailable }
	for _, h := range c.Nodes[1:] {
		var agentErr, bobErr error
		waitFor(t, "n0 refused at "+h.Cfg.NodeID, func() bool {
			agentErr = agentCall(h, certs[0])
			return refused(agentErr) || agentErr != nil && !unavailable(agentErr)
		})
		if !refused(agentErr) {
			t.Errorf("n0 at %s after the revocation: %v, want it refused", h.Cfg.NodeID, agentErr)
		}
		waitFor(t, "bob refused at "+h.Cfg.NodeID, func() bool {
			bobErr = operatorCall(h, bob)
			return refused(bobErr) || bobErr != nil && !unavailable(bobErr)
		})
		if !refused(bobErr) {
			t.Errorf("bob at %s after the revocation: %v, want him refused", h.Cfg.NodeID, bobErr)
		}
	}
	// j1 may never learn of its revocation (the others cut it off as
	// they apply it); it learns it is cut off when they refuse it as a
	// peer (PEER_WITHDRAWN), and then serves no stream, so its agents go
	// to a journal of the quorum.
	waitFor(t, "j1 to find itself cut off and refuse n0's stream", func() bool {
		return c.Nodes[0].J.Halted() != "" && agentCall(c.Nodes[0], certs[0]) != nil
	})
	// What the other journals signed is untouched.
	for _, h := range c.Nodes[1:] {
		if err := agentCall(h, certs[1]); err != nil {
			t.Errorf("n1 (under j2's journal CA) at %s: %v", h.Cfg.NodeID, err)
		}
	}
	// j1 signs nothing: its next enrollment goes elsewhere. Cut off by
	// the quorum, it serves nothing (JOURNAL_HALTED, naming who refuses it
	// and why).
	_, err = c.Nodes[0].Enroll(t, journaltest.NewKey(t), "SN2", mac(2))
	if pe := apierr.FromError(err); pe.Code != codes.Unavailable || pe.Reason != "JOURNAL_HALTED" || !strings.Contains(pe.Message, "revoked") {
		t.Errorf("enroll at j1 after the revocation: %v, want UNAVAILABLE (JOURNAL_HALTED: its journal CA revoked)", err)
	}
	// At j3 it enrolls, once j2 and j3 have a leader (j1 may have led).
	key := journaltest.NewKey(t)
	var last error
	waitFor(t, "n2 to enroll at j3", func() bool {
		_, last = c.Nodes[2].Enroll(t, key, "SN2", mac(2))
		return last == nil || !unavailable(last)
	})
	if last != nil {
		t.Errorf("enroll at j3 after the revocation: %v", last)
	}
}

// A journal CA revoked at another journal is seen by every journal of the
// quorum (pact_journal_member_ca_revoked, which PactJournalCARevoked
// reads): the revoked journal is cut off from the commit on and may never
// apply its own revocation, so its own pact_journal_ca_revoked can stay 0
// (make monitoring-e2e saw PactJournalCARevoked not fire).
func TestMemberCARevokedSeenByTheOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	c := journaltest.StartCluster(t, root, cfgs)
	for _, h := range c.Nodes {
		for _, m := range c.Nodes {
			waitFor(t, h.Cfg.NodeID+" to report "+m.Cfg.NodeID, func() bool {
				v, ok := gathered(t, h.J.MetricsRegistry(), "pact_journal_member_ca_revoked", "journal_id", m.Cfg.NodeID)
				return ok && v == 0
			})
		}
	}
	victim := (c.Leader(t) + 1) % 3
	id := c.Configs[victim].NodeID
	at := (victim + 1) % 3
	if _, err := c.Nodes[at].AdminClient(t).RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Targets: []string{id}, Reason: "host stolen"}); err != nil {
		t.Fatal(err)
	}
	for i, h := range c.Nodes {
		if i == victim {
			continue // it may never learn (cut off)
		}
		waitFor(t, h.Cfg.NodeID+" to report "+id+"'s journal CA revoked", func() bool {
			v, ok := gathered(t, h.J.MetricsRegistry(), "pact_journal_member_ca_revoked", "journal_id", id)
			return ok && v == 1
		})
		for k, m := range c.Nodes {
			if k == victim {
				continue
			}
			if got := must(t, h.J.MetricsRegistry(), "pact_journal_member_ca_revoked", "journal_id", m.Cfg.NodeID); got != 0 {
				t.Errorf("%s reports pact_journal_member_ca_revoked{journal_id=%q} = %v, want 0", h.Cfg.NodeID, m.Cfg.NodeID, got)
			}
		}
	}
}
