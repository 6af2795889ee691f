// Package auth authenticates and authorises the callers of a journal: the
// TLS handshake's admission of a client chain (handshake.go), the
// per-connection verdict on that chain (connverdict.go), the per-call
// authentication against the trust bundle, the registry and SPIRE's bundle,
// and the policy of which identity may call which method (authenticate.go),
// the rate-limited log of refusals (authrefused.go), and the other journals
// of the quorum, on the peer service and, given to the Raft node, on the
// Raft port: their chains against the roots and Raft's records
// (PeerVerifier, peer.go).
//
// It does not import the journal. What it needs from it comes in through
// Config: registry lookups (Registry), the live journal CAs and
// intermediates of the trust bundle (Bundle), the Raft side (Quorum:
// leadership, a linearizable read, a confirmation with the leader, the
// first-use record of a root-signed operator credential), Raft's records
// of the peer journals (PeerVerifier) and the node's checks of their
// quorum and membership (Peers), whether the journal serves a method, and the
// wire reason of an error (the journal's one error-to-status mapping).
package auth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/clock"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// The sentinels every refusal of this package wraps. Their texts are the
// journal's: the journal's status mapping strips them from the front of a
// message, and a caller matches them with errors.Is.
var (
	// ErrUnauthenticated: the caller could not be identified.
	ErrUnauthenticated = errors.New("journal: unauthenticated")
	// ErrPermission: the caller is known but may not do this.
	ErrPermission = errors.New("journal: permission denied")

	// ErrNotYetValid: a client certificate whose not_before is ahead of
	// the journal's clock; one of the two clocks is wrong. It comes with
	// ErrUnauthenticated.
	ErrNotYetValid = errors.New("journal: certificate not valid yet")

	// ErrForeignChain is a client chain that reaches no authority of this
	// domain: it fails the TLS handshake, so a certificate from another
	// root never gets as far as a call (on the gRPC port; the Raft port has
	// always verified its peers in the handshake).
	ErrForeignChain = errors.New("journal: client certificate is not issued under this domain's root")

	// ErrUnknownIssuer: an agent certificate that chains to no live
	// intermediate this journal knows. It comes with ErrUnauthenticated.
	ErrUnknownIssuer = errors.New("client certificate does not chain to a live journal intermediate of this domain (its intermediate or journal CA expired, was retired or revoked, or it is foreign); re-enroll")
	// ErrUnknownOperatorIssuer: an operator credential that chains neither
	// to a root directly nor through a live journal intermediate of the
	// trust bundle. It comes with ErrUnauthenticated.
	ErrUnknownOperatorIssuer = errors.New("operator credential is signed neither by this domain's root nor by a live journal intermediate (its intermediate or journal CA expired, was retired or revoked, or it is of another domain); ask a platform-admin for a new credential (pact admin issue)")
	// ErrOperatorNotIssued: an operator credential signed by a journal
	// intermediate whose serial the registry holds no issue record of
	// (pact admin issue and renew record one before they return it): made
	// with a journal intermediate's key outside pact, or by a removed
	// journal. It comes with ErrUnauthenticated; nothing is written.
	ErrOperatorNotIssued = errors.New("journal: operator credential not issued")
	// ErrChainShape: a chain that verifies to a root but has a shape this
	// domain never issues (an agent or an operator signed by a journal CA
	// itself, an agent signed by the root, an operator under a legacy
	// intermediate): a misissued certificate, or one made with a stolen
	// key. It comes with ErrUnauthenticated. docs/security.md, "Which
	// chains pact accepts".
	ErrChainShape = caprofile.ErrChainShape

	// ErrNotSVID: the certificate carries no SPIFFE ID of the SPIRE trust
	// domain; it is not for the SPIRE path at all.
	ErrNotSVID = errors.New("journal: not an SVID of the SPIRE trust domain")
	// ErrSVIDUntrusted: an SVID of the trust domain that the SPIRE bundle
	// does not verify (or no bundle is loaded yet).
	ErrSVIDUntrusted = errors.New("journal: SVID not signed by the SPIRE trust bundle")
	// ErrNoSPIREBundle: no bundle known yet (the Workload API has not
	// answered); it comes with ErrSVIDUntrusted.
	ErrNoSPIREBundle = errors.New("journal: no SPIRE trust bundle")
	// ErrForeignTrustDomain: the certificate carries a SPIFFE ID of a trust
	// domain this journal does not accept: not an SVID for it either.
	ErrForeignTrustDomain = errors.New("journal: trust domain not accepted")
	// ErrSPIFFEUnmapped: a valid SVID whose SPIFFE ID maps to no node.
	ErrSPIFFEUnmapped = errors.New("journal: SPIFFE ID maps to no node")
)

// Registry is what authentication reads of the journal's registry.
// *raftfsm.FSM satisfies it.
type Registry interface {
	Node(id string) (*pactv1.Node, bool)
	NodeBySPIFFEID(id string) (*pactv1.Node, bool)
	IsRevoked(serial string) bool
	CheckOperator(name, serial string, notBeforeUnix int64) (raftfsm.OperatorStatus, string)
	// Operator is the record of the operator credential with serial.
	Operator(serial string) (*pactv1.Operator, bool)
}

// Intermediates is one version of the trust bundle's CAs below the roots:
// the live journal CAs and the live journal intermediates, those a client
// certificate may chain through (whatever intermediates the client sent
// count for nothing in a call's verification).
type Intermediates struct {
	// Version changes whenever the set changes, so a remembered verdict
	// (connverdict.go) lapses with it.
	Version uint64
	// Pool holds them for chain verification; Certs the same, for the
	// handshake's signature walk. Neither holds a root.
	Pool  *x509.CertPool
	Certs []*x509.Certificate
}

// Bundle yields the live journal CAs and intermediates of the trust bundle.
type Bundle interface {
	LiveIntermediates() Intermediates
}

// Quorum is the Raft side of authentication.
type Quorum interface {
	// IsLeader reports whether this journal leads, so its registry is
	// current.
	IsLeader() bool
	// LinearizableRead waits until this journal's registry holds every
	// write committed before the call.
	LinearizableRead(ctx context.Context) error
	// ConfirmFinal runs decide and lets a refusal stand only once the
	// leader has confirmed it: this journal's copy may lag a write
	// committed through another journal.
	ConfirmFinal(ctx context.Context, decide func() error) error
	// Confirm is ConfirmFinal for the refusals needs names.
	Confirm(ctx context.Context, decide func() error, needs func(error) bool) error
	// RecordOperator records an operator credential signed by a domain
	// root at its first use (through Raft), as actor. A credential signed
	// by a journal intermediate is never recorded so (checkOperator).
	RecordOperator(ctx context.Context, actor string, op *pactv1.Operator) error
}

// Peers is the Raft node's side of the peer service's authentication: the
// caller's chain is the PeerVerifier's to check, its quorum and membership
// the node's.
type Peers interface {
	// RefusedPeer counts (and, sampled, logs) journal name refused as a
	// peer for err, a PeerRefusal.
	RefusedPeer(name string, err error)
	// CheckPeerCall admits a call of journal name: its quorum and, when
	// member is set, its membership.
	CheckPeerCall(ctx context.Context, name string, member bool) error
	// RemovedPeer returns refused, the refusal of journal name's
	// credential on a MemberStatus call, saying besides that name was
	// removed from the quorum when it was (raftnode.Node.RemovedPeer).
	RemovedPeer(ctx context.Context, name string, refused error) error
}

// Config is what an Authenticator needs. Every field but the SPIRE ones
// and ClockSkewTolerance is required.
type Config struct {
	// Domain is the pact trust domain; Roots its root certificates (one,
	// or two during a rollover), every one of Domain.
	Domain string
	Roots  []*x509.Certificate
	// Clock decides validity; ClockSkewTolerance is how far ahead of it a
	// client certificate may start (a journal whose clock runs ahead made
	// it).
	Clock              clock.Clock
	ClockSkewTolerance time.Duration

	// SPIREBundleFile or SPIRESocket, if set, make the journal accept
	// X.509-SVIDs of SPIRETrustDomain (Domain when empty), with the
	// bundle read from the file or the SPIRE agent's Workload API.
	SPIREBundleFile  string
	SPIRESocket      string
	SPIRETrustDomain string

	Log *slog.Logger

	Registry Registry
	Bundle   Bundle
	Quorum   Quorum
	// PeerVerifier authenticates the journals calling the peer service
	// (their chains and Raft's records); Peers checks their quorum and
	// membership.
	PeerVerifier *PeerVerifier
	Peers        Peers
	// Serving answers whether the journal serves method (a halted journal
	// does not): its error is returned as it is, before authentication.
	Serving func(method string) error
	// Reason is the wire reason the journal answers err with (its one
	// mapping of errors to gRPC statuses): refusals are counted and
	// logged by it.
	Reason func(err error) string
	// Refused counts a refused authentication by wire reason.
	Refused func(reason string)
	// NoLeader is the error a write returns when the quorum has no leader
	// (checkOperator serves a status call of a root-signed credential
	// without its first-use record then).
	NoLeader error
}

// DefaultConfig returns a Config with the real clock, the default skew
// tolerance and the default logger; the journal's parts are to be set.
func DefaultConfig() Config {
	return Config{
		Clock:              clock.Real{},
		ClockSkewTolerance: 5 * time.Minute,
		Log:                slog.Default(),
	}
}

// Validate reports every missing or inconsistent field at once.
func (c Config) Validate() error {
	var errs []error
	req := func(ok bool, what string) {
		if !ok {
			errs = append(errs, errors.New("auth: "+what+" is required"))
		}
	}
	req(c.Domain != "", "Domain")
	req(len(c.Roots) > 0, "Roots")
	for i, r := range c.Roots {
		if r == nil {
			errs = append(errs, fmt.Errorf("auth: root %d is missing", i))
			continue
		}
		if d := spiffeDomainOf(r); d != "" && d != c.Domain {
			errs = append(errs, fmt.Errorf("auth: root %q is of trust domain %s, not %s: every root of --root-cert must be of this domain", r.Subject.CommonName, d, c.Domain))
		}
	}
	req(c.Clock != nil, "Clock")
	req(c.Log != nil, "Log")
	req(c.Registry != nil, "Registry")
	req(c.Bundle != nil, "Bundle")
	req(c.Quorum != nil, "Quorum")
	req(c.PeerVerifier != nil, "PeerVerifier")
	req(c.Peers != nil, "Peers")
	req(c.Serving != nil, "Serving")
	req(c.Reason != nil, "Reason")
	req(c.Refused != nil, "Refused")
	req(c.NoLeader != nil, "NoLeader")
	if c.ClockSkewTolerance < 0 {
		errs = append(errs, errors.New("auth: ClockSkewTolerance must not be negative"))
	}
	if c.SPIREBundleFile != "" && c.SPIRESocket != "" {
		errs = append(errs, errors.New("auth: SPIREBundleFile and SPIRESocket exclude each other"))
	}
	return errors.Join(errs...)
}

// Authenticator authenticates and authorises the journal's callers.
type Authenticator struct {
	cfg   Config
	log   *slog.Logger
	roots *x509.CertPool
	// spire is the SPIRE trust domain whose SVIDs authenticate agents; nil
	// when the journal accepts none.
	spire *spireTrust
	// refusals rate-limits the log of refused authentications.
	refusals authRefusals
	// known remembers CA certificates found to reach a root in a client
	// handshake (handshake.go).
	known caCache
	// upper remembers the verified chains above the live intermediates
	// (upperchain.go).
	upper upperChains
	// signed carries the leaf signatures handshakes checked to their
	// connections' first calls (leafsig.go).
	signed *leafSigs
}

// New makes an Authenticator of cfg. With SPIRE set up from a bundle file,
// the file is read now: a file that does not load is an error.
func New(cfg Config) (*Authenticator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spire, err := newSPIRETrust(cfg)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	for _, r := range cfg.Roots {
		roots.AddCert(r)
	}
	return &Authenticator{cfg: cfg, log: cfg.Log, roots: roots, spire: spire, signed: newLeafSigs()}, nil
}

// spiffeDomainOf is the trust domain of a CA certificate's spiffe:// URI,
// or "" when it has none.
func spiffeDomainOf(cert *x509.Certificate) string {
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" {
			return u.Host
		}
	}
	return ""
}

// Background returns what must run while the journal serves (following the
// SPIRE agent's Workload API) until stop closes, or nil when nothing must.
func (a *Authenticator) Background() func(stop <-chan struct{}) {
	if a.spire == nil {
		return nil
	}
	return a.spire.run
}

// SPIRETrustDomain is the SPIRE trust domain whose SVIDs are accepted, or
// "" when none are.
func (a *Authenticator) SPIRETrustDomain() string {
	if a.spire == nil {
		return ""
	}
	return a.spire.td.Name()
}
