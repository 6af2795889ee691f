// Package dirowner keeps what a command run as root creates in a
// directory that belongs to another user that user's.
//
// The journal's data directory belongs to the user the journal runs as
// (pact, under the packaged unit). An operator who runs pact-journal
// recover, restore or init as root, as most runbooks are followed, would
// otherwise leave root-owned files there (snapshots, Raft stores, the
// quorum id), which the journal then cannot open: it fails at its next
// start. A Keeper records the directory's owner and what the directory
// holds before the command writes; its Chown gives every file and
// directory created since to that owner, and touches nothing that was
// there before.
//
// The walk and every chown go through an os.Root opened on the
// directory, so a symbolic link placed in it (by its owner, say) never
// leads the chown outside it, and links themselves are changed, never
// what they point to.
package dirowner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// ErrChown wraps a failure to give created files to the directory's owner.
var ErrChown = errors.New("cannot give the files created to the directory's owner")

// Keeper restores a directory's ownership of what a command run as root
// creates in it. A nil *Keeper does nothing: the process is not root, or
// the directory belongs to root.
type Keeper struct {
	dir      string
	uid, gid int
	// created are the directories from the nearest existing parent down
	// to dir that did not exist when Keep ran.
	created []string
	// before is every entry under dir when Keep ran, by path relative to
	// dir, with its inode.
	before map[string]uint64
}

// Keep records who owns dir (or, when dir does not exist yet, its nearest
// existing parent) and what dir holds now. It returns nil when there will
// be nothing to give back: the effective user is not root, or the owner is.
func Keep(dir string) (*Keeper, error) {
	if os.Geteuid() != 0 || dir == "" {
		return nil, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	k := &Keeper{dir: abs, before: map[string]uint64{}}
	base := abs
	for {
		fi, err := os.Stat(base)
		if err == nil {
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return nil, nil
			}
			k.uid, k.gid = int(st.Uid), int(st.Gid)
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		k.created = append([]string{base}, k.created...)
		parent := filepath.Dir(base)
		if parent == base {
			return nil, nil
		}
		base = parent
	}
	if k.uid == 0 {
		return nil, nil
	}
	if len(k.created) > 0 {
		return k, nil // dir is new: everything in it will be
	}
	err = walk(abs, func(rel string, ino uint64, _ int) error {
		k.before[rel] = ino
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", abs, err)
	}
	return k, nil
}

// Owner names the directory's owner: "pact (uid 998)", or "uid 65534"
// when the uid has no name.
func (k *Keeper) Owner() string {
	if k == nil {
		return ""
	}
	id := strconv.Itoa(k.uid)
	if u, err := user.LookupId(id); err == nil && u.Username != "" {
		return u.Username + " (uid " + id + ")"
	}
	return "uid " + id
}

// Chown gives every file, directory and link root created under the
// directory since Keep (those owned by root that were not there then, or
// are another file now) to the directory's owner and group, and returns
// how many it changed. On a nil Keeper it does nothing.
func (k *Keeper) Chown() (int, error) {
	if k == nil {
		return 0, nil
	}
	n := 0
	for _, d := range k.created {
		fi, err := os.Lstat(d)
		if errors.Is(err, fs.ErrNotExist) {
			return n, nil // the command made nothing
		}
		if err != nil {
			return n, k.wrap(err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 0 && fi.IsDir() {
			if err := os.Lchown(d, k.uid, k.gid); err != nil {
				return n, k.wrap(err)
			}
			n++
		}
	}
	r, err := os.OpenRoot(k.dir)
	if err != nil {
		return n, k.wrap(err)
	}
	defer r.Close()
	err = walk(k.dir, func(rel string, ino uint64, uid int) error {
		if uid != 0 {
			return nil
		}
		if old, ok := k.before[rel]; ok && old == ino {
			return nil // root's before the command ran: left as it was
		}
		if err := r.Lchown(rel, k.uid, k.gid); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return n, k.wrap(err)
	}
	return n, nil
}

func (k *Keeper) wrap(err error) error {
	return fmt.Errorf("%w %s: %w; give them back with: chown -R %d:%d %s (or run the command as that user: sudo -u USER ...)",
		ErrChown, k.Owner(), err, k.uid, k.gid, k.dir)
}

// walk calls fn for dir itself (".") and every entry under it, by path
// relative to dir, without following symbolic links out of it.
func walk(dir string, fn func(rel string, ino uint64, uid int) error) error {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	return fs.WalkDir(r.FS(), ".", func(rel string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := r.Lstat(rel)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		return fn(rel, st.Ino, int(st.Uid))
	})
}
