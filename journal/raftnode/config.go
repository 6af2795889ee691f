package raftnode

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/journal/connlimit"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Peer is one journal of an initial cluster.
type Peer struct {
	ID       string
	RaftAddr string
}

// Credentials is what the node presents and trusts on the Raft port and
// the peer service: the journal's current certificate (from its own
// intermediate, re-keyed while the node runs, sent with that intermediate
// and its journal CA) and the domain root.
type Credentials interface {
	// ServerCertificate is the certificate this journal presents now.
	ServerCertificate() *tls.Certificate
	// Roots are the domain roots a peer chain may reach (two during a
	// rollover, docs/rollover.md).
	Roots() []*x509.Certificate
	// Domain is the domain a peer's certificate must name.
	Domain() string
}

// Metrics receives what the node measures; the journal registers them.
type Metrics interface {
	// ObserveApply is how long a Raft apply of op took on the leader.
	ObserveApply(op string, d time.Duration)
	// ObserveBatch is the size of one activation batch proposed.
	ObserveBatch(n int)
	// HandshakeRefused counts a failed server handshake on port ("raft").
	HandshakeRefused(port string, err error)
}

// Stores are a node's Raft stores, given in place of the bolt store and
// file snapshots in DataDir (tests: raft.NewInmemStore). Log and Stable
// may be one store. Stable answers a key never set with
// raftboltdb.ErrKeyNotFound, as the bolt store does: the node reads its
// quorum id from it before Raft starts.
type Stores struct {
	Log       raft.LogStore
	Stable    raft.StableStore
	Snapshots raft.SnapshotStore
}

// Config configures a Node. New copies it.
type Config struct {
	// NodeID names this journal in Raft and in its certificates.
	NodeID string
	// DataDir holds raft.db and the snapshots (unless Stores is set), and
	// the removed marker.
	DataDir string
	// RaftListen is the Raft address (host:port) of a journal in a quorum;
	// empty runs a journal alone, on an in-memory transport, unless
	// Transport is set. AdvertiseRaft is the address peers use to reach it.
	RaftListen    string
	AdvertiseRaft string
	// InitialCluster lists every voter of a new quorum (this journal
	// included); Join waits to be added to a running quorum instead.
	InitialCluster []Peer
	Join           bool

	// ApplyTimeout bounds how long a proposal may wait to be committed.
	ApplyTimeout time.Duration
	// RaftSnapshotThreshold, RaftTrailingLogs and RaftSnapshotInterval
	// tune log compaction (zero interval: hashicorp/raft's default).
	RaftSnapshotThreshold uint64
	RaftTrailingLogs      uint64
	RaftSnapshotInterval  time.Duration
	// RaftTimeout sets Raft's heartbeat, election and lease timeouts; zero
	// keeps hashicorp/raft's heartbeat and election timeouts (1 s) with a
	// lease as long (hashicorp/raft's is half: see startRaft).
	RaftTimeout time.Duration
	// RaftWriteTimeout is how long a Raft store write may stay unfinished
	// while this journal leads before the watchdog cuts it off.
	RaftWriteTimeout time.Duration
	// HandshakeTimeout bounds a Raft connection's TLS handshake and hello.
	HandshakeTimeout time.Duration
	// ActivationBatchMax and ActivationBatchWindow bound the activation
	// batcher (batch.go); a max of 1 sends each activation alone.
	ActivationBatchMax    int
	ActivationBatchWindow time.Duration

	// AcceptPeersWithoutQuorumID is the upgrade mode for a quorum with
	// journals of a release before quorum ids: a peer that proves none is
	// admitted (by its chain, records and membership). Off, a journal that
	// has a quorum id refuses every peer that proves none.
	AcceptPeersWithoutQuorumID bool

	// FSM is the replicated state machine the node drives. The node also
	// reads from it: the journals' addresses, intermediates and the quorum
	// id.
	FSM *raftfsm.FSM
	// Credentials authenticate the Raft port and the peer calls.
	Credentials Credentials
	// Conns bounds the Raft port's unauthenticated connections.
	Conns *connlimit.Limiter
	// Metrics receives timings and refusals (nil: none).
	Metrics Metrics
	// AllowRefusalLog samples the log lines of refused peers: it reports
	// whether to log one now and how many were held back (nil: every one).
	AllowRefusalLog func() (ok bool, held int)
	// DescribeSelf adds what the journal knows about itself (its
	// intermediate) to the status this node reports to its peers.
	DescribeSelf func(*pactv1.MemberStatusResponse)

	// Transport, if set, carries Raft instead of TLS on RaftListen (tests:
	// raft.NewInmemTransport); Stores, if set, hold its state instead of
	// DataDir.
	Transport raft.Transport
	Stores    *Stores
	// OnApply, if set, is told of every entry the FSM applies and every
	// snapshot it restores, after the node has taken what it needs (the
	// FSM's observer: it runs on Raft's apply goroutine and must not
	// block).
	OnApply func(raftfsm.Event)
	// OnCutOff, if set, is told when the quorum starts refusing this
	// journal as a peer (reason) or takes it again ("").
	OnCutOff func(reason string)
	// BeforeStart, if set, runs once the stores are open and before Raft
	// starts applying, with the index of the log's last entry (the audit
	// export resumes after it).
	BeforeStart func(lastIndex uint64) error
	// Hooks are a test's (nil: none).
	Hooks *Hooks

	Logger *slog.Logger
	// Clock is the domain's clock (certificate checks, timestamps).
	Clock clock.Clock
	// WatchdogClock times the Raft store writes; nil is the system clock,
	// whose readings are monotonic: a step of the domain's clock must not
	// make a write look stuck.
	WatchdogClock clock.Clock
}

// DefaultConfig is a Config with the journal's defaults; NodeID, DataDir,
// FSM and Credentials remain to be set.
func DefaultConfig() Config {
	return Config{
		ApplyTimeout:          10 * time.Second,
		RaftSnapshotThreshold: 8192,
		RaftTrailingLogs:      10240,
		RaftWriteTimeout:      5 * time.Second,
		HandshakeTimeout:      15 * time.Second,
		ActivationBatchMax:    256,
		ActivationBatchWindow: 2 * time.Millisecond,
		Logger:                slog.Default(),
		Clock:                 clock.Real{},
	}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("raftnode: NodeID is required"))
	}
	if c.DataDir == "" && c.Stores == nil {
		errs = append(errs, errors.New("raftnode: DataDir or Stores is required"))
	}
	if c.FSM == nil {
		errs = append(errs, errors.New("raftnode: FSM is required"))
	}
	if c.Credentials == nil && c.RaftListen != "" && c.Transport == nil {
		errs = append(errs, errors.New("raftnode: Credentials are required with RaftListen"))
	}
	if c.RaftListen != "" && c.Conns == nil && c.Transport == nil {
		errs = append(errs, errors.New("raftnode: Conns is required with RaftListen"))
	}
	if c.ApplyTimeout <= 0 {
		errs = append(errs, errors.New("raftnode: ApplyTimeout must be positive"))
	}
	if c.RaftWriteTimeout <= 0 {
		errs = append(errs, errors.New("raftnode: RaftWriteTimeout must be positive"))
	}
	if c.HandshakeTimeout <= 0 {
		errs = append(errs, errors.New("raftnode: HandshakeTimeout must be positive"))
	}
	if c.ActivationBatchMax < 1 {
		errs = append(errs, errors.New("raftnode: ActivationBatchMax must be at least 1"))
	}
	if c.ActivationBatchMax > 1 && c.ActivationBatchWindow <= 0 {
		errs = append(errs, errors.New("raftnode: ActivationBatchWindow must be positive when batching"))
	}
	if c.Join && len(c.InitialCluster) > 0 {
		errs = append(errs, errors.New("raftnode: Join and InitialCluster exclude each other"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("raftnode: Logger is required"))
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("raftnode: Clock is required"))
	}
	return errors.Join(errs...)
}
