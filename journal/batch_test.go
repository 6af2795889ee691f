package journal_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// heldBatches holds the first batch a journal sends until every other
// activation of the test is queued behind it, so the test decides how
// the activations are grouped instead of the machine's speed.
type heldBatches struct {
	mu      sync.Mutex
	sizes   []int
	queued  chan int
	release chan struct{}
}

func holdBatches(t *testing.T, j *journal.Journal) *heldBatches {
	h := &heldBatches{queued: make(chan int, 1024), release: make(chan struct{})}
	j.SetBatchHooks(t, func(n int) { h.queued <- n }, func(n int) {
		h.mu.Lock()
		first := len(h.sizes) == 0
		h.sizes = append(h.sizes, n)
		h.mu.Unlock()
		if first {
			<-h.release
		}
	})
	return h
}

// waitQueued waits until n activations have reached the batcher behind
// the held batch: queued, or sent in batches of their own (a queue larger
// than one forwarded message holds goes out while the first is held).
func (h *heldBatches) waitQueued(t *testing.T, n int) {
	t.Helper()
	q := 0
	var last polltest.Last
	polltest.Until(t, 60*time.Second, 10*time.Millisecond, func() bool {
	latest:
		for {
			select {
			case q = <-h.queued: // the latest length
			default:
				break latest
			}
		}
		sizes := h.batchSizes()
		sent := 0
		if len(sizes) > 1 {
			sent = sum(sizes[1:])
		}
		last.Value = fmt.Sprintf("queued %d, batches %v", q, sizes)
		return q+sent == n
	}, "fewer than %d activations reached the batcher within 60s (%v)", n, &last)
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

func (h *heldBatches) batchSizes() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.sizes...)
}

type enrollment struct {
	node string
	key  journaltest.Key
	resp *pactv1.EnrollResponse
	err  error
}

// enrollConcurrently registers nodes node-00.. on reg, then enrolls each
// at at (and node-00 a second time with another key) all at once. The
// first activation to reach the batcher is held until all the others
// wait behind it.
func enrollConcurrently(t *testing.T, reg, at *journaltest.Harness, nodes int) ([]*enrollment, *heldBatches, uint64) {
	t.Helper()
	hw := func(i int) (string, string) { return fmt.Sprintf("BMC-%02d", i), fmt.Sprintf("02:00:00:00:10:%02x", i) }
	var all []*enrollment
	for i := range nodes {
		bmc, mac := hw(i)
		reg.Register(t, fmt.Sprintf("node-%02d", i), bmc, mac)
		all = append(all, &enrollment{node: fmt.Sprintf("node-%02d", i), key: journaltest.NewKey(t)})
	}
	all = append(all, &enrollment{node: "node-00", key: journaltest.NewKey(t)})
	held := holdBatches(t, at.J)
	before := at.J.RaftLastIndex()
	var wg sync.WaitGroup
	for _, e := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var i int
			fmt.Sscanf(e.node, "node-%d", &i)
			bmc, mac := hw(i)
			e.resp, e.err = at.Enroll(t, e.key, bmc, mac)
		}()
	}
	held.waitQueued(t, len(all)-1)
	close(held.release)
	wg.Wait()
	return all, held, before
}

// checkEnrollments: every node but node-00 enrolled; of node-00's two
// enrollments, batched together, exactly one did and the other was
// refused ALREADY_ACTIVE by the FSM; every certificate handed out is the
// one the registry holds.
func checkEnrollments(t *testing.T, h *journaltest.Harness, all []*enrollment) {
	t.Helper()
	won := 0
	for _, e := range all {
		if e.err != nil {
			if e.node == "node-00" && apierr.FromError(e.err).Reason == apierr.AlreadyActive {
				continue
			}
			t.Errorf("enroll %s: %v", e.node, e.err)
			continue
		}
		if e.node == "node-00" {
			won++
		}
		if n := inspectOn(t, h, e.node); n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || n.GetCert().GetSerial() != e.resp.GetSerial() {
			t.Errorf("%s: registry holds %v serial %s, the agent got %s", e.node, n.GetState(), n.GetCert().GetSerial(), e.resp.GetSerial())
		}
	}
	if won != 1 {
		t.Errorf("node-00 enrolled %d times with two keys, want exactly once", won)
	}
}

// Concurrent enrollments at a leader share Raft entries: the activations
// that arrive while one is committing go together in the next entry, each
// with its own result, refusals included.
func TestActivationsBatchedAtLeader(t *testing.T) {
	cfg := journaltest.Config(t.TempDir())
	cfg.MaxConcurrentEnrollments = 64
	// Only the held batch's end sends the next (the window, at most
	// ApplyTimeout, is a hang guard here).
	cfg.ActivationBatchWindow, cfg.ApplyTimeout = time.Minute, time.Minute
	h := journaltest.Start(t, cfg)
	const nodes = 24
	all, held, before := enrollConcurrently(t, h, h, nodes)
	checkEnrollments(t, h, all)
	if entries := h.J.RaftLastIndex() - before; entries != 2 {
		t.Errorf("%d enrollments took %d Raft entries, want 2 (one alone, then one batch)", len(all), entries)
	}
	if fmt.Sprint(held.sizes) != fmt.Sprint([]int{1, nodes}) {
		t.Errorf("batch sizes %v, want [1 %d]", held.sizes, nodes)
	}
}

func batchCluster(t *testing.T) *journaltest.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	for i := range cfgs {
		// Room for TestActivationsBatchFitsAForwardedMessage's 97 at once.
		cfgs[i].MaxConcurrentEnrollments = 128
		cfgs[i].ActivationBatchWindow, cfgs[i].ApplyTimeout = time.Minute, time.Minute
		// No liveness digest writes into the log while the test counts.
		cfgs[i].DigestInterval = time.Hour
		cfgs[i].TakeoverWindow = 2 * time.Hour
		cfgs[i].NodeLivenessTimeout = 2 * time.Hour
		// An election in the middle (a loaded machine missing 300ms
		// heartbeats) would refuse the enrollments NO_LEADER.
		cfgs[i].RaftTimeout = 3 * time.Second
	}
	return journaltest.StartCluster(t, root, cfgs)
}

// A follower groups its activations too and forwards the batch to the
// leader in one call: one entry in the leader's log.
func TestActivationsBatchedAtFollower(t *testing.T) {
	c := batchCluster(t)
	leader := c.Leader(t)
	follower := c.Nodes[(leader+1)%3]
	const nodes = 16
	all, held, before := enrollConcurrently(t, follower, follower, nodes)
	checkEnrollments(t, c.Nodes[leader], all)
	if fmt.Sprint(held.sizes) != fmt.Sprint([]int{1, nodes}) {
		t.Errorf("batch sizes %v, want [1 %d]", held.sizes, nodes)
	}
	// Each forwarded call is one entry: the batch went in one call.
	if entries := follower.J.RaftLastIndex() - before; entries != 2 {
		t.Errorf("%d enrollments at a follower took %d Raft entries, want 2 (one alone, then one batch)", len(all), entries)
	}
}

// A leader of the release before batches refuses a forwarded batch before
// writing it; the follower then sends its activations one by one, and
// every enrollment still gets its answer.
func TestActivationsBatchRefusedByOlderLeader(t *testing.T) {
	c := batchCluster(t)
	leader := c.Leader(t)
	c.Nodes[leader].J.RefuseBatchesAsLeader(t)
	follower := c.Nodes[(leader+1)%3]
	const nodes = 8
	all, held, before := enrollConcurrently(t, follower, follower, nodes)
	checkEnrollments(t, c.Nodes[leader], all)
	if fmt.Sprint(held.sizes) != fmt.Sprint([]int{1, nodes}) {
		t.Errorf("batch sizes %v, want [1 %d]", held.sizes, nodes)
	}
	// One entry alone, then the batch's activations one entry each (the
	// one of node-00's two that lost is refused in its own entry).
	if entries := follower.J.RaftLastIndex() - before; entries != 1+nodes {
		t.Errorf("%d enrollments took %d Raft entries, want %d", len(all), entries, 1+nodes)
	}
}

// A follower's batch goes to the leader in one message, which the
// leader's server takes up to raftnode.MaxMessageBytes: activations queued
// beyond what that holds (about 800 bytes each with the certificate, so
// about 80) go as further batches, and every enrollment gets its answer.
// Before, the
// leader refused the whole batch (ResourceExhausted) and each activation
// in it failed.
func TestActivationsBatchFitsAForwardedMessage(t *testing.T) {
	c := batchCluster(t)
	leader := c.Leader(t)
	follower := c.Nodes[(leader+1)%3]
	const nodes = 96
	all, held, _ := enrollConcurrently(t, follower, follower, nodes)
	checkEnrollments(t, c.Nodes[leader], all)
	sizes := held.batchSizes()
	t.Logf("batch sizes %v", sizes)
	if sum(sizes) != nodes+1 || len(sizes) < 3 {
		t.Errorf("batch sizes %v, want the first alone and the %d behind it in two or more batches", sizes, nodes)
	}
}

// Agents stopping together (a site powering its nodes off) release their
// nodes in batches too: the releases that arrive while one commits share
// the next entry, and each agent learns its own node was released.
func TestReleasesBatchedAtFollower(t *testing.T) {
	c := batchCluster(t)
	leader := c.Leader(t)
	follower := c.Nodes[(leader+1)%3]
	const nodes = 12
	all, _, _ := enrollConcurrently(t, follower, follower, nodes)
	var enrolled []*enrollment
	for _, e := range all {
		if e.err == nil {
			enrolled = append(enrolled, e)
		}
	}
	if len(enrolled) != nodes {
		t.Fatalf("%d of %d nodes enrolled", len(enrolled), nodes)
	}
	held := holdBatches(t, follower.J)
	before := follower.J.RaftLastIndex()
	released := make([]bool, len(enrolled))
	errs := make([]error, len(enrolled))
	var wg sync.WaitGroup
	for i, e := range enrolled {
		cert := e.key.TLSCert(e.resp.GetCertChainDer())
		client := pactv1.NewEnrollmentServiceClient(follower.Dial(t, &cert))
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Release(context.Background(), &pactv1.ReleaseRequest{})
			released[i], errs[i] = resp.GetReleased(), err
		}()
	}
	held.waitQueued(t, nodes-1)
	close(held.release)
	wg.Wait()
	for i, e := range enrolled {
		if errs[i] != nil || !released[i] {
			t.Errorf("release %s: released %v, %v", e.node, released[i], errs[i])
		}
		if n := inspectOn(t, c.Nodes[leader], e.node); n.GetReleasedSerial() != e.resp.GetSerial() {
			t.Errorf("%s: released serial %q, want %s", e.node, n.GetReleasedSerial(), e.resp.GetSerial())
		}
	}
	if sizes := held.batchSizes(); fmt.Sprint(sizes) != fmt.Sprint([]int{1, nodes - 1}) {
		t.Errorf("batch sizes %v, want [1 %d]", sizes, nodes-1)
	}
	if entries := follower.J.RaftLastIndex() - before; entries != 2 {
		t.Errorf("%d releases took %d Raft entries, want 2 (one alone, then one batch)", nodes, entries)
	}
}
