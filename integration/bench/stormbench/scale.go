package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/snapfile"
	"github.com/pact-hpc/pact/journal"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

type scaleFlags struct {
	nodes        int
	journals     int
	bin          string
	dir          string
	keep         bool
	snapshotWait time.Duration
	journalArgs  string
	journalEnv   string
	cpuprofile   string
}

func runScale(args []string) int {
	var f scaleFlags
	fs := flag.NewFlagSet("stormbench scale", flag.ContinueOnError)
	fs.IntVar(&f.nodes, "nodes", 100000, "nodes to register")
	fs.IntVar(&f.journals, "journals", 3, "journals in the quorum")
	fs.StringVar(&f.bin, "bin", "bin", "directory holding pact-journal and pact (make build)")
	fs.StringVar(&f.dir, "dir", "", "working directory (default: a new temporary directory, removed at the end unless -keep)")
	fs.BoolVar(&f.keep, "keep", false, "keep the working directory")
	fs.DurationVar(&f.snapshotWait, "snapshot-wait", 5*time.Minute, "wait this long for the journals' own Raft snapshot (with the default -journal-args, Raft checks every 10-20 s) before the restart; 0 skips it")
	fs.StringVar(&f.journalArgs, "journal-args", "--raft-snapshot-interval=10s", "extra flags for every pact-journal, space-separated (by default Raft checks for a snapshot every 10 s instead of every 2 minutes, so the run does not wait for it)")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a pprof CPU profile of the in-process FSM phase (apply, snapshot, restore) to this file")
	fs.StringVar(&f.journalEnv, "journal-env", "", "extra environment for every pact-journal, space-separated (e.g. GOGC=200)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	return runIn(f.dir, f.keep, func(dir string, cl *cleanup) error { return scaleMain(f, dir, cl) })
}

type scaleResult struct {
	Nodes    int `json:"nodes"`
	Journals int `json:"journals"`

	RegisterS    float64 `json:"register_s"`
	RegisterPerS float64 `json:"register_per_s"`

	// Process level, per journal, (after - before registration) / nodes;
	// the largest of the journals.
	RSSBytesPerNode     float64 `json:"journal_rss_bytes_per_node"`
	AnonBytesPerNode    float64 `json:"journal_anon_bytes_per_node"`
	HeapInuseBytesPerNd float64 `json:"journal_heap_inuse_bytes_per_node"`
	JournalRSSMB        float64 `json:"journal_rss_mb"`

	// pact node list -o json of the whole registry, as an operator runs
	// it (in pages of 1,000), and how many nodes it listed.
	ListS     float64 `json:"node_list_s"`
	ListNodes int     `json:"node_list_nodes"`

	// In this process, with the journal's own FSM code and Raft's file
	// snapshot store (fsync included), for the same registry.
	FSMLiveBytesPerNode float64 `json:"fsm_live_bytes_per_node"`
	SnapshotBytes       int64   `json:"snapshot_bytes"`
	SnapshotS           float64 `json:"snapshot_s"`
	RestoreS            float64 `json:"restore_s"`
	// The same with every node Active (a certificate of real size each).
	ActiveFSMLiveBytesPerNode float64 `json:"active_fsm_live_bytes_per_node"`
	ActiveSnapshotBytes       int64   `json:"active_snapshot_bytes"`
	ActiveSnapshotS           float64 `json:"active_snapshot_s"`
	ActiveRestoreS            float64 `json:"active_restore_s"`
	// The operator's backup of the all-Active registry (issue 12).
	BackupBytes    int64   `json:"backup_bytes"`
	BackupSaveS    float64 `json:"backup_save_s"`
	BackupRestoreS float64 `json:"backup_restore_s"`

	// The journals' own Raft snapshot (from their logs), when one was taken.
	RaftSnapshotS     *float64 `json:"raft_snapshot_s"`
	RaftSnapshotBytes int64    `json:"raft_snapshot_bytes,omitempty"`
	// A follower's restart: process start to "journal serving"; Raft's
	// snapshot restore inside it (from the journal's log); and how many
	// writes through another journal it took before the restarted one
	// served (it should be 0).
	RestartS            float64  `json:"restart_s"`
	RestartFromSnapshot bool     `json:"restart_from_snapshot"`
	RaftRestoreS        *float64 `json:"raft_restore_s"`
	RestartNudges       int      `json:"restart_writes_needed"`

	// SIGKILL of the leader to the first committed write through the
	// survivors, and to the first survivor reporting itself leader.
	FailoverS       float64 `json:"failover_s"`
	NewLeaderS      float64 `json:"new_leader_s"`
	FailoverWritesN int     `json:"failover_attempts"`
}

func scaleMain(f scaleFlags, dir string, cl *cleanup) error {
	r := scaleResult{Nodes: f.nodes, Journals: f.journals}
	logf("machine: %d CPUs, %s; working directory %s", runtime.NumCPU(), runtime.Version(), dir)
	c, err := newCluster(f.bin, dir, f.journals, strings.Fields(f.journalArgs), strings.Fields(f.journalEnv))
	if err != nil {
		return err
	}
	cl.add(c.stopAll)
	if err := c.startAll(90 * time.Second); err != nil {
		return err
	}
	logf("%d journals serving; registering %d nodes with one pact node enroll --batch", f.journals, f.nodes)
	time.Sleep(2 * time.Second)
	before := c.memory()
	nodes := inventory("scale", f.nodes)
	took, err := c.registerBatch(nodes)
	if err != nil {
		return err
	}
	r.RegisterS, r.RegisterPerS = round(took.Seconds(), 2), round(float64(f.nodes)/took.Seconds(), 0)
	logf("registered %d nodes in %.1fs (%.0f/s)", f.nodes, took.Seconds(), float64(f.nodes)/took.Seconds())
	time.Sleep(3 * time.Second)
	after := c.memory()
	for i := range c.journals {
		r.RSSBytesPerNode = max(r.RSSBytesPerNode, float64(after[i].RSS-before[i].RSS)/float64(f.nodes))
		r.AnonBytesPerNode = max(r.AnonBytesPerNode, float64(after[i].Anon-before[i].Anon)/float64(f.nodes))
		r.HeapInuseBytesPerNd = max(r.HeapInuseBytesPerNd, (after[i].heapInuse-before[i].heapInuse)/float64(f.nodes))
		r.JournalRSSMB = max(r.JournalRSSMB, round(float64(after[i].RSS)/(1<<20), 1))
		logf("%s: RSS %.1f -> %.1f MB (anon %.1f -> %.1f MB), Go heap in use %.1f -> %.1f MB",
			c.journals[i].id, mb(before[i].RSS), mb(after[i].RSS), mb(before[i].Anon), mb(after[i].Anon), before[i].heapInuse/(1<<20), after[i].heapInuse/(1<<20))
	}

	r.RSSBytesPerNode, r.AnonBytesPerNode, r.HeapInuseBytesPerNd = round(r.RSSBytesPerNode, 0), round(r.AnonBytesPerNode, 0), round(r.HeapInuseBytesPerNd, 0)
	start := time.Now()
	_, listed, err := c.stateCounts(0, nodes[len(nodes)-1].id)
	if err != nil {
		return err
	}
	r.ListS, r.ListNodes = round(time.Since(start).Seconds(), 3), len(listed)
	logf("pact node list -o json: %d nodes in %.3fs (a linearizable read first)", len(listed), r.ListS)
	if len(listed) != f.nodes {
		return fmt.Errorf("pact node list -o json listed %d nodes, want %d", len(listed), f.nodes)
	}
	logf("in-process: the journal's FSM with the same %d registrations; snapshot and restore through Raft's file snapshot store", f.nodes)
	if f.cpuprofile != "" {
		pf, err := os.Create(f.cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pf.Close()
	}
	reg, act, err := fsmScale(nodes, filepath.Join(dir, "fsm-snapshots"))
	if f.cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return err
	}
	r.FSMLiveBytesPerNode, r.SnapshotBytes, r.SnapshotS, r.RestoreS = round(reg.live, 0), reg.size, round(reg.snap.Seconds(), 3), round(reg.restore.Seconds(), 3)
	r.ActiveFSMLiveBytesPerNode, r.ActiveSnapshotBytes, r.ActiveSnapshotS, r.ActiveRestoreS = round(act.live, 0), act.size, round(act.snap.Seconds(), 3), round(act.restore.Seconds(), 3)
	r.BackupBytes, r.BackupSaveS, r.BackupRestoreS = act.backupSize, round(act.backupSave.Seconds(), 3), round(act.backupRestore.Seconds(), 3)

	// Restart a follower: one that has taken its own Raft snapshot, if one
	// does within the wait, so the restart restores from it.
	follower := -1
	if f.snapshotWait > 0 {
		logf("waiting up to %v for a follower's own Raft snapshot", f.snapshotWait)
		if i, d, size, ok := c.waitRaftSnapshot(f.snapshotWait); ok {
			v := round(d.Seconds(), 3)
			r.RaftSnapshotS, r.RaftSnapshotBytes = &v, size
			follower = i
			logf("%s took a Raft snapshot: %.3fs from \"starting snapshot\" to \"snapshot complete\" (log compaction included), %d bytes", c.journals[i].id, d.Seconds(), size)
		} else {
			logf("no Raft snapshot within %v", f.snapshotWait)
		}
	}
	if follower < 0 {
		follower = (max(c.leader(), 0) + 1) % len(c.journals)
	}
	c.stop(follower, 10*time.Second)
	if err := c.start(follower); err != nil {
		return err
	}
	d, nudges, err := c.waitServingNudged(follower, 3*time.Second, 50*time.Second)
	if err != nil {
		return err
	}
	r.RestartS, r.RestartNudges = round(d.Seconds(), 3), nudges
	j := c.journals[follower]
	r.RestartFromSnapshot, _ = logHasSince(j.log, j.started(), regexp.MustCompile(`msg="restored from snapshot"`))
	if rd, ok := logSpan(j.log, j.started(), restoreStartRE, restoreDoneRE); ok {
		v := round(rd.Seconds(), 3)
		r.RaftRestoreS = &v
	}
	logf("%s restarted and serving in %.3fs (from a snapshot: %v; Raft's restore took %v; writes needed before it served: %d)", j.id, d.Seconds(), r.RestartFromSnapshot, fmtOpt(r.RaftRestoreS), nudges)
	if nudges > 0 {
		logf("NOTE: %s did not become ready on its own after the restart: it waited for a new write to be applied (see docs/benchmarks.md, restart after a snapshot)", j.id)
	}
	if err := c.syncRead(follower, nodes[len(nodes)-1].id); err != nil {
		return err
	}

	if err := c.failover(&r); err != nil {
		return err
	}
	reportScale(r)
	return nil
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

type journalMem struct {
	memStatus
	heapInuse float64
}

func (c *cluster) memory() []journalMem {
	out := make([]journalMem, len(c.journals))
	for i, j := range c.journals {
		m, _ := procMem(j.pid())
		out[i].memStatus = m
		if text, err := c.metrics(i); err == nil {
			out[i].heapInuse = metricValue(text, "go_memstats_heap_inuse_bytes")
		}
	}
	return out
}

var (
	snapStartRE    = regexp.MustCompile(`time=(\S+) .*msg="starting snapshot up to"`)
	snapDoneRE     = regexp.MustCompile(`time=(\S+) .*msg="snapshot complete up to"`)
	restoreStartRE = regexp.MustCompile(`time=(\S+) .*msg="starting restore from snapshot"`)
	restoreDoneRE  = regexp.MustCompile(`time=(\S+) .*msg="restored from snapshot"`)
)

// logSpan is the time between the first lines matching a and b in the
// part of a journal log written by the process started at since.
func logSpan(path string, since time.Time, a, b *regexp.Regexp) (time.Duration, bool) {
	okA, la := logHasSince(path, since, a)
	okB, lb := logHasSince(path, since, b)
	if !okA || !okB {
		return 0, false
	}
	ta, errA := time.Parse(time.RFC3339Nano, a.FindStringSubmatch(la)[1])
	tb, errB := time.Parse(time.RFC3339Nano, b.FindStringSubmatch(lb)[1])
	if errA != nil || errB != nil {
		return 0, false
	}
	return tb.Sub(ta), true
}

func fmtOpt(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.3fs", *v)
}

// waitServingNudged waits for journal i to serve; if it has not after
// patience, it commits a write through another journal every second (a
// journal that waits for its registry to catch up becomes ready when the
// next entry is applied) and counts them.
func (c *cluster) waitServingNudged(i int, patience, timeout time.Duration) (time.Duration, int, error) {
	j := c.journals[i]
	deadline := time.Now().Add(timeout)
	nudges := 0
	next := j.started().Add(patience)
	for {
		if ok, _ := logHasSince(j.log, j.started(), servingRE); ok {
			// The serving line's own time, not when we looked.
			if d, ok := logSpan(j.log, j.started(), stormStartRE, servingTimeRE); ok {
				return d, nudges, nil
			}
			return time.Since(j.started()), nudges, nil
		}
		select {
		case <-j.exited():
			return 0, nudges, fmt.Errorf("%s exited before serving; see %s", j.id, j.log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return 0, nudges, fmt.Errorf("%s did not serve within %v; see %s", j.id, timeout, j.log)
		}
		if time.Now().After(next) {
			next = time.Now().Add(time.Second)
			other := c.journals[(i+1)%len(c.journals)]
			if cli, conn, err := c.adminClient(other.grpc); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err = cli.RegisterNode(ctx, &pactv1.RegisterNodeRequest{
					NodeId:   fmt.Sprintf("nudge-%d", nudges),
					Hardware: &pactv1.HardwareIdentity{Macs: []string{fmt.Sprintf("02:ee:00:00:00:%02x", nudges)}},
				})
				cancel()
				conn.Close()
				if err == nil {
					nudges++
				}
			}
		}
	}
}

var (
	stormStartRE  = regexp.MustCompile(launchStart + `\d+ of \S+ at (\S+)`)
	servingTimeRE = regexp.MustCompile(`time=(\S+) .*msg="journal serving"`)
)

// waitRaftSnapshot waits for a follower to log a completed snapshot and
// returns which, how long the snapshot took and the size of its state
// file. (Each journal snapshots on its own timer.)
func (c *cluster) waitRaftSnapshot(wait time.Duration) (int, time.Duration, int64, bool) {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		lead := c.leader()
		for i, j := range c.journals {
			if i == lead {
				continue
			}
			b, err := os.ReadFile(j.log)
			if err != nil {
				continue
			}
			s, e := snapStartRE.FindSubmatch(b), snapDoneRE.FindSubmatch(b)
			if s == nil || e == nil {
				continue
			}
			t0, err0 := time.Parse(time.RFC3339Nano, string(s[1]))
			t1, err1 := time.Parse(time.RFC3339Nano, string(e[1]))
			if err0 != nil || err1 != nil {
				continue
			}
			var size int64
			states, _ := filepath.Glob(filepath.Join(c.dir, c.journals[i].id, "snapshots", "*", "state.bin"))
			for _, st := range states {
				if fi, err := os.Stat(st); err == nil {
					size = max(size, fi.Size())
				}
			}
			return i, t1.Sub(t0), size, true
		}
		time.Sleep(time.Second)
	}
	return -1, 0, 0, false
}

// failover SIGKILLs the leader and times the first write (RegisterNode,
// what `pact node enroll` sends) committed through the survivors.
func (c *cluster) failover(r *scaleResult) error {
	lead := -1
	for range 100 {
		if lead = c.leader(); lead >= 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if lead < 0 {
		return fmt.Errorf("no leader before the failover")
	}
	var survivors []int
	var clients []pactv1.AdminServiceClient
	for i, j := range c.journals {
		if i == lead {
			continue
		}
		cli, conn, err := c.adminClient(j.grpc)
		if err != nil {
			return err
		}
		defer conn.Close()
		// Open the connection before the kill.
		ctx, cancel := withTimeout(5 * time.Second)
		_, _ = cli.JournalStatus(ctx, &pactv1.JournalStatusRequest{})
		cancel()
		survivors = append(survivors, i)
		clients = append(clients, cli)
	}
	logf("failover: SIGKILL of the leader %s (pid %d)", c.journals[lead].id, c.journals[lead].pid())
	killed := time.Now()
	if err := c.kill(lead); err != nil {
		return err
	}
	leaderSeen := make(chan time.Duration, 1)
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	go func() {
		for {
			for _, i := range survivors {
				if m, err := c.metrics(i); err == nil && metricValue(m, "pact_journal_is_leader") == 1 {
					leaderSeen <- time.Since(killed)
					return
				}
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	deadline := killed.Add(60 * time.Second)
	for k := 0; ; k++ {
		i := k % len(clients)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := clients[i].RegisterNode(ctx, &pactv1.RegisterNodeRequest{
			NodeId:   fmt.Sprintf("failover-%d", k),
			Hardware: &pactv1.HardwareIdentity{Macs: []string{fmt.Sprintf("02:fa:11:00:%02x:%02x", byte(k>>8), byte(k))}},
		})
		cancel()
		r.FailoverWritesN = k + 1
		if err == nil {
			r.FailoverS = round(time.Since(killed).Seconds(), 3)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no write succeeded within 60s of the leader's death: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case d := <-leaderSeen:
		r.NewLeaderS = round(d.Seconds(), 3)
	case <-time.After(5 * time.Second):
	}
	logf("failover: first write committed %.3fs after the kill (%d attempts); a survivor reported itself leader after %.3fs", r.FailoverS, r.FailoverWritesN, r.NewLeaderS)
	// The CLI agrees.
	addrs := []string{c.journals[survivors[0]].grpc, c.journals[survivors[1%len(survivors)]].grpc}
	if _, stderr, code, err := c.pact(nil, addrs, "node", "enroll", "failover-cli", "--mac", "02:fa:11:ff:ff:ff"); err != nil || code != 0 {
		return fmt.Errorf("pact node enroll after the failover: exit %d %v\n%s", code, err, stderr)
	}
	return nil
}

type fsmScaleResult struct {
	live          float64 // bytes of live heap per node
	size          int64
	snap, restore time.Duration
	// The operator's backup of the same state: a snapshot file as the
	// leader writes it for pact journal snapshot save, and pact-journal
	// restore of it into a new data directory, then the FSM restore a
	// journal starting there does.
	backupSave, backupRestore time.Duration
	backupSize                int64
}

// fsmScale applies the registrations (then activations) to the journal's
// FSM in this process, measures the live heap per node, and snapshots and
// restores through raft.FileSnapshotStore (which fsyncs).
func fsmScale(nodes []benchNode, dir string) (reg, act fsmScaleResult, err error) {
	store, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		return reg, act, err
	}
	heap := func() uint64 {
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	at := time.Now().UnixNano()
	var index uint64
	apply := func(fsm *raftfsm.FSM, cmd *pactv1.Command) error {
		index++
		cmd.AtUnixNano, cmd.Source, cmd.CorrelationId = at, "127.0.0.1:40000", fmt.Sprintf("%016x", index)
		data, err := raftfsm.Encode(cmd)
		if err != nil {
			return err
		}
		res, _ := fsm.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}).(*raftfsm.Result)
		if res != nil && res.Err != nil {
			return res.Err
		}
		return nil
	}
	h0 := heap()
	fsm := raftfsm.New()
	hws := make([]*pactv1.HardwareIdentity, len(nodes))
	for i, n := range nodes {
		id, err := hwid.Normalize([]string{n.mac}, n.bmc, "")
		if err != nil {
			return reg, act, err
		}
		hws[i] = &pactv1.HardwareIdentity{Macs: id.MACs, BmcSerial: id.BMCSerial}
		if err := apply(fsm, &pactv1.Command{Actor: "admin/admin", Op: &pactv1.Command_RegisterNode{RegisterNode: &pactv1.RegisterNodeOp{NodeId: n.id, Hardware: hws[i]}}}); err != nil {
			return reg, act, fmt.Errorf("register %s: %w", n.id, err)
		}
	}
	reg.live = float64(heap()-h0) / float64(len(nodes))
	if reg.size, reg.snap, reg.restore, err = snapshotRestore(fsm, store, index); err != nil {
		return reg, act, err
	}
	logf("registered: FSM %.0f B/node live heap; snapshot %d bytes in %.3fs, restore %.3fs", reg.live, reg.size, reg.snap.Seconds(), reg.restore.Seconds())

	// Every node Active, with a certificate of real size (DER of a real
	// agent certificate; serial and key fingerprint unique per node).
	kit, err := newCeilingKit(filepath.Dir(dir), 0)
	if err != nil {
		return reg, act, err
	}
	cert, err := kit.agentCert("scale-000001")
	if err != nil {
		return reg, act, err
	}
	der := cert.Certificate[0]
	notAfter := time.Now().Add(72 * time.Hour).Unix()
	for i, n := range nodes {
		sum := sha256.Sum256([]byte(n.id))
		if err := apply(fsm, &pactv1.Command{Actor: "agent/" + n.id, Op: &pactv1.Command_Activate{Activate: &pactv1.ActivateOp{
			NodeId: n.id, Reported: hws[i],
			Cert: &pactv1.CertificateInfo{Serial: fmt.Sprintf("%032x", i+1), SpkiSha256: hex.EncodeToString(sum[:]), NotBeforeUnix: time.Now().Unix(), NotAfterUnix: notAfter, IssuerSerial: "0123456789abcdef0123456789abcdef", Der: der},
		}}}); err != nil {
			return reg, act, fmt.Errorf("activate %s: %w", n.id, err)
		}
	}
	act.live = float64(heap()-h0) / float64(len(nodes))
	if act.size, act.snap, act.restore, err = snapshotRestore(fsm, store, index); err != nil {
		return reg, act, err
	}
	logf("active: FSM %.0f B/node live heap; snapshot %d bytes in %.3fs, restore %.3fs", act.live, act.size, act.snap.Seconds(), act.restore.Seconds())
	if act.backupSize, act.backupSave, act.backupRestore, err = backupRestore(fsm, filepath.Join(filepath.Dir(dir), "backup"), filepath.Join(filepath.Dir(dir), "ca.pem"), kit.ca.Root().Raw, len(nodes)); err != nil {
		return reg, act, fmt.Errorf("backup and restore: %w", err)
	}
	logf("active: backup file %d bytes saved in %.3fs; pact-journal restore plus the FSM restore of a journal starting from it %.3fs", act.backupSize, act.backupSave.Seconds(), act.backupRestore.Seconds())
	runtime.KeepAlive(fsm)
	return reg, act, nil
}

// backupRestore measures the operator's backup path on fsm: the leader's
// part of pact journal snapshot save (a consistent copy of the state, the
// snapshot file with its header and checksum, written and fsynced; the
// stream to the CLI is left out), then pact-journal restore of the file
// into a new data directory (read, checksum, full validation, a Raft
// snapshot written) and the FSM restore a journal starting there does.
func backupRestore(fsm *raftfsm.FSM, dir, rootFile string, rootDER []byte, want int) (int64, time.Duration, time.Duration, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, 0, 0, err
	}
	file := filepath.Join(dir, "pact.snap")
	began := time.Now()
	state, index, nodes, err := fsm.Consistent()
	if err != nil {
		return 0, 0, 0, err
	}
	f, err := os.Create(file)
	if err != nil {
		return 0, 0, 0, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	rootSum := sha256.Sum256(rootDER)
	h := &pactv1.SnapshotHeader{Domain: "pact.local", RootSha256: rootSum[:], Index: index, Term: 1, TakenAtUnixNano: time.Now().UnixNano(), TakenBy: "bench", Nodes: uint64(nodes)}
	if err := snapfile.Write(bw, h, state); err != nil {
		f.Close()
		return 0, 0, 0, err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return 0, 0, 0, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, 0, 0, err
	}
	fi, _ := f.Stat()
	if err := f.Close(); err != nil {
		return 0, 0, 0, err
	}
	save := time.Since(began)

	began = time.Now()
	dataDir := filepath.Join(dir, "restored")
	res, err := journal.Restore(journal.RestoreConfig{Snapshot: file, DataDir: dataDir, NodeID: "r1",
		InitialCluster: []journal.Peer{{ID: "r1", RaftAddr: "127.0.0.1:1"}}, RootCertFile: rootFile})
	if err != nil {
		return 0, 0, 0, err
	}
	store, err := raft.NewFileSnapshotStoreWithLogger(dataDir, 2, hclog.NewNullLogger())
	if err != nil {
		return 0, 0, 0, err
	}
	list, err := store.List()
	if err != nil || len(list) != 1 {
		return 0, 0, 0, fmt.Errorf("restored data directory: %d snapshots, %v", len(list), err)
	}
	_, rc, err := store.Open(list[0].ID)
	if err != nil {
		return 0, 0, 0, err
	}
	fresh := raftfsm.New()
	if err := fresh.Restore(rc); err != nil {
		return 0, 0, 0, err
	}
	restore := time.Since(began)
	if n := len(fresh.Nodes(raftfsm.Filter{State: pactv1.NodeState_NODE_STATE_ACTIVE})); n != want || res.Nodes != want {
		return 0, 0, 0, fmt.Errorf("restored %d active nodes (file: %d), want %d", n, res.Nodes, want)
	}
	return fi.Size(), save, restore, nil
}

// snapshotRestore does what Raft does: FSM.Snapshot and Persist into a
// file snapshot sink (written, fsynced, renamed), then Open and
// FSM.Restore into a fresh FSM.
func snapshotRestore(fsm *raftfsm.FSM, store *raft.FileSnapshotStore, index uint64) (int64, time.Duration, time.Duration, error) {
	began := time.Now()
	snap, err := fsm.Snapshot()
	if err != nil {
		return 0, 0, 0, err
	}
	sink, err := store.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	if err := snap.Persist(sink); err != nil {
		return 0, 0, 0, err
	}
	snap.Release()
	took := time.Since(began)
	began = time.Now()
	meta, rc, err := store.Open(sink.ID())
	if err != nil {
		return 0, 0, 0, err
	}
	fresh := raftfsm.New()
	if err := fresh.Restore(rc); err != nil {
		return 0, 0, 0, err
	}
	restore := time.Since(began)
	if n := len(fresh.Nodes(raftfsm.Filter{})); n == 0 {
		return 0, 0, 0, fmt.Errorf("restored FSM is empty")
	}
	return meta.Size, took, restore, nil
}

func reportScale(r scaleResult) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(os.Stdout, "\npact registry scale: %d nodes, %d journals (bbolt on disk), %d CPUs\n\n", r.Nodes, r.Journals, runtime.NumCPU())
	row := func(k string, v any, target string) { fmt.Fprintf(w, "%s\t%v\t%s\n", k, v, target) }
	row("measure", "value", "target")
	row("registration (one pact node enroll --batch)", fmt.Sprintf("%.1f s, %.0f nodes/s", r.RegisterS, r.RegisterPerS), "")
	row("journal RSS growth per registered node (max of journals)", fmt.Sprintf("%.0f B", r.RSSBytesPerNode), "<= 2048 B")
	row("  of which anonymous memory", fmt.Sprintf("%.0f B", r.AnonBytesPerNode), "")
	row("  Go heap in use growth per node", fmt.Sprintf("%.0f B", r.HeapInuseBytesPerNd), "")
	row("pact node list -o json of every node", fmt.Sprintf("%.3f s (%d nodes)", r.ListS, r.ListNodes), "")
	row("FSM live heap per node, registered / active", fmt.Sprintf("%.0f / %.0f B", r.FSMLiveBytesPerNode, r.ActiveFSMLiveBytesPerNode), "")
	row("snapshot (FSM.Snapshot + Persist + fsync), registered / active", fmt.Sprintf("%.3f / %.3f s (%d / %d bytes)", r.SnapshotS, r.ActiveSnapshotS, r.SnapshotBytes, r.ActiveSnapshotBytes), "<= 1 s")
	row("restore (Open + FSM.Restore), registered / active", fmt.Sprintf("%.3f / %.3f s", r.RestoreS, r.ActiveRestoreS), "<= 1 s")
	row("backup save, all active (snapshot file, fsync)", fmt.Sprintf("%.3f s (%d bytes)", r.BackupSaveS, r.BackupBytes), "<= 3 s")
	row("backup restore, all active (pact-journal restore + FSM restore)", fmt.Sprintf("%.3f s", r.BackupRestoreS), "<= 3 s")
	if r.RaftSnapshotS != nil {
		row("journal's own Raft snapshot incl. log compaction", fmt.Sprintf("%.3f s (%d bytes)", *r.RaftSnapshotS, r.RaftSnapshotBytes), "")
	} else {
		row("journal's own Raft snapshot", "not taken in time", "")
	}
	row("Raft snapshot restore at a follower's restart (from its log)", fmtOpt(r.RaftRestoreS), "<= 1 s")
	row("follower restart to serving", fmt.Sprintf("%.3f s (from a snapshot: %v; writes needed before it served: %d)", r.RestartS, r.RestartFromSnapshot, r.RestartNudges), "")
	row("leader SIGKILL to first committed write", fmt.Sprintf("%.3f s (%d attempts)", r.FailoverS, r.FailoverWritesN), "<= 3 s")
	row("leader SIGKILL to a survivor leading", fmt.Sprintf("%.3f s", r.NewLeaderS), "")
	w.Flush()
	fmt.Println()
	out := map[string]any{"bench": "scale"}
	b, _ := json.Marshal(r)
	_ = json.Unmarshal(b, &out)
	b, _ = json.Marshal(out)
	fmt.Println(string(b))
}
