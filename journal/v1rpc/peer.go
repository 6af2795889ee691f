package v1rpc

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/version"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/raftnode"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// The journal-to-journal service and the quorum's status: thin handlers
// over the Raft node (raftnode), which forwards, answers read indexes and
// knows the members.

// RaftPeer is the Raft node as the peer service and the quorum's status
// use it (raftnode.Node).
type RaftPeer interface {
	IsLeader() bool
	// ApplyForwarded commits a command another journal forwarded, as
	// stamped here, and answers with its result.
	ApplyForwarded(ctx context.Context, data []byte) (*pactv1.ProposeResponse, error)
	ReadIndex(ctx context.Context) (uint64, error)
	MemberStatus() *pactv1.MemberStatusResponse
	// CountPeerRefusal counts (and samples into the log) a refused peer.
	CountPeerRefusal(where, journalID string, err error)
	Members(ctx context.Context) ([]*pactv1.JournalMember, error)
	Leader() string
	Term() uint64
	CommitIndex() uint64
	AppliedIndex() uint64
	QuorumID() string
	QuorumLevel() uint32
}

// PeerConfig is what the peer service depends on beside Config's.
type PeerConfig struct {
	Config
	Raft RaftPeer
	// RefusesUnknown says whether this journal, as leader, must refuse a
	// forwarded command it cannot apply (raftfsm.HasUnknownOp; a test
	// stands it for a leader of the previous release).
	RefusesUnknown func(*pactv1.Command) bool
}

// Validate says which dependency is missing.
func (c PeerConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if c.Raft == nil || c.RefusesUnknown == nil {
		return fmt.Errorf("v1rpc: the peer service needs Raft and RefusesUnknown")
	}
	return nil
}

// Peers is the JournalPeerService: calls over the Raft node, and another
// journal's capture of a boot policy.
type Peers struct {
	pactv1.UnimplementedJournalPeerServiceServer
	cfg PeerConfig
}

// NewPeers returns the peer service's handlers over cfg's dependencies.
func NewPeers(cfg PeerConfig) (*Peers, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Peers{cfg: cfg}, nil
}

// Propose commits a command a follower forwarded, once this leader has
// checked the forwarding journal may speak for it.
func (s *Peers) Propose(ctx context.Context, req *pactv1.ProposeRequest) (*pactv1.ProposeResponse, error) {
	if !s.cfg.Raft.IsLeader() {
		return nil, fmt.Errorf("%w: this journal is no longer the leader", raftnode.ErrNoLeader)
	}
	cmd, err := raftfsm.Decode(req.GetCommand())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	data, err := s.stampForwarded(ctx, req.GetCommand(), cmd)
	if err != nil {
		return nil, err
	}
	if s.cfg.RefusesUnknown(cmd) {
		// A newer journal's command: committing it would stop every
		// journal of this version. Upgrade the leader last (docs/quorum.md).
		return nil, fmt.Errorf("%w: leader %s runs pact-journal %s, which does not know this command; it is refused until the leader is upgraded (upgrade followers first, the leader last)", ErrInvalidArgument, s.cfg.JournalID, version.Get().String())
	}
	return s.cfg.Raft.ApplyForwarded(ctx, data)
}

// BootEvidence is another journal's pact boot-policy capture: captured
// from what this journal holds, or asks of the node's stream here.
func (s *Peers) BootEvidence(ctx context.Context, req *pactv1.BootEvidenceRequest) (*pactv1.BootEvidenceResponse, error) {
	resp, err := s.cfg.Boot.CaptureHere(ctx, req.GetCapture())
	if err != nil {
		return nil, err
	}
	return &pactv1.BootEvidenceResponse{Capture: resp}, nil
}

// ReadIndex answers a follower's read barrier with this leader's read
// index (only once it has committed an entry of its term).
func (s *Peers) ReadIndex(ctx context.Context, _ *pactv1.ReadIndexRequest) (*pactv1.ReadIndexResponse, error) {
	idx, err := s.cfg.Raft.ReadIndex(ctx)
	if err != nil {
		return nil, err
	}
	return &pactv1.ReadIndexResponse{CommitIndex: idx}, nil
}

func (s *Peers) MemberStatus(context.Context, *pactv1.MemberStatusRequest) (*pactv1.MemberStatusResponse, error) {
	return s.cfg.Raft.MemberStatus(), nil
}

// JournalStatus is pact journal status: the quorum as this journal's Raft
// node sees it.
func (q *Quorum) JournalStatus(ctx context.Context, _ *pactv1.JournalStatusRequest) (*pactv1.JournalStatusResponse, error) {
	r := q.cfg.Raft
	members, err := r.Members(ctx)
	if err != nil {
		return nil, err
	}
	return &pactv1.JournalStatusResponse{
		LeaderId:     r.Leader(),
		Term:         r.Term(),
		CommitIndex:  r.CommitIndex(),
		AppliedIndex: r.AppliedIndex(),
		ServedBy:     q.cfg.JournalID,
		Members:      members,
		QuorumId:     r.QuorumID(),
		// What the serving journal's registry records, and who keeps the
		// level below what this binary speaks.
		QuorumFeatureLevel: r.QuorumLevel(),
		FeatureLevel:       raftfsm.FeatureLevel,
		BelowFeatureLevel:  raftnode.MembersBelow(members, raftfsm.FeatureLevel),
	}, nil
}

// stampForwarded checks a command another journal forwarded (data, decoded
// as cmd) and stamps it
// with that journal, as this leader authenticated it: the audit then says
// which journal a write came through, and a journal can speak only for
// itself (its own intermediate, its own liveness digest).
func (s *Peers) stampForwarded(ctx context.Context, data []byte, cmd *pactv1.Command) ([]byte, error) {
	p := auth.FromContext(ctx)
	if p == nil || p.ID.Kind != pki.KindJournal {
		return nil, fmt.Errorf("%w: a forwarded write needs a journal's certificate", auth.ErrPermission)
	}
	via := "journal/" + p.ID.Name
	check := func(c *pactv1.Command) error {
		if a := c.GetActor(); strings.HasPrefix(a, "journal/") && a != via {
			return fmt.Errorf("%w: journal %s forwarded a write in the name of %s", auth.ErrPermission, p.ID.Name, a)
		}
		switch op := c.GetOp().(type) {
		case *pactv1.Command_PublishIntermediate:
			ji := op.PublishIntermediate.GetJournal()
			if id := op.PublishIntermediate.GetIntermediate().GetJournalId(); id != p.ID.Name || ji != nil && ji.GetJournalId() != p.ID.Name {
				return fmt.Errorf("%w: journal %s may publish only its own intermediate, not one of %s", auth.ErrPermission, p.ID.Name, id)
			}
			if is := ji.GetIntermediateSerial(); is != "" && is != op.PublishIntermediate.GetIntermediate().GetSerial() {
				return fmt.Errorf("%w: journal %s's record names intermediate %s, not the one it publishes", auth.ErrPermission, p.ID.Name, is)
			}
		case *pactv1.Command_LivenessDigest:
			if id := op.LivenessDigest.GetJournalId(); id != p.ID.Name {
				return fmt.Errorf("%w: journal %s may report only its own liveness digest, not one of %s", auth.ErrPermission, p.ID.Name, id)
			}
		case *pactv1.Command_SetQuorumId:
			return fmt.Errorf("%w: only the leader records the quorum id", auth.ErrPermission)
		}
		return nil
	}
	if err := check(cmd); err != nil {
		return nil, err
	}
	if err := s.checkUnpublishedPublishes(p, cmd); err != nil {
		return nil, err
	}
	for _, sub := range cmd.GetBatch().GetCommands() {
		if err := check(sub); err != nil {
			return nil, err
		}
	}
	// Command.via appended to the bytes as sent, not a second encoding of
	// the whole batch on the leader's path: the last occurrence of a field
	// wins when they are decoded, and a batch's commands take the
	// envelope's via in Apply, so whatever the forwarder wrote is replaced.
	data = protowire.AppendTag(data[:len(data):len(data)], viaField, protowire.BytesType)
	return protowire.AppendString(data, via), nil
}

// checkUnpublishedPublishes refuses a forwarded command from a journal
// whose certificate comes from an intermediate Raft has not published,
// unless it is the publish of that very intermediate: an unpublished
// intermediate may do exactly one thing, publish itself, over a
// connection that proves the journal CA its journal is bound to
// (journal/auth checked that).
func (s *Peers) checkUnpublishedPublishes(p *auth.Principal, cmd *pactv1.Command) error {
	if len(p.Chain) < 2 {
		return fmt.Errorf("%w: a forwarded write needs a journal's certificate chain", auth.ErrPermission)
	}
	// The verified path's intermediate, as authentication judged it: the
	// chain's second certificate may be a published one sent beside it.
	inter := p.Unpublished
	if inter == nil {
		return nil
	}
	op := cmd.GetPublishIntermediate()
	if op == nil || !bytes.Equal(op.GetIntermediate().GetDer(), inter.Raw) {
		err := auth.UnpublishedRefusal("journal %s's intermediate %s is not published yet: it may publish it and nothing else until that commits", p.ID.Name, pki.SerialHex(inter.SerialNumber))
		s.cfg.Raft.CountPeerRefusal("peer service", p.ID.Name, err)
		return err
	}
	return nil
}

// viaField is Command.via's field number.
var viaField = (&pactv1.Command{}).ProtoReflect().Descriptor().Fields().ByName("via").Number()
