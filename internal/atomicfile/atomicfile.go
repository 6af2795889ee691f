// Package atomicfile is pact's one way to write a file: atomically (a
// reader sees the old content or the new, never part of either, and a
// failed write leaves nothing behind) and durably (once a write returns
// nil, the content and its name survive a crash).
//
// Every write goes to a temporary file in the destination's directory,
// created 0600 and given its final mode before a byte is written (a key is
// never readable by anyone else, not even for a moment). The temporary
// file is synced and closed, then renamed over the destination (Replace)
// or linked to it, refusing an existing file (Link), and the directory is
// synced so the new name is durable too. The mode is set explicitly, so
// the umask does not narrow it.
//
// Ownership is the caller's: the file belongs to the writing process, as
// any file it creates. internal/dirowner gives it to the directory's
// owner where a command run as root must.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// syncDir makes a rename or link in dir durable. A variable so tests can
// see it called.
var syncDir = func(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	// A file system that cannot sync a directory (some network and FUSE
	// ones) has nothing more to offer: the rename is as durable as it gets.
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		return nil
	}
	return err
}

// WriteFile replaces path with data, of mode perm.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, (*Pending).Replace)
}

// WriteNew writes data to path, of mode perm, refusing to replace an
// existing file: the error then wraps fs.ErrExist and nothing is written.
func WriteNew(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, (*Pending).Link)
}

func write(path string, data []byte, perm fs.FileMode, commit func(*Pending) error) error {
	p, err := Create(path, perm)
	if err != nil {
		return err
	}
	defer p.Cleanup()
	if _, err := p.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return commit(p)
}

// Pending is a file being written, to be given its name by Replace or
// Link. Until then it is a temporary file no reader looks for; Cleanup
// removes it if neither was called or either failed.
type Pending struct {
	*os.File
	path string
	done bool
}

// Create starts writing a file to be named path, of mode perm. The caller
// writes through the embedded *os.File, then calls Replace or Link, and
// defers Cleanup.
func Create(path string, perm fs.FileMode) (*Pending, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &Pending{File: f, path: path}, nil
}

// Replace syncs and closes the file and renames it over its destination.
func (p *Pending) Replace() error {
	return p.commit(func() error { return os.Rename(p.Name(), p.path) })
}

// Link syncs and closes the file and gives it its name, refusing to
// replace an existing file (the error wraps fs.ErrExist).
func (p *Pending) Link() error {
	return p.commit(func() error {
		if err := os.Link(p.Name(), p.path); err != nil {
			return err
		}
		// The content has its name; the temporary one goes (a leftover
		// would be a dot file of the same content, nothing worse).
		_ = os.Remove(p.Name())
		return nil
	})
}

func (p *Pending) commit(name func() error) error {
	if p.done {
		return fmt.Errorf("write %s: already written or cleaned up", p.path)
	}
	if err := p.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", p.path, err)
	}
	if err := p.Close(); err != nil {
		return fmt.Errorf("write %s: %w", p.path, err)
	}
	if err := name(); err != nil {
		var le *os.LinkError
		if errors.As(err, &le) {
			err = le.Err // the temporary name means nothing to a reader
		}
		return fmt.Errorf("write %s: %w", p.path, err)
	}
	p.done = true
	if err := syncDir(filepath.Dir(p.path)); err != nil {
		return fmt.Errorf("sync the directory of %s: %w", p.path, err)
	}
	return nil
}

// Cleanup closes and removes the temporary file unless Replace or Link
// named it. It is safe to defer, and to call more than once.
func (p *Pending) Cleanup() {
	if p.done {
		return
	}
	p.done = true
	_ = p.Close()
	_ = os.Remove(p.Name())
}
