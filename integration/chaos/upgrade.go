package chaos

import (
	"errors"
	"fmt"
	"time"
)

// binSetter is a quorum whose journals can be started from another
// directory's pact-journal (launch.ProcQuorum).
type binSetter interface {
	SetBin(i int, dir string)
}

// upgradeOrders are the orders rollingUpgrade draws from.
var upgradeOrders = []string{"followers-first", "leader-first", "leader-killed"}

// rollingUpgrade upgrades every journal, started on the previous release
// (Scenario.Upgrade), to e.Bin's pact-journal one at a time on the same
// data directory and flags, under the workload, in an order drawn from the
// seed: the followers and then the leader (SIGTERM each); the leader first
// and then the others; or a follower, then the leader SIGKILLed and
// restarted on the new release, then the last. Each upgrade is a fault
// from its stop to the new process serving. It upgrades every journal
// even when the fault time ends half way, so the checks always meet a
// quorum of the new release.
func rollingUpgrade(e *Env) error {
	bs, ok := e.Q.(binSetter)
	if !ok {
		return errors.New("rolling-upgrade needs journal processes")
	}
	order := upgradeOrders[e.Rng.IntN(len(upgradeOrders))]
	e.note("rolling-upgrade order: %s", order)
	e.Logf("rolling upgrade, %s, to %s", order, e.Bin)
	upgraded := map[int]bool{}
	step := func(i int, kill bool) error {
		l, err := e.leader()
		if err != nil {
			return err
		}
		what := e.Q.ID(i)
		if i == l {
			what += "(leader)"
		}
		if kill {
			if err := e.Q.Kill(i); err != nil {
				return err
			}
			what += " SIGKILL"
		} else if err := e.Q.Stop(i); err != nil {
			return fmt.Errorf("stopping %s for its upgrade: %w", e.Q.ID(i), err)
		}
		k := e.addFault("upgrade", what)
		if i == l {
			e.leaderLost()
		}
		bs.SetBin(i, e.Bin)
		upgraded[i] = true
		if err := e.restart(i); err != nil {
			return fmt.Errorf("%s on the new release: %w", e.Q.ID(i), err)
		}
		e.heal(k)
		// The mixed quorum serves the workload for a while before the
		// next step (not when the fault time is over: finish the upgrade).
		e.sleep(e.between(3*time.Second, 6*time.Second))
		return nil
	}
	pending := func(except int) []int {
		var out []int
		for i := range e.Q.Size() {
			if !upgraded[i] && i != except {
				out = append(out, i)
			}
		}
		return out
	}
	if !e.sleep(e.between(2*time.Second, 4*time.Second)) {
		return nil
	}
	switch order {
	case "followers-first":
		l, err := e.leader()
		if err != nil {
			return err
		}
		for _, i := range pending(l) {
			if err := step(i, false); err != nil {
				return err
			}
		}
	case "leader-first":
		l, err := e.leader()
		if err != nil {
			return err
		}
		if err := step(l, false); err != nil {
			return err
		}
	case "leader-killed":
		l, err := e.leader()
		if err != nil {
			return err
		}
		if err := step(pending(l)[0], false); err != nil {
			return err
		}
		if l, err = e.leader(); err != nil {
			return err
		}
		if err := step(l, true); err != nil {
			return err
		}
	}
	for _, i := range pending(-1) {
		if err := step(i, false); err != nil {
			return err
		}
	}
	e.note("every journal runs the new release from %s into the run on", time.Duration(e.H.Now()).Round(time.Second))
	for e.sleep(time.Second) {
	}
	return nil
}
