package journal_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// issueOperator has the journal issue an operator credential with caller.
func issueOperator(t testing.TB, e *env, caller *tls.Certificate, req *pactv1.IssueOperatorRequest) (tls.Certificate, *pactv1.IssueOperatorResponse, error) {
	t.Helper()
	key := journaltest.NewKey(t)
	req.CsrDer = key.CSR
	resp, err := pactv1.NewAdminServiceClient(e.h.Dial(t, caller)).IssueOperator(callCtx(t), req)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return key.TLSCert([][]byte{resp.GetCertDer()}), resp, nil
}

func operators(t testing.TB, e *env) map[string]*pactv1.Operator {
	t.Helper()
	resp, err := e.admin.ListOperators(callCtx(t), &pactv1.ListOperatorsRequest{All: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*pactv1.Operator{}
	for _, o := range resp.GetOperators() {
		out[o.GetSerial()] = o
	}
	return out
}

func serialOf(t testing.TB, c tls.Certificate) string {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return pki.SerialHex(leaf.SerialNumber)
}

func TestOperatorCredentials(t *testing.T) {
	e := newEnv(t)
	adminSerial := serialOf(t, e.h.Admin)
	if o := operators(t, e)[adminSerial]; o.GetName() != "admin" || o.GetRole() != "platform-admin" || o.GetIssuedBy() != "journal/j1" {
		t.Fatalf("the --dev bootstrap credential is not recorded at start: %v", o)
	}

	// A platform-admin issues bob a viewer credential; it is recorded
	// before it is returned, with the default lifetime of days.
	bob, resp, err := issueOperator(t, e, &e.h.Admin, &pactv1.IssueOperatorRequest{Name: "bob", Role: "viewer"})
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	leaf, _ := x509.ParseCertificate(resp.GetCertDer())
	if want := e.fc.Now().Add(ca.DefaultOperatorLifetime); leaf.NotAfter.Sub(want).Abs() > time.Second {
		t.Errorf("NotAfter %v, want %v", leaf.NotAfter, want)
	}
	// Signed by the journal's intermediate, under its journal CA: the
	// chain [operator, intermediate, journal CA] reaches the root.
	roots := x509.NewCertPool()
	roots.AddCert(e.h.J.Root())
	above := x509.NewCertPool()
	above.AddCert(e.h.J.JournalCA())
	inter := e.h.J.IntermediateCert()
	above.AddCert(inter)
	if err := leaf.CheckSignatureFrom(inter); err != nil {
		t.Errorf("issued credential is not signed by the journal's intermediate: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: above, CurrentTime: e.fc.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("issued credential does not chain to the root: %v", err)
	}
	if o := operators(t, e)[serialOf(t, bob)]; o.GetName() != "bob" || o.GetRole() != "viewer" || o.GetIssuedBy() != "admin/admin" || o.GetNotAfterUnix() != leaf.NotAfter.Unix() {
		t.Errorf("bob's record = %v", o)
	}
	bobClient := pactv1.NewAdminServiceClient(e.h.Dial(t, &bob))
	if _, err := bobClient.ListNodes(callCtx(t), &pactv1.ListNodesRequest{}); err != nil {
		t.Fatalf("bob lists nodes: %v", err)
	}

	// A viewer may renew its own credential, not issue another's.
	before := e.registry(t)
	_, _, err = issueOperator(t, e, &bob, &pactv1.IssueOperatorRequest{Name: "carol", Role: "viewer"})
	e.refused(t, before, nil, err, codes.PermissionDenied, apierr.PermissionDenied)
	_, _, err = issueOperator(t, e, &bob, &pactv1.IssueOperatorRequest{Role: "platform-admin"})
	e.refused(t, before, nil, err, codes.PermissionDenied, apierr.PermissionDenied)
	_, _, err = issueOperator(t, e, &e.h.Admin, &pactv1.IssueOperatorRequest{Name: "carol", Role: "viewer", LifetimeSeconds: 365 * 86400})
	e.refused(t, before, nil, err, codes.InvalidArgument, apierr.InvalidArgument)
	_, _, err = issueOperator(t, e, &e.h.Admin, &pactv1.IssueOperatorRequest{Name: "carol", Role: "root"})
	e.refused(t, before, nil, err, codes.InvalidArgument, apierr.InvalidArgument)
	bob2, _, err := issueOperator(t, e, &bob, &pactv1.IssueOperatorRequest{})
	if err != nil {
		t.Fatalf("bob renews: %v", err)
	}

	// A credential signed offline with the root is recorded at first use.
	dave := e.h.IssueAdmin(t, "dave", "viewer")
	if _, err := pactv1.NewAdminServiceClient(e.h.Dial(t, &dave)).ListNodes(callCtx(t), &pactv1.ListNodesRequest{}); err != nil {
		t.Fatal(err)
	}
	if o := operators(t, e)[serialOf(t, dave)]; o.GetName() != "dave" || o.GetIssuedBy() != "first-use" {
		t.Errorf("dave's record = %v", o)
	}
	// One signed offline for bob, not used before bob is revoked.
	bobOffline := e.h.IssueAdmin(t, "bob", "viewer")

	// Revoking bob by name refuses every credential of bob on the next
	// call, over a connection opened before the revocation too.
	e.tick(t, time.Second)
	rev, err := e.admin.RevokeOperator(callCtx(t), &pactv1.RevokeOperatorRequest{NameOrSerial: "bob"})
	if err != nil {
		t.Fatalf("revoke bob: %v", err)
	}
	if len(rev.GetRevoked()) != 2 || rev.GetName().GetName() != "bob" {
		t.Errorf("revoke answered %v", rev)
	}
	for name, c := range map[string]*tls.Certificate{"issued": &bob, "renewed": &bob2, "offline": &bobOffline} {
		before := e.registry(t)
		_, err := pactv1.NewAdminServiceClient(e.h.Dial(t, c)).ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
		e.refused(t, before, nil, err, codes.PermissionDenied, apierr.OperatorRevoked)
		if name == "issued" {
			_, err = bobClient.ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
			wantErr(t, err, codes.PermissionDenied, apierr.OperatorRevoked)
		}
	}
	// A new credential for bob, issued after the revocation, works.
	e.tick(t, time.Second)
	bob3, _, err := issueOperator(t, e, &e.h.Admin, &pactv1.IssueOperatorRequest{Name: "bob", Role: "viewer"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pactv1.NewAdminServiceClient(e.h.Dial(t, &bob3)).ListNodes(callCtx(t), &pactv1.ListNodesRequest{}); err != nil {
		t.Errorf("bob's new credential: %v", err)
	}

	// By serial: only that credential.
	if _, err := e.admin.RevokeOperator(callCtx(t), &pactv1.RevokeOperatorRequest{NameOrSerial: serialOf(t, dave)}); err != nil {
		t.Fatal(err)
	}
	_, err = pactv1.NewAdminServiceClient(e.h.Dial(t, &dave)).ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
	wantErr(t, err, codes.PermissionDenied, apierr.OperatorRevoked)

	// Refusals write nothing.
	before = e.registry(t)
	_, err = e.admin.RevokeOperator(callCtx(t), &pactv1.RevokeOperatorRequest{NameOrSerial: "00112233445566778899aabbccddeeff"})
	e.refused(t, before, nil, err, codes.NotFound, apierr.NotFound)
	_, err = e.admin.RevokeOperator(callCtx(t), &pactv1.RevokeOperatorRequest{NameOrSerial: "not a name!"})
	e.refused(t, before, nil, err, codes.InvalidArgument, apierr.InvalidArgument)
	// A name no recorded credential carries is most likely a typo: refused
	// (no Raft write), with the nearest recorded names.
	before = e.registry(t)
	_, err = e.admin.RevokeOperator(callCtx(t), &pactv1.RevokeOperatorRequest{NameOrSerial: "bobb"})
	if pe := e.refusedUnwritten(t, before, nil, err, codes.NotFound, apierr.OperatorNotFound); !strings.Contains(pe.Message, "did you mean bob?") || !strings.Contains(pe.Message, "--unrecorded") {
		t.Errorf("revoke bobb: %q", pe.Message)
	}
	_, err = e.admin.RevokeOperator(callCtx(t), &pactv1.RevokeOperatorRequest{NameOrSerial: "nobody"})
	if pe := e.refusedUnwritten(t, before, nil, err, codes.NotFound, apierr.OperatorNotFound); strings.Contains(pe.Message, "did you mean") {
		t.Errorf("revoke nobody guessed a name: %q", pe.Message)
	}
	// A credential signed offline and never used is not recorded: its name
	// is revoked on purpose, with Unrecorded.
	erin := e.h.IssueAdmin(t, "erin", "viewer")
	before = e.registry(t)
	_, err = e.admin.RevokeOperator(callCtx(t), &pactv1.RevokeOperatorRequest{NameOrSerial: "erin"})
	e.refusedUnwritten(t, before, nil, err, codes.NotFound, apierr.OperatorNotFound)
	if rev, err := e.admin.RevokeOperator(callCtx(t), &pactv1.RevokeOperatorRequest{NameOrSerial: "erin", Unrecorded: true}); err != nil || rev.GetName().GetName() != "erin" || len(rev.GetRevoked()) != 0 {
		t.Fatalf("revoke erin --unrecorded: %v %v", rev, err)
	}
	_, err = pactv1.NewAdminServiceClient(e.h.Dial(t, &erin)).ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
	wantErr(t, err, codes.PermissionDenied, apierr.OperatorRevoked)
	// A revoked name is known: revoking it again is no typo.
	if _, err := e.admin.RevokeOperator(callCtx(t), &pactv1.RevokeOperatorRequest{NameOrSerial: "erin"}); err != nil {
		t.Errorf("revoke erin again: %v", err)
	}

	// The journal survives a restart with all of it.
	e.h.Restart(t)
	_, err = pactv1.NewAdminServiceClient(e.h.Dial(t, &bob2)).ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
	wantErr(t, err, codes.PermissionDenied, apierr.OperatorRevoked)
}

// TestRevokedBootstrapCredentialStaysRevoked: the journal records the
// credential in its data directory at every start; a restart must not
// revive it once revoked.
func TestRevokedBootstrapCredentialStaysRevoked(t *testing.T) {
	e := newEnv(t)
	other, _, err := issueOperator(t, e, &e.h.Admin, &pactv1.IssueOperatorRequest{Name: "root2", Role: "platform-admin"})
	if err != nil {
		t.Fatal(err)
	}
	e.tick(t, time.Second)
	if _, err := pactv1.NewAdminServiceClient(e.h.Dial(t, &other)).RevokeOperator(callCtx(t), &pactv1.RevokeOperatorRequest{NameOrSerial: "admin"}); err != nil {
		t.Fatal(err)
	}
	e.h.Restart(t)
	_, err = e.h.AdminClient(t).ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
	wantErr(t, err, codes.PermissionDenied, apierr.OperatorRevoked)
}

// recvUntil reads stream events until want matches one, skipping others.
func recvUntil(t *testing.T, w *watch, what string, want func(*pactv1.SubscribeResponse) bool) *pactv1.SubscribeResponse {
	t.Helper()
	for range 8 {
		if ev := w.next(t); want(ev) {
			return ev
		}
	}
	t.Fatalf("no %s on the stream of %s", what, w.node)
	return nil
}

// TestRetireIntermediate retires the journal's own intermediate: holders of
// its certificates are told to renew on their stream, the journal re-keys,
// and after the grace the old intermediate is out of the bundle and its
// certificates are refused.
func TestRetireIntermediate(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	b := e.activate(t, "n2", "SN2", mac2)
	old := e.node(t, "n1").GetCert().GetIssuerSerial()
	wa, wb := e.subscribe(t, a), e.subscribe(t, b)

	before := e.registry(t)
	_, err := e.admin.RetireIntermediate(callCtx(t), &pactv1.RetireIntermediateRequest{Targets: []string{"nope"}})
	e.refused(t, before, nil, err, codes.NotFound, apierr.NotFound)
	_, err = e.admin.RetireIntermediate(callCtx(t), &pactv1.RetireIntermediateRequest{Targets: []string{old}, Now: true, GraceSeconds: 5})
	e.refused(t, before, nil, err, codes.InvalidArgument, apierr.InvalidArgument)

	resp, err := e.admin.RetireIntermediate(callCtx(t), &pactv1.RetireIntermediateRequest{Targets: []string{"j1"}, GraceSeconds: 600, Reason: "key exposed in a backup"})
	if err != nil {
		t.Fatalf("retire: %v", err)
	}
	if len(resp.GetRetired()) != 1 || resp.GetRetired()[0].GetSerial() != old || resp.GetRetired()[0].GetRevokeAtUnixNano() != e.fc.Now().Add(600*time.Second).UnixNano() {
		t.Fatalf("retired %v", resp.GetRetired())
	}
	isRenewNow := func(ev *pactv1.SubscribeResponse) bool { return ev.GetRenewNow() != nil }
	for _, w := range []*watch{wa, wb} {
		ev := recvUntil(t, w, "RenewNow", isRenewNow)
		if ev.GetRenewNow().GetIssuerSerial() != old {
			t.Errorf("RenewNow %v, want issuer %s", ev.GetRenewNow(), old)
		}
	}
	// The journal re-keyed at once: a renewal comes from a new intermediate.
	eventually(t, "the journal to publish a new intermediate", func() bool {
		return e.h.J.Intermediate() != old
	})
	a2, err := e.renew(t, a)
	if err != nil {
		t.Fatalf("renew after RenewNow: %v", err)
	}
	if got := e.node(t, "n1").GetCert().GetIssuerSerial(); got == old {
		t.Error("the renewed certificate comes from the retired intermediate")
	}
	if _, err := e.agentClient(t, b).Ping(callCtx(t), &pactv1.PingRequest{}); err != nil {
		t.Errorf("during the grace, b's certificate must still work: %v", err)
	}

	// After the grace: revoked, out of the bundle, refused everywhere.
	e.tick(t, 600*time.Second)
	_, ended, err := wb.end(t)
	_ = ended
	wantErr(t, err, codes.Unauthenticated, apierr.Unauthenticated)
	_, err = e.agentClient(t, b).Ping(callCtx(t), &pactv1.PingRequest{})
	wantErr(t, err, codes.Unauthenticated, apierr.Unauthenticated)
	list, err := e.admin.ListIntermediates(callCtx(t), &pactv1.ListIntermediatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list.GetIntermediates() {
		if in.GetSerial() == old && in.GetRevokeAtUnixNano() > list.GetServerTimeUnixNano() {
			t.Errorf("the old intermediate is not revoked: %v", in)
		}
	}
	enr, err := e.enroll(t, journaltest.NewKey(t), "SN2", mac2)
	if err == nil {
		for _, der := range enr.GetTrustBundleDer() {
			c, _ := x509.ParseCertificate(der)
			if pki.SerialHex(c.SerialNumber) == old {
				t.Error("the revoked intermediate is still in the trust bundle")
			}
		}
	}
	if _, err := e.agentClient(t, a2).Ping(callCtx(t), &pactv1.PingRequest{}); err != nil {
		t.Errorf("the renewed agent: %v", err)
	}
}

// A renewal that arrives after an operator retired this journal's
// intermediate, but before the journal re-keyed, waits for the new
// intermediate: signed by the retiring one, the node would be told to
// renew again at once, and pact-agent would hold it there for its
// MinRenewInterval.
func TestRenewalWaitsForTheReKey(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	old := e.node(t, "n1").GetCert().GetIssuerSerial()
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	waiting := make(chan struct{}, 1)
	e.h.J.SetRekeyHooks(func() { <-release }, func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	})
	if _, err := e.admin.RetireIntermediate(callCtx(t), &pactv1.RetireIntermediateRequest{Targets: []string{"j1"}, GraceSeconds: 600}); err != nil {
		t.Fatalf("retire: %v", err)
	}
	client := e.agentClient(t, a)
	key := journaltest.NewKey(t)
	done := make(chan error, 1)
	go func() {
		_, err := client.RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: key.CSR})
		done <- err
	}()
	select {
	case <-waiting:
	case err := <-done:
		free()
		t.Fatalf("the renewal was answered (%v) before the journal re-keyed; the node's issuer is %s (retired: %s)", err, e.node(t, "n1").GetCert().GetIssuerSerial(), old)
	}
	free()
	if err := <-done; err != nil {
		t.Fatalf("renewal: %v", err)
	}
	if got := e.node(t, "n1").GetCert().GetIssuerSerial(); got == old {
		t.Errorf("the renewed certificate comes from the retired intermediate %s", old)
	}
}

// TestRevokedIntermediateCutsOffItsJournal: a journal whose intermediate is
// revoked can no longer speak Raft nor the peer service, even with a chain
// the journal verified (and cached) a moment before. The journal is the
// member j1 with a second intermediate of its own (as after a re-key): only
// a member is a peer at all.
func TestRevokedIntermediateCutsOffItsJournal(t *testing.T) {
	cfg := journaltest.Config(t.TempDir())
	cfg.RaftListen = journaltest.FreeAddr(t)
	cfg.InitialCluster = []journal.Peer{{ID: cfg.NodeID, RaftAddr: cfg.RaftListen}}
	h := journaltest.Start(t, cfg)
	// A second intermediate under j1's own journal CA, as after a re-key.
	j9 := journaltest.NewIntermediateUnder(t, cfg)
	j9cert := j9.JournalCert(t, cfg.NodeID, "pact.local")
	qid := quorumStatus(t, h).GetQuorumId()
	peer := pactv1.NewJournalPeerServiceClient(h.Dial(t, j9cert))
	inter := j9.Cert
	publish := raftfsmtest.Proposer{Actor: "journal/" + cfg.NodeID, AtUnixNano: time.Now().UnixNano()}.PublishIntermediate(j9.Record(cfg.NodeID))
	data, err := raftfsm.Encode(publish)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Propose(metadata.AppendToOutgoingContext(callCtx(t), "pact-quorum-id", qid), &pactv1.ProposeRequest{Command: data}); err != nil {
		t.Fatalf("j9 publishes its intermediate: %v", err)
	}
	if !raftPortAccepts(t, cfg.RaftListen, j9cert, qid) {
		t.Fatal("the Raft port refuses j9 before its revocation")
	}
	if _, err := h.AdminClient(t).RetireIntermediate(callCtx(t), &pactv1.RetireIntermediateRequest{Targets: []string{pki.SerialHex(inter.SerialNumber)}, Now: true}); err != nil {
		t.Fatal(err)
	}
	_, err = peer.MemberStatus(metadata.AppendToOutgoingContext(callCtx(t), "pact-quorum-id", qid), &pactv1.MemberStatusRequest{})
	wantErr(t, err, codes.Unauthenticated, apierr.PeerWithdrawn)
	if raftPortAccepts(t, cfg.RaftListen, j9cert, qid) {
		t.Error("the Raft port accepts a journal whose intermediate is revoked")
	}
}

// raftPortAccepts dials addr's Raft port with cert: a refusal arrives as an
// alert on the first read; an accepted peer sees Raft wait for a request.
//
// The peer proves quorum (its quorum hello); the chain is checked in the
// handshake and Raft's records after the hello, whose reply says so.
func raftPortAccepts(t *testing.T, addr string, cert *tls.Certificate, quorum string) bool {
	t.Helper()
	reply, err := journaltest.RaftHello(t, addr, cert, quorum)
	return err == nil && reply.GetRefused() == ""
}

// TestRemoveJournalRevokeIntermediate: pact journal remove
// --revoke-intermediate on a quorum of three.
func TestRemoveJournalRevokeIntermediate(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	victim := (leader + 1) % 3
	lh, vh := c.Nodes[leader], c.Nodes[victim]
	lh.Register(t, "n1", "SN1", mac1)
	lh.Register(t, "n2", "SN2", mac2)
	keyA, keyB := journaltest.NewKey(t), journaltest.NewKey(t)
	ra, err := vh.Enroll(t, keyA, "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := vh.Enroll(t, keyB, "SN2", mac2)
	if err != nil {
		t.Fatal(err)
	}
	certA, certB := keyA.TLSCert(ra.GetCertChainDer()), keyB.TLSCert(rb.GetCertChainDer())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := pactv1.NewEnrollmentServiceClient(lh.Dial(t, &certA)).Subscribe(ctx, &pactv1.SubscribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // assignment, bundle
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	admin := lh.AdminClient(t)
	resp, err := admin.RemoveJournal(callCtx(t), &pactv1.RemoveJournalRequest{JournalId: vh.Cfg.NodeID, RevokeIntermediate: true, GraceSeconds: 3600})
	if err != nil {
		t.Fatalf("remove --revoke-intermediate: %v", err)
	}
	if len(resp.GetRetired()) == 0 || resp.GetRetired()[0].GetJournalId() != vh.Cfg.NodeID {
		t.Fatalf("retired %v", resp.GetRetired())
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream ended before RenewNow: %v", err)
		}
		if ev.GetRenewNow() != nil {
			break
		}
	}
	keyA2 := journaltest.NewKey(t)
	if _, err := pactv1.NewEnrollmentServiceClient(lh.Dial(t, &certA)).RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: ra.GetSerial(), CsrDer: keyA2.CSR}); err != nil {
		t.Fatalf("renew at the leader: %v", err)
	}
	// Cut off at once: b never renewed.
	if _, err := admin.RetireIntermediate(callCtx(t), &pactv1.RetireIntermediateRequest{Targets: []string{vh.Cfg.NodeID}, Now: true}); err != nil {
		t.Fatal(err)
	}
	for i, h := range c.Nodes {
		if i == victim {
			continue
		}
		eventually(t, "the revocation to reach "+h.Cfg.NodeID, func() bool {
			_, err := pactv1.NewEnrollmentServiceClient(h.Dial(t, &certB)).Ping(callCtx(t), &pactv1.PingRequest{})
			return err != nil && apierr.FromError(err).Code == codes.Unauthenticated
		})
	}
}

// A call refused for its role writes nothing, not even the first-use
// record of a credential signed offline.
func TestRoleRefusalRecordsNothing(t *testing.T) {
	e := newEnv(t)
	vera := e.h.IssueAdmin(t, "vera", "viewer")
	before := e.registry(t)
	_, err := pactv1.NewAdminServiceClient(e.h.Dial(t, &vera)).RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: "n9", Hardware: hw("", mac1)})
	e.refused(t, before, nil, err, codes.PermissionDenied, apierr.PermissionDenied)
	if _, ok := operators(t, e)[serialOf(t, vera)]; ok {
		t.Error("a refused call recorded the credential")
	}
}

// On a journal that accepts SPIRE SVIDs, an operator (or journal)
// certificate of another root still fails the TLS handshake; only
// agent-shaped SVIDs pass it to get their typed SPIRE refusal.
func TestForeignOperatorFailsHandshakeOnSPIRESite(t *testing.T) {
	e := newSPIREEnv(t)
	foreignAdmin, _ := foreignCredentials(t, "n1")
	before := e.registry(t)
	_, err := pactv1.NewAdminServiceClient(e.h.Dial(t, &foreignAdmin)).ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
	e.refused(t, before, nil, err, codes.Unavailable, "")
	if !strings.Contains(fmt.Sprint(err), "bad certificate") {
		t.Errorf("refusal %v, want the handshake's bad_certificate alert", err)
	}
}
