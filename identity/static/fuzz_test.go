package static_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/identity/static"
)

// FuzzParse feeds Parse what could be in the bootstrap files of a node image
// someone else built. Parse must never panic; it either fails with
// ErrBadFiles or returns a static identity whose key belongs to its leaf.
func FuzzParse(f *testing.F) {
	ca := identitytest.NewCA("pact.local", t0)
	boot := ca.Issue(identity.SourceStatic, bootID, t0, t0.Add(time.Hour))
	other := ca.Issue(identity.SourceStatic, "", t0, t0.Add(time.Hour))
	cert, key, bundle := identitytest.CertsPEM(boot.Chain...), identitytest.KeyPEM(boot.Key), identitytest.CertsPEM(ca.Cert)
	f.Add(cert, key, bundle)
	f.Add(cert, key, []byte(nil))
	f.Add(append(cert, key...), append(key, cert...), append(bundle, bundle...))
	f.Add(cert, identitytest.KeyPEM(other.Key), bundle)
	f.Add(key, cert, key)
	f.Add(cert[:len(cert)/2], key[:len(key)/2], bundle[10:])

	f.Fuzz(func(t *testing.T, certPEM, keyPEM, bundlePEM []byte) {
		id, err := static.Parse(certPEM, keyPEM, bundlePEM)
		if err != nil {
			if id != nil {
				t.Fatalf("Parse returned an identity and error %v", err)
			}
			if !errors.Is(err, identity.ErrBadFiles) {
				t.Fatalf("error %v does not wrap ErrBadFiles", err)
			}
			return
		}
		if id.Source != identity.SourceStatic || len(id.Chain) == 0 || id.Key == nil {
			t.Fatalf("Parse returned %v", id)
		}
		if !identity.KeyMatches(id.Chain[0], id.Key) {
			t.Fatal("accepted a key that does not belong to the leaf")
		}
		if len(bundlePEM) > 0 && len(id.Bundle) == 0 {
			t.Fatal("accepted a bundle with no certificate")
		}
	})
}
