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
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pact-hpc/pact/integration/launch"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/ca"
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

	auth, err := ca.LoadKeyFileAuthority(launch.RootFiles(q.dir))
	if err != nil {
		t.Fatal(err)
	}
	cfg := ca.DefaultConfig()
	// A follower already upgraded forwards a command of the newer
	// version: a member's certificate from a fresh intermediate of its
	// own (only members are peers).
	cfg.Upstream, cfg.JournalID = auth, q.members[(leader+1)%len(q.members)].id
	newer, err := ca.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	roots, _, err := pki.LoadCertPool(filepath.Join(q.dir, ca.RootCertFile))
	if err != nil {
		t.Fatal(err)
	}
	peer := pactv1.NewJournalPeerServiceClient(dialJournal(t, roots, q.members[leader].grpc, newer.ServerCertificate()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err = peer.Propose(ctx, &pactv1.ProposeRequest{Command: newerCommand(t, cfg.JournalID, false)})
	if pe := apierr.FromError(err); pe.Code != codes.InvalidArgument || !strings.Contains(pe.Message, "does not know this command") || !strings.Contains(pe.Message, "leader last") {
		t.Fatalf("an unknown, not ignorable command at the leader: %v; want INVALID_ARGUMENT saying to upgrade the leader last", err)
	}
	resp, err := peer.Propose(ctx, &pactv1.ProposeRequest{Command: newerCommand(t, cfg.JournalID, true)})
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
