package raftnode

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/version"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// The quorum's feature level (raftfsm/level.go, docs/upgrade.md): every
// journal advertises the highest level its binary speaks, in its Raft
// hello and its member status; the leader raises the level Raft records
// once every voter and non-voter speaks it. Nothing lowers it: a journal
// whose binary speaks less than the recorded level is refused on the Raft
// port, by pact journal add, and at its own start.

// levelCheckInterval is how often a leader below its own binary's level
// asks the members which level they speak.
const levelCheckInterval = time.Second

// levelView is what the last level check saw: each member's level (0 for
// one that did not answer). Only a leader below its binary's level checks;
// pact journal add reads it (MembersLevel).
type levelView struct {
	mu      sync.Mutex
	members map[string]memberLevel
}

type memberLevel struct {
	level   uint32 // effective (a release before levels: 1); 0 unknown
	release string
}

func (v *levelView) set(m map[string]memberLevel) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.members = m
}

func (v *levelView) get() map[string]memberLevel {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.members
}

// release is this binary's release as it advertises it.
func release() string { return version.Get().Version }

// QuorumLevel returns the quorum's recorded feature level.
func (n *Node) QuorumLevel() uint32 {
	l, _ := n.fsm.QuorumLevel()
	return l
}

// MembersBelow returns the members whose binaries speak less than level
// (or did not answer), each as "ID (release R, level L)", sorted.
func MembersBelow(members []*pactv1.JournalMember, level uint32) []string {
	var out []string
	for _, m := range members {
		switch l := raftfsm.EffectiveLevel(m.GetFeatureLevel()); {
		case !m.GetReachable():
			out = append(out, m.GetJournalId()+" (did not answer)")
		case l < level:
			rel := m.GetRelease()
			if rel == "" {
				rel = versionWord(m.GetVersion())
			}
			out = append(out, fmt.Sprintf("%s (release %s, level %d)", m.GetJournalId(), orUnknownRelease(rel), l))
		}
	}
	sort.Strings(out)
	return out
}

func orUnknownRelease(r string) string {
	if r == "" {
		return "before 0.2.0"
	}
	return r
}

// MembersLevel is the lowest level every member of the configuration spoke
// at the last check (0 if one did not answer, or no check ran).
func (n *Node) MembersLevel() uint32 {
	m := n.levels.get()
	if len(m) == 0 {
		return 0
	}
	lowest := uint32(raftfsm.FeatureLevel)
	for _, ml := range m {
		if ml.level < lowest {
			lowest = ml.level
		}
	}
	return lowest
}

// levelLoop runs on every journal; while it leads a quorum recorded below
// this binary's level, it asks every member which level it speaks and
// raises the recorded level to the lowest of them once that is higher.
func (n *Node) levelLoop() {
	// At once when this journal becomes leader (a quorum just founded by
	// journals of this release runs at its level from its first seconds),
	// then every tick while the level is below this binary's.
	obs := make(chan raft.Observation, 4)
	o := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(o)
	defer n.raft.DeregisterObserver(o)
	tick := time.NewTicker(levelCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-obs:
		case <-tick.C:
		}
		if n.raft.State() != raft.Leader || n.Halted() != "" || n.QuorumLevel() >= raftfsm.FeatureLevel {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout)
		n.checkLevel(ctx)
		cancel()
	}
}

// checkLevel is one round of levelLoop.
func (n *Node) checkLevel(ctx context.Context) {
	members, err := n.Members(ctx)
	if err != nil {
		return
	}
	seen := make(map[string]memberLevel, len(members))
	lowest := uint32(raftfsm.FeatureLevel)
	for _, m := range members {
		ml := memberLevel{release: m.GetRelease()}
		if m.GetReachable() && m.GetHalted() == "" {
			ml.level = raftfsm.EffectiveLevel(m.GetFeatureLevel())
			if ml.release == "" && m.GetFeatureLevel() == 0 {
				ml.release = versionWord(m.GetVersion())
			}
		}
		seen[m.GetJournalId()] = ml
		if ml.level < lowest {
			lowest = ml.level
		}
	}
	n.levels.set(seen)
	recorded := n.QuorumLevel()
	if lowest <= recorded {
		return
	}
	// The state must hold everything committed before this term before
	// the recorded level is compared (readindex.go).
	if err := n.ReadBarrier(ctx); err != nil || lowest <= n.QuorumLevel() {
		return
	}
	op := &pactv1.SetQuorumLevelOp{Level: lowest, Release: raftfsm.ReleaseOfLevel(lowest), Members: map[string]uint32{}}
	for id, ml := range seen {
		op.Members[id] = ml.level
	}
	cmd := &pactv1.Command{Actor: "journal/" + n.cfg.NodeID, Op: &pactv1.Command_SetQuorumLevel{SetQuorumLevel: op}}
	if _, err := n.Propose(ctx, cmd); err != nil {
		n.log.Warn("could not raise the quorum's feature level; retrying", logkey.Err, err)
		return
	}
	n.log.Info("quorum feature level raised: every member runs a release that speaks it",
		logkey.FeatureLevel, lowest, logkey.Was, recorded)
}

// versionWord is the first word of a member's version string ("v0.1.0" of
// "v0.1.0 (commit ...)").
func versionWord(v string) string {
	w, _, _ := strings.Cut(v, " ")
	return w
}

// checkPeerLevel refuses a peer whose binary speaks less than the quorum's
// recorded level: it could not apply the log from there on (a downgrade,
// or an old binary restored onto a host).
func (n *Node) checkPeerLevel(peerID string, advertised uint32, rel string) error {
	recorded := n.QuorumLevel()
	if got := raftfsm.EffectiveLevel(advertised); got < recorded {
		return refusal(refusedFeatureLevel, "journal %s runs release %s, which speaks quorum feature level %d; this quorum runs at level %d: install release %s or newer on it (docs/upgrade.md)",
			peerID, orUnknownRelease(rel), got, recorded, raftfsm.ReleaseOfLevel(recorded))
	}
	return nil
}
