// Package bareclient is the least a node can do with gRPC to go from
// nothing to a stream: a key and a CSR, Enroll on a TLS connection, then a
// mutual-TLS connection with the new certificate, Ping, Subscribe and the
// first event. No chain check beyond the handshakes', no clock check, no
// identity cascade, no rotation, no logging.
//
// It exists for one measurement only: the floor with bare clients on both
// sides (stormbench storm -floor -floor-client bare), which tells what
// gRPC and the handshakes cost on this machine when neither side is pact.
// The storm's agents are pact-agent's own code and never this.
package bareclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/backoff"
	"github.com/pact-hpc/pact/internal/transport"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Config is a run of bare clients.
type Config struct {
	Addrs       []string // the journals; each client picks one at random per attempt
	Roots       *x509.CertPool
	KeyExchange transport.KeyExchange
	Agents      int
	// Hardware is client i's hardware identity.
	Hardware func(i int) *pactv1.HardwareIdentity
	// Source is client i's local address (nil: the kernel's choice).
	Source func(i int) net.IP
	// Spread: clients arrive evenly spread over it, in a random order.
	Spread time.Duration
	// Deadline ends the run; clients still trying then have failed.
	Deadline time.Duration
	// CallTimeout bounds each call (and its connection's handshake).
	CallTimeout time.Duration
}

// DefaultConfig is 10 s per call and a 10 minute deadline.
func DefaultConfig() Config {
	return Config{Spread: time.Second, Deadline: 10 * time.Minute, CallTimeout: 10 * time.Second, KeyExchange: transport.Classical}
}

// Validate reports a configuration Run cannot use.
func (c Config) Validate() error {
	switch {
	case len(c.Addrs) == 0:
		return errors.New("bareclient: no journal addresses")
	case c.Roots == nil:
		return errors.New("bareclient: no roots")
	case c.Agents < 1:
		return errors.New("bareclient: need at least one client")
	case c.Hardware == nil:
		return errors.New("bareclient: no hardware identities")
	case c.Deadline <= 0 || c.CallTimeout <= 0:
		return errors.New("bareclient: need a positive deadline and call timeout")
	}
	return nil
}

// Result is what a run did.
type Result struct {
	OK, Failed int
	Attempts   int             // Enroll calls and channels tried
	Wall       time.Duration   // first arrival to the last client's first event
	Latencies  []time.Duration // arrival to first event, per client that got there, sorted
	FirstError error           // one failure, for the report
	conns      []*grpc.ClientConn
	cancel     context.CancelFunc
}

// Close ends every client's stream and connection.
func (r *Result) Close() {
	if r.cancel != nil {
		r.cancel()
	}
	for _, c := range r.conns {
		_ = c.Close()
	}
}

// Run runs cfg.Agents clients until each holds a stream (kept open until
// Close) or the deadline passes.
func Run(cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	life, cancel := context.WithCancel(context.Background())
	deadline, stopDeadline := context.WithTimeout(life, cfg.Deadline)
	defer stopDeadline()
	res := &Result{cancel: cancel}
	var mu sync.Mutex
	var wg sync.WaitGroup
	t0 := time.Now()
	var last time.Time
	for k, i := range mrand.Perm(cfg.Agents) {
		at := t0.Add(time.Duration(k) * cfg.Spread / time.Duration(cfg.Agents))
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(at))
			arrived := time.Now()
			conn, tries, err := cfg.node(deadline, life, i)
			done := time.Now()
			mu.Lock()
			defer mu.Unlock()
			res.Attempts += tries
			if err != nil {
				res.Failed++
				if res.FirstError == nil {
					res.FirstError = fmt.Errorf("client %d: %w", i, err)
				}
				return
			}
			res.OK++
			res.conns = append(res.conns, conn)
			res.Latencies = append(res.Latencies, done.Sub(arrived))
			if done.After(last) {
				last = done
			}
		}()
	}
	wg.Wait()
	sort.Slice(res.Latencies, func(a, b int) bool { return res.Latencies[a] < res.Latencies[b] })
	if !last.IsZero() {
		res.Wall = last.Sub(t0)
	}
	return res, nil
}

// node is client i: it returns its channel, holding a stream open until
// life ends, and how many calls and channels it tried.
func (c Config) node(deadline, life context.Context, i int) (*grpc.ClientConn, int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, 0, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, 0, err
	}
	pol := backoff.Default()
	tries := 0
	var chain [][]byte
	for attempt := 0; chain == nil; attempt++ {
		tries++
		resp, err := c.enroll(deadline, i, csr)
		if err == nil {
			chain = resp.GetCertChainDer()
			break
		}
		if !c.wait(deadline, pol.After(attempt, err)) {
			return nil, tries, err
		}
	}
	cert := tls.Certificate{Certificate: chain, PrivateKey: key}
	for attempt := 0; ; attempt++ {
		tries++
		conn, err := c.channel(deadline, life, i, cert)
		if err == nil {
			return conn, tries, nil
		}
		if !c.wait(deadline, pol.After(attempt, err)) {
			return nil, tries, err
		}
	}
}

func (c Config) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c Config) dial(i int, cert *tls.Certificate) (*grpc.ClientConn, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: c.Roots}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	opts := append(transport.ClientOptions(), grpc.WithTransportCredentials(credentials.NewTLS(c.KeyExchange.Apply(tc))))
	if c.Source != nil {
		src := &net.TCPAddr{IP: c.Source(i)}
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: src}
			return d.DialContext(ctx, "tcp", addr)
		}))
	}
	return grpc.NewClient("passthrough:///"+c.Addrs[mrand.IntN(len(c.Addrs))], opts...)
}

func (c Config) enroll(ctx context.Context, i int, csr []byte) (*pactv1.EnrollResponse, error) {
	conn, err := c.dial(i, nil)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, c.CallTimeout)
	defer cancel()
	return pactv1.NewEnrollmentServiceClient(conn).Enroll(cctx, &pactv1.EnrollRequest{Hardware: c.Hardware(i), CsrDer: csr})
}

func (c Config) channel(ctx, life context.Context, i int, cert tls.Certificate) (*grpc.ClientConn, error) {
	conn, err := c.dial(i, &cert)
	if err != nil {
		return nil, err
	}
	client := pactv1.NewEnrollmentServiceClient(conn)
	cctx, cancel := context.WithTimeout(ctx, c.CallTimeout)
	defer cancel()
	if _, err := client.Ping(cctx, &pactv1.PingRequest{}); err != nil {
		_ = conn.Close()
		return nil, err
	}
	stream, err := client.Subscribe(life, &pactv1.SubscribeRequest{})
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	first := make(chan error, 1)
	go func() {
		_, err := stream.Recv()
		first <- err
		if err == nil {
			for {
				if _, err := stream.Recv(); err != nil {
					return
				}
			}
		}
	}()
	select {
	case err = <-first:
	case <-cctx.Done():
		err = cctx.Err()
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}
