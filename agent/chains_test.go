package agent

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/pki"
)

// What a journal returns at Enroll or RenewCert is taken when it chains to
// one of the roots of --ca-file (two during a rollover) in a shape the
// journals accept: [leaf, intermediate, journal CA] or legacy [leaf,
// intermediate].
func TestJournalIdentityChains(t *testing.T) {
	const domain = "site.example"
	root, root2 := chaintest.NewRoot(domain), chaintest.NewRoot(domain)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pki.EncodeCertsPEM(root.Cert.Raw, root2.Cert.Raw), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, roots, err := pki.LoadCertPool(caFile)
	if err != nil || len(roots) != 2 {
		t.Fatalf("LoadCertPool of two roots: %d roots, %v", len(roots), err)
	}
	jca := root2.JournalCA("j1", chaintest.Names{})
	inter := jca.Intermediate("j1", chaintest.Names{})
	legacy := root.Intermediate("j0", chaintest.Names{})
	bundle := [][]byte{root.Cert.Raw, root2.Cert.Raw, jca.Cert.Raw, inter.Cert.Raw, legacy.Cert.Raw}
	for _, tc := range []struct {
		name string
		leaf *chaintest.Leaf
		want error // nil: taken
	}{
		{"[leaf, intermediate, journal CA] under the second root", inter.Agent("n1"), nil},
		{"legacy [leaf, intermediate] under the first root", legacy.Agent("n1"), nil},
		{"[leaf, journal CA]", jca.Agent("n1"), caprofile.ErrChainShape},
		{"[leaf] signed by the root", root.Agent("n1"), caprofile.ErrChainShape},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, who, err := journalIdentity(tc.leaf.Key, pool, tc.leaf.DER(), bundle, time.Now(), nil)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("got %v, want %v", err, tc.want)
			case tc.want == nil && (who.Name != "n1" || len(id.Chain) != len(tc.leaf.Chain) || len(id.Bundle) != len(bundle)):
				t.Fatalf("identity of %s with %d certificates and a bundle of %d", who.Name, len(id.Chain), len(id.Bundle))
			}
		})
	}
	// The journal CA is needed in the chain: the roots alone do not reach
	// the intermediate.
	leaf := inter.Agent("n1")
	if _, _, err := journalIdentity(leaf.Key, pool, leaf.DER()[:2], nil, time.Now(), nil); err == nil {
		t.Error("took [leaf, intermediate] whose intermediate a journal CA signed, without the journal CA")
	}
	// A root file of one root does not verify what the other signed.
	one := x509.NewCertPool()
	one.AddCert(root.Cert)
	if _, _, err := journalIdentity(leaf.Key, one, leaf.DER(), nil, time.Now(), nil); err == nil {
		t.Error("took a chain to a root not in --ca-file")
	}
}
