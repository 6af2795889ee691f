package agent

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/journaltest"
)

func TestKeyOutRefusedOffTmpfs(t *testing.T) {
	dir := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if int64(st.Type) == tmpfsMagic {
		t.Skipf("the test temp dir %s is itself on a tmpfs; cannot test the refusal here", dir)
	}
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.KeyOut = filepath.Join(dir, "key.pem")
	_, err := New(cfg)
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "not on a tmpfs") {
		t.Fatalf("New = %v, want a refusal saying the path is not on a tmpfs", err)
	}
	// pact-agent --key-out on a disk: agent/agentmain's TestKeyOutOffTmpfs.
	if _, err := os.Stat(cfg.KeyOut); !os.IsNotExist(err) {
		t.Fatalf("the key was written to a disk: %v", err)
	}
}

// With --identity-dir and --key-out on a tmpfs, the agent hands its live
// identity to other services: the chain, the bundle, and the key (0600).
func TestIdentityFilesFromTheAgent(t *testing.T) {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || int64(st.Type) != tmpfsMagic {
		t.Skip("no tmpfs at /dev/shm for --key-out; the refusal is tested in TestKeyOutRefusedOffTmpfs")
	}
	shm, err := os.MkdirTemp("/dev/shm", "pact-agent-test-")
	if err != nil {
		t.Skipf("cannot use /dev/shm: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(shm) })

	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.IdentityDir = filepath.Join(t.TempDir(), "identity") // created by the agent
	cfg.KeyOut = filepath.Join(shm, "key.pem")
	r := runAgent(t, cfg)
	eventually(t, "the identity files are written", func() bool {
		_, err := os.Stat(cfg.KeyOut)
		return r.Status().Ready && err == nil
	})
	id := r.rot.Active().Identity()

	chain, err := pki.ParseCertsPEM(mustRead(t, filepath.Join(cfg.IdentityDir, ChainFile)))
	if err != nil || len(chain) != len(id.Chain) || !chain[0].Equal(id.Chain[0]) {
		t.Fatalf("chain.pem does not hold the live chain (%v)", err)
	}
	bundle, err := pki.ParseCertsPEM(mustRead(t, filepath.Join(cfg.IdentityDir, BundleFile)))
	if err != nil || len(bundle) == 0 {
		t.Fatalf("bundle.pem: %v", err)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: certPool(bundle), Intermediates: certPool(chain[1:]), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("chain.pem does not verify against bundle.pem: %v", err)
	}
	fi, err := os.Stat(cfg.KeyOut)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key.pem: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	block, _ := pem.Decode(mustRead(t, cfg.KeyOut))
	if block == nil || block.Type != "PRIVATE KEY" {
		t.Fatal("key.pem holds no PKCS#8 key")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if signer, ok := key.(crypto.Signer); !ok || !identity.KeyMatches(id.Chain[0], signer) {
		t.Fatal("key.pem is not the live identity's key")
	}
}
