package integration

// Process-level test of the rolling-upgrade rules (issue 12) against real
// pact-journal processes. A newer journal is stood for by a journal
// credential of the domain (made here with the real CA code from the
// domain root) proposing commands this version does not know.

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

func newerCommand(t *testing.T, journalID string, ignorable bool) []byte {
	t.Helper()
	data, err := raftfsm.Encode(&pactv1.Command{AtUnixNano: time.Now().UnixNano(), Actor: "journal/" + journalID, Ignorable: ignorable})
	if err != nil {
		t.Fatal(err)
	}
	// Field 139 of Command stands for an operation of a newer release.
	return protowire.AppendBytes(protowire.AppendTag(data, 139, protowire.BytesType), []byte{0x0a, 0x01, 'x'})
}

func readyz(addr string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The leader refuses to commit a command it does not know unless it is
// marked ignorable (committing it would stop every journal of its
// version); an ignorable one commits and every journal skips it and keeps
// serving and ready.
func TestRollingUpgradeRules(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	leader := q.leader()

	// A follower already upgraded forwards a command of the newer
	// version: a member's certificate from an intermediate of its own,
	// under the journal CA Raft binds it to, published as its own (only
	// members are peers, and only as Raft records them).
	id := q.members[(leader+1)%len(q.members)].id
	stolen := journaltest.NewIntermediateUnder(t, journal.Config{JournalCACertFile: q.pq.JournalCACert(id), JournalCAKey: "file:" + q.pq.JournalCAKey(id)})
	newer := stolen.JournalCert(t, id, "pact.local")
	roots, _, err := pki.LoadCertPool(filepath.Join(q.dir, ca.RootCertFile))
	if err != nil {
		t.Fatal(err)
	}
	st, _, _ := q.status(q.members[leader].grpc)
	peer := pactv1.NewJournalPeerServiceClient(dialJournal(t, roots, q.members[leader].grpc, newer))
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "pact-quorum-id", st.QuorumID), 10*time.Second)
	defer cancel()
	publish, err := raftfsm.Encode(&pactv1.Command{AtUnixNano: time.Now().UnixNano(), Actor: "journal/" + id,
		Op: &pactv1.Command_PublishIntermediate{PublishIntermediate: &pactv1.PublishIntermediateOp{Intermediate: stolen.Record(id)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Propose(ctx, &pactv1.ProposeRequest{Command: publish}); err != nil {
		t.Fatalf("%s publishes its intermediate: %v", id, err)
	}
	cfgJournalID := id

	_, err = peer.Propose(ctx, &pactv1.ProposeRequest{Command: newerCommand(t, cfgJournalID, false)})
	if pe := apierr.FromError(err); pe.Code != codes.InvalidArgument || !strings.Contains(pe.Message, "does not know this command") || !strings.Contains(pe.Message, "leader last") {
		t.Fatalf("an unknown, not ignorable command at the leader: %v; want INVALID_ARGUMENT saying to upgrade the leader last", err)
	}
	resp, err := peer.Propose(ctx, &pactv1.ProposeRequest{Command: newerCommand(t, cfgJournalID, true)})
	if err != nil || resp.GetErrorCode() != "" || resp.GetIndex() == 0 {
		t.Fatalf("an ignorable unknown command: %v %v", resp, err)
	}
	// Every journal skipped it and still serves: a write and a
	// linearizable read on each, readiness, and a healthy status.
	q.registerBatch(inventory("upg", 3))
	for i, m := range q.members {
		if code := readyz(m.metrics); code != http.StatusOK {
			t.Errorf("%s /readyz %d after the ignorable command", m.id, code)
		}
		if out := q.output(i); strings.Contains(out, "STOPPED APPLYING") || strings.Contains(out, "panic") {
			t.Errorf("%s:\n%s", q.members[i].id, out)
		}
	}
	st, code, stderr := q.status(q.addrs()...)
	if code != 0 {
		t.Fatalf("status after the ignorable command: exit %d\n%s", code, stderr)
	}
	for _, m := range st.Members {
		if m.Version == "" || m.Halted != "" {
			t.Errorf("member %+v", m)
		}
	}
}
