package agent

import (
	"fmt"
	"path/filepath"
	"syscall"
)

// tmpfsMagic is TMPFS_MAGIC from linux/magic.h.
const tmpfsMagic = 0x01021994

// checkKeyOut refuses a --key-out whose directory is not on a tmpfs: the
// private key may live in memory only, never on a disk.
func checkKeyOut(path string) error {
	dir := filepath.Dir(path)
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("agent: --key-out %s: cannot inspect %s: %w", path, dir, err)
	}
	if int64(st.Type) != tmpfsMagic {
		return fmt.Errorf("agent: --key-out %s: %s is not on a tmpfs (filesystem magic %#x); the private key may only be written to memory-backed storage such as /run or /dev/shm", path, dir, int64(st.Type))
	}
	return nil
}
