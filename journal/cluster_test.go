package journal_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

func startCluster(t *testing.T, n int) *journaltest.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, n)
	for i := range cfgs {
		// Small enough that a member added later must install a snapshot.
		cfgs[i].RaftSnapshotThreshold = 16
		cfgs[i].RaftTrailingLogs = 4
		cfgs[i].RaftSnapshotInterval = 100 * time.Millisecond
	}
	return journaltest.StartCluster(t, root, cfgs)
}

func inspectOn(t *testing.T, h *journaltest.Harness, node string) *pactv1.Node {
	t.Helper()
	resp, err := h.AdminClient(t).InspectNode(context.Background(), &pactv1.InspectNodeRequest{NodeId: node})
	if err != nil {
		t.Fatalf("inspect %s on %s: %v", node, h.Cfg.NodeID, err)
	}
	return resp.GetNode()
}

// Writes accepted by a follower commit through the leader; a certificate
// one journal signed authenticates on another; reads after a write are
// linearizable on every member.
func TestClusterWritesAtAnyJournal(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	follower := (leader + 1) % 3
	other := (leader + 2) % 3

	c.Nodes[follower].Register(t, "n1", "SN1", mac1)
	for _, h := range c.Nodes {
		if n := inspectOn(t, h, "n1"); n.GetState() != pactv1.NodeState_NODE_STATE_REGISTERED {
			t.Errorf("%s sees n1 as %v", h.Cfg.NodeID, n.GetState())
		}
	}
	key := journaltest.NewKey(t)
	resp, err := c.Nodes[follower].Enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatalf("enroll at a follower: %v", err)
	}
	if n := inspectOn(t, c.Nodes[other], "n1"); n.GetCert().GetSerial() != resp.GetSerial() {
		t.Fatalf("%s: serial %s, enrolled %s", c.Nodes[other].Cfg.NodeID, n.GetCert().GetSerial(), resp.GetSerial())
	}
	if len(resp.GetTrustBundleDer()) != 4 {
		t.Errorf("bundle has %d certificates, want root + 3 intermediates", len(resp.GetTrustBundleDer()))
	}
	cert := key.TLSCert(resp.GetCertChainDer())
	stream, err := pactv1.NewEnrollmentServiceClient(c.Nodes[other].Dial(t, &cert)).Subscribe(context.Background(), &pactv1.SubscribeRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		t.Fatalf("a certificate signed by %s on %s: %v", c.Nodes[follower].Cfg.NodeID, c.Nodes[other].Cfg.NodeID, err)
	}
	// Renewal at a third journal.
	renewed, err := pactv1.NewEnrollmentServiceClient(c.Nodes[leader].Dial(t, &cert)).RenewCert(context.Background(),
		&pactv1.RenewCertRequest{CurrentSerial: resp.GetSerial(), CsrDer: journaltest.NewKey(t).CSR})
	if err != nil {
		t.Fatalf("renew at the leader: %v", err)
	}
	if n := inspectOn(t, c.Nodes[follower], "n1"); n.GetCert().GetSerial() != renewed.GetSerial() {
		t.Errorf("follower sees serial %s after renewal to %s", n.GetCert().GetSerial(), renewed.GetSerial())
	}

	st, err := c.Nodes[other].AdminClient(t).JournalStatus(context.Background(), &pactv1.JournalStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetMembers()) != 3 || st.GetLeaderId() != c.Configs[leader].NodeID {
		t.Fatalf("status: leader %q, %d members", st.GetLeaderId(), len(st.GetMembers()))
	}
	for _, m := range st.GetMembers() {
		if !m.GetReachable() || !m.GetVoter() || m.GetIntermediateSerial() == "" || m.GetGrpcAddr() == "" {
			t.Errorf("member %+v", m)
		}
	}
}

// Losing the leader loses no acknowledged write, and the survivors keep
// accepting writes and the certificates they issued.
func TestClusterLeaderLoss(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	for i := 0; i < 5; i++ {
		c.Nodes[(leader+1)%3].Register(t, fmt.Sprintf("n%d", i), fmt.Sprintf("SN%d", i), mac(i))
	}
	key := journaltest.NewKey(t)
	resp, err := c.Nodes[(leader+2)%3].Enroll(t, key, "SN0", mac(0))
	if err != nil {
		t.Fatal(err)
	}
	c.StopMember(t, leader)
	next := c.Leader(t)
	if next == leader {
		t.Fatal("the stopped journal still leads")
	}
	for _, h := range c.Nodes {
		if h == nil {
			continue
		}
		for i := 0; i < 5; i++ {
			inspectOn(t, h, fmt.Sprintf("n%d", i))
		}
	}
	survivor := c.Nodes[(leader+1)%3]
	if _, err := survivor.Enroll(t, journaltest.NewKey(t), "SN1", mac(1)); err != nil {
		t.Fatalf("enroll after leader loss: %v", err)
	}
	cert := key.TLSCert(resp.GetCertChainDer())
	s, err := pactv1.NewEnrollmentServiceClient(survivor.Dial(t, &cert)).Subscribe(context.Background(), &pactv1.SubscribeRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	if err != nil {
		t.Fatalf("certificate from before the leader loss: %v", err)
	}
	// The old leader comes back as a follower and catches up.
	back := c.StartMember(t, leader)
	if n := inspectOn(t, back, "n1"); n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
		t.Errorf("restarted journal sees n1 as %v", n.GetState())
	}
}

// A journal cut off from the majority accepts no write and says so quickly.
func TestClusterMinorityRefusesWrites(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	lone := (leader + 1) % 3
	c.StopMember(t, leader)
	c.StopMember(t, (leader+2)%3)
	start := time.Now()
	_, err := c.Nodes[lone].AdminClient(t).RegisterNode(context.Background(), &pactv1.RegisterNodeRequest{
		NodeId: "late", Hardware: &pactv1.HardwareIdentity{Macs: []string{mac(99)}},
	})
	wantReason(t, err, codes.Unavailable, apierr.NoLeader)
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("the minority journal took %v to refuse", d)
	}
	_, err = c.Nodes[lone].AdminClient(t).InspectNode(context.Background(), &pactv1.InspectNodeRequest{NodeId: "late"})
	wantReason(t, err, codes.Unavailable, apierr.NoLeader)
}

// A fourth journal joins a running quorum (installing a snapshot, since
// the log has been compacted), serves, and can be removed again.
func TestClusterAddAndRemoveMember(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	for i := 0; i < 40; i++ {
		c.Nodes[leader].Register(t, fmt.Sprintf("n%d", i), "", mac(i))
	}
	_, extra := journaltest.ClusterConfigs(t, 4)
	cfg := extra[3]
	cfg.RootCertFile, cfg.RootKeyFile = c.Configs[0].RootCertFile, c.Configs[0].RootKeyFile
	cfg.InitialCluster = nil
	cfg.Join = true
	c.Configs = append(c.Configs, cfg)
	c.Nodes = append(c.Nodes, nil)

	started := make(chan error, 1)
	go func() {
		// Start blocks until the member has been added and caught up.
		h, err := journaltest.StartHarness(cfg, c.Root)
		c.Nodes[3] = h
		started <- err
	}()
	admin := c.Nodes[leader].AdminClient(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := admin.AddJournal(context.Background(), &pactv1.AddJournalRequest{JournalId: cfg.NodeID, RaftAddr: cfg.RaftListen})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("add journal: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := <-started; err != nil {
		t.Fatalf("the joining journal: %v", err)
	}
	j4 := c.Nodes[3]
	if n := inspectOn(t, j4, "n39"); n.GetNodeId() != "n39" {
		t.Fatalf("new member lacks n39")
	}
	j4.Register(t, "via-j4", "SN-J4", mac(200))
	if n := inspectOn(t, c.Nodes[leader], "via-j4"); n.GetNodeId() != "via-j4" {
		t.Fatal("write through the new member not visible at the leader")
	}
	key := journaltest.NewKey(t)
	signedByJ4, err := j4.Enroll(t, key, "SN-J4", mac(200))
	if err != nil {
		t.Fatalf("enroll at the new member: %v", err)
	}
	if _, err := admin.RemoveJournal(context.Background(), &pactv1.RemoveJournalRequest{JournalId: cfg.NodeID}); err != nil {
		t.Fatalf("remove: %v", err)
	}
	st, err := admin.JournalStatus(context.Background(), &pactv1.JournalStatusRequest{})
	if err != nil || len(st.GetMembers()) != 3 {
		t.Fatalf("after remove: %d members, %v", len(st.GetMembers()), err)
	}
	// What the removed journal signed stays valid until it expires.
	cert := key.TLSCert(signedByJ4.GetCertChainDer())
	s, err := pactv1.NewEnrollmentServiceClient(c.Nodes[leader].Dial(t, &cert)).Subscribe(context.Background(), &pactv1.SubscribeRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	if err != nil {
		t.Fatalf("a certificate signed by the removed journal: %v", err)
	}
}

// Decommissioning at one journal closes the node's stream on another
// within a second.
func TestClusterDecommissionClosesStreamsEverywhere(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	follower := c.Nodes[(leader+1)%3]
	follower.Register(t, "n1", "SN1", mac1)
	key := journaltest.NewKey(t)
	resp, err := follower.Enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	cert := key.TLSCert(resp.GetCertChainDer())
	stream, err := pactv1.NewEnrollmentServiceClient(follower.Dial(t, &cert)).Subscribe(context.Background(), &pactv1.SubscribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Nodes[(leader+2)%3].AdminClient(t).DecommissionNode(context.Background(), &pactv1.DecommissionNodeRequest{NodeId: "n1", Force: true}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := stream.Recv()
		if err != nil {
			wantReason(t, err, codes.PermissionDenied, apierr.NodeRevoked)
			break
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the stream on %s closed %v after the decommission", follower.Cfg.NodeID, d)
	}
}

// Journals restarted after taking their own snapshots become ready on a
// quiet quorum: entries below the snapshot are in the restored FSM even
// though its own applied index starts from zero.
func TestClusterRestartAfterSnapshotOnQuietQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	for i := range cfgs {
		// Snapshot everything as soon as anything is new, so the snapshot
		// reaches the end of the log.
		cfgs[i].RaftSnapshotThreshold = 1
		cfgs[i].RaftTrailingLogs = 4
		cfgs[i].RaftSnapshotInterval = 50 * time.Millisecond
	}
	c := journaltest.StartCluster(t, root, cfgs)
	leader := c.Leader(t)
	follower := (leader + 1) % 3
	for i := 0; i < 40; i++ {
		c.Nodes[leader].Register(t, fmt.Sprintf("n%d", i), "", mac(i))
	}
	deadline := time.Now().Add(20 * time.Second)
	for c.Nodes[follower].J.LastSnapshotIndex() < c.Nodes[follower].J.CommitIndex() {
		if time.Now().After(deadline) {
			t.Fatal("the follower took no snapshot")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range c.Nodes {
		c.StopMember(t, i)
	}
	start := time.Now()
	errs := make(chan error, len(cfgs))
	for i := range cfgs {
		go func(i int) {
			h, err := journaltest.StartHarness(cfgs[i], root)
			c.Nodes[i] = h
			errs <- err
		}(i)
	}
	for range cfgs {
		if err := <-errs; err != nil {
			t.Fatalf("restart after snapshots: %v", err)
		}
	}
	t.Logf("all three serving %v after a full restart", time.Since(start))
	if n := inspectOn(t, c.Nodes[follower], "n39"); n.GetNodeId() != "n39" {
		t.Fatal("restarted journal lacks n39")
	}
}
