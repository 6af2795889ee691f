package journal

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

// peerServer is the journal-to-journal service.
type peerServer struct {
	pactv1.UnimplementedJournalPeerServiceServer
	j *Journal
}

func (s *peerServer) Propose(ctx context.Context, req *pactv1.ProposeRequest) (*pactv1.ProposeResponse, error) {
	j := s.j
	if !j.raft.IsLeader() {
		return nil, fmt.Errorf("%w: this journal is no longer the leader", ErrNoLeader)
	}
	cmd, err := raftfsm.Decode(req.GetCommand())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	data, err := j.stampForwarded(ctx, req.GetCommand(), cmd)
	if err != nil {
		return nil, err
	}
	if j.refusesUnknown(cmd) {
		// A newer journal's command: committing it would stop every
		// journal of this version. Upgrade the leader last (docs/quorum.md).
		return nil, fmt.Errorf("%w: leader %s runs pact-journal %s, which does not know this command; it is refused until the leader is upgraded (upgrade followers first, the leader last)", ErrInvalidArgument, j.cfg.NodeID, version.Get().String())
	}
	return j.raft.ApplyForwarded(ctx, data)
}

// ReadIndex answers a follower's read barrier with this leader's read
// index (only once it has committed an entry of its term).
func (s *peerServer) ReadIndex(ctx context.Context, _ *pactv1.ReadIndexRequest) (*pactv1.ReadIndexResponse, error) {
	idx, err := s.j.raft.ReadIndex(ctx)
	if err != nil {
		return nil, err
	}
	return &pactv1.ReadIndexResponse{CommitIndex: idx}, nil
}

func (s *peerServer) MemberStatus(context.Context, *pactv1.MemberStatusRequest) (*pactv1.MemberStatusResponse, error) {
	return s.j.raft.MemberStatus(), nil
}

// describeSelf adds this journal's intermediate, the journal CA that
// signed it, and a refused --journal-ca-cert file to the status its Raft
// node reports.
func (j *Journal) describeSelf(st *pactv1.MemberStatusResponse) {
	inter, journalCA := j.ca.Current()
	st.IntermediateSerial = pki.SerialHex(inter.SerialNumber)
	st.IntermediateNotAfterUnix = inter.NotAfter.Unix()
	if journalCA != nil {
		st.JournalCaSerial = pki.SerialHex(journalCA.SerialNumber)
	}
	st.JournalCaFileRefused = j.journalCAFileRefused()
}

func (s *adminServer) JournalStatus(ctx context.Context, _ *pactv1.JournalStatusRequest) (*pactv1.JournalStatusResponse, error) {
	j := s.j
	members, err := j.raft.Members(ctx)
	if err != nil {
		return nil, err
	}
	return &pactv1.JournalStatusResponse{
		LeaderId:     j.raft.Leader(),
		Term:         j.raft.Term(),
		CommitIndex:  j.raft.CommitIndex(),
		AppliedIndex: j.raft.AppliedIndex(),
		ServedBy:     j.cfg.NodeID,
		Members:      members,
		QuorumId:     j.raft.QuorumID(),
		// What the serving journal's registry records, and who keeps the
		// level below what this binary speaks.
		QuorumFeatureLevel: j.raft.QuorumLevel(),
		FeatureLevel:       raftfsm.FeatureLevel,
		BelowFeatureLevel:  raftnode.MembersBelow(members, raftfsm.FeatureLevel),
	}, nil
}

// stampForwarded checks a command another journal forwarded (data, decoded
// as cmd) and stamps it
// with that journal, as this leader authenticated it: the audit then says
// which journal a write came through, and a journal can speak only for
// itself (its own intermediate, its own liveness digest).
func (j *Journal) stampForwarded(ctx context.Context, data []byte, cmd *pactv1.Command) ([]byte, error) {
	p := principalFrom(ctx)
	if p == nil || p.ID.Kind != pki.KindJournal {
		return nil, fmt.Errorf("%w: a forwarded write needs a journal's certificate", ErrPermission)
	}
	via := "journal/" + p.ID.Name
	check := func(c *pactv1.Command) error {
		if a := c.GetActor(); strings.HasPrefix(a, "journal/") && a != via {
			return fmt.Errorf("%w: journal %s forwarded a write in the name of %s", ErrPermission, p.ID.Name, a)
		}
		switch op := c.GetOp().(type) {
		case *pactv1.Command_PublishIntermediate:
			ji := op.PublishIntermediate.GetJournal()
			if id := op.PublishIntermediate.GetIntermediate().GetJournalId(); id != p.ID.Name || ji != nil && ji.GetJournalId() != p.ID.Name {
				return fmt.Errorf("%w: journal %s may publish only its own intermediate, not one of %s", ErrPermission, p.ID.Name, id)
			}
			if is := ji.GetIntermediateSerial(); is != "" && is != op.PublishIntermediate.GetIntermediate().GetSerial() {
				return fmt.Errorf("%w: journal %s's record names intermediate %s, not the one it publishes", ErrPermission, p.ID.Name, is)
			}
		case *pactv1.Command_LivenessDigest:
			if id := op.LivenessDigest.GetJournalId(); id != p.ID.Name {
				return fmt.Errorf("%w: journal %s may report only its own liveness digest, not one of %s", ErrPermission, p.ID.Name, id)
			}
		case *pactv1.Command_SetQuorumId:
			return fmt.Errorf("%w: only the leader records the quorum id", ErrPermission)
		}
		return nil
	}
	if err := check(cmd); err != nil {
		return nil, err
	}
	if err := j.checkUnpublishedPublishes(p, cmd); err != nil {
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
// (authwire.go checked that).
func (j *Journal) checkUnpublishedPublishes(p *principal, cmd *pactv1.Command) error {
	if len(p.Chain) < 2 {
		return fmt.Errorf("%w: a forwarded write needs a journal's certificate chain", ErrPermission)
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
		j.raft.CountPeerRefusal("peer service", p.ID.Name, err)
		return err
	}
	return nil
}

// viaField is Command.via's field number.
var viaField = (&pactv1.Command{}).ProtoReflect().Descriptor().Fields().ByName("via").Number()
