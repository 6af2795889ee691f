package integration

// A rolling upgrade from the previous release (RELEASES, built from this
// repository's history by scripts/release-previous.sh and cached in
// .cache/releases) to this tree, on the real binaries (issue 37): three
// journals of the previous release with pact-agent processes streaming and
// an operator's enrollments, renewals and decommissions going on, upgraded
// one journal at a time (stop, the new binary on the same data directory
// and flags) in each order: followers first, the leader first, the leader
// killed half way. Agents and the CLI of each release meet journals of the
// other, and a backup of the previous release restores on this one.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/polltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// throughOldEnv turns on the status half of the quorum level's assertions
// as a site meets them with PACT_JOURNAL naming every journal, so that a
// journal of the previous release may answer first: its status has no
// levels (it knows none; the CLI shows LEVEL ?), which is by design, so it
// is off by default. record-ca through every journal always runs (a
// journal that does not know the call is failed over: finding F4).
const throughOldEnv = "PACT_TEST_LEVEL_THROUGH_OLD_JOURNAL"

var (
	previousOnce sync.Once
	previousDir  string
	previousErr  error
)

// previousRelease builds the previous release once per test binary with
// scripts/release-previous.sh (a git worktree at its RELEASES commit and
// that release's own make build; no git remote, modules from the module
// cache or proxy) and returns its bin directory; the script keeps the
// binaries in .cache/releases, so a rerun builds nothing.
func previousRelease(t *testing.T) string {
	t.Helper()
	previousOnce.Do(func() {
		began := time.Now()
		cmd := exec.Command("./scripts/release-previous.sh")
		cmd.Dir = ".."
		out, err := cmd.CombinedOutput()
		if err != nil {
			previousErr = fmt.Errorf("make release-previous: %w\n%s", err, out)
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		previousDir = lines[len(lines)-1]
		fmt.Fprintf(os.Stderr, "previous release in %s (%v)\n", previousDir, time.Since(began).Round(time.Millisecond))
	})
	if previousErr != nil {
		t.Fatal(previousErr)
	}
	return previousDir
}

// binVersion is what the binary in dir prints for --version: "vX.Y.Z".
func binVersion(t *testing.T, dir, name string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(dir, name), "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", filepath.Join(dir, name), err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		t.Fatalf("%s --version: %q", name, out)
	}
	return f[1]
}

// levelStatus is pact journal status -o json with the quorum level.
type levelStatus struct {
	LeaderID           string `json:"leader_id"`
	QuorumFeatureLevel *int   `json:"quorum_feature_level"`
	Members            []struct {
		JournalID    string `json:"journal_id"`
		Voter        bool   `json:"voter"`
		Reachable    bool   `json:"reachable"`
		State        string `json:"state"`
		Version      string `json:"version"`
		Halted       string `json:"halted"`
		AppliedIndex uint64 `json:"applied_index"`
		FeatureLevel *int   `json:"feature_level"`
	} `json:"members"`
}

func (s levelStatus) quorumLevel() int {
	if s.QuorumFeatureLevel == nil {
		return 0
	}
	return *s.QuorumFeatureLevel
}

// upgrade is one rolling upgrade under way: the quorum, the two releases,
// the operator's workload and the agents.
type upgrade struct {
	t         *testing.T
	q         *quorum
	prev, cur string // bin directories
	prevV     string // "v0.1.0"
	curV      string
	upgraded  map[int]bool
	recordCA  []string // pact journal record-ca j9 FILE: a level-2 command
	agents    []*upgradeAgent
	load      *opLoad
	stopLoad  context.CancelFunc
	loadDone  chan struct{}
	ca        string
}

// upgradeAgent is a pact-agent process and its node.
type upgradeAgent struct {
	node    testNode
	p       *proc
	release string // the bin directory it runs from
	metrics string
	serial  string
}

// statusFrom runs pact journal status -o json with the CLI in bin.
func (u *upgrade) statusFrom(bin string, addrs ...string) (levelStatus, int, string) {
	u.t.Helper()
	stdout, stderr, code := runPactFrom(u.t, bin, u.q.env(addrs...), "journal", "status", "-o", "json")
	var st levelStatus
	if err := json.Unmarshal([]byte(stdout), &st); err != nil && code != 7 && code != 10 {
		u.t.Fatalf("pact journal status -o json (%s): exit %d, not JSON: %v\n%s%s", bin, code, err, stdout, stderr)
	}
	return st, code, stderr
}

// healthy waits (bounded) until pact journal status, from every journal's
// view, shows a leader and every member reachable, voting, not halted and
// running the release it should, and returns it.
func (u *upgrade) healthy(what string) levelStatus {
	u.t.Helper()
	var last levelStatus
	var lastCode int
	var lastErr string
	polltest.Until(u.t, 60*time.Second, 200*time.Millisecond, func() bool {
		st, code, stderr := u.statusFrom(u.cur, u.q.addrs()...)
		last, lastCode, lastErr = st, code, stderr
		if code != 0 || st.LeaderID == "" || len(st.Members) != len(u.q.members) {
			return false
		}
		for _, m := range st.Members {
			if !m.Reachable || !m.Voter || m.Halted != "" {
				return false
			}
			i := u.index(m.JournalID)
			if want := u.versionOf(i); !versionIs(m.Version, want) {
				return false
			}
		}
		return true
	}, "%s: the quorum is not healthy: %v", what, lazy(func() string { return fmt.Sprintf("status exit %d %+v\n%s", lastCode, last, lastErr) }))
	for _, m := range last.Members {
		if m.Halted != "" {
			u.t.Errorf("%s: %s halted: %s", what, m.JournalID, m.Halted)
		}
	}
	return last
}

// versionIs says whether a version pact journal status shows ("v0.1.0
// (commit …)") is want ("v0.1.0").
func versionIs(got, want string) bool { return got == want || strings.HasPrefix(got, want+" ") }

func (u *upgrade) index(id string) int {
	for i, m := range u.q.members {
		if m.id == id {
			return i
		}
	}
	u.t.Fatalf("no member %s", id)
	return -1
}

func (u *upgrade) versionOf(i int) string {
	if u.upgraded[i] {
		return u.curV
	}
	return u.prevV
}

// pending is the ids of the journals still on the previous release.
func (u *upgrade) pending() []string {
	var out []string
	for i, m := range u.q.members {
		if !u.upgraded[i] {
			out = append(out, m.id)
		}
	}
	return out
}

// checkLevel checks the quorum level status reports, and that the level-2
// command is refused (mixed) or works (all upgraded).
func (u *upgrade) checkLevel(what string, st levelStatus) {
	u.t.Helper()
	pending := u.pending()
	var upAddrs []string
	for i, m := range u.q.members {
		if u.upgraded[i] {
			upAddrs = append(upAddrs, m.grpc)
		}
	}
	// As an upgraded journal answers, and as whichever journal answers
	// first when PACT_JOURNAL names every journal, as on a site (a journal
	// of the previous release, which knows no levels, may).
	stUp, _, _ := u.statusFrom(u.cur, upAddrs...)
	u.checkStatusLevels(what+" (status from an upgraded journal)", stUp, pending)
	// A journal of the previous release knows no levels: a status it
	// answers has none (the CLI shows LEVEL ?), by design (docs/upgrade.md).
	if os.Getenv(throughOldEnv) == "1" {
		u.checkStatusLevels(what+" (status through every journal)", st, pending)
	}
	if len(pending) > 0 {
		u.refusedLevel2(what+" (through an upgraded journal)", pending, upAddrs)
		// Every address given, as on a site: a journal of the previous
		// release that does not know record-ca answers Unimplemented, and
		// the CLI moves on to one that refuses it QUORUM_VERSION.
		u.refusedLevel2(what+" (through every journal)", pending, u.q.addrs())
		return
	}
	var final levelStatus
	polltest.Until(u.t, 30*time.Second, 200*time.Millisecond, func() bool {
		final, _, _ = u.statusFrom(u.cur, u.q.addrs()...)
		return final.quorumLevel() == int(raftfsm.FeatureLevel)
	}, "%s: quorum_feature_level stays %v after every journal was upgraded, want %d (this tree's)", what, lazy(func() string { return fmt.Sprint(final.quorumLevel()) }), raftfsm.FeatureLevel)
}

// checkStatusLevels checks each member's feature level and the quorum's
// in one pact journal status answer.
func (u *upgrade) checkStatusLevels(what string, st levelStatus, pending []string) {
	u.t.Helper()
	for _, m := range st.Members {
		i := u.index(m.JournalID)
		got := 0
		if m.FeatureLevel != nil {
			got = *m.FeatureLevel
		}
		if u.upgraded[i] && got != int(raftfsm.FeatureLevel) {
			u.t.Errorf("%s: %s runs %s and advertises feature level %d, want %d", what, m.JournalID, m.Version, got, raftfsm.FeatureLevel)
		}
		if !u.upgraded[i] && got != 0 {
			u.t.Errorf("%s: %s runs the previous release (%s) and shows feature level %d, want none (0)", what, m.JournalID, m.Version, got)
		}
	}
	if lv := st.quorumLevel(); len(pending) > 0 && lv != 1 {
		u.t.Errorf("%s: quorum_feature_level %d with %v on the previous release, want 1", what, lv, pending)
	}
}

// refusedLevel2 tries pact journal record-ca (new at level 2) with the
// CLI of this tree against every journal and wants it refused with
// QUORUM_VERSION naming the journals still to upgrade.
func (u *upgrade) refusedLevel2(what string, pending, addrs []string) {
	u.t.Helper()
	stdout, stderr, code := runPact(u.t, u.q.env(addrs...), u.recordCA...)
	out := stdout + stderr
	if code != 6 || !strings.Contains(out, "QUORUM_VERSION") {
		u.t.Errorf("%s: pact journal record-ca with %v on the previous release: exit %d, want 6 (FAILED_PRECONDITION QUORUM_VERSION)\n%s", what, pending, code, out)
		return
	}
	for _, id := range pending {
		if !regexp.MustCompile(`\b` + id + `\b`).MatchString(out) {
			u.t.Errorf("%s: the QUORUM_VERSION refusal does not name %s, still to upgrade:\n%s", what, id, out)
		}
	}
}

// level2Works runs pact journal record-ca once every journal runs this
// tree: it must be recorded on every journal.
func (u *upgrade) level2Works(what string) {
	u.t.Helper()
	var out string
	var code int
	polltest.Until(u.t, 30*time.Second, 300*time.Millisecond, func() bool {
		var stdout, stderr string
		stdout, stderr, code = runPact(u.t, u.q.env(u.q.addrs()...), u.recordCA...)
		out = stdout + stderr
		// Refused as QUORUM_VERSION while the leader has not recorded
		// level 2 yet; unavailable during an election.
		return code == 0
	}, "%s: pact journal record-ca after the last journal was upgraded: %v", what, lazy(func() string { return fmt.Sprintf("exit %d\n%s", code, out) }))
	for i := range u.q.members {
		u.q.syncRead(i, "upg-0001")
		stdout, stderr, code := runPact(u.t, u.q.env(u.q.members[i].grpc), "journal", "intermediates", "--journal-cas")
		if code != 0 || !strings.Contains(stdout, "j9") {
			u.t.Errorf("%s: %s does not list j9's recorded journal CA: exit %d\n%s%s", what, u.q.members[i].id, code, stdout, stderr)
		}
	}
}

// startAgent starts a pact-agent of the release in bin for n, against
// every journal, and waits until it enrolled and streams.
func (u *upgrade) startAgent(bin string, n testNode) *upgradeAgent {
	u.t.Helper()
	metrics := freeAddrs(u.t, 1)[0]
	a := &upgradeAgent{node: n, release: bin, metrics: metrics}
	a.p = startFrom(u.t, bin, nil, "pact-agent", "--journal", strings.Join(u.q.addrs(), ","), "--ca", u.ca,
		"--mac", n.mac, "--bmc-serial", n.bmc, "--metrics-listen", metrics, "--status-socket", filepath.Join(u.t.TempDir(), "agent.sock"))
	a.serial = a.p.waitLineWithin(u.t, enrolledRE, 60*time.Second)[1]
	a.p.waitLineWithin(u.t, streamOpenRE, 60*time.Second)
	u.agents = append(u.agents, a)
	return a
}

// step upgrades journal i: SIGTERM (or SIGKILL), then this tree's
// pact-journal on the same data directory and flags.
func (u *upgrade) step(i int, kill bool) {
	u.t.Helper()
	id := u.q.members[i].id
	leader := u.leaderName()
	began := time.Now()
	if kill {
		if err := u.q.pq.Kill(i); err != nil {
			u.t.Fatalf("SIGKILL %s: %v", id, err)
		}
	} else {
		if err := u.q.pq.Stop(i); err != nil {
			u.t.Fatalf("stopping %s: %v", id, err)
		}
		if err := u.q.pq.ExitError(i); err != nil {
			u.t.Errorf("%s (%s) exited on SIGTERM: %v\n%s", id, u.versionOf(i), err, launchTail(u.q.output(i)))
		}
	}
	u.q.pq.SetBin(i, u.cur)
	u.upgraded[i] = true
	u.q.launch(i)
	u.q.waitServing(i)
	how := "stopped"
	if kill {
		how = "SIGKILLed"
	}
	st := u.healthy(fmt.Sprintf("after upgrading %s", id))
	u.t.Logf("upgraded %s (%s, leader was %s): serving and the quorum healthy %v later; leader now %s; still on %s: %v",
		id, how, leader, time.Since(began).Round(time.Millisecond), st.LeaderID, u.prevV, u.pending())
	u.checkLevel("after upgrading "+id, st)
	// The mixed quorum (or the upgraded one) takes writes of every kind
	// before the next step.
	u.load.progress(u.t, "after upgrading "+id)
}

func (u *upgrade) leaderName() string {
	for i, m := range u.q.members {
		if u.q.isLeader(i) {
			return m.id
		}
	}
	return "none"
}

func launchTail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// ---------------------------------------------------------------------------
// The operator's workload: registrations, enrollments, renewals and
// decommissions, one at a time, each remembered once acknowledged.

// nodeExpect is what the registry must hold for a node after the workload.
type nodeExpect struct {
	state string // registered, active, revoked
	// serials: the certificate serials the node may hold (one when the
	// client knows; empty when an outcome it could not learn leaves any).
	serials []string
	// uncertain: an operation on it ended without an answer (the journal
	// may or may not have acted); only its presence is checked.
	uncertain bool
	ack       ack // its enrollment (key and chain) for a renewal
}

type opLoad struct {
	t     *testing.T
	u     *upgrade
	enr   *enroller
	nodes []testNode
	mu    sync.Mutex
	want  map[string]*nodeExpect
	order []string // registered, in order
	// gate is held by each round of the workload; pause takes it.
	gate sync.Mutex
	// counts of acknowledged operations, and of retried ones
	registered, enrolled, renewed, decommissioned, retried int
	errs                                                   []string
}

// cli runs the CLI, alternating the two releases, retrying (bounded) while
// the answer is unavailable or rate limited; it returns the last exit code
// and output, and whether an attempt failed in a way the journal may have
// acted on.
func (l *opLoad) cli(ctx context.Context, k int, args ...string) (int, string, bool) {
	bin := l.u.cur
	if k%2 == 1 {
		bin = l.u.prev
	}
	uncertain := false
	for attempt := 0; ; attempt++ {
		stdout, stderr, code := runPactFrom(l.t, bin, l.u.q.env(l.u.q.addrs()...), append(args, "--timeout", "15s")...)
		if (code != 7 && code != 8) || attempt >= 40 || ctx.Err() != nil {
			return code, stdout + stderr, uncertain
		}
		if code == 7 {
			uncertain = true
		}
		l.mu.Lock()
		l.retried++
		l.mu.Unlock()
		time.Sleep(250 * time.Millisecond) // the CLI gave up on every journal: a leader is being elected
	}
}

// progress waits until the workload has registered, enrolled, renewed
// and decommissioned at least once more from now.
func (l *opLoad) progress(t *testing.T, what string) {
	t.Helper()
	l.mu.Lock()
	r, e, n, d := l.registered, l.enrolled, l.renewed, l.decommissioned
	l.mu.Unlock()
	polltest.Until(t, 90*time.Second, 100*time.Millisecond, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.registered > r+1 && l.enrolled > e && l.renewed > n && l.decommissioned > d
	}, "%s: the workload makes no progress: %v", what, lazy(func() string {
		l.mu.Lock()
		defer l.mu.Unlock()
		return fmt.Sprintf("%d registered, %d enrolled, %d renewed, %d decommissioned; %s", l.registered, l.enrolled, l.renewed, l.decommissioned, strings.Join(l.errs, "\n"))
	}))
}

func (l *opLoad) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
}

// run works until ctx ends: register node k, enroll it, renew an enrolled
// one, and decommission every fourth.
func (l *opLoad) run(ctx context.Context) {
	for k := 0; k < len(l.nodes) && ctx.Err() == nil; k++ {
		l.gate.Lock()
		l.round(ctx, k)
		l.gate.Unlock()
	}
}

// pause waits for the workload's round in progress and holds the next
// until resume is called.
func (l *opLoad) pause() (resume func()) {
	l.gate.Lock()
	return l.gate.Unlock
}

// round registers node k, enrolls it, renews one and decommissions one.
func (l *opLoad) round(ctx context.Context, k int) {
	n := l.nodes[k]
	code, out, uncertain := l.cli(ctx, k, "node", "enroll", n.id, "--mac", n.mac, "--bmc-serial", n.bmc)
	switch {
	case code == 0:
	case code == 4 && uncertain:
		// An attempt that got no answer had registered it.
	default:
		if ctx.Err() == nil {
			l.fail("registering %s: exit %d (uncertain %v)\n%s", n.id, code, uncertain, out)
		}
		return
	}
	l.mu.Lock()
	l.want[n.id] = &nodeExpect{state: "registered"}
	l.order = append(l.order, n.id)
	l.registered++
	l.mu.Unlock()

	if k%5 == 4 {
		return // stays registered
	}
	ectx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	a := l.enr.enroll(ectx, n)
	cancel()
	l.mu.Lock()
	switch {
	case a.err != nil:
		l.want[n.id].uncertain = true
		l.errs = append(l.errs, fmt.Sprintf("enrolling %s: %v", n.id, a.err))
	case a.unknown:
		l.want[n.id] = &nodeExpect{state: "active"}
		l.enrolled++
	default:
		l.want[n.id] = &nodeExpect{state: "active", serials: []string{a.serial}, ack: a}
		l.enrolled++
	}
	l.mu.Unlock()

	if k%3 == 0 {
		l.renew(n.id)
	}
	if k%4 == 3 && k >= 4 {
		l.decommission(ctx, k, l.nodes[k-2].id)
	}
}

// renew renews node id's certificate over mTLS with its current one, as
// pact-agent does at two thirds of its lifetime (the journals' shortest
// lifetime, 10 minutes, is too long for the agents to renew on their own
// within this test).
func (l *opLoad) renew(id string) {
	l.mu.Lock()
	w := l.want[id]
	l.mu.Unlock()
	if w == nil || w.uncertain || len(w.serials) != 1 || w.ack.resp == nil {
		return
	}
	key, err := newAgentKey()
	if err != nil {
		l.fail("renew %s: %v", id, err)
		return
	}
	cert := tls.Certificate{Certificate: w.ack.resp.GetCertChainDer(), PrivateKey: w.ack.key.key}
	var last error
	uncertain := false
	for attempt, i := 0, 0; attempt < 60; attempt, i = attempt+1, i+1 {
		addr := l.u.q.members[i%len(l.u.q.members)].grpc
		conn := dialJournal(l.t, l.enr.roots, addr, &cert)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := pactv1.NewEnrollmentServiceClient(conn).RenewCert(ctx, &pactv1.RenewCertRequest{CurrentSerial: w.serials[0], CsrDer: key.csr})
		cancel()
		conn.Close()
		if err == nil {
			l.mu.Lock()
			next := ack{node: w.ack.node, key: key, serial: resp.GetSerial(),
				resp: &pactv1.EnrollResponse{NodeId: resp.GetNodeId(), CertChainDer: resp.GetCertChainDer(), Serial: resp.GetSerial()}}
			w.serials, w.ack = []string{resp.GetSerial()}, next
			if uncertain {
				// A renewal that got no answer may have committed first:
				// this one found the registry as the first left it.
				w.uncertain = true
			}
			l.renewed++
			l.mu.Unlock()
			return
		}
		last = err
		pe := apierr.FromError(err)
		if pe.Code != codes.Unavailable && pe.Code != codes.DeadlineExceeded && pe.Code != codes.ResourceExhausted {
			break
		}
		if pe.Code != codes.ResourceExhausted {
			uncertain = true
		}
		l.mu.Lock()
		l.retried++
		l.mu.Unlock()
		time.Sleep(250 * time.Millisecond) // the journal is restarting; the next one is tried
	}
	l.mu.Lock()
	w.uncertain = true
	l.mu.Unlock()
	if !uncertain {
		l.fail("renewing %s: %v", id, last)
	}
}

// decommission revokes node id with the CLI.
func (l *opLoad) decommission(ctx context.Context, k int, id string) {
	l.mu.Lock()
	w := l.want[id]
	l.mu.Unlock()
	if w == nil || w.uncertain {
		return
	}
	code, out, uncertain := l.cli(ctx, k, "node", "decommission", id, "--force")
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case code == 0:
		w.state = "revoked"
		w.uncertain = w.uncertain || uncertain
		l.decommissioned++
	case uncertain:
		w.uncertain = true
	default:
		if ctx.Err() == nil {
			l.errs = append(l.errs, fmt.Sprintf("decommissioning %s: exit %d\n%s", id, code, out))
		}
	}
}

// ---------------------------------------------------------------------------

// newUpgrade starts three journals of the previous release, the
// operator's workload and the previous release's agents.
func newUpgrade(t *testing.T, prefix string, agents int) *upgrade {
	prev := previousRelease(t)
	u := &upgrade{t: t, prev: prev, cur: binDir, upgraded: map[int]bool{}}
	u.prevV, u.curV = binVersion(t, prev, "pact-journal"), binVersion(t, binDir, "pact-journal")
	if u.prevV == u.curV {
		t.Fatalf("the previous release and this tree both say %s", u.curV)
	}
	u.q = startQuorumFrom(t, prev, 3)
	u.ca = filepath.Join(u.q.dir, "ca.pem")
	t.Cleanup(func() {
		if t.Failed() {
			for _, a := range u.agents {
				t.Logf("--- agent %s (%s):\n%s", a.node.id, a.release, launchTail(a.p.output()))
			}
		}
	})
	// The level-2 command: record a journal CA for j9, which no journal
	// uses (a journal CA made for it now, as the ceremony would).
	pkiArgs, err := u.q.pq.PKIArgs("j9")
	if err != nil {
		t.Fatal(err)
	}
	u.recordCA = []string{"journal", "record-ca", "j9", pkiArgs[3], "--reason", "upgrade test"}
	st := u.healthy("the quorum of " + u.prevV)
	t.Logf("%s: three journals of %s (leader %s); this tree is %s", prefix, u.prevV, st.LeaderID, u.curV)

	nodes := inventory(prefix, 400)
	agentNodes, opNodes := nodes[:agents], nodes[agents:]
	u.q.registerBatch(append([]testNode{{id: "upg-0001", mac: "52:54:aa:00:00:01", bmc: "SN-UPG-1"}}, agentNodes...))
	for _, n := range agentNodes {
		u.startAgent(prev, n)
	}
	u.load = &opLoad{t: t, u: u, enr: newEnroller(t, u.ca, u.q.addrs()), nodes: opNodes, want: map[string]*nodeExpect{}}
	ctx, cancel := context.WithCancel(context.Background())
	u.stopLoad, u.loadDone = cancel, make(chan struct{})
	go func() {
		defer close(u.loadDone)
		u.load.run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-u.loadDone })
	// Some of every operation before the first journal stops.
	polltest.Until(t, 60*time.Second, 100*time.Millisecond, func() bool {
		u.load.mu.Lock()
		defer u.load.mu.Unlock()
		return u.load.decommissioned >= 1 && u.load.renewed >= 1
	}, "the workload made no decommission and renewal: %v", lazy(func() string {
		u.load.mu.Lock()
		defer u.load.mu.Unlock()
		return strings.Join(u.load.errs, "\n")
	}))
	return u
}

// finish stops the workload and checks the end state: no acknowledged
// write lost, no journal halted, every journal's registry identical, no
// agent dark or enrolled again, the level-2 command working.
func (u *upgrade) finish() {
	t := u.t
	// More work on the upgraded quorum before the workload stops.
	u.load.mu.Lock()
	before := u.load.registered
	u.load.mu.Unlock()
	polltest.Until(t, 60*time.Second, 100*time.Millisecond, func() bool {
		u.load.mu.Lock()
		defer u.load.mu.Unlock()
		return u.load.registered >= before+3
	}, "the workload registers no node on the upgraded quorum")
	u.stopLoad()
	<-u.loadDone
	l := u.load
	t.Logf("workload: %d registered, %d enrolled, %d renewed, %d decommissioned (acknowledged); %d retried attempts",
		l.registered, l.enrolled, l.renewed, l.decommissioned, l.retried)
	for _, e := range l.errs {
		t.Errorf("workload: %s", e)
	}

	st := u.healthy("after the upgrade")
	for _, m := range st.Members {
		if !versionIs(m.Version, u.curV) {
			t.Errorf("%s runs %s after the upgrade, want %s", m.JournalID, m.Version, u.curV)
		}
	}
	u.checkLevel("after the upgrade", st)
	u.level2Works("after the upgrade")

	// Every journal's registry is the same, and holds every acknowledged
	// write.
	lists, raws, same := u.q.identicalLists("upg-0001")
	if !same {
		for i := 1; i < len(raws); i++ {
			if string(raws[i]) != string(raws[0]) {
				t.Errorf("%s's registry differs from %s's: %s", u.q.members[i].id, u.q.members[0].id, firstDiff(raws[0], raws[i]))
			}
		}
	}
	for i, list := range lists {
		byID := map[string]nodeJSON{}
		for _, n := range list {
			byID[n.NodeID] = n
		}
		lost := 0
		for id, w := range l.want {
			n, ok := byID[id]
			switch {
			case !ok:
				lost++
				t.Errorf("%s: acknowledged node %s is missing", u.q.members[i].id, id)
			case w.uncertain:
			case n.State != w.state:
				lost++
				t.Errorf("%s: %s is %s, acknowledged %s", u.q.members[i].id, id, n.State, w.state)
			case w.state == "active" && len(w.serials) == 1 && n.CertSerial != w.serials[0]:
				lost++
				t.Errorf("%s: %s holds serial %s, acknowledged %s", u.q.members[i].id, id, n.CertSerial, w.serials[0])
			}
		}
		for _, a := range u.agents {
			if n := byID[a.node.id]; n.State != "active" || n.CertSerial != a.serial {
				t.Errorf("%s: agent node %s is %q with serial %q; its agent holds %s", u.q.members[i].id, a.node.id, n.State, n.CertSerial, a.serial)
			}
		}
		if i == 0 {
			t.Logf("registry: %d nodes on each journal, identical: %v; %d acknowledged writes checked, %d lost", len(list), same, len(l.want), lost)
		}
	}

	// No agent dark or enrolled again: each enrolled once, streams, and is
	// ready (an identity and an open stream).
	for _, a := range u.agents {
		polltest.Until(t, 60*time.Second, 200*time.Millisecond, func() bool { return readyz(a.metrics) == http.StatusOK },
			"agent %s (%s) is not ready after the upgrade (an identity and an open stream)", a.node.id, a.release)
		out := a.p.output()
		if n := strings.Count(out, "msg=enrolled"); n != 1 {
			t.Errorf("agent %s (%s) enrolled %d times, want once", a.node.id, a.release, n)
		}
		select {
		case <-a.p.exited:
			t.Errorf("agent %s (%s) exited: %v", a.node.id, a.release, a.p.err)
		default:
		}
	}
	// No journal stopped applying or panicked, in any of its runs.
	for i, m := range u.q.members {
		if log := u.q.pq.Log(i); strings.Contains(log, "STOPPED APPLYING") || strings.Contains(log, "panic:") {
			t.Errorf("%s's log shows a halt or a panic:\n%s", m.id, grepLines(log, "STOPPED APPLYING", "panic"))
		}
	}
}

func grepLines(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

func (u *upgrade) leaderIndex() int { return u.q.leader() }

func (u *upgrade) followers() []int {
	l := u.leaderIndex()
	var out []int
	for i := range u.q.members {
		if i != l && !u.upgraded[i] {
			out = append(out, i)
		}
	}
	return out
}

// TestRollingUpgrade upgrades three journals of the previous release to
// this tree one at a time under load, in each order.
func TestRollingUpgrade(t *testing.T) {
	skipShort(t)
	previousRelease(t)
	orders := []struct {
		name string
		run  func(u *upgrade)
	}{
		{"followers-first", func(u *upgrade) {
			for _, i := range u.followers() {
				u.step(i, false)
			}
			u.step(u.leaderIndex(), false)
		}},
		{"leader-first", func(u *upgrade) {
			u.step(u.leaderIndex(), false)
			for i := range u.q.members {
				if !u.upgraded[i] {
					u.step(i, false)
				}
			}
		}},
		{"leader-killed", func(u *upgrade) {
			u.step(u.followers()[0], false)
			// The leader, of the previous release, is SIGKILLed half way
			// (the workload running) and comes back on this tree.
			// (If the upgraded follower has become the leader since, it
			// is the one killed.)
			u.step(u.leaderIndex(), true)
			for i := range u.q.members {
				if !u.upgraded[i] {
					u.step(i, false)
				}
			}
		}},
	}
	// The orders run side by side: each is a quorum of its own.
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			u := newUpgrade(t, "up"+o.name[:2], 3)
			o.run(u)
			u.finish()
		})
	}
}

// TestReleaseSkew: agents and the CLI of each release against journals of
// the other, and a backup of the previous release restored on this one.
func TestReleaseSkew(t *testing.T) {
	skipShort(t)
	u := newUpgrade(t, "skew", 2)

	// This tree's agent and CLI against journals of the previous release.
	extra := u.load.nodes[len(u.load.nodes)-2:] // never reached by the workload
	u.q.registerBatch(extra)
	newAgent := u.startAgent(u.cur, extra[1])
	stdout, stderr, code := runPact(t, u.q.env(u.q.addrs()...), "node", "list", "-o", "json")
	if code != 0 || !strings.Contains(stdout, newAgent.node.id) {
		t.Errorf("%s's pact node list against %s journals: exit %d\n%s%s", u.curV, u.prevV, code, stdout, stderr)
	}
	if st, code, stderr := u.statusFrom(u.cur, u.q.addrs()...); code != 0 || len(st.Members) != 3 || !versionIs(st.Members[0].Version, u.prevV) {
		t.Errorf("%s's pact journal status against %s journals: exit %d %+v\n%s", u.curV, u.prevV, code, st, stderr)
	}

	// A backup made by the previous release (its CLI, its journals).
	backup := filepath.Join(t.TempDir(), "prev.snap")
	resume := u.load.pause()
	if stdout, stderr, code := runPactFrom(t, u.prev, u.q.env(u.q.addrs()...), "journal", "snapshot", "save", backup); code != 0 {
		t.Fatalf("%s's pact journal snapshot save: exit %d\n%s%s", u.prevV, code, stdout, stderr)
	}
	saved, _ := u.q.nodeList(0, "upg-0001")
	resume()

	for _, i := range u.followers() {
		u.step(i, false)
	}
	u.step(u.leaderIndex(), false)

	// The previous release's agent enrolls and streams on journals of this
	// tree, and its CLI reads them.
	u.startAgent(u.prev, extra[0])
	stdout, stderr, code = runPactFrom(t, u.prev, u.q.env(u.q.addrs()...), "node", "list", "-o", "json")
	var listed []nodeJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &listed) != nil || len(listed) == 0 {
		t.Errorf("%s's pact node list against %s journals: exit %d\n%s%s", u.prevV, u.curV, code, stdout, stderr)
	}
	if st, code, stderr := u.statusFrom(u.prev, u.q.addrs()...); code != 0 || len(st.Members) != 3 {
		t.Errorf("%s's pact journal status against %s journals: exit %d %+v\n%s", u.prevV, u.curV, code, st, stderr)
	} else {
		for _, m := range st.Members {
			if !versionIs(m.Version, u.curV) || !m.Reachable || m.Halted != "" {
				t.Errorf("%s's pact journal status shows %+v", u.prevV, m)
			}
		}
	}
	u.finish()

	// The backup of the previous release restores on this tree: a new
	// quorum of one (a new host, r1) serves the registry as it was saved.
	t.Run("previous backup restores", func(t *testing.T) {
		a := freeAddrs(t, 3)
		m := &member{id: "r1", grpc: a[0], raft: a[1], metrics: a[2]}
		dataDir := filepath.Join(t.TempDir(), "r1")
		out, code := restoreJournal(t, "--snapshot", backup, "--data-dir", dataDir, "--node-id", m.id,
			"--initial-cluster", m.id+"="+m.raft, "--root-cert", u.ca)
		if code != 0 {
			t.Fatalf("%s's pact-journal restore of a %s backup: exit %d\n%s", u.curV, u.prevV, code, out)
		}
		pkiArgs, err := u.q.pq.PKIArgs(m.id)
		if err != nil {
			t.Fatal(err)
		}
		r := &quorum{t: t, dir: u.q.dir, pq: u.q.pq}
		i := u.q.pq.Add(m.id, append([]string{"--node-id", m.id, "--data-dir", dataDir,
			"--listen", m.grpc, "--raft-listen", m.raft, "--metrics-listen", m.metrics}, pkiArgs...))
		r.members = make([]*member, i+1)
		r.members[i] = m
		r.launch(i)
		r.waitServing(i)
		got, _ := r.nodeList(i, "upg-0001")
		if len(got) != len(saved) {
			t.Errorf("the restored journal lists %d nodes, the backup's quorum %d", len(got), len(saved))
		}
		byID := map[string]nodeJSON{}
		for _, n := range got {
			byID[n.NodeID] = n
		}
		for _, o := range saved {
			if n := byID[o.NodeID]; n.State != o.State || n.CertSerial != o.CertSerial || !slices.Equal(n.MACs, o.MACs) {
				t.Errorf("restored %s: %+v, saved %+v", o.NodeID, n, o)
			}
		}
		t.Logf("%s's backup (%d nodes) restored on %s", u.prevV, len(saved), u.curV)
	})

	// The previous release refuses a snapshot this tree made at level 2,
	// naming the release it needs.
	t.Run("previous refuses a level-2 snapshot", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "cur.snap")
		if stdout, stderr, code := runPact(t, u.q.env(u.q.addrs()...), "journal", "snapshot", "save", file); code != 0 {
			t.Fatalf("pact journal snapshot save: exit %d\n%s%s", code, stdout, stderr)
		}
		dataDir := filepath.Join(t.TempDir(), "old")
		out, err := exec.Command(filepath.Join(u.prev, "pact-journal"), "restore", "--snapshot", file, "--data-dir", dataDir,
			"--node-id", "o1", "--initial-cluster", "o1=127.0.0.1:1", "--root-cert", u.ca).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%s's pact-journal restore of a level-2 snapshot: %v, want a refusal\n%s", u.prevV, err, out)
		}
		// It names the release that wrote the file (the header's version).
		if !strings.Contains(string(out), "use pact-journal "+u.curV) {
			t.Errorf("%s's refusal of a level-2 snapshot does not name the release it needs (%s):\n%s", u.prevV, u.curV, out)
		}
		if _, err := os.Stat(dataDir); err == nil {
			t.Errorf("the refused restore wrote %s", dataDir)
		}
	})
}

// lazy formats as what f returns when it is printed: a failure message
// that shows the last value a poll saw.
type lazy func() string

func (f lazy) String() string { return f() }

// inspectOn is pact node inspect id -o json on member i alone (a
// linearizable read there: its registry after every committed write).
func inspectOn(t *testing.T, q *quorum, i int, id string) map[string]any {
	t.Helper()
	var got map[string]any
	polltest.Until(t, 30*time.Second, 200*time.Millisecond, func() bool {
		stdout, _, code := runPact(t, q.env(q.members[i].grpc), "node", "inspect", id, "-o", "json")
		return code == 0 && json.Unmarshal([]byte(stdout), &got) == nil
	}, "pact node inspect %s on %s", id, q.members[i].id)
	return got
}

// An agent whose certificate a journal CA revocation withdrew enrolls
// again with a new key while the quorum runs mixed. The journals of this
// tree take the node over at once (raftfsm certWithdrawn); 0.1.0's apply
// refuses the same committed Activate within the takeover window
// (ALREADY_ACTIVE), so the registries must not part: the new rule waits
// for the quorum's level (before the level, they did).
func TestMixedQuorumWithdrawnCertificateTakeover(t *testing.T) {
	skipShort(t)
	prev := previousRelease(t)
	// Digests every second: the node's stream is recorded as recent, as
	// on a site (the takeover window, 1m, is far from over).
	q := startQuorumFrom(t, prev, 3, "--digest-interval", "1s")
	node := testNode{id: "wd-0001", mac: "52:54:77:00:00:01", bmc: "SN-WD-1"}
	q.registerBatch([]testNode{node})
	l := q.leader()
	old, upg := (l+1)%3, (l+2)%3 // a follower that stays on 0.1.0, one upgraded
	if err := q.pq.Stop(upg); err != nil {
		t.Fatal(err)
	}
	q.pq.SetBin(upg, binDir)
	q.launch(upg)
	q.waitServing(upg)

	// The node enrolls on the old follower (a certificate of its
	// intermediate) and streams there, as its agent would, until a digest
	// records the stream.
	ca := filepath.Join(q.dir, "ca.pem")
	enr := newEnroller(t, ca, []string{q.members[old].grpc})
	first := enr.enroll(context.Background(), node)
	if first.err != nil || first.unknown {
		t.Fatalf("enrolling %s on %s: %v", node.id, q.members[old].id, first.err)
	}
	cert := tls.Certificate{Certificate: first.resp.GetCertChainDer(), PrivateKey: first.key.key}
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	stream, err := pactv1.NewEnrollmentServiceClient(dialJournal(t, enr.roots, q.members[old].grpc, &cert)).Subscribe(sctx, &pactv1.SubscribeRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		t.Fatalf("%s streams on %s: %v", node.id, q.members[old].id, err)
	}
	polltest.Until(t, 30*time.Second, 300*time.Millisecond, func() bool {
		seen, _ := inspectOn(t, q, l, node.id)["last_seen"].(string)
		return seen != ""
	}, "no digest records %s's stream", node.id)
	before := inspectOn(t, q, l, node.id)
	t.Logf("%s enrolled with serial %s from intermediate %v and streams on %s; %s leads, %s and %s run %s, %s this tree",
		node.id, first.serial, before["cert_issuer_serial"], q.members[old].id, q.members[l].id, q.members[l].id, q.members[old].id, binVersion(t, prev, "pact"), q.members[upg].id)

	stdout, stderr, code := runPactFrom(t, prev, q.env(q.members[l].grpc, q.members[upg].grpc), "journal", "revoke-ca", q.members[old].id, "--reason", "upgrade test", "--yes")
	if code != 0 {
		t.Fatalf("pact journal revoke-ca %s: exit %d\n%s%s", q.members[old].id, code, stdout, stderr)
	}
	// Its certificate withdrawn, the node enrolls again with a new key on
	// the upgraded journal, as pact-agent does when it is refused.
	again := newEnroller(t, ca, []string{q.members[upg].grpc}).enroll(context.Background(), node)
	renrolled := again.serial
	t.Logf("enrolling again on %s: serial %q, err %v", q.members[upg].id, again.serial, again.err)
	var onLeader, onUpgraded map[string]any
	polltest.Until(t, 30*time.Second, 300*time.Millisecond, func() bool {
		onLeader, onUpgraded = inspectOn(t, q, l, node.id), inspectOn(t, q, upg, node.id)
		return onLeader["cert_serial"] == onUpgraded["cert_serial"]
	}, "%s differs between %s (%s) and %s (this tree): %v", node.id, q.members[l].id, binVersion(t, prev, "pact-journal"), q.members[upg].id,
		lazy(func() string {
			return fmt.Sprintf("serial %v vs %v (the client was given %q)", onLeader["cert_serial"], onUpgraded["cert_serial"], renrolled)
		}))
}
