package snapfile_test

import (
	"bytes"
	"testing"

	"github.com/pact-hpc/pact/internal/snapfile"
)

// FuzzReadSnapshotFile feeds arbitrary bytes to Read: it must never panic,
// and a file it accepts carries the state its header announces. (Moved
// from raftfsm with the format; raftfsm's FuzzRestore holds CheckState to
// Restore, which share ReadState's rules.)
func FuzzReadSnapshotFile(f *testing.F) {
	f.Add([]byte("PACTSNAP\x00\x00\x00\x02\x08\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, state, _, err := snapfile.Read(bytes.NewReader(data))
		if err == nil && (h == nil || uint64(len(state)) != h.GetSize()) {
			t.Fatalf("accepted a file whose state does not match its header")
		}
	})
}
