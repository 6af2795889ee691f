package journal_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// A write a journal forwards commits at the leader, but the journal cannot
// apply it in time: it answers OUTCOME_UNKNOWN (retryable, never final),
// not success with a state it cannot show. Once it applies, the write is
// there.
func TestForwardedWriteNotAppliedHereIsUnknownOutcome(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	lag := c.Nodes[(leader+1)%3]
	// The admin's first call records its credential, a write of its own.
	lag.Register(t, "early", "SN-EARLY", mac(2))
	release := lag.J.HoldApply()
	t.Cleanup(release) // before the cluster closes: a held FSM blocks Raft's shutdown
	lag.J.SetApplyWait(200 * time.Millisecond)

	_, err := lag.AdminClient(t).RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: "late", Hardware: hw("SN-LATE", mac(1))})
	pe := wantErr(t, err, codes.DeadlineExceeded, apierr.OutcomeUnknown)
	if pe.Final() {
		t.Errorf("%v is final; an unknown outcome must be retryable", err)
	}
	if !strings.Contains(pe.Message, "has not applied it yet") {
		t.Errorf("message %q does not say the write committed but is not applied here", pe.Message)
	}
	t.Logf("%s answered: %s", lag.Cfg.NodeID, pe.Message)
	// It did commit.
	if n := inspectOn(t, c.Nodes[leader], "late"); n.GetHardware().GetBmcSerial() != "SN-LATE" {
		t.Fatalf("leader has %v", n)
	}
	release()
	lag.J.SetApplyWait(2 * time.Second)
	if n := inspectOn(t, lag, "late"); n.GetHardware().GetBmcSerial() != "SN-LATE" {
		t.Fatalf("%s has %v once it applies", lag.Cfg.NodeID, n)
	}
}
