package v1rpc

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/auth"
)

// The interceptors around journal/auth's: Unary and Stream run first
// (a correlation id, the call's one leader confirmation, and every error,
// authentication's included, answered as the journal's status); Vouch and
// LimitStreams run after it, once the caller is known.

// ConnCalls is the gRPC port's connection limiter (connlimit.Limiter): it
// counts a call on the connection from addr, and that the address has
// proved itself when the call authenticated.
type ConnCalls interface {
	Call(addr net.Addr, authenticated bool) (done func())
}

// StreamLimits bounds the streams one certificate holds open.
type StreamLimits interface {
	// Acquire takes a slot for key (what names it in a refusal), or
	// refuses (ErrTooManyStreams).
	Acquire(key, what string) (release func(), err error)
	// Refused counts a refusal.
	Refused()
}

// InterceptorConfig is what the interceptors depend on.
type InterceptorConfig struct {
	// ToStatus is the journal's one mapping of an error to its gRPC status.
	ToStatus func(error) error
	Conns    ConnCalls
	Streams  StreamLimits
}

// Interceptors are the journal's gRPC interceptors of its own.
type Interceptors struct{ cfg InterceptorConfig }

// NewInterceptors returns the interceptors over cfg's dependencies.
func NewInterceptors(cfg InterceptorConfig) (*Interceptors, error) {
	if cfg.ToStatus == nil || cfg.Conns == nil || cfg.Streams == nil {
		return nil, errors.New("v1rpc: the interceptors need ToStatus, Conns and Streams")
	}
	return &Interceptors{cfg: cfg}, nil
}

// Unary runs before journal/auth's: it gives the call its correlation id
// and its one leader confirmation, and answers every error of the call,
// authentication's included, as the journal's status.
func (i *Interceptors) Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(withCallConfirmation(WithCorrelation(ctx)), req)
	return resp, i.cfg.ToStatus(err)
}

type correlatedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *correlatedStream) Context() context.Context { return s.ctx }

// RecvMsg answers a request that does not decode with INVALID_ARGUMENT
// (decode.go).
func (s *correlatedStream) RecvMsg(m any) error { return decoded(s.ServerStream.RecvMsg(m), m) }

// Stream is Unary for streams (a stream lives for hours: it carries no
// call confirmation).
func (i *Interceptors) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return i.cfg.ToStatus(handler(srv, &correlatedStream{ServerStream: ss, ctx: WithCorrelation(ss.Context())}))
}

// LimitStreams runs after journal/auth's interceptor: it bounds the
// streams per certificate before the handler spends a goroutine's
// lifetime, a timer and a registry subscription on one. Journals of the
// quorum are exempt: they are few, trusted, and a peer protocol may well
// multiplex many streams.
func (i *Interceptors) LimitStreams(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	p := auth.FromContext(ss.Context())
	if p == nil || p.ID.Kind == pki.KindJournal {
		return handler(srv, ss)
	}
	// authenticate made these from the same leaf (an operator's, an
	// agent's or an SVID's principal has them); hashed again only if not.
	serial, spki := p.Serial, p.SPKI
	if serial == "" || spki == "" {
		serial, spki = pki.SerialHex(p.Leaf.SerialNumber), pki.SPKIFingerprint(p.Leaf)
	}
	release, err := i.cfg.Streams.Acquire(serial+"|"+spki, p.ID.Kind+" certificate "+serial)
	if err != nil {
		i.cfg.Streams.Refused()
		return err
	}
	defer release()
	return handler(srv, ss)
}

// VouchUnary runs after journal/auth's interceptor: it tells the gRPC
// port's connection limiter of the call, and that its source address has
// proved itself when the call was authenticated as a principal of the
// domain (connlimit.Limiter.Call, Vouch: at the connection cap such
// addresses are served first).
func (i *Interceptors) VouchUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	defer i.connCall(ctx)()
	return handler(ctx, req)
}

// VouchStream is VouchUnary for streams.
func (i *Interceptors) VouchStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	defer i.connCall(ss.Context())()
	return handler(srv, ss)
}

func (i *Interceptors) connCall(ctx context.Context) (done func()) {
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return func() {}
	}
	return i.cfg.Conns.Call(pr.Addr, auth.FromContext(ctx) != nil)
}
