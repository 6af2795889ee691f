package keystore

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// tpmHolders names the other processes that have the TPM at device open,
// best effort (only the processes whose /proc/PID/fd this user may read:
// all of them as root): for a character device, the processes with a file
// descriptor on it; for unix:PATH (swtpm), the processes connected to the
// socket. Each is "pid N (COMM)": the command name only, as a command
// line may carry another program's secrets. This process is left out.
func tpmHolders(device string) []string {
	if path, ok := strings.CutPrefix(device, "unix:"); ok {
		return socketHolders(strings.TrimPrefix(path, "//"))
	}
	want, err := os.Stat(device)
	if err != nil {
		return nil
	}
	return procHolders(func(fd string) bool {
		st, err := os.Stat(fd)
		return err == nil && os.SameFile(st, want)
	})
}

// procHolders walks /proc/*/fd and describes the processes other than this
// one with a descriptor for which match is true.
func procHolders(match func(fdPath string) bool) []string {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	self := os.Getpid()
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == self {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(p, "fd"))
		if err != nil {
			continue // gone, or another user's
		}
		for _, fd := range fds {
			if match(filepath.Join(p, "fd", fd.Name())) {
				pids = append(pids, pid)
				break
			}
		}
	}
	sort.Ints(pids)
	out := make([]string, 0, len(pids))
	for _, pid := range pids {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		name := strings.TrimSpace(string(comm))
		if err != nil || name == "" {
			name = "?"
		}
		out = append(out, fmt.Sprintf("pid %d (%s)", pid, name))
	}
	return out
}

// socketHolders: the processes at the other end of the connections that
// the server listening at path has accepted (or queued), found with the
// kernel's sock_diag (what ss -xp uses).
func socketHolders(path string) []string {
	peers, err := unixSocketPeers(path)
	if err != nil || len(peers) == 0 {
		return nil
	}
	return procHolders(func(fd string) bool {
		link, err := os.Readlink(fd)
		if err != nil {
			return false
		}
		ino, ok := strings.CutPrefix(link, "socket:[")
		if !ok {
			return false
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 32)
		return err == nil && peers[uint32(n)]
	})
}

// unixSocketPeers returns the inodes of the sockets connected to a socket
// named path (the server's end of each connection carries the name).
func unixSocketPeers(path string) (map[uint32]bool, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	tv := unix.Timeval{Sec: 2}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	const (
		sockDiagByFamily = 20
		udiagShowName    = 0x1
		udiagShowPeer    = 0x4
		unixDiagName     = 0
		unixDiagPeer     = 2
	)
	// nlmsghdr (16) + unix_diag_req (24).
	req := make([]byte, 40)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1)
	req[16] = unix.AF_UNIX
	ne.PutUint32(req[20:], 0xffffffff) // every state
	ne.PutUint32(req[28:], udiagShowName|udiagShowPeer)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	peers := map[uint32]bool{}
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return peers, nil
			case unix.NLMSG_ERROR:
				return nil, fmt.Errorf("sock_diag refused the request")
			}
			// unix_diag_msg: family, type, state, pad (4), ino (4), cookie (8).
			if len(m.Data) < 16 {
				continue
			}
			var name string
			var peer uint32
			for attrs := m.Data[16:]; len(attrs) >= 4; {
				l, typ := int(ne.Uint16(attrs[0:])), ne.Uint16(attrs[2:])
				if l < 4 || l > len(attrs) {
					break
				}
				val := attrs[4:l]
				switch {
				case typ == unixDiagName:
					name = strings.TrimRight(string(val), "\x00")
				case typ == unixDiagPeer && len(val) >= 4:
					peer = ne.Uint32(val)
				}
				attrs = attrs[min((l+3)&^3, len(attrs)):]
			}
			if name == path && peer != 0 {
				peers[peer] = true
			}
		}
	}
}
