package raftnode

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/auth"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// A quorum's identity.
//
// Every journal of a domain holds a certificate from the same root, so TLS
// alone cannot tell one quorum from another: a wiped journal restarted with
// its old --initial-cluster would bootstrap a second quorum that a survivor
// might follow. The quorum id is what tells them apart. It is minted when a
// quorum is bootstrapped (derived from every initial member's bootstrap
// candidate, so all of them agree without a leader), re-derived by recover
// and restore, kept in this journal's stable store (read before Raft
// starts) and in the replicated state (SetQuorumIdOp, in snapshots), and
// proven on every Raft connection (a QuorumHello after the TLS handshake)
// and every peer call (gRPC metadata). A journal never takes Raft traffic
// from, votes for, or forwards to a journal of another quorum.

const (
	// alpnRaft marks a Raft connection that opens with a QuorumHello. A
	// journal of a version before quorum ids offers no ALPN.
	alpnRaft = "pact-raft/2"
	// quorumMetadata carries the caller's quorum id on peer calls.
	quorumMetadata = "pact-quorum-id"
	// Stable-store keys (raft-boltdb's "conf" bucket, beside Raft's own).
	keyQuorumID   = "pact.quorum_id"
	keyCandidate  = "pact.bootstrap_candidate"
	keyFormedWith = "pact.bootstrap_formed_with"
	// keyPreviousQuorumID is the quorum a recover or restore made this
	// journal leave: the replicated state names it until the new
	// quorum's leader records the new id.
	keyPreviousQuorumID = "pact.previous_quorum_id"
	maxHelloSize        = 16 << 10
)

// Reasons a journal refuses a peer (pact_journal_peer_refused_total): the
// node's own, and those of its PeerAuth (journal/auth's).
const (
	refusedQuorumMismatch = "quorum_mismatch"
	refusedNotMember      = "not_member"
	refusedIntermediate   = auth.PeerRefusedWrongIntermediate
	refusedNotBound       = auth.PeerRefusedNotBound
	refusedNoQuorumID     = "no_quorum_id"
	refusedUnpublished    = auth.PeerRefusedUnpublished
	refusedRevoked        = auth.PeerRefusedRevoked
	refusedBootstrapping  = "bootstrapping"
	refusedByPeer         = "refused_by_peer"
	refusedCertificate    = "bad_certificate"
	refusedFeatureLevel   = "feature_level"
)

// PeerRefusalReasons are the reason label values of
// pact_journal_peer_refused_total, every one exported from the start (like
// auth.HandshakeReasons).
var PeerRefusalReasons = []string{refusedQuorumMismatch, refusedNotMember, refusedIntermediate, refusedNotBound, refusedNoQuorumID, refusedUnpublished, refusedRevoked, refusedBootstrapping, refusedByPeer, refusedCertificate, refusedFeatureLevel}

// PeerRefusal is a journal peer refused for a reason
// pact_journal_peer_refused_total counts (journal/auth's, whose
// PeerVerifier refuses chains; the node refuses with it too).
type PeerRefusal = auth.PeerRefusal

func refusal(reason, format string, args ...any) error {
	return auth.RefusePeer(reason, nil, format, args...)
}

func refusalReason(err error) string {
	var r *PeerRefusal
	if errors.As(err, &r) {
		return r.Reason()
	}
	return refusedCertificate
}

func newPeerRefusedCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pact_journal_peer_refused_total",
		Help: "Journal peers refused on the Raft port or the peer service, by reason: quorum_mismatch (a journal of another quorum), not_member (not in the Raft configuration, e.g. removed), wrong_intermediate (a journal certificate not from that journal's own intermediate), not_bound (a journal CA other than the one Raft binds that journal id to: another quorum's, a replaced host's, a superseded one), no_quorum_id (a peer that proves no quorum id to a quorum that has one), unpublished_intermediate (a call other than publishing itself from a journal whose intermediate Raft has not published), revoked_intermediate, bootstrapping (this journal is still asking its peers before it bootstraps), refused_by_peer (the other journal refused this one), bad_certificate.",
	}, []string{"reason"})
	// Every reason from the start: a rate over a series that appears with
	// its first increment misses that increment (PactJournalPeerRefused).
	for _, r := range PeerRefusalReasons {
		c.WithLabelValues(r)
	}
	return c
}

// quorumIdentity is this journal's knowledge of its quorum.
type quorumIdentity struct {
	mu    sync.Mutex
	store raft.StableStore
	id    string
	// candidate and formedWith: this journal's bootstrap candidate and,
	// once it bootstrapped from --initial-cluster, every member's.
	candidate  string
	formedWith map[string]string
	// previous is the quorum a recover or restore left; warned is the
	// last mismatch onQuorumApplied logged.
	previous, warned string
	// bootstrapping: asking the --initial-cluster peers; no Raft traffic
	// is taken until the journal has bootstrapped.
	bootstrapping bool
	hasState      bool
}

// load reads what the stable store holds.
func (q *quorumIdentity) load(store raft.StableStore, hasState bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.store, q.hasState = store, hasState
	var err error
	if q.id, err = getString(store, keyQuorumID); err != nil {
		return err
	}
	if q.candidate, err = getString(store, keyCandidate); err != nil {
		return err
	}
	if q.previous, err = getString(store, keyPreviousQuorumID); err != nil {
		return err
	}
	formed, err := getString(store, keyFormedWith)
	if err != nil {
		return err
	}
	if formed != "" {
		if err := json.Unmarshal([]byte(formed), &q.formedWith); err != nil {
			return fmt.Errorf("journal: stable store %s: %w", keyFormedWith, err)
		}
	}
	return nil
}

func getString(store raft.StableStore, key string) (string, error) {
	v, err := store.Get([]byte(key))
	if err != nil {
		if errors.Is(err, raftboltdb.ErrKeyNotFound) {
			return "", nil
		}
		return "", fmt.Errorf("journal: stable store %s: %w", key, err)
	}
	return string(v), nil
}

func (q *quorumIdentity) get() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.id
}

// adopt sets the id if this journal has none yet (a joining journal, or a
// quorum upgraded from a version without ids); it reports the id held.
func (q *quorumIdentity) adopt(id string) (held string, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.id != "" || id == "" {
		return q.id, nil
	}
	if q.store != nil {
		if err := q.store.Set([]byte(keyQuorumID), []byte(id)); err != nil {
			return q.id, fmt.Errorf("journal: stable store: %w", err)
		}
	}
	q.id = id
	return id, nil
}

// set replaces the id (bootstrap, upgrade).
func (q *quorumIdentity) set(id string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.store.Set([]byte(keyQuorumID), []byte(id)); err != nil {
		return fmt.Errorf("journal: stable store: %w", err)
	}
	q.id = id
	return nil
}

func (q *quorumIdentity) reply(journalID string) *pactv1.QuorumHelloReply {
	q.mu.Lock()
	defer q.mu.Unlock()
	return &pactv1.QuorumHelloReply{QuorumId: q.id, HasState: q.hasState, BootstrapCandidate: q.candidate, FormedWith: q.formedWith, JournalId: journalID,
		FeatureLevel: raftfsm.FeatureLevel, Release: release()}
}

// startBootstrap marks a founding journal as bootstrapping and makes its
// bootstrap candidate (minted and stored once; a restart keeps it). New
// calls it before the Raft port listens, so a founder never answers a
// probe without one.
func (q *quorumIdentity) startBootstrap(store raft.StableStore) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.candidate == "" {
		c := mintQuorumID()
		if err := store.Set([]byte(keyCandidate), []byte(c)); err != nil {
			return fmt.Errorf("journal: stable store: %w", err)
		}
		q.candidate = c
	}
	q.bootstrapping = true
	return nil
}

func (q *quorumIdentity) isBootstrapping() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bootstrapping
}

var quorumIDEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// mintQuorumID returns a new random quorum id.
func mintQuorumID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(quorumIDEncoding.EncodeToString(b[:]))
}

// deriveQuorumID derives a quorum id from parts, so journals that run the
// same step (bootstrap from the same candidates, recover with the same
// members, restore of the same file) agree without talking.
func deriveQuorumID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		_ = binary.Write(h, binary.BigEndian, uint32(len(p)))
		h.Write([]byte(p))
	}
	return strings.ToLower(quorumIDEncoding.EncodeToString(h.Sum(nil)[:16]))
}

func bootstrapQuorumID(formed map[string]string) string {
	parts := []string{"pact bootstrap"}
	ids := make([]string, 0, len(formed))
	for id := range formed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		parts = append(parts, id, formed[id])
	}
	return deriveQuorumID(parts...)
}

// writeHello and readHello frame a QuorumHello or its reply.
func writeHello(w io.Writer, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err = w.Write(append(buf, b...))
	return err
}

func readHello(r io.Reader, m proto.Message) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return fmt.Errorf("journal peer: reading its quorum hello: %w", err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxHelloSize {
		return fmt.Errorf("journal peer: quorum hello of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("journal peer: reading its quorum hello: %w", err)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("journal peer: quorum hello: %w", err)
	}
	return nil
}

// peerJournalID is the journal a verified peer certificate names.
func peerJournalID(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	id, err := pki.IdentityOf(cs.PeerCertificates[0])
	if err != nil {
		return ""
	}
	return id.Name
}

// errProbeAnswered ends a probe connection once it has been answered;
// errRefusalCounted one whose refusal admitRaftConn has counted.
var (
	errProbeAnswered  = errors.New("journal: probe answered")
	errRefusalCounted = errors.New("journal: peer refused")
)

// admitRaftConn runs the quorum hello of an accepted, authenticated Raft
// connection: it answers a probe (errProbeAnswered), or admits the
// connection for Raft, or refuses it.
func (n *Node) admitRaftConn(tc *tls.Conn) error {
	cs := tc.ConnectionState()
	peerID := peerJournalID(cs)
	if cs.NegotiatedProtocol != alpnRaft {
		// A journal of a version before quorum ids (or a client that
		// skips the hello): it proves none.
		err := n.requireQuorumID(peerID, "")
		if err == nil {
			_, err = n.cfg.PeerAuth.CheckPeer(cs.PeerCertificates)
		}
		if err != nil {
			n.CountPeerRefusal("raft port", tc.RemoteAddr().String(), err)
			return errRefusalCounted
		}
		return n.admitPeer(peerID, "", false)
	}
	var hello pactv1.QuorumHello
	if err := readHello(tc, &hello); err != nil {
		return err
	}
	reply := n.quorum.reply(n.cfg.NodeID)
	if !reply.GetHasState() && n.hasRaftState() {
		// Bootstrapped, or joined, since it started: the stable store
		// was empty when it was read, but this journal belongs to a
		// quorum now. An empty journal that probes it must be refused.
		reply.HasState = true
	}
	reply.QuorumFeatureLevel = n.QuorumLevel()
	if hello.GetKind() == pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_PROBE {
		_ = writeHello(tc, reply)
		return errProbeAnswered
	}
	// Answered to any journal of the domain above (a probe reads what is
	// public); Raft itself only to what Raft's records admit.
	err := n.requireQuorumID(peerID, hello.GetQuorumId())
	if err == nil {
		_, err = n.cfg.PeerAuth.CheckPeer(cs.PeerCertificates)
	}
	if err == nil {
		err = n.admitPeer(peerID, hello.GetQuorumId(), true)
	}
	// Last: a peer is refused for what it is before what it speaks.
	if err == nil {
		err = n.checkPeerLevel(peerID, hello.GetFeatureLevel(), hello.GetRelease())
	}
	if err == nil && hello.GetQuorumId() != "" {
		// A journal added with --join takes its quorum from the member
		// that replicates to it, before any snapshot it is sent: a
		// snapshot may predate the quorum's current id (one taken before
		// a recover or restore recorded the new one).
		if _, aerr := n.quorum.adopt(hello.GetQuorumId()); aerr != nil {
			n.log.Error("could not keep the quorum id", logkey.Err, aerr)
		}
		reply.QuorumId = n.quorum.get()
	}
	if err != nil {
		var r *PeerRefusal
		if errors.As(err, &r) {
			reply.Refused, reply.RefusedReason = r.Message(), r.Reason()
		}
		// Counted before the answer leaves, so whoever reads the answer
		// also sees the count.
		n.CountPeerRefusal("raft port", tc.RemoteAddr().String(), err)
		err = errRefusalCounted
	}
	if werr := writeHello(tc, reply); werr != nil && err == nil {
		return werr
	}
	return err
}

// requireQuorumID refuses a peer that proves no quorum id to a journal
// that has one. A quorum id is public (any probe reads it), so proving it
// shows only that the peer means this quorum: it is checked, never trusted,
// and a peer that skips it is refused outside the upgrade mode
// (Config.AcceptPeersWithoutQuorumID) for journals of a release before
// quorum ids.
func (n *Node) requireQuorumID(peerID, theirs string) error {
	if theirs != "" || n.cfg.AcceptPeersWithoutQuorumID {
		return nil
	}
	if own := n.quorum.get(); own != "" {
		return refusal(refusedNoQuorumID, "journal %s proves no quorum id, and this journal belongs to quorum %s: a journal of a release before quorum ids is a peer only while every journal runs with --accept-peers-without-quorum-id (docs/quorum.md, \"Rolling upgrades\")", peerID, own)
	}
	return nil
}

// admitPeer decides whether journal peerID, proving quorum theirs, may
// speak Raft or call the peer service here.
func (n *Node) admitPeer(peerID, theirs string, proven bool) error {
	if n.quorum.isBootstrapping() {
		return refusal(refusedBootstrapping, "journal %s: this journal has not bootstrapped yet (it is asking its --initial-cluster peers first)", peerID)
	}
	own := n.quorum.get()
	if own != "" && theirs != "" && theirs != own {
		return refusal(refusedQuorumMismatch, "journal %s belongs to quorum %s, this journal to quorum %s: they are two quorums (see docs/quorum.md, \"One quorum\")", peerID, theirs, own)
	}
	// A journal that proves no quorum belongs to none yet (added with
	// --join, it learns the id from what it is sent) or runs a version
	// before quorum ids: a member may be either, anyone else neither.
	if !n.isMember(peerID) {
		return refusal(refusedNotMember, "journal %s is not a member of this quorum (removed, or never added)", peerID)
	}
	return nil
}

// hasRaftState reports whether this journal's Raft log or snapshots hold
// anything now: it bootstrapped a quorum, or a leader sent it entries.
func (n *Node) hasRaftState() bool {
	r := n.raftStarted.Load()
	return r != nil && r.LastIndex() > 0
}

// isMember reports whether id is in this journal's Raft configuration. A
// journal that knows no configuration yet (waiting to join) cannot tell,
// and lets the chain and the quorum id decide.
func (n *Node) isMember(id string) bool {
	r := n.raftStarted.Load()
	if r == nil {
		return true
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	servers := f.Configuration().Servers
	if len(servers) == 0 {
		return true
	}
	return slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == id })
}

// dialHello runs the dialer's side of the quorum hello on a Raft
// connection: it proves this journal's quorum and checks the answer.
func (n *Node) dialHello(c *tls.Conn, kind pactv1.QuorumHelloKind) (*pactv1.QuorumHelloReply, error) {
	cs := c.ConnectionState()
	own := n.quorum.get()
	if cs.NegotiatedProtocol != alpnRaft {
		// A journal of a version before quorum ids (a rolling upgrade):
		// a peer if it is a member and the upgrade mode lets it be one.
		// To a probe it counts as belonging to a quorum: such a journal
		// serves Raft only with state, or while joining one.
		if kind == pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_RAFT {
			if err := n.requireQuorumID(peerJournalID(cs), ""); err != nil {
				return nil, err
			}
			if !n.isMember(peerJournalID(cs)) {
				return nil, refusal(refusedNotMember, "journal %s is not a member of this quorum", peerJournalID(cs))
			}
		}
		return &pactv1.QuorumHelloReply{JournalId: peerJournalID(cs), HasState: true}, nil
	}
	if err := writeHello(c, &pactv1.QuorumHello{QuorumId: own, Kind: kind, FeatureLevel: raftfsm.FeatureLevel, Release: release()}); err != nil {
		return nil, err
	}
	var reply pactv1.QuorumHelloReply
	if err := readHello(c, &reply); err != nil {
		return nil, err
	}
	if kind == pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_PROBE {
		return &reply, nil
	}
	if reply.GetRefused() != "" {
		return nil, refusal(refusedByPeer, "refused by journal %s: %s", reply.GetJournalId(), reply.GetRefused())
	}
	if theirs := reply.GetQuorumId(); own != "" && theirs != "" && theirs != own {
		return nil, refusal(refusedQuorumMismatch, "journal %s belongs to quorum %s, this journal to quorum %s", reply.GetJournalId(), theirs, own)
	}
	if err := n.requireQuorumID(reply.GetJournalId(), reply.GetQuorumId()); err != nil {
		return nil, err
	}
	if !n.isMember(peerJournalID(cs)) {
		return nil, refusal(refusedNotMember, "journal %s is not a member of this quorum", peerJournalID(cs))
	}
	// A journal of a release before levels advertises none: level 1.
	if err := n.checkPeerLevel(peerJournalID(cs), reply.GetFeatureLevel(), reply.GetRelease()); err != nil {
		return nil, err
	}
	return &reply, nil
}

// CountPeerRefusal counts and (sampled) logs a refused peer.
func (n *Node) CountPeerRefusal(where, source string, err error) {
	reason := refusalReason(err)
	n.peerRefused.WithLabelValues(reason).Inc()
	if ok, held := n.allowRefusalLog(); ok {
		n.log.Warn("refused a journal peer", logkey.Where, where, logkey.Source, source, logkey.Reason, reason, logkey.Err, err, logkey.RefusalsNotLogged, held)
	}
}

// CheckPeerCall admits a peer-service call from journal peerID: the
// caller's quorum id (gRPC metadata) and, if member, its membership.
func (n *Node) CheckPeerCall(ctx context.Context, peerID string, member bool) error {
	theirs := ""
	if v := metadata.ValueFromIncomingContext(ctx, quorumMetadata); len(v) == 1 {
		theirs = v[0]
	}
	err := n.requireQuorumID(peerID, theirs)
	if err != nil {
	} else if member {
		err = n.admitPeer(peerID, theirs, false)
	} else if own := n.quorum.get(); own != "" && theirs != "" && theirs != own {
		err = refusal(refusedQuorumMismatch, "journal %s belongs to quorum %s, this journal to quorum %s", peerID, theirs, own)
	}
	if err != nil {
		n.CountPeerRefusal("peer service", peerID, err)
		return err
	}
	return nil
}

// RemovedPeer adds ErrPeerRemoved to refused, the refusal of journal
// peerID's credential because Raft's records withdrew it
// (ErrPeerIntermediateRevoked, ErrPeerNotBound), when peerID, calling with
// this journal's quorum id, is absent from the configuration this journal
// holds while it knows a leader. A journal cut off so and removed too may
// never receive the entry that removed it, and can read no MemberStatus:
// this refusal is how it learns that it was removed (removalLoop), and
// exits instead of staying up cut off. Any other refusal is returned as
// it is.
func (n *Node) RemovedPeer(ctx context.Context, peerID string, refused error) error {
	if !errors.Is(refused, ErrPeerIntermediateRevoked) && !errors.Is(refused, ErrPeerNotBound) {
		return refused
	}
	r := n.raftStarted.Load()
	own := n.quorum.get()
	theirs := ""
	if v := metadata.ValueFromIncomingContext(ctx, quorumMetadata); len(v) == 1 {
		theirs = v[0]
	}
	if r == nil || own == "" || theirs != own {
		return refused
	}
	if _, leader := r.LeaderWithID(); leader == "" {
		return refused
	}
	f := r.GetConfiguration()
	if f.Error() != nil || len(f.Configuration().Servers) == 0 || n.isMember(peerID) {
		return refused
	}
	return fmt.Errorf("%w: journal %s is not a member of quorum %s any more (removed): %w", ErrPeerRemoved, peerID, own, refused)
}

// withQuorumID adds this journal's quorum id to every peer call it makes.
func (n *Node) withQuorumID(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if id := n.quorum.get(); id != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, quorumMetadata, id)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// probePeer asks the journal at addr (its Raft port) which quorum it
// belongs to, without joining anything.
func (n *Node) probePeer(addr string, timeout time.Duration) (*pactv1.QuorumHelloReply, error) {
	d := &net.Dialer{Timeout: timeout}
	cfg := n.raftClientTLS()
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	return n.dialHello(c, pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_PROBE)
}

// agreeBootstrap runs before an empty journal bootstraps a quorum of
// several from --initial-cluster. It asks every other listed journal on
// its Raft port and refuses (ErrBootstrapRefused) if one already belongs
// to a quorum other than the one these journals are forming together; it
// waits until every one has answered, and derives the quorum id from their
// bootstrap candidates.
func (n *Node) agreeBootstrap(ctx context.Context, store raft.StableStore) (string, error) {
	q := &n.quorum
	if err := q.startBootstrap(store); err != nil {
		return "", err
	}
	q.mu.Lock()
	self := q.candidate
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.bootstrapping = false
		q.mu.Unlock()
	}()

	got := map[string]string{n.cfg.NodeID: self}
	pending := map[string]string{} // id -> raft address
	for _, p := range n.cfg.InitialCluster {
		if p.ID != n.cfg.NodeID {
			pending[p.ID] = p.RaftAddr
		}
	}
	var formed map[string]string
	lastErr := map[string]error{}
	lastLog := time.Now()
	for len(pending) > 0 {
		for id, addr := range pending {
			reply, err := n.probePeer(addr, 2*time.Second)
			if err != nil {
				lastErr[id] = err
				continue
			}
			if reply.GetJournalId() != id {
				return "", fmt.Errorf("%w: --initial-cluster lists %s at %s, but the journal there is %s: correct --initial-cluster", ErrBootstrapRefused, id, addr, reply.GetJournalId())
			}
			switch {
			case reply.GetHasState() && reply.GetFormedWith()[n.cfg.NodeID] != self:
				return "", fmt.Errorf("%w: journal %s at %s already belongs to a quorum (quorum id %s), and this journal's data directory %s is empty: bootstrapping would start a second quorum. To make this journal a member of that quorum, start it with --join instead of --initial-cluster, then run `pact journal add %s %s` against the quorum; if the quorum still lists %s (its disk was wiped, it was not removed), run `pact journal remove %s` first: a voter that lost its log must not vote (docs/quorum.md, \"One quorum\")",
					ErrBootstrapRefused, id, addr, quorumOrUnknown(reply.GetQuorumId()), n.cfg.DataDir, n.cfg.NodeID, n.raftAddr, n.cfg.NodeID, n.cfg.NodeID)
			case reply.GetHasState():
				formed = reply.GetFormedWith()
			case reply.GetBootstrapCandidate() == "":
				return "", fmt.Errorf("%w: journal %s at %s waits to join a quorum (--join) but --initial-cluster lists it as a founding member: start every journal of a new quorum with the same --initial-cluster", ErrBootstrapRefused, id, addr)
			default:
				got[id] = reply.GetBootstrapCandidate()
			}
			delete(pending, id)
			delete(lastErr, id)
		}
		if len(pending) == 0 {
			break
		}
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			var waiting []string
			for id, addr := range pending {
				waiting = append(waiting, fmt.Sprintf("%s at %s (%v)", id, addr, lastErr[id]))
			}
			sort.Strings(waiting)
			n.log.Warn("waiting for every --initial-cluster journal to answer before bootstrapping a new quorum", logkey.WaitingFor, waiting)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("journal: stopped while waiting for --initial-cluster journals to answer: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	if formed != nil {
		for id, c := range got {
			if formed[id] != c {
				return "", fmt.Errorf("%w: journal %s's bootstrap candidate changed while the quorum formed (was its data directory wiped?); stop every journal of the new quorum, empty their data directories and start them again", ErrBootstrapRefused, id)
			}
		}
		got = formed
	}
	if len(got) != len(n.cfg.InitialCluster) {
		return "", fmt.Errorf("%w: the journals listed in --initial-cluster differ from journal to journal: give every one the same list", ErrBootstrapRefused)
	}
	b, err := json.Marshal(got)
	if err != nil {
		return "", err
	}
	if err := store.Set([]byte(keyFormedWith), b); err != nil {
		return "", fmt.Errorf("journal: stable store: %w", err)
	}
	id := bootstrapQuorumID(got)
	q.mu.Lock()
	q.formedWith = got
	q.mu.Unlock()
	return id, q.set(id)
}

func quorumOrUnknown(id string) string {
	if id == "" {
		return "not recorded yet"
	}
	return id
}

// establishQuorumID runs on the leader once it can serve reads in its
// term: if the replicated state's quorum id differs from this journal's
// own, it records its own (bootstrap, recover, restore) or, for a quorum
// from a version without ids, mints one.
func (n *Node) establishQuorumID(ctx context.Context) {
	own := n.quorum.get()
	state := n.fsm.Quorum().GetQuorumId()
	reason := "bootstrap"
	switch {
	case own == "" && state != "":
		// Recorded by an earlier leader; this journal adopts it (onQuorumApplied).
		return
	case own == "":
		// A quorum from a version without ids: this leader mints one.
		// Every journal, this one included, takes it from the state once
		// it commits (onQuorumApplied); if another leader's got there
		// first, this one is refused and that one stands.
		own = mintQuorumID()
		reason = "upgrade"
	case state == own:
		return
	case state != "":
		reason = "recover or restore"
	}
	cmd := &pactv1.Command{Actor: "journal/" + n.cfg.NodeID, Op: &pactv1.Command_SetQuorumId{SetQuorumId: &pactv1.SetQuorumIdOp{QuorumId: own, Reason: reason, ExpectQuorumId: state}}}
	if _, err := n.Propose(ctx, cmd); err != nil {
		n.log.Warn("could not record the quorum id in the replicated state; retrying at the next leadership", logkey.Err, err)
		return
	}
	n.log.Info("quorum id recorded", logkey.QuorumID, own, logkey.Reason, reason)
}

// quorumLoop records the quorum id whenever this journal becomes leader.
func (n *Node) quorumLoop() {
	obs := make(chan raft.Observation, 4)
	o := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(o)
	defer n.raft.DeregisterObserver(o)
	// A leader whose proposal failed tries again (the id is learnt from
	// entries and restored snapshots, not polled: onQuorumApplied).
	check := time.NewTicker(5 * time.Second)
	defer check.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-obs:
		case <-check.C:
		}
		if n.raft.State() != raft.Leader || n.fsm.Quorum().GetQuorumId() == n.quorum.get() && n.quorum.get() != "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout)
		// The state must hold everything committed before this term
		// before it is compared: the one read path (readindex.go).
		if err := n.ReadBarrier(ctx); err == nil {
			n.establishQuorumID(ctx)
		}
		cancel()
	}
}

// onQuorumRestored is onQuorumApplied after a snapshot was restored: a
// snapshot may name the quorum's previous id, recorded anew by entries
// after it, so a difference is no sign of anything.
func (n *Node) onQuorumRestored() { n.learnQuorum(false) }

// onQuorumApplied learns the quorum id from the replicated state: a
// journal without one (a quorum upgraded from a version without ids)
// adopts it. A journal holding another id than the state names is either
// one a recover or restore made (the state still names the quorum it
// left, until the new leader records the new id) or one reached by a
// quorum it does not belong to, which the hello makes impossible: that is
// logged, once.
func (n *Node) onQuorumApplied() { n.learnQuorum(true) }

func (n *Node) learnQuorum(warnOnMismatch bool) {
	state := n.fsm.Quorum().GetQuorumId()
	if state == "" {
		return
	}
	held, err := n.quorum.adopt(state)
	if err != nil {
		n.log.Error("could not keep the quorum id", logkey.Err, err)
		return
	}
	q := &n.quorum
	q.mu.Lock()
	warn := warnOnMismatch && held != state && state != q.previous && q.warned != state
	if warn {
		q.warned = state
	}
	q.mu.Unlock()
	if warn {
		n.log.Error("the replicated state names another quorum than this journal's", logkey.StateQuorumID, state, logkey.QuorumID, held)
	}
}

// allowRefusalLog says whether to log a refused peer now, and how many
// lines were held back.
func (n *Node) allowRefusalLog() (bool, int) {
	if n.cfg.AllowRefusalLog == nil {
		return true, 0
	}
	return n.cfg.AllowRefusalLog()
}
