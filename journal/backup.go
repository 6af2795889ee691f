package journal

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/snapfile"
	"github.com/pact-hpc/pact/internal/version"
	"github.com/pact-hpc/pact/journal/ca"
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
	rootSum := sha256.Sum256(j.ca.Root().Raw)
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
		RootSha256:      rootSum[:],
		Index:           index,
		Term:            j.termOf(index),
		TakenAtUnixNano: j.cfg.Clock.Now().UnixNano(),
		TakenBy:         j.cfg.NodeID,
		Version:         version.Get().String(),
		Nodes:           uint64(nodes),
		QuorumId:        j.quorum.get(),
		Members:         members,
	}
	var buf bytes.Buffer
	buf.Grow(len(state) + 512)
	if err := snapfile.Write(&buf, h, state); err != nil {
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
	j.log.Info("snapshot saved by an operator", logkey.Actor, principalFrom(stream.Context()).ID.Name, logkey.Index, index, logkey.Nodes, nodes, logkey.Bytes, buf.Len())
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
	// ErrWrongRoot: the snapshot was taken under another root than the
	// one given, even if both name the same domain.
	ErrWrongRoot = errors.New("journal: snapshot of another root")
	// ErrRootCert: the root certificate given cannot be read or is not a
	// pact domain root.
	ErrRootCert = errors.New("journal: root certificate")
)

// RestoreConfig seeds a journal of a new quorum from a snapshot file.
type RestoreConfig struct {
	Snapshot string // the file from pact journal snapshot save
	DataDir  string
	NodeID   string
	// InitialCluster is every voter of the new quorum, the same on every
	// journal restored from the file.
	InitialCluster []Peer
	// RootCertFile is the domain root certificate the journal will run
	// with (PEM). The snapshot must have been taken under this very root:
	// the same certificate by SHA-256, not merely the same domain name.
	RootCertFile string
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
	if c.RootCertFile == "" {
		errs = append(errs, errors.New("--root-cert is required: the domain root certificate (ca.pem) the journal will run with"))
	}
	return errors.Join(errs...)
}

// RestoreResult says what Restore wrote.
type RestoreResult struct {
	Header *pactv1.SnapshotHeader
	Nodes  int
	// QuorumID is the new quorum's id, derived from the file and the
	// initial cluster (the same on every journal restored alike); the
	// snapshot's own quorum is in Header.QuorumId.
	QuorumID string
	// RootFingerprint is the SHA-256 of the root the snapshot was checked
	// against (pki.CertFingerprint); RootCheck says how it was matched.
	RootFingerprint string
	RootCheck       string
}

// Restore checks the snapshot file completely (format, size, checksum,
// that it was taken under the root of RootCertFile, that the registry
// decodes and keeps its rules) and that the data directory holds no Raft
// state, and only then writes a Raft snapshot holding the state and the
// new quorum's configuration. The journal then starts from it with the
// usual flags.
func Restore(c RestoreConfig) (RestoreResult, error) {
	if err := c.Validate(); err != nil {
		return RestoreResult{}, err
	}
	root, domain, err := readRoot(c.RootCertFile)
	if err != nil {
		return RestoreResult{}, err
	}
	f, err := os.Open(c.Snapshot)
	if err != nil {
		return RestoreResult{}, err
	}
	defer f.Close()
	h, state, nodes, err := snapfile.Read(f)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("%s: %w", c.Snapshot, err)
	}
	if h.GetDomain() != domain {
		return RestoreResult{}, fmt.Errorf("%w: %s holds domain %s, --root-cert %s is the root of domain %s; restore it with the root of domain %s (the ca.pem its quorum ran with)", ErrWrongDomain, c.Snapshot, h.GetDomain(), c.RootCertFile, domain, h.GetDomain())
	}
	how, err := checkSnapshotRoot(c, h, state, root)
	if err != nil {
		return RestoreResult{}, err
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
	// A restored quorum is a new quorum: journals of the one the snapshot
	// was taken from cannot speak Raft with it, nor it with them.
	parts := []string{"pact restore", string(h.GetSha256()), h.GetQuorumId()}
	parts = append(parts, peerParts(c.InitialCluster)...)
	qid := DeriveQuorumID(parts...)
	if err := store.Set([]byte(keyQuorumID), []byte(qid)); err != nil {
		return RestoreResult{}, err
	}
	if err := store.Set([]byte(keyPreviousQuorumID), []byte(h.GetQuorumId())); err != nil {
		return RestoreResult{}, err
	}
	return RestoreResult{Header: h, Nodes: nodes, RootFingerprint: pki.CertFingerprint(root), RootCheck: how, QuorumID: qid}, nil
}

// readRoot reads the first certificate of a PEM file and the domain it is
// the root of.
func readRoot(path string) (*x509.Certificate, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("%w: --root-cert: %w; give the domain root certificate (ca.pem) the journal will run with", ErrRootCert, err)
	}
	certs, err := pki.ParseCertsPEM(data)
	if err != nil || len(certs) == 0 {
		return nil, "", fmt.Errorf("%w: --root-cert %s holds no PEM certificate (%v); give the domain root certificate (ca.pem) the journal will run with", ErrRootCert, path, err)
	}
	domain, err := ca.DomainOf(certs[0])
	if err != nil || !certs[0].IsCA {
		return nil, "", fmt.Errorf("%w: --root-cert %s is not a pact domain root (a CA certificate naming a spiffe:// trust domain); give the ca.pem pact-journal init made", ErrRootCert, path)
	}
	return certs[0], domain, nil
}

// checkSnapshotRoot refuses a snapshot taken under another root than
// root, and says how it matched: by the fingerprint the header records,
// or, for a file written before headers recorded it, by an intermediate
// in the state that root signed. A domain name alone proves nothing:
// every --dev root and every init without --domain used to be pact.local.
func checkSnapshotRoot(c RestoreConfig, h *pactv1.SnapshotHeader, state []byte, root *x509.Certificate) (string, error) {
	have := pki.CertFingerprint(root)
	advice := "give --root-cert the ca.pem of the quorum the snapshot was taken from (openssl x509 -noout -fingerprint -sha256 -in ca.pem prints a root's fingerprint); a registry cannot move to another root: its agents' certificates chain to the old one"
	if want := h.GetRootSha256(); len(want) > 0 {
		sum := sha256.Sum256(root.Raw)
		if !bytes.Equal(want, sum[:]) {
			return "", fmt.Errorf("%w: %s was taken under the root with SHA-256 fingerprint %s; --root-cert %s has fingerprint %s, another root (both of domain %s); %s",
				ErrWrongRoot, c.Snapshot, pki.FormatFingerprint(want), c.RootCertFile, have, h.GetDomain(), advice)
		}
		return "the fingerprint in the snapshot's header", nil
	}
	inters, err := snapfile.Intermediates(state)
	if err != nil {
		return "", fmt.Errorf("%s: %w", c.Snapshot, err)
	}
	for _, in := range inters {
		cert, err := x509.ParseCertificate(in.GetDer())
		if err == nil && cert.CheckSignatureFrom(root) == nil {
			return "intermediate " + in.GetSerial() + " (of " + in.GetJournalId() + "), signed by the root", nil
		}
	}
	if len(inters) == 0 {
		return "", fmt.Errorf("%w: %s records no root fingerprint (written by pact %s, before snapshots did) and holds no journal intermediate, so nothing shows it was taken under --root-cert %s (fingerprint %s); take a new snapshot with pact journal snapshot save from a journal of this version, whose header records the root",
			ErrWrongRoot, c.Snapshot, orUnknownVersion(h.GetVersion()), c.RootCertFile, have)
	}
	return "", fmt.Errorf("%w: %s records no root fingerprint (written by pact %s, before snapshots did), and none of its %d journal intermediates is signed by --root-cert %s (fingerprint %s): it was taken under another root of domain %s; %s",
		ErrWrongRoot, c.Snapshot, orUnknownVersion(h.GetVersion()), len(inters), c.RootCertFile, have, h.GetDomain(), advice)
}

func orUnknownVersion(v string) string {
	if v == "" {
		return "of an unknown version"
	}
	return v
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
	if err := checkRemovedMarker(c.DataDir); err != nil {
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
	qid := DeriveQuorumID(append([]string{"pact recover", prev}, peerParts(c.Members)...)...)
	if err := store.Set([]byte(keyQuorumID), []byte(qid)); err != nil {
		return RecoverResult{}, fmt.Errorf("journal: recover: the configuration was rewritten, but the new quorum id could not be stored: %w", err)
	}
	if err := store.Set([]byte(keyPreviousQuorumID), []byte(prev)); err != nil {
		return RecoverResult{}, fmt.Errorf("journal: recover: the configuration was rewritten, but the old quorum id could not be stored: %w", err)
	}
	return RecoverResult{LastIndex: last, QuorumID: qid, PreviousQuorumID: prev}, nil
}
