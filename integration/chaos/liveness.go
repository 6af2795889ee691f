package chaos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The liveness scenario checks the liveness digests under partitions: a
// node whose Subscribe stream is up on a journal that reaches the leader
// must never be marked Inactive. Its nodes stream and do nothing else (the
// registry workload's nodes never stream, so with the short node liveness
// timeout (--heartbeat-timeout) this scenario needs they would all go
// Inactive, a transition the registry model does not have); each node
// keeps its stream on one journal, as an agent does while that journal
// answers it, so a node on a journal cut off from the others is not
// reported and is, rightly, marked Inactive once the node liveness timeout
// has passed.

// Liveness timing given to the journals of the liveness scenario: a
// leader elected after a kill (about 3 s here) leaves several digests
// inside the timeout.
const (
	livenessTimeout = 8 * time.Second
	livenessDigest  = time.Second
	livenessNodes   = 12
)

// StreamSession is one Subscribe stream: open (the first message
// received) from Up until Down (0: still open at the end), history time.
type StreamSession struct {
	Node, Journal string
	Up, Down      int64
}

// LivenessMark is a node marked Inactive (or Active again) in the
// committed audit trail, at the leader's timestamp (history time).
type LivenessMark struct {
	Node   string
	At     int64
	Index  uint64
	Active bool // marked Active again by a digest
}

// LivenessResult is what the liveness scenario saw.
type LivenessResult struct {
	Sessions []StreamSession
	Marks    []LivenessMark
	// Timeout and Digest are the journals' node liveness timeout
	// (--heartbeat-timeout) and --digest-interval.
	Timeout, Digest time.Duration
}

// unhealthy reports whether journal j could not reach the leader at some
// moment of [from, to]: it was cut off (in the smaller side of a
// partition), killed, or frozen.
func unhealthy(faults []Fault, cutoff map[int][]string, j string, from, to int64) bool {
	for k, f := range faults {
		end := f.Healed
		if end == 0 {
			end = 1 << 62
		}
		if f.At > to || end < from {
			continue
		}
		for _, x := range cutoff[k] {
			if x == j {
				return true
			}
		}
	}
	return false
}

// CheckLiveness: no node was marked Inactive while its stream had been up,
// for the whole node liveness timeout but two digest intervals before the
// mark, on a journal that could reach the leader throughout that time.
// cutoff lists, per fault (by index), the journals it cut off, killed or
// froze.
func CheckLiveness(l *LivenessResult, faults []Fault, cutoff map[int][]string) (Check, int) {
	c := Check{Name: InvLiveness}
	rightly := 0
	for _, m := range l.Marks {
		if m.Active {
			continue
		}
		c.Checked++
		from := m.At - int64(l.Timeout)
		for _, s := range l.Sessions {
			if s.Node != m.Node || s.Up > m.At-int64(l.Timeout-2*l.Digest) || (s.Down != 0 && s.Down < m.At) {
				continue
			}
			if unhealthy(faults, cutoff, s.Journal, from, m.At) {
				rightly++
				continue
			}
			c.fail("node %s marked Inactive at %.1fs (index %d) although its stream was up on %s from %.1fs to %s, and %s reached the leader throughout the %v before",
				m.Node, float64(m.At)/1e9, m.Index, s.Journal, float64(s.Up)/1e9, downString(s.Down), s.Journal, l.Timeout)
		}
	}
	return c, rightly
}

func downString(d int64) string {
	if d == 0 {
		return "the end"
	}
	return fmt.Sprintf("%.1fs", float64(d)/1e9)
}

// streamer holds one node's stream on one journal, reopening it whenever
// it ends.
type streamer struct {
	node    string
	journal int
	cert    tls.Certificate
}

// runLiveness runs the liveness scenario: a fresh quorum, streaming nodes,
// the scenario's faults, and CheckLiveness over the committed audit.
func runLiveness(sc Scenario, opts Options, seed uint64, res *ScenarioResult, logf func(string, ...any)) {
	wl := DefaultWorkload()
	sc.Extra = append(append([]string{}, sc.Extra...),
		"--heartbeat-timeout", livenessTimeout.String(), "--digest-interval", livenessDigest.String(), "--takeover-window", livenessTimeout.String())
	q, err := newQuorum(sc, opts, &wl, res)
	if err != nil {
		res.Err = err
		return
	}
	unregister := onSignal(func() { q.Close() })
	defer func() {
		unregister()
		if err := q.Close(); err != nil {
			res.Notes = append(res.Notes, "cleanup: "+err.Error())
		}
		if res.Passed() && !opts.Keep {
			os.RemoveAll(res.Dir)
		}
	}()
	res.Network = q.Describe()
	logf("%s", res.Network)
	if err := StartAll(q, 90*time.Second); err != nil {
		res.Err = fmt.Errorf("starting the quorum: %w", err)
		return
	}
	if _, err := Leader(context.Background(), q, 30*time.Second); err != nil {
		res.Err = err
		return
	}
	h := NewHistory()
	res.T0 = h.Start()
	admins, closeAdmins, err := AdminConns(q)
	if err != nil {
		res.Err = err
		return
	}
	defer closeAdmins()
	// Register and enroll the streaming nodes.
	var ss []*streamer
	for k := range livenessNodes {
		id := fmt.Sprintf("s%02d", k)
		mac := fmt.Sprintf("02:5e:00:00:%02x:%02x", k/256, k%256)
		cert, err := enrollStreamer(q, admins, id, mac)
		if err != nil {
			res.Err = fmt.Errorf("enrolling %s: %w", id, err)
			return
		}
		ss = append(ss, &streamer{node: id, journal: k % q.Size(), cert: cert})
	}
	watch, err := watchLeaders(q, h)
	if err != nil {
		res.Err = err
		return
	}
	stopWatch := sync.OnceFunc(func() { res.Leaders = watch.Stop() })
	defer stopWatch()
	lr := &LivenessResult{Timeout: livenessTimeout, Digest: livenessDigest}
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(q, h, stop, func(ses StreamSession) {
				mu.Lock()
				lr.Sessions = append(lr.Sessions, ses)
				mu.Unlock()
			})
		}()
	}
	logf("quorum of %d serving; %d nodes streaming", sc.Journals, livenessNodes)
	// Every stream up and reported before the faults begin.
	time.Sleep(2 * livenessDigest)

	dur := sc.Duration
	if opts.Duration > 0 {
		dur = opts.Duration
	} else if opts.Short {
		dur = dur / 3
	}
	res.MinFaults = max(sc.MinFaults, 1)
	res.NeedLeaderChange = sc.Leaders
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	env := &Env{Ctx: ctx, Dir: res.Dir, Q: q, H: h, Rng: mrand.New(mrand.NewPCG(seed, 0x5eed)), Logf: logf}
	injectErr := sc.Inject(env)
	cancel()
	healErr := healAll(env)
	res.Faults = env.faults
	res.Notes = append(res.Notes, env.notes...)
	if err := errors.Join(injectErr, healErr); err != nil {
		res.Err = fmt.Errorf("fault injection: %w", err)
	}
	logf("healed after %d faults; streams stay up one more heartbeat timeout", len(res.Faults))
	time.Sleep(livenessTimeout + 2*livenessDigest)
	close(stop)
	wg.Wait()
	stopWatch()

	states, diff := Converge(context.Background(), q, admins, ss[0].node, 60*time.Second)
	final := states[0]
	for _, s := range states {
		if s.Err == nil {
			final = s
			break
		}
	}
	t0 := res.T0.UnixNano()
	for _, e := range final.Audit {
		switch e.GetAction() {
		case "inactive", "active":
			lr.Marks = append(lr.Marks, LivenessMark{Node: e.GetNodeId(), At: e.GetAtUnixNano() - t0, Index: e.GetIndex(), Active: e.GetAction() == "active"})
		}
	}
	sort.Slice(lr.Sessions, func(a, b int) bool { return lr.Sessions[a].Up < lr.Sessions[b].Up })
	res.Liveness = lr
	res.Ops = len(lr.Sessions)
	res.OK = res.Ops
	res.MinOps = livenessNodes
	res.Lin.Verdict = "n/a"
	cut := env.cutoff
	check, rightly := CheckLiveness(lr, res.Faults, cut)
	inactive, active := 0, 0
	for _, m := range lr.Marks {
		if m.Active {
			active++
		} else {
			inactive++
		}
	}
	check.Note = fmt.Sprintf("%d stream sessions of %d nodes; %d marked Inactive (%d while streaming to a journal cut off from the leader), %d Active again by a digest; heartbeat timeout %v, digest interval %v",
		len(lr.Sessions), livenessNodes, inactive, rightly, active, livenessTimeout, livenessDigest)
	res.LivenessRightly = rightly
	res.Checks = []Check{check, CheckIdentical(states, diff)}
	var b []byte
	for _, s := range lr.Sessions {
		b = fmt.Appendf(b, "stream %s on %s: %.3fs - %s\n", s.Node, s.Journal, float64(s.Up)/1e9, downString(s.Down))
	}
	for _, m := range lr.Marks {
		b = fmt.Appendf(b, "index %d at %.3fs: %s active=%v\n", m.Index, float64(m.At)/1e9, m.Node, m.Active)
	}
	_ = os.WriteFile(filepath.Join(res.Dir, "liveness.txt"), b, 0o644)
}

// enrollStreamer registers node id with one MAC and enrolls it at the
// leader, returning its client certificate.
func enrollStreamer(q Quorum, admins []pactv1.AdminServiceClient, id, mac string) (tls.Certificate, error) {
	key, err := newAgentKey()
	if err != nil {
		return tls.Certificate{}, err
	}
	hw := &pactv1.HardwareIdentity{Macs: []string{mac}}
	for attempt := 0; ; attempt++ {
		l, err := Leader(context.Background(), q, 30*time.Second)
		if err != nil {
			return tls.Certificate{}, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = admins[l].RegisterNode(ctx, &pactv1.RegisterNodeRequest{NodeId: id, Hardware: hw})
		cancel()
		if err == nil || Classify(err).Reason == "NODE_ALREADY_ENROLLED" {
			break
		}
		if attempt > 10 {
			return tls.Certificate{}, err
		}
		time.Sleep(300 * time.Millisecond)
	}
	conn, err := dial(q.GRPC(0), q.Roots(), nil, nil)
	if err != nil {
		return tls.Certificate{}, err
	}
	defer conn.Close()
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := pactv1.NewEnrollmentServiceClient(conn).Enroll(ctx, &pactv1.EnrollRequest{Hardware: hw, CsrDer: key.csr})
		cancel()
		if err == nil {
			return tls.Certificate{Certificate: resp.GetCertChainDer(), PrivateKey: key.key}, nil
		}
		if attempt > 10 {
			return tls.Certificate{}, err
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// run keeps the node's stream open on its journal until stop, reporting
// each session once it ends.
func (s *streamer) run(q Quorum, h *History, stop <-chan struct{}, report func(StreamSession)) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		s.session(q, h, stop, report)
		select {
		case <-stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *streamer) session(q Quorum, h *History, stop <-chan struct{}, report func(StreamSession)) {
	conn, err := dial(q.GRPC(s.journal), q.Roots(), &s.cert, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	st, err := pactv1.NewEnrollmentServiceClient(conn).Subscribe(ctx, &pactv1.SubscribeRequest{})
	if err != nil {
		return
	}
	if _, err := st.Recv(); err != nil {
		return
	}
	ses := StreamSession{Node: s.node, Journal: q.ID(s.journal), Up: h.Now()}
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	select {
	case <-stop:
		// Open until the end: the harness closed it.
	default:
		ses.Down = h.Now()
	}
	report(ses)
}

// livenessPartition cuts one journal (the leader half the time) off the
// others for longer than the node liveness timeout, or kills the leader and
// restarts it; it records which journals each fault cut off.
func livenessPartition(e *Env) error {
	for e.sleep(e.between(2*time.Second, 4*time.Second)) {
		l, err := e.leader()
		if err != nil {
			return err
		}
		if e.Rng.IntN(3) == 0 {
			if err := e.Q.Kill(l); err != nil {
				return err
			}
			k := e.addFault("SIGKILL", e.Q.ID(l)+"(leader)")
			e.cutOff(k, l)
			e.leaderLost() // no registry workload here: nothing to probe
			time.Sleep(e.between(time.Second, 2*time.Second))
			if err := e.restart(l); err != nil {
				return err
			}
			e.heal(k)
			continue
		}
		minor, major, err := e.minority(e.Rng.IntN(2) == 0)
		if err != nil {
			return err
		}
		if err := e.cut([][]int{minor, major}, minor); err != nil {
			return err
		}
		k := e.addFault("partition", names(e.Q, minor)+"|"+names(e.Q, major))
		e.cutOff(k, minor...)
		time.Sleep(e.between(livenessTimeout+2*time.Second, livenessTimeout+5*time.Second))
		if err := e.uncut(); err != nil {
			return err
		}
		e.heal(k)
	}
	return nil
}

func (e *Env) cutOff(fault int, js ...int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cutoff == nil {
		e.cutoff = map[int][]string{}
	}
	for _, j := range js {
		e.cutoff[fault] = append(e.cutoff[fault], e.Q.ID(j))
	}
}
