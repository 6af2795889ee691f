// Package journal is the pact journal server: the gRPC services, their
// authentication and authorisation, and the local CA, over the Raft node
// of package raftnode (docs/architecture.md, "Inside the journal").
package journal

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/pact-hpc/pact/internal/backoff"
	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/connlimit"
	"github.com/pact-hpc/pact/journal/raftnode"
	"github.com/pact-hpc/pact/journal/ratelimit"
	"github.com/pact-hpc/pact/journal/tpmchallenge"
	"github.com/pact-hpc/pact/journal/v1rpc"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Journal is one running journal node.
type Journal struct {
	cfg Config
	log *slog.Logger
	ca  *ca.CA
	// caKey is the journal CA's key (a TPM or token session, or a file);
	// nil in the legacy layout. Closed when the journal stops.
	caKey  io.Closer
	fsm    *raftfsm.FSM
	raft   *raftnode.Node
	hub    *hub
	bundle *bundleCache
	gate   *gate
	// attestJitter spreads the attestation requests between renewals
	// (attest.go); nil: random.
	attestJitter backoff.Jitter
	audit        *auditExporter
	roots        *x509.CertPool
	metrics      *metrics
	limiter      *ratelimit.Limiter
	// tpm holds pending TPM challenges (memory only: their secrets never
	// reach Raft or disk).
	tpm *tpmchallenge.Store
	// boot holds the last verified TPM quote of each node (memory only).
	boot *bootEvidence
	// attest holds the boot attestation requests outstanding on the
	// streams here and the verdicts between renewals (attest.go);
	// attestStreams the streams whose agents answer them.
	attest        *attestations
	attestStreams sync.Map // *streamAttest → struct{}
	// admission orders Enroll calls waiting for the global failure budget.
	admission *admission
	// conns and raftConns bound the connections of the gRPC and the Raft
	// port before any is authenticated.
	conns, raftConns *connlimit.Limiter
	// streams counts the open streams of each certificate.
	streams *streamLimits
	// raftRefusals samples the log lines for refused Raft connections.
	raftRefusals *sampledLog
	// auth authenticates and authorises the callers (journal/auth);
	// peerAuth the other journals of the quorum, for auth's peer service
	// check and the Raft node.
	auth     *auth.Authenticator
	peerAuth *auth.PeerVerifier
	// credentials are the enrollment credentials checked beside the
	// hardware match, each when the node's policy requires it
	// (credentials.go).
	credentials []enrollCredential

	lis    net.Listener
	server *grpc.Server
	// enrollment is the Enroll handler (journal/v1rpc) the server runs.
	enrollment *v1rpc.Enrollment

	metricsAddr string
	// bundleEndpointAddr is where the SPIFFE bundle endpoint listens.
	bundleEndpointAddr string
	// federation refreshes the federated domains' bundles (federation.go).
	federation *fedRefresher
	// claims remembers which nodes changed, for the claim feed; heldClaims
	// are the federated domains' claims (claims.go).
	claims     claimLog
	heldClaims *claimHolder

	grpcAddr string // as other journals reach it

	// rotateNow asks rotateLoop to re-key at once (this journal's
	// intermediate was retired).
	rotateNow chan struct{}
	// rekeyed is closed (and replaced) each time rotateLoop has re-keyed;
	// awaitLiveIntermediate waits on it.
	rekeyMu sync.Mutex
	rekeyed chan struct{}
	// caFileRefused says why the certificate in --journal-ca-cert was
	// refused at the last re-key (the journal re-keyed under the journal
	// CA it had); nil when it was taken or is the one in use. pact journal
	// status and pact_journal_ca_file_refused show it.
	caFileRefused atomic.Pointer[string]
	// Test hooks (export_test.go): beforeRekey runs in rotateLoop before it
	// re-keys and may block it; awaitingRekey runs when a signature waits
	// for the re-key.
	beforeRekey, awaitingRekey func()

	// unknownOp says whether this journal, as leader, must refuse a
	// forwarded command it cannot apply (raftfsm.HasUnknownOp; a test
	// makes it stand for a leader of the previous release). Read only in
	// a testhooks build (refusesUnknown).
	unknownOp atomic.Pointer[func(*pactv1.Command) bool]
	// raftHooks are the Raft node's test hooks (export_test.go).
	raftHooks *raftnode.Hooks

	stopOnce sync.Once
	stop     chan struct{}
	wg       sync.WaitGroup
}

// NewContext opens the data directory, loads the domain roots and its
// journal CA (the root key in the legacy layout), makes a fresh
// intermediate, starts Raft and replays the registry. It opens no
// listener: Start does that once the registry is loaded. ctx stops it while
// an empty journal of a new quorum waits for its --initial-cluster peers to
// answer before it bootstraps.
func NewContext(ctx context.Context, cfg Config) (_ *Journal, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.ServerNames = append([]string(nil), cfg.ServerNames...)
	log := cfg.Logger.With(logkey.JournalID, cfg.NodeID)
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("journal: data dir: %w", err)
	}
	if err := raftnode.CheckRemovedMarker(cfg.DataDir); err != nil {
		return nil, err
	}
	dnsNames, ips := ServerNames(cfg.ListenAddr, cfg.ServerNames)
	if cfg.Dev {
		if err := devSetUp(cfg, log, dnsNames, ips); err != nil {
			return nil, err
		}
	}
	authority, caKey, err := openAuthority(cfg, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && caKey != nil {
			_ = caKey.Close()
		}
	}()
	warnJournalCAExpiry(log, authority, cfg.Clock.Now())
	limiter, err := ratelimit.New(cfg.RateLimit)
	if err != nil {
		return nil, err
	}
	challenges, err := tpmchallenge.New(cfg.TPMChallenges)
	if err != nil {
		return nil, err
	}
	conns, err := connlimit.New(cfg.Connections)
	if err != nil {
		return nil, err
	}
	// Nothing reports the Raft port's calls: a peer journal admitted
	// there is never evicted.
	raftLimits := cfg.Connections
	raftLimits.ProveWithin = 0
	raftConns, err := connlimit.New(raftLimits)
	if err != nil {
		return nil, err
	}
	j := &Journal{
		caKey:   caKey,
		limiter: limiter,
		tpm:     challenges,
		boot:    newBootEvidence(maxBootEvidence),
		attest:  newAttestations(),
		cfg:     cfg,
		log:     log.With(logkey.Domain, authority.Domain()),
		ca:      authority,
		fsm:     raftfsm.New(),
		hub:     newHub(),
		gate:    newGate(cfg.MaxConcurrentEnrollments, cfg.EnrollQueueWait, cfg.Clock),
		stop:    make(chan struct{}),

		rotateNow: make(chan struct{}, 1),
		rekeyed:   make(chan struct{}),
		raftHooks: &raftnode.Hooks{},
	}
	j.credentials = j.defaultCredentials()
	j.conns, j.raftConns = conns, raftConns
	j.streams = newStreamLimits(cfg.MaxStreamsPerCert)
	j.raftRefusals = newSampledLog(cfg.Clock, 10*time.Second)
	j.admission = newAdmission(limiter, cfg.MaxEnrollWaiters, cfg.EnrollQueueWait, cfg.Clock)
	j.bundle = newBundleCache(authority.Roots(), j.fsm, cfg.Clock)
	j.roots = rootPool(authority.Roots())
	j.federation = newFederation(j)
	j.heldClaims = newClaimHolder()
	j.metrics = newMetrics(j)
	if j.peerAuth, err = newPeerVerifier(j); err != nil {
		return nil, err
	}
	if j.auth, err = newAuthenticator(j); err != nil {
		return nil, err
	}
	unknown := raftfsm.HasUnknownOp
	j.unknownOp.Store(&unknown)
	if err := j.startRaft(ctx); err != nil {
		return nil, err
	}
	j.metrics.reg.MustRegister(j.raft.Collectors()...)
	return j, nil
}

// startRaft starts the Raft node (raftnode) on this journal's FSM, its
// credentials and its limits.
func (j *Journal) startRaft(ctx context.Context) error {
	rc := raftnode.DefaultConfig()
	rc.Settings = j.cfg.Settings
	rc.HandshakeTimeout = j.cfg.Connections.HandshakeTimeout
	rc.FSM = j.fsm
	rc.Credentials = j.ca
	rc.PeerAuth = j.peerAuth
	rc.Conns = j.raftConns
	rc.Metrics = raftMetrics{j}
	rc.AllowRefusalLog = j.raftRefusals.allow
	rc.DescribeSelf = j.describeSelf
	rc.OnApply = j.onApply
	rc.OnCutOff = j.onCutOff
	rc.BeforeStart = func(lastIndex uint64) error {
		if j.cfg.AuditLog == "" {
			return nil
		}
		// Entries up to the log's end were exported by the previous run.
		var err error
		j.audit, err = newAuditExporter(j.cfg.AuditLog, lastIndex, j.log)
		return err
	}
	rc.Hooks = j.raftHooks
	rc.Logger = j.log
	rc.Clock = j.cfg.Clock
	rc.WatchdogClock = j.cfg.watchdogClock
	node, err := raftnode.New(ctx, rc)
	if err != nil {
		return err
	}
	j.raft = node
	return nil
}

// Start waits for the registry to be loaded, publishes this journal's
// intermediate, and only then opens the gRPC listener.
//
// The gRPC port is bound first (so its address is known and can be
// published), but nothing is served on it until the registry is loaded.
func (j *Journal) Start(ctx context.Context) error {
	lis, err := net.Listen("tcp", j.cfg.ListenAddr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("journal: listen on %s: the address is in use (another pact-journal?); stop it or pass another --listen: %w", j.cfg.ListenAddr, err)
		}
		return fmt.Errorf("journal: listen on %s: %w", j.cfg.ListenAddr, err)
	}
	j.lis = lis
	j.grpcAddr = j.cfg.AdvertiseGRPC
	if j.grpcAddr == "" {
		j.grpcAddr = lis.Addr().String()
	}
	announce := func() {
		j.log.Info("waiting to be added to a quorum; on a journal of the quorum run: pact journal add " + j.cfg.NodeID + " " + j.raft.RaftAddr())
	}
	if err := j.raft.WaitReady(ctx, announce); err != nil {
		lis.Close()
		return err
	}
	if err := j.publishIntermediate(ctx); err != nil {
		lis.Close()
		return err
	}
	j.recordBootstrapOperator(ctx)
	if j.server, err = j.newGRPCServer(); err != nil {
		lis.Close()
		return err
	}
	if j.cfg.MetricsListen != "" {
		mlis, err := j.serveMetrics()
		if err != nil {
			lis.Close()
			return fmt.Errorf("journal: metrics listener on %s: %w", j.cfg.MetricsListen, err)
		}
		j.metricsAddr = mlis.Addr().String()
	}
	if j.cfg.BundleEndpointListen != "" {
		blis, err := j.serveBundleEndpoint()
		if err != nil {
			lis.Close()
			return fmt.Errorf("journal: bundle endpoint on %s: %w", j.cfg.BundleEndpointListen, err)
		}
		j.bundleEndpointAddr = blis.Addr().String()
	}
	j.raft.StartPromoting()
	j.wg.Add(3)
	go func() {
		defer j.wg.Done()
		j.livenessLoop()
	}()

	go func() {
		defer j.wg.Done()
		if err := j.server.Serve(j.conns.Listener(lis)); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			j.log.Error("gRPC server stopped", logkey.Err, err)
		}
	}()
	go func() {
		defer j.wg.Done()
		j.rotateLoop()
	}()
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		j.federation.loop(j.cfg.DigestInterval)
	}()
	if run := j.auth.Background(); run != nil {
		j.wg.Add(1)
		go func() {
			defer j.wg.Done()
			run(j.stop)
		}()
	}
	inter := j.ca.Intermediate()
	j.log.Info("journal serving", logkey.Addr, lis.Addr().String(),
		logkey.Nodes, len(j.fsm.Nodes(raftfsm.Filter{})),
		logkey.IssuerSerial, pki.SerialHex(inter.SerialNumber), logkey.NotAfter, inter.NotAfter.UTC().Format(time.RFC3339),
		logkey.RootSHA256, pki.CertFingerprint(j.ca.Root()))
	return nil
}

// publishIntermediate puts this journal's intermediate certificate and its
// addresses into Raft, retrying while a leader is being found.
//
// The journal CA that signed it goes with it (Raft records it at its first
// use); the intermediate names it by serial ("" when the root signed it:
// the legacy layout).
func (j *Journal) publishIntermediate(ctx context.Context) error {
	inter, journalCA := j.ca.Current()
	issuer := ""
	if journalCA != nil {
		issuer = pki.SerialHex(journalCA.SerialNumber)
	}
	cmd := &pactv1.Command{
		Actor: "journal/" + j.cfg.NodeID,
		Op: &pactv1.Command_PublishIntermediate{PublishIntermediate: &pactv1.PublishIntermediateOp{
			Intermediate: &pactv1.Intermediate{
				JournalId:    j.cfg.NodeID,
				Serial:       pki.SerialHex(inter.SerialNumber),
				Der:          inter.Raw,
				NotAfterUnix: inter.NotAfter.Unix(),
				IssuerSerial: issuer,
			},
			Journal:   &pactv1.JournalInfo{JournalId: j.cfg.NodeID, RaftAddr: j.raft.RaftAddr(), GrpcAddr: j.grpcAddr, IntermediateSerial: pki.SerialHex(inter.SerialNumber)},
			JournalCa: v1rpc.JournalCARecord(j.cfg.NodeID, journalCA),
		}},
	}
	for {
		_, err := j.propose(ctx, cmd)
		if err == nil {
			return nil
		}
		// Publishing again is harmless: an unknown outcome (committed,
		// perhaps, but not yet applied here) is retried like no leader.
		if !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrOutcomeUnknown) {
			return fmt.Errorf("journal: publish intermediate: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("journal: publish intermediate: %w (last: %w)", ctx.Err(), err)
		case <-j.stop:
			return fmt.Errorf("journal: publish intermediate: %w (last: %w)", ErrNoLeader, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// recordBootstrapOperator records the operator credential in the data
// directory (the one --dev or pact-journal init made) so pact admin list
// shows it from the start; it is dated by its NotBefore, so a revoked
// bootstrap credential is never revived by a restart. Failure only delays
// the record to the credential's first use.
func (j *Journal) recordBootstrapOperator(ctx context.Context) {
	data, err := os.ReadFile(filepath.Join(j.cfg.DataDir, ca.AdminCertFile))
	if err != nil {
		return
	}
	certs, err := pki.ParseCertsPEM(data)
	if err != nil {
		return
	}
	cert := certs[0]
	id, err := pki.IdentityOf(cert)
	if err != nil || id.Kind != pki.KindAdmin || id.Domain != j.ca.Domain() || !pki.SignedByARoot(cert, j.ca.Roots()) || len(cert.Subject.OrganizationalUnit) != 1 {
		return
	}
	if st, _ := j.fsm.CheckOperator(id.Name, pki.SerialHex(cert.SerialNumber), cert.NotBefore.Unix()); st != raftfsm.OperatorUnrecorded {
		return
	}
	by := "journal/" + j.cfg.NodeID
	if _, err := j.propose(ctx, &pactv1.Command{Actor: by, Op: &pactv1.Command_RecordOperator{RecordOperator: &pactv1.RecordOperatorOp{
		Operator: rootSignedRecord(auth.OperatorRecord(cert, id.Name, cert.Subject.OrganizationalUnit[0], by)),
	}}}); err != nil {
		j.log.Warn("could not record the bootstrap operator credential", logkey.AdminCert, filepath.Join(j.cfg.DataDir, ca.AdminCertFile), logkey.Err, err)
	}
}

// rotateLoop re-keys the intermediate at half its life.
func (j *Journal) rotateLoop() {
	// retryIn, when set, re-keys that soon instead of at half life: the
	// registry refused the last intermediate because this journal's
	// journal CA is revoked, and a re-key reads --journal-ca-cert again.
	var retryIn time.Duration
	for {
		inter := j.ca.Intermediate()
		half := inter.NotBefore.Add(inter.NotAfter.Sub(inter.NotBefore) / 2)
		wait := half.Sub(j.cfg.Clock.Now())
		if retryIn > 0 {
			wait, retryIn = retryIn, 0
		}
		t := j.cfg.Clock.NewTimer(wait)
		select {
		case <-j.stop:
			t.Stop()
			return
		case <-t.C():
		case <-j.rotateNow:
			t.Stop()
			j.log.Warn("this journal's intermediate was retired by an operator; re-keying now")
		}
		j.rekeyMu.Lock()
		hold := j.beforeRekey
		j.rekeyMu.Unlock()
		if hold != nil {
			hold()
		}
		before, caBefore := j.ca.Intermediate(), j.ca.JournalCASerial()
		err := j.ca.Rotate()
		if jc := j.ca.JournalCA(); jc != nil && j.ca.JournalCASerial() != caBefore {
			j.log.Info("journal CA renewed: the intermediates from now on are signed under the new one", logkey.Serial, j.ca.JournalCASerial(),
				logkey.NotAfter, jc.NotAfter.UTC().Format(time.RFC3339), logkey.File, j.cfg.journalCACertFile())
		}
		j.noteJournalCAFile(err)
		if errors.Is(err, ca.ErrJournalCAKept) && j.ca.Intermediate() != before {
			// Re-keyed under the journal CA in use: the file holds one
			// this journal cannot take (or cannot be read). Said at each
			// re-key until fixed, and shown by pact journal status and
			// pact_journal_ca_file_refused meanwhile.
			j.log.Error("the journal CA certificate file holds a certificate this journal cannot take; re-keyed under the journal CA in use", logkey.File, j.cfg.journalCACertFile(), logkey.Err, err)
			err = nil
		}
		if err != nil {
			j.log.Error("intermediate rotation failed; retrying in a minute", logkey.Err, err)
			retry := j.cfg.Clock.NewTimer(time.Minute)
			select {
			case <-j.stop:
				retry.Stop()
				return
			case <-retry.C():
			}
			continue
		}
		// The peer channels present the new intermediate's certificate
		// from now on: the publish goes over them, and an old
		// intermediate an operator retired at once (retire-intermediate
		// --now) would be refused. Until the publish commits, the leader
		// takes nothing else from them (journal/authwire.go).
		j.raft.CredentialsChanged()
		// Published before anyone waiting for the re-key signs with it: a
		// certificate from an intermediate not in the bundle could not be
		// answered with its chain. Retried until it is (or the journal stops).
		published := false
		for {
			ctx, cancel := context.WithTimeout(context.Background(), j.cfg.ApplyTimeout)
			err := j.publishIntermediate(ctx)
			cancel()
			if err == nil {
				published = true
				break
			}
			if errors.Is(err, raftfsm.ErrJournalCARevoked) || errors.Is(err, raftfsm.ErrJournalCANotBound) {
				// Publishing again cannot help: only a new journal CA
				// (revoked), or an operator's record of it (a new key),
				// can. Both are looked for again in a few seconds.
				j.log.Error("the quorum refuses this journal's journal CA: it signs nothing until that changes. If it was revoked, put the ceremony's new certificate in place of --journal-ca-cert; if that certificate has a new key, a platform-admin records it: pact journal record-ca "+j.cfg.NodeID+" FILE (docs/ceremony.md). Read again every few seconds",
					logkey.File, j.cfg.journalCACertFile(), logkey.Err, err)
				retryIn = journalCARetry
				break
			}
			if cut := j.raft.CutOff(); cut != "" {
				// The quorum refuses this journal (its journal CA
				// revoked before it learnt so, say): re-read
				// --journal-ca-cert and re-key in a few seconds, so a
				// journal CA an operator records meanwhile is taken.
				j.log.Error("the quorum refuses this journal as a peer; its journal CA is read again in a few seconds", logkey.Reason, cut, logkey.File, j.cfg.journalCACertFile(), logkey.Err, err)
				retryIn = journalCARetry
				break
			}
			j.log.Error("publishing the new intermediate failed; retrying", logkey.Err, err)
			select {
			case <-j.stop:
				return
			case <-time.After(time.Second):
			}
		}
		if !published {
			continue
		}
		// New peer channels present the new intermediate's certificate.
		j.raft.CredentialsChanged()
		j.rekeyMu.Lock()
		close(j.rekeyed)
		j.rekeyed = make(chan struct{})
		j.rekeyMu.Unlock()
		j.log.Info("intermediate rotated", logkey.IssuerSerial, j.ca.IntermediateSerial())
		warnJournalCAExpiry(j.log, j.ca, j.cfg.Clock.Now())
	}
}

// journalCARetry is how soon a journal whose journal CA the quorum
// refuses re-reads --journal-ca-cert and tries again: a new certificate in
// place, or an operator's record of one, takes effect within it, with no
// restart.
const journalCARetry = 5 * time.Second

// ownIntermediate reports whether the intermediate this journal signs
// with is published in the registry, and whether the registry marks it
// retiring (or revoked). Between a re-key and its publication a signature
// would carry a chain no bundle holds yet.
func (j *Journal) ownIntermediate() (published, retiring bool) {
	in, ok := j.fsm.Intermediate(j.ca.IntermediateSerial())
	return ok, ok && in.GetRevokeAtUnixNano() != 0
}

// awaitLiveIntermediate returns once this journal's intermediate is
// published and not one the registry marks retiring. Between an operator's retirement
// committing and rotateLoop re-keying, a signature would put the node on
// the retiring intermediate: its stream would tell it to renew again, and
// the agent's MinRenewInterval would hold it there.
func (j *Journal) awaitLiveIntermediate(ctx context.Context) error {
	for {
		// Taken before the check, so a re-key between the check and the
		// wait is not missed.
		j.rekeyMu.Lock()
		rekeyed, told := j.rekeyed, j.awaitingRekey
		j.rekeyMu.Unlock()
		published, retiring := j.ownIntermediate()
		if published && !retiring {
			return nil
		}
		if retiring {
			// Retired: re-key now. Not published yet: a re-key is under
			// way, and rotateLoop signals once it is published.
			wake(j.rotateNow)
		}
		if told != nil {
			told()
		}
		select {
		case <-rekeyed:
		case <-ctx.Done():
			return fmt.Errorf("journal: this journal's intermediate is being re-keyed: %w", ctx.Err())
		case <-j.stop:
			return fmt.Errorf("%w: journal shutting down", ErrNoLeader)
		}
	}
}

// Addr is the address the gRPC server listens on (after Start).
func (j *Journal) Addr() string { return j.lis.Addr().String() }

// LastSnapshotIndex is the index of this journal's newest Raft snapshot.
func (j *Journal) LastSnapshotIndex() uint64 { return j.raft.LastSnapshotIndex() }

// CommitIndex is the highest log index this journal knows is committed.
func (j *Journal) CommitIndex() uint64 { return j.raft.CommitIndex() }

// IsLeader reports whether this journal leads the quorum.
func (j *Journal) IsLeader() bool { return j.raft.IsLeader() }

// QuorumFeatureLevel is the quorum feature level this journal's registry
// records (docs/upgrade.md).
func (j *Journal) QuorumFeatureLevel() uint32 { return j.raft.QuorumLevel() }

// KnownLeader is the id of the journal this one currently takes for the
// leader ("" while it knows none).
func (j *Journal) KnownLeader() string { return j.raft.Leader() }

// MetricsAddr is where /metrics is served ("" if disabled).
func (j *Journal) MetricsAddr() string { return j.metricsAddr }

// Domain is the domain id.
func (j *Journal) Domain() string { return j.ca.Domain() }

// Close stops the server and Raft. Open streams are cancelled.
func (j *Journal) Close() error {
	var errs []error
	j.stopOnce.Do(func() {
		// The node first: a halted FSM blocks Raft's apply goroutine, and
		// with it every proposal still waiting, until released.
		j.raft.Stop()
		close(j.stop)
		if j.server != nil {
			done := make(chan struct{})
			go func() { j.server.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				j.server.Stop()
			}
		}
		j.wg.Wait()
		if err := j.raft.Close(); err != nil {
			errs = append(errs, err)
		}
		if j.audit != nil {
			j.audit.close()
		}
		if j.caKey != nil {
			if err := j.caKey.Close(); err != nil {
				errs = append(errs, fmt.Errorf("journal: close the journal CA key: %w", err))
			}
		}
	})
	return errors.Join(errs...)
}

func (j *Journal) newGRPCServer() (*grpc.Server, error) {
	nodes, err := v1rpc.NewNodeAdmin(j.rpcConfig())
	if err != nil {
		return nil, err
	}
	bootPolicies, err := v1rpc.NewBootPolicies(j.rpcConfig())
	if err != nil {
		return nil, err
	}
	if j.enrollment, err = v1rpc.NewEnrollment(j.enrollConfig()); err != nil {
		return nil, err
	}
	peers, err := v1rpc.NewPeers(j.peerConfig())
	if err != nil {
		return nil, err
	}
	quorum, err := v1rpc.NewQuorum(j.quorumConfig())
	if err != nil {
		return nil, err
	}
	icpt, err := v1rpc.NewInterceptors(v1rpc.InterceptorConfig{ToStatus: toStatus, Conns: j.conns, Streams: rpcStreamLimits{j}})
	if err != nil {
		return nil, err
	}
	tlsCfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return j.ca.ServerCertificate(), nil
		},
		// Enroll needs no client certificate. Client chains are verified
		// by the calls (authenticate; once per connection while the bundle
		// and the chain's validity hold, journal/auth), against the root
		// and the live trust bundle at the journal's clock, so an expired
		// or no longer trusted certificate gets a typed error rather than a
		// failed handshake.
		ClientAuth: tls.RequestClientCert,
		// A chain from another root fails the handshake, though: it has
		// no business on this port at all.
		VerifyConnection: j.auth.VerifyClientConnection,
		Time:             j.cfg.Clock.Now,
		// Agents and the CLI never resume a session: each boot and each
		// renewal is a new connection with a new key. A ticket per
		// connection would be sealed, sent and thrown away.
		SessionTicketsDisabled: true,
	}
	s := grpc.NewServer(append(transport.ServerOptions(),
		// A refused client chain gets its alert; the connection limits
		// apply first (journal/auth's handshake.go).
		grpc.Creds(auth.ServerCreds(credentials.NewTLS(j.cfg.KeyExchange.Apply(tlsCfg)), j.conns, func(err error) { j.countHandshakeRefused("grpc", err) })),
		// gRPC's default gives a connection 120 s to finish its TLS
		// handshake and HTTP/2 preface; a silent client would hold its
		// file descriptor that long.
		grpc.ConnectionTimeout(j.cfg.Connections.HandshakeTimeout),
		grpc.MaxRecvMsgSize(raftnode.MaxMessageBytes),
		grpc.ForceServerCodecV2(v1rpc.NewDecodeCodec()),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 60 * time.Second, Timeout: 20 * time.Second, MaxConnectionIdle: j.cfg.IdleTimeout}),
		grpc.ChainUnaryInterceptor(icpt.Unary, j.auth.UnaryInterceptor, icpt.VouchUnary),
		grpc.ChainStreamInterceptor(icpt.Stream, j.auth.StreamInterceptor, icpt.VouchStream, icpt.LimitStreams),
	)...)
	v1rpc.RegisterService(s, &pactv1.EnrollmentService_ServiceDesc, j.enrollment)
	v1rpc.RegisterService(s, &pactv1.AdminService_ServiceDesc, &adminServer{NodeAdmin: nodes, Quorum: quorum})
	v1rpc.RegisterService(s, &pactv1.BootPolicyService_ServiceDesc, bootPolicies)
	v1rpc.RegisterService(s, &pactv1.JournalPeerService_ServiceDesc, peers)
	return s, nil
}

func rootPool(roots []*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, r := range roots {
		p.AddCert(r)
	}
	return p
}

// openAuthority loads the domain roots and this journal's journal CA (the
// root key in the legacy layout) and makes a fresh intermediate: the
// journal's credentials. caKey, if not nil, is the journal CA's key, for
// the caller to close.
func openAuthority(cfg Config, log *slog.Logger) (*ca.CA, io.Closer, error) {
	dnsNames, ips := ServerNames(cfg.ListenAddr, cfg.ServerNames)
	roots, _, err := ca.LoadRoots(cfg.rootCertFile())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !cfg.Dev {
			return nil, nil, fmt.Errorf("%w: %s", err, productionRoot)
		}
		return nil, nil, err
	}
	caCfg := ca.DefaultConfig()
	caCfg.Roots = roots
	var caKey io.Closer
	if cfg.legacyLayout() {
		if caCfg.Issuer, err = ca.LoadRootIssuer(roots, cfg.rootKeyFile()); err != nil {
			if errors.Is(err, os.ErrNotExist) && !cfg.Dev && cfg.RootKeyFile == "" {
				return nil, nil, fmt.Errorf("%w: %s", err, productionRoot)
			}
			return nil, nil, err
		}
		log.Warn(legacyLayoutWarning, logkey.File, cfg.rootKeyFile())
	} else {
		spec, _ := cfg.journalCAKey()
		certFile := cfg.journalCACertFile()
		cert, key, err := ca.OpenJournalCA(certFile, spec, keystore.Options{TPMDevice: cfg.TPMDevice, TPMTimeout: cfg.TPMTimeout})
		if err != nil {
			return nil, nil, err
		}
		caKey = key
		var dropped []string
		dnsNames, ips, dropped = ServerNamesUnder(cert, cfg.ListenAddr, cfg.ServerNames)
		if len(dropped) > 0 {
			log.Info("names this journal CA does not permit are left out of the server certificate; clients must dial this journal by another name (docs/ceremony.md)", logkey.Names, dropped)
		}
		caCfg.Issuer = ca.Issuer{Certificate: cert, Signer: key}
		caCfg.ReloadIssuer = func() (*x509.Certificate, error) { return ca.ReadJournalCACert(certFile) }
	}
	caCfg.JournalID = cfg.NodeID
	caCfg.LeafLifetime = cfg.CertLifetime
	caCfg.IntermediateLifetime = 3 * cfg.CertLifetime
	caCfg.ServerDNSNames = dnsNames
	caCfg.ServerIPs = ips
	caCfg.ServerNames = func(journalCA *x509.Certificate) ([]string, []net.IP) {
		dnsNames, ips, _ := ServerNamesUnder(journalCA, cfg.ListenAddr, cfg.ServerNames)
		return dnsNames, ips
	}
	caCfg.Clock = cfg.Clock
	authority, err := ca.New(caCfg)
	if err != nil {
		if caKey != nil {
			_ = caKey.Close()
		}
		return nil, nil, err
	}
	return authority, caKey, nil
}

// ServerNames lists the names a client may dial a journal listening on
// listen by, with extra (--server-names): what its server certificate
// carries, and so what its journal CA must permit (pact ca sign-journal
// --names): localhost, the host name, the loopback addresses, and the
// listen address (every interface's for an unspecified one).
func ServerNames(listen string, extra []string) ([]string, []net.IP) {
	named := serverNames(listen, extra)
	return append(named.dns, named.autoDNS...), append(named.ips, named.autoIPs...)
}

// ServerNamesUnder is ServerNames for a journal whose journal CA is
// journalCA (nil in the legacy layout: every name). The names an operator
// gave (--server-names, a specific --listen address) are kept whatever
// the journal CA permits, so CheckJournalCA refuses a journal CA that
// does not permit them; the names every journal adds on its own
// (localhost, the host name, the loopback and interface addresses) are
// kept only where the journal CA permits them: a site need not sign them
// (pact ca sign-journal --names), and a journal CA that does not permit
// localhost makes a journal that answers to its real names only. dropped
// lists what was left out, for the log.
func ServerNamesUnder(journalCA *x509.Certificate, listen string, extra []string) (dnsNames []string, ips []net.IP, dropped []string) {
	named := serverNames(listen, extra)
	dnsNames, ips = named.dns, named.ips
	for _, n := range named.autoDNS {
		if journalCA == nil || caprofile.PermitsDNS(journalCA, n) {
			dnsNames = append(dnsNames, n)
		} else {
			dropped = append(dropped, n)
		}
	}
	for _, ip := range named.autoIPs {
		if journalCA == nil || caprofile.PermitsIP(journalCA, ip) {
			ips = append(ips, ip)
		} else {
			dropped = append(dropped, ip.String())
		}
	}
	return dnsNames, ips, dropped
}

// names are a journal's names: those an operator gave, and those every
// journal adds.
type names struct {
	dns, autoDNS []string
	ips, autoIPs []net.IP
}

func serverNames(listen string, extra []string) names {
	var n names
	n.autoDNS = []string{"localhost"}
	if h, err := os.Hostname(); err == nil && h != "" {
		n.autoDNS = append(n.autoDNS, h)
	}
	n.dns = append(n.dns, extra...)
	n.autoIPs = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	host, _, _ := net.SplitHostPort(listen)
	ip := net.ParseIP(host)
	switch {
	case ip != nil && ip.IsUnspecified():
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if a, ok := a.(*net.IPNet); ok && !a.IP.IsLoopback() {
					n.autoIPs = append(n.autoIPs, a.IP)
				}
			}
		}
	case ip != nil && !ip.IsLoopback():
		n.ips = append(n.ips, ip)
	case ip != nil && !ip.Equal(net.IPv4(127, 0, 0, 1)) && !ip.Equal(net.IPv6loopback):
		// Another loopback address (a journal per address on one host):
		// clients dial it, so it is in the certificate wherever the
		// journal CA permits it (Preflight warns where it does not).
		n.autoIPs = append(n.autoIPs, ip)
	case ip == nil && host != "" && host != "localhost":
		n.dns = append(n.dns, host)
	}
	return n
}

// NodeCount is how many nodes this journal's copy of the registry holds.
func (j *Journal) NodeCount() int { return len(j.fsm.Nodes(raftfsm.Filter{})) }

// HasNode reports whether this journal's copy of the registry holds node id.
func (j *Journal) HasNode(id string) bool {
	_, ok := j.fsm.Node(id)
	return ok
}

// OpenStreams is how many Subscribe streams this journal holds for a node.
func (j *Journal) OpenStreams(nodeID string) int { return j.hub.streamCount(nodeID) }

// Root is the (first) domain root certificate.
func (j *Journal) Root() *x509.Certificate { return j.ca.Root() }

// Roots are the domain root certificates (two during a root rollover).
func (j *Journal) Roots() []*x509.Certificate { return j.ca.Roots() }

// JournalCA is the journal CA that signed this journal's intermediate; nil
// in the legacy layout (the root signs it).
func (j *Journal) JournalCA() *x509.Certificate { return j.ca.JournalCA() }

// IntermediateCert is the intermediate this journal signs with.
func (j *Journal) IntermediateCert() *x509.Certificate { return j.ca.Intermediate() }

// Intermediate is the serial of the intermediate this journal signs with.
func (j *Journal) Intermediate() string { return j.ca.IntermediateSerial() }

// StreamDrops is how many times this journal went from holding at least one
// stream of the node to holding none. A dual-channel swap opens the new
// stream before it ends the old one, so it adds nothing: the figure that
// shows a node never went dark.
func (j *Journal) StreamDrops(nodeID string) int { return j.hub.dropCount(nodeID) }

// Reload re-reads what the journal can take without a restart: today the
// SPIRE trust bundle file (--spire-bundle). Every other setting needs a
// restart. A bundle that does not parse leaves the previous one in force
// and is returned as an error.
func (j *Journal) Reload() error { return j.auth.Reload() }

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

// rootSignedRecord marks an operator record as that of a credential a
// domain root signed itself.
func rootSignedRecord(o *pactv1.Operator) *pactv1.Operator {
	o.RootSigned = true
	return o
}
