package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/cli"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The operator-mistakes scenario makes, under the workload, the mistakes
// the quorum id exists to stop (docs/quorum.md, "One quorum"), with the
// operator's own tools (pact-journal, pact), and records each refusal it
// expects as evidence:
//
//  1. a follower killed, its data directory wiped, started again with its
//     old flags (--initial-cluster): it must refuse to bootstrap a second
//     quorum (exit 4, "already belongs to a quorum", "--join") while the
//     quorum serves; then it is brought back the right way (empty,
//     --join, pact journal add through the leader);
//  2. a lost majority recovered (pact-journal recover on the survivor)
//     while a lost journal comes back with its old disk and flags: the
//     survivor must refuse it (quorum_mismatch on its /metrics), it must
//     never serve, and the survivor serves on; then the lost journals are
//     wiped and added back with --join and pact journal add;
//  3. a snapshot (pact journal snapshot save) restored under another root
//     of the same domain name (pact-journal init --domain pact.local):
//     refused ("snapshot of another root", exit 1), nothing written; the
//     same snapshot restores under its own root (the control).
//
// After each mistake every running journal must report one quorum id
// (pact journal status -o json: its own and every member's), one
// configuration of voters, and audit trails that are windows of one
// history (a journal's audit is its registry's history).
//
// What the recovery may lose. A recovery keeps everything in the
// survivor's log, committed or not, and loses what only the lost journals
// had: writes a majority without the survivor acknowledged. The scenario
// does not let that happen, so the registry checks stay as strict as in
// every other scenario (no acknowledged write may be lost): the survivor
// is the journal that leads when the others are lost, and the harness
// proves it: it freezes both others (SIGSTOP) and only then checks that
// the survivor still leads in the term it led before and that neither
// frozen journal logged becoming leader since. A leader's log holds every
// committed entry (Raft's leader completeness), so every acknowledged
// write is in the survivor's log and survives the recovery; writes in
// flight when the majority went are unknown outcomes (OUTCOME_UNKNOWN, a
// timeout, a connection lost) that the recovery may commit, which the
// model allows for any unknown outcome, and a write refused NO_LEADER must
// not appear (the entry never entered a log). If the premise cannot be
// established after a few tries, the mistake fails: the verdict has no
// model for a legitimate loss.

// Outcome is one thing a mistake must meet (a refusal, or a control that
// must succeed), what the harness wanted and what it saw.
type Outcome struct {
	What string // what was done: "j2, wiped, started again with its old --initial-cluster"
	Want string // what must happen
	Got  string // what happened: exit code, message, metric
	// Refusal: an expected refusal (false: a control or a premise).
	Refusal bool
	Seen    bool
}

// QuorumReading is every running journal's `pact journal status -o json`
// at the end of a mistake, and whether their audit trails are one history.
type QuorumReading struct {
	// When says at which point of the mistake it was read.
	When string
	// Members are the journals that must be the quorum, all voters.
	Members []string
	// WantID, if set, is the quorum id they must all report; NotID one
	// they must not (the quorum a recovery left behind).
	WantID, NotID string
	Views         map[string]cli.QuorumView
	Codes         map[string]int
	Errs          map[string]string
	// History is "" when every journal's audit trail is a window of one
	// sequence, else what differs; Compared counts audit entries compared.
	History  string
	Compared int
}

// Mistake is one operator mistake made under load.
type Mistake struct {
	Name     string
	Outcomes []Outcome
	// From and To (history time): the quorum must acknowledge writes in
	// between (it keeps serving through the mistake).
	From, To int64
	// Readings: one quorum, read at the end of the mistake (and, for the
	// recovery, while the lost journal is refused).
	Readings []QuorumReading
	Notes    []string
}

// MistakesResult is what the operator-mistakes scenario saw.
type MistakesResult struct {
	Mistakes []Mistake
	// Initial, Recovered are the quorum ids before and after the recovery.
	Initial, Recovered string
	Err                string
}

// mistakesPlanned is how many mistakes the scenario makes.
const mistakesPlanned = 3

// mistakeOps is what the scenario needs of journal processes beyond
// Quorum.
type mistakeOps interface {
	memberOps
	DataDir(i int) string
	CurrentLog(i int) string
	// Args is journal i's command line: pact-journal recover takes the
	// journal's settings (its credentials ask the other journals first).
	Args(i int) []string
}

// tool runs one of the operator's commands (pact, pact-journal) from
// e.Bin, bounded, and returns its output and exit code.
func (e *Env) tool(env []string, name string, args ...string) (stdout, stderr string, code int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(e.Bin, name), args...)
	cmd.Env = append(os.Environ(), env...)
	var o, s bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &s
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return o.String(), s.String(), ee.ExitCode(), nil
	}
	return o.String(), s.String(), 0, err
}

// leaderFirst is every journal, the leader first: the CLI tries them in
// order, and a journal waiting for a leader or to be added holds its
// port open without answering until the CLI's timeout.
func (e *Env) leaderFirst() []int {
	l, err := Leader(context.Background(), e.Q, 10*time.Second)
	if err != nil {
		return e.others()
	}
	return append([]int{l}, e.others(l)...)
}

// pactEnv is the pact CLI's environment for the admin credential,
// reaching the journals given.
func (e *Env) pactEnv(is ...int) []string {
	var addrs []string
	for _, i := range is {
		addrs = append(addrs, e.Q.GRPC(i))
	}
	return []string{
		"PACT_JOURNAL=" + strings.Join(addrs, ","),
		"PACT_CA=" + filepath.Join(e.Dir, "ca.pem"),
		"PACT_CERT=" + filepath.Join(e.Dir, "admin.pem"),
		"PACT_KEY=" + filepath.Join(e.Dir, "admin-key.pem"),
	}
}

// peerRefused reads pact_journal_peer_refused_total{reason} from a
// journal's /metrics (0 before the first refusal of that reason).
func peerRefused(metrics, reason string) (int, error) {
	n, err := metricValue(metrics, `pact_journal_peer_refused_total{reason="`+reason+`"}`)
	if errors.Is(err, errNoSeries) {
		return 0, nil
	}
	return n, err
}

// says lists which of subs s contains, quoted: `says "a", "b"`.
func says(s string, subs ...string) string {
	var in, out []string
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			in = append(in, strconv.Quote(sub))
		} else {
			out = append(out, strconv.Quote(sub))
		}
	}
	r := "says " + strings.Join(in, ", ")
	if len(in) == 0 {
		r = "says none of the expected words"
	}
	if len(out) > 0 {
		r += " (not " + strings.Join(out, ", ") + ")"
	}
	return r
}

// lineWith is the first line of s containing sub, shortened.
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			if len(l) > 300 {
				l = l[:300] + "..."
			}
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

var (
	servingLogRE   = regexp.MustCompile(`msg="journal serving"`)
	leaderLogRE    = regexp.MustCompile(`msg="entering leader state"`)
	newQuorumRE    = regexp.MustCompile(`new quorum id (\S+)`)
	bootstrapLogRE = regexp.MustCompile(`msg="bootstrapping a new quorum".*? quorum_id=(\S+)`)
	belongsRE      = regexp.MustCompile(`journal \S+ at \S+ already belongs to a quorum \(quorum id ([^)]*)\)`)
	wasQuorumRE    = regexp.MustCompile(`new quorum id \S+ \(was ([^)]+)\)`)
)

// operatorMistakes is the scenario's schedule: the three mistakes in
// turn, then the load runs on until the schedule ends.
func operatorMistakes(e *Env) error {
	mo, ok := e.Q.(mistakeOps)
	if !ok {
		return errors.New("the operator-mistakes scenario needs journal processes (not containers)")
	}
	if e.Q.Size() != 3 {
		return fmt.Errorf("the operator-mistakes scenario needs a quorum of 3, not %d", e.Q.Size())
	}
	m := &MistakesResult{}
	e.mu.Lock()
	e.mistakes = m
	e.mu.Unlock()
	all := e.others()
	start := e.readQuorum("at the start", all, "", "", 30*time.Second)
	if len(start.Views) > 0 {
		m.Initial = start.Views[e.Q.ID(0)].QuorumID
	}
	if m.Initial == "" {
		return fmt.Errorf("the quorum reports no quorum id at the start: %v %v", start.Codes, start.Errs)
	}
	for _, step := range []func(*Env, mistakeOps, *MistakesResult) error{wipedRestart, recoverWhileLostReturns, restoreOtherRoot} {
		if err := step(e, mo, m); err != nil {
			m.Err = err.Error()
			return err
		}
	}
	for e.sleep(500 * time.Millisecond) {
	}
	return nil
}

// wipedRestart is mistake 1.
func wipedRestart(e *Env, mo mistakeOps, m *MistakesResult) error {
	l, err := e.leader()
	if err != nil {
		return err
	}
	o := e.others(l)
	f := o[e.Rng.IntN(len(o))]
	id := e.Q.ID(f)
	mk := Mistake{Name: "a wiped journal restarted with its old flags", From: e.H.Now()}
	if err := e.Q.Kill(f); err != nil {
		return err
	}
	k := e.addFault("wiped, old flags", id)
	if err := os.RemoveAll(mo.DataDir(f)); err != nil {
		return err
	}
	if err := e.Q.Start(f); err != nil {
		return err
	}
	out := Outcome{Refusal: true,
		What: fmt.Sprintf("%s, killed, its data directory wiped, started again with its old flags (--initial-cluster)", id),
		Want: `exit 4, saying "already belongs to a quorum" and "--join"`}
	select {
	case <-mo.Exited(f):
		code, log := exitCode(mo.ExitError(f)), mo.CurrentLog(f)
		// The refusal names the journal it asked and that journal's
		// quorum: the one running.
		named := belongsRE.FindStringSubmatch(log)
		out.Seen = code == 4 && named != nil && named[1] == m.Initial && strings.Contains(log, "--join")
		switch {
		case named != nil:
			out.Got = fmt.Sprintf("exit %d: %q, %s", code, named[0], says(log, "--join", "pact journal add "+id))
		default:
			out.Got = fmt.Sprintf("exit %d: %s", code, tail(log, 3))
		}
		if servingLogRE.MatchString(log) {
			out.Seen = false
			out.Got += " (and it logged \"journal serving\" first)"
		}
	case <-time.After(30 * time.Second):
		log := mo.CurrentLog(f)
		out.Got = fmt.Sprintf("still running 30 s after its start (serving: %v)", servingLogRE.MatchString(log))
		if g := bootstrapLogRE.FindStringSubmatch(log); g != nil {
			out.Got += fmt.Sprintf("; it bootstrapped a second quorum, quorum id %s, beside %s", g[1], m.Initial)
		}
		if err := e.Q.Stop(f); err != nil {
			return err
		}
	}
	mk.Outcomes = append(mk.Outcomes, out)
	e.Logf("mistake 1: %s: %s", out.What, out.Got)
	// The quorum serves on with two of three meanwhile.
	time.Sleep(time.Second)
	mk.To = e.H.Now()
	// The right way back: empty, --join, pact journal add through the
	// leader (an add of a member re-runs safely).
	if err := e.rejoin(mo, f, &mk); err != nil {
		return err
	}
	e.heal(k)
	mk.Readings = append(mk.Readings, e.readQuorum("after "+id+" was added back", e.others(), m.Initial, "", 60*time.Second))
	m.Mistakes = append(m.Mistakes, mk)
	return nil
}

// rejoin brings journal i back empty: --join, then pact journal add
// through the leader, then it must serve.
func (e *Env) rejoin(mo mistakeOps, i int, mk *Mistake) error {
	if err := mo.Rejoin(i); err != nil {
		return err
	}
	if err := e.Q.Start(i); err != nil {
		return err
	}
	if err := waitUp(e.Q, i, 60*time.Second); err != nil {
		return err
	}
	id := e.Q.ID(i)
	out := Outcome{What: fmt.Sprintf("%s, empty, started with --join; pact journal add %s %s", id, id, mo.Raft(i)),
		Want: "the add succeeds and the journal serves"}
	var stdout, stderr string
	var code int
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		stdout, stderr, code, err = e.tool(e.pactEnv(e.leaderFirst()...), "pact", "journal", "add", id, mo.Raft(i))
		if err != nil {
			return err
		}
		// No leader (7) while one is elected: again.
		if code == 0 || code != 7 || time.Now().After(deadline) {
			break
		}
	}
	out.Got = fmt.Sprintf("pact journal add: exit %d", code)
	if code != 0 {
		out.Got += ": " + strings.TrimSpace(stderr+stdout)
	} else if err := e.Q.WaitServing(i, 90*time.Second); err != nil {
		out.Got += "; " + err.Error()
	} else {
		out.Seen = true
		out.Got += "; serving"
	}
	mk.Outcomes = append(mk.Outcomes, out)
	e.Logf("%s: %s", out.What, out.Got)
	return nil
}

// loseMajority freezes the two journals other than the leader, checks
// that the leader still leads in the term it led before and that neither
// frozen journal became leader since (the premise: the survivor holds
// every committed entry), and kills them. It returns the survivor, the
// lost journals and the premise as an outcome.
func (e *Env) loseMajority(mo mistakeOps) (int, []int, Outcome, error) {
	// The survivor's own word, from its /metrics: JournalStatus would ask
	// the frozen members too.
	leads := func(i int) (bool, int, error) {
		lead, err := metricValue(e.Q.Metrics(i), "pact_journal_is_leader")
		if err != nil {
			return false, 0, err
		}
		term, err := metricValue(e.Q.Metrics(i), "pact_journal_raft_term")
		return lead == 1, term, err
	}
	out := Outcome{Want: "the survivor leads when the majority is lost (in the term it led before the other two were frozen, and neither of them led since): every committed entry is in its log, so no acknowledged write may be lost"}
	var tries []string
	for try := 0; try < 5; try++ {
		l, err := e.leader()
		if err != nil {
			return 0, nil, out, err
		}
		lost := e.others(l)
		led, term, err := leads(l)
		if err != nil || !led {
			tries = append(tries, fmt.Sprintf("%s did not confirm it led (%v)", e.Q.ID(l), err))
			continue
		}
		marks := map[int]int{}
		for _, i := range lost {
			marks[i] = len(leaderLogRE.FindAllStringIndex(mo.CurrentLog(i), -1))
		}
		for _, i := range lost {
			if err := e.Q.Pause(i); err != nil {
				return 0, nil, out, err
			}
		}
		still, after, err := leads(l)
		since := ""
		for _, i := range lost {
			if len(leaderLogRE.FindAllStringIndex(mo.CurrentLog(i), -1)) > marks[i] {
				since += " " + e.Q.ID(i)
			}
		}
		if err == nil && still && after == term && since == "" {
			out.What = fmt.Sprintf("premise: %s (the survivor) leads when %s are lost", e.Q.ID(l), names(e.Q, lost))
			out.Seen = true
			out.Got = fmt.Sprintf("%s led term %d before and after %s were frozen; neither logged becoming leader", e.Q.ID(l), term, names(e.Q, lost))
			if len(tries) > 0 {
				out.Got += " (after: " + strings.Join(tries, "; ") + ")"
			}
			for _, i := range lost {
				if err := e.Q.Kill(i); err != nil {
					return 0, nil, out, err
				}
			}
			return l, lost, out, nil
		}
		tries = append(tries, fmt.Sprintf("%s led term %d, then leads %v in term %d (%v; led since:%s)", e.Q.ID(l), term, still, after, err, since))
		for _, i := range lost {
			if err := e.Q.Resume(i); err != nil {
				return 0, nil, out, err
			}
		}
		time.Sleep(time.Second)
	}
	out.What = "the majority lost while the survivor leads"
	out.Got = strings.Join(tries, "; ")
	return 0, nil, out, nil
}

// errNoSeries: the journal's /metrics has no such series.
var errNoSeries = errors.New("no such series")

// metricValue reads one series (a name, with its labels as /metrics
// prints them) from a journal's /metrics.
func metricValue(metrics, name string) (int, error) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + metrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("%w: %s has no %s", errNoSeries, metrics, name)
	}
	f, err := strconv.ParseFloat(string(m[1]), 64)
	return int(f), err
}

// recoverWhileLostReturns is mistake 2.
func recoverWhileLostReturns(e *Env, mo mistakeOps, m *MistakesResult) error {
	mk := Mistake{Name: "a recovery while a lost journal comes back"}
	s, lost, premise, err := e.loseMajority(mo)
	if err != nil {
		return err
	}
	mk.Outcomes = append(mk.Outcomes, premise)
	if !premise.Seen {
		m.Mistakes = append(m.Mistakes, mk)
		return fmt.Errorf("could not lose the majority while the survivor led: %s", premise.Got)
	}
	sid := e.Q.ID(s)
	k := e.addFault("lost majority, recover", names(e.Q, lost)+" lost; "+sid+" recovered")
	e.Logf("mistake 2: %s", premise.Got)
	// The survivor alone: no leader (pact journal status exits 10), as
	// the runbook's first step checks.
	code := -1
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if _, _, code, err = e.tool(e.pactEnv(s), "pact", "journal", "status"); err != nil {
			return err
		}
		if code == 10 {
			break
		}
	}
	mk.Notes = append(mk.Notes, fmt.Sprintf("the survivor %s alone: pact journal status exit %d", sid, code))
	if err := e.Q.Stop(s); err != nil {
		return err
	}
	stdout, stderr, code, err := e.tool(nil, "pact-journal", append(append([]string{"recover"}, mo.Args(s)...), "--members", sid+"="+mo.Raft(s))...)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("pact-journal recover on %s: exit %d: %s", sid, code, strings.TrimSpace(stderr+stdout))
	}
	if g := newQuorumRE.FindStringSubmatch(stdout); g != nil {
		m.Recovered = g[1]
	}
	was := ""
	if g := wasQuorumRE.FindStringSubmatch(stdout); g != nil {
		was = g[1]
	}
	mk.Notes = append(mk.Notes, "pact-journal recover: "+strings.ReplaceAll(lineWith(stdout, "recovered"), e.Dir+"/", "")+"; "+lineWith(stdout, "new quorum id"))
	mk.Outcomes = append(mk.Outcomes, Outcome{What: "pact-journal recover --members " + sid + "=" + mo.Raft(s),
		Want: fmt.Sprintf("a new quorum id, printed with the old one (%s)", m.Initial),
		Got:  fmt.Sprintf("new quorum id %s (was %s)", m.Recovered, was),
		Seen: m.Recovered != "" && m.Recovered != m.Initial && was == m.Initial})
	if err := e.Q.Start(s); err != nil {
		return err
	}
	if err := e.Q.WaitServing(s, 90*time.Second); err != nil {
		return err
	}
	// The probes meet the recovered quorum's first answers.
	e.leaderLost()
	e.heal(k)
	e.Logf("mistake 2: %s recovered, serving alone with quorum id %s", sid, m.Recovered)

	// One lost journal comes back with its old disk and its old flags.
	back := lost[e.Rng.IntN(len(lost))]
	bid := e.Q.ID(back)
	base, err := peerRefused(e.Q.Metrics(s), "quorum_mismatch")
	if err != nil {
		return err
	}
	mk.From = e.H.Now()
	if err := e.Q.Start(back); err != nil {
		return err
	}
	k2 := e.addFault("lost journal back, old disk", bid)
	refused := Outcome{Refusal: true,
		What: fmt.Sprintf("%s of the old quorum, started again with its old disk and flags", bid),
		Want: fmt.Sprintf(`refused by the survivor: pact_journal_peer_refused_total{reason="quorum_mismatch"} rises on %s's /metrics`, sid)}
	n := base
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if n, _ = peerRefused(e.Q.Metrics(s), "quorum_mismatch"); n > base {
			break
		}
	}
	refused.Seen = n > base
	refused.Got = fmt.Sprintf("quorum_mismatch on %s: %d -> %d", sid, base, n)
	mk.Outcomes = append(mk.Outcomes, refused)
	e.Logf("mistake 2: %s: %s", refused.What, refused.Got)
	// It stays refused a while; the survivor serves on.
	time.Sleep(2 * time.Second)
	log := mo.CurrentLog(back)
	never := Outcome{Refusal: true,
		What: bid + " of the old quorum, running beside the recovered survivor",
		Want: `never serves: no "journal serving", never leader`}
	switch {
	case servingLogRE.MatchString(log):
		never.Got = "it logged: " + lineWith(log, "journal serving")
	case leaderLogRE.MatchString(log):
		never.Got = "it logged: " + lineWith(log, "entering leader state")
	default:
		never.Seen = true
		never.Got = "no \"journal serving\", no \"entering leader state\" in its log"
		select {
		case <-mo.Exited(back):
			never.Got += fmt.Sprintf("; it exited %d by itself", exitCode(mo.ExitError(back)))
		default:
			never.Got += fmt.Sprintf("; still running after %s, waiting for a leader", ms(time.Duration(e.H.Now()-mk.From)))
		}
	}
	mk.Outcomes = append(mk.Outcomes, never)
	mk.Readings = append(mk.Readings, e.readQuorum("the survivor alone while "+bid+" is refused", []int{s}, m.Recovered, m.Initial, 10*time.Second))
	mk.To = e.H.Now()
	if e.Q.Running(back) {
		if err := e.Q.Stop(back); err != nil {
			return err
		}
	}
	e.heal(k2)
	// The lost journals are wiped and added back the right way.
	for _, i := range lost {
		if err := e.rejoin(mo, i, &mk); err != nil {
			return err
		}
	}
	// The end of the mistake: one quorum of three again, the new id.
	mk.Readings = append(mk.Readings, e.readQuorum("after the lost journals were added back", e.others(), m.Recovered, m.Initial, 60*time.Second))
	m.Mistakes = append(m.Mistakes, mk)
	return nil
}

// restoreOtherRoot is mistake 3.
func restoreOtherRoot(e *Env, _ mistakeOps, m *MistakesResult) error {
	mk := Mistake{Name: "a restore under another root", From: e.H.Now()}
	dir := filepath.Join(e.Dir, "mistakes")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	file := filepath.Join(dir, "pact.snap")
	stdout, stderr, code, err := e.tool(e.pactEnv(e.leaderFirst()...), "pact", "journal", "snapshot", "save", file)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("pact journal snapshot save: exit %d: %s", code, strings.TrimSpace(stderr+stdout))
	}
	k := e.addFault("restore, another root", "snapshot")
	other := filepath.Join(dir, "other-root")
	stdout, stderr, code, err = e.tool(nil, "pact-journal", "init", "--dir", other, "--domain", "pact.local")
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("pact-journal init --domain pact.local: exit %d: %s", code, strings.TrimSpace(stderr+stdout))
	}
	restore := func(root, into string) (string, int, error) {
		stdout, stderr, code, err := e.tool(nil, "pact-journal", "restore", "--snapshot", file, "--data-dir", into,
			"--node-id", "r1", "--initial-cluster", "r1=127.0.0.1:1", "--root-cert", root)
		return stdout + stderr, code, err
	}
	into := filepath.Join(dir, "restored-other-root")
	got, code, err := restore(filepath.Join(other, "ca.pem"), into)
	if err != nil {
		return err
	}
	out := Outcome{Refusal: true,
		What: "pact-journal restore of the quorum's snapshot with --root-cert of another root of domain pact.local",
		Want: `exit 1, "snapshot of another root", nothing written`}
	_, statErr := os.Stat(into)
	written := !os.IsNotExist(statErr)
	out.Seen = code == 1 && strings.Contains(got, "snapshot of another root") && strings.Contains(got, "nothing was written") && !written
	out.Got = fmt.Sprintf("exit %d, %s; %s %s", code, says(got, "snapshot of another root", "both of domain pact.local", "nothing was written"),
		strings.TrimPrefix(into, e.Dir+"/"), map[bool]string{true: "WRITTEN", false: "absent"}[written])
	mk.Outcomes = append(mk.Outcomes, out)
	e.Logf("mistake 3: %s: %s", out.What, out.Got)
	// The control: the same snapshot restores under its own root.
	own := filepath.Join(dir, "restored-own-root")
	got, code, err = restore(filepath.Join(e.Dir, "ca.pem"), own)
	if err != nil {
		return err
	}
	ctl := Outcome{What: "the same snapshot restored under its own root (the control)", Want: "exit 0, a new quorum id"}
	ctl.Seen = code == 0 && newQuorumRE.MatchString(got)
	ctl.Got = fmt.Sprintf("exit %d: %s", code, strings.ReplaceAll(lineWith(got, "restored"), e.Dir+"/", ""))
	mk.Outcomes = append(mk.Outcomes, ctl)
	_ = os.RemoveAll(own)
	e.heal(k)
	mk.To = e.H.Now()
	mk.Readings = append(mk.Readings, e.readQuorum("after the refused restore", e.others(), m.Recovered, m.Initial, 30*time.Second))
	m.Mistakes = append(m.Mistakes, mk)
	return nil
}

// readQuorum reads `pact journal status -o json` from each journal in is,
// and their audit trails, until they agree (quorumProblems finds nothing)
// or timeout has passed; it returns the last reading.
func (e *Env) readQuorum(when string, is []int, want, not string, timeout time.Duration) QuorumReading {
	admins, closeAdmins, err := AdminConns(e.Q)
	if err == nil {
		defer closeAdmins()
	}
	var r QuorumReading
	for deadline := time.Now().Add(timeout); ; time.Sleep(500 * time.Millisecond) {
		r = QuorumReading{When: when, WantID: want, NotID: not, Views: map[string]cli.QuorumView{}, Codes: map[string]int{}, Errs: map[string]string{}}
		var audits [][]*pactv1.AuditEntry
		for _, i := range is {
			id := e.Q.ID(i)
			r.Members = append(r.Members, id)
			stdout, stderr, code, terr := e.tool(e.pactEnv(i), "pact", "journal", "status", "-o", "json")
			r.Codes[id] = code
			var v cli.QuorumView
			switch {
			case terr != nil:
				r.Errs[id] = terr.Error()
			case json.Unmarshal([]byte(stdout), &v) != nil:
				r.Errs[id] = fmt.Sprintf("exit %d, not JSON: %s", code, strings.TrimSpace(stderr+stdout))
			default:
				r.Views[id] = v
			}
			if admins == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			a, aerr := admins[i].ListAudit(ctx, &pactv1.ListAuditRequest{Limit: auditCapacity})
			cancel()
			if aerr != nil {
				r.Errs[id] = fmt.Sprintf("audit: %v", aerr)
				continue
			}
			audits = append(audits, a.GetEntries())
		}
		slices.Sort(r.Members)
		if err != nil {
			r.History = "no admin connection: " + err.Error()
		} else {
			r.History, r.Compared = oneHistory(audits)
		}
		if len(quorumProblems(r)) == 0 || time.Now().After(deadline) {
			return r
		}
	}
}

// oneHistory reports whether audit trails (oldest first, each a window of
// at most auditCapacity entries) are windows of one sequence: aligned on
// the later start, every entry both hold is the same. It returns "" or
// what differs, and how many entries it compared.
func oneHistory(audits [][]*pactv1.AuditEntry) (string, int) {
	compared := 0
	for k := 1; k < len(audits); k++ {
		a, b := audits[0], audits[k]
		if len(a) == 0 || len(b) == 0 {
			return fmt.Sprintf("an empty audit trail (%d and %d entries)", len(a), len(b)), compared
		}
		find := func(in []*pactv1.AuditEntry, e *pactv1.AuditEntry) int {
			return slices.IndexFunc(in, func(x *pactv1.AuditEntry) bool { return proto.Equal(x, e) })
		}
		if off := find(a, b[0]); off >= 0 {
			a = a[off:]
		} else if off := find(b, a[0]); off >= 0 {
			b = b[off:]
		} else {
			return fmt.Sprintf("audit trails 1 and %d share no entry (first %v and %v)", k+1, a[0], b[0]), compared
		}
		n := min(len(a), len(b))
		for x := range n {
			if !proto.Equal(a[x], b[x]) {
				return fmt.Sprintf("audit trails diverge at their common entry %d: %v vs %v", x, a[x], b[x]), compared
			}
		}
		compared += n
	}
	return "", compared
}

// quorumProblems says how a reading is not one quorum: a journal that did
// not answer, or is unhealthy (exit code), another quorum id (its own or
// a member's), another configuration, a non-voter, no leader or two, or
// audit trails of two histories.
func quorumProblems(r QuorumReading) []string {
	var out []string
	want := r.WantID
	leaders := map[string]bool{}
	for _, id := range r.Members {
		if e, ok := r.Errs[id]; ok {
			out = append(out, fmt.Sprintf("%s: %s", id, e))
			continue
		}
		v, ok := r.Views[id]
		if !ok {
			out = append(out, fmt.Sprintf("%s: no pact journal status", id))
			continue
		}
		if c := r.Codes[id]; c != 0 {
			out = append(out, fmt.Sprintf("%s: pact journal status exit %d (not healthy)", id, c))
		}
		if want == "" {
			want = v.QuorumID
		}
		switch {
		case v.QuorumID == "":
			out = append(out, fmt.Sprintf("%s reports no quorum id", id))
		case v.QuorumID != want:
			out = append(out, fmt.Sprintf("%s reports quorum id %s, not %s", id, v.QuorumID, want))
		case v.QuorumID == r.NotID:
			out = append(out, fmt.Sprintf("%s still reports the old quorum id %s", id, v.QuorumID))
		}
		if v.ServedBy != id {
			out = append(out, fmt.Sprintf("%s: status served by %s", id, v.ServedBy))
		}
		leaders[v.LeaderID] = true
		var members []string
		for _, mv := range v.Members {
			members = append(members, mv.JournalID)
			switch {
			case !mv.Voter:
				out = append(out, fmt.Sprintf("%s sees %s as a non-voter", id, mv.JournalID))
			case !mv.Reachable:
				out = append(out, fmt.Sprintf("%s cannot reach %s: %s", id, mv.JournalID, mv.Error))
			case mv.QuorumID != v.QuorumID:
				out = append(out, fmt.Sprintf("%s sees member %s in quorum %q, itself in %s", id, mv.JournalID, mv.QuorumID, v.QuorumID))
			}
		}
		slices.Sort(members)
		if !slices.Equal(members, r.Members) {
			out = append(out, fmt.Sprintf("%s's configuration is %v, not %v", id, members, r.Members))
		}
	}
	if leaders[""] {
		out = append(out, "a journal knows no leader")
	} else if len(leaders) > 1 {
		out = append(out, fmt.Sprintf("the journals name %d leaders", len(leaders)))
	}
	if r.History != "" {
		out = append(out, "not one history: "+r.History)
	}
	return out
}

// CheckMistakes: every mistake was made and met what it must (each
// expected refusal seen, with its evidence; each control and premise
// held), and the quorum acknowledged writes while it was made.
func CheckMistakes(m *MistakesResult, recs []*Record) Check {
	c := Check{Name: InvMistakes}
	if m == nil {
		c.fail("the operator-mistakes scenario recorded nothing")
		return c
	}
	if m.Err != "" {
		c.fail("%s", m.Err)
	}
	refusals := 0
	for _, mk := range m.Mistakes {
		for _, o := range mk.Outcomes {
			c.Checked++
			if o.Refusal {
				refusals++
			}
			if !o.Seen {
				kind := "expected"
				if o.Refusal {
					kind = "expected refusal did not happen"
				}
				c.fail("%s: %s: %s; wanted %s; got %s", mk.Name, kind, o.What, o.Want, o.Got)
			}
		}
		if mk.To > mk.From {
			to := max(mk.To, mk.From+int64(servingWindow))
			if n := ackedWrites(recs, mk.From, to); n == 0 {
				c.fail("%s: no write acknowledged from %.1fs to %.1fs: the quorum did not keep serving", mk.Name, float64(mk.From)/1e9, float64(to)/1e9)
			}
		}
	}
	if len(m.Mistakes) > 0 && refusals == 0 {
		c.fail("no refusal was expected: the mistakes were not made")
	}
	c.Note = fmt.Sprintf("%d mistakes, %d expected refusals (each listed below)", min(len(m.Mistakes), mistakesPlanned), refusals)
	return c
}

// servingWindow is the shortest span over which a mistake must see a write
// acknowledged. The restore under another root is offline file work done
// in a tenth of a second, less than the workload's clients, thinking
// between calls, may take to call a write and have it answered: CI saw a
// healthy quorum acknowledge none inside 0.1 s. A quorum the mistake
// stopped acknowledges none in the second either.
const servingWindow = time.Second

// ackedWrites counts the writes acknowledged that were called and
// answered between from and to (history time).
func ackedWrites(recs []*Record, from, to int64) int {
	n := 0
	for _, r := range recs {
		if r.IsWrite() && r.Out.Result == ResultOK && !r.Final && r.Call >= from && r.Return <= to {
			n++
		}
	}
	return n
}

// CheckOneQuorum: after every mistake each running journal reports one
// quorum id (the one recover printed, after the recovery; never the old
// one), one configuration of voters, one leader, and audit trails of one
// history.
func CheckOneQuorum(m *MistakesResult) Check {
	c := Check{Name: InvOneQuorum}
	if m == nil {
		c.fail("the operator-mistakes scenario recorded nothing")
		return c
	}
	var ids []string
	for _, mk := range m.Mistakes {
		for _, r := range mk.Readings {
			c.Checked += len(r.Members)
			for _, p := range quorumProblems(r) {
				c.fail("%s, %s: %s", mk.Name, r.When, p)
			}
			for _, id := range r.Members {
				if v, ok := r.Views[id]; ok && !slices.Contains(ids, v.QuorumID) {
					ids = append(ids, v.QuorumID)
				}
			}
		}
	}
	if m.Recovered != "" && m.Recovered == m.Initial {
		c.fail("the recovery kept quorum id %s", m.Initial)
	}
	c.Note = fmt.Sprintf("quorum ids %s (before and after the recovery)", strings.Join(ids, " then "))
	return c
}

// lines is the report's account of the mistakes: each expected refusal
// named with what was seen, each control, each reading of one quorum.
func (m *MistakesResult) lines() []string {
	if m == nil {
		return nil
	}
	var out []string
	for k, mk := range m.Mistakes {
		out = append(out, fmt.Sprintf("mistake %d: %s", k+1, mk.Name))
		for _, o := range mk.Outcomes {
			tag := map[bool]string{true: "ok", false: "NOT MET"}[o.Seen]
			if o.Refusal {
				tag = map[bool]string{true: "refused as expected", false: "NOT REFUSED"}[o.Seen]
			}
			line := fmt.Sprintf("  %s: %s: %s", tag, o.What, o.Got)
			if !o.Seen {
				line += " (wanted: " + o.Want + ")"
			}
			out = append(out, line)
		}
		for _, r := range mk.Readings {
			if ps := quorumProblems(r); len(ps) > 0 {
				out = append(out, fmt.Sprintf("  NOT ONE QUORUM %s: %s", r.When, strings.Join(ps, "; ")))
				continue
			}
			id, leader := "", ""
			if len(r.Members) > 0 {
				v := r.Views[r.Members[0]]
				id, leader = v.QuorumID, v.LeaderID
			}
			history := fmt.Sprintf("audit trails one history over %d entries", r.Compared)
			if len(r.Members) == 1 {
				history = "one journal"
			}
			out = append(out, fmt.Sprintf("  one quorum %s: %s (pact journal status -o json), all voters, quorum id %s, leader %s; %s",
				r.When, strings.Join(r.Members, " "), id, leader, history))
		}
		for _, n := range mk.Notes {
			out = append(out, "  "+n)
		}
	}
	if m.Err != "" {
		out = append(out, "mistakes stopped: "+m.Err)
	}
	return out
}
