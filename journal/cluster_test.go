package journal_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/internal/snapfile"
	"github.com/pact-hpc/pact/internal/version"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

func startCluster(t *testing.T, n int, mutate ...func(*journal.Config)) *journaltest.Cluster {
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
		for _, m := range mutate {
			m(&cfgs[i])
		}
	}
	return journaltest.StartCluster(t, root, cfgs)
}

// frozenClock gives every journal one fake clock that the test never
// advances: whatever happens then happens on an event, never on one of
// the journals' timers (Raft keeps its own wall-clock timers).
func frozenClock() func(*journal.Config) {
	fc := fakeclock.New(time.Now())
	return func(c *journal.Config) { c.Clock = fc }
}

// recvUntilEnd reads s until it ends and returns how it ended; the stream's
// context bounds the wait (a hang guard, not a measure).
func recvUntilEnd(s pactv1.EnrollmentService_SubscribeClient) error {
	for {
		if _, err := s.Recv(); err != nil {
			return err
		}
	}
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
	if len(resp.GetTrustBundleDer()) != 7 {
		t.Errorf("bundle has %d certificates, want root + 3 journal CAs + 3 intermediates", len(resp.GetTrustBundleDer()))
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

	// The status names the leader. A loaded machine may have moved the
	// leadership since the test began: compare with the leader the
	// members agree on now, again until both were read in one term.
	var st *pactv1.JournalStatusResponse
	var agreed polltest.Last
	polltest.Until(t, 20*time.Second, 50*time.Millisecond, func() bool {
		st, err = c.Nodes[other].AdminClient(t).JournalStatus(context.Background(), &pactv1.JournalStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		now := c.Configs[c.Leader(t)].NodeID
		agreed.Value = fmt.Sprintf("status names leader %q; the members agree on %s", st.GetLeaderId(), now)
		return st.GetLeaderId() == now
	}, "%v", &agreed)
	if len(st.GetMembers()) != 3 {
		t.Fatalf("status: %d members", len(st.GetMembers()))
	}
	for _, m := range st.GetMembers() {
		if !m.GetReachable() || !m.GetVoter() || m.GetIntermediateSerial() == "" || m.GetGrpcAddr() == "" {
			t.Errorf("member %+v", m)
		}
		// Each member reports its own build, over the peer call for the
		// two that are not the one answering.
		if m.GetVersion() != version.Get().String() {
			t.Errorf("member %s version %q, want %q", m.GetJournalId(), m.GetVersion(), version.Get().String())
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
	// Until it hears from the leader (which backed off from the stopped
	// member) it knows none and answers NO_LEADER.
	c.Leader(t)
	if n := inspectOn(t, back, "n1"); n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
		t.Errorf("restarted journal sees n1 as %v", n.GetState())
	}
}

// A journal cut off from the majority accepts no write and says so quickly:
// it refuses on its own rather than running out a commit timeout. The
// apply timeout is longer here than the call may wait, so a journal that
// waited for it would fail the call with DEADLINE_EXCEEDED, not NO_LEADER,
// however fast or slow the machine.
func TestClusterMinorityRefusesWrites(t *testing.T) {
	c := startCluster(t, 3, func(c *journal.Config) { c.ApplyTimeout = 10 * time.Minute })
	leader := c.Leader(t)
	lone := (leader + 1) % 3
	c.StopMember(t, leader)
	c.StopMember(t, (leader+2)%3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := c.Nodes[lone].AdminClient(t).RegisterNode(ctx, &pactv1.RegisterNodeRequest{
		NodeId: "late", Hardware: &pactv1.HardwareIdentity{Macs: []string{mac(99)}},
	})
	wantReason(t, err, codes.Unavailable, apierr.NoLeader)
	t.Logf("the minority journal refused after %v", time.Since(start))
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
	// Its journal CA from the quorum's root.
	if err := journaltest.JournalCA(&cfg, c.Root); err != nil {
		t.Fatal(err)
	}
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
	var last polltest.Last
	polltest.Until(t, 20*time.Second, 100*time.Millisecond, func() bool {
		_, last.Err = admin.AddJournal(context.Background(), &pactv1.AddJournalRequest{JournalId: cfg.NodeID, RaftAddr: cfg.RaftListen})
		return last.Err == nil
	}, "add journal: %v", &last)
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
	// A snapshot taken now names the three members; the state still holds
	// the removed journal's addresses (pact journal snapshot inspect
	// tells them apart by the header).
	ss, err := admin.SaveSnapshot(context.Background(), &pactv1.SaveSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	for {
		chunk, err := ss.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("save snapshot: %v", err)
		}
		file.Write(chunk.GetData())
	}
	h, state, _, err := snapfile.Read(&file)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range c.Configs[:3] {
		want = append(want, m.NodeID)
	}
	slices.Sort(want)
	counts, err := snapfile.Count(state)
	if err != nil || !slices.Equal(h.GetMembers(), want) || !slices.Contains(counts.Journals, cfg.NodeID) {
		t.Errorf("snapshot after remove: members %v (want %v), journal records %v (with the removed %s), %v", h.GetMembers(), want, counts.Journals, cfg.NodeID, err)
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

// Decommissioning at one journal closes the node's stream on another at
// once: when the revocation is applied there, not on a later check. The
// journals' clocks stand still, so no timer of theirs can be what closes
// it.
func TestClusterDecommissionClosesStreamsEverywhere(t *testing.T) {
	c := startCluster(t, 3, frozenClock())
	leader := c.Leader(t)
	follower := c.Nodes[(leader+1)%3]
	follower.Register(t, "n1", "SN1", mac1)
	key := journaltest.NewKey(t)
	resp, err := follower.Enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	cert := key.TLSCert(resp.GetCertChainDer())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := pactv1.NewEnrollmentServiceClient(follower.Dial(t, &cert)).Subscribe(ctx, &pactv1.SubscribeRequest{})
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
	wantReason(t, recvUntilEnd(stream), codes.PermissionDenied, apierr.NodeRevoked)
	t.Logf("the stream on %s closed %v after the decommission", follower.Cfg.NodeID, time.Since(start))
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
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		return c.Nodes[follower].J.LastSnapshotIndex() >= c.Nodes[follower].J.CommitIndex()
	}, "the follower took no snapshot")
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

// A TPM refusal rests on the registered EK hash: a follower gives it as
// final only once the leader confirmed its copy; cut off from the majority
// it answers a retryable NO_LEADER instead, and the agent tries again.
func TestClusterTPMRefusalNeedsTheLeader(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	lone := (leader + 1) % 3
	registered, other := startAttestor(t), startAttestor(t)
	h := hw("SN-T", mac1)
	h.TpmEkHash = registered.EKHash()
	if _, err := c.Nodes[leader].AdminClient(t).RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: "t1", Hardware: h}); err != nil {
		t.Fatal(err)
	}
	wrongEK := func() error {
		r := hw("SN-T", mac1)
		r.TpmEkHash = registered.EKHash()
		_, err := pactv1.NewEnrollmentServiceClient(c.Nodes[lone].Dial(t, nil)).Enroll(callCtx(t), &pactv1.EnrollRequest{
			Hardware: r, CsrDer: journaltest.NewKey(t).CSR,
			Credentials: &pactv1.EnrollCredentials{Tpm: &pactv1.TpmAttestation{EkPublic: other.EKPublic(), AkPublic: other.AKPublic()}},
		})
		return err
	}
	// With a leader, the refusal is final (the follower catches up with
	// the registration through the leader if it has to).
	wantReason(t, wrongEK(), codes.PermissionDenied, apierr.TPMEKMismatch)
	c.StopMember(t, leader)
	c.StopMember(t, (leader+2)%3)
	wantReason(t, wrongEK(), codes.Unavailable, apierr.NoLeader)
}

// A journal answers a final refusal only from a copy of the registry the
// leader has confirmed. Cut off from the leader, a journal answers
// NO_LEADER with a retry-after for every final code (pact-agent exits for
// good on a final one), although its copy would refuse; once the quorum is
// back the same journal gives the leader's answer. (A copy that really
// lags a registration needs a partition of a running journal: the
// process-level test in integration/ covers it.)
func TestCutOffJournalGivesNoFinalRefusal(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	for i := range cfgs {
		// A node that enrolled during the test still counts as streaming,
		// however slow the restarts below are.
		cfgs[i].DigestInterval = 5 * time.Minute
		cfgs[i].TakeoverWindow = 10 * time.Minute
		cfgs[i].NodeLivenessTimeout = 10 * time.Minute
	}
	c := journaltest.StartCluster(t, root, cfgs)
	leader := c.Leader(t)
	lag := (leader + 1) % 3
	others := []int{leader, (leader + 2) % 3}
	via := c.Nodes[leader]

	via.Register(t, "conflictA", "SNA", mac(1))
	via.Register(t, "conflictB", "SNB", mac(2))
	via.Register(t, "gone", "SNG", mac(3))
	if _, err := via.AdminClient(t).DecommissionNode(context.Background(), &pactv1.DecommissionNodeRequest{NodeId: "gone", Force: true}); err != nil {
		t.Fatal(err)
	}
	via.Register(t, "busy", "SNX", mac(4))
	busyKey := journaltest.NewKey(t)
	busy, err := via.Enroll(t, busyKey, "SNX", mac(4))
	if err != nil {
		t.Fatal(err)
	}
	via.Register(t, "renewed", "SNR", mac(5))
	firstKey := journaltest.NewKey(t)
	first, err := via.Enroll(t, firstKey, "SNR", mac(5))
	if err != nil {
		t.Fatal(err)
	}
	oldCert := firstKey.TLSCert(first.GetCertChainDer())
	newKey := journaltest.NewKey(t)
	renewed, err := pactv1.NewEnrollmentServiceClient(via.Dial(t, &oldCert)).RenewCert(context.Background(),
		&pactv1.RenewCertRequest{CurrentSerial: first.GetSerial(), CsrDer: newKey.CSR})
	if err != nil {
		t.Fatal(err)
	}
	newCert := newKey.TLSCert(renewed.GetCertChainDer())
	ping := func(h *journaltest.Harness, cert *tls.Certificate) error {
		_, err := pactv1.NewEnrollmentServiceClient(h.Dial(t, cert)).Ping(context.Background(), &pactv1.PingRequest{})
		return err
	}
	for _, id := range []string{"conflictB", "gone", "busy"} {
		inspectOn(t, c.Nodes[lag], id) // the journal to be cut off has them all
	}
	// busy streams to the journal to be cut off: an Enroll there with
	// another key is refused for good (ALREADY_ACTIVE without a
	// retry-after) once the leader confirms it.
	busyCert := busyKey.TLSCert(busy.GetCertChainDer())
	stream, err := pactv1.NewEnrollmentServiceClient(c.Nodes[lag].Dial(t, &busyCert)).Subscribe(context.Background(), &pactv1.SubscribeRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		t.Fatalf("busy's stream to %s: %v", cfgs[lag].NodeID, err)
	}
	if n := inspectOn(t, c.Nodes[lag], "renewed"); n.GetCert().GetSerial() != renewed.GetSerial() {
		t.Fatalf("%s has serial %s, want the renewed %s", cfgs[lag].NodeID, n.GetCert().GetSerial(), renewed.GetSerial())
	}

	attempts := []struct {
		name   string
		bmc    string
		mac    string
		reason apierr.Reason // the leader's answer
	}{
		{"hardware of two nodes", "SNB", mac(1), apierr.HardwareIdentityConflict},
		{"decommissioned", "SNG", mac(3), apierr.NodeRevoked},
		{"active with another key, streaming here", "SNX", mac(4), apierr.AlreadyActive},
		{"unknown hardware", "SNU", mac(7), apierr.NodeNotEnrolled},
	}

	// Only one journal runs: it knows no leader.
	for _, i := range others {
		c.StopMember(t, i)
	}
	lone := c.Nodes[lag]
	wantRetry := func(what string, err error) {
		t.Helper()
		pe := apierr.FromError(err)
		if pe == nil || pe.Reason != apierr.NoLeader || pe.Code != codes.Unavailable || pe.RetryAfter <= 0 || pe.Final() {
			t.Errorf("%s, cut off: got %v, want a retryable NO_LEADER with a retry-after", what, err)
		}
	}
	for _, a := range attempts {
		_, err := lone.Enroll(t, journaltest.NewKey(t), a.bmc, a.mac)
		wantRetry(a.name, err)
	}
	wantRetry("certificate replaced by a renewal", ping(lone, &oldCert))
	_, err = lone.Enroll(t, newKey, "SNR", mac(5))
	wantRetry("retry with the current key", err)
	_, err = lone.AdminClient(t).DecommissionNode(context.Background(), &pactv1.DecommissionNodeRequest{NodeId: "nobody", Force: true})
	wantRetry("decommission of an unknown node", err)
	// A malformed CSR is refused whatever the registry says: no
	// confirmation needed.
	_, err = lone.Enroll(t, journaltest.Key{CSR: []byte("not a CSR")}, "SNB", mac(2))
	wantReason(t, err, codes.InvalidArgument, apierr.InvalidCSR)

	// The quorum is back: the same journal answers as the leader does.
	for _, i := range others {
		c.StartMember(t, i)
	}
	c.Leader(t)
	for _, a := range attempts {
		_, err := lone.Enroll(t, journaltest.NewKey(t), a.bmc, a.mac)
		if pe := apierr.FromError(err); pe == nil || pe.Reason != a.reason || !pe.Final() {
			t.Errorf("%s, quorum back: got %v, want final %s", a.name, err, a.reason)
		}
	}
	if pe := apierr.FromError(ping(lone, &oldCert)); pe == nil || pe.Reason != apierr.StaleCertificate {
		t.Errorf("certificate replaced by a renewal, quorum back: got %v, want STALE_CERTIFICATE", pe)
	}
	if err := ping(lone, &newCert); err != nil {
		t.Errorf("renewed certificate: %v", err)
	}
	if resp, err := lone.Enroll(t, newKey, "SNR", mac(5)); err != nil || resp.GetSerial() != renewed.GetSerial() {
		t.Errorf("retry with the current key, quorum back: %v, serial %s, want %s", err, resp.GetSerial(), renewed.GetSerial())
	}
	_, err = lone.AdminClient(t).DecommissionNode(context.Background(), &pactv1.DecommissionNodeRequest{NodeId: "nobody", Force: true})
	wantReason(t, err, codes.NotFound, apierr.NodeNotEnrolled)
}

// An intermediate published while a journal lags (here: its FSM held, as
// it is for a journal cut off while another journal was added or re-keyed)
// is not in that journal's bundle yet. A current certificate from it is
// not unknown until the leader confirms it: the lagging journal answers a
// retryable NO_LEADER, never the UNAUTHENTICATED that sends a current node
// to enroll again, and accepts the certificate once it has caught up.
// (Found by the chaos campaign's membership-change scenario.)
func TestLaggingJournalConfirmsAnUnknownIntermediate(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	c := startCluster(t, 3)
	leader := c.Leader(t)
	lag := c.Nodes[(leader+1)%3]
	via := c.Nodes[leader]

	via.Register(t, "n1", "SN1", mac(1))
	key := journaltest.NewKey(t)
	first, err := via.Enroll(t, key, "SN1", mac(1))
	if err != nil {
		t.Fatal(err)
	}
	firstCert := key.TLSCert(first.GetCertChainDer())
	inspectOn(t, lag, "n1")

	release := lag.J.HoldApply(t)
	defer release()
	lag.J.SetApplyWait(t, time.Second)
	// The leader re-keys: its next certificates come from an intermediate
	// the lagging journal has not applied.
	if _, err := via.AdminClient(t).RetireIntermediate(context.Background(), &pactv1.RetireIntermediateRequest{
		Targets: []string{c.Nodes[leader].Cfg.NodeID}, GraceSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	newKey := journaltest.NewKey(t)
	renewed, err := pactv1.NewEnrollmentServiceClient(via.Dial(t, &firstCert)).RenewCert(context.Background(),
		&pactv1.RenewCertRequest{CurrentSerial: first.GetSerial(), CsrDer: newKey.CSR})
	if err != nil {
		t.Fatal(err)
	}
	oldIssuer, err := x509.ParseCertificate(first.GetCertChainDer()[1])
	if err != nil {
		t.Fatal(err)
	}
	newIssuer, err := x509.ParseCertificate(renewed.GetCertChainDer()[1])
	if err != nil {
		t.Fatal(err)
	}
	if newIssuer.SerialNumber.Cmp(oldIssuer.SerialNumber) == 0 {
		t.Fatal("the renewal was signed by the retired intermediate; the test needs the new one")
	}
	newCert := newKey.TLSCert(renewed.GetCertChainDer())
	ping := func() error {
		_, err := pactv1.NewEnrollmentServiceClient(lag.Dial(t, &newCert)).Ping(context.Background(), &pactv1.PingRequest{})
		return err
	}
	pe := apierr.FromError(ping())
	if pe == nil || pe.Reason != apierr.NoLeader || pe.Code != codes.Unavailable || pe.RetryAfter <= 0 || pe.Final() {
		t.Fatalf("lagging journal, certificate from an intermediate it has not applied: got %v, want a retryable NO_LEADER with a retry-after", pe)
	}
	release()
	if err := ping(); err != nil {
		t.Fatalf("the journal caught up: got %v, want the certificate accepted", err)
	}
}

// A follower holding the streams of a large site (10,000 nodes) reports
// them to the leader: its liveness digest, forwarded in messages the
// leader's server takes, moves every named node's last sighting. Before,
// the leader refused a digest over 64 KiB (about 4,700 short node ids)
// every time, and marked nodes streaming on that follower Inactive.
func TestLargeLivenessDigestFromAFollower(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	follower := c.Nodes[(leader+1)%3]
	follower.Register(t, "n1", "SN1", mac1)
	if _, err := follower.Enroll(t, journaltest.NewKey(t), "SN1", mac1); err != nil {
		t.Fatal(err)
	}
	enrolled := inspectOn(t, c.Nodes[leader], "n1").GetLastSeenUnixNano()
	// Node ids as a site names them; "n1" sorts after every one.
	ids := make([]string, 0, 10001)
	for i := range 10000 {
		ids = append(ids, fmt.Sprintf("cluster-a-rack%03d-node%02d", i/40, i%40))
	}
	ids = append(ids, "n1")
	// A later apply time than the enrollment's.
	waitFor(t, "the clock past the enrollment", func() bool { return time.Now().UnixNano() > enrolled })
	follower.J.ProposeDigestForTest(ids)
	if seen := inspectOn(t, c.Nodes[leader], "n1").GetLastSeenUnixNano(); seen <= enrolled {
		t.Errorf("n1's last sighting %d after the digest, want later than its enrollment %d: the digest did not commit", seen, enrolled)
	}
}
