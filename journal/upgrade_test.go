package journal_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// newerCommand is a command of a newer pact-journal: field 139 of Command
// stands for an operation this version does not know.
func newerCommand(t *testing.T, ignorable bool) []byte {
	t.Helper()
	data, err := raftfsm.Encode(&pactv1.Command{AtUnixNano: time.Now().UnixNano(), Actor: "journal/j9", Ignorable: ignorable})
	if err != nil {
		t.Fatal(err)
	}
	return protowire.AppendBytes(protowire.AppendTag(data, 139, protowire.BytesType), []byte{0x0a, 0x01, 'x'})
}

// applyOnLeader appends data to the log through whichever journal leads,
// again if Raft refuses it there (a loaded machine can hold a leader up
// past its lease, and another takes over). It returns once the leader
// applied the entry or halted at it. An entry whose outcome was unknown
// may end up in the log twice: the test only needs it there once.
func applyOnLeader(t *testing.T, c *journaltest.Cluster, data []byte) {
	t.Helper()
	var last polltest.Last
	polltest.Until(t, 30*time.Second, time.Millisecond, func() bool {
		leader := c.Nodes[c.Leader(t)]
		done := leader.J.ApplyRaw(data, 5*time.Second)
		tick := time.NewTicker(20 * time.Millisecond)
		var err error
	wait:
		for {
			select {
			case err = <-done:
				break wait
			case <-tick.C:
				if leader.J.Halted() != "" {
					break wait
				}
			}
		}
		tick.Stop()
		last.Err = err
		return err == nil
	}, "appending a raw command: %v", &last)
}

// A rolling upgrade on a real three-journal Raft quorum (in process): an
// unknown command marked ignorable is skipped by every journal, which keep
// serving; one that is not stops every journal that does not know it:
// they apply nothing after it, fail their readiness check, refuse calls
// with JOURNAL_HALTED (so clients move on), still answer the status with
// why, and shut down cleanly.
func TestUnknownCommandOnAQuorum(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	c.Nodes[leader].Register(t, "before", "", mac(1))

	applyOnLeader(t, c, newerCommand(t, true))
	c.Nodes[(leader+1)%3].Register(t, "after-ignorable", "", mac(2))
	for i, h := range c.Nodes {
		if n := inspectOn(t, h, "after-ignorable"); n.GetNodeId() == "" || h.J.Halted() != "" {
			t.Fatalf("journal %d after an ignorable unknown command: node %v, halted %q", i, n, h.J.Halted())
		}
	}

	applyOnLeader(t, c, newerCommand(t, false))
	for i, h := range c.Nodes {
		polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool { return h.J.Halted() != "" }, "journal %d did not stop at the unknown command", i)
	}
	for i, h := range c.Nodes {
		if r := h.J.Halted(); !strings.Contains(r, "stopped applying the log at entry") || !strings.Contains(r, "upgrade this journal") || !strings.Contains(r, "journal/j9") {
			t.Errorf("journal %d halt reason %q", i, r)
		}
		if err := h.J.Ready(); err == nil || !strings.Contains(err.Error(), "halted") {
			t.Errorf("journal %d readiness while halted: %v", i, err)
		}
		_, err := h.AdminClient(t).RegisterNode(context.Background(), &pactv1.RegisterNodeRequest{NodeId: "late", Hardware: &pactv1.HardwareIdentity{Macs: []string{mac(3)}}})
		wantReason(t, err, codes.Unavailable, apierr.JournalHalted)
		st, err := h.AdminClient(t).JournalStatus(context.Background(), &pactv1.JournalStatusRequest{})
		if err != nil {
			t.Fatalf("journal %d status while halted: %v", i, err)
		}
		for _, m := range st.GetMembers() {
			if m.GetReachable() && m.GetHalted() == "" {
				t.Errorf("journal %d's status shows %s not halted", i, m.GetJournalId())
			}
		}
	}
}
