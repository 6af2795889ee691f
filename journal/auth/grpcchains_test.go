package auth

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/journal/connlimit"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

type pingServer struct {
	pactv1.UnimplementedEnrollmentServiceServer
}

func (pingServer) Ping(context.Context, *pactv1.PingRequest) (*pactv1.PingResponse, error) {
	return &pactv1.PingResponse{}, nil
}

type statusServer struct {
	pactv1.UnimplementedAdminServiceServer
}

func (statusServer) JournalStatus(context.Context, *pactv1.JournalStatusRequest) (*pactv1.JournalStatusResponse, error) {
	return &pactv1.JournalStatusResponse{}, nil
}

// The gRPC port as the journal sets it up (journal.go: newGRPCServer): TLS
// asking for a client certificate, the handshake check, the connection
// limits, the interceptor. Chains through a journal CA pass it end to end;
// a misshapen one passes the handshake and is refused by the call, which
// says why; a foreign one fails the handshake. An accepted call does not
// check again the leaf signature its handshake checked.
func TestGRPCPortChains(t *testing.T) {
	s := newChainSet()
	a, reg, _ := newChainAuth(t, s.bundle, s.root.Cert, s.root2.Cert)
	loop := chaintest.Names{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	server := s.root.JournalCA("j7", loop).Intermediate("j7", loop).Server("j7", loop)
	lim, err := connlimit.New(connlimit.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg := &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{server.TLS()},
		ClientAuth:       tls.RequestClientCert,
		VerifyConnection: a.VerifyClientConnection,
	}
	srv := grpc.NewServer(grpc.Creds(ServerCreds(credentials.NewTLS(tlsCfg), lim, nil)), grpc.ChainUnaryInterceptor(a.UnaryInterceptor))
	pactv1.RegisterEnrollmentServiceServer(srv, pingServer{})
	pactv1.RegisterAdminServiceServer(srv, statusServer{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	other := newChainSet() // another domain's CAs, of the same names
	for _, tc := range []struct {
		name     string
		leaf     *chaintest.Leaf
		sent     int    // how many certificates of the chain the client sends (0: all)
		operator bool   // calls JournalStatus, not Ping
		want     string // "" accepted
	}{
		{"agent [leaf, intermediate, journal CA]", s.inter.Agent("n1"), 0, false, ""},
		{"agent under the second root", s.inter2.Agent("n2"), 0, false, ""},
		{"agent leaf alone, CAs in the bundle", s.inter.Agent("n3"), 1, false, ""},
		{"agent legacy [leaf, intermediate]", s.legacy.Agent("n4"), 0, false, ""},
		{"operator [op] root-signed", s.root2.Operator("alice", "viewer"), 0, true, ""},
		{"operator [op, intermediate, journal CA]", s.inter.Operator("bob", "viewer"), 0, true, ""},
		{"agent under a revoked journal CA", s.underRevoked.Agent("n5"), 0, false, "re-enroll"},
		{"agent signed by a journal CA", s.jca.Agent("n6"), 0, false, "shape this domain does not issue"},
		{"operator signed by a journal CA", s.jca.Operator("eve", "platform-admin"), 0, true, "shape this domain does not issue"},
		{"agent of another domain's root", other.inter.Agent("n7"), 0, false, "bad certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg.leaf = tc.leaf.Cert
			cert := tc.leaf.TLS()
			if tc.sent > 0 {
				cert.Certificate = cert.Certificate[:tc.sent]
			}
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
				MinVersion:   tls.VersionTLS13,
				RootCAs:      chaintest.Pool(s.root.Cert),
				Certificates: []tls.Certificate{cert},
			})))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.operator {
				_, err = pactv1.NewAdminServiceClient(cc).JournalStatus(ctx, &pactv1.JournalStatusRequest{})
			} else {
				_, err = pactv1.NewEnrollmentServiceClient(cc).Ping(ctx, &pactv1.PingRequest{})
			}
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("call: %v, want %q", err, tc.want)
			}
			// The call took the handshake's check of the leaf's signature
			// under its intermediate (leafsig.go) rather than make it again.
			if err == nil && len(tc.leaf.Chain) > 1 && a.signed.has(tc.leaf.Cert, tc.leaf.Chain[1]) {
				t.Fatal("the first call did not use the handshake's check of the leaf's signature")
			}
		})
	}
}
