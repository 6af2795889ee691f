// Package v1rpc holds gRPC handlers of the journal's pact.v1 services, apart
// from the server that runs them (package journal), as etcd keeps its v3rpc
// apart from etcdserver.
//
// A handler reads as four steps: the caller is already authenticated (the
// principal journal/auth put in the context), it decides from this
// journal's copy of the registry, confirmed with the leader when a refusal
// must be final, it proposes one command, and it answers. It reaches the
// journal only through the small interfaces below, each defined here, where
// it is used: it cannot touch the CA, the Raft node or another service's
// state. Errors leave as the sentinels of this package, raftfsm and
// journal/auth; package journal maps them to gRPC statuses in one place.
//
// Every handler is here: the agent's (Enrollment), the operator's
// (NodeAdmin, Quorum, BootPolicies) and the other journals' (Peers), and
// the interceptors around journal/auth's (Interceptors).
package v1rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/hwid"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Errors of the handlers beside raftfsm's rule errors and journal/auth's
// refusals.
var (
	ErrInvalidArgument = errors.New("journal: invalid argument")
	ErrNotFound        = errors.New("journal: not found")
	// ErrNodeStreaming: pact node decommission of a node that streams,
	// without --force.
	ErrNodeStreaming = errors.New("journal: node has an open stream")
)

// Registry is this journal's copy of the registry, as the handlers read
// it (raftfsm.FSM).
type Registry interface {
	Node(id string) (*pactv1.Node, bool)
	// Resolve matches reported hardware against the registry.
	Resolve(reported hwid.Identity) raftfsm.Resolution
	Nodes(raftfsm.Filter) []*pactv1.Node
	AppliedIndex() uint64
	LastSeen(nodeID string) int64
	JoinTokens(nodeID string) []*pactv1.JoinToken
	Audit(nodeID string, sinceUnixNano int64, limit int) []*pactv1.AuditEntry
	BootPolicy(vcluster string) (*pactv1.BootPolicy, bool)
	BootPolicies() []*pactv1.BootPolicy
}

// Proposer commits one command through Raft on the caller's behalf: it
// attributes the command to the call (source, correlation id), the Raft
// node stamps it, and it returns once the entry is applied here, with the
// command's result (and its rule error).
type Proposer interface {
	Propose(ctx context.Context, cmd *pactv1.Command) (*raftfsm.Result, error)
}

// BatchProposer is Proposer for the commands a storm brings by the
// thousand (Activate, Renew, Release): batched with others as the Raft
// node's batcher allows, each returning its own result.
type BatchProposer interface {
	ProposeBatched(ctx context.Context, cmd *pactv1.Command) (*raftfsm.Result, error)
}

// Confirmer confirms this journal's copy of the registry with the leader,
// at most once per call (journal/confirmation.go).
type Confirmer interface {
	// ReadBarrier returns once this journal holds every entry committed
	// before the call, or says why it cannot.
	ReadBarrier(ctx context.Context) error
	// Confirm runs decide, which answers from this journal's copy; an
	// answer needs names stands only if decide still gives it after the
	// barrier (and when the leader cannot be reached the caller is told
	// to retry instead).
	Confirm(ctx context.Context, decide func() error, needs func(error) bool) error
	// Final says whether the caller will take err as final (an agent
	// exits for good on a final refusal).
	Final(err error) bool
	// ConfirmFinal runs decide; a refusal the caller would take as final
	// stands only if decide still gives it after the barrier.
	ConfirmFinal(ctx context.Context, decide func() error) error
	// ConfirmRule is ConfirmFinal for every refusal that rests on
	// replicated state (a rule error).
	ConfirmRule(ctx context.Context, decide func() error) error
}

// StreamCounter counts the streams a node holds to this journal.
type StreamCounter interface {
	StreamCount(nodeID string) int
}

// ClaimHolder says where else, in the federated domains, a node is active.
type ClaimHolder interface {
	AlsoActive(n *pactv1.Node) []string
}

// LevelGate refuses a feature the quorum's recorded feature level does not
// have yet (raftfsm.QuorumVersionError).
type LevelGate interface {
	RequireLevel(ctx context.Context, need uint32, feature string) error
}

// BootCapturer captures a boot policy from a node's last verified quote,
// wherever in the quorum it is held.
type BootCapturer interface {
	CaptureBootPolicy(ctx context.Context, req *pactv1.CaptureBootPolicyRequest) (*pactv1.CaptureBootPolicyResponse, error)
	// CaptureHere captures from what this journal holds, or asks of the
	// node's stream here, only (another journal's capture).
	CaptureHere(ctx context.Context, req *pactv1.CaptureBootPolicyRequest) (*pactv1.CaptureBootPolicyResponse, error)
}

// Config is what the handlers depend on.
type Config struct {
	// JournalID names this journal in answers (served_by) and in the
	// actor of what it does itself.
	JournalID string
	Registry  Registry
	Proposer  Proposer
	Confirmer Confirmer
	Streams   StreamCounter
	Claims    ClaimHolder
	Levels    LevelGate
	Boot      BootCapturer
	// NodeTrustDomain is the SPIRE trust domain whose SPIFFE IDs map to
	// nodes, as the journal's authentication holds it now (it reloads).
	NodeTrustDomain func() string
	// ToStatus is the journal's one mapping of an error to the gRPC
	// status its caller sees (a batch row's reason and message).
	ToStatus func(error) error
	// DigestInterval is how often each journal reports the streams it
	// holds: a node seen within two of them is streaming.
	DigestInterval time.Duration
	Clock          clock.Clock
	Logger         *slog.Logger
}

// DefaultConfig is a Config without its dependencies, which the journal
// fills in.
func DefaultConfig() Config {
	return Config{DigestInterval: 10 * time.Second, Clock: clock.Real{}, Logger: slog.New(slog.DiscardHandler)}
}

// Validate says which dependency is missing.
func (c Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		set  bool
	}{
		{"Registry", c.Registry != nil}, {"Proposer", c.Proposer != nil}, {"Confirmer", c.Confirmer != nil},
		{"Streams", c.Streams != nil}, {"Claims", c.Claims != nil}, {"Levels", c.Levels != nil},
		{"Boot", c.Boot != nil}, {"NodeTrustDomain", c.NodeTrustDomain != nil}, {"ToStatus", c.ToStatus != nil}, {"Clock", c.Clock != nil},
		{"Logger", c.Logger != nil},
	} {
		if !d.set {
			errs = append(errs, fmt.Errorf("v1rpc: %s is required", d.name))
		}
	}
	if c.JournalID == "" {
		errs = append(errs, errors.New("v1rpc: JournalID is required"))
	}
	if c.DigestInterval <= 0 {
		errs = append(errs, errors.New("v1rpc: DigestInterval must be positive"))
	}
	return errors.Join(errs...)
}
