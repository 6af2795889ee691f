package agent

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc/credentials"
)

// An Enroll attempt opens its TCP connection and finishes the TLS
// handshake before it builds a gRPC channel (grpc.NewClient) on the
// connection. A journal too busy to take the attempt turns it away before
// the handshake; so turned away, the attempt has cost the agent a TCP
// connection and a ClientHello, not the resolver, balancer, transport
// goroutines and trace records of a gRPC channel as well (a quarter of an
// agent's CPU in a boot storm went to gRPC channels, most of them for
// attempts turned away: docs/benchmarks.md).

// errConnUsed: gRPC wanted a second connection for a one-call channel
// whose only connection is gone.
var errConnUsed = errors.New("agent: the enrollment connection was closed; the attempt fails and is retried")

// handshaken are transport credentials for a connection whose TLS
// handshake is done: they hand gRPC the connection and what the handshake
// established.
type handshaken struct {
	info credentials.AuthInfo
}

func (h handshaken) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, h.info, nil
}

func (h handshaken) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("agent: client-only credentials")
}

func (h handshaken) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (h handshaken) Clone() credentials.TransportCredentials { return h }

func (h handshaken) OverrideServerName(string) error { return nil } //nolint:staticcheck // part of the interface

// oneConn is a gRPC dialer that hands out conn once.
func oneConn(conn net.Conn) func(context.Context, string) (net.Conn, error) {
	ch := make(chan net.Conn, 1)
	ch <- conn
	return func(context.Context, string) (net.Conn, error) {
		select {
		case c := <-ch:
			return c, nil
		default:
			return nil, errConnUsed
		}
	}
}

// dial opens a TCP connection to a journal with the configured dialer.
func (a *Agent) dial(ctx context.Context, addr string) (net.Conn, error) {
	if a.cfg.Dialer != nil {
		return a.cfg.Dialer(ctx, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}
