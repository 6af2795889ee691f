package dirowner_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pact-hpc/pact/internal/dirowner"
)

// nobody is the uid (and gid) the tests give their directories: not root,
// present on every Linux system.
const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("gives files away with chown, which needs root; run the tests as root to cover it")
	}
}

func owner(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

// What root creates in a directory of another user becomes that user's;
// what root owned there before stays root's; a link is changed, never
// what it points to outside the directory.
func TestChownGivesCreatedFilesToTheOwner(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	dir := filepath.Join(top, "data")
	outside := filepath.Join(top, "outside")
	for _, d := range []string{dir, filepath.Join(dir, "old")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(outside, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rootsBefore := filepath.Join(dir, "old", "roots-before")
	if err := os.WriteFile(rootsBefore, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	replaced := filepath.Join(dir, "replaced")
	if err := os.WriteFile(replaced, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := dirowner.Keep(dir)
	if err != nil || k == nil {
		t.Fatalf("Keep: %v, %v", k, err)
	}
	// What the command does: new files and directories, a file replaced
	// by a rename (a new inode), a link to a file outside.
	newFiles := []string{filepath.Join(dir, "raft.db"), filepath.Join(dir, "snapshots", "1-2-3", "state.bin"), filepath.Join(dir, "old", "new")}
	if err := os.MkdirAll(filepath.Join(dir, "snapshots", "1-2-3"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range newFiles {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "replaced.tmp")
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, replaced); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	n, err := k.Chown()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(newFiles, replaced, link, filepath.Join(dir, "snapshots"), filepath.Join(dir, "snapshots", "1-2-3")) {
		if got := owner(t, p); got != nobody {
			t.Errorf("%s: owned by uid %d, want %d", p, got, nobody)
		}
	}
	if n != 7 {
		t.Errorf("Chown changed %d entries, want 7", n)
	}
	if got := owner(t, rootsBefore); got != 0 {
		t.Errorf("a file root owned before the command: now uid %d", got)
	}
	if got := owner(t, outside); got != 0 {
		t.Errorf("the file a link points to, outside the directory: now uid %d", got)
	}
}

// A directory that does not exist yet (pact-journal restore makes it) is
// given, with the parents made for it, to the owner of its nearest
// existing parent.
func TestChownNewDirectoryTakesItsParentsOwner(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	if err := os.Chown(top, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(top, "a", "data")
	k, err := dirowner.Keep(dir)
	if err != nil || k == nil {
		t.Fatalf("Keep: %v, %v", k, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Chown(); err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(filepath.Join(top, "a"), func(p string, _ fs.DirEntry, err error) error {
		if err == nil && owner(t, p) != nobody {
			t.Errorf("%s: owned by uid %d", p, owner(t, p))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Nothing to give back: a directory root owns.
func TestKeepRootsOwnDirectory(t *testing.T) {
	needRoot(t)
	k, err := dirowner.Keep(t.TempDir())
	if err != nil || k != nil {
		t.Fatalf("Keep of root's directory: %v, %v; want nil, nil", k, err)
	}
	if n, err := k.Chown(); n != 0 || err != nil {
		t.Fatalf("nil Keeper: %d, %v", n, err)
	}
}

// A failure names the owner and the chown that repairs it.
func TestChownFailureSaysHowToRepair(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	k, err := dirowner.Keep(dir)
	if err != nil || k == nil {
		t.Fatalf("Keep: %v, %v", k, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	_, err = k.Chown()
	if !errors.Is(err, dirowner.ErrChown) {
		t.Fatalf("Chown of a directory gone: %v", err)
	}
	if want := "chown -R 65534:65534 " + dir; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}
