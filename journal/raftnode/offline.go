package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/pact-hpc/pact/internal/clock"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Offline tools on a stopped journal's Raft stores: seed a new quorum
// from a snapshot's state, and turn surviving journals into a new quorum.

// ErrDataDirNotEmpty: a restore was pointed at a data directory that
// already holds Raft state.
var ErrDataDirNotEmpty = errors.New("journal: data directory already holds Raft state")

// WriteRestored writes state, a checked snapshot's (header h), into the
// empty data directory dir as a Raft snapshot whose configuration is
// initialCluster, and records the new quorum's id, derived from the file
// and the members (the same on every journal restored alike). It returns
// that id.
func WriteRestored(dir string, initialCluster []Peer, h *pactv1.SnapshotHeader, state []byte) (string, error) {
	if err := checkEmptyRaft(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		return "", err
	}
	var cfg raft.Configuration
	for _, p := range initialCluster {
		cfg.Servers = append(cfg.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr), Suffrage: raft.Voter})
	}
	_, trans := raft.NewInmemTransport("")
	// The new quorum's log continues after the snapshot's index, in a term
	// at least the snapshot's.
	index, term := max(h.GetIndex(), 1), max(h.GetTerm(), 1)
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, term, cfg, index, trans)
	if err != nil {
		return "", err
	}
	if _, err := sink.Write(state); err != nil {
		_ = sink.Cancel()
		return "", err
	}
	if err := sink.Close(); err != nil {
		return "", err
	}
	store, err := openStore(dir)
	if err != nil {
		return "", err
	}
	defer store.Close()
	if err := store.SetUint64([]byte("CurrentTerm"), term); err != nil {
		return "", err
	}
	// A restored quorum is a new quorum: journals of the one the snapshot
	// was taken from cannot speak Raft with it, nor it with them.
	parts := []string{"pact restore", string(h.GetSha256()), h.GetQuorumId()}
	parts = append(parts, peerParts(initialCluster)...)
	qid := deriveQuorumID(parts...)
	if err := store.Set([]byte(keyQuorumID), []byte(qid)); err != nil {
		return "", err
	}
	if err := store.Set([]byte(keyPreviousQuorumID), []byte(h.GetQuorumId())); err != nil {
		return "", err
	}
	return qid, nil
}

// checkEmptyRaft refuses a data directory that already holds Raft state
// (or was a journal removed from a quorum).
func checkEmptyRaft(dir string) error {
	for _, name := range []string{"raft.db", "snapshots", RemovedMarker} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return fmt.Errorf("%w: %s exists; restore into a new, empty --data-dir (move the old one aside if it is to be replaced)", ErrDataDirNotEmpty, filepath.Join(dir, name))
		}
	}
	return nil
}

func openStore(dir string) (*raftboltdb.BoltStore, error) {
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(dir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("journal: %s is locked: stop the pact-journal using this --data-dir first", filepath.Join(dir, "raft.db"))
		}
		return nil, fmt.Errorf("journal: open raft store: %w", err)
	}
	return store, nil
}

// RecoverConfig turns a surviving journal's data directory into a quorum of
// Members after the majority was lost for good.
type RecoverConfig struct {
	DataDir string
	NodeID  string
	Members []Peer
	// Credentials are the survivor's own (its root and journal CA), with
	// which Recover first asks the voters of its last configuration on
	// their Raft ports whether their quorum still runs (a probe, as the
	// bootstrap agreement's), and PeerAuth authenticates the journals
	// that answer (a journal/auth PeerVerifier without Raft's records).
	// Nil only with EvenIfQuorumAnswers.
	Credentials Credentials
	PeerAuth    PeerAuth
	// EvenIfQuorumAnswers recovers without asking, or although the
	// journals that answer and this one are a majority: the survivor then
	// leaves a quorum that runs on, and serves a registry of its own.
	EvenIfQuorumAnswers bool
	// ProbeTimeout bounds each probe (default 3s).
	ProbeTimeout time.Duration
}

// ErrQuorumAnswers: Recover was refused because this journal's quorum is
// not lost: with the journals of its last configuration that answer as
// members of it, it is a majority.
var ErrQuorumAnswers = errors.New("journal: recover refused: the quorum is not lost")

// RecoverResult says what Recover did.
type RecoverResult struct {
	// LastIndex is the last log index the new quorum's state holds.
	LastIndex uint64
	// QuorumID is the new quorum's id (derived from the old one and the
	// members, so every survivor recovered alike agrees); PreviousQuorumID
	// the one the survivor belonged to ("" for a quorum without one).
	QuorumID, PreviousQuorumID string
}

// peerParts lists peers as id=address, sorted, for a derived quorum id.
func peerParts(peers []Peer) []string {
	out := make([]string, 0, len(peers))
	for _, p := range peers {
		out = append(out, p.ID+"="+p.RaftAddr)
	}
	sort.Strings(out)
	return out
}

// Recover rewrites the Raft configuration in DataDir to Members (hashicorp
// raft's RecoverCluster): the journal's log is replayed into a snapshot
// whose configuration is Members, so it starts as part of a new quorum.
// Every entry in its log is kept, committed or not; what only the lost
// journals had is gone. The journal must be stopped.
//
// The new quorum gets a new quorum id: a lost journal that comes back
// with its old state belongs to the old quorum, and can neither pull the
// survivor into its history nor be followed by it.
func Recover(c RecoverConfig) (RecoverResult, error) {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required: the stopped survivor's data directory"))
	}
	if len(c.Members) == 0 {
		errs = append(errs, errors.New("--members is required: the journals of the new quorum as id=raft-host:port,... (usually the survivors alone; add new journals afterwards with pact journal add)"))
	}
	if err := errors.Join(errs...); err != nil {
		return RecoverResult{}, err
	}
	if _, err := os.Stat(filepath.Join(c.DataDir, "raft.db")); err != nil {
		return RecoverResult{}, fmt.Errorf("journal: %s has no raft.db: give the data directory of a journal that ran in the quorum", c.DataDir)
	}
	if err := CheckRemovedMarker(c.DataDir); err != nil {
		return RecoverResult{}, err
	}
	store, err := openStore(c.DataDir)
	if err != nil {
		return RecoverResult{}, err
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(c.DataDir, 2, hclog.NewNullLogger())
	if err != nil {
		return RecoverResult{}, err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.NodeID)
	if rc.LocalID == "" {
		rc.LocalID = raft.ServerID(c.Members[0].ID)
	}
	if !c.EvenIfQuorumAnswers {
		if err := checkQuorumLost(c, string(rc.LocalID), store, snaps); err != nil {
			return RecoverResult{}, err
		}
	}
	rc.Logger = hclog.NewNullLogger()
	var cfg raft.Configuration
	for _, p := range c.Members {
		cfg.Servers = append(cfg.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr), Suffrage: raft.Voter})
	}
	_, trans := raft.NewInmemTransport("")
	if err := raft.RecoverCluster(rc, raftfsm.New(), store, store, snaps, trans, cfg); err != nil {
		return RecoverResult{}, fmt.Errorf("journal: recover: %w", err)
	}
	last, _ := store.LastIndex()
	if list, err := snaps.List(); err == nil && len(list) > 0 && list[0].Index > last {
		last = list[0].Index
	}
	prev, err := getString(store, keyQuorumID)
	if err != nil {
		return RecoverResult{}, err
	}
	qid := deriveQuorumID(append([]string{"pact recover", prev}, peerParts(c.Members)...)...)
	if err := store.Set([]byte(keyQuorumID), []byte(qid)); err != nil {
		return RecoverResult{}, fmt.Errorf("journal: recover: the configuration was rewritten, but the new quorum id could not be stored: %w", err)
	}
	if err := store.Set([]byte(keyPreviousQuorumID), []byte(prev)); err != nil {
		return RecoverResult{}, fmt.Errorf("journal: recover: the configuration was rewritten, but the old quorum id could not be stored: %w", err)
	}
	return RecoverResult{LastIndex: last, QuorumID: qid, PreviousQuorumID: prev}, nil
}

// lastConfiguration is the Raft configuration a stopped journal's stores
// hold last: the newest configuration entry in its log, else its newest
// snapshot's.
func lastConfiguration(logs raft.LogStore, snaps raft.SnapshotStore) (raft.Configuration, error) {
	var cfg raft.Configuration
	var after uint64
	if list, err := snaps.List(); err != nil {
		return cfg, fmt.Errorf("journal: read snapshots: %w", err)
	} else if len(list) > 0 {
		cfg, after = list[0].Configuration, list[0].Index
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return cfg, fmt.Errorf("journal: read raft log: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return cfg, fmt.Errorf("journal: read raft log: %w", err)
	}
	for i := last; i >= max(first, after+1) && i > 0; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return cfg, fmt.Errorf("journal: read raft log: %w", err)
		}
		if l.Type == raft.LogConfiguration {
			return raft.DecodeConfiguration(l.Data), nil
		}
	}
	return cfg, nil
}

// checkQuorumLost asks every other voter of the survivor's last
// configuration on its Raft port (a probe, answered to any journal of the
// domain) and refuses (ErrQuorumAnswers) when those that answer as
// members of its quorum, with the survivor itself, are a majority: the
// quorum is not lost, and the survivor rejoins it by starting again.
func checkQuorumLost(c RecoverConfig, self string, store *raftboltdb.BoltStore, snaps raft.SnapshotStore) error {
	cfg, err := lastConfiguration(store, snaps)
	if err != nil {
		return err
	}
	own, err := getString(store, keyQuorumID)
	if err != nil {
		return err
	}
	var voters, others []raft.Server
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, s)
			if string(s.ID) != self {
				others = append(others, s)
			}
		}
	}
	if len(others) == 0 {
		return nil // a quorum of one: nobody to ask
	}
	if c.Credentials == nil {
		return errors.New("journal: recover cannot ask the other journals of its last configuration whether their quorum runs: it has no credentials (give it the journal's settings: --config, or --root-cert and the journal CA)")
	}
	timeout := c.ProbeTimeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	if c.PeerAuth == nil {
		return errors.New("journal: recover cannot ask the other journals of its last configuration whether their quorum runs: it has no peer authentication (RecoverConfig.PeerAuth)")
	}
	prober := &Node{cfg: Config{Settings: Settings{NodeID: self}, Credentials: c.Credentials, PeerAuth: c.PeerAuth, Clock: clock.Real{}}}
	prober.quorum.id = own
	answers := make([]string, len(others))
	members := make([]bool, len(others))
	var wg sync.WaitGroup
	for i, s := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := prober.probePeer(string(s.Address), timeout)
			switch {
			case err != nil:
				answers[i] = fmt.Sprintf("%s at %s: no answer (%v)", s.ID, s.Address, err)
			case reply.GetJournalId() != string(s.ID):
				answers[i] = fmt.Sprintf("%s at %s: journal %s answers there", s.ID, s.Address, reply.GetJournalId())
			case !reply.GetHasState():
				answers[i] = fmt.Sprintf("%s at %s: answers, with no state (wiped, or waiting to join)", s.ID, s.Address)
			case own != "" && reply.GetQuorumId() != "" && reply.GetQuorumId() != own:
				answers[i] = fmt.Sprintf("%s at %s: answers as a member of another quorum, %s", s.ID, s.Address, reply.GetQuorumId())
			default:
				members[i] = true
				answers[i] = fmt.Sprintf("%s at %s: answers as a member of this journal's quorum %s", s.ID, s.Address, quorumOrUnknown(reply.GetQuorumId()))
			}
		}()
	}
	wg.Wait()
	alive := 0
	if slices.ContainsFunc(voters, func(s raft.Server) bool { return string(s.ID) == self }) {
		alive++ // this journal answers again once started
	}
	var up []string
	for i, m := range members {
		if m {
			alive++
			up = append(up, string(others[i].ID))
		}
	}
	if alive*2 <= len(voters) {
		return nil
	}
	return fmt.Errorf("%w: %s answer(s) as member(s) of quorum %s; with %s that is %d of the %d voters of its last configuration, a majority, so the quorum runs on (and %s rejoins it when started)\n  %s\nDo not recover: start pact-journal on this host again with its usual settings; it rejoins the quorum and catches up on what it missed. Recovering would split %s off into a quorum of its own, with a registry the others never see (a node enrolled through one is unknown to the other). Only if those journals are to be abandoned for good: stop them first, or give --even-if-quorum-answers",
		ErrQuorumAnswers, strings.Join(up, ", "), quorumOrUnknown(own), self, alive, len(voters), self, strings.Join(answers, "\n  "), self)
}
