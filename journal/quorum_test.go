package journal_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// recordAs publishes the intermediate in Raft as journal id's own, as that
// journal publishes its own.
func recordAs(t *testing.T, leader *journaltest.Harness, in journaltest.Intermediate, id string) {
	t.Helper()
	data, err := raftfsm.Encode(&pactv1.Command{AtUnixNano: time.Now().UnixNano(), Actor: "journal/" + id,
		Op: &pactv1.Command_PublishIntermediate{PublishIntermediate: &pactv1.PublishIntermediateOp{Intermediate: in.Record(id)}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-leader.J.ApplyRaw(data, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func quorumStatus(t *testing.T, h *journaltest.Harness) *pactv1.JournalStatusResponse {
	t.Helper()
	st, err := h.AdminClient(t).JournalStatus(context.Background(), &pactv1.JournalStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitQuorumID waits until the leader has recorded the quorum id in the
// replicated state and every member reports the same one.
func waitQuorumID(t *testing.T, c *journaltest.Cluster, leader int) string {
	t.Helper()
	var id string
	var last polltest.Last
	polltest.Until(t, 20*time.Second, 50*time.Millisecond, func() bool {
		st := quorumStatus(t, c.Nodes[leader])
		last.Value = st
		id = st.GetQuorumId()
		same := id != ""
		for _, m := range st.GetMembers() {
			same = same && m.GetQuorumId() == id
		}
		return same
	}, "members do not agree on a quorum id: %v", &last)
	return id
}

// A journal that bootstrapped since it started belongs to a quorum, and
// says so to a probe, as one restarted on its data directory does: an
// empty journal started with its old --initial-cluster (a wiped host)
// then refuses to bootstrap a second quorum. The chaos scenario
// operator-mistakes found members that had run since their own bootstrap
// answering that they had no state, so the wiped journal took their
// bootstrap candidates and bootstrapped a second quorum of the same
// names (refused by them, it never served, but it did not exit 4 either).
func TestProbeOfABootstrappedJournalSaysItHasState(t *testing.T) {
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	c := journaltest.StartCluster(t, root, cfgs)
	qid := waitQuorumID(t, c, c.Leader(t))
	cert := journaltest.NewIntermediate(t, root).JournalCert(t, "j9", "pact.local")
	for _, h := range c.Nodes {
		reply, err := journaltest.RaftHelloKind(t, h.Cfg.RaftListen, cert, "", pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_PROBE)
		if err != nil {
			t.Fatalf("probe of %s: %v", h.Cfg.NodeID, err)
		}
		if !reply.GetHasState() || reply.GetQuorumId() != qid || len(reply.GetFormedWith()) != 3 {
			t.Errorf("probe of %s, bootstrapped in this process: has_state %v, quorum %q (want %s), formed with %v",
				h.Cfg.NodeID, reply.GetHasState(), reply.GetQuorumId(), qid, reply.GetFormedWith())
		}
	}
}

func TestPeerIsAMemberWithItsOwnIntermediateAndQuorum(t *testing.T) {
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	c := journaltest.StartCluster(t, root, cfgs)
	leader := c.Leader(t)
	lh := c.Nodes[leader]
	qid := waitQuorumID(t, c, leader)
	if len(qid) != 26 {
		t.Fatalf("quorum id %q", qid)
	}

	// The stolen intermediate is j2's (or whichever member is not the
	// leader); certificates are minted with it for several names.
	victim, owner, ownerIdx := "", "", -1
	for i, cfg := range cfgs {
		if i == leader {
			victim = cfg.NodeID // the attacker names the leader itself
		} else if owner == "" {
			owner, ownerIdx = cfg.NodeID, i
		}
	}
	// An attacker who read one journal's intermediate key out of its
	// memory holds a valid chain to the root through the journal CA Raft
	// binds that journal to: the test stands for that key with an
	// intermediate the owner's journal CA signed, recorded in Raft as the
	// owner's, exactly as the owner publishes its own; everything else is
	// the real quorum.
	stolen := journaltest.NewIntermediateUnder(t, cfgs[ownerIdx])
	recordAs(t, lh, stolen, owner)
	raftAddr := lh.Cfg.RaftListen

	t.Run("a chain the root signed, for a journal bound to a journal CA, is no peer", func(t *testing.T) {
		legacy := journaltest.NewIntermediate(t, root)
		before := lh.J.PeerRefusedForTest("not_bound")
		reply, err := journaltest.RaftHello(t, raftAddr, legacy.JournalCert(t, owner, "pact.local"), qid)
		if err != nil {
			t.Fatal(err)
		}
		if reply.GetRefusedReason() != "not_bound" {
			t.Fatalf("reply %v, want a not_bound refusal", reply)
		}
		if got := lh.J.PeerRefusedForTest("not_bound"); got != before+1 {
			t.Errorf("pact_journal_peer_refused_total{reason=not_bound} = %v, want %v", got, before+1)
		}
	})
	t.Run("a peer that proves no quorum id is refused", func(t *testing.T) {
		before := lh.J.PeerRefusedForTest("no_quorum_id")
		reply, err := journaltest.RaftHello(t, raftAddr, stolen.JournalCert(t, owner, "pact.local"), "")
		if err != nil {
			t.Fatal(err)
		}
		if reply.GetRefusedReason() != "no_quorum_id" {
			t.Fatalf("reply %v, want a no_quorum_id refusal", reply)
		}
		if got := lh.J.PeerRefusedForTest("no_quorum_id"); got != before+1 {
			t.Errorf("pact_journal_peer_refused_total{reason=no_quorum_id} = %v, want %v", got, before+1)
		}
	})

	t.Run("the owner's own name and quorum is a peer", func(t *testing.T) {
		reply, err := journaltest.RaftHello(t, raftAddr, stolen.JournalCert(t, owner, "pact.local"), qid)
		if err != nil || reply.GetRefused() != "" {
			t.Fatalf("refused: %v %v", err, reply)
		}
		if reply.GetQuorumId() != qid {
			t.Fatalf("reply quorum %q, want %q", reply.GetQuorumId(), qid)
		}
	})
	t.Run("another quorum is refused", func(t *testing.T) {
		before := lh.J.PeerRefusedForTest("quorum_mismatch")
		reply, err := journaltest.RaftHello(t, raftAddr, stolen.JournalCert(t, owner, "pact.local"), "someotherquorum")
		if err != nil {
			t.Fatal(err)
		}
		if reply.GetRefusedReason() != "quorum_mismatch" || !strings.Contains(reply.GetRefused(), qid) {
			t.Fatalf("reply %v, want a quorum_mismatch refusal naming %s", reply, qid)
		}
		if got := lh.J.PeerRefusedForTest("quorum_mismatch"); got != before+1 {
			t.Errorf("pact_journal_peer_refused_total{reason=quorum_mismatch} = %v, want %v", got, before+1)
		}
	})
	t.Run("another journal's name from this intermediate is refused", func(t *testing.T) {
		before := lh.J.PeerRefusedForTest("wrong_intermediate")
		// The chain verifies to the root, so the handshake completes; the
		// records refuse it after the quorum hello, with the reason.
		reply, err := journaltest.RaftHello(t, raftAddr, stolen.JournalCert(t, victim, "pact.local"), qid)
		if err != nil {
			t.Fatal(err)
		}
		if reply.GetRefusedReason() != "wrong_intermediate" {
			t.Fatalf("a certificate naming %s from %s's intermediate and journal CA: reply %v, want wrong_intermediate", victim, owner, reply)
		}
		if got := lh.J.PeerRefusedForTest("wrong_intermediate"); got != before+1 {
			t.Errorf("pact_journal_peer_refused_total{reason=wrong_intermediate} = %v, want %v", got, before+1)
		}
	})

	macs := map[string]string{"forged-1": "02:00:00:00:00:01", "via-1": "02:00:00:00:00:02", "via-2": "02:00:00:00:00:03", "removed-1": "02:00:00:00:00:04"}
	register := func(cert *tls.Certificate, actor, node string) error {
		// Forwarded as a batch, as activations are, with a via of the
		// forwarder's own making in the envelope and the command: the
		// leader's stamp replaces both.
		reg := &pactv1.Command{AtUnixNano: time.Now().UnixNano(), Actor: actor, Via: "journal/made-up",
			Op: &pactv1.Command_RegisterNode{RegisterNode: &pactv1.RegisterNodeOp{NodeId: node,
				Hardware: &pactv1.HardwareIdentity{Macs: []string{macs[node]}, BmcSerial: "SN-" + node}}}}
		cmd := &pactv1.Command{AtUnixNano: reg.GetAtUnixNano(), Actor: actor, Via: "journal/made-up",
			Op: &pactv1.Command_Batch{Batch: &pactv1.BatchOp{Commands: []*pactv1.Command{reg}}}}
		data, err := raftfsm.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		ctx := metadata.AppendToOutgoingContext(context.Background(), "pact-quorum-id", qid)
		resp, err := pactv1.NewJournalPeerServiceClient(lh.Dial(t, cert)).Propose(ctx, &pactv1.ProposeRequest{Command: data})
		if err == nil && resp.GetBatch()[0].GetErrorCode() != "" {
			t.Errorf("Propose: %s %s", resp.GetBatch()[0].GetErrorCode(), resp.GetBatch()[0].GetErrorMessage())
		}
		return err
	}
	t.Run("a forged journal cannot propose", func(t *testing.T) {
		err := register(stolen.JournalCert(t, victim, "pact.local"), "admin/admin", "forged-1")
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Propose with %s's name from %s's intermediate: %v, want Unauthenticated", victim, owner, err)
		}
	})
	t.Run("a forwarded write is stamped with the journal that forwarded it", func(t *testing.T) {
		if err := register(stolen.JournalCert(t, owner, "pact.local"), "admin/admin", "via-1"); err != nil {
			t.Fatal(err)
		}
		audit, err := lh.AdminClient(t).ListAudit(context.Background(), &pactv1.ListAuditRequest{NodeId: "via-1"})
		if err != nil {
			t.Fatal(err)
		}
		if len(audit.GetEntries()) != 1 || audit.GetEntries()[0].GetVia() != "journal/"+owner {
			t.Fatalf("audit %v, want one entry via journal/%s", audit.GetEntries(), owner)
		}
		if err := register(stolen.JournalCert(t, owner, "pact.local"), "journal/"+victim, "via-2"); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a journal forwarding in another journal's name: %v, want PermissionDenied", err)
		}
	})

	// Removal ends peer rights at once, whatever the intermediate's life.
	t.Run("a removed journal is no peer", func(t *testing.T) {
		if _, err := lh.AdminClient(t).RemoveJournal(context.Background(), &pactv1.RemoveJournalRequest{JournalId: owner}); err != nil {
			t.Fatal(err)
		}
		// The real owner stopped, so that its own calls refused as not a
		// member do not count here: only the stolen certificate's.
		c.StopMember(t, ownerIdx)
		before := lh.J.PeerRefusedForTest("not_member")
		reply, err := journaltest.RaftHello(t, raftAddr, stolen.JournalCert(t, owner, "pact.local"), qid)
		if err != nil {
			t.Fatal(err)
		}
		if reply.GetRefusedReason() != "not_member" {
			t.Fatalf("removed journal %s: reply %v, want not_member", owner, reply)
		}
		if err := register(stolen.JournalCert(t, owner, "pact.local"), "admin/admin", "removed-1"); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Propose from removed journal %s: %v, want PermissionDenied", owner, err)
		}
		if got := lh.J.PeerRefusedForTest("not_member"); got < before+2 {
			t.Errorf("pact_journal_peer_refused_total{reason=not_member} = %v, want at least %v", got, before+2)
		}
	})
}

// A journal the leader refuses as a peer (here: it claims another quorum)
// answers its own callers retryably: the refusal is of the journal, not
// of the caller's write, which another journal can take.
func TestForwardRefusedAsAPeerIsRetryable(t *testing.T) {
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	c := journaltest.StartCluster(t, root, cfgs)
	leader := c.Leader(t)
	waitQuorumID(t, c, leader)
	f := c.Nodes[(leader+1)%3]
	f.J.SetQuorumIDForTest("anotherquorum")
	_, err := f.AdminClient(t).RegisterNode(context.Background(), &pactv1.RegisterNodeRequest{NodeId: "n-peer",
		Hardware: &pactv1.HardwareIdentity{Macs: []string{"02:00:00:00:0a:01"}}})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "refuses this journal as a peer") {
		t.Fatalf("a write through a journal the leader refuses as a peer: %v, want Unavailable (NO_LEADER) naming the refusal", err)
	}
}
