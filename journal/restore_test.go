package journal_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/snapfile"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// restoreRoot is a domain root made by pact-journal init's code.
type restoreRoot struct {
	dir, certFile string
	auth          *ca.KeyFileAuthority
}

func newRestoreRoot(t *testing.T, domain string) restoreRoot {
	t.Helper()
	dir := t.TempDir()
	if _, err := ca.InitDev(dir, domain, time.Now()); err != nil {
		t.Fatal(err)
	}
	auth, err := ca.LoadKeyFileAuthority(filepath.Join(dir, ca.RootCertFile), filepath.Join(dir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return restoreRoot{dir: dir, certFile: filepath.Join(dir, ca.RootCertFile), auth: auth}
}

// snapshotState is the state of a registry in which one journal, under
// root (nil: none), published its intermediate.
func snapshotState(t *testing.T, root *restoreRoot) []byte {
	t.Helper()
	fsm := raftfsm.New()
	if root != nil {
		cfg := ca.DefaultConfig()
		cfg.Upstream, cfg.JournalID, cfg.Clock = root.auth, "j1", clock.Real{}
		authority, err := ca.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		inter := authority.Intermediate()
		cmd := &pactv1.Command{Actor: "journal/j1", AtUnixNano: time.Now().UnixNano(), Op: &pactv1.Command_PublishIntermediate{PublishIntermediate: &pactv1.PublishIntermediateOp{
			Intermediate: &pactv1.Intermediate{JournalId: "j1", Serial: pki.SerialHex(inter.SerialNumber), Der: inter.Raw, NotAfterUnix: inter.NotAfter.Unix()},
		}}}
		data, err := raftfsm.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if res := fsm.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}).(*raftfsm.Result); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	state, _, _, err := fsm.Consistent()
	if err != nil {
		t.Fatal(err)
	}
	return state
}

func writeSnapshot(t *testing.T, h *pactv1.SnapshotHeader, state []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := snapfile.Write(&b, h, state); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "pact.snap")
	if err := os.WriteFile(f, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// Restore takes a snapshot only under the root it was taken under: by the
// fingerprint its header records, or, for a file from before headers
// recorded one, by an intermediate of the file that the root signed. Two
// roots of the same domain name are two domains. A refused file writes
// nothing.
func TestRestoreChecksTheRoot(t *testing.T) {
	a, b := newRestoreRoot(t, "pact.local"), newRestoreRoot(t, "pact.local")
	other := newRestoreRoot(t, "other.example")
	sumA := sha256.Sum256(a.auth.Root().Raw)
	signedByA, empty := snapshotState(t, &a), snapshotState(t, nil)
	withFingerprint := writeSnapshot(t, &pactv1.SnapshotHeader{Domain: "pact.local", Index: 1, Term: 1, RootSha256: sumA[:]}, signedByA)
	legacy := writeSnapshot(t, &pactv1.SnapshotHeader{Domain: "pact.local", Index: 1, Term: 1, Version: "v0.3.0"}, signedByA)
	legacyEmpty := writeSnapshot(t, &pactv1.SnapshotHeader{Domain: "pact.local", Index: 1, Term: 1}, empty)
	// A root rollover: --root-cert holds the new root and the old.
	twoRoots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(twoRoots, pki.EncodeCertsPEM(b.auth.Root().Raw, a.auth.Root().Raw), 0o644); err != nil {
		t.Fatal(err)
	}
	twoDomains := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(twoDomains, pki.EncodeCertsPEM(a.auth.Root().Raw, other.auth.Root().Raw), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, file, root string
		err              error
		check            string // RootCheck, or what the refusal says
	}{
		{"fingerprint, same root", withFingerprint, a.certFile, nil, "fingerprint"},
		{"fingerprint, another root of the same name", withFingerprint, b.certFile, journal.ErrWrongRoot, "was taken under the root with SHA-256 fingerprint " + pki.CertFingerprint(a.auth.Root())},
		{"older file, its intermediate signed by the root", legacy, a.certFile, nil, "intermediate"},
		{"older file, another root of the same name", legacy, b.certFile, journal.ErrWrongRoot, "none of its 1 journal intermediates is signed by --root-cert " + b.certFile},
		{"older file without intermediates", legacyEmpty, a.certFile, journal.ErrWrongRoot, "holds no journal intermediate"},
		{"another domain", withFingerprint, other.certFile, journal.ErrWrongDomain, "holds domain pact.local"},
		{"no root file", withFingerprint, filepath.Join(t.TempDir(), "ca.pem"), journal.ErrRootCert, "no such file"},
		{"fingerprint, the second of two roots", withFingerprint, twoRoots, nil, "fingerprint"},
		{"older file, its intermediate signed by the second of two roots", legacy, twoRoots, nil, "intermediate"},
		{"roots of two domains", withFingerprint, twoDomains, journal.ErrRootCert, "the roots name two trust domains"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			res, err := journal.Restore(journal.RestoreConfig{Snapshot: tt.file, DataDir: dir, NodeID: "r1",
				InitialCluster: []journal.Peer{{ID: "r1", RaftAddr: "127.0.0.1:1"}}, RootCertFile: tt.root})
			if tt.err == nil {
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(res.RootCheck, tt.check) || res.RootFingerprint != pki.CertFingerprint(a.auth.Root()) {
					t.Errorf("restored, matched by %q with fingerprint %s; want %q and %s", res.RootCheck, res.RootFingerprint, tt.check, pki.CertFingerprint(a.auth.Root()))
				}
				return
			}
			if !errors.Is(err, tt.err) || !strings.Contains(err.Error(), tt.check) {
				t.Fatalf("restore: %v\nwant %v saying %q", err, tt.err, tt.check)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused restore created %s", dir)
			}
		})
	}
}
