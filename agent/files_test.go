package agent

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
)

// A reader of the identity directory sees the old files or the new ones,
// never a partial file, and nothing else is left there.
func TestIdentityFilesAreReplacedAtomically(t *testing.T) {
	now := time.Now()
	ca := identitytest.NewCA("pact.local", now)
	ids := []*identity.Identity{
		ca.Issue(identity.SourceJournal, "spiffe://pact.local/pact-agent/n1", now, now.Add(time.Hour)),
		ca.Issue(identity.SourceJournal, "spiffe://pact.local/pact-agent/n1", now, now.Add(2*time.Hour)),
	}
	// Make the files big enough that a torn write would show.
	var bundle []*x509.Certificate
	for range 50 {
		bundle = append(bundle, identitytest.NewCA("pact.local", now).Cert)
	}
	w := identityFiles{dir: t.TempDir()}
	if err := w.write(ids[0], bundle); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{string(certsPEM(ids[0].Chain)): true, string(certsPEM(ids[1].Chain)): true}

	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads atomic.Int64
	errs := make(chan error, 1)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				chain, err1 := os.ReadFile(filepath.Join(w.dir, ChainFile))
				b, err2 := os.ReadFile(filepath.Join(w.dir, BundleFile))
				reads.Add(1)
				var err error
				switch {
				case err1 != nil || err2 != nil:
					err = errors.Join(err1, err2)
				case !want[string(chain)]:
					err = errors.New("chain.pem holds neither identity's chain: a partial write was visible")
				case !bytes.Equal(b, certsPEM(bundle)):
					err = errors.New("bundle.pem is not the bundle: a partial write was visible")
				default:
					continue
				}
				select {
				case errs <- err:
				default:
				}
				return
			}
		}()
	}
	for i := range 100 {
		if err := w.write(ids[i%2], bundle); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d reads during 100 replacements", reads.Load())
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		if fi, _ := e.Info(); fi.Mode().Perm() != 0o644 {
			t.Errorf("%s has mode %v, want 0644", e.Name(), fi.Mode().Perm())
		}
	}
	if strings.Join(names, " ") != "bundle.pem chain.pem" {
		t.Errorf("identity dir holds %v, want bundle.pem and chain.pem only", names)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func certPool(certs []*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}
