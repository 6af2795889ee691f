package raftfsm

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The quorum's feature level (docs/upgrade.md) is the version of what its
// journals must all understand alike: the Raft commands and how Apply
// decides them, the snapshot format, the certificate layout. It is not the
// release: a release that changes none of them keeps the level. Each
// journal advertises the highest level its binary speaks (FeatureLevel);
// the leader records the quorum's level in Raft (SetQuorumLevelOp) once
// every voter and non-voter speaks it, and never lowers it. Apply decides
// every command by the recorded level, so a journal of this release in a
// quorum still at level 1 applies the log exactly as a journal of the
// previous release does: their registries stay identical whatever the
// order of the upgrade and whoever leads.

// FeatureLevel is the highest quorum feature level this binary speaks.
const FeatureLevel = 3

// LevelUnversioned is the level of a journal that advertises none: the
// releases before feature levels (0.1.0).
const LevelUnversioned = 1

// The levels that brought what the journals gate on it (Levels says what
// else each adds).
const (
	// LevelJournalBinding: journal ids bound to journal CAs by operators
	// (pact journal add, record-ca).
	LevelJournalBinding = 2
	// LevelBootPolicies: measured boot policies.
	LevelBootPolicies = 3
	// LevelFederation: federated domains and their claims.
	LevelFederation = 3
)

// Level describes one feature level: the first release that speaks it and
// what it adds.
type Level struct {
	Level   uint32
	Release string
	Adds    string
}

// Levels lists every level this binary knows, oldest first. A level added
// since the last release names the next release: levels accumulate
// between releases (a release may speak several new ones, and a quorum of
// it moves up to the highest in one step), and RELEASES is never behind
// what Levels promises (TestLevelsNameReleases).
var Levels = []Level{
	{1, "0.1.0", "the registry, the journal CA layout and quorum ids (the first release)"},
	{2, "0.2.0", "the quorum level itself; journal ids bound to the journal CA Raft recorded " +
		"(pact journal record-ca, pact journal add binding a journal CA, publishes refused under " +
		"another journal CA); a node whose certificate the registry withdrew enrolls with a new key " +
		"at once; snapshot format 3"},
	{3, "0.2.0", "federation with other domains (pact domain federate/list/remove, the federated " +
		"bundles refreshed into Raft, snapshot records of federated domains); boot policies for " +
		"TPM nodes' quotes (pact boot-policy set/remove, snapshot records of boot policies)"},
}

// ReleaseOfLevel names the first release that speaks level ("" if this
// binary does not know it).
func ReleaseOfLevel(level uint32) string {
	for _, l := range Levels {
		if l.Level == level {
			return l.Release
		}
	}
	return ""
}

// EffectiveLevel is the level a journal speaks that advertised level
// (0: a release before feature levels).
func EffectiveLevel(advertised uint32) uint32 {
	if advertised == 0 {
		return LevelUnversioned
	}
	return advertised
}

// ErrQuorumVersion: a command of a feature level above the quorum's
// recorded level. The message names the level needed; the journal that
// refuses it names the journals still to upgrade.
var ErrQuorumVersion = errors.New("raftfsm: the quorum's feature level is too low")

// QuorumVersionError says that a feature needs level Need and the quorum
// runs at Have; Below names the journals whose binaries speak less (empty
// when the caller does not know them).
type QuorumVersionError struct {
	Feature    string
	Need, Have uint32
	Below      []string
}

func (e *QuorumVersionError) Error() string {
	msg := fmt.Sprintf("%s needs quorum feature level %d (release %s or newer on every journal); this quorum runs at level %d",
		e.Feature, e.Need, ReleaseOfLevel(e.Need), e.Have)
	if len(e.Below) > 0 {
		msg += ": upgrade " + strings.Join(e.Below, ", ") + " first (docs/upgrade.md)"
	} else {
		msg += ": finish upgrading every journal (docs/upgrade.md); the leader raises the level within seconds once all speak it"
	}
	return msg
}

func (e *QuorumVersionError) Is(target error) bool { return target == ErrQuorumVersion }

// level is the quorum's recorded feature level (LevelUnversioned if none).
func (s *state) level() uint32 {
	if s.quorumLevel == nil {
		return LevelUnversioned
	}
	return EffectiveLevel(s.quorumLevel.GetLevel())
}

// atLeast reports whether the quorum's recorded level is at least l: how
// Apply chooses between the rules of two levels.
func (a *applier) atLeast(l uint32) bool { return a.s.level() >= l }

// setQuorumLevel raises the quorum's level. It never lowers it: a command
// naming a level at or below the recorded one changes nothing. A level
// above FeatureLevel never reaches here: Apply halts at its entry first
// (levelAboveBinary).
func (a *applier) setQuorumLevel(op *pactv1.SetQuorumLevelOp) *Result {
	l := op.GetLevel()
	if l < LevelUnversioned {
		return fail(fmt.Errorf("%w: feature level %d", ErrInvalidCommand, l))
	}
	prev := a.s.level()
	if l <= prev {
		return &Result{Idempotent: true}
	}
	a.s.quorumLevel = &pactv1.QuorumLevel{Level: l, Release: op.GetRelease(), SetAtIndex: a.index}
	ids := make([]string, 0, len(op.GetMembers()))
	for id := range op.GetMembers() {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var members []string
	for _, id := range ids {
		members = append(members, id+"="+strconv.FormatUint(uint64(op.GetMembers()[id]), 10))
	}
	a.record("quorum-level", "", "", fmt.Sprintf("feature level %d (was %d; release %s or newer on every journal; members %s)",
		l, prev, op.GetRelease(), strings.Join(members, " ")))
	a.ev.QuorumChanged = true
	return &Result{}
}

// levelAboveBinary returns why this binary cannot apply cmd, or "": a
// SetQuorumLevelOp (alone or in a batch) naming a level above
// FeatureLevel. Applying the commands after it with this binary's rules
// would diverge from the journals that speak it, so the FSM halts there,
// as at an operation it does not know.
func levelAboveBinary(cmd *pactv1.Command, index uint64) string {
	check := func(c *pactv1.Command) string {
		l := c.GetSetQuorumLevel().GetLevel()
		if l <= FeatureLevel {
			return ""
		}
		rel := c.GetSetQuorumLevel().GetRelease()
		if rel == "" {
			rel = "a newer release"
		}
		return fmt.Sprintf("log entry %d raises the quorum's feature level to %d, and this journal's binary speaks up to %d: "+
			"install release %s or newer on this journal (docs/upgrade.md)", index, l, FeatureLevel, rel)
	}
	if why := check(cmd); why != "" {
		return why
	}
	for _, sub := range cmd.GetBatch().GetCommands() {
		if why := check(sub); why != "" {
			return why
		}
	}
	return ""
}

// QuorumLevel returns the quorum's recorded feature level and the release
// recorded with it ("" for level 1, which no command recorded).
func (f *FSM) QuorumLevel() (uint32, string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.st.quorumLevel == nil {
		return LevelUnversioned, ReleaseOfLevel(LevelUnversioned)
	}
	return f.st.level(), f.st.quorumLevel.GetRelease()
}

// CheckStart says why a journal whose binary speaks FeatureLevel may not
// serve this state, or nil: its recorded level is above the binary's (a
// downgrade, or an old binary restored onto new data).
func (f *FSM) CheckStart() error {
	l, rel := f.QuorumLevel()
	if l <= FeatureLevel {
		return nil
	}
	if rel == "" {
		rel = "a newer release"
	}
	return fmt.Errorf("%w: this journal's registry is at quorum feature level %d and its binary speaks up to %d: install release %s or newer (a journal is never downgraded below its quorum's level; docs/upgrade.md)",
		ErrQuorumVersion, l, FeatureLevel, rel)
}
