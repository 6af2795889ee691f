// Package transport holds the connection settings journals, agents and the
// CLI share below the gRPC API: the TLS key exchange, the gRPC options for
// the short, one-call connections of a boot storm, and the busy answer a
// saturated journal writes instead of a ServerHello (busy.go).
package transport

import (
	"crypto/tls"
	"fmt"
	"runtime"
	"strings"

	"google.golang.org/grpc"
)

// KeyExchange names the TLS 1.3 key exchange a journal prefers and an agent
// offers.
type KeyExchange string

const (
	// Classical is X25519 alone: the default. Enroll and RenewCert carry
	// only public material (a CSR, certificates, the trust bundle) and
	// authentication is ECDSA either way, so the hybrid's protection
	// against recording traffic now and breaking it later buys little,
	// and it costs about a fifth of a handshake's CPU in a boot storm
	// (docs/benchmarks.md).
	Classical KeyExchange = "x25519"
	// Hybrid is X25519MLKEM768 (post-quantum hybrid) with X25519 as the
	// fallback: Go's default.
	Hybrid KeyExchange = "x25519mlkem768"
)

// ParseKeyExchange reads a --key-exchange flag value.
func ParseKeyExchange(s string) (KeyExchange, error) {
	switch k := KeyExchange(strings.ToLower(strings.TrimSpace(s))); k {
	case Classical, Hybrid:
		return k, nil
	case "":
		return Classical, nil
	}
	return "", fmt.Errorf("unknown key exchange %q: use %s or %s", s, Classical, Hybrid)
}

// Validate accepts exactly Classical and Hybrid: a Config holds the parsed
// value, so anything else (say an unnormalised " X25519MLKEM768") would be
// taken silently for Classical by Curves.
func (k KeyExchange) Validate() error {
	if k == Classical || k == Hybrid {
		return nil
	}
	return fmt.Errorf("unknown key exchange %q: use %s or %s", string(k), Classical, Hybrid)
}

// Curves is the tls.Config.CurvePreferences for k. A client offers exactly
// these key shares; a server picks the first one the client also supports,
// so peers with different settings still agree on X25519.
func (k KeyExchange) Curves() []tls.CurveID {
	if k == Hybrid {
		return []tls.CurveID{tls.X25519MLKEM768, tls.X25519}
	}
	return []tls.CurveID{tls.X25519}
}

// Apply sets the key exchange on cfg and returns it.
func (k KeyExchange) Apply(cfg *tls.Config) *tls.Config {
	cfg.CurvePreferences = k.Curves()
	return cfg
}

// Window sizes fixed for every connection: a fixed window turns off gRPC's
// bandwidth estimation and the PING it sends on every new connection. A
// journal's messages are a few KiB; 1 MiB never limits them.
const (
	streamWindow = 1 << 20
	connWindow   = 1 << 20
	// bufferSize replaces gRPC's 32 KiB read and write buffers per
	// connection: an agent connection carries one small call.
	bufferSize = 8 << 10
)

// ServerOptions are the journal's gRPC transport settings for thousands of
// short agent connections.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ReadBufferSize(bufferSize),
		grpc.WriteBufferSize(bufferSize),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		// Reuse goroutines for incoming streams instead of starting one
		// (and growing its stack) per call.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	}
}

// ClientOptions are the matching settings for an agent's channels. An
// agent holds its channel for hours and says little on it (a Ping, a
// renewal), so it keeps no buffer it does not need between calls: no read
// buffer (the connection is TLS, whose own record buffer already holds
// what the framer reads; a second one was 8 KiB per channel for
// nothing), and a write buffer taken from a pool for each write and given
// back when it is flushed (gRPC's shared write buffer, on by default since
// WithSharedWriteBuffer was deprecated; another 8 KiB).
func ClientOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithReadBufferSize(0),
		grpc.WithWriteBufferSize(bufferSize),
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
	}
}
