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

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/version"
	"github.com/pact-hpc/pact/internal/wire"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// AdminClient is the part of the journal's AdminService the commands call.
// The failover client below and pactv1.AdminServiceClient both satisfy it.
type AdminClient interface {
	RegisterNode(ctx context.Context, in *pactv1.RegisterNodeRequest, opts ...grpc.CallOption) (*pactv1.RegisterNodeResponse, error)
	ListNodes(ctx context.Context, in *pactv1.ListNodesRequest, opts ...grpc.CallOption) (*pactv1.ListNodesResponse, error)
	InspectNode(ctx context.Context, in *pactv1.InspectNodeRequest, opts ...grpc.CallOption) (*pactv1.InspectNodeResponse, error)
	RegisterNodes(ctx context.Context, in *pactv1.RegisterNodesRequest, opts ...grpc.CallOption) (*pactv1.RegisterNodesResponse, error)
	DecommissionNode(ctx context.Context, in *pactv1.DecommissionNodeRequest, opts ...grpc.CallOption) (*pactv1.DecommissionNodeResponse, error)
	UpdateNode(ctx context.Context, in *pactv1.UpdateNodeRequest, opts ...grpc.CallOption) (*pactv1.UpdateNodeResponse, error)
	AssignNode(ctx context.Context, in *pactv1.AssignNodeRequest, opts ...grpc.CallOption) (*pactv1.AssignNodeResponse, error)
	UnassignNode(ctx context.Context, in *pactv1.UnassignNodeRequest, opts ...grpc.CallOption) (*pactv1.UnassignNodeResponse, error)
	MoveNode(ctx context.Context, in *pactv1.MoveNodeRequest, opts ...grpc.CallOption) (*pactv1.MoveNodeResponse, error)
	ListAudit(ctx context.Context, in *pactv1.ListAuditRequest, opts ...grpc.CallOption) (*pactv1.ListAuditResponse, error)
	JournalStatus(ctx context.Context, in *pactv1.JournalStatusRequest, opts ...grpc.CallOption) (*pactv1.JournalStatusResponse, error)
	AddJournal(ctx context.Context, in *pactv1.AddJournalRequest, opts ...grpc.CallOption) (*pactv1.AddJournalResponse, error)
	RemoveJournal(ctx context.Context, in *pactv1.RemoveJournalRequest, opts ...grpc.CallOption) (*pactv1.RemoveJournalResponse, error)
	CreateJoinToken(ctx context.Context, in *pactv1.CreateJoinTokenRequest, opts ...grpc.CallOption) (*pactv1.CreateJoinTokenResponse, error)
	ListJoinTokens(ctx context.Context, in *pactv1.ListJoinTokensRequest, opts ...grpc.CallOption) (*pactv1.ListJoinTokensResponse, error)
	RevokeJoinTokens(ctx context.Context, in *pactv1.RevokeJoinTokensRequest, opts ...grpc.CallOption) (*pactv1.RevokeJoinTokensResponse, error)
	FenceNode(ctx context.Context, in *pactv1.FenceNodeRequest, opts ...grpc.CallOption) (*pactv1.FenceNodeResponse, error)
	UnfenceNode(ctx context.Context, in *pactv1.UnfenceNodeRequest, opts ...grpc.CallOption) (*pactv1.UnfenceNodeResponse, error)
	// SaveSnapshot streams the leader's snapshot into w and returns the
	// bytes written.
	SaveSnapshot(ctx context.Context, w io.Writer) (int64, error)
	IssueOperator(ctx context.Context, in *pactv1.IssueOperatorRequest, opts ...grpc.CallOption) (*pactv1.IssueOperatorResponse, error)
	ListOperators(ctx context.Context, in *pactv1.ListOperatorsRequest, opts ...grpc.CallOption) (*pactv1.ListOperatorsResponse, error)
	RevokeOperator(ctx context.Context, in *pactv1.RevokeOperatorRequest, opts ...grpc.CallOption) (*pactv1.RevokeOperatorResponse, error)
	RetireIntermediate(ctx context.Context, in *pactv1.RetireIntermediateRequest, opts ...grpc.CallOption) (*pactv1.RetireIntermediateResponse, error)
	ListIntermediates(ctx context.Context, in *pactv1.ListIntermediatesRequest, opts ...grpc.CallOption) (*pactv1.ListIntermediatesResponse, error)
}

// credential is the operator's admin client credential and the domain root.
// Its String method names the operator, never the key.
type credential struct {
	roots *x509.CertPool
	pair  tls.Certificate
	leaf  *x509.Certificate
	name  string // operator name from the SPIFFE ID, if any
	role  string // role from the subject OU, if any
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
		pool, _, err := pki.LoadCertPool(cfg.CAFile)
		if err != nil {
			problems = append(problems, fmt.Errorf("--ca %s: %w", cfg.CAFile, err))
		}
		c.roots = pool
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

// journalConn is one journal address and its lazily connected client.
type journalConn struct {
	addr      string
	conn      *grpc.ClientConn
	client    pactv1.AdminServiceClient
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
	j.conn, j.client = conn, pactv1.NewAdminServiceClient(conn)
	return nil
}

// journals is an AdminClient that tries each journal address in order. A
// call moves to the next address when the current one cannot be reached or
// answers Unavailable; any other answer is final.
type journals struct {
	conns   []*journalConn
	timeout time.Duration
}

var _ AdminClient = (*journals)(nil)

// dialJournals prepares a client per address; nothing connects until the
// first call. Each uses TLS 1.3 with the domain root and the admin
// credential, and verifies the server's certificate for the address's host.
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
		var busy *wire.BusyError
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

// RegisterNode registers a node on the first journal that can be reached.
func (js *journals) RegisterNode(ctx context.Context, in *pactv1.RegisterNodeRequest, opts ...grpc.CallOption) (*pactv1.RegisterNodeResponse, error) {
	var out *pactv1.RegisterNodeResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.RegisterNode(ctx, in, opts...)
		return err
	})
	return out, err
}

// ListNodes lists nodes from the first journal that can be reached.
func (js *journals) ListNodes(ctx context.Context, in *pactv1.ListNodesRequest, opts ...grpc.CallOption) (*pactv1.ListNodesResponse, error) {
	var out *pactv1.ListNodesResponse
	err := js.call(ctx, false, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.ListNodes(ctx, in, opts...)
		return err
	})
	return out, err
}

// InspectNode reads one node from the first journal that can be reached.
func (js *journals) InspectNode(ctx context.Context, in *pactv1.InspectNodeRequest, opts ...grpc.CallOption) (*pactv1.InspectNodeResponse, error) {
	var out *pactv1.InspectNodeResponse
	err := js.call(ctx, false, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.InspectNode(ctx, in, opts...)
		return err
	})
	return out, err
}

// RegisterNodes registers a chunk of nodes. Re-sending a chunk is safe
// (a row registered identically answers EXISTS), so unlike the other
// writes it moves on to the next journal even when a connected one timed
// out: the second journal reports what the first did as "exists".
func (js *journals) RegisterNodes(ctx context.Context, in *pactv1.RegisterNodesRequest, opts ...grpc.CallOption) (*pactv1.RegisterNodesResponse, error) {
	var out *pactv1.RegisterNodesResponse
	err := js.call(ctx, false, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.RegisterNodes(ctx, in, opts...)
		return err
	})
	return out, err
}

// DecommissionNode revokes a node on the first journal that can be reached.
func (js *journals) DecommissionNode(ctx context.Context, in *pactv1.DecommissionNodeRequest, opts ...grpc.CallOption) (*pactv1.DecommissionNodeResponse, error) {
	var out *pactv1.DecommissionNodeResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.DecommissionNode(ctx, in, opts...)
		return err
	})
	return out, err
}

// UpdateNode changes a node's hardware identity (a write).
func (js *journals) UpdateNode(ctx context.Context, in *pactv1.UpdateNodeRequest, opts ...grpc.CallOption) (*pactv1.UpdateNodeResponse, error) {
	var out *pactv1.UpdateNodeResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.UpdateNode(ctx, in, opts...)
		return err
	})
	return out, err
}

// AssignNode puts a node into a vCluster.
func (js *journals) AssignNode(ctx context.Context, in *pactv1.AssignNodeRequest, opts ...grpc.CallOption) (*pactv1.AssignNodeResponse, error) {
	var out *pactv1.AssignNodeResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.AssignNode(ctx, in, opts...)
		return err
	})
	return out, err
}

// UnassignNode puts a node into maintenance mode.
func (js *journals) UnassignNode(ctx context.Context, in *pactv1.UnassignNodeRequest, opts ...grpc.CallOption) (*pactv1.UnassignNodeResponse, error) {
	var out *pactv1.UnassignNodeResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.UnassignNode(ctx, in, opts...)
		return err
	})
	return out, err
}

// MoveNode moves a node from its vCluster to another.
func (js *journals) MoveNode(ctx context.Context, in *pactv1.MoveNodeRequest, opts ...grpc.CallOption) (*pactv1.MoveNodeResponse, error) {
	var out *pactv1.MoveNodeResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.MoveNode(ctx, in, opts...)
		return err
	})
	return out, err
}

// ListAudit reads the audit trail from the first journal that can be reached.
func (js *journals) ListAudit(ctx context.Context, in *pactv1.ListAuditRequest, opts ...grpc.CallOption) (*pactv1.ListAuditResponse, error) {
	var out *pactv1.ListAuditResponse
	err := js.call(ctx, false, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.ListAudit(ctx, in, opts...)
		return err
	})
	return out, err
}

// JournalStatus reads the quorum's status from the first journal that can
// be reached; any journal answers, with its own view.
func (js *journals) JournalStatus(ctx context.Context, in *pactv1.JournalStatusRequest, opts ...grpc.CallOption) (*pactv1.JournalStatusResponse, error) {
	var out *pactv1.JournalStatusResponse
	err := js.call(ctx, false, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.JournalStatus(ctx, in, opts...)
		return err
	})
	return out, err
}

// AddJournal adds a voter. Only the leader takes it: a follower answers
// NO_LEADER (Unavailable), so the call moves on to the next address.
func (js *journals) AddJournal(ctx context.Context, in *pactv1.AddJournalRequest, opts ...grpc.CallOption) (*pactv1.AddJournalResponse, error) {
	var out *pactv1.AddJournalResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.AddJournal(ctx, in, opts...)
		return err
	})
	return out, err
}

// RemoveJournal removes a member; like AddJournal it reaches the leader by
// moving on from followers.
func (js *journals) RemoveJournal(ctx context.Context, in *pactv1.RemoveJournalRequest, opts ...grpc.CallOption) (*pactv1.RemoveJournalResponse, error) {
	var out *pactv1.RemoveJournalResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.RemoveJournal(ctx, in, opts...)
		return err
	})
	return out, err
}

// call runs fn against each journal in turn, each attempt bounded by the
// timeout. It returns nil, a *JournalError carrying the answer of the
// CreateJoinToken makes a join token; a write, so not re-sent elsewhere
// once a journal may have acted.
func (js *journals) CreateJoinToken(ctx context.Context, in *pactv1.CreateJoinTokenRequest, opts ...grpc.CallOption) (*pactv1.CreateJoinTokenResponse, error) {
	var out *pactv1.CreateJoinTokenResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.CreateJoinToken(ctx, in, opts...)
		return err
	})
	return out, err
}

// ListJoinTokens lists join tokens from the first journal that answers.
func (js *journals) ListJoinTokens(ctx context.Context, in *pactv1.ListJoinTokensRequest, opts ...grpc.CallOption) (*pactv1.ListJoinTokensResponse, error) {
	var out *pactv1.ListJoinTokensResponse
	err := js.call(ctx, false, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.ListJoinTokens(ctx, in, opts...)
		return err
	})
	return out, err
}

// RevokeJoinTokens deletes a node's unused join tokens.
func (js *journals) RevokeJoinTokens(ctx context.Context, in *pactv1.RevokeJoinTokensRequest, opts ...grpc.CallOption) (*pactv1.RevokeJoinTokensResponse, error) {
	var out *pactv1.RevokeJoinTokensResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.RevokeJoinTokens(ctx, in, opts...)
		return err
	})
	return out, err
}

// FenceNode quarantines a node.
func (js *journals) FenceNode(ctx context.Context, in *pactv1.FenceNodeRequest, opts ...grpc.CallOption) (*pactv1.FenceNodeResponse, error) {
	var out *pactv1.FenceNodeResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.FenceNode(ctx, in, opts...)
		return err
	})
	return out, err
}

// UnfenceNode lifts a node's fence.
func (js *journals) UnfenceNode(ctx context.Context, in *pactv1.UnfenceNodeRequest, opts ...grpc.CallOption) (*pactv1.UnfenceNodeResponse, error) {
	var out *pactv1.UnfenceNodeResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.UnfenceNode(ctx, in, opts...)
		return err
	})
	return out, err
}

// journal that decided, or an *UnreachableError listing every address.
func (js *journals) call(ctx context.Context, write bool, fn func(context.Context, pactv1.AdminServiceClient) error) error {
	var failed []Attempt
	for _, j := range js.conns {
		actx, cancel := context.WithTimeout(ctx, js.timeout)
		err := fn(actx, j.client)
		cancel()
		if err == nil {
			return nil
		}
		e := apierr.FromError(err)
		// gRPC sends a call only on an established connection, so one that
		// never completed a handshake cannot have reached the journal.
		reached := j.handshake.succeeded() || j.conn.GetState() == connectivity.Ready
		if ctx.Err() != nil || !failover(e.Code, reached, write) {
			return &JournalError{Addr: j.addr, Err: e, Earlier: failed}
		}
		failed = append(failed, Attempt{
			Addr:      j.addr,
			Err:       e,
			Handshake: j.handshake.get(),
			// A pact reason is a journal's definite answer; a bare transport
			// error on a live connection may have come after the journal acted.
			Uncertain: write && reached && e.Reason == "",
		})
	}
	return &UnreachableError{Attempts: failed}
}

// SaveSnapshot streams a snapshot from the first journal that serves it
// (the leader: followers answer NO_LEADER, so the call moves on). Only
// the first message is bounded by --timeout: a large registry takes longer
// to stream than a unary call.
func (js *journals) SaveSnapshot(ctx context.Context, w io.Writer) (int64, error) {
	var failed []Attempt
	for _, j := range js.conns {
		sctx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(js.timeout, cancel)
		stream, err := j.client.SaveSnapshot(sctx, &pactv1.SaveSnapshotRequest{})
		var first *pactv1.SaveSnapshotResponse
		if err == nil {
			first, err = stream.Recv()
		}
		timer.Stop()
		if err != nil {
			cancel()
			e := apierr.FromError(err)
			reached := j.handshake.succeeded() || j.conn.GetState() == connectivity.Ready
			if ctx.Err() != nil || !failover(e.Code, reached, false) {
				return 0, &JournalError{Addr: j.addr, Err: e, Earlier: failed}
			}
			failed = append(failed, Attempt{Addr: j.addr, Err: e, Handshake: j.handshake.get()})
			continue
		}
		n, err := copyChunks(w, first, stream)
		cancel()
		if err != nil {
			return n, &JournalError{Addr: j.addr, Err: apierr.FromError(err), Earlier: failed}
		}
		return n, nil
	}
	return 0, &UnreachableError{Attempts: failed}
}

func copyChunks(w io.Writer, first *pactv1.SaveSnapshotResponse, stream grpc.ServerStreamingClient[pactv1.SaveSnapshotResponse]) (int64, error) {
	var n int64
	for c := first; ; {
		k, err := w.Write(c.GetData())
		n += int64(k)
		if err != nil {
			return n, err
		}
		if c, err = stream.Recv(); err == io.EOF {
			return n, nil
		} else if err != nil {
			return n, err
		}
	}
}

// failover decides whether a failed call may be retried on the next
// journal. Unavailable means the call was not served (no connection, or a
// journal without a leader). A deadline on a connection that never became
// ready means the call was never sent; on a ready connection the journal may
// have acted, so only a read moves on.
func failover(code codes.Code, connected, write bool) bool {
	switch code {
	case codes.Unavailable:
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
}

func (l *handshakeLog) set(err error) {
	l.mu.Lock()
	l.err = err
	l.ok = l.ok || err == nil
	l.mu.Unlock()
}

// forget clears the latest error (a new connection replaces the one it
// was seen on) without marking a handshake as having succeeded.
func (l *handshakeLog) forget() {
	l.mu.Lock()
	l.err = nil
	l.mu.Unlock()
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
	// its ServerHello: wire.BusyAware turns that into a *wire.BusyError.
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, wire.BusyAware(raw))
	if ctx.Err() == nil { // a cancelled dial says nothing about the journal
		c.log.set(err)
	}
	return conn, info, err
}

func (c recordingCreds) Clone() credentials.TransportCredentials {
	return recordingCreds{TransportCredentials: c.TransportCredentials.Clone(), log: c.log}
}

// IssueOperator has a journal sign and record an operator credential. A
// write: a timed-out call is not repeated elsewhere (it may have issued).
func (js *journals) IssueOperator(ctx context.Context, in *pactv1.IssueOperatorRequest, opts ...grpc.CallOption) (*pactv1.IssueOperatorResponse, error) {
	var out *pactv1.IssueOperatorResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.IssueOperator(ctx, in, opts...)
		return err
	})
	return out, err
}

// ListOperators reads the recorded operator credentials.
func (js *journals) ListOperators(ctx context.Context, in *pactv1.ListOperatorsRequest, opts ...grpc.CallOption) (*pactv1.ListOperatorsResponse, error) {
	var out *pactv1.ListOperatorsResponse
	err := js.call(ctx, false, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.ListOperators(ctx, in, opts...)
		return err
	})
	return out, err
}

// RevokeOperator revokes operator credentials.
func (js *journals) RevokeOperator(ctx context.Context, in *pactv1.RevokeOperatorRequest, opts ...grpc.CallOption) (*pactv1.RevokeOperatorResponse, error) {
	var out *pactv1.RevokeOperatorResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.RevokeOperator(ctx, in, opts...)
		return err
	})
	return out, err
}

// RetireIntermediate retires journal intermediates.
func (js *journals) RetireIntermediate(ctx context.Context, in *pactv1.RetireIntermediateRequest, opts ...grpc.CallOption) (*pactv1.RetireIntermediateResponse, error) {
	var out *pactv1.RetireIntermediateResponse
	err := js.call(ctx, true, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.RetireIntermediate(ctx, in, opts...)
		return err
	})
	return out, err
}

// ListIntermediates reads the intermediates in Raft.
func (js *journals) ListIntermediates(ctx context.Context, in *pactv1.ListIntermediatesRequest, opts ...grpc.CallOption) (*pactv1.ListIntermediatesResponse, error) {
	var out *pactv1.ListIntermediatesResponse
	err := js.call(ctx, false, func(ctx context.Context, c pactv1.AdminServiceClient) (err error) {
		out, err = c.ListIntermediates(ctx, in, opts...)
		return err
	})
	return out, err
}
