package journal_test

import (
	"crypto/tls"
	"crypto/x509"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The rollover that locked its operator out (docs/rollover.md), in a real
// quorum: alice renewed her credential through j1 under j1's old journal
// CA; the ceremony re-issues j1's journal CA (same key) and she retires
// j1's intermediates, and the answer says when her credential stops. Her
// revocation of j1's old journal CA, a retirement of her intermediate with
// no grace and a removal of j1 with its intermediates are each refused,
// changing nothing, naming her chain and where to renew (a journal that
// signs under a chain the change leaves). Renewed there (pact admin renew,
// as the refusal says), the revocation goes through: j1 goes on signing
// under its new journal CA, bob's credential from under the old one is
// named, and her old credential is refused. With
// --yes-including-my-credential a retirement with no grace cuts its caller
// off, as asked, and says so.
func TestRolloverRefusesToCutOffItsOperator(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	c := journaltest.StartCluster(t, root, cfgs)
	leader := c.Leader(t)
	j1, j2 := c.Nodes[0], c.Nodes[1]
	admin := func(h *journaltest.Harness, cred *tls.Certificate) pactv1.AdminServiceClient {
		return pactv1.NewAdminServiceClient(h.Dial(t, cred))
	}
	oldCA, oldInter := pki.SerialHex(j1.J.JournalCA().SerialNumber), j1.J.Intermediate()
	c.Nodes[leader].Register(t, "n0", "SN0", mac(0))
	if _, err := j1.Enroll(t, journaltest.NewKey(t), "SN0", mac(0)); err != nil {
		t.Fatal(err)
	}

	// alice and bob, issued through j1: their records name the chain.
	alice, err := issueOn(t, j1, &j1.Admin, &pactv1.IssueOperatorRequest{Name: "alice", Role: pki.RolePlatformAdmin})
	if err != nil {
		t.Fatal(err)
	}
	aliceSerial := leafSerial(t, alice)
	if _, err := issueOn(t, j1, &j1.Admin, &pactv1.IssueOperatorRequest{Name: "bob", Role: pki.RoleViewer}); err != nil {
		t.Fatal(err)
	}
	ops, err := admin(j2, &alice).ListOperators(callCtx(t), &pactv1.ListOperatorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ops.GetOperators() {
		switch {
		case o.GetName() == "alice" || o.GetName() == "bob":
			if o.GetIssuerSerial() != oldInter || o.GetJournalCaSerial() != oldCA || o.GetRootSigned() {
				t.Errorf("record of %s names issuer %q under %q (root %v), want %s under %s", o.GetName(), o.GetIssuerSerial(), o.GetJournalCaSerial(), o.GetRootSigned(), oldInter, oldCA)
			}
		case !o.GetRootSigned():
			t.Errorf("the bootstrap credential's record %v is not marked root-signed", o)
		}
	}

	// Step 3: j1's journal CA re-issued for its key, j1 re-keyed under it.
	if err := journaltest.JournalCA(&c.Configs[0], root); err != nil {
		t.Fatal(err)
	}
	retired, err := admin(j2, &alice).RetireIntermediate(callCtx(t), &pactv1.RetireIntermediateRequest{Targets: []string{"j1"}, GraceSeconds: 3600, Reason: "root rollover"})
	if err != nil {
		t.Fatal(err)
	}
	own := retired.GetOwnCredential()
	if own.GetSerial() != aliceSerial || own.GetIntermediateSerial() != oldInter || own.GetJournalCaSerial() != oldCA || own.GetJournalId() != "j1" ||
		time.Until(time.Unix(0, own.GetStopsAtUnixNano())) < 50*time.Minute {
		t.Errorf("the retirement says of alice's credential %v; want it under %s/%s, stopping in an hour", own, oldInter, oldCA)
	}
	if len(retired.GetUnchanged()) != 0 {
		t.Errorf("unchanged %v, want none", retired.GetUnchanged())
	}
	waitFor(t, "j1 re-keyed under its new journal CA", func() bool {
		_, ok := j1.J.IntermediateRecordForTest(j1.J.Intermediate())
		return pki.SerialHex(j1.J.JournalCA().SerialNumber) != oldCA && ok
	})
	newCA := pki.SerialHex(j1.J.JournalCA().SerialNumber)
	// Retired again: already retiring, unchanged.
	again, err := admin(j2, &alice).RetireIntermediate(callCtx(t), &pactv1.RetireIntermediateRequest{Targets: []string{oldInter}, GraceSeconds: 7200})
	if err != nil || !slices.Equal(again.GetUnchanged(), []string{oldInter}) {
		t.Errorf("retiring a retiring intermediate again: unchanged %v (%v), want [%s]", again.GetUnchanged(), err, oldInter)
	}

	// Step 5 before step 4: each change that cuts alice off is refused.
	refused := func(what string, err error) string {
		t.Helper()
		pe := apierr.FromError(err)
		if pe == nil || pe.Code != codes.FailedPrecondition || pe.Reason != apierr.RevokesOwnCredential {
			t.Fatalf("%s: %v, want FAILED_PRECONDITION %s", what, err, apierr.RevokesOwnCredential)
		}
		for _, want := range []string{aliceSerial, "intermediate " + oldInter + " of journal j1", "under journal CA " + oldCA, "pact admin renew --journal ", "--yes-including-my-credential", "nothing was changed"} {
			if !strings.Contains(pe.Message, want) {
				t.Errorf("%s: the refusal does not say %q:\n%s", what, want, pe.Message)
			}
		}
		return pe.Message
	}
	msg := refused("revoke-ca", func() error {
		_, err := admin(j2, &alice).RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Targets: []string{oldCA}, Reason: "root rollover"})
		return err
	}())
	refused("retire --now", func() error {
		_, err := admin(j2, &alice).RetireIntermediate(callCtx(t), &pactv1.RetireIntermediateRequest{Targets: []string{oldInter}, Now: true})
		return err
	}())
	refused("remove --revoke-intermediate", func() error {
		_, err := admin(c.Nodes[leader], &alice).RemoveJournal(callCtx(t), &pactv1.RemoveJournalRequest{JournalId: "j1", RevokeIntermediate: true})
		return err
	}())
	list, err := admin(j2, &alice).ListIntermediates(callCtx(t), &pactv1.ListIntermediatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// j1's current intermediate is the one it re-keyed to; the node
	// enrolled before the re-key is counted under the old one.
	if cur := list.GetCurrentIntermediates(); !slices.Contains(cur, j1.J.Intermediate()) || slices.Contains(cur, oldInter) || len(cur) != 3 {
		t.Errorf("current intermediates %v, want j1's %s (not %s) and one of each other journal", cur, j1.J.Intermediate(), oldInter)
	}
	if n := list.GetNodeCertificates(); n[oldInter] != 1 || n[j1.J.Intermediate()] != 0 {
		t.Errorf("nodes under each intermediate: %v, want n0 under %s", n, oldInter)
	}
	for _, jc := range list.GetJournalCas() {
		if jc.GetRevokedAtUnixNano() != 0 {
			t.Errorf("journal CA %s revoked by a refused request", jc.GetSerial())
		}
	}
	for _, in := range list.GetIntermediates() {
		if in.GetSerial() == oldInter && in.GetRevokeAtUnixNano() <= time.Now().UnixNano() {
			t.Errorf("intermediate %s revoked by a refused request", oldInter)
		}
	}
	if st, err := admin(j2, &alice).JournalStatus(callCtx(t), &pactv1.JournalStatusRequest{}); err != nil || len(st.GetMembers()) != 3 {
		t.Errorf("a refused removal changed the quorum: %v %v", st.GetMembers(), err)
	}

	// Step 4: alice renews where the refusal says.
	addr := regexp.MustCompile(`pact admin renew --journal (\S+)`).FindStringSubmatch(msg)
	var via *journaltest.Harness
	for _, h := range c.Nodes {
		if addr != nil && h.Addr == addr[1] {
			via = h
		}
	}
	if via == nil {
		t.Fatalf("the refusal names no journal of the quorum to renew through:\n%s", msg)
	}
	renewed, err := issueOn(t, via, &alice, &pactv1.IssueOperatorRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := via.J.OperatorRecordForTest(leafSerial(t, renewed))
	if !ok || rec.GetIssuerSerial() != via.J.Intermediate() || rec.GetJournalCaSerial() == oldCA || rec.GetJournalCaSerial() != pki.SerialHex(via.J.JournalCA().SerialNumber) {
		t.Errorf("the renewed credential's record %v, want it under %s's current chain", rec, via.Cfg.NodeID)
	}

	// Step 5 with the renewed credential: j1 signs on under its new
	// journal CA; bob's credential went with the old one.
	resp, err := admin(j2, &renewed).RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Targets: []string{oldCA}, Reason: "root rollover"})
	if err != nil {
		t.Fatal(err)
	}
	if b := resp.GetBound(); len(b) != 1 || b[0].GetJournalId() != "j1" || b[0].GetSerial() != newCA || b[0].GetRevokedAtUnixNano() != 0 {
		t.Errorf("bound after the revocation %v, want j1 on its live journal CA %s", b, newCA)
	}
	if resp.GetOwnCredential() != nil {
		t.Errorf("own credential %v, want none: the renewed one is under another chain", resp.GetOwnCredential())
	}
	var named []string
	for _, o := range resp.GetOperators() {
		named = append(named, o.GetName())
	}
	if !slices.Equal(named, []string{"bob"}) {
		t.Errorf("operators named as cut off with the journal CA: %v, want bob alone (alice renewed onto another chain)", named)
	}
	waitFor(t, "alice's old credential refused", func() bool {
		_, err := admin(j2, &alice).ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
		return err != nil
	})
	if _, err := admin(j1, &renewed).ListNodes(callCtx(t), &pactv1.ListNodesRequest{}); err != nil {
		t.Errorf("alice's renewed credential: %v", err)
	}
	if _, err := j1.Enroll(t, journaltest.NewKey(t), "SN-none", mac(1)); apierr.FromError(err).Reason == apierr.JournalCARevoked {
		t.Errorf("j1 stopped signing: %v", err)
	}

	// Asked for, a retirement with no grace cuts its caller off, and says so.
	j3 := c.Nodes[2]
	carol, err := issueOn(t, j3, &j3.Admin, &pactv1.IssueOperatorRequest{Name: "carol", Role: pki.RolePlatformAdmin})
	if err != nil {
		t.Fatal(err)
	}
	carolInter := j3.J.Intermediate()
	cut, err := admin(j2, &carol).RetireIntermediate(callCtx(t), &pactv1.RetireIntermediateRequest{Targets: []string{carolInter}, Now: true, RevokeOwnCredential: true, Reason: "drill"})
	if err != nil {
		t.Fatal(err)
	}
	if o := cut.GetOwnCredential(); o.GetSerial() != leafSerial(t, carol) || o.GetIntermediateSerial() != carolInter || o.GetStopsAtUnixNano() > time.Now().UnixNano() {
		t.Errorf("own credential after retiring it at once: %v", o)
	}
	waitFor(t, "carol's credential refused", func() bool {
		_, err := admin(j2, &carol).ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
		return err != nil
	})
}

// leafSerial is the serial of a credential's certificate.
func leafSerial(t *testing.T, c tls.Certificate) string {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return pki.SerialHex(leaf.SerialNumber)
}
