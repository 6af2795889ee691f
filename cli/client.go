package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/tlsalert"
	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/internal/version"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// credential is the operator's admin client credential and the domain roots
// (--ca: one, or two during a rollover).
// Its String method names the operator, never the key.
type credential struct {
	roots *x509.CertPool
	pair  tls.Certificate
	leaf  *x509.Certificate
	name  string // operator name from the SPIFFE ID, if any
	role  string // role from the subject OU, if any
	// domains are the roots' SPIFFE trust domains: a journal's server
	// certificate carries spiffe://DOMAIN/pact-journal/ID of one of them.
	domains []string
}

func (c *credential) String() string {
	switch {
	case c == nil:
		return "unknown credential"
	case c.name != "" && c.role != "":
		return "admin " + c.name + ", role " + c.role
	case c.role != "":
		return "role " + c.role
	case c.name != "":
		return "admin " + c.name + ", no role"
	}
	return "no pact admin identity"
}

// loadCredential reads --ca, --cert and --key and reports every problem at
// once. Errors about the key file name the file, never its contents.
func loadCredential(cfg Config) (*credential, []error) {
	var problems []error
	c := &credential{}
	if cfg.CAFile != "" {
		pool, roots, err := pki.LoadCertPool(cfg.CAFile)
		if err != nil {
			problems = append(problems, fmt.Errorf("--ca %s: %w", cfg.CAFile, err))
		}
		c.roots, c.domains = pool, pki.TrustDomains(roots)
	}
	var leaf *x509.Certificate
	var certPEM []byte
	if cfg.CertFile != "" {
		var err error
		certPEM, err = os.ReadFile(cfg.CertFile)
		if err == nil {
			var certs []*x509.Certificate
			certs, err = pki.ParseCertsPEM(certPEM)
			if err == nil {
				leaf = certs[0]
			}
		}
		if err != nil {
			problems = append(problems, fmt.Errorf("--cert %s: %w", cfg.CertFile, err))
		}
	}
	if cfg.KeyFile != "" {
		keyPEM, err := os.ReadFile(cfg.KeyFile)
		switch {
		case err != nil:
			// A *PathError names the file and the OS reason only.
			problems = append(problems, fmt.Errorf("--key: %w", err))
		case !hasPrivateKeyPEM(keyPEM):
			problems = append(problems, fmt.Errorf("--key %s: no PEM private key in the file", cfg.KeyFile))
		case leaf != nil:
			// The parse error is deliberately dropped: nothing derived from
			// the key file's bytes reaches the operator's terminal.
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				problems = append(problems, fmt.Errorf("--key %s: not a usable private key for the certificate in --cert %s", cfg.KeyFile, cfg.CertFile))
			}
			c.pair = pair
		}
		clear(keyPEM)
	}
	if len(problems) > 0 {
		return nil, problems
	}
	if leaf == nil || c.roots == nil || c.pair.PrivateKey == nil {
		return nil, []error{errors.New("--ca, --cert and --key are all needed to reach the journal")}
	}
	c.leaf = leaf
	if id, err := pki.IdentityOf(leaf); err == nil && id.Kind == pki.KindAdmin {
		c.name = id.Name
	}
	if ou := leaf.Subject.OrganizationalUnit; len(ou) > 0 {
		c.role = ou[0]
	}
	return c, nil
}

// checkTime refuses a credential outside its validity: the journal would
// reject it during the handshake with a far less helpful error.
func (c *credential) checkTime(certFile string, now time.Time) error {
	var msg string
	switch {
	case now.After(c.leaf.NotAfter):
		msg = fmt.Sprintf("admin certificate %s (%s) expired at %s; ask a platform-admin for a new credential",
			certFile, c, c.leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(c.leaf.NotBefore):
		msg = fmt.Sprintf("admin certificate %s (%s) is not valid before %s; check this machine's clock",
			certFile, c, c.leaf.NotBefore.UTC().Format(time.RFC3339))
	default:
		return nil
	}
	return &hintError{msg: msg, err: &apierr.Error{Code: codes.Unauthenticated, Message: msg}}
}

func hasPrivateKeyPEM(data []byte) bool {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return false
		}
		if strings.HasSuffix(b.Type, "PRIVATE KEY") {
			return true
		}
	}
}

// journalConn is one journal address and its lazily connected channel.
type journalConn struct {
	addr      string
	conn      *grpc.ClientConn
	handshake *handshakeLog
	creds     credentials.TransportCredentials
}

// dial makes j's connection (lazily: nothing connects until a call).
func (j *journalConn) dial() error {
	conn, err := grpc.NewClient("dns:///"+j.addr,
		grpc.WithTransportCredentials(j.creds),
		grpc.WithUserAgent("pact-cli/"+version.Get().Version),
	)
	if err != nil {
		return fmt.Errorf("journal address %q: %w", j.addr, err)
	}
	j.conn = conn
	return nil
}

// reached reports whether a call on j may have reached the journal: gRPC
// sends a call only on an established connection, so one that never
// completed a handshake cannot have.
func (j *journalConn) reached() bool {
	return j.handshake.succeeded() || j.conn.GetState() == connectivity.Ready
}

// journals is a grpc.ClientConnInterface that tries each journal address
// in order; the commands use it through pactv1.NewAdminServiceClient. A
// call moves to the next address when the current one cannot be reached or
// answers Unavailable; any other answer is final (see failover). A call
// returns nil, a *JournalError carrying the answer of the journal that
// decided, or an *UnreachableError listing every address.
type journals struct {
	conns   []*journalConn
	timeout time.Duration
}

var _ grpc.ClientConnInterface = (*journals)(nil)

// repeatable are the methods that may be sent to the next journal after a
// connected one timed out: the reads, and RegisterNodes, whose chunk is
// safe to re-send (a row registered identically answers EXISTS: the second
// journal reports what the first did as "exists"). Every other method is a
// write that may have been made, and a method not listed counts as one.
// AddJournal, RemoveJournal and SaveSnapshot reach the leader this way:
// a follower answers NO_LEADER (Unavailable), so the call moves on.
var repeatable = map[string]bool{
	pactv1.AdminService_ListNodes_FullMethodName:            true,
	pactv1.AdminService_InspectNode_FullMethodName:          true,
	pactv1.AdminService_RegisterNodes_FullMethodName:        true,
	pactv1.AdminService_ListAudit_FullMethodName:            true,
	pactv1.AdminService_JournalStatus_FullMethodName:        true,
	pactv1.AdminService_ListJoinTokens_FullMethodName:       true,
	pactv1.AdminService_ListOperators_FullMethodName:        true,
	pactv1.AdminService_ListIntermediates_FullMethodName:    true,
	pactv1.AdminService_SaveSnapshot_FullMethodName:         true,
	pactv1.AdminService_ListFederatedDomains_FullMethodName: true,
}

// dialJournals prepares a client per address; nothing connects until the
// first call. Each uses TLS 1.3 with the domain root and the admin
// credential, verifies the server's certificate for the address's host,
// and accepts it only if it carries a journal's SPIFFE ID of the domain
// (pki.AuthorizeJournal): a node's certificate that verifies and names the
// address is no journal.
func dialJournals(cfg Config, cred *credential, now func() time.Time) (*journals, error) {
	js := &journals{timeout: cfg.Timeout}
	for _, addr := range cfg.Journals {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			js.Close()
			return nil, fmt.Errorf("journal address %q: %w", addr, err)
		}
		tc := &tls.Config{
			MinVersion:   tls.VersionTLS13,
			RootCAs:      cred.roots,
			Certificates: []tls.Certificate{cred.pair},
			ServerName:   host,
			Time:         now,
			// After the chain and the host name: is it a journal?
			VerifyConnection: pki.VerifyConnection(pki.AuthorizeJournal(cred.domains...)),
		}
		log := &handshakeLog{}
		j := &journalConn{addr: addr, handshake: log, creds: recordingCreds{TransportCredentials: credentials.NewTLS(tc), log: log}}
		if err := j.dial(); err != nil {
			js.Close()
			return nil, err
		}
		js.conns = append(js.conns, j)
	}
	return js, nil
}

// RedialBusy replaces the connections of journals that answered busy: a
// gRPC connection whose handshake failed waits out gRPC's own reconnect
// backoff, failing calls meanwhile with the old error, where the journal
// named its own time to come back, which the caller has waited.
func (js *journals) RedialBusy() error {
	for _, j := range js.conns {
		var busy *transport.BusyError
		if !errors.As(j.handshake.get(), &busy) {
			continue
		}
		_ = j.conn.Close()
		j.handshake.forget()
		if err := j.dial(); err != nil {
			return err
		}
	}
	return nil
}

// Close closes every connection.
func (js *journals) Close() error {
	var errs []error
	for _, c := range js.conns {
		errs = append(errs, c.conn.Close())
	}
	return errors.Join(errs...)
}

// Invoke runs a unary call against each journal in turn, each attempt
// bounded by the timeout.
func (js *journals) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	write := !repeatable[method]
	var failed []Attempt
	for _, j := range js.conns {
		actx, cancel := context.WithTimeout(ctx, js.timeout)
		err := j.conn.Invoke(actx, method, args, reply, opts...)
		cancel()
		if err == nil {
			return nil
		}
		e := apierr.FromError(err)
		reached := j.reached()
		if ctx.Err() != nil || !failover(e.Code, reached, write) {
			return &JournalError{Addr: j.addr, Err: e, Earlier: failed}
		}
		connected, stalled := j.handshake.state()
		failed = append(failed, Attempt{
			Addr:      j.addr,
			Err:       e,
			Handshake: j.handshake.get(),
			Alert:     j.handshake.alert(),
			Connected: connected,
			Stalled:   stalled && !reached,
			// A pact reason is a journal's definite answer; a bare transport
			// error on a live connection may have come after the journal acted.
			Uncertain: write && reached && e.Reason == "",
		})
	}
	return &UnreachableError{Attempts: failed}
}

// NewStream opens a server stream (SaveSnapshot) on the first journal that
// serves it. The stream is opened at the first RecvMsg, once the request
// is known; only that first message is bounded by the timeout (a large
// registry takes longer to stream than a unary call) and only until it
// arrives does the call move on to the next journal. Streams that send
// more than one message are not supported: nothing here uses them.
func (js *journals) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if desc.ClientStreams || !desc.ServerStreams {
		return nil, &apierr.Error{Code: codes.Unimplemented, Message: "pact CLI: " + method + " is not a server stream"}
	}
	return &failoverStream{js: js, ctx: ctx, desc: desc, method: method, opts: opts}, nil
}

// failoverStream is a server stream that picks its journal when the first
// message is asked for (see journals.NewStream).
type failoverStream struct {
	js     *journals
	ctx    context.Context
	desc   *grpc.StreamDesc
	method string
	opts   []grpc.CallOption
	req    any

	cur    grpc.ClientStream // nil until the first message arrived
	cancel context.CancelFunc
	addr   string
	failed []Attempt
}

func (s *failoverStream) SendMsg(m any) error {
	if s.req != nil || s.cur != nil {
		return &apierr.Error{Code: codes.Internal, Message: "pact CLI: " + s.method + " sends one request"}
	}
	s.req = m
	return nil
}

func (s *failoverStream) CloseSend() error { return nil }

func (s *failoverStream) RecvMsg(m any) error {
	if s.cur == nil {
		return s.open(m)
	}
	err := s.cur.RecvMsg(m)
	if err == nil {
		return nil
	}
	s.cancel()
	if err == io.EOF {
		return err
	}
	return &JournalError{Addr: s.addr, Err: apierr.FromError(err), Earlier: s.failed}
}

// open tries each journal until one sends the first message into m.
func (s *failoverStream) open(m any) error {
	for _, j := range s.js.conns {
		sctx, cancel := context.WithCancel(s.ctx)
		timer := time.AfterFunc(s.js.timeout, cancel)
		cs, err := j.conn.NewStream(sctx, s.desc, s.method, s.opts...)
		if err == nil {
			err = cs.SendMsg(s.req)
		}
		if err == nil {
			err = cs.CloseSend()
		}
		if err == nil {
			err = cs.RecvMsg(m)
		}
		timer.Stop()
		if err == nil {
			s.cur, s.cancel, s.addr = cs, cancel, j.addr
			return nil
		}
		cancel()
		e := apierr.FromError(err)
		if s.ctx.Err() != nil || !failover(e.Code, j.reached(), !repeatable[s.method]) {
			return &JournalError{Addr: j.addr, Err: e, Earlier: s.failed}
		}
		connected, stalled := j.handshake.state()
		s.failed = append(s.failed, Attempt{Addr: j.addr, Err: e, Handshake: j.handshake.get(), Alert: j.handshake.alert(), Connected: connected, Stalled: stalled && !j.reached()})
	}
	return &UnreachableError{Attempts: s.failed}
}

func (s *failoverStream) Header() (metadata.MD, error) {
	if s.cur == nil {
		return nil, nil
	}
	return s.cur.Header()
}

func (s *failoverStream) Trailer() metadata.MD {
	if s.cur == nil {
		return nil
	}
	return s.cur.Trailer()
}

func (s *failoverStream) Context() context.Context {
	if s.cur == nil {
		return s.ctx
	}
	return s.cur.Context()
}

// failover decides whether a failed call may be retried on the next
// journal. Unavailable means the call was not served (no connection, or a
// journal without a leader). A deadline on a connection that never became
// ready means the call was never sent; on a ready connection the journal may
// have acted, so only a read moves on. Unimplemented means the journal does
// not know the call (an older release, during an upgrade): it did nothing,
// and an upgraded journal may know it.
func failover(code codes.Code, connected, write bool) bool {
	switch code {
	case codes.Unavailable, codes.Unimplemented:
		return true
	case codes.DeadlineExceeded:
		return !connected || !write
	}
	return false
}

// handshakeLog keeps the last TLS handshake error of one address, so a
// failure can be explained with its type rather than the transport's text,
// and whether any handshake there has succeeded.
type handshakeLog struct {
	mu  sync.Mutex
	err error
	ok  bool
	// watched records the alert read on the latest connection whose
	// handshake succeeded (TLS 1.3: a journal refuses the client's
	// certificate after the client's side of the handshake is done).
	watched *tlsalert.Record
	// connected: a TCP connection was made (a handshake began); pending:
	// handshakes still waiting for the journal's answer (a journal not
	// serving yet holds its port open without answering); stalled: one
	// ran out of time waiting.
	connected, stalled bool
	pending            int
}

func (l *handshakeLog) began() {
	l.mu.Lock()
	l.connected = true
	l.pending++
	l.mu.Unlock()
}

func (l *handshakeLog) ended(stalled bool) {
	l.mu.Lock()
	l.pending--
	l.stalled = l.stalled || stalled
	l.mu.Unlock()
}

// state reports whether a TCP connection was ever made, and whether a
// handshake is waiting for the journal's answer or ran out of time
// waiting for it.
func (l *handshakeLog) state() (connected, stalled bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.connected, l.stalled || l.pending > 0
}

// set records the outcome of a handshake; watched is the record of the
// connection it made (nil if it failed).
func (l *handshakeLog) set(err error, watched *tlsalert.Record) {
	l.mu.Lock()
	l.err, l.watched = err, watched
	l.ok = l.ok || err == nil
	l.stalled = false
	l.mu.Unlock()
}

// forget clears the latest error (a new connection replaces the one it
// was seen on) without marking a handshake as having succeeded.
func (l *handshakeLog) forget() {
	l.mu.Lock()
	l.err, l.watched = nil, nil
	l.mu.Unlock()
}

// alert is the error that carried the alert the journal sent on the latest
// connection, in its handshake or after it (tlsalert.Received finds it);
// nil if it sent none.
func (l *handshakeLog) alert() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := tlsalert.Received(l.err); ok {
		return l.err
	}
	return l.watched.Err()
}

func (l *handshakeLog) succeeded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok
}

func (l *handshakeLog) get() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// recordingCreds is TLS transport credentials that record handshake errors.
type recordingCreds struct {
	credentials.TransportCredentials
	log *handshakeLog
}

func (c recordingCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	// A saturated journal answers busy, with a retry-after, in place of
	// its ServerHello: transport.BusyAware turns that into a *transport.BusyError.
	c.log.began()
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, transport.BusyAware(raw))
	// A journal that took the connection and let the handshake run out
	// of time is not serving yet (no leader, the registry still loading)
	// or is overwhelmed; a cancelled dial says nothing.
	c.log.ended(err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded))
	var watched *tlsalert.Record
	if err == nil {
		watched = &tlsalert.Record{}
		conn = tlsalert.Watch(conn, watched)
	}
	if ctx.Err() == nil {
		c.log.set(err, watched)
	}
	return conn, info, err
}

func (c recordingCreds) Clone() credentials.TransportCredentials {
	return recordingCreds{TransportCredentials: c.TransportCredentials.Clone(), log: c.log}
}
