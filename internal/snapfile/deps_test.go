package snapfile_test

import (
	"testing"

	"github.com/pact-hpc/pact/internal/deptest"
)

// The snapshot format is a leaf the CLI links: it must not pull in what
// only the journal may carry.
func TestSnapfileIsALeaf(t *testing.T) {
	deptest.Forbid(t, []string{"github.com/pact-hpc/pact/internal/snapfile"}, deptest.JournalOnly...)
}
