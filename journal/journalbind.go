package journal

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/raftnode"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Peers are what Raft records (docs/security.md, "Peers are what Raft
// records"): a journal id is bound to one journal CA, and only a chain
// through it is that journal. The binding moves at a journal's first
// publish, to a re-issue with the same key (raftfsm), and on an
// operator's word: here, when pact journal add binds a new journal (or a
// replaced host) to the journal CA it presents, and when pact journal
// record-ca binds one the ceremony made with a new key.

// bindJoiningJournal binds journal id, about to be added at addr, to the
// journal CA it presents there (expect, if given, must be that
// certificate), before it becomes a member: a journal id re-used by a
// replaced host supersedes the old host's journal CA the moment this
// commits. It returns the record (nil for a journal in the layout before
// journal CAs, in a quorum still in that layout).
func (j *Journal) bindJoiningJournal(ctx context.Context, id, addr string, expect []byte) (*pactv1.JournalCA, error) {
	chain, err := j.raft.ProbeJournalChain(ctx, id, addr)
	if err != nil {
		return nil, err
	}
	var jc *x509.Certificate
	for _, c := range chain[1:] {
		if _, _, ok := caprofile.JournalOf(c); ok {
			jc = c
		}
	}
	if jc == nil {
		if len(expect) > 0 || j.fsm.HasJournalCAs() {
			return nil, fmt.Errorf("%w: journal %s at %s presents no journal CA (the domain root signed its intermediate), and this quorum's journals have journal CAs: give it one from the ceremony (docs/ceremony.md) and start it with --journal-ca-cert", errMembership, id, addr)
		}
		return nil, nil
	}
	if len(expect) > 0 && !bytes.Equal(expect, jc.Raw) {
		return nil, fmt.Errorf("%w: journal %s at %s presents journal CA %s, not the one given with --journal-ca: check the address, and which host answers there", errMembership, id, addr, pki.SerialHex(jc.SerialNumber))
	}
	if j.raft.QuorumLevel() < 2 {
		// A quorum still at level 1 (an upgrade from 0.1.0 under way)
		// cannot record a binding: its journals of the previous release
		// would stop at the command. A new journal id is bound at its
		// first publish, as that release does; an id bound to another
		// journal CA (a replaced host) could never be a peer of this
		// release's journals without the binding, so it waits for the
		// level.
		if bound, ok := j.fsm.BoundJournalCA(id); ok && bound.GetSerial() != pki.SerialHex(jc.SerialNumber) {
			return nil, &raftfsm.QuorumVersionError{Feature: "adding journal " + id + " with a journal CA other than the one it is bound to (" + bound.GetSerial() + ", a replaced host)",
				Need: 2, Have: j.raft.QuorumLevel(), Below: j.membersBelow(ctx, 2)}
		}
		j.log.Warn("journal added without binding its journal CA: the quorum runs at feature level 1 until every journal is upgraded; its first publish records the journal CA", logkey.Journal, id, logkey.Serial, pki.SerialHex(jc.SerialNumber))
		return nil, nil
	}
	return j.bindJournalCA(ctx, id, jc, "pact journal add "+id+" "+addr)
}

// bindJournalCA records jc as the journal CA journal id is bound to, on
// the calling operator's word, after checking it is one the ceremony
// makes for that journal under a root this journal trusts.
func (j *Journal) bindJournalCA(ctx context.Context, id string, jc *x509.Certificate, reason string) (*pactv1.JournalCA, error) {
	if err := caprofile.CheckJournalCAProfile(jc, j.ca.Domain()); err != nil {
		return nil, fmt.Errorf("%w: journal %s's journal CA %s: %w", ErrInvalidArgument, id, pki.SerialHex(jc.SerialNumber), err)
	}
	if of, _, _ := caprofile.JournalOf(jc); of != id {
		return nil, fmt.Errorf("%w: the journal CA is journal %s's, not %s's", ErrInvalidArgument, of, id)
	}
	if !signedByARoot(jc, j.ca.Roots()) {
		return nil, fmt.Errorf("%w: journal CA %s is not signed by a domain root this journal trusts (--root-cert)", ErrInvalidArgument, pki.SerialHex(jc.SerialNumber))
	}
	if now := j.cfg.Clock.Now(); now.Before(jc.NotBefore) || now.After(jc.NotAfter) {
		return nil, fmt.Errorf("%w: journal CA %s is valid from %s to %s only", ErrInvalidArgument, pki.SerialHex(jc.SerialNumber), jc.NotBefore.UTC(), jc.NotAfter.UTC())
	}
	rec := journalCARecord(id, jc)
	if bound, ok := j.fsm.BoundJournalCA(id); ok && bound.GetSerial() == rec.GetSerial() && bytes.Equal(bound.GetDer(), rec.GetDer()) {
		return bound, nil
	}
	actor := "journal/" + j.cfg.NodeID
	if p := principalFrom(ctx); p != nil {
		actor = p.Actor()
	}
	if _, err := j.propose(ctx, &pactv1.Command{Actor: actor, Op: &pactv1.Command_RecordJournalCa{RecordJournalCa: &pactv1.RecordJournalCAOp{JournalCa: rec, Reason: reason}}}); err != nil {
		return nil, err
	}
	j.log.Warn("journal id bound to a journal CA", logkey.Journal, id, logkey.Serial, rec.GetSerial(), logkey.Actor, actor, logkey.Reason, reason)
	bound, _ := j.fsm.BoundJournalCA(id)
	return bound, nil
}

// RecordJournalCA binds a journal id to a journal CA the ceremony signed
// with a new key: a host replaced in place, or a journal CA re-issued
// after its revocation. The journal takes it within seconds (it re-reads
// --journal-ca-cert while the quorum refuses its old one).
func (s *adminServer) RecordJournalCA(ctx context.Context, req *pactv1.RecordJournalCARequest) (*pactv1.RecordJournalCAResponse, error) {
	j := s.j
	id := req.GetJournalId()
	if err := pki.ValidateName("journal id", id); err != nil {
		return nil, err
	}
	jc, err := x509.ParseCertificate(req.GetDer())
	if err != nil {
		return nil, fmt.Errorf("%w: the journal CA certificate does not parse: %v", ErrInvalidArgument, err)
	}
	// The journal CAs it supersedes are the leader's state's to say.
	if err := j.readBarrier(ctx); err != nil {
		return nil, err
	}
	if err := j.requireLevel(ctx, 2, "pact journal record-ca"); err != nil {
		return nil, err
	}
	before, hadOne := j.fsm.BoundJournalCA(id)
	reason := req.GetReason()
	if reason == "" {
		reason = "pact journal record-ca"
	}
	rec, err := j.bindJournalCA(ctx, id, jc, reason)
	if err != nil {
		return nil, err
	}
	out := &pactv1.RecordJournalCAResponse{JournalCa: journalCAView(rec)}
	if hadOne && before.GetSerial() != rec.GetSerial() {
		out.Superseded = append(out.Superseded, journalCAView(before))
	}
	return out, nil
}

// requireLevel refuses a feature new at quorum feature level need while
// the quorum runs below it (docs/upgrade.md), naming the journals still to
// upgrade: it asks every member which level it speaks (the refusal path
// only).
func (j *Journal) requireLevel(ctx context.Context, need uint32, feature string) error {
	have := j.raft.QuorumLevel()
	if have >= need {
		return nil
	}
	return &raftfsm.QuorumVersionError{Feature: feature, Need: need, Have: have, Below: j.membersBelow(ctx, need)}
}

// membersBelow names the members whose binaries speak less than level.
func (j *Journal) membersBelow(ctx context.Context, level uint32) []string {
	members, err := j.raft.Members(ctx)
	if err != nil {
		return nil
	}
	return raftnode.MembersBelow(members, level)
}
