package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/integration/launch"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/polltest"
)

// secretForms is every way a private key could be written down: the raw
// scalar, in hex and base64; the PKCS#8 and SEC1 encodings raw and in
// base64 (a PEM body is base64 in 64-character lines: a line of it is
// enough to find the key).
func secretForms(t *testing.T, name, path string) map[string][]byte {
	t.Helper()
	signer, err := keystore.ReadPEMKey(path)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	k, ok := signer.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("%s: not an ECDSA key", name)
	}
	d, err := k.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	forms := map[string][]byte{
		name + " scalar":           d,
		name + " scalar hex":       []byte(hex.EncodeToString(d)),
		name + " scalar HEX":       []byte(strings.ToUpper(hex.EncodeToString(d))),
		name + " scalar base64":    []byte(base64.RawStdEncoding.EncodeToString(d)[:40]),
		name + " scalar base64url": []byte(base64.RawURLEncoding.EncodeToString(d)[:40]),
		name + " PKCS#8":           pkcs8,
		name + " SEC1":             sec1,
	}
	// The second 64-character line of a PEM body holds key bytes in
	// either encoding (the first is mostly the algorithm's header).
	for enc, der := range map[string][]byte{"PKCS#8": pkcs8, "SEC1": sec1} {
		b64 := base64.StdEncoding.EncodeToString(der)
		forms[name+" "+enc+" PEM line"] = []byte(b64[64:128])
	}
	return forms
}

// findSecrets reports which forms occur in the files under each root.
func findSecrets(t *testing.T, forms map[string][]byte, roots ...string) []string {
	t.Helper()
	var found []string
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !d.Type().IsRegular() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for what, form := range forms {
				if bytes.Contains(data, form) {
					found = append(found, fmt.Sprintf("%s in %s", what, path))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return found
}

// TestNoCAKeyOnJournalDisks runs a quorum in the production layout
// (docs/ceremony.md), makes it do everything that signs or writes —
// enrollments through every journal, an operator credential issued online,
// a re-key an operator forces, Raft snapshots, a restart that replays the
// log — stops it, and searches every file of every journal's data
// directory and every journal's log for the private key of the domain root
// and of each journal CA, in every encoding a key is written in. It finds
// none. The search is shown to work: each key is found in its own key file.
//
// Here the journal CA keys are 0600 files outside the data directories
// (the documented weaker choice; docs/ca-keys.md): a TPM key could not be
// searched for, because the TPM never lets its private part out — the
// blob on disk is that part encrypted under the TPM's storage key, which
// never leaves the chip (internal/keystore: TestTPMBlobHoldsNoPrivateKey).
func TestNoCAKeyOnJournalDisks(t *testing.T) {
	skipShort(t)
	q := startQuorumWith(t, 3, "--raft-snapshot-threshold", "16", "--raft-snapshot-interval", "1s")
	forms := secretForms(t, "root key", filepath.Join(launch.RootDir(q.dir), "ca-key.pem"))
	keyFiles := []string{filepath.Join(launch.RootDir(q.dir), "ca-key.pem")}
	for _, m := range q.members {
		for what, f := range secretForms(t, m.id+" journal CA key", q.pq.JournalCAKey(m.id)) {
			forms[what] = f
		}
		keyFiles = append(keyFiles, q.pq.JournalCAKey(m.id))
	}

	nodes := inventory("keys", 40)
	q.registerBatch(nodes)
	e := newEnroller(t, filepath.Join(q.dir, "ca.pem"), q.addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, n := range nodes {
		if a := e.enroll(ctx, n); a.err != nil {
			t.Fatalf("enroll %s: %v", n.id, a.err)
		}
	}
	out := t.TempDir()
	if stdout, stderr, code := runPact(t, q.env(q.addrs()...), "admin", "issue", "bob", "--role", "viewer",
		"--cert-out", filepath.Join(out, "bob.pem"), "--key-out", filepath.Join(out, "bob-key.pem")); code != 0 {
		t.Fatalf("pact admin issue: exit %d\n%s%s", code, stdout, stderr)
	}
	if stdout, stderr, code := runPact(t, q.env(q.addrs()...), "journal", "retire-intermediate", "j1", "--grace", "1m"); code != 0 {
		t.Fatalf("pact journal retire-intermediate: exit %d\n%s%s", code, stdout, stderr)
	}
	// j1 re-keys under its journal CA: its next intermediate is signed
	// with the journal CA key again.
	var tail polltest.Last
	polltest.Until(t, 30*time.Second, 100*time.Millisecond, func() bool {
		tail.Value = launch.Tail(q.output(0), 20)
		return strings.Contains(q.output(0), "intermediate rotated")
	}, "j1 did not re-key:\n%v", &tail)
	// A restart replays the log and the snapshots.
	if err := q.pq.Stop(1); err != nil {
		t.Fatal(err)
	}
	q.launch(1)
	q.waitServing(1)
	var searched []string
	for i := range q.members {
		if err := q.pq.Stop(i); err != nil {
			t.Fatal(err)
		}
		searched = append(searched, q.pq.DataDir(i), q.pq.LogPath(i))
	}
	snapshots := 0
	for i := range q.members {
		matches, _ := filepath.Glob(filepath.Join(q.pq.DataDir(i), "snapshots", "*", "state.bin"))
		snapshots += len(matches)
	}
	if snapshots == 0 {
		t.Errorf("no journal wrote a Raft snapshot: the search would not have covered one")
	}
	if found := findSecrets(t, forms, searched...); len(found) > 0 {
		t.Errorf("private CA key material on a journal's disk or in its log:\n%s", strings.Join(found, "\n"))
	}
	// The search finds what it looks for: every key in its own file.
	for _, f := range keyFiles {
		if len(findSecrets(t, forms, f)) == 0 {
			t.Errorf("the search found nothing in the key file %s: it could not have found the key elsewhere", f)
		}
	}
	t.Logf("searched %d data directories and logs for %d forms of %d keys", len(searched), len(forms), len(keyFiles))
}
