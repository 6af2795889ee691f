package v1rpc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pact-hpc/pact/journal/raftnode"
)

// A journal id this leader removed a moment ago is added again only once
// hashicorp/raft's replication to the journal it was can make no more
// attempts; a caller whose deadline ends first is told when to re-run.
func TestAddAfterRemovalWaitsOutTheStaleReplication(t *testing.T) {
	var r removals
	now := time.Now()
	if err := r.awaitQuiet(context.Background(), "j4", "10.0.0.4:7500", now); err != nil {
		t.Fatalf("never removed: %v", err)
	}
	r.noteRemoved("j4", "10.0.0.4:7500", now.Add(-staleReplicationQuiet+50*time.Millisecond))
	start := time.Now()
	if err := r.awaitQuiet(context.Background(), "j4", "10.0.0.4:7500", now); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 40*time.Millisecond {
		t.Errorf("added again after %v, within the stale replication's reach", waited)
	}
	r.noteRemoved("j4", "10.0.0.4:7500", now)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := r.awaitQuiet(ctx, "j4", "10.0.0.4:7500", now); !errors.Is(err, raftnode.ErrMembership) {
		t.Errorf("deadline before the quiet time: %v, want a membership refusal saying when", err)
	}
	if err := r.awaitQuiet(context.Background(), "j5", "10.0.0.4:7500", now); err != nil {
		t.Errorf("another id waits: %v", err)
	}
	if err := r.awaitQuiet(context.Background(), "j4", "10.0.0.9:7500", now); err != nil {
		t.Errorf("the same id at another address waits: %v", err)
	}
}
