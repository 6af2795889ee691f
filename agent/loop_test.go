package agent

import (
	"context"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// A node with no identity to connect with (its journal certificate was
// dropped as refused, say a renewal's lost answer) whose enrollment is
// backing off must wait for that enrollment, not spin: the connect retry
// that brought it here is due, but with nothing to try it names no time to
// look again. Before the fix the step asked to be run again at once until
// the enrollment was due, and each such agent burned a core (the
// 30,000-agent renewal storm's load generator spent half its CPU there).
func TestNothingToConnectWithWaitsForTheEnrollment(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	fc := fakeclock.New(time.Now())
	cfg := agentConfig(h, fc, "SN1", mac1)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.rot.Close() })

	now := fc.Now()
	enrollAt := now.Add(10 * time.Second)
	s := loopState{
		// The stream ended a while ago (stepStreamEnd: reconnect at once),
		// and the journal identity was dropped since: nothing to try.
		connect: retry{attempt: 1, notBefore: now.Add(-time.Second)},
		// The enrollment that would bring one failed and backs off.
		enroll: retry{attempt: 1, notBefore: enrollAt},
	}
	if _, err := a.jp.Current(context.Background()); err == nil {
		t.Fatal("the agent holds a journal identity; the test needs none")
	}
	next, err := a.step(context.Background(), &s)
	if err != nil {
		t.Fatal(err)
	}
	if !next.After(now) {
		t.Fatalf("step asks to run again at %v, not after now (%v): the loop would spin until the enrollment at %v", next, now, enrollAt)
	}
	if !next.Equal(enrollAt) {
		t.Fatalf("step asks to run again at %v, want the enrollment's retry at %v", next, enrollAt)
	}
}
