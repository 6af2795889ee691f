package journal_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

const (
	mac1 = "52:54:00:00:00:01"
	mac2 = "52:54:00:00:00:02"
)

func start(t *testing.T) *journaltest.Harness {
	t.Helper()
	return journaltest.Start(t, journaltest.Config(t.TempDir()))
}

func wantReason(t *testing.T, err error, code codes.Code, reason apierr.Reason) {
	t.Helper()
	pe := apierr.FromError(err)
	if pe == nil {
		t.Fatalf("got no error, want %s/%s", code, reason)
	}
	if pe.Code != code || pe.Reason != reason {
		t.Fatalf("got %v (code %s reason %q), want %s/%s", err, pe.Code, pe.Reason, code, reason)
	}
}

func TestEnrollActivatesRegisteredNode(t *testing.T) {
	h := start(t)
	h.Register(t, "n1", "SN1", mac1, mac2)
	key := journaltest.NewKey(t)
	resp, err := h.Enroll(t, key, "SN1", "52-54-00-00-00-01", "52:54:00:00:00:99")
	if err != nil {
		t.Fatalf("enroll: %v", err)
	}
	if resp.GetNodeId() != "n1" || resp.GetDomainId() != "pact.local" || resp.GetVcluster() != "" {
		t.Errorf("response names %q@%q vcluster %q", resp.GetNodeId(), resp.GetDomainId(), resp.GetVcluster())
	}
	leaf, err := x509.ParseCertificate(resp.GetCertChainDer()[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := pki.SerialHex(leaf.SerialNumber); got != resp.GetSerial() {
		t.Errorf("serial %s, response says %s", got, resp.GetSerial())
	}
	if len(resp.GetTrustBundleDer()) < 2 {
		t.Errorf("trust bundle has %d certificates, want root and intermediate", len(resp.GetTrustBundleDer()))
	}
	// The chain verifies against the bundle the response carried.
	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	root, _ := x509.ParseCertificate(resp.GetTrustBundleDer()[0])
	roots.AddCert(root)
	for _, d := range resp.GetCertChainDer()[1:] {
		c, _ := x509.ParseCertificate(d)
		inters.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("chain does not verify: %v", err)
	}
	n, err := h.AdminClient(t).InspectNode(context.Background(), &pactv1.InspectNodeRequest{NodeId: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if n.GetNode().GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || n.GetNode().GetCert().GetSerial() != resp.GetSerial() {
		t.Errorf("registry has state %v serial %s, want active %s", n.GetNode().GetState(), n.GetNode().GetCert().GetSerial(), resp.GetSerial())
	}
	if n.GetNode().GetCert().GetNotAfterUnix() != resp.GetNotAfterUnix() || resp.GetNotAfterUnix() != leaf.NotAfter.Unix() {
		t.Errorf("not_after: registry %d response %d cert %d", n.GetNode().GetCert().GetNotAfterUnix(), resp.GetNotAfterUnix(), leaf.NotAfter.Unix())
	}
	if len(n.GetNode().GetCert().GetDer()) != 0 {
		t.Error("InspectNode returned the certificate DER; it should be redacted")
	}
}

func TestEnrollRefusals(t *testing.T) {
	h := start(t)
	h.Register(t, "n1", "SN1", mac1)
	h.Register(t, "n2", "SN2", mac2)
	if _, err := h.Enroll(t, journaltest.NewKey(t), "SN2", mac2); err != nil {
		t.Fatal(err)
	}
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	badCSR, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, p224)
	tests := []struct {
		name   string
		bmc    string
		macs   []string
		csr    []byte
		code   codes.Code
		reason apierr.Reason
	}{
		{"unknown hardware", "SN9", []string{"52:54:00:00:00:09"}, nil, codes.NotFound, apierr.NodeNotEnrolled},
		{"registered MAC, wrong BMC serial", "SN9", []string{mac1}, nil, codes.NotFound, apierr.NodeNotEnrolled},
		{"registered MAC, no BMC serial", "", []string{mac1}, nil, codes.NotFound, apierr.NodeNotEnrolled},
		{"MACs of two nodes", "SN1", []string{mac1, mac2}, nil, codes.AlreadyExists, apierr.HardwareIdentityConflict},
		{"already active, other key", "SN2", []string{mac2}, nil, codes.FailedPrecondition, apierr.AlreadyActive},
		{"malformed MAC", "SN1", []string{"52:54:00"}, nil, codes.InvalidArgument, apierr.InvalidArgument},
		{"no MAC", "SN1", nil, nil, codes.InvalidArgument, apierr.InvalidArgument},
		{"P-224 key", "SN1", []string{mac1}, badCSR, codes.InvalidArgument, apierr.InvalidCSR},
		{"garbage CSR", "SN1", []string{mac1}, []byte("not a csr"), codes.InvalidArgument, apierr.InvalidCSR},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := journaltest.NewKey(t)
			if tt.csr != nil {
				key.CSR = tt.csr
			}
			resp, err := h.Enroll(t, key, tt.bmc, tt.macs...)
			if resp != nil {
				t.Errorf("got a response with %d certificates", len(resp.GetCertChainDer()))
			}
			wantReason(t, err, tt.code, tt.reason)
		})
	}
	n, _ := h.AdminClient(t).InspectNode(context.Background(), &pactv1.InspectNodeRequest{NodeId: "n1"})
	if n.GetNode().GetState() != pactv1.NodeState_NODE_STATE_REGISTERED {
		t.Errorf("n1 is %v after refused enrollments, want registered", n.GetNode().GetState())
	}
}

func TestEnrollRetrySameKeyReturnsSameCertificate(t *testing.T) {
	h := start(t)
	h.Register(t, "n1", "SN1", mac1)
	key := journaltest.NewKey(t)
	first, err := h.Enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	again, err := h.Enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatalf("retry with the same key: %v", err)
	}
	if again.GetSerial() != first.GetSerial() || string(again.GetCertChainDer()[0]) != string(first.GetCertChainDer()[0]) {
		t.Errorf("retry returned serial %s, first %s", again.GetSerial(), first.GetSerial())
	}
}

// Concurrent enrollments of one node with different keys: exactly one wins,
// and the certificate it gets is the one the registry committed.
func TestConcurrentEnrollOneWinner(t *testing.T) {
	h := start(t)
	h.Register(t, "n1", "SN1", mac1)
	const n = 8
	var wg sync.WaitGroup
	results := make([]*pactv1.EnrollResponse, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		key := journaltest.NewKey(t)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i], errs[i] = h.Enroll(t, key, "SN1", mac1)
		}(i)
	}
	wg.Wait()
	var winners []string
	for i := range errs {
		if errs[i] == nil {
			winners = append(winners, results[i].GetSerial())
			continue
		}
		wantReason(t, errs[i], codes.FailedPrecondition, apierr.AlreadyActive)
	}
	if len(winners) != 1 {
		t.Fatalf("%d enrollments succeeded, want exactly 1", len(winners))
	}
	node, _ := h.AdminClient(t).InspectNode(context.Background(), &pactv1.InspectNodeRequest{NodeId: "n1"})
	if node.GetNode().GetCert().GetSerial() != winners[0] {
		t.Errorf("registry serial %s, winner got %s", node.GetNode().GetCert().GetSerial(), winners[0])
	}
}

func enrolled(t *testing.T, h *journaltest.Harness, node, bmc, mac string) (journaltest.Key, *pactv1.EnrollResponse) {
	t.Helper()
	h.Register(t, node, bmc, mac)
	key := journaltest.NewKey(t)
	resp, err := h.Enroll(t, key, bmc, mac)
	if err != nil {
		t.Fatal(err)
	}
	return key, resp
}

func TestSubscribeStreamsAssignmentAndBundle(t *testing.T) {
	h := start(t)
	key, resp := enrolled(t, h, "n1", "SN1", mac1)
	cert := key.TLSCert(resp.GetCertChainDer())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := pactv1.NewEnrollmentServiceClient(h.Dial(t, &cert)).Subscribe(ctx, &pactv1.SubscribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := stream.Recv()
	if err != nil {
		t.Fatalf("first event: %v", err)
	}
	if a := ev.GetAssignment(); a == nil || a.GetNodeId() != "n1" {
		t.Fatalf("first event %v, want the assignment of n1", ev)
	}
	ev, err = stream.Recv()
	if err != nil || len(ev.GetTrustBundle().GetDer()) < 2 {
		t.Fatalf("second event %v (%v), want the trust bundle", ev, err)
	}
}

func TestAuthenticatedCallsAreBoundToTheCurrentCertificate(t *testing.T) {
	cfg := journaltest.Config(t.TempDir())
	cfg.StreamRecheckInterval = 200 * time.Millisecond
	h := journaltest.Start(t, cfg)
	key, resp := enrolled(t, h, "n1", "SN1", mac1)
	oldCert := key.TLSCert(resp.GetCertChainDer())
	agent := pactv1.NewEnrollmentServiceClient(h.Dial(t, &oldCert))
	ctx := context.Background()

	// An open stream on the old certificate ends once the node streams
	// with its renewed certificate (the dual-channel swap; until then it
	// is how the journal knows the node is alive): when its agent closes
	// it, or, as here where it does not, at its next re-check.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	oldStream, err := agent.Subscribe(sctx, &pactv1.SubscribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oldStream.Recv(); err != nil {
		t.Fatal(err)
	}

	newKey := journaltest.NewKey(t)
	renewed, err := agent.RenewCert(ctx, &pactv1.RenewCertRequest{CurrentSerial: resp.GetSerial(), CsrDer: newKey.CSR})
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	if renewed.GetSerial() == resp.GetSerial() {
		t.Fatal("renewal kept the serial")
	}
	newCert := newKey.TLSCert(renewed.GetCertChainDer())
	newStream, err := pactv1.NewEnrollmentServiceClient(h.Dial(t, &newCert)).Subscribe(sctx, &pactv1.SubscribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newStream.Recv(); err != nil {
		t.Fatalf("the renewed certificate's stream: %v", err)
	}
	for {
		ev, err := oldStream.Recv()
		if err == nil {
			if ev.GetRevoked() != nil {
				t.Fatal("a renewal sent a revocation notice to the old stream")
			}
			continue
		}
		wantReason(t, err, codes.PermissionDenied, apierr.StaleCertificate)
		break
	}

	// The old certificate no longer authenticates anything.
	_, err = agent.RenewCert(ctx, &pactv1.RenewCertRequest{CurrentSerial: resp.GetSerial(), CsrDer: journaltest.NewKey(t).CSR})
	wantReason(t, err, codes.PermissionDenied, apierr.StaleCertificate)
	s, err := pactv1.NewEnrollmentServiceClient(h.Dial(t, &oldCert)).Subscribe(ctx, &pactv1.SubscribeRequest{})
	if err == nil {
		_, err = s.Recv() // a stream reports its status on the first Recv
	}
	wantReason(t, err, codes.PermissionDenied, apierr.StaleCertificate)

	// The new one does; a wrong current_serial is refused.
	agent2 := pactv1.NewEnrollmentServiceClient(h.Dial(t, &newCert))
	_, err = agent2.RenewCert(ctx, &pactv1.RenewCertRequest{CurrentSerial: resp.GetSerial(), CsrDer: journaltest.NewKey(t).CSR})
	wantReason(t, err, codes.InvalidArgument, apierr.InvalidArgument)
	if _, err := agent2.RenewCert(ctx, &pactv1.RenewCertRequest{CurrentSerial: renewed.GetSerial(), CsrDer: journaltest.NewKey(t).CSR}); err != nil {
		t.Errorf("renew with the current certificate: %v", err)
	}
}

func TestAuthorization(t *testing.T) {
	h := start(t)
	key, resp := enrolled(t, h, "n1", "SN1", mac1)
	agentCert := key.TLSCert(resp.GetCertChainDer())
	viewer := h.IssueAdmin(t, "val", "viewer")
	ops := h.IssueAdmin(t, "otto", "pact-ops-vc1")
	register := &pactv1.RegisterNodeRequest{NodeId: "n9", Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:09"}}}
	ctx := context.Background()
	tests := []struct {
		name   string
		cert   *tls.Certificate
		call   func(pactv1.AdminServiceClient) error
		code   codes.Code
		reason apierr.Reason
	}{
		{"no client certificate", nil, func(c pactv1.AdminServiceClient) error {
			_, err := c.ListNodes(ctx, &pactv1.ListNodesRequest{})
			return err
		}, codes.Unauthenticated, apierr.Unauthenticated},
		{"agent certificate on an admin RPC", &agentCert, func(c pactv1.AdminServiceClient) error {
			_, err := c.ListNodes(ctx, &pactv1.ListNodesRequest{})
			return err
		}, codes.PermissionDenied, apierr.PermissionDenied},
		{"viewer registers", &viewer, func(c pactv1.AdminServiceClient) error {
			_, err := c.RegisterNode(ctx, register)
			return err
		}, codes.PermissionDenied, apierr.PermissionDenied},
		{"pact-ops registers", &ops, func(c pactv1.AdminServiceClient) error {
			_, err := c.RegisterNode(ctx, register)
			return err
		}, codes.PermissionDenied, apierr.PermissionDenied},
		{"viewer lists", &viewer, func(c pactv1.AdminServiceClient) error {
			_, err := c.ListNodes(ctx, &pactv1.ListNodesRequest{})
			return err
		}, codes.OK, ""},
		{"viewer inspects a missing node", &viewer, func(c pactv1.AdminServiceClient) error {
			_, err := c.InspectNode(ctx, &pactv1.InspectNodeRequest{NodeId: "nope"})
			return err
		}, codes.NotFound, apierr.NodeNotEnrolled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(pactv1.NewAdminServiceClient(h.Dial(t, tt.cert)))
			if tt.code == codes.OK {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
				return
			}
			wantReason(t, err, tt.code, tt.reason)
		})
	}
	// An admin credential cannot call agent RPCs.
	admin := pactv1.NewEnrollmentServiceClient(h.Dial(t, &h.Admin))
	_, err := admin.RenewCert(ctx, &pactv1.RenewCertRequest{CsrDer: journaltest.NewKey(t).CSR})
	wantReason(t, err, codes.PermissionDenied, apierr.PermissionDenied)
	if n, _ := h.AdminClient(t).ListNodes(ctx, &pactv1.ListNodesRequest{}); len(n.GetNodes()) != 1 {
		t.Errorf("registry has %d nodes after refused writes, want 1", len(n.GetNodes()))
	}
}

func TestRegisterNodeRules(t *testing.T) {
	h := start(t)
	h.Register(t, "n1", "SN1", mac1)
	c := h.AdminClient(t)
	tests := []struct {
		name   string
		req    *pactv1.RegisterNodeRequest
		code   codes.Code
		reason apierr.Reason
	}{
		{"same node id", &pactv1.RegisterNodeRequest{NodeId: "n1", Hardware: &pactv1.HardwareIdentity{Macs: []string{mac2}}}, codes.AlreadyExists, apierr.NodeAlreadyEnrolled},
		{"MAC of another node", &pactv1.RegisterNodeRequest{NodeId: "n2", Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:01"}}}, codes.AlreadyExists, apierr.HardwareIdentityConflict},
		{"BMC serial of another node", &pactv1.RegisterNodeRequest{NodeId: "n2", Hardware: &pactv1.HardwareIdentity{Macs: []string{mac2}, BmcSerial: "SN1"}}, codes.AlreadyExists, apierr.HardwareIdentityConflict},
		{"bad node id", &pactv1.RegisterNodeRequest{NodeId: "a/b", Hardware: &pactv1.HardwareIdentity{Macs: []string{mac2}}}, codes.InvalidArgument, apierr.InvalidArgument},
		{"bad MAC", &pactv1.RegisterNodeRequest{NodeId: "n2", Hardware: &pactv1.HardwareIdentity{Macs: []string{"zz"}}}, codes.InvalidArgument, apierr.InvalidArgument},
		{"multicast MAC", &pactv1.RegisterNodeRequest{NodeId: "n2", Hardware: &pactv1.HardwareIdentity{Macs: []string{"33:33:00:00:00:01"}}}, codes.InvalidArgument, apierr.InvalidArgument},
		{"formula vcluster", &pactv1.RegisterNodeRequest{NodeId: "n2", Vcluster: "=1+1", Hardware: &pactv1.HardwareIdentity{Macs: []string{mac2}}}, codes.InvalidArgument, apierr.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.RegisterNode(context.Background(), tt.req)
			wantReason(t, err, tt.code, tt.reason)
		})
	}
	list, err := c.ListNodes(context.Background(), &pactv1.ListNodesRequest{})
	if err != nil || len(list.GetNodes()) != 1 {
		t.Fatalf("after refused registrations: %d nodes, %v", len(list.GetNodes()), err)
	}
}

// A restart keeps the registry, makes a new intermediate, and a certificate
// from the previous intermediate still authenticates.
func TestRestartKeepsRegistryAndOldCertificates(t *testing.T) {
	h := start(t)
	key, resp := enrolled(t, h, "n1", "SN1", mac1)
	h.Register(t, "n2", "SN2", mac2)
	oldIssuer := resp.GetCertChainDer()[1]

	h.Restart(t)

	list, err := h.AdminClient(t).ListNodes(context.Background(), &pactv1.ListNodesRequest{})
	if err != nil || len(list.GetNodes()) != 2 {
		t.Fatalf("after restart: %d nodes, %v", len(list.GetNodes()), err)
	}
	cert := key.TLSCert(resp.GetCertChainDer())
	stream, err := pactv1.NewEnrollmentServiceClient(h.Dial(t, &cert)).Subscribe(context.Background(), &pactv1.SubscribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("old certificate after restart: %v", err)
	}
	fresh, err := h.Enroll(t, journaltest.NewKey(t), "SN2", mac2)
	if err != nil {
		t.Fatal(err)
	}
	if string(fresh.GetCertChainDer()[1]) == string(oldIssuer) {
		t.Error("the restarted journal signs with the previous intermediate; want a fresh one")
	}
	if len(fresh.GetTrustBundleDer()) != 4 {
		t.Errorf("bundle after restart has %d certificates, want root + the journal CA + 2 intermediates", len(fresh.GetTrustBundleDer()))
	}
}

// A second journal on a data directory a running one holds says so, and
// what to do, instead of a bare bbolt timeout.
func TestDataDirInUse(t *testing.T) {
	h := start(t)
	cfg := h.Cfg
	cfg.ListenAddr = "127.0.0.1:0"
	j, err := journal.NewContext(context.Background(), cfg)
	if err == nil {
		j.Close()
	}
	if !errors.Is(err, journal.ErrDataDirInUse) || !strings.Contains(err.Error(), "in use by another pact-journal: "+cfg.DataDir) {
		t.Errorf("second journal on the same data dir: %v", err)
	}
}
