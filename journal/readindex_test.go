package journal_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/journaltest"
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
	release := lag.J.HoldApply(t)
	t.Cleanup(release) // before the cluster closes: a held FSM blocks Raft's shutdown
	lag.J.SetApplyWait(t, 200*time.Millisecond)

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
	lag.J.SetApplyWait(t, 2*time.Second)
	if n := inspectOn(t, lag, "late"); n.GetHardware().GetBmcSerial() != "SN-LATE" {
		t.Fatalf("%s has %v once it applies", lag.Cfg.NodeID, n)
	}
}

// A write the leader acknowledged is seen through the next leader from
// the first moment of its term. The leader's Raft dies as in a crash right
// after it acknowledges a registration (the followers may not have heard
// yet that it committed, so the new leader's commit index may be below
// it), while reads and enrollments go to both survivors through the
// election: each answer shows the write or is a retryable refusal, never
// NOT_FOUND or NODE_NOT_ENROLLED from before it. (With the read index
// taken as VerifyLeader then CommitIndex, this failed two runs in five.)
func TestNewLeaderSeesTheOldLeadersAcknowledgedWrite(t *testing.T) {
	c := startCluster(t, 3, frozenClock())
	leader := c.Leader(t)
	type survivor struct {
		h      *journaltest.Harness
		admin  pactv1.AdminServiceClient
		enroll pactv1.EnrollmentServiceClient
	}
	var survivors []survivor
	for i, h := range c.Nodes {
		if i != leader {
			survivors = append(survivors, survivor{h: h, admin: h.AdminClient(t), enroll: pactv1.NewEnrollmentServiceClient(h.Dial(t, nil))})
		}
	}
	key := journaltest.NewKey(t)
	c.Nodes[leader].Register(t, "acked", "SN-ACKED", mac(1))
	if err := c.Nodes[leader].J.KillRaft(t); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	retried := map[string]int{}
	// try calls op until it succeeds want times (within 30 s, on its own
	// goroutine: polltest.Within); a final refusal fails the test, any
	// other error is retried.
	try := func(name string, want int, op func(ctx context.Context) error) {
		defer wg.Done()
		ok := 0
		if !polltest.Within(30*time.Second, time.Millisecond, func() bool {
			for ok < want {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := op(ctx)
				cancel()
				if err == nil {
					ok++
					continue
				}
				if pe := apierr.FromError(err); pe.Final() {
					t.Errorf("%s: final %v: the write the old leader acknowledged is missing", name, err)
					return true
				}
				mu.Lock()
				retried[name]++
				mu.Unlock()
				return false
			}
			return true
		}) {
			t.Errorf("%s: %d answers with the write within 30 s, want %d", name, ok, want)
		}
	}
	for _, s := range survivors {
		wg.Add(2)
		go try("inspect on "+s.h.Cfg.NodeID, 20, func(ctx context.Context) error {
			_, err := s.admin.InspectNode(ctx, &pactv1.InspectNodeRequest{NodeId: "acked"})
			return err
		})
		go try("enroll on "+s.h.Cfg.NodeID, 1, func(ctx context.Context) error {
			// The same key each time: after the first success, a retry.
			_, err := s.enroll.Enroll(ctx, &pactv1.EnrollRequest{Hardware: hw("SN-ACKED", mac(1)), CsrDer: key.CSR})
			return err
		})
	}
	wg.Wait()
	t.Logf("retryable refusals through the election: %v", retried)
}
