package chaos

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The membership scenario runs five journal slots of which three form the
// quorum; the other two wait empty with --join. Under the workload it adds
// and removes journals (pact journal add/remove, as the CLI does: through
// the leader) while a leader is killed or a minority is cut off, and
// records every answer. A removed journal must stop on its own (exit 3);
// the harness then empties its data directory and starts it with --join
// again, so it can be added back later.

// MemberAttempt is one AddJournal or RemoveJournal call.
type MemberAttempt struct {
	Via          string // the journal asked (the one that led, as far as the harness knew)
	Call, Return int64
	Out          Output
	Msg          string // the error's text, empty on success
}

// MemberChange is one change the scenario asked for, with every attempt
// (a change is retried while no leader answers) and the configuration the
// leader reported before it and once the fault was healed.
type MemberChange struct {
	Op       string // "add" or "remove"
	Journal  string
	During   string // the fault in effect while it was asked
	Before   []string
	After    []string
	Attempts []MemberAttempt
}

// RemovedJournal is what became of a journal once its removal committed.
type RemovedJournal struct {
	Journal string
	// Exited: its process ended on its own; Code is its exit status (3:
	// removed from the quorum).
	Exited bool
	Code   int
	Detail string
}

// MembershipResult is what the membership scenario saw.
type MembershipResult struct {
	Changes []MemberChange
	Removed []RemovedJournal
	// Asked is the configuration the changes led to (the last After);
	// Views is each of its members' own configuration at the end
	// (journal -> voters, then "~id" for each non-voter), read once every
	// member agreed or the wait ran out.
	Asked []string
	Views map[string][]string
	Err   string
}

const (
	opAdd    = "add"
	opRemove = "remove"
)

func (c MemberChange) acked() bool {
	return slices.ContainsFunc(c.Attempts, func(a MemberAttempt) bool { return a.Out.Result == ResultOK })
}

// ambiguous: an attempt whose answer does not say whether the change was
// made: an unknown outcome, or NO_LEADER, which a leader that removed
// itself may answer after committing (docs/quorum.md, --force).
func (c MemberChange) ambiguous() bool {
	return slices.ContainsFunc(c.Attempts, func(a MemberAttempt) bool {
		return a.Out.Result == ResultUnknown || a.Out.Reason == "NO_LEADER"
	})
}

// Took effect: the journal is in (add) or out of (remove) the
// configuration after, and was not before.
func (c MemberChange) tookEffect() bool {
	want := c.Op == opAdd
	return slices.Contains(c.Before, c.Journal) != want && slices.Contains(c.After, c.Journal) == want
}

// Committed counts the adds and removes that took effect while a fault
// was in place (the evidence the scenario must show).
func (m *MembershipResult) Committed() (adds, removes int) {
	for _, c := range m.Changes {
		if c.During == "" || !c.tookEffect() {
			continue
		}
		if c.Op == opAdd {
			adds++
		} else {
			removes++
		}
	}
	return adds, removes
}

// clearRefusals are the answers a membership change may be refused with:
// each says what happened and what to do.
var clearRefusals = map[string]bool{
	"MEMBERSHIP_REFUSED": true, // the quorum arithmetic, a probe that failed, a change in progress
	"NO_LEADER":          true, // asked a journal that does not lead (now)
	"UNREACHABLE":        true, // the request never left
	"JOURNAL_HALTED":     true, // asked a removed journal
	"NOT_FOUND":          true, // remove of a journal not in the configuration
}

// CheckMembership: every change was answered with success, a clear
// refusal or an unknown outcome; one acknowledged is in effect, one
// refused (with no ambiguous attempt) is not; every member ends with the
// configuration the changes led to, all voters; every removed journal
// stopped on its own with exit code 3.
func CheckMembership(m *MembershipResult) Check {
	c := Check{Name: InvMembership}
	if m == nil {
		c.fail("the membership scenario recorded nothing")
		return c
	}
	if m.Err != "" {
		c.fail("%s", m.Err)
	}
	acked, refused, unknown := 0, 0, 0
	for k, ch := range m.Changes {
		c.Checked++
		for _, a := range ch.Attempts {
			switch {
			case a.Out.Result == ResultOK:
				acked++
			case a.Out.Result == ResultFailed && clearRefusals[a.Out.Reason] && a.Msg != "":
				refused++
			case a.Out.Result == ResultUnknown && a.Out.Reason != "INTERNAL":
				unknown++
			default:
				c.fail("change %d (%s %s via %s): answered %s %q, neither success nor a clear refusal", k+1, ch.Op, ch.Journal, a.Via, outcome(a.Out), a.Msg)
			}
		}
		want := ch.Op == opAdd
		in := slices.Contains(ch.After, ch.Journal)
		switch {
		case ch.acked() && in != want:
			c.fail("change %d (%s %s during %q) was acknowledged but the configuration after it is %v", k+1, ch.Op, ch.Journal, ch.During, ch.After)
		case !ch.acked() && !ch.ambiguous() && in != slices.Contains(ch.Before, ch.Journal):
			c.fail("change %d (%s %s during %q) was refused or never asked (%s) but took effect: %v before, %v after", k+1, ch.Op, ch.Journal, ch.During, attemptsSummary(ch.Attempts), ch.Before, ch.After)
		}
	}
	for id, view := range m.Views {
		if !slices.Equal(view, m.Asked) {
			c.fail("journal %s ends with the configuration %v, not %v (what the changes asked for, all voters)", id, view, m.Asked)
		}
	}
	for _, id := range m.Asked {
		if _, ok := m.Views[id]; !ok {
			c.fail("member %s did not report its configuration at the end", id)
		}
	}
	for _, r := range m.Removed {
		c.Checked++
		if !r.Exited || r.Code != 3 {
			c.fail("%s was removed but did not stop with exit code 3 (exited %v, code %d): %s", r.Journal, r.Exited, r.Code, r.Detail)
		}
	}
	adds, removes := m.Committed()
	c.Note = fmt.Sprintf("%d changes (%d adds, %d removes took effect under a fault); answers: %d ok, %d refused, %d unknown; %d removed journals exited 3; final configuration %v",
		len(m.Changes), adds, removes, acked, refused, unknown, len(m.Removed), m.Asked)
	return c
}

// memberOps is what the membership scenario needs beyond Quorum: a
// journal process's exit and a fresh --join start.
type memberOps interface {
	Rejoin(i int) error
	Exited(i int) <-chan struct{}
	ExitError(i int) error
	Raft(i int) string
}

// membershipChurn is the membership scenario's schedule.
func membershipChurn(e *Env) error {
	mo, ok := e.Q.(memberOps)
	if !ok {
		return errors.New("the membership scenario needs journal processes (not containers)")
	}
	admins, closeAdmins, err := AdminConns(e.Q)
	if err != nil {
		return err
	}
	defer closeAdmins()
	m := &MembershipResult{}
	e.mu.Lock()
	e.members = m
	e.mu.Unlock()
	index := map[string]int{}
	for i := range e.Q.Size() {
		index[e.Q.ID(i)] = i
	}
	conf, err := leaderConfig(e.Q, admins, 30*time.Second)
	if err != nil {
		return err
	}
	lastOp := opRemove
	for e.sleep(e.between(time.Second, 2*time.Second)) {
		members := conf.all()
		var outside []int
		for i := range e.Q.Size() {
			if !slices.Contains(members, e.Q.ID(i)) {
				outside = append(outside, i)
			}
		}
		// The fault.
		l, err := Leader(context.Background(), e.Q, 30*time.Second, indices(index, members)...)
		if err != nil {
			return err
		}
		var killed = -1
		var faulted []int
		var kind, label string
		if e.Rng.IntN(2) == 0 {
			if err := e.Q.Kill(l); err != nil {
				return err
			}
			killed, faulted, kind, label = l, []int{l}, "SIGKILL", e.Q.ID(l)+"(leader)"
		} else {
			size := (len(members) - 1) / 2
			pool := slices.DeleteFunc(indices(index, members), func(i int) bool { return i == l })
			e.Rng.Shuffle(len(pool), func(a, b int) { pool[a], pool[b] = pool[b], pool[a] })
			if e.Rng.IntN(2) == 0 {
				faulted = append(faulted, l)
			}
			for len(faulted) < size {
				faulted, pool = append(faulted, pool[0]), pool[1:]
			}
			major := e.others(faulted...)
			if err := e.cut([][]int{faulted, major}, faulted); err != nil {
				return err
			}
			kind, label = "partition", names(e.Q, faulted)+"|"+names(e.Q, major)
			if slices.Contains(faulted, l) {
				label += " (leader cut off)"
			}
		}
		k := e.addFault(kind, label)
		if killed >= 0 {
			e.leaderLost()
		}
		label = kind + " " + label
		// The change, asked while the fault is in place.
		ch := MemberChange{During: label, Before: members}
		switch {
		case len(outside) > 0 && (len(members) <= 3 || (lastOp == opRemove && e.Rng.IntN(4) != 0) || len(members) < 5 && e.Rng.IntN(4) == 0):
			ch.Op, ch.Journal = opAdd, e.Q.ID(outside[e.Rng.IntN(len(outside))])
		default:
			ch.Op = opRemove
			switch p := e.Rng.IntN(3); {
			case p == 0:
				ch.Journal = e.Q.ID(faulted[e.Rng.IntN(len(faulted))])
			case p == 1:
				if nl, err := Leader(context.Background(), e.Q, 5*time.Second, e.others(faulted...)...); err == nil {
					ch.Journal = e.Q.ID(nl)
					break
				}
				fallthrough
			default:
				ch.Journal = members[e.Rng.IntN(len(members))]
			}
		}
		lastOp = ch.Op
		e.Logf("membership: %s %s during %s", ch.Op, ch.Journal, label)
		ch.Attempts = askChange(e, admins, index, members, ch.Op, ch.Journal, mo.Raft(index[ch.Journal]))
		// Hold the fault a little longer, then heal.
		time.Sleep(e.between(500*time.Millisecond, 1500*time.Millisecond))
		if killed >= 0 {
			if err := e.Q.Start(killed); err != nil {
				return err
			}
		} else if err := e.uncut(); err != nil {
			return err
		}
		e.heal(k)
		if conf, err = leaderConfig(e.Q, admins, 60*time.Second); err != nil {
			return err
		}
		ch.After = conf.all()
		m.Changes = append(m.Changes, ch)
		e.Logf("membership: %s %s: %s; configuration %v", ch.Op, ch.Journal, attemptsSummary(ch.Attempts), ch.After)
		// A removed journal stops by itself; bring it back empty, waiting
		// with --join. Every other journal serves again.
		for _, id := range ch.Before {
			if slices.Contains(ch.After, id) {
				continue
			}
			i := index[id]
			r := RemovedJournal{Journal: id}
			if !e.Q.Running(i) { // killed before it could learn: started again, it must find out
				if err := e.Q.Start(i); err != nil {
					return err
				}
			}
			select {
			case <-mo.Exited(i):
				r.Exited = true
				var ee *exec.ExitError
				if err := mo.ExitError(i); errors.As(err, &ee) {
					r.Code = ee.ExitCode()
				} else if err == nil {
					r.Code = 0
				}
			case <-time.After(60 * time.Second):
				r.Detail = "still running 60 s after its removal committed"
				if err := e.Q.Stop(i); err != nil {
					return err
				}
			}
			m.Removed = append(m.Removed, r)
			if err := mo.Rejoin(i); err != nil {
				return err
			}
			if err := e.Q.Start(i); err != nil {
				return err
			}
		}
		for i := range e.Q.Size() {
			if err := waitUp(e.Q, i, 90*time.Second); err != nil {
				return err
			}
		}
	}
	// Every member ends with the configuration the changes led to, every
	// one a voter (a non-voter is promoted once caught up).
	m.Asked = conf.all()
	m.Views = map[string][]string{}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		agree := true
		for _, id := range m.Asked {
			v, err := ownConfig(admins[index[id]])
			if err != nil {
				agree = false
				continue
			}
			m.Views[id] = v
			agree = agree && slices.Equal(v, m.Asked)
		}
		if agree && len(m.Views) == len(m.Asked) || time.Now().After(deadline) {
			break
		}
	}
	e.mu.Lock()
	e.view = subQuorum(e.Q, indices(index, m.Asked))
	e.mu.Unlock()
	return nil
}

func indices(index map[string]int, ids []string) []int {
	out := make([]int, 0, len(ids))
	for _, id := range ids {
		out = append(out, index[id])
	}
	slices.Sort(out)
	return out
}

// askChange sends one change to the journal that leads, again while no
// leader answers, for at most 20 s; it returns every attempt.
func askChange(e *Env, admins []pactv1.AdminServiceClient, index map[string]int, members []string, op, id, raftAddr string) []MemberAttempt {
	var out []MemberAttempt
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		l, err := Leader(context.Background(), e.Q, time.Until(deadline), indices(index, members)...)
		if err != nil {
			break
		}
		a := MemberAttempt{Via: e.Q.ID(l), Call: e.H.Now()}
		ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
		if op == opAdd {
			_, err = admins[l].AddJournal(ctx, &pactv1.AddJournalRequest{JournalId: id, RaftAddr: raftAddr})
		} else {
			_, err = admins[l].RemoveJournal(ctx, &pactv1.RemoveJournalRequest{JournalId: id})
		}
		cancel()
		a.Return = e.H.Now()
		if err != nil {
			a.Out, a.Msg = Classify(err), err.Error()
		} else {
			a.Out = Output{Result: ResultOK}
		}
		out = append(out, a)
		switch {
		case a.Out.Result == ResultOK, a.Out.Result == ResultUnknown:
			// An unknown outcome is resolved by the configuration after.
			return out
		case a.Out.Reason == "NO_LEADER", a.Out.Reason == "UNREACHABLE", a.Out.Reason == "JOURNAL_HALTED":
			time.Sleep(300 * time.Millisecond)
		default:
			return out // a definite refusal
		}
	}
	return out
}

func attemptsSummary(as []MemberAttempt) string {
	var parts []string
	for _, a := range as {
		s := outcome(a.Out)
		if a.Msg != "" && a.Out.Result != ResultOK {
			msg := a.Msg
			if len(msg) > 100 {
				msg = msg[:100] + "..."
			}
			s += " (" + msg + ")"
		}
		parts = append(parts, a.Via+": "+s)
	}
	if len(parts) == 0 {
		return "no leader to ask"
	}
	return strings.Join(parts, "; ")
}

type configuration struct{ voters, nonvoters []string }

func (c configuration) all() []string {
	return slices.Sorted(slices.Values(append(slices.Clone(c.voters), c.nonvoters...)))
}

// leaderConfig is the configuration the leader with the highest term
// reports (every journal is asked; the harness has healed the faults).
func leaderConfig(q Quorum, admins []pactv1.AdminServiceClient, timeout time.Duration) (configuration, error) {
	deadline := time.Now().Add(timeout)
	for {
		var best *pactv1.JournalStatusResponse
		for i := range q.Size() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := admins[i].JournalStatus(ctx, &pactv1.JournalStatusRequest{})
			cancel()
			if err != nil || st.GetLeaderId() == "" || st.GetLeaderId() != st.GetServedBy() {
				continue
			}
			if best == nil || st.GetTerm() > best.GetTerm() {
				best = st
			}
		}
		if best != nil {
			var c configuration
			for _, m := range best.GetMembers() {
				if m.GetVoter() {
					c.voters = append(c.voters, m.GetJournalId())
				} else {
					c.nonvoters = append(c.nonvoters, m.GetJournalId())
				}
			}
			slices.Sort(c.voters)
			slices.Sort(c.nonvoters)
			return c, nil
		}
		if time.Now().After(deadline) {
			return configuration{}, fmt.Errorf("no journal led within %v", timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ownConfig is the configuration a journal reports: its voters, then each
// non-voter as "~id".
func ownConfig(a pactv1.AdminServiceClient) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := a.JournalStatus(ctx, &pactv1.JournalStatusRequest{})
	if err != nil {
		return nil, err
	}
	var voters, non []string
	for _, m := range st.GetMembers() {
		if m.GetVoter() {
			voters = append(voters, m.GetJournalId())
		} else {
			non = append(non, "~"+m.GetJournalId())
		}
	}
	slices.Sort(voters)
	slices.Sort(non)
	return append(voters, non...), nil
}

// subset is a view of some of a quorum's journals (the members at the end
// of the membership scenario), for the checks after a run.
type subset struct {
	Quorum
	is []int
}

func subQuorum(q Quorum, is []int) Quorum { return &subset{Quorum: q, is: is} }

func (s *subset) Size() int                 { return len(s.is) }
func (s *subset) ID(i int) string           { return s.Quorum.ID(s.is[i]) }
func (s *subset) GRPC(i int) string         { return s.Quorum.GRPC(s.is[i]) }
func (s *subset) Metrics(i int) string      { return s.Quorum.Metrics(s.is[i]) }
func (s *subset) Start(i int) error         { return s.Quorum.Start(s.is[i]) }
func (s *subset) Kill(i int) error          { return s.Quorum.Kill(s.is[i]) }
func (s *subset) Stop(i int) error          { return s.Quorum.Stop(s.is[i]) }
func (s *subset) Pause(i int) error         { return s.Quorum.Pause(s.is[i]) }
func (s *subset) Resume(i int) error        { return s.Quorum.Resume(s.is[i]) }
func (s *subset) Running(i int) bool        { return s.Quorum.Running(s.is[i]) }
func (s *subset) Log(i int) string          { return s.Quorum.Log(s.is[i]) }
func (s *subset) CanPartition() bool        { return false }
func (s *subset) Partition(g [][]int) error { return errors.New("a view of a quorum cannot partition") }
func (s *subset) WaitServing(i int, t time.Duration) error {
	return s.Quorum.WaitServing(s.is[i], t)
}

func outcome(o Output) string {
	if o.Reason == "" {
		return string(o.Result)
	}
	return string(o.Result) + " " + o.Reason
}
