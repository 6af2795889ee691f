package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// A scenario passes only if it shows that it did what it is about: enough
// operations, the faults it injects, and (for a scenario about leaders) a
// change of leader. A run where the workload stalled, the schedule never
// fired, or the leader never moved proves nothing, so it fails.

// minOpsPerSecond is the fewest calls per second of fault injection a
// scenario must record (a healthy quorum here serves 100-200 a second even
// on a loaded machine; the lagging-follower scenario paces its clients and
// still makes about 30).
const minOpsPerSecond = 10

// LeaderTerm is one leader the watcher saw: who, in which Raft term, when.
type LeaderTerm struct {
	Leader string
	Term   uint64
	At     int64 // history time
}

// leaderWatch polls every journal's status and records each new term with
// a known leader.
type leaderWatch struct {
	mu    sync.Mutex
	seen  []LeaderTerm
	stop  chan struct{}
	done  chan struct{}
	close func()
}

func watchLeaders(q Quorum, h *History) (*leaderWatch, error) {
	admins, closeAll, err := AdminConns(q)
	if err != nil {
		return nil, err
	}
	w := &leaderWatch{stop: make(chan struct{}), done: make(chan struct{}), close: closeAll}
	go func() {
		defer close(w.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			for _, a := range admins {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				st, err := a.JournalStatus(ctx, &pactv1.JournalStatusRequest{})
				cancel()
				if err == nil && st.GetLeaderId() != "" {
					w.saw(LeaderTerm{Leader: st.GetLeaderId(), Term: st.GetTerm(), At: h.Now()})
				}
			}
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w, nil
}

func (w *leaderWatch) saw(lt LeaderTerm) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.seen {
		if s.Term >= lt.Term {
			return
		}
	}
	w.seen = append(w.seen, lt)
}

// Stop ends the watch and returns the leaders seen, oldest first.
func (w *leaderWatch) Stop() []LeaderTerm {
	close(w.stop)
	<-w.done
	w.close()
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]LeaderTerm(nil), w.seen...)
}

// LeaderChanges is how many times a new term with a known leader began
// after the first one seen.
func LeaderChanges(seen []LeaderTerm) int { return max(len(seen)-1, 0) }

// Evidence says what a scenario result lacks to count: too few
// operations, no fault, no leader change where the scenario is about
// leaders, and what its verdict failed to cover (coverage: an invariant
// that checked nothing, too few successes after healing, leader losses
// not probed). Empty means it showed what it is about.
func (r *ScenarioResult) Evidence() []string {
	var out []string
	if r.MinOps > 0 && r.Ops < r.MinOps {
		out = append(out, fmt.Sprintf("only %d operations (at least %d: %d a second of fault injection)", r.Ops, r.MinOps, minOpsPerSecond))
	}
	if r.OK == 0 {
		out = append(out, "no operation succeeded")
	}
	if len(r.Faults) < r.MinFaults {
		out = append(out, fmt.Sprintf("%d faults injected (at least %d)", len(r.Faults), r.MinFaults))
	}
	if r.NeedLeaderChange && LeaderChanges(r.Leaders) == 0 {
		out = append(out, "no leader change seen in a scenario about leaders")
	}
	if r.NeedMembership {
		adds, removes := 0, 0
		if r.Membership != nil {
			adds, removes = r.Membership.Committed()
		}
		if adds == 0 || removes == 0 {
			out = append(out, fmt.Sprintf("%d journal adds and %d removes took effect under a fault (at least 1 each)", adds, removes))
		}
	}
	if r.NeedMistakes {
		made := 0
		if r.Mistakes != nil {
			made = len(r.Mistakes.Mistakes)
		}
		if made < mistakesPlanned {
			out = append(out, fmt.Sprintf("%d of the %d operator mistakes were made", made, mistakesPlanned))
		}
	}
	if r.Liveness != nil && r.LivenessRightly == 0 {
		out = append(out, "no node was marked Inactive while streaming to a journal cut off from the leader (at least 1: the marking must be seen to work)")
	}
	hc := r.Hardware
	if r.NeedMoves && (hc.Moves == 0 || hc.Conflicts == 0) {
		out = append(out, fmt.Sprintf("hardware moved to a new node id %d times, refused as a conflict %d times (at least 1 each)", hc.Moves, hc.Conflicts))
	}
	if r.NeedReboots && (hc.Takeovers == 0 || hc.TakeoversRefused == 0) {
		out = append(out, fmt.Sprintf("reboots with a new key: %d takeovers, %d refused inside the window (at least 1 each)", hc.Takeovers, hc.TakeoversRefused))
	}
	return append(out, r.coverage()...)
}

// HardwareCounts is what a run did with shared hardware and new keys.
type HardwareCounts struct {
	// Moves: registrations that succeeded with hardware another node id
	// registered before; Conflicts: registrations refused as a hardware
	// conflict.
	Moves, Conflicts int
	// Takeovers: reboots with a new key that replaced an active node's
	// certificate; TakeoversRefused: those refused (ALREADY_ACTIVE).
	Takeovers, TakeoversRefused int
}

// CountHardware counts, from a history, what HardwareCounts describes; hw
// maps each node id to its MAC and BMC.
func CountHardware(recs []*Record, hw map[string][2]string) HardwareCounts {
	var hc HardwareCounts
	holders := map[string]map[string]bool{} // MAC -> node ids registered with it
	for _, r := range recs {
		switch {
		case r.In.Kind == OpRegister && r.Out.Result == ResultOK:
			mac := hw[r.In.Node][0]
			for id := range holders[mac] {
				if id != r.In.Node {
					hc.Moves++
					break
				}
			}
			if holders[mac] == nil {
				holders[mac] = map[string]bool{}
			}
			holders[mac][r.In.Node] = true
		case r.In.Kind == OpRegister && r.Out.Reason == "HARDWARE_IDENTITY_CONFLICT":
			hc.Conflicts++
		case r.In.Kind == OpTakeover && r.Out.Result == ResultOK:
			hc.Takeovers++
		case r.In.Kind == OpTakeover && r.Out.Reason == "ALREADY_ACTIVE":
			hc.TakeoversRefused++
		}
	}
	return hc
}
