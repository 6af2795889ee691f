package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// watchSyncDir records the directories synced while the test runs.
func watchSyncDir(t *testing.T) *[]string {
	t.Helper()
	var synced []string
	orig := syncDir
	syncDir = func(dir string) error {
		synced = append(synced, dir)
		return orig(dir)
	}
	t.Cleanup(func() { syncDir = orig })
	return &synced
}

// entries lists dir's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestWriteFileReplacesWithItsModeAndSyncsTheDirectory(t *testing.T) {
	old := syscall.Umask(0o077) // the mode asked for is the mode given
	defer syscall.Umask(old)
	synced := watchSyncDir(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "chain.pem")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "new" {
		t.Fatalf("content = %q, %v; want new", b, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, want 0644", fi.Mode().Perm())
	}
	if !slices.Contains(*synced, dir) {
		t.Errorf("directories synced = %q, want %s among them", *synced, dir)
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"chain.pem"}) {
		t.Errorf("directory holds %q, want only chain.pem", got)
	}
}

func TestAKeyIsNeverReadableByOthers(t *testing.T) {
	dir := t.TempDir()
	p, err := Create(filepath.Join(dir, "key.pem"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Cleanup()
	fi, err := p.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("temporary file mode = %v before a byte is written, want 0600", fi.Mode().Perm())
	}
}

func TestWriteNewRefusesAnExistingFile(t *testing.T) {
	synced := watchSyncDir(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "admin.key")
	if err := WriteNew(path, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(*synced, dir) {
		t.Errorf("directories synced = %q, want %s among them", *synced, dir)
	}
	err := WriteNew(path, []byte("second"), 0o600)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second WriteNew: %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "first" {
		t.Errorf("content = %q after a refused write, want first", b)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"admin.key"}) {
		t.Errorf("directory holds %q, want only admin.key", got)
	}
}

// While a write is under way the destination holds the old content; a
// write given up (the writer's error path) leaves no trace.
func TestAPartialWriteIsNeverVisible(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bundle.pem")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, commit := range []func(*Pending) error{(*Pending).Replace, (*Pending).Link} {
		p, err := Create(path, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Write([]byte("half")); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != "old" {
			t.Errorf("content = %q during a write, want old", b)
		}
		p.Cleanup() // as WriteFile does when a write fails
		if err := commit(p); err == nil {
			t.Error("a cleaned-up file was committed")
		}
		if b, _ := os.ReadFile(path); string(b) != "old" {
			t.Errorf("content = %q, want old", b)
		}
		if got := entries(t, dir); !slices.Equal(got, []string{"bundle.pem"}) {
			t.Errorf("directory holds %q, want only bundle.pem", got)
		}
	}
}

// A write into a directory that cannot take it fails and leaves nothing.
func TestAFailedCommitLeavesNothingVisible(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "taken")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A rename over a non-empty directory fails after the content is written.
	if err := WriteFile(target, []byte("data"), 0o644); err == nil {
		t.Fatal("WriteFile over a non-empty directory succeeded")
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"taken"}) {
		t.Errorf("directory holds %q after a failed write, want only taken", got)
	}
}

func TestASyncDirFailureIsReported(t *testing.T) {
	orig := syncDir
	syncDir = func(string) error { return syscall.EIO }
	t.Cleanup(func() { syncDir = orig })
	path := filepath.Join(t.TempDir(), "marker")
	if err := WriteFile(path, []byte("x"), 0o600); !errors.Is(err, syscall.EIO) {
		t.Fatalf("WriteFile = %v, want the directory sync's EIO", err)
	}
}
