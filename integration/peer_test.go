package integration

// Process-level test of who is a journal peer (issue 22): a journal is a
// peer only with its own intermediate, only while it is a member, and only
// of the same quorum, on the Raft port and the peer service of journal
// processes.

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

func TestPeerRightsOfJournalProcesses(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	leader := q.leader()
	st, _, _ := q.status(q.members[leader].grpc)
	if st.QuorumID == "" {
		t.Fatal("pact journal status shows no quorum id")
	}
	roots, _, err := pki.LoadCertPool(filepath.Join(q.dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	owner := q.members[(leader+1)%3].id
	victim := q.members[leader].id
	raftAddr := q.members[leader].raft
	propose := func(at int, cmd *pactv1.Command, as string, stolen journaltest.Intermediate) error {
		data, err := raftfsm.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		c := dialJournal(t, roots, q.members[at].grpc, stolen.JournalCert(t, as, "pact.local"))
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "pact-quorum-id", st.QuorumID), 10*time.Second)
		defer cancel()
		resp, err := pactv1.NewJournalPeerServiceClient(c).Propose(ctx, &pactv1.ProposeRequest{Command: data})
		if err == nil && resp.GetErrorCode() != "" {
			t.Fatalf("Propose as %s: %s %s", as, resp.GetErrorCode(), resp.GetErrorMessage())
		}
		return err
	}

	// A key in the wrong hands: an intermediate from the root, published
	// as the owner's own by a certificate naming the owner (as a journal
	// publishes its fresh re-key), then used to name the leader.
	// The key is under the owner's own journal CA (the one Raft binds it
	// to): a root-signed one would be no peer at all (peerbinding_test.go).
	stolen := journaltest.NewIntermediateUnder(t, journal.Config{
		JournalCACertFile: q.pq.JournalCACert(owner), JournalCAKey: "file:" + q.pq.JournalCAKey(owner)})
	publish := &pactv1.Command{AtUnixNano: time.Now().UnixNano(), Actor: "journal/" + owner,
		Op: &pactv1.Command_PublishIntermediate{PublishIntermediate: &pactv1.PublishIntermediateOp{Intermediate: stolen.Record(owner)}}}
	// Through whichever journal leads now (the leadership may move on a
	// loaded machine); the refusals below need no leader.
	var last polltest.Last
	polltest.Until(t, 60*time.Second, 100*time.Millisecond, func() bool {
		last.Err = propose(q.leader(), publish, owner, stolen)
		if last.Err != nil && status.Code(last.Err) != codes.Unavailable {
			t.Fatalf("%s publishes an intermediate of its own: %v", owner, last.Err)
		}
		return last.Err == nil
	}, "%s publishes an intermediate of its own: %v", owner, &last)
	before := counter(t, q.members[leader].metrics, `pact_journal_peer_refused_total{reason="wrong_intermediate"}`)
	if reply, err := journaltest.RaftHello(t, raftAddr, stolen.JournalCert(t, victim, "pact.local"), st.QuorumID); err != nil || reply.GetRefusedReason() != "wrong_intermediate" {
		t.Fatalf("a certificate naming %s from %s's intermediate on the Raft port: %v %v, want a wrong_intermediate refusal", victim, owner, reply, err)
	}
	register := &pactv1.Command{AtUnixNano: time.Now().UnixNano(), Actor: "admin/admin",
		Op: &pactv1.Command_RegisterNode{RegisterNode: &pactv1.RegisterNodeOp{NodeId: "forged",
			Hardware: &pactv1.HardwareIdentity{Macs: []string{"02:00:00:00:0f:01"}, BmcSerial: "SN-FORGED"}}}}
	if err := propose(leader, register, victim, stolen); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Propose naming %s from %s's intermediate: %v, want Unauthenticated", victim, owner, err)
	}
	// The Raft port's refusal is counted once the journal has verified the
	// certificate, which TLS 1.3 does after the client's side is done.
	polltest.Until(t, 10*time.Second, 50*time.Millisecond, func() bool {
		return counter(t, q.members[leader].metrics, `pact_journal_peer_refused_total{reason="wrong_intermediate"}`) >= before+2
	}, "the leader counted fewer than %v wrong_intermediate refusals", before+2)
	if _, _, code := runPact(t, q.env(q.members[leader].grpc), "node", "inspect", "forged"); code != 3 {
		t.Errorf("pact node inspect forged: exit %d, want 3 (the forged write never landed)", code)
	}

	// Another quorum's hello is refused, by the owner's own certificate.
	if reply, err := journaltest.RaftHello(t, raftAddr, stolen.JournalCert(t, owner, "pact.local"), "anotherquorum"); err != nil || reply.GetRefusedReason() != "quorum_mismatch" {
		t.Fatalf("hello of another quorum: %v %v, want a quorum_mismatch refusal", reply, err)
	}

	// A plain pact journal remove ends the owner's peer rights at once,
	// its intermediate still valid.
	if stdout, stderr, code := runPact(t, q.env(q.members[leader].grpc), "journal", "remove", owner); code != 0 {
		t.Fatalf("pact journal remove %s: exit %d\n%s%s", owner, code, stdout, stderr)
	}
	if reply, err := journaltest.RaftHello(t, raftAddr, stolen.JournalCert(t, owner, "pact.local"), st.QuorumID); err != nil || reply.GetRefusedReason() != "not_member" {
		t.Fatalf("removed journal %s on the Raft port: %v %v, want a not_member refusal", owner, reply, err)
	}
	register.GetRegisterNode().NodeId = "after-removal"
	if err := propose(leader, register, owner, stolen); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Propose from removed journal %s: %v, want PermissionDenied", owner, err)
	}
}
