package chaos

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

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

// StartAll starts every journal and waits until all serve (or, started
// with --join, wait to be added).
func StartAll(q Quorum, timeout time.Duration) error {
	for i := range q.Size() {
		if err := q.Start(i); err != nil {
			return err
		}
	}
	var errs []error
	for i := range q.Size() {
		errs = append(errs, waitUp(q, i, timeout))
	}
	return errors.Join(errs...)
}

// waitUp is WaitServing, except that a journal waiting with --join to be
// added counts as up.
func waitUp(q Quorum, i int, timeout time.Duration) error {
	if u, ok := q.(interface {
		WaitUp(i int, timeout time.Duration) error
	}); ok {
		return u.WaitUp(i, timeout)
	}
	return q.WaitServing(i, timeout)
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
