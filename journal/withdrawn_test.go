package journal_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// A node whose certificate's issuer was revoked is cut off everywhere; its
// agent enrolls again with a new key, and the registry, whose own records
// say the old certificate authenticates nowhere, lets it at once: no
// takeover window to sit out (the fake clock does not move), though the
// old agent streamed here a moment before. The activation is audited as a
// takeover saying why.
func TestRevokedIssuerFreesItsNodesAtOnce(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	w := e.subscribe(t, a)
	defer w.close(t, e)
	issuer := e.h.J.Intermediate()
	if _, err := e.admin.RetireIntermediate(callCtx(t), &pactv1.RetireIntermediateRequest{Targets: []string{issuer}, Now: true, Reason: "compromised"}); err != nil {
		t.Fatal(err)
	}
	// The journal re-keys: the new certificate comes from its new
	// intermediate.
	waitFor(t, "the re-key after the revocation", func() bool { return e.h.J.Intermediate() != issuer })
	key := journaltest.NewKey(t)
	resp, err := e.enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatalf("enroll again with a new key after the issuer was revoked: %v", err)
	}
	n := e.node(t, "n1")
	if n.GetState() != stActive || n.GetCert().GetSerial() != resp.GetSerial() || resp.GetSerial() == a.serial || n.GetCert().GetIssuerSerial() == issuer {
		t.Errorf("registry after the enrollment: %v, want active with %s under a live intermediate", n, resp.GetSerial())
	}
	last := e.lastAudit(t, "n1")
	if last.GetAction() != "takeover" || last.GetSerial() != resp.GetSerial() || !strings.Contains(last.GetDetail(), a.serial) ||
		!strings.Contains(last.GetDetail(), "its issuer "+issuer) || !strings.Contains(last.GetDetail(), "was revoked") {
		t.Errorf("audit %v, want a takeover replacing %s whose issuer %s was revoked", last, a.serial, issuer)
	}
	if got := must(t, e.h.J.MetricsRegistry(), "pact_journal_enroll_total", "result", "takeover"); got != 1 {
		t.Errorf("enrollments counted as takeover: %v, want 1", got)
	}
	// The new key is the node's now: another one waits for the window.
	before := e.registry(t)
	resp, err = e.enroll(t, journaltest.NewKey(t), "SN1", mac1)
	e.refusedUnwritten(t, before, resp, err, codes.FailedPrecondition, apierr.AlreadyActive)
}

// TestRevokedJournalCAFreesItsNodesAtOnce is the revoke-ca of a journal
// host in a real quorum: the node that journal signed for is refused
// everywhere, and its agent, enrolling again with a new key through
// another journal, gets a certificate at once instead of ALREADY_ACTIVE
// until the takeover window passes. The nodes of the other journals keep
// theirs.
func TestRevokedJournalCAFreesItsNodesAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	c := journaltest.StartCluster(t, root, cfgs)
	leader := c.Leader(t)
	for i := range 2 {
		c.Nodes[leader].Register(t, fmt.Sprintf("n%d", i), fmt.Sprintf("SN%d", i), mac(i))
	}
	// n0 enrolls at j1, whose journal CA is to be revoked; n1 at j2.
	old := make([]*pactv1.EnrollResponse, 2)
	for i := range 2 {
		resp, err := c.Nodes[i].Enroll(t, journaltest.NewKey(t), fmt.Sprintf("SN%d", i), mac(i))
		if err != nil {
			t.Fatalf("enroll n%d at %s: %v", i, c.Nodes[i].Cfg.NodeID, err)
		}
		old[i] = resp
	}
	caSerial := pki.SerialHex(c.Nodes[0].J.JournalCA().SerialNumber)
	if _, err := c.Nodes[1].AdminClient(t).RevokeJournalCA(callCtx(t), &pactv1.RevokeJournalCARequest{Targets: []string{"j1"}, Reason: "host j1 compromised"}); err != nil {
		t.Fatal(err)
	}
	// j3, the journal n0's agent turns to, has applied the revocation.
	waitFor(t, "j3 to apply the revocation", func() bool {
		list, err := c.Nodes[2].AdminClient(t).ListIntermediates(callCtx(t), &pactv1.ListIntermediatesRequest{})
		if err != nil {
			return false
		}
		for _, jc := range list.GetJournalCas() {
			if jc.GetSerial() == caSerial {
				return jc.GetRevokedAtUnixNano() != 0
			}
		}
		return false
	})
	// j1's peers cut it off with its journal CA: if it led, j2 and j3 elect
	// a leader of their own, and an enrollment forwarded to j1 in between
	// would end OUTCOME_UNKNOWN (the agent retries; this test would not).
	waitFor(t, "j2 and j3 to agree on a leader other than j1", func() bool {
		l := c.Nodes[2].J.KnownLeader()
		return l != "" && l != "j1" && c.Nodes[1].J.KnownLeader() == l && (c.Nodes[1].J.IsLeader() || c.Nodes[2].J.IsLeader())
	})
	// Seconds after n0 enrolled, far inside the 60 s takeover window.
	key := journaltest.NewKey(t)
	resp, err := c.Nodes[2].Enroll(t, key, "SN0", mac(0))
	if err != nil {
		t.Fatalf("n0 enrolls again with a new key at j3 after j1's journal CA was revoked: %v", err)
	}
	if resp.GetSerial() == old[0].GetSerial() || resp.GetNodeId() != "n0" {
		t.Fatalf("enrolled %s serial %s, want n0 with a new certificate", resp.GetNodeId(), resp.GetSerial())
	}
	audit, err := c.Nodes[2].AdminClient(t).ListAudit(callCtx(t), &pactv1.ListAuditRequest{NodeId: "n0", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	es := audit.GetEntries()
	last := es[len(es)-1]
	if last.GetAction() != "takeover" || last.GetSerial() != resp.GetSerial() || !strings.Contains(last.GetDetail(), old[0].GetSerial()) ||
		!strings.Contains(last.GetDetail(), "journal j1's journal CA "+caSerial) {
		t.Errorf("audit %v, want a takeover replacing %s, whose issuer went with j1's journal CA %s", last, old[0].GetSerial(), caSerial)
	}
	// n1, signed by j2, is held as before: a new key is refused.
	if _, err := c.Nodes[2].Enroll(t, journaltest.NewKey(t), "SN1", mac(1)); err == nil || !strings.Contains(err.Error(), "ALREADY_ACTIVE") {
		t.Errorf("n1 (under j2's journal CA) with a new key: %v, want ALREADY_ACTIVE", err)
	}
	// The new certificate streams at the journals of the quorum.
	for _, h := range c.Nodes[1:] {
		cert := key.TLSCert(resp.GetCertChainDer())
		ctx, cancel := context.WithCancel(callCtx(t))
		stream, err := pactv1.NewEnrollmentServiceClient(h.Dial(t, &cert)).Subscribe(ctx, &pactv1.SubscribeRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		cancel()
		if err != nil {
			t.Errorf("n0's new certificate at %s: %v", h.Cfg.NodeID, err)
		}
	}
}
