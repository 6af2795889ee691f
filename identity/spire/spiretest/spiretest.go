// Package spiretest runs a SPIFFE Workload API server on a real Unix socket,
// standing in for a SPIRE agent in tests: it serves the X.509-SVID it is
// given over go-spiffe's generated gRPC service, pushes rotations to open
// streams, and can be stopped and started again on the same socket. It is
// for tests only.
package spiretest

import (
	"crypto/x509"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"github.com/spiffe/go-spiffe/v2/proto/spiffe/workload"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/identity"
)

// Server is a fake SPIRE agent. Its zero value is not usable; call New.
type Server struct {
	tb   testing.TB
	path string

	mu      sync.Mutex
	resp    *workload.X509SVIDResponse // nil: no entry for the caller
	updated chan struct{}              // closed and replaced on every SetSVID
	gs      *grpc.Server
	streams int // FetchX509SVID streams open now
	calls   int // FetchX509SVID calls answered, ever
}

// New returns a stopped server whose socket is in a fresh temporary
// directory. It is stopped at the end of the test.
func New(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{tb: tb, path: filepath.Join(tb.TempDir(), "agent.sock"), updated: make(chan struct{})}
	tb.Cleanup(s.Stop)
	return s
}

// Addr is the Workload API address, unix:///path, for --spire-socket.
func (s *Server) Addr() string { return "unix://" + s.path }

// Start listens on the socket and serves until Stop.
func (s *Server) Start() {
	s.tb.Helper()
	lis, err := net.Listen("unix", s.path)
	if err != nil {
		s.tb.Fatalf("spiretest: listen on %s: %v", s.path, err)
	}
	gs := grpc.NewServer()
	workload.RegisterSpiffeWorkloadAPIServer(gs, handler{s: s})
	s.mu.Lock()
	if s.gs != nil {
		s.mu.Unlock()
		_ = lis.Close()
		s.tb.Fatal("spiretest: Start on a running server")
	}
	s.gs = gs
	s.mu.Unlock()
	go func() { _ = gs.Serve(lis) }()
}

// Stop ends every stream and closes the socket at once, as a SPIRE agent
// that dies would. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	gs := s.gs
	s.gs = nil
	s.mu.Unlock()
	if gs != nil {
		gs.Stop()
	}
}

// SetSVID makes id (its chain, key and bundle) the SVID served, and pushes it
// to every open stream: a rotation. Before the first SetSVID, or after
// SetSVID(nil), callers get PermissionDenied "no identity issued", as from a
// SPIRE agent with no registration entry for them.
func (s *Server) SetSVID(id *identity.Identity) {
	s.tb.Helper()
	var resp *workload.X509SVIDResponse
	if id != nil {
		key, err := x509.MarshalPKCS8PrivateKey(id.Key)
		if err != nil {
			s.tb.Fatalf("spiretest: marshal key: %v", err)
		}
		resp = &workload.X509SVIDResponse{Svids: []*workload.X509SVID{{
			SpiffeId:    id.SPIFFEID,
			X509Svid:    concat(id.Chain),
			X509SvidKey: key,
			Bundle:      concat(id.Bundle),
		}}}
	}
	s.mu.Lock()
	s.resp = resp
	close(s.updated)
	s.updated = make(chan struct{})
	s.mu.Unlock()
}

// Streams returns how many FetchX509SVID streams are open.
func (s *Server) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams
}

// Calls returns how many FetchX509SVID calls the server has taken, ever: a
// test sees a client retrying.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func concat(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, c.Raw...)
	}
	return out
}

type handler struct {
	workload.UnimplementedSpiffeWorkloadAPIServer
	s *Server
}

// FetchX509SVID checks the security header as SPIRE does, sends the current
// SVID, then every new one until the client goes or the server stops.
func (h handler) FetchX509SVID(_ *workload.X509SVIDRequest, stream grpc.ServerStreamingServer[workload.X509SVIDResponse]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	if v := md.Get("workload.spiffe.io"); len(v) != 1 || v[0] != "true" {
		return status.Error(codes.InvalidArgument, "security header missing from request")
	}
	s := h.s
	s.mu.Lock()
	s.calls++
	s.streams++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.streams--
		s.mu.Unlock()
	}()
	var sent *workload.X509SVIDResponse
	for {
		s.mu.Lock()
		resp, updated := s.resp, s.updated
		s.mu.Unlock()
		if resp == nil {
			return status.Error(codes.PermissionDenied, "no identity issued")
		}
		if resp != sent {
			if err := stream.Send(resp); err != nil {
				return err
			}
			sent = resp
		}
		select {
		case <-updated:
		case <-stream.Context().Done():
			return nil
		}
	}
}
