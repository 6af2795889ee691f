package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// diskMB is the size of each journal's own filesystem in the disk-full
// scenario: room for a run's Raft log and snapshots, small enough to fill
// in a moment.
const diskMB = 64

// smallDisks mounts a tmpfs of diskMB on every journal's data directory
// (dir/jN) before the journals start, and returns how to unmount them.
func smallDisks(dir string, n int) (func(), error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the disk-full scenario mounts a tmpfs per journal: it needs root")
	}
	var mounted []string
	undo := func() {
		for _, m := range mounted {
			_ = exec.Command("umount", "-l", m).Run()
		}
	}
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("j%d", i+1))
		if err := os.MkdirAll(d, 0o700); err != nil {
			undo()
			return nil, err
		}
		if err := run("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0700", diskMB), "tmpfs", d); err != nil {
			undo()
			return nil, err
		}
		mounted = append(mounted, d)
	}
	return undo, nil
}

// fillDisk fills the filesystem of dir with one file until it is full
// and returns its path; removing it frees the disk again.
func fillDisk(dir string) (string, error) {
	path := filepath.Join(dir, "chaos-filler")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return path, nil
			}
			return path, err
		}
	}
}

// diskFull fills one journal's disk at a time (the leader half the time)
// for 3-6 s, then frees it.
func diskFull(e *Env) error {
	for e.sleep(e.between(2*time.Second, 4*time.Second)) {
		l, err := e.leader()
		if err != nil {
			return err
		}
		victim := l
		if e.Rng.IntN(2) == 0 {
			others := e.others(l)
			victim = others[e.Rng.IntN(len(others))]
		}
		label := e.Q.ID(victim)
		if victim == l {
			label += "(leader)"
		}
		path, err := fillDisk(filepath.Join(e.Dir, e.Q.ID(victim)))
		k := e.addFault("disk full", label)
		if err != nil {
			return err
		}
		time.Sleep(e.between(3*time.Second, 6*time.Second))
		err = os.Remove(path)
		e.heal(k)
		if err != nil {
			return err
		}
		if !e.Q.Running(victim) {
			return fmt.Errorf("%s exited while its disk was full:\n%s", e.Q.ID(victim), tail(e.Q.Log(victim), 20))
		}
	}
	return nil
}

// CheckDiskFull: a journal whose disk was full stopped writing cleanly:
// no call it answered while full (or in the second after) got an internal
// error, and it kept running (journals-identical shows it caught up).
func CheckDiskFull(recs []*Record, faults []Fault, running func(id string) bool) Check {
	c := Check{Name: InvDiskFull}
	refused := 0
	for _, f := range faults {
		if f.Kind != "disk full" {
			continue
		}
		id, _, _ := strings.Cut(f.Target, "(")
		c.Checked++
		if !running(id) {
			c.fail("%s is not running at the end", id)
		}
		to := f.Healed + int64(time.Second)
		for _, r := range recs {
			if r.Journal != id || r.Return < f.At || r.Call > to {
				continue
			}
			c.Checked++
			switch {
			case r.Out.Reason == "INTERNAL":
				c.fail("%s answered INTERNAL while its disk was full:\n    %s", id, r)
			case r.Out.Reason == "NO_LEADER":
				refused++
			}
		}
	}
	c.Note = fmt.Sprintf("%d calls answered NO_LEADER by a journal with a full disk", refused)
	return c
}
