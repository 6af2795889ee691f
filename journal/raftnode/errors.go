package raftnode

import (
	"errors"

	"github.com/pact-hpc/pact/journal/auth"
)

// The node's errors. Their text keeps the journal's prefix: they reach
// clients as they are, and journal's status.go maps them to gRPC codes in
// one place (journal re-exports those its callers match).
var (
	// ErrNoLeader: no leader is known or reachable, or this journal lost
	// the leadership before the write entered the log. Nothing was
	// written; retryable.
	ErrNoLeader = errors.New("journal: no leader")
	// ErrOutcomeUnknown: the write was sent to the leader but no answer
	// came in time, so it may or may not have committed; or it committed
	// but this journal could not apply it in time to show the result.
	// Retryable, never final.
	ErrOutcomeUnknown = errors.New("journal: outcome unknown")
	// ErrDataDirInUse: another process (another pact-journal) holds the
	// lock on the data directory's Raft store.
	ErrDataDirInUse = errors.New("journal: data directory in use")
	// ErrRemoved: this journal was removed from the quorum's configuration.
	ErrRemoved = errors.New("journal: removed from the quorum")
	// ErrNoCluster: --raft-listen without --initial-cluster or --join.
	ErrNoCluster = errors.New("journal: no cluster to form or join")
	// ErrMembership is a membership change refused for a reason other
	// than leadership (for example another change still in progress).
	ErrMembership = errors.New("journal: membership change refused")
	// ErrQuorumMismatch: a peer journal belongs to another quorum.
	ErrQuorumMismatch = errors.New("journal: journal of another quorum")
	// ErrBootstrapRefused: an empty journal was asked to bootstrap a new
	// quorum, but a journal it lists already belongs to one.
	ErrBootstrapRefused = errors.New("journal: bootstrap refused")
)

// Sentinels of peer verification: journal/auth's, whose PeerVerifier
// refuses by them and which classifies a failed handshake by them
// (auth.HandshakeRefusalReason).
var (
	ErrPeerNoCertificate       = auth.ErrPeerNoCertificate
	ErrPeerIntermediateRevoked = auth.ErrPeerIntermediateRevoked
	ErrPeerNotJournal          = auth.ErrPeerNotJournal
	ErrPeerWrongIntermediate   = auth.ErrPeerWrongIntermediate
	ErrPeerNotBound            = auth.ErrPeerNotBound
	// ErrPeerRemoved: a journal refused as a peer (ErrPeerIntermediateRevoked
	// or ErrPeerNotBound) that the journal it calls no longer lists in its
	// configuration either: it was removed, and learns so from this
	// refusal (removalLoop), since it can read no MemberStatus.
	ErrPeerRemoved     = errors.New("journal peer: removed from the quorum")
	ErrPeerUnpublished = auth.ErrPeerUnpublished
)
