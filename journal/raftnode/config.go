package raftnode

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/journal/connlimit"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// DefaultRaftTimeout is a journal's Raft heartbeat, election and lease
// timeout unless RaftTimeout says otherwise: twice hashicorp/raft's 1 s,
// and a lease as long rather than its 500 ms (startRaft). A boot storm
// saturates the journals' CPU by design (every node's handshake and
// signature), and a Go process with thousands of runnable goroutines runs
// a Raft message's goroutine late: at 30,000 agents leaders heard from
// their followers up to 1.94 s late, and with 1 s six of eight such
// storms lost their leader (to its lease or to its followers' election),
// the quorum without one for up to 10 s as late votes split the
// elections. What 2 s costs: a crashed leader is replaced after 2-4 s
// and an election rather than 1-2 s; agents keep their certificates and
// their streams on the other journals meanwhile. The runs are in
// docs/benchmarks.md. hashicorp's own servers run longer timeouts on
// modest hardware for the same reason (Consul's raft_multiplier, 5 by
// default).
const DefaultRaftTimeout = 2 * time.Second

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

// PeerAuth authenticates the other journals of the quorum on the Raft port
// and the peer service (journal/auth's PeerVerifier): their chains and
// what Raft recorded of them. The node checks membership and the quorum
// id itself.
type PeerAuth interface {
	// VerifyChain checks a peer journal's chain (leaf first) without
	// Raft's records: it reaches a domain root in a journal's shape and
	// names a journal of this domain.
	VerifyChain(certs []*x509.Certificate) error
	// CheckPeer checks the chain and Raft's records as they stand now,
	// and reports whether its intermediate is one Raft published.
	CheckPeer(certs []*x509.Certificate) (published bool, err error)
	// Applied is told of every entry the FSM applies and every snapshot
	// it restores, before the journal (Config.OnApply): it must not block.
	Applied(raftfsm.Event)
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

// Settings are what an operator sets of a Raft node. journal.Config
// embeds them, so a journal's configuration reaches its Raft node as one
// value, checked by one set of rules (Settings.Validate), instead of field
// by field.
type Settings struct {
	// NodeID names this journal in Raft and in its certificates.
	NodeID string
	// DataDir holds raft.db and the snapshots (unless Config.Stores is
	// set), the removed marker and, for a journal, its other state.
	DataDir string
	// RaftListen is the Raft address (host:port) of a journal in a quorum;
	// empty runs a journal alone, on an in-memory transport, unless
	// Config.Transport is set. AdvertiseRaft is the address peers use to
	// reach it; it defaults to RaftListen.
	RaftListen    string
	AdvertiseRaft string
	// InitialCluster lists every voter of a new quorum (this journal
	// included). A journal with no Raft state bootstraps with it; all
	// journals of a new quorum must be given the same list. A journal with
	// no Raft state and RaftListen set needs it or Join (a quorum of one
	// lists itself alone).
	InitialCluster []Peer
	// Join starts a journal with no state that waits to be added to a
	// running quorum (pact journal add) instead of bootstrapping.
	Join bool

	// ApplyTimeout bounds how long a proposal may wait to be committed.
	ApplyTimeout time.Duration
	// RaftSnapshotThreshold and RaftTrailingLogs tune log compaction;
	// RaftSnapshotInterval is how often Raft checks whether to snapshot
	// (zero: hashicorp/raft's default, 2 minutes).
	RaftSnapshotThreshold uint64
	RaftTrailingLogs      uint64
	RaftSnapshotInterval  time.Duration
	// RaftTimeout sets Raft's heartbeat, election and lease timeouts; zero
	// is DefaultRaftTimeout for each. Tests shorten it to start fast.
	RaftTimeout time.Duration
	// RaftWriteTimeout is how long a Raft store write (raft.db) may stay
	// unfinished while this journal leads. Past it the journal stops
	// sending Raft messages, so the others elect a leader, and serves
	// nothing until the write finishes (watchdog.go). Far above a normal
	// fsync: a slow disk must not make the leader flap.
	RaftWriteTimeout time.Duration
	// ActivationBatchMax is the most enrollment activations (and renewals)
	// one Raft entry carries (batch.go): those arriving while this
	// journal's previous batch is in flight go together in the next. 1
	// sends each in an entry of its own. ActivationBatchWindow is the
	// longest an activation waits behind a batch in flight before it is
	// sent beside it; one that finds none in flight goes at once. It is a
	// bound for a batch that is slow, not a send timer: under a storm's
	// load a commit takes tens of milliseconds, and a window shorter than
	// that sends a batch beside the one in flight every window, twice the
	// Raft entries (each a log write and fsync on every journal, a
	// forward, an FSM call) of a window as long as a commit takes
	// (docs/benchmarks.md).
	ActivationBatchMax    int
	ActivationBatchWindow time.Duration

	// AcceptPeersWithoutQuorumID is the upgrade mode for a quorum with
	// journals of a release before quorum ids: a peer that proves none is
	// admitted (by its chain, records and membership). Off, a journal that
	// has a quorum id refuses every peer that proves none.
	AcceptPeersWithoutQuorumID bool
}

// MaxActivationBatch bounds ActivationBatchMax. A follower's batch is
// also bounded by what one forwarded message holds (about 80 activations
// of some 800 bytes: maxBatchBytes), whatever this allows.
const MaxActivationBatch = 1024

// DefaultSettings are the journal's defaults; NodeID and DataDir remain to
// be set.
func DefaultSettings() Settings {
	return Settings{
		ApplyTimeout:          10 * time.Second,
		RaftSnapshotThreshold: 8192,
		RaftTrailingLogs:      10240,
		RaftWriteTimeout:      5 * time.Second,
		ActivationBatchMax:    256,
		ActivationBatchWindow: 20 * time.Millisecond,
	}
}

// Problems reports what is wrong with the tuning of s, each problem once,
// without a package prefix: journal.Config.Validate and Config.Validate
// report the same problems, each under its own name. What an operator
// writes in a journal's flags and files (names, addresses, the initial
// cluster) the journal checks with its flags' names.
func (s Settings) Problems() []error {
	var errs []error
	if s.ApplyTimeout <= 0 {
		errs = append(errs, errors.New("ApplyTimeout must be positive"))
	}
	if s.RaftSnapshotThreshold == 0 {
		errs = append(errs, errors.New("RaftSnapshotThreshold must be positive"))
	}
	if s.ActivationBatchMax < 1 || s.ActivationBatchMax > MaxActivationBatch {
		errs = append(errs, fmt.Errorf("ActivationBatchMax %d must lie between 1 (no batching) and %d", s.ActivationBatchMax, MaxActivationBatch))
	}
	if s.ActivationBatchWindow <= 0 || s.ActivationBatchWindow > s.ApplyTimeout {
		errs = append(errs, fmt.Errorf("ActivationBatchWindow %v must be positive and no longer than ApplyTimeout %v", s.ActivationBatchWindow, s.ApplyTimeout))
	}
	return errs
}

// Config configures a Node. New copies it.
type Config struct {
	Settings

	// HandshakeTimeout bounds a Raft connection's TLS handshake and hello.
	HandshakeTimeout time.Duration

	// FSM is the replicated state machine the node drives. The node also
	// reads from it: the journals' addresses, intermediates and the quorum
	// id.
	FSM *raftfsm.FSM
	// Credentials are what the node presents on the Raft port and the
	// peer calls; PeerAuth authenticates the journals on the other end
	// (required with Credentials).
	Credentials Credentials
	PeerAuth    PeerAuth
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
// FSM, Credentials and PeerAuth remain to be set.
func DefaultConfig() Config {
	return Config{
		Settings:         DefaultSettings(),
		HandshakeTimeout: 15 * time.Second,
		Logger:           slog.Default(),
		Clock:            clock.Real{},
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
	if c.Credentials != nil && c.PeerAuth == nil {
		errs = append(errs, errors.New("raftnode: PeerAuth is required with Credentials"))
	}
	if c.RaftListen != "" && c.Conns == nil && c.Transport == nil {
		errs = append(errs, errors.New("raftnode: Conns is required with RaftListen"))
	}
	for _, err := range c.Problems() {
		errs = append(errs, fmt.Errorf("raftnode: %w", err))
	}
	// A journal holds it to MinRaftWriteTimeout; a test of the watchdog
	// here may go lower.
	if c.RaftWriteTimeout <= 0 {
		errs = append(errs, errors.New("raftnode: RaftWriteTimeout must be positive"))
	}
	if c.HandshakeTimeout <= 0 {
		errs = append(errs, errors.New("raftnode: HandshakeTimeout must be positive"))
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
