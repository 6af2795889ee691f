// Package launch runs pact-journal processes for the integration tests,
// the chaos campaign and the storm benchmark: one domain root, n journals
// with their own data directories and logs, on loopback or in network
// namespaces (Network), started, stopped, killed, frozen and restarted
// with the same flags.
package launch

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pact-hpc/pact/internal/pki"
)

// ProcConfig configures a quorum of pact-journal processes.
type ProcConfig struct {
	Bin   string // directory with pact-journal
	Dir   string // domain root, admin credential, one data dir and log per journal
	N     int
	Net   Network
	Extra []string // more flags for every journal
	Env   []string // more environment for every journal (e.g. GOGC=...)
	// Initial, if between 1 and N-1, is how many journals form the quorum
	// (--initial-cluster of the first Initial); the others start empty
	// with --join and wait to be added (pact journal add).
	Initial int
}

// ProcQuorum runs journals as processes.
type ProcQuorum struct {
	cfg   ProcConfig
	roots *x509.CertPool
	admin tls.Certificate
	js    []*procJournal
}

type procJournal struct {
	id   string
	args []string
	// bin, if set, is the directory of this journal's pact-journal in
	// place of ProcConfig.Bin (SetBin: a rolling upgrade).
	bin     string
	logPath string
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	// logFrom is the size of the log when the current process started.
	logFrom int64
	starts  int
	started time.Time
	err     error // how the last process exited (set before exited closes)
}

// NewProcQuorum makes the site's PKI in the production layout, as the
// ceremony does (docs/ceremony.md): a domain root whose key stays in
// cfg.Dir/root (never in a journal's data directory), the first
// platform-admin credential, and a journal CA per journal whose key is a
// file in cfg.Dir/keys; then it prepares (does not start) the journals.
func NewProcQuorum(cfg ProcConfig) (*ProcQuorum, error) {
	q := &ProcQuorum{cfg: cfg}
	if err := q.ceremony(); err != nil {
		return nil, err
	}
	var err error
	if q.roots, q.admin, err = LoadCreds(cfg.Dir); err != nil {
		return nil, err
	}
	initial := cfg.N
	if cfg.Initial > 0 && cfg.Initial < cfg.N {
		initial = cfg.Initial
	}
	var peers []string
	for i := range initial {
		peers = append(peers, fmt.Sprintf("j%d=%s", i+1, q.addr(i, "raft")))
	}
	for i := range cfg.N {
		id := fmt.Sprintf("j%d", i+1)
		args := []string{
			"--node-id", id, "--data-dir", filepath.Join(cfg.Dir, id),
			"--listen", q.addr(i, "grpc"), "--raft-listen", q.addr(i, "raft"), "--metrics-listen", q.addr(i, "metrics"),
			"--root-cert", filepath.Join(cfg.Dir, "ca.pem"),
			"--journal-ca-cert", q.JournalCACert(id), "--journal-ca-key", "file:" + q.JournalCAKey(id),
		}
		if i < initial {
			args = append(args, "--initial-cluster", strings.Join(peers, ","))
		} else {
			args = append(args, "--join")
		}
		args = append(args, cfg.Extra...)
		q.js = append(q.js, &procJournal{id: id, args: args, logPath: filepath.Join(cfg.Dir, id+".log")})
	}
	return q, nil
}

// Add appends a journal with its own flags (and cfg.Extra after them),
// not started, and returns its index: a journal beyond the first cfg.N,
// e.g. one started empty with --join on addresses the caller picked. The
// address accessors (GRPC, Raft, Metrics) and the network's per-journal
// placement know only the first cfg.N journals, so Add suits a network
// that runs every journal alike (Loopback).
func (q *ProcQuorum) Add(id string, args []string) int {
	args = append(slices.Clone(args), q.cfg.Extra...)
	q.js = append(q.js, &procJournal{id: id, args: args, logPath: filepath.Join(q.cfg.Dir, id+".log")})
	return len(q.js) - 1
}

// Args is journal i's command line after "pact-journal" (a copy).
func (q *ProcQuorum) Args(i int) []string {
	j := q.js[i]
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.args)
}

// SetArgs replaces journal i's command line for its next start (e.g. a
// journal restored into a new data directory).
func (q *ProcQuorum) SetArgs(i int, args []string) {
	j := q.js[i]
	j.mu.Lock()
	defer j.mu.Unlock()
	j.args = slices.Clone(args)
}

// SetBin makes journal i's next start run the pact-journal in dir (its
// flags and data directory unchanged): a rolling upgrade stops a journal,
// sets the new release's directory and starts it again. "" goes back to
// ProcConfig.Bin.
func (q *ProcQuorum) SetBin(i int, dir string) {
	j := q.js[i]
	j.mu.Lock()
	defer j.mu.Unlock()
	j.bin = dir
}

// LoadCreds reads the domain root and the admin credential pact-journal
// init wrote in dir.
func LoadCreds(dir string) (*x509.CertPool, tls.Certificate, error) {
	roots, _, err := pki.LoadCertPool(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	admin, err := tls.LoadX509KeyPair(filepath.Join(dir, "admin.pem"), filepath.Join(dir, "admin-key.pem"))
	return roots, admin, err
}

func (q *ProcQuorum) addr(i int, service string) string {
	return net.JoinHostPort(q.cfg.Net.Host(i), strconv.Itoa(q.cfg.Net.Port(i, service)))
}

func (q *ProcQuorum) Size() int                 { return len(q.js) }
func (q *ProcQuorum) ID(i int) string           { return q.js[i].id }
func (q *ProcQuorum) GRPC(i int) string         { return q.addr(i, "grpc") }
func (q *ProcQuorum) Metrics(i int) string      { return q.addr(i, "metrics") }
func (q *ProcQuorum) Roots() *x509.CertPool     { return q.roots }
func (q *ProcQuorum) Admin() tls.Certificate    { return q.admin }
func (q *ProcQuorum) CanPartition() bool        { return q.cfg.Net.CanPartition() }
func (q *ProcQuorum) Partition(g [][]int) error { return q.cfg.Net.Partition(g) }

// slowNet is a network that can slow one journal's link (NetNS).
type slowNet interface {
	Slow(i int) (string, error)
	Unslow(i int) error
}

// Slow slows journal i's link, if the network can; it says how.
func (q *ProcQuorum) Slow(i int) (string, error) {
	if s, ok := q.cfg.Net.(slowNet); ok {
		return s.Slow(i)
	}
	return "", errors.New("this network cannot slow a link")
}

// Unslow undoes Slow.
func (q *ProcQuorum) Unslow(i int) error {
	if s, ok := q.cfg.Net.(slowNet); ok {
		return s.Unslow(i)
	}
	return nil
}
func (q *ProcQuorum) Heal() error { return q.cfg.Net.Heal() }
func (q *ProcQuorum) Describe() string {
	return fmt.Sprintf("%d pact-journal processes; %s", len(q.js), q.cfg.Net.Describe())
}

func (q *ProcQuorum) Start(i int) error {
	j := q.js[i]
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cmd != nil {
		select {
		case <-j.exited:
		default:
			return fmt.Errorf("%s is still running", j.id)
		}
	}
	f, err := os.OpenFile(j.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	st, _ := f.Stat()
	j.starts++
	fmt.Fprintf(f, "=== launch: start %d of %s at %s\n", j.starts, j.id, time.Now().Format(time.RFC3339Nano))
	j.logFrom = st.Size()
	bin := q.cfg.Bin
	if j.bin != "" {
		bin = j.bin
	}
	fmt.Fprintf(f, "=== launch: %s\n", filepath.Join(bin, "pact-journal"))
	cmd := q.cfg.Net.Command(i, filepath.Join(bin, "pact-journal"), j.args...)
	if len(q.cfg.Env) > 0 {
		cmd.Env = append(os.Environ(), q.cfg.Env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	j.started = time.Now()
	// Its own process group: a signal to the harness does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", j.id, err)
	}
	j.cmd, j.exited = cmd, make(chan struct{})
	exited := j.exited
	go func() {
		err := cmd.Wait()
		f.Close()
		j.mu.Lock()
		j.err = err
		j.mu.Unlock()
		close(exited)
	}()
	return nil
}

var (
	servingRE = regexp.MustCompile(`msg="journal serving"`)
	joiningRE = regexp.MustCompile(`msg="journal serving"|msg="waiting to be added to a quorum`)
)

// WaitServing waits until journal i's current process logs that it
// serves, or fails saying why (with the end of its log).
func (q *ProcQuorum) WaitServing(i int, timeout time.Duration) error {
	return q.waitLog(i, servingRE, timeout)
}

// WaitUp is WaitServing, except that a journal started with --join that
// logs it waits to be added counts as up (it serves only once added).
func (q *ProcQuorum) WaitUp(i int, timeout time.Duration) error {
	if slices.Contains(q.Args(i), "--join") {
		return q.waitLog(i, joiningRE, timeout)
	}
	return q.waitLog(i, servingRE, timeout)
}

func (q *ProcQuorum) waitLog(i int, re *regexp.Regexp, timeout time.Duration) error {
	j := q.js[i]
	deadline := time.Now().Add(timeout)
	for {
		j.mu.Lock()
		from, exited := j.logFrom, j.exited
		j.mu.Unlock()
		if re.MatchString(readFrom(j.logPath, from)) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited before serving:\n%s", j.id, Tail(readFrom(j.logPath, from), 20))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not serve within %v:\n%s", j.id, timeout, Tail(readFrom(j.logPath, from), 20))
		}
	}
}

// Started is when journal i's current process was started.
func (q *ProcQuorum) Started(i int) time.Time {
	j := q.js[i]
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.started
}

// CurrentLog is the output of journal i's current process so far.
func (q *ProcQuorum) CurrentLog(i int) string {
	j := q.js[i]
	j.mu.Lock()
	from := j.logFrom
	j.mu.Unlock()
	return readFrom(j.logPath, from)
}

// LogPath is the file every start of journal i appends its output to.
func (q *ProcQuorum) LogPath(i int) string { return q.js[i].logPath }

// DataDir is journal i's data directory.
func (q *ProcQuorum) DataDir(i int) string { return filepath.Join(q.cfg.Dir, q.js[i].id) }

// Rejoin prepares journal i, which must not be running, to be added to the
// quorum again: its data directory is emptied and its next start waits
// with --join instead of forming a quorum (--initial-cluster).
func (q *ProcQuorum) Rejoin(i int) error {
	if q.Running(i) {
		return fmt.Errorf("%s is still running", q.js[i].id)
	}
	if err := os.RemoveAll(q.DataDir(i)); err != nil {
		return err
	}
	j := q.js[i]
	j.mu.Lock()
	defer j.mu.Unlock()
	var args []string
	for k := 0; k < len(j.args); k++ {
		switch j.args[k] {
		case "--initial-cluster":
			k++ // and its value
		case "--join":
		default:
			args = append(args, j.args[k])
		}
	}
	j.args = append(args, "--join")
	return nil
}

// Raft is journal i's Raft address.
func (q *ProcQuorum) Raft(i int) string { return q.addr(i, "raft") }

// Pid is the process id of journal i's current process (0 if none; it
// may have exited).
func (q *ProcQuorum) Pid(i int) int {
	j := q.js[i]
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cmd == nil || j.cmd.Process == nil {
		return 0
	}
	return j.cmd.Process.Pid
}

// Exited is closed when journal i's current process has exited (nil if
// it was never started).
func (q *ProcQuorum) Exited(i int) <-chan struct{} {
	j := q.js[i]
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.exited
}

// ExitError is how journal i's last process exited (nil: status 0), once
// Exited is closed.
func (q *ProcQuorum) ExitError(i int) error {
	j := q.js[i]
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

func readFrom(path string, from int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Signal sends sig to journal i's current process.
func (q *ProcQuorum) Signal(i int, sig syscall.Signal) error {
	j := q.js[i]
	j.mu.Lock()
	cmd := j.cmd
	j.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("%s is not running", j.id)
	}
	return cmd.Process.Signal(sig)
}

func (q *ProcQuorum) wait(i int, timeout time.Duration) error {
	j := q.js[i]
	j.mu.Lock()
	exited := j.exited
	j.mu.Unlock()
	if exited == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %v", j.id, timeout)
	}
}

// Kill sends SIGKILL to journal i and waits until it is gone.
func (q *ProcQuorum) Kill(i int) error {
	if err := q.Signal(i, syscall.SIGKILL); err != nil {
		return err
	}
	return q.wait(i, 10*time.Second)
}

// Stop asks journal i to stop (SIGTERM) and waits, SIGKILLing it after
// 15 s.
func (q *ProcQuorum) Stop(i int) error { return q.StopWithin(i, 15*time.Second) }

// StopWithin is Stop with its own grace period.
func (q *ProcQuorum) StopWithin(i int, grace time.Duration) error {
	_ = q.Signal(i, syscall.SIGCONT)
	if err := q.Signal(i, syscall.SIGTERM); err != nil {
		return err
	}
	if err := q.wait(i, grace); err != nil {
		// SIGQUIT first: Go's runtime writes every goroutine's stack to
		// the journal's log and exits, so a shutdown that hangs leaves
		// where it hung behind.
		_ = q.Signal(i, syscall.SIGQUIT)
		if q.wait(i, 5*time.Second) == nil {
			return fmt.Errorf("%w (its goroutines, from SIGQUIT, are at the end of %s)", err, q.js[i].logPath)
		}
		_ = q.Signal(i, syscall.SIGKILL)
		return errors.Join(err, q.wait(i, 5*time.Second))
	}
	return nil
}

func (q *ProcQuorum) Pause(i int) error  { return q.Signal(i, syscall.SIGSTOP) }
func (q *ProcQuorum) Resume(i int) error { return q.Signal(i, syscall.SIGCONT) }

func (q *ProcQuorum) Running(i int) bool {
	j := q.js[i]
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cmd == nil {
		return false
	}
	select {
	case <-j.exited:
		return false
	default:
		return true
	}
}

func (q *ProcQuorum) Log(i int) string { return readFrom(q.js[i].logPath, 0) }

func (q *ProcQuorum) Close() error {
	var errs []error
	for i := range q.js {
		if q.Running(i) {
			errs = append(errs, q.Stop(i))
		}
	}
	errs = append(errs, q.cfg.Net.Close())
	return errors.Join(errs...)
}
