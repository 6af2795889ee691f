package journal

import (
	"slices"
	"testing"

	"github.com/pact-hpc/pact/raftfsm"
)

// The claim log answers what changed since a revision, in pages that end
// where an index ends, and a full listing for a revision it no longer has
// (or never had).
func TestClaimLogIncremental(t *testing.T) {
	var l claimLog
	l.note(raftfsm.Event{Index: 5, NodeIDs: []string{"a"}}, 0)
	l.note(raftfsm.Event{Index: 6, NodeIDs: []string{"b", "c"}}, 0)
	l.note(raftfsm.Event{Index: 7, NodeIDs: []string{"a"}}, 0)
	l.note(raftfsm.Event{Index: 9}, 0)

	nodes, next, more, full := l.since(4, 10)
	if !slices.Equal(nodes, []string{"a", "b", "c"}) || next != 9 || more || full {
		t.Fatalf("since 4: %v next %d more %v full %v", nodes, next, more, full)
	}
	nodes, next, more, _ = l.since(4, 1)
	if !slices.Equal(nodes, []string{"a"}) || next != 5 || !more {
		t.Fatalf("since 4, one a page: %v next %d more %v", nodes, next, more)
	}
	// A page never splits an index: b and c come together.
	nodes, next, more, _ = l.since(5, 1)
	if !slices.Equal(nodes, []string{"b", "c"}) || next != 6 || !more {
		t.Fatalf("since 5, one a page: %v next %d more %v", nodes, next, more)
	}
	if nodes, next, more, _ = l.since(9, 10); len(nodes) != 0 || next != 9 || more {
		t.Fatalf("since 9: %v next %d more %v", nodes, next, more)
	}
	if _, _, _, full = l.since(10, 10); !full {
		t.Fatal("a revision ahead of the log is not answered in full")
	}
	// A restore forgets what changed before it.
	l.note(raftfsm.Event{Index: 20}, 1)
	if _, _, _, full = l.since(9, 10); !full {
		t.Fatal("a revision from before a restore is not answered in full")
	}
}
