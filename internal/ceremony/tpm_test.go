package ceremony

import (
	"path/filepath"
	"testing"

	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/swtpmtest"
)

// A journal CA key in a (software) TPM: made at the first request, reused
// at the next, and its request signed by a root into a journal CA.
func TestNewRequestTPM(t *testing.T) {
	spec := keystore.Spec{Backend: keystore.BackendTPM, Location: filepath.Join(t.TempDir(), "j1-ca.tpmkey")}
	tpm := swtpmtest.Start(t)
	opts := keystore.Options{TPMDevice: tpm.Device}
	first, err := NewRequest("j1", spec, opts, []string{"j1", "j1.site.example"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := NewRequest("j1", spec, opts, []string{"j1", "j1.site.example"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Created || again.Created || again.Fingerprint != first.Fingerprint {
		t.Errorf("created %v then %v; same key %v", first.Created, again.Created, again.Fingerprint == first.Fingerprint)
	}
	_, root, key := newRoot(t, 0)
	if _, err := SignJournalCA(root, key, again.PEM, "j1", []string{"j1", "j1.site.example"}, nil, 0, now); err != nil {
		t.Fatal(err)
	}
}
