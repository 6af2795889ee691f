package auth

import (
	"bytes"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Peer journals: the other journals of the quorum, on the Raft port and
// the peer service. A PeerVerifier decides whether a certificate chain is
// one of them, from the domain's roots and what Raft recorded (the journal
// CA each journal id is bound to, the intermediates and their
// revocations); the Raft node (journal/raftnode) is given one and checks
// membership and the quorum id itself.

// Reasons a PeerVerifier refuses a peer, the values it gives the reason
// label of pact_journal_peer_refused_total (the Raft node adds its own).
const (
	PeerRefusedWrongIntermediate = "wrong_intermediate"
	PeerRefusedNotBound          = "not_bound"
	PeerRefusedRevoked           = "revoked_intermediate"
	PeerRefusedUnpublished       = "unpublished_intermediate"
)

// ErrPeerNotBound: a journal chain through a journal CA other than the one
// Raft binds its journal id to. Counted at the handshake as a wrong
// intermediate.
var ErrPeerNotBound = fmt.Errorf("%w: not the journal CA its journal is bound to", ErrPeerWrongIntermediate)

// ErrPeerUnpublished: a peer call other than publishing itself from a
// journal whose intermediate Raft has not published.
var ErrPeerUnpublished = errors.New("journal peer: intermediate not published")

// UnpublishedRefusal is the refusal of a peer call (other than its own
// publish) from a journal whose intermediate Raft has not published,
// counted as unpublished_intermediate.
func UnpublishedRefusal(format string, args ...any) error {
	return RefusePeer(PeerRefusedUnpublished, ErrPeerUnpublished, format, args...)
}

// PeerRefusal is a journal peer refused for a reason
// pact_journal_peer_refused_total counts.
type PeerRefusal struct {
	reason string
	msg    string
	// cause, if set, is the sentinel the handshake metrics classify by.
	cause error
}

// RefusePeer is a refusal of a peer for reason, with cause (nil: none) as
// the sentinel it wraps.
func RefusePeer(reason string, cause error, format string, args ...any) *PeerRefusal {
	return &PeerRefusal{reason: reason, msg: fmt.Sprintf(format, args...), cause: cause}
}

func (e *PeerRefusal) Error() string { return "journal peer: " + e.msg }

func (e *PeerRefusal) Unwrap() error { return e.cause }

// Reason is the reason label the refusal is counted under.
func (e *PeerRefusal) Reason() string { return e.reason }

// Message is what the refusal says, without the "journal peer: " of Error
// (a refused journal is told it in the quorum hello's reply).
func (e *PeerRefusal) Message() string { return e.msg }

// PeerRecords is what a PeerVerifier reads of Raft's records
// (*raftfsm.FSM has it).
type PeerRecords interface {
	// BoundJournalCA is the journal CA journalID is bound to, if any.
	BoundJournalCA(journalID string) (*pactv1.JournalCA, bool)
	// JournalCA is the journal CA recorded under serial, if any.
	JournalCA(serial string) (*pactv1.JournalCA, bool)
	// Intermediate is the intermediate published under serial, if any.
	Intermediate(serial string) (*pactv1.Intermediate, bool)
}

// PeerConfig is what a PeerVerifier needs.
type PeerConfig struct {
	// Domain is the trust domain a peer's certificate must name; Roots
	// are the domain roots its chain may reach (two during a rollover).
	Domain string
	Roots  []*x509.Certificate
	// Records are Raft's records; nil is nothing recorded (a tool with no
	// Raft state, such as recover's probe of the other journals: every
	// chain is then decided by itself).
	Records PeerRecords
	// Clock decides validity.
	Clock clock.Clock
}

// Validate reports every missing field at once.
func (c PeerConfig) Validate() error {
	var errs []error
	if c.Domain == "" {
		errs = append(errs, errors.New("auth: peer Domain is required"))
	}
	if len(c.Roots) == 0 {
		errs = append(errs, errors.New("auth: peer Roots are required"))
	}
	for i, r := range c.Roots {
		if r == nil {
			errs = append(errs, fmt.Errorf("auth: peer root %d is missing", i))
		}
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("auth: peer Clock is required"))
	}
	return errors.Join(errs...)
}

// PeerVerifier authenticates the journals of the quorum. It is safe for
// concurrent use.
type PeerVerifier struct {
	domain  string
	roots   *x509.CertPool
	records PeerRecords
	clock   clock.Clock
	cache   verifiedChains
}

// NewPeerVerifier returns a PeerVerifier; it copies cfg.
func NewPeerVerifier(cfg PeerConfig) (*PeerVerifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &PeerVerifier{domain: cfg.Domain, roots: x509.NewCertPool(), records: cfg.Records, clock: cfg.Clock}
	if v.records == nil {
		v.records = noRecords{}
	}
	for _, r := range cfg.Roots {
		v.roots.AddCert(r)
	}
	return v, nil
}

// noRecords is Raft's records of a tool that has none.
type noRecords struct{}

func (noRecords) BoundJournalCA(string) (*pactv1.JournalCA, bool)  { return nil, false }
func (noRecords) JournalCA(string) (*pactv1.JournalCA, bool)       { return nil, false }
func (noRecords) Intermediate(string) (*pactv1.Intermediate, bool) { return nil, false }

// ParsePeerChain parses the chain a peer sent in a TLS handshake (leaf
// first); a peer without a certificate is ErrPeerNoCertificate.
func ParsePeerChain(raw [][]byte) ([]*x509.Certificate, error) {
	if len(raw) == 0 {
		return nil, ErrPeerNoCertificate
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, d := range raw {
		c, err := x509.ParseCertificate(d)
		if err != nil {
			return nil, fmt.Errorf("journal peer: %w", err)
		}
		certs[i] = c
	}
	return certs, nil
}

// VerifyChain checks a peer journal's chain (leaf first) without Raft's
// records: it reaches a domain root through the CAs the peer presents (its
// intermediate and journal CA), in a journal's shape, naming a journal of
// this domain. That much any journal of the domain has: the Raft port's
// handshake, where a probe is answered to any journal of the domain and
// the records are checked after the quorum hello.
func (v *PeerVerifier) VerifyChain(certs []*x509.Certificate) error {
	_, err := v.peerPath(certs, v.clock.Now())
	return err
}

// CheckPeer checks a peer journal's chain (leaf first) and reports whether
// its intermediate is one Raft published.
//
// The chain must reach a domain root in a shape a journal's certificate
// has ([server, intermediate, journal CA], or legacy [server,
// intermediate]) and name a journal of this domain; that much any journal
// of the domain has, a second quorum's and a replaced host's included.
// What makes it a peer is what Raft recorded: the journal CA its journal
// id is bound to, and an intermediate of that journal. Membership and the
// quorum id are checked by the callers, per connection and per call.
//
// It checks against Raft's records as they stand now: on every call and
// connection, and again by the Raft port's sweep for connections already
// open, so authority the records withdraw is withdrawn from open
// connections too.
//
//   - Every journal CA sent is the one the journal id is bound to (or a
//     re-issue of it with the same key, which the journal's publish under
//     it will bind), and not revoked. A journal id bound to a journal CA
//     has no peer without one.
//   - An intermediate Raft records is that journal's, under that journal
//     CA, and not revoked; one it does not record is unpublished: the
//     journal re-keyed or started, and publishes it over the peer service
//     (the only peer call it may make, journal/authwire.go). On the Raft
//     port it is taken under the bound journal CA only: after a whole
//     quorum restarts every journal holds an intermediate nobody has
//     published yet, and publishing needs a leader, which needs Raft.
//   - A legacy chain (the root signed its intermediate) is a peer only
//     with an intermediate Raft records for that journal, or while the
//     quorum has no journal CA at all (the layout before journal CAs,
//     whose bootstrap has nothing else).
//
// A journal id with nothing recorded (a founding member before its first
// publish) is decided by the chain alone; pact journal add binds a new
// journal's journal CA before it becomes a member.
func (v *PeerVerifier) CheckPeer(certs []*x509.Certificate) (published bool, err error) {
	_, published, err = v.checkPeer(certs)
	return published, err
}

// checkPeer is CheckPeer that also returns the intermediate on the
// verified path: the one that vouches for the leaf, whatever else was
// sent beside it.
func (v *PeerVerifier) checkPeer(certs []*x509.Certificate) (inter *x509.Certificate, published bool, err error) {
	now := v.clock.Now()
	id, ierr := pki.IdentityOf(certs[0])
	if ierr != nil || id.Kind != pki.KindJournal {
		return nil, false, fmt.Errorf("%w (%s)", ErrPeerNotJournal, v.domain)
	}
	// What was sent: every journal CA in it must be this journal's and
	// none revoked, on the verified path or beside it (a journal sends
	// its own and nothing else).
	var sentCAs []*x509.Certificate
	for _, c := range certs[1:] {
		if _, _, ok := caprofile.JournalOf(c); ok {
			sentCAs = append(sentCAs, c)
		}
	}
	if err := v.checkJournalCAsRevoked(sentCAs); err != nil {
		return nil, false, err
	}
	if err := checkJournalCABinding(certs[0], sentCAs); err != nil {
		return nil, false, err
	}
	// What vouches for the leaf: the verified path's intermediate and
	// journal CA (none: the legacy shape), not whatever was sent beside.
	path, err := v.peerPath(certs, now)
	if err != nil {
		return nil, false, err
	}
	inter = path[1]
	var jc *x509.Certificate
	if len(path) == 4 {
		jc = path[2]
	}
	bound, isBound := v.records.BoundJournalCA(id.Name)
	switch {
	case isBound && jc == nil:
		return nil, false, RefusePeer(PeerRefusedNotBound, ErrPeerNotBound, "journal %s is bound to journal CA %s; a chain without it (the root signed its intermediate) is no peer", id.Name, bound.GetSerial())
	case isBound:
		if err := provesBound(id.Name, jc, bound); err != nil {
			return nil, false, err
		}
	}
	in, published := v.records.Intermediate(pki.SerialHex(inter.SerialNumber))
	if published {
		if raftfsm.IntermediateRevoked(in, now.UnixNano()) {
			return nil, false, RefusePeer(PeerRefusedRevoked, ErrPeerIntermediateRevoked, "intermediate %s of journal %s is revoked", in.GetSerial(), in.GetJournalId())
		}
		if err := checkIntermediateBinding(certs[0], in); err != nil {
			return nil, false, err
		}
		if !bytes.Equal(in.GetDer(), inter.Raw) {
			return nil, false, RefusePeer(PeerRefusedNotBound, ErrPeerNotBound, "intermediate %s of journal %s is not the certificate Raft records under that serial", in.GetSerial(), id.Name)
		}
		if jc != nil && in.GetIssuerSerial() != pki.SerialHex(jc.SerialNumber) {
			return nil, false, RefusePeer(PeerRefusedNotBound, ErrPeerNotBound, "intermediate %s of journal %s is recorded under journal CA %q, not the one on its path", in.GetSerial(), id.Name, in.GetIssuerSerial())
		}
	}
	// A legacy chain of a journal not bound to a journal CA is a legacy
	// journal not migrated yet, which restarts with a fresh root-signed
	// intermediate (the migration runs through such restarts), or a
	// founder before its first publish: decided by its chain, as a journal
	// with the root key on its host is as strong as that key anyway
	// (docs/migration.md). A bound journal has no legacy chain (refused
	// above), and pact journal add refuses a legacy journal in a quorum
	// with journal CAs.
	return inter, published, nil
}

// Applied is told of what the FSM applied: the verifier forgets the peer
// chains it verified when an intermediate is retired or revoked (the
// bundle changed), so nothing verified before is trusted from memory.
func (v *PeerVerifier) Applied(ev raftfsm.Event) {
	if ev.BundleChanged {
		v.cache.clear()
	}
}

// checkPeerCert checks a peer service call's chain is that of journal
// name, a peer of this quorum by Raft's records (PeerVerifier.CheckPeer),
// that may call method, and has a refusal counted (Peers.RefusedPeer).
//
// It returns the verified path's intermediate when Raft has not published
// it (nil when it has): the one intermediate such a caller may publish.
// The decision is the verified path's, never the chain's second
// certificate: a chain may carry a published intermediate beside the one
// that signed its leaf.
func (a *Authenticator) checkPeerCert(chain []*x509.Certificate, name, method string) (unpublished *x509.Certificate, err error) {
	inter, published, err := a.cfg.PeerVerifier.checkPeer(chain)
	if err == nil && !published && !unpublishedMayCall(method) {
		// A journal that re-keyed or started publishes its new
		// intermediate before it does anything else with it: retryable
		// for the caller (its forward answers NO_LEADER), and nothing
		// else is served to a certificate Raft has not published.
		err = UnpublishedRefusal("journal %s's intermediate is not published yet: it may publish it (Propose) and nothing else until that commits", name)
	}
	var r *PeerRefusal
	if errors.As(err, &r) {
		a.cfg.Peers.RefusedPeer(name, err)
	}
	if err != nil || published {
		return nil, err
	}
	return inter, nil
}

// unpublishedMayCall is what a journal may call with an intermediate Raft
// has not published: Propose, whose handler takes only the publish of
// that very intermediate (the journal's stampForwarded), and
// MemberStatus, a read of the callee's own view that a restarting journal
// asks to learn whether it was removed.
func unpublishedMayCall(method string) bool {
	return method == pactv1.JournalPeerService_Propose_FullMethodName || method == pactv1.JournalPeerService_MemberStatus_FullMethodName
}

// provesBound refuses a journal CA that is not the one journalID is bound
// to, nor a re-issue of it with the same key that Raft has not recorded
// yet (the yearly renewal, a rollover: the journal's publish under it
// binds it).
func provesBound(journalID string, jc *x509.Certificate, bound *pactv1.JournalCA) error {
	serial := pki.SerialHex(jc.SerialNumber)
	if serial == bound.GetSerial() {
		if !bytes.Equal(jc.Raw, bound.GetDer()) {
			return RefusePeer(PeerRefusedNotBound, ErrPeerNotBound, "journal CA %s of journal %s is not the certificate Raft records under that serial", serial, journalID)
		}
		return nil
	}
	if bound.GetRevokedAtUnixNano() == 0 && sameKey(jc, bound.GetDer()) {
		return nil
	}
	return RefusePeer(PeerRefusedNotBound, ErrPeerNotBound, "journal CA %s is not the one journal %s is bound to (%s): a journal CA of another quorum, of a replaced host, or superseded (docs/security.md, \"Peers are what Raft records\")", serial, journalID, bound.GetSerial())
}

func sameKey(c *x509.Certificate, der []byte) bool {
	other, err := x509.ParseCertificate(der)
	return err == nil && bytes.Equal(c.RawSubjectPublicKeyInfo, other.RawSubjectPublicKeyInfo)
}

// checkJournalCAsRevoked refuses a chain through a journal CA Raft records
// as revoked.
func (v *PeerVerifier) checkJournalCAsRevoked(journalCAs []*x509.Certificate) error {
	for _, c := range journalCAs {
		serial := pki.SerialHex(c.SerialNumber)
		if jc, ok := v.records.JournalCA(serial); ok && jc.GetRevokedAtUnixNano() != 0 {
			return RefusePeer(PeerRefusedRevoked, ErrPeerIntermediateRevoked, "journal CA %s of journal %s is revoked (%s)", serial, jc.GetJournalId(), jc.GetRevokeReason())
		}
	}
	return nil
}

// checkJournalCABinding refuses a journal certificate sent with the journal
// CA of another journal: a journal CA signs its own journal's
// intermediates only. Every journal CA sent counts, whether or not it is
// on the verified path: a journal sends its own only, and a peer that sends
// another's (to hide which one signed) refuses itself.
func checkJournalCABinding(leaf *x509.Certificate, journalCAs []*x509.Certificate) error {
	id, err := pki.IdentityOf(leaf)
	if err != nil || id.Kind != pki.KindJournal {
		return nil // verifyJournalPath refused it already
	}
	for _, c := range journalCAs {
		if of, _, _ := caprofile.JournalOf(c); of != id.Name {
			return RefusePeer(PeerRefusedWrongIntermediate, ErrPeerWrongIntermediate, "a certificate naming journal %s under the journal CA of journal %s", id.Name, of)
		}
	}
	return nil
}

// checkIntermediateBinding refuses a journal certificate whose
// intermediate is recorded in Raft for another journal: a peer is a
// journal only with its own intermediate.
func checkIntermediateBinding(leaf *x509.Certificate, issuer *pactv1.Intermediate) error {
	if issuer == nil {
		return nil // not in Raft yet: the chain decides
	}
	id, err := pki.IdentityOf(leaf)
	if err != nil || id.Kind != pki.KindJournal {
		return nil // verifyJournalPath refused it already
	}
	if issuer.GetJournalId() != id.Name {
		return RefusePeer(PeerRefusedWrongIntermediate, ErrPeerWrongIntermediate, "a certificate naming journal %s from the intermediate of journal %s", id.Name, issuer.GetJournalId())
	}
	return nil
}

// verifyJournalPath verifies a peer journal's chain and returns the path
// that verified, leaf first and a root last, in a journal's shape: the
// path, not what else was sent beside it, says which intermediate and
// journal CA vouch for the leaf.
func (v *PeerVerifier) verifyJournalPath(certs []*x509.Certificate, now time.Time) ([]*x509.Certificate, error) {
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	chains, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         v.roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("journal peer: %w", err)
	}
	id, err := pki.IdentityOf(certs[0])
	if err != nil || id.Kind != pki.KindJournal || id.Domain != v.domain {
		return nil, fmt.Errorf("%w (%s)", ErrPeerNotJournal, v.domain)
	}
	// A journal's certificate comes from its intermediate, never from a
	// journal CA or a root directly.
	var shape error
	for _, c := range chains {
		if shape = ChainShape(pki.KindJournal, c, id.Domain); shape == nil {
			return c, nil
		}
	}
	return nil, &PeerRefusal{reason: PeerRefusedWrongIntermediate, msg: shape.Error(), cause: fmt.Errorf("%w: %w", ErrPeerWrongIntermediate, shape)}
}

// peerPath returns the verified path of a peer's chain, from the cache
// or verified now.
func (v *PeerVerifier) peerPath(certs []*x509.Certificate, now time.Time) ([]*x509.Certificate, error) {
	if path, ok := v.cache.verified(certs, now); ok {
		return path, nil
	}
	path, err := v.verifyJournalPath(certs, now)
	if err != nil {
		return nil, err
	}
	v.cache.add(certs, path, now)
	return path, nil
}

// verifiedChains remembers peer journal chains that verified, so a leader
// does not re-verify the same follower's chain (two ECDSA verifications) on
// every forwarded write. A journal chain depends on nothing but the root,
// which never changes while the journal runs, and the clock: an entry
// holds until the earliest NotAfter in the chain.
type verifiedChains struct {
	mu sync.Mutex
	m  map[string]verifiedChain // the chain's DER, concatenated -> its verification
}

type verifiedChain struct {
	until time.Time
	path  []*x509.Certificate // the path that verified, leaf first
}

// maxVerifiedChains bounds the cache: a quorum has at most a handful of
// journals, each with one chain per intermediate it held.
const maxVerifiedChains = 64

// chainKey is the chain's certificates, each after its length.
func chainKey(certs []*x509.Certificate) string {
	var b strings.Builder
	for _, c := range certs {
		b.Write(binary.BigEndian.AppendUint32(nil, uint32(len(c.Raw))))
		b.Write(c.Raw)
	}
	return b.String()
}

func (v *verifiedChains) verified(certs []*x509.Certificate, now time.Time) ([]*x509.Certificate, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.m[chainKey(certs)]
	if !ok {
		return nil, false
	}
	for _, c := range certs {
		if now.Before(c.NotBefore) {
			return nil, false // a clock stepped back: verify again
		}
	}
	return e.path, now.Before(e.until)
}

// clear forgets every verified chain: called when an intermediate is
// retired or revoked, so nothing verified before is trusted from memory.
func (v *verifiedChains) clear() {
	v.mu.Lock()
	v.m = nil
	v.mu.Unlock()
}

func (v *verifiedChains) add(certs, path []*x509.Certificate, now time.Time) {
	until := certs[0].NotAfter
	for _, c := range certs[1:] {
		if c.NotAfter.Before(until) {
			until = c.NotAfter
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= maxVerifiedChains {
		for k, e := range v.m {
			if !now.Before(e.until) {
				delete(v.m, k)
			}
		}
		if len(v.m) >= maxVerifiedChains {
			v.m = nil
		}
	}
	if v.m == nil {
		v.m = make(map[string]verifiedChain, 8)
	}
	v.m[chainKey(certs)] = verifiedChain{until: until, path: path}
}
