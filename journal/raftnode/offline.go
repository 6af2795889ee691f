package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

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
}

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
