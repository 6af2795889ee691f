package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/version"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// snapshotChunk is the size of each streamed piece of a snapshot.
const snapshotChunk = 256 << 10

// SaveSnapshot streams a consistent copy of the whole replicated state.
// Only the leader answers (a follower answers NO_LEADER, and the CLI moves
// to the next address): after a barrier, its registry reflects every write
// committed before the call, and VerifyLeader confirms it still leads.
func (s *adminServer) SaveSnapshot(_ *pactv1.SaveSnapshotRequest, stream pactv1.AdminService_SaveSnapshotServer) error {
	j := s.j
	if j.raft.State() != raft.Leader {
		return j.notLeaderFor("snapshots")
	}
	if err := j.raft.Barrier(j.cfg.ApplyTimeout).Error(); err != nil {
		return fmt.Errorf("%w: barrier before the snapshot: %w", ErrNoLeader, err)
	}
	state, index, nodes, err := j.fsm.Consistent()
	if err != nil {
		return err
	}
	if err := j.raft.VerifyLeader().Error(); err != nil {
		return fmt.Errorf("%w: %w", ErrNoLeader, err)
	}
	// The members: the state keeps the addresses of journals removed
	// since, and an operator reading the file wants the quorum it was.
	cf := j.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return fmt.Errorf("%w: the Raft configuration: %w", ErrNoLeader, err)
	}
	members := make([]string, 0, len(cf.Configuration().Servers))
	for _, srv := range cf.Configuration().Servers {
		members = append(members, string(srv.ID))
	}
	slices.Sort(members)
	h := &pactv1.SnapshotHeader{
		Domain:          j.ca.Domain(),
		Index:           index,
		Term:            j.termOf(index),
		TakenAtUnixNano: j.cfg.Clock.Now().UnixNano(),
		TakenBy:         j.cfg.NodeID,
		Version:         version.Get().String(),
		Nodes:           uint64(nodes),
		Members:         members,
	}
	var buf bytes.Buffer
	buf.Grow(len(state) + 512)
	if err := raftfsm.WriteSnapshotFile(&buf, h, state); err != nil {
		return err
	}
	data := buf.Bytes()
	for len(data) > 0 {
		n := min(len(data), snapshotChunk)
		if err := stream.Send(&pactv1.SaveSnapshotResponse{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	j.log.Info("snapshot saved by an operator", logkey.Actor, principalFrom(stream.Context()).id.Name, "index", index, "nodes", nodes, "bytes", buf.Len())
	return nil
}

// termOf is the term of the log entry at index (the current term if the
// entry was compacted away).
func (j *Journal) termOf(index uint64) uint64 {
	var l raft.Log
	if index > 0 && j.logs.GetLog(index, &l) == nil {
		return l.Term
	}
	return j.raft.CurrentTerm()
}

func (j *Journal) notLeaderFor(what string) error {
	_, id := j.raft.LeaderWithID()
	if id == "" {
		return fmt.Errorf("%w: no leader; a majority of the quorum must be up to take a consistent snapshot", ErrNoLeader)
	}
	addr := ""
	if ji, ok := j.fsm.Journal(string(id)); ok {
		addr = " at " + ji.GetGrpcAddr()
	}
	return fmt.Errorf("%w: %s are taken on the leader, %s%s", ErrNoLeader, what, id, addr)
}

// ---------------------------------------------------------------------------
// Offline tools: restore a snapshot into a new data directory, and turn
// surviving journals into a new quorum.

// Errors of the offline tools.
var (
	ErrDataDirNotEmpty = errors.New("journal: data directory already holds Raft state")
	ErrWrongDomain     = errors.New("journal: snapshot of another domain")
)

// RestoreConfig seeds a journal of a new quorum from a snapshot file.
type RestoreConfig struct {
	Snapshot string // the file from pact journal snapshot save
	DataDir  string
	NodeID   string
	// InitialCluster is every voter of the new quorum, the same on every
	// journal restored from the file.
	InitialCluster []Peer
	// Domain is the domain of the root the journal will run with; the
	// snapshot must be of it.
	Domain string
}

// Validate reports every problem at once.
func (c RestoreConfig) Validate() error {
	var errs []error
	if c.Snapshot == "" {
		errs = append(errs, errors.New("--snapshot is required: the file pact journal snapshot save wrote"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required: the new journal's (empty) data directory"))
	}
	if c.NodeID == "" {
		errs = append(errs, errors.New("--node-id is required: this journal's id in the new quorum"))
	}
	if len(c.InitialCluster) == 0 {
		errs = append(errs, errors.New("--initial-cluster is required: every voter of the new quorum as id=raft-host:port,..., the same on every journal"))
	} else {
		found := false
		for _, p := range c.InitialCluster {
			found = found || p.ID == c.NodeID
		}
		if !found && c.NodeID != "" {
			errs = append(errs, fmt.Errorf("--initial-cluster does not list --node-id %s", c.NodeID))
		}
	}
	return errors.Join(errs...)
}

// RestoreResult says what Restore wrote.
type RestoreResult struct {
	Header *pactv1.SnapshotHeader
	Nodes  int
}

// Restore checks the snapshot file completely (format, size, checksum,
// domain, that the registry decodes and keeps its rules) and that the data
// directory holds no Raft state, and only then writes a Raft snapshot
// holding the state and the new quorum's configuration. The journal then
// starts from it with the usual flags.
func Restore(c RestoreConfig) (RestoreResult, error) {
	if err := c.Validate(); err != nil {
		return RestoreResult{}, err
	}
	f, err := os.Open(c.Snapshot)
	if err != nil {
		return RestoreResult{}, err
	}
	defer f.Close()
	h, state, nodes, err := raftfsm.ReadSnapshotFile(f)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("%s: %w", c.Snapshot, err)
	}
	if c.Domain != "" && h.GetDomain() != c.Domain {
		return RestoreResult{}, fmt.Errorf("%w: %s holds domain %s, the root certificate is of domain %s; restore it with that domain's root (--root-cert)", ErrWrongDomain, c.Snapshot, h.GetDomain(), c.Domain)
	}
	if err := checkEmptyRaft(c.DataDir); err != nil {
		return RestoreResult{}, err
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return RestoreResult{}, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(c.DataDir, 2, hclog.NewNullLogger())
	if err != nil {
		return RestoreResult{}, err
	}
	var cfg raft.Configuration
	for _, p := range c.InitialCluster {
		cfg.Servers = append(cfg.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr), Suffrage: raft.Voter})
	}
	_, trans := raft.NewInmemTransport("")
	// The new quorum's log continues after the snapshot's index, in a term
	// at least the snapshot's.
	index, term := max(h.GetIndex(), 1), max(h.GetTerm(), 1)
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, term, cfg, index, trans)
	if err != nil {
		return RestoreResult{}, err
	}
	if _, err := sink.Write(state); err != nil {
		_ = sink.Cancel()
		return RestoreResult{}, err
	}
	if err := sink.Close(); err != nil {
		return RestoreResult{}, err
	}
	store, err := openStore(c.DataDir)
	if err != nil {
		return RestoreResult{}, err
	}
	defer store.Close()
	if err := store.SetUint64([]byte("CurrentTerm"), term); err != nil {
		return RestoreResult{}, err
	}
	return RestoreResult{Header: h, Nodes: nodes}, nil
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

// Recover rewrites the Raft configuration in DataDir to Members (hashicorp
// raft's RecoverCluster): the journal's log is replayed into a snapshot
// whose configuration is Members, so it starts as part of a new quorum.
// Every entry in its log is kept, committed or not; what only the lost
// journals had is gone. The journal must be stopped.
func Recover(c RecoverConfig) (uint64, error) {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required: the stopped survivor's data directory"))
	}
	if len(c.Members) == 0 {
		errs = append(errs, errors.New("--members is required: the journals of the new quorum as id=raft-host:port,... (usually the survivors alone; add new journals afterwards with pact journal add)"))
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if _, err := os.Stat(filepath.Join(c.DataDir, "raft.db")); err != nil {
		return 0, fmt.Errorf("journal: %s has no raft.db: give the data directory of a journal that ran in the quorum", c.DataDir)
	}
	if err := checkRemovedMarker(c.DataDir); err != nil {
		return 0, err
	}
	store, err := openStore(c.DataDir)
	if err != nil {
		return 0, err
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(c.DataDir, 2, hclog.NewNullLogger())
	if err != nil {
		return 0, err
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
		return 0, fmt.Errorf("journal: recover: %w", err)
	}
	last, _ := store.LastIndex()
	if list, err := snaps.List(); err == nil && len(list) > 0 && list[0].Index > last {
		last = list[0].Index
	}
	return last, nil
}
