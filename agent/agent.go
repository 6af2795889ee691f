// Package agent is the pact node agent: it reads the node's hardware
// identity, makes a key in RAM, enrolls with a journal, holds an mTLS
// Subscribe stream (its liveness), and renews its certificate at 2/3 of its
// life by building a new channel before it lets go of the old one.
//
// This package must never import raft, bbolt or the journal: a test keeps
// the agent binary free of them.
package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/agent/hwinfo"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// ErrRefused wraps a journal's final answer to this node (not enrolled,
// already active, revoked...): retrying would not change it.
var ErrRefused = errors.New("agent: refused by the journal")

// Agent is one node agent.
type Agent struct {
	cfg   Config
	log   *slog.Logger
	roots *x509.CertPool
	hw    hwid.Identity

	next int // index of the next journal to try
}

// New reads the hardware identity and the domain root.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.JournalAddrs = append([]string(nil), cfg.JournalAddrs...)
	roots, _, err := pki.LoadCertPool(cfg.CAFile)
	if err != nil {
		return nil, err
	}
	hw, report, err := hwinfo.Read(cfg.Hardware)
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("hardware identity", logkey.MACs, hw.MACs, logkey.BMCSerial, hw.BMCSerial, "report", report)
	return &Agent{cfg: cfg, log: cfg.Logger, roots: roots, hw: hw}, nil
}

// session is one mTLS channel to one journal with one credential.
type session struct {
	cred *credential
	addr string
	conn *grpc.ClientConn
}

func (s *session) close() {
	if s != nil && s.conn != nil {
		_ = s.conn.Close()
	}
}

// Run enrolls and then keeps the node's identity and stream until ctx ends.
// It returns nil on ctx's end and an error wrapping ErrRefused when the
// journal refuses this node for good.
func (a *Agent) Run(ctx context.Context) error {
	cred, addr, err := a.enroll(ctx)
	if err != nil {
		return err
	}
	a.log.Info("enrolled", "identity", cred, logkey.VCluster, vclusterLabel(cred.vcluster), logkey.Addr, addr)
	sess, st, err := a.connect(ctx, cred, addr)
	if err != nil {
		return err
	}
	defer func() { st.stop(); sess.close() }()
	for {
		renewIn := cred.renewAt(a.cfg.RenewAt).Sub(a.cfg.Clock.Now())
		renewIn += jitter(renewIn / 20)
		if renewIn < 0 {
			renewIn = 0
		}
		timer := a.cfg.Clock.NewTimer(renewIn)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case err := <-st.done:
			timer.Stop()
			if refusal(err) {
				return fmt.Errorf("%w: stream closed: %w", ErrRefused, err)
			}
			a.log.Warn("stream to journal lost; reconnecting", logkey.Err, err, logkey.Addr, sess.addr)
			sess.close()
			sess, st, err = a.connect(ctx, cred, a.pick())
			if err != nil {
				return err
			}
		case <-timer.C():
			next, nst, err := a.renew(ctx, sess)
			if err != nil {
				if refusal(err) {
					return fmt.Errorf("%w: renewal: %w", ErrRefused, err)
				}
				a.log.Warn("renewal failed; will retry", logkey.Err, err, "retry_in", a.cfg.MinRenewInterval)
				if !a.sleep(ctx, a.cfg.MinRenewInterval) {
					return nil
				}
				continue
			}
			// The new channel is up and streaming: let go of the old one.
			st.stop()
			sess.close()
			sess, st, cred = next, nst, next.cred
			a.log.Info("certificate renewed", "identity", cred)
		}
	}
}

// enroll calls Enroll until a journal gives this node a certificate or
// refuses it for good.
func (a *Agent) enroll(ctx context.Context) (*credential, string, error) {
	key, csr, err := newKey()
	if err != nil {
		return nil, "", err
	}
	req := &pactv1.EnrollRequest{
		Hardware: &pactv1.HardwareIdentity{Macs: a.hw.MACs, BmcSerial: a.hw.BMCSerial, TpmEkHash: a.hw.EKHash},
		CsrDer:   csr,
	}
	for attempt := 0; ; attempt++ {
		addr := a.pick()
		resp, err := a.callEnroll(ctx, addr, req)
		if err == nil {
			cred, err := newCredential(key, a.roots, resp.GetCertChainDer(), resp.GetTrustBundleDer(), resp.GetVcluster(), a.cfg.Clock.Now())
			return cred, addr, err
		}
		if refusal(err) {
			return nil, "", a.explainRefusal(err)
		}
		wait := a.backoff(attempt, err)
		a.log.Warn("enrollment failed; retrying", logkey.Addr, addr, logkey.Reason, classify(err), logkey.Err, err,
			logkey.Attempt, attempt+1, "retry_in", wait.Round(time.Millisecond))
		if !a.sleep(ctx, wait) {
			return nil, "", ctx.Err()
		}
	}
}

func (a *Agent) callEnroll(ctx context.Context, addr string, req *pactv1.EnrollRequest) (*pactv1.EnrollResponse, error) {
	conn, err := a.dial(addr, nil)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
	defer cancel()
	return pactv1.NewEnrollmentServiceClient(conn).Enroll(cctx, req)
}

// connect opens an mTLS channel with cred and a Subscribe stream on it,
// retrying (over the journals) until the stream delivers its first event.
func (a *Agent) connect(ctx context.Context, cred *credential, addr string) (*session, *stream, error) {
	for attempt := 0; ; attempt++ {
		sess, st, err := a.openSession(ctx, cred, addr)
		if err == nil {
			return sess, st, nil
		}
		if refusal(err) {
			return nil, nil, fmt.Errorf("%w: %w", ErrRefused, err)
		}
		wait := a.backoff(attempt, err)
		a.log.Warn("cannot open stream; retrying", logkey.Addr, addr, logkey.Reason, classify(err), logkey.Err, err, "retry_in", wait.Round(time.Millisecond))
		if !a.sleep(ctx, wait) {
			return nil, nil, ctx.Err()
		}
		addr = a.pick()
	}
}

func (a *Agent) openSession(ctx context.Context, cred *credential, addr string) (*session, *stream, error) {
	conn, err := a.dial(addr, cred)
	if err != nil {
		return nil, nil, err
	}
	sess := &session{cred: cred, addr: addr, conn: conn}
	st, err := a.subscribe(ctx, sess)
	if err != nil {
		sess.close()
		return nil, nil, err
	}
	return sess, st, nil
}

// renew gets a certificate for a fresh key over the current channel, then
// builds and health-checks a new channel with it (a stream that delivers its
// first event) before the caller swaps it in.
func (a *Agent) renew(ctx context.Context, cur *session) (*session, *stream, error) {
	key, csr, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
	resp, err := pactv1.NewEnrollmentServiceClient(cur.conn).RenewCert(cctx, &pactv1.RenewCertRequest{
		CurrentSerial: cur.cred.serial,
		CsrDer:        csr,
	})
	cancel()
	if err != nil {
		return nil, nil, err
	}
	cred, err := newCredential(key, a.roots, resp.GetCertChainDer(), resp.GetTrustBundleDer(), resp.GetVcluster(), a.cfg.Clock.Now())
	if err != nil {
		return nil, nil, err
	}
	// The renewal is committed: the old certificate no longer authenticates,
	// so from here on only the new one is worth retrying with.
	sess, st, err := a.connect(ctx, cred, cur.addr)
	if err != nil {
		return nil, nil, err
	}
	return sess, st, nil
}

// dial makes a channel to addr: server-TLS only when cred is nil (Enroll),
// mTLS otherwise. The server must chain to the domain root; verification is
// never turned off.
func (a *Agent) dial(addr string, cred *credential) (*grpc.ClientConn, error) {
	tlsCfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    a.roots,
		Time:       a.cfg.Clock.Now,
	}
	if cred != nil {
		cert := cred.tlsCert
		tlsCfg.Certificates = []tls.Certificate{cert}
	}
	return grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
}

// stream is a running Subscribe stream.
type stream struct {
	cancel context.CancelFunc
	done   chan error
}

func (s *stream) stop() {
	if s != nil {
		s.cancel()
	}
}

// subscribe opens the stream and waits for its first event, which proves
// the channel works end to end.
func (a *Agent) subscribe(ctx context.Context, sess *session) (*stream, error) {
	sctx, cancel := context.WithCancel(ctx)
	client, err := pactv1.NewEnrollmentServiceClient(sess.conn).Subscribe(sctx, &pactv1.SubscribeRequest{})
	if err != nil {
		cancel()
		return nil, err
	}
	first := make(chan error, 1)
	go func() {
		ev, err := client.Recv()
		if err == nil {
			err = a.handleEvent(sess, ev)
		}
		first <- err
	}()
	t := a.cfg.Clock.NewTimer(a.cfg.CallTimeout)
	defer t.Stop()
	select {
	case err := <-first:
		if err != nil {
			cancel()
			return nil, err
		}
	case <-t.C():
		cancel()
		return nil, fmt.Errorf("agent: no event on the stream from %s within %v", sess.addr, a.cfg.CallTimeout)
	}
	a.log.Info("stream open", logkey.Addr, sess.addr, logkey.NodeID, sess.cred.nodeID, logkey.Serial, sess.cred.serial)
	st := &stream{cancel: cancel, done: make(chan error, 1)}
	go func() {
		for {
			ev, err := client.Recv()
			if err == nil {
				err = a.handleEvent(sess, ev)
			}
			if err != nil {
				st.done <- err
				return
			}
		}
	}()
	return st, nil
}

func (a *Agent) handleEvent(sess *session, ev *pactv1.SubscribeResponse) error {
	switch e := ev.GetEvent().(type) {
	case *pactv1.SubscribeResponse_Assignment:
		a.log.Info("assignment", logkey.NodeID, e.Assignment.GetNodeId(), logkey.VCluster, vclusterLabel(e.Assignment.GetVcluster()))
	case *pactv1.SubscribeResponse_TrustBundle:
		a.log.Debug("trust bundle", "certificates", len(e.TrustBundle.GetDer()))
	case *pactv1.SubscribeResponse_Revoked:
		return apierr.Status(apierr.NodeRevoked, 0, e.Revoked.GetReason()).Err()
	}
	return nil
}

// pick returns the next journal address, round robin.
func (a *Agent) pick() string {
	addr := a.cfg.JournalAddrs[a.next%len(a.cfg.JournalAddrs)]
	a.next++
	return addr
}

// backoff is exponential with full jitter, and never shorter than a
// retry-after the journal asked for.
func (a *Agent) backoff(attempt int, err error) time.Duration {
	ceiling := a.cfg.MinBackoff << min(attempt, 16)
	if ceiling > a.cfg.MaxBackoff || ceiling <= 0 {
		ceiling = a.cfg.MaxBackoff
	}
	d := a.cfg.MinBackoff/2 + rand.N(ceiling)
	if pe := apierr.FromError(err); pe != nil && pe.RetryAfter > 0 {
		d = max(d, pe.RetryAfter+jitter(pe.RetryAfter/2))
	}
	return d
}

func (a *Agent) sleep(ctx context.Context, d time.Duration) bool {
	t := a.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// refusal reports whether err is a final answer about this node. An
// ALREADY_ACTIVE with a retry-after is not: the node's previous incarnation
// went quiet and the journal will accept a takeover after the window.
func refusal(err error) bool {
	pe := apierr.FromError(err)
	if pe.Reason == apierr.AlreadyActive && pe.RetryAfter > 0 {
		return false
	}
	switch pe.Code {
	case codes.NotFound, codes.AlreadyExists, codes.PermissionDenied, codes.FailedPrecondition, codes.InvalidArgument:
		return true
	}
	return false
}

// classify names why a call failed, for logs and metrics.
func classify(err error) string {
	pe := apierr.FromError(err)
	switch {
	case pe.Reason != "":
		return string(pe.Reason)
	case pe.Code == codes.Unavailable && containsAny(pe.Message, "x509:", "certificate signed by unknown authority", "tls:"):
		return "server_tls_untrusted"
	case pe.Code == codes.Unavailable, pe.Code == codes.DeadlineExceeded:
		return "endpoint_unreachable"
	}
	return pe.Code.String()
}

func (a *Agent) explainRefusal(err error) error {
	pe := apierr.FromError(err)
	hint := ""
	switch pe.Reason {
	case apierr.NodeNotEnrolled:
		hint = fmt.Sprintf("; register this node first: pact node enroll NODE %s", registerFlags(a.hw))
	case apierr.AlreadyActive:
		hint = "; another agent holds this node's identity. If this node rebooted, wait for it to turn inactive; otherwise investigate a spoofed identity"
	case apierr.NodeRevoked:
		hint = "; the node was decommissioned: an operator must register it again"
	case apierr.HardwareIdentityConflict:
		hint = "; the reported MACs/BMC serial belong to more than one registered node: fix the registry (pact node inspect)"
	}
	return fmt.Errorf("%w: %w%s", ErrRefused, pe, hint)
}

func registerFlags(hw hwid.Identity) string {
	s := ""
	for _, m := range hw.MACs {
		s += " --mac " + m
	}
	if hw.BMCSerial != "" {
		s += " --bmc-serial " + hw.BMCSerial
	}
	return s[min(1, len(s)):]
}

func vclusterLabel(v string) string {
	if v == "" {
		return "(maintenance mode)"
	}
	return v
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		for i := 0; i+len(sub) <= len(s); i++ {
			if s[i:i+len(sub)] == sub {
				return true
			}
		}
	}
	return false
}
