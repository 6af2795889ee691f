package journal

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// SPIRE sites (docs/spire.md). The journal trusts the X.509 bundle of one
// SPIRE trust domain, read from a file or from the journal host's own SPIRE
// agent, and accepts an X.509-SVID of that trust domain from a node agent
// whose SPIFFE ID maps to a registered node (raftfsm.NodeBySPIFFEID).

// spireBundleRecheck is how often the bundle file's modification time is
// looked at (on the journal's clock), so a SPIRE CA rotation is picked up.
const spireBundleRecheck = 10 * time.Second

// spireIdentitySource is what Ping reports for an SVID-authenticated agent.
const spireIdentitySource = "spiffe"

var (
	// errNotSVID: the certificate carries no SPIFFE ID of the SPIRE trust
	// domain; it is not for the SPIRE path at all.
	errNotSVID = errors.New("journal: not an SVID of the SPIRE trust domain")
	// errSVIDUntrusted: an SVID of the trust domain that the SPIRE bundle
	// does not verify (or no bundle is loaded yet).
	errSVIDUntrusted = errors.New("journal: SVID not signed by the SPIRE trust bundle")
	// errNoSPIREBundle: no bundle known yet (the Workload API has not
	// answered); it comes with errSVIDUntrusted.
	errNoSPIREBundle = errors.New("journal: no SPIRE trust bundle")
	// errForeignTrustDomain: the certificate carries a SPIFFE ID of a trust
	// domain this journal does not accept: not an SVID for it either.
	errForeignTrustDomain = errors.New("journal: trust domain not accepted")
	// errSPIFFEUnmapped: a valid SVID whose SPIFFE ID maps to no node.
	errSPIFFEUnmapped = errors.New("journal: SPIFFE ID maps to no node")
)

// spireBundleSource yields the current X.509 bundle of the SPIRE trust
// domain, or nil while none is known.
type spireBundleSource interface {
	current() *x509bundle.Bundle
}

// spireTrust is the SPIRE trust domain the journal accepts SVIDs from.
type spireTrust struct {
	td  spiffeid.TrustDomain
	src spireBundleSource
	// run, if set, maintains src until stop closes (the Workload API).
	run func(stop <-chan struct{})
}

// newSPIRETrust sets up the SPIRE trust of cfg, or returns nil when the
// journal does not accept SVIDs. domain is the pact domain, the default
// trust domain.
func newSPIRETrust(cfg Config, domain string, log *slog.Logger) (*spireTrust, error) {
	if cfg.SPIREBundleFile == "" && cfg.SPIRESocket == "" {
		return nil, nil
	}
	name := cfg.SPIRETrustDomain
	if name == "" {
		name = domain
	}
	td, err := spiffeid.TrustDomainFromString(name)
	if err != nil {
		return nil, fmt.Errorf("journal: SPIRE trust domain %q: %w", name, err)
	}
	log = log.With(logkey.SPIRETrustDomain, td.Name())
	if cfg.SPIREBundleFile != "" {
		fb := &spireFileBundle{path: cfg.SPIREBundleFile, td: td, clock: cfg.Clock, log: log}
		if err := fb.load(); err != nil {
			return nil, fmt.Errorf("journal: --spire-bundle: %w", err)
		}
		return &spireTrust{td: td, src: fb}, nil
	}
	sb := &spireSocketBundle{addr: cfg.SPIRESocket, td: td, log: log}
	return &spireTrust{td: td, src: sb, run: sb.run}, nil
}

// spireFileBundle is the SPIRE bundle in a PEM file (spire-server bundle
// show, or a file SPIRE's bundle notifier writes). It is re-read when its
// modification time or size changes, looked at no more often than every
// spireBundleRecheck; a file that fails to parse leaves the previous bundle
// in force.
type spireFileBundle struct {
	path  string
	td    spiffeid.TrustDomain
	clock clock.Clock
	log   *slog.Logger

	mu      sync.Mutex
	checked time.Time
	mtime   time.Time
	size    int64
	cur     *x509bundle.Bundle
}

// load reads the file now, whatever its modification time.
func (b *spireFileBundle) load() error {
	fi, err := os.Stat(b.path)
	if err != nil {
		return err
	}
	bundle, err := x509bundle.Load(b.td, b.path)
	if err != nil {
		return fmt.Errorf("%s: %w", b.path, err)
	}
	if bundle.Empty() {
		return fmt.Errorf("%s holds no certificate (want the PEM X.509 bundle of trust domain %s)", b.path, b.td.Name())
	}
	b.cur, b.mtime, b.size = bundle, fi.ModTime(), fi.Size()
	b.checked = b.clock.Now()
	b.log.Info("SPIRE trust bundle loaded", logkey.File, b.path, logkey.Authorities, len(bundle.X509Authorities()))
	return nil
}

func (b *spireFileBundle) current() *x509bundle.Bundle {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.checked) < spireBundleRecheck && !now.Before(b.checked) {
		return b.cur
	}
	b.checked = now
	fi, err := os.Stat(b.path)
	if err != nil {
		b.log.Warn("SPIRE trust bundle file unreadable; keeping the bundle loaded before", logkey.File, b.path, logkey.Err, err)
		return b.cur
	}
	if fi.ModTime().Equal(b.mtime) && fi.Size() == b.size {
		return b.cur
	}
	if err := b.load(); err != nil {
		b.log.Warn("SPIRE trust bundle file changed but does not parse; keeping the bundle loaded before", logkey.Err, err)
	}
	return b.cur
}

// spireSocketBundle follows the bundle the journal host's own SPIRE agent
// serves over the Workload API. The journal's process needs a registration
// entry of its own for the agent to answer. Until the first answer there is
// no bundle and SVIDs are refused; when the agent goes away the last bundle
// stays in force (SVIDs it signed stay valid) while the client reconnects.
type spireSocketBundle struct {
	addr string
	td   spiffeid.TrustDomain
	log  *slog.Logger

	cur    atomic.Pointer[x509bundle.Bundle]
	failed atomic.Bool // the last watch attempt failed (logged once)
}

func (b *spireSocketBundle) current() *x509bundle.Bundle { return b.cur.Load() }

func (b *spireSocketBundle) run(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	b.log.Info("fetching the SPIRE trust bundle from the Workload API", logkey.Socket, b.addr)
	for {
		client, err := workloadapi.New(ctx, workloadapi.WithAddr(b.addr))
		if err == nil {
			// Retries with backoff until ctx ends, or returns on an error
			// it deems permanent.
			err = client.WatchX509Context(ctx, b)
			_ = client.Close()
		}
		if ctx.Err() != nil {
			return
		}
		b.log.Error("SPIRE Workload API watch ended; retrying in 30s", logkey.Socket, b.addr, logkey.Err, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(30 * time.Second):
		}
	}
}

// OnX509ContextUpdate implements workloadapi.X509ContextWatcher.
func (b *spireSocketBundle) OnX509ContextUpdate(c *workloadapi.X509Context) {
	b.failed.Store(false)
	bundle, err := c.Bundles.GetX509BundleForTrustDomain(b.td)
	if err != nil || bundle.Empty() {
		b.log.Warn("the SPIRE agent sent no bundle for the trust domain; check --spire-trust-domain", logkey.Socket, b.addr)
		return
	}
	bundle = bundle.Clone()
	if prev := b.cur.Swap(bundle); prev == nil || !prev.Equal(bundle) {
		b.log.Info("SPIRE trust bundle updated from the Workload API", logkey.Socket, b.addr, logkey.Authorities, len(bundle.X509Authorities()))
	}
}

// OnX509ContextWatchError implements workloadapi.X509ContextWatcher.
func (b *spireSocketBundle) OnX509ContextWatchError(err error) {
	if status.Code(err) == codes.Canceled || b.failed.Swap(true) {
		return
	}
	msg := "cannot reach the SPIRE agent's Workload API; SVIDs are refused until it answers"
	if b.cur.Load() != nil {
		msg = "lost the SPIRE agent's Workload API; keeping the last bundle while reconnecting"
	}
	b.log.Warn(msg, logkey.Socket, b.addr, logkey.Err, err)
}

// svidPrincipal authenticates a client chain as a SPIRE X.509-SVID: a leaf
// with a SPIFFE ID of the SPIRE trust domain that verifies, with the
// intermediates the client sent, against the SPIRE bundle at the journal's
// clock, and whose SPIFFE ID maps to a node in the registry that is not
// Revoked, with a serial that is not revoked. It returns errNotSVID
// (wrapped) when the chain is no SVID of the trust domain at all, and
// errSVIDUntrusted when the bundle does not verify it.
func (j *Journal) svidPrincipal(ctx context.Context, chain []*x509.Certificate) (*principal, error) {
	st := j.spire
	leaf := chain[0]
	sid, err := x509svid.IDFromCert(leaf)
	if err != nil {
		return nil, errNotSVID
	}
	if !sid.MemberOf(st.td) {
		return nil, fmt.Errorf("%w: SPIFFE ID %s is of trust domain %s; this journal accepts SVIDs of %s only (--spire-trust-domain)",
			errForeignTrustDomain, sid, sid.TrustDomain().Name(), st.td.Name())
	}
	bundle := st.src.current()
	if bundle == nil {
		return nil, fmt.Errorf("%w: %w: %w for %s is loaded yet (is this journal's SPIRE agent up?)", ErrUnauthenticated, errSVIDUntrusted, errNoSPIREBundle, st.td.Name())
	}
	now := j.cfg.Clock.Now()
	if _, _, err := x509svid.Verify(chain, bundle, x509svid.WithTime(now)); err != nil {
		var inv x509.CertificateInvalidError
		switch {
		case now.After(leaf.NotAfter):
			return nil, fmt.Errorf("%w: SVID %s (%s) expired at %s", ErrUnauthenticated, pki.SerialHex(leaf.SerialNumber), sid, leaf.NotAfter.UTC().Format(time.RFC3339))
		case now.Before(leaf.NotBefore):
			return nil, fmt.Errorf("%w: %w: SVID %s (%s) not valid before %s, the journal's clock reads %s (check the clocks)", ErrUnauthenticated, errNotYetValid, pki.SerialHex(leaf.SerialNumber), sid, leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		case errors.As(err, &inv) && inv.Reason == x509.Expired:
			return nil, fmt.Errorf("%w: %w: SVID %s chains through an expired SPIRE intermediate", ErrUnauthenticated, errSVIDUntrusted, sid)
		default:
			return nil, fmt.Errorf("%w: %w: SVID %s is not signed by the SPIRE trust bundle of %s", ErrUnauthenticated, errSVIDUntrusted, sid, st.td.Name())
		}
	}
	n, ok := j.fsm.NodeBySPIFFEID(sid.String())
	if !ok && !j.IsLeader() {
		// This journal's copy may lag a registration that just committed.
		if err := j.raft.ReadBarrier(ctx); err == nil {
			n, ok = j.fsm.NodeBySPIFFEID(sid.String())
		}
	}
	if !ok {
		// A valid SVID, but no node of this domain: authenticated by SPIRE,
		// not authorised here (PERMISSION_DENIED, as an agent certificate
		// whose node is not in the registry).
		return nil, fmt.Errorf("%w: %w: SPIFFE ID %s maps to no node in the registry: register the node (pact node enroll NODE ...), its default SPIFFE ID is spiffe://%s/pact-agent/NODE, or pass --spiffe-id", ErrPermission, errSPIFFEUnmapped, sid, st.td.Name())
	}
	p := &principal{
		id:       pki.Identity{Kind: pki.KindAgent, Name: n.GetNodeId(), Domain: j.ca.Domain()},
		serial:   pki.SerialHex(leaf.SerialNumber),
		spki:     pki.SPKIFingerprint(leaf),
		leaf:     leaf,
		svid:     true,
		spiffeID: sid.String(),
	}
	if err := j.checkSVIDBinding(p); err != nil {
		return nil, err
	}
	return p, nil
}

// checkSVIDBinding is checkBinding for an SVID: the node is not Revoked, the
// SVID's serial is not revoked, and its SPIFFE ID still maps to the node.
//
// It does not require the serial to be the one in the registry, as a
// journal-signed certificate must: SPIRE rotates SVIDs on the agent (at half
// their life, an hour or less) without telling the journal, and the agent
// uses a new SVID at once, for new calls and new streams. Binding to the
// serial would refuse every rotated SVID until a Raft write recorded it,
// and cost a write per rotation per call. The SVID is trusted because the
// SPIRE bundle verifies it and SPIRE issued it for this SPIFFE ID; the
// registry decides which node that ID is and whether the node may still
// take part. A decommission makes the node Revoked, which refuses every SVID
// of the ID, whatever its serial; the serial recorded at the last stream
// open goes into the revocation set as for any certificate.
func (j *Journal) checkSVIDBinding(p *principal) error {
	n, ok := j.fsm.Node(p.id.Name)
	if !ok {
		return fmt.Errorf("%w: node %s is not in the registry", ErrPermission, p.id.Name)
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		return fmt.Errorf("%w: node %s was decommissioned", errNodeRevoked, p.id.Name)
	}
	if n.GetFence() != nil {
		return fencedError(p.id.Name)
	}
	if j.fsm.IsRevoked(p.serial) {
		return fmt.Errorf("%w: SVID %s of node %s was revoked when the node was decommissioned; SPIRE must issue a new one", errNodeRevoked, p.serial, p.id.Name)
	}
	if m, ok := j.fsm.NodeBySPIFFEID(p.spiffeID); !ok || m.GetNodeId() != p.id.Name {
		return fmt.Errorf("%w: SPIFFE ID %s no longer maps to node %s", errStale, p.spiffeID, p.id.Name)
	}
	return nil
}

// recordSVID makes the registry follow an SVID that opens a stream: a
// Registered or Inactive node becomes Active with the SVID as its
// certificate, and an Active node whose recorded serial differs (SPIRE
// rotated it) gets the new one. One Raft write per stream open at most, and
// none when the registry already holds this SVID.
func (j *Journal) recordSVID(ctx context.Context, p *principal) error {
	n, ok := j.fsm.Node(p.id.Name)
	if !ok {
		return fmt.Errorf("%w: node %s is not in the registry", ErrPermission, p.id.Name)
	}
	notAfter := p.leaf.NotAfter.Unix()
	switch st := n.GetState(); {
	case st == pactv1.NodeState_NODE_STATE_REGISTERED, st == pactv1.NodeState_NODE_STATE_INACTIVE:
	case st == pactv1.NodeState_NODE_STATE_ACTIVE && n.GetCert().GetSerial() != p.serial &&
		!(n.GetCert().GetIssuerSerial() == raftfsm.SPIREIssuer && notAfter < n.GetCert().GetNotAfterUnix()):
	default:
		return nil
	}
	res, err := j.propose(ctx, &pactv1.Command{
		Actor: "agent/" + p.id.Name,
		Op: &pactv1.Command_SvidSeen{SvidSeen: &pactv1.SVIDSeenOp{
			NodeId:       p.id.Name,
			SpiffeId:     p.spiffeID,
			Serial:       p.serial,
			NotAfterUnix: notAfter,
		}},
	})
	if err != nil {
		return err
	}
	if !res.Idempotent {
		j.log.Info("node identified by SPIRE SVID", logkey.NodeID, p.id.Name, logkey.SPIFFEID, p.spiffeID, logkey.Serial, p.serial,
			logkey.NotAfter, p.leaf.NotAfter.UTC().Format(time.RFC3339), logkey.Was, raftfsm.StateName(n.GetState()))
	}
	return nil
}

// reload re-reads the bundle file now, whatever its modification time (a
// SIGHUP from the service manager after the operator replaced it).
func (b *spireFileBundle) reload() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.load()
}

// Reload re-reads what the journal can take without a restart: today the
// SPIRE trust bundle file (--spire-bundle). Every other setting needs a
// restart. A bundle that does not parse leaves the previous one in force
// and is returned as an error.
func (j *Journal) Reload() error {
	if j.spire == nil {
		j.log.Info("reload: nothing to re-read (no --spire-bundle); other settings need a restart")
		return nil
	}
	fb, ok := j.spire.src.(*spireFileBundle)
	if !ok {
		j.log.Info("reload: the SPIRE bundle follows the Workload API; nothing to re-read")
		return nil
	}
	if err := fb.reload(); err != nil {
		return fmt.Errorf("journal: --spire-bundle: %w", err)
	}
	return nil
}
