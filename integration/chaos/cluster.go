package chaos

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Quorum is a running set of journals, whatever runs them (processes on a
// network of namespaces or loopback, or containers), as the scenarios and
// the workload see it.
type Quorum interface {
	// Size is the number of journals.
	Size() int
	// ID is journal i's id (j1 ...).
	ID(i int) string
	// GRPC and Metrics are the addresses clients reach journal i at.
	GRPC(i int) string
	Metrics(i int) string
	// Creds are the domain root and an admin credential.
	Roots() *x509.CertPool
	Admin() tls.Certificate
	// Describe says how the journals run and are networked.
	Describe() string
	// Start (re)starts journal i; WaitServing waits until it serves.
	Start(i int) error
	WaitServing(i int, timeout time.Duration) error
	// Kill sends SIGKILL, Stop asks it to stop (SIGTERM) and waits.
	Kill(i int) error
	Stop(i int) error
	// Pause and Resume freeze and thaw journal i (SIGSTOP/SIGCONT, or the
	// container's cgroup freezer).
	Pause(i int) error
	Resume(i int) error
	// Running reports whether journal i is running (paused counts).
	Running(i int) bool
	// CanPartition reports whether Partition cuts links for real.
	CanPartition() bool
	// Partition cuts every link between journals of different groups;
	// Heal restores all.
	Partition(groups [][]int) error
	Heal() error
	// Log is journal i's output (every start, in order) since the run
	// began.
	Log(i int) string
	// Close stops everything and removes what the quorum created (not its
	// directory, which the caller owns).
	Close() error
}

// ProcConfig configures a quorum of pact-journal processes.
type ProcConfig struct {
	Bin   string // directory with pact-journal
	Dir   string // domain root, admin credential, one data dir and log per journal
	N     int
	Net   Network
	Extra []string // more flags for every journal
}

// ProcQuorum runs journals as processes.
type ProcQuorum struct {
	cfg   ProcConfig
	roots *x509.CertPool
	admin tls.Certificate
	js    []*procJournal
}

type procJournal struct {
	id      string
	args    []string
	logPath string
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	// logFrom is the size of the log when the current process started.
	logFrom int64
	starts  int
}

// NewProcQuorum initialises a domain root in cfg.Dir and prepares (does not
// start) the journals.
func NewProcQuorum(cfg ProcConfig) (*ProcQuorum, error) {
	journal := filepath.Join(cfg.Bin, "pact-journal")
	if out, err := exec.Command(journal, "init", "--dir", cfg.Dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pact-journal init: %w\n%s", err, out)
	}
	q := &ProcQuorum{cfg: cfg}
	var err error
	if q.roots, q.admin, err = loadCreds(cfg.Dir); err != nil {
		return nil, err
	}
	var peers []string
	for i := range cfg.N {
		peers = append(peers, fmt.Sprintf("j%d=%s", i+1, q.addr(i, "raft")))
	}
	for i := range cfg.N {
		id := fmt.Sprintf("j%d", i+1)
		args := []string{
			"--node-id", id, "--data-dir", filepath.Join(cfg.Dir, id),
			"--listen", q.addr(i, "grpc"), "--raft-listen", q.addr(i, "raft"), "--metrics-listen", q.addr(i, "metrics"),
			"--root-cert", filepath.Join(cfg.Dir, "ca.pem"), "--root-key", filepath.Join(cfg.Dir, "ca-key.pem"),
			"--initial-cluster", strings.Join(peers, ","),
		}
		args = append(args, cfg.Extra...)
		q.js = append(q.js, &procJournal{id: id, args: args, logPath: filepath.Join(cfg.Dir, id+".log")})
	}
	return q, nil
}

func loadCreds(dir string) (*x509.CertPool, tls.Certificate, error) {
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
func (q *ProcQuorum) Heal() error               { return q.cfg.Net.Heal() }
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
	fmt.Fprintf(f, "=== chaos: start %d of %s at %s\n", j.starts, j.id, time.Now().Format(time.RFC3339Nano))
	j.logFrom = st.Size()
	cmd := q.cfg.Net.Command(i, filepath.Join(q.cfg.Bin, "pact-journal"), j.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a signal to the harness does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", j.id, err)
	}
	j.cmd, j.exited = cmd, make(chan struct{})
	exited := j.exited
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(exited)
	}()
	return nil
}

var servingRE = regexp.MustCompile(`msg="journal serving"`)

func (q *ProcQuorum) WaitServing(i int, timeout time.Duration) error {
	j := q.js[i]
	deadline := time.Now().Add(timeout)
	for {
		j.mu.Lock()
		from, exited := j.logFrom, j.exited
		j.mu.Unlock()
		if servingRE.MatchString(readFrom(j.logPath, from)) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited before serving:\n%s", j.id, tail(readFrom(j.logPath, from), 20))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not serve within %v:\n%s", j.id, timeout, tail(readFrom(j.logPath, from), 20))
		}
	}
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

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (q *ProcQuorum) signal(i int, sig syscall.Signal) error {
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

func (q *ProcQuorum) Kill(i int) error {
	if err := q.signal(i, syscall.SIGKILL); err != nil {
		return err
	}
	return q.wait(i, 10*time.Second)
}

func (q *ProcQuorum) Stop(i int) error {
	_ = q.signal(i, syscall.SIGCONT)
	if err := q.signal(i, syscall.SIGTERM); err != nil {
		return err
	}
	if err := q.wait(i, 15*time.Second); err != nil {
		_ = q.signal(i, syscall.SIGKILL)
		return errors.Join(err, q.wait(i, 5*time.Second))
	}
	return nil
}

func (q *ProcQuorum) Pause(i int) error  { return q.signal(i, syscall.SIGSTOP) }
func (q *ProcQuorum) Resume(i int) error { return q.signal(i, syscall.SIGCONT) }

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

// ---------------------------------------------------------------------------
// Helpers every quorum shares.

var isLeaderRE = regexp.MustCompile(`(?m)^pact_journal_is_leader 1$`)

// IsLeader asks journal i's metrics whether it leads (false if it does not
// answer within timeout).
func IsLeader(q Quorum, i int, timeout time.Duration) bool {
	c := http.Client{Timeout: timeout}
	resp, err := c.Get("http://" + q.Metrics(i) + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return isLeaderRE.Match(b.Bytes())
}

// Leader waits (bounded) for one of among (all journals if empty) to lead.
func Leader(ctx context.Context, q Quorum, timeout time.Duration, among ...int) (int, error) {
	if len(among) == 0 {
		for i := range q.Size() {
			among = append(among, i)
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		for _, i := range among {
			if IsLeader(q, i, 300*time.Millisecond) {
				return i, nil
			}
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("no leader among %v within %v", among, timeout)
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StartAll starts every journal and waits until all serve.
func StartAll(q Quorum, timeout time.Duration) error {
	for i := range q.Size() {
		if err := q.Start(i); err != nil {
			return err
		}
	}
	var errs []error
	for i := range q.Size() {
		errs = append(errs, q.WaitServing(i, timeout))
	}
	return errors.Join(errs...)
}

// LastIndex is the highest Raft index journal i knows of (its commit
// index; a follower's log cannot end beyond the leader's).
func LastIndex(q Quorum, i int) (uint64, error) {
	admin := q.Admin()
	conn, err := dial(q.GRPC(i), q.Roots(), &admin, nil)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := pactv1.NewAdminServiceClient(conn).JournalStatus(ctx, &pactv1.JournalStatusRequest{})
	if err != nil {
		return 0, err
	}
	return st.GetCommitIndex(), nil
}
