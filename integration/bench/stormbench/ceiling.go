package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/pact-hpc/pact/integration/launch"
	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/journal/ca"
)

// The ceiling is the crypto a node's way to streaming (or its renewal)
// cannot avoid, run flat out on every core of this machine:
//
//   - the agent's key generation and CSR (ECDSA P-256);
//   - for an enrollment, a full TLS 1.3 handshake, both sides, with the
//     key exchange the journals negotiate, the server presenting a
//     journal's P-256 chain (leaf, intermediate, journal CA) that the
//     client verifies against the domain root: the Enroll connection;
//   - the journal's CSR check (ca.ParseCSR) and signing (ca.SignAgent),
//     the very functions the journal calls;
//   - a second full handshake, mutual this time (the client presents its
//     new agent chain and the server checks the leaf's signature by its
//     intermediate, as a journal does once it knows the chain above): the
//     agent's mTLS channel, on which it Pings and Subscribes. A renewal
//     needs only this one (RenewCert goes over the live channel, then the
//     agent moves to a new channel with the new certificate).
//
// What it leaves out is what the ratio measures: gRPC and HTTP/2, Raft
// replication and fsync, the registry, logging, and scheduling.

type ceilingResult struct {
	ops    int
	wall   time.Duration
	cpu    time.Duration
	perSec float64
	cpuOp  time.Duration
	others float64 // share of the machine other processes used meanwhile
	// The CPU per operation of the journal's part (its side of the
	// handshake, ParseCSR, SignAgent) and of the agent's part (the rest:
	// keygen, CSR, its side of the handshake, and GC).
	serverOp, clientOp time.Duration
	// probe is the speed probe's median while it ran (probe.go).
	probe time.Duration
}

type ceilingKit struct {
	ca         *ca.CA
	server     *tls.Config // as the journal: a client certificate is requested, not required
	mtlsServer *tls.Config // the same, verifying the client chain (a renewal)
	client     *tls.Config
}

// probeCurve makes one TLS handshake with a journal, as an agent offering
// kx does, and returns the key exchange the journal chose: the ceiling
// uses the same on both sides, so it follows the journals' and the agents'
// TLS configuration.
func probeCurve(addr string, roots *x509.CertPool, kx transport.KeyExchange) (tls.CurveID, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, kx.Apply(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, NextProtos: []string{"h2"}}))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return conn.ConnectionState().CurveID, nil
}

// newCeilingKit makes a CA from the benchmark's domain root, exactly as a
// journal makes its own (a fresh in-memory intermediate and server cert).
// curve is the key exchange the journals negotiate (0: Go's default).
func newCeilingKit(dir string, curve tls.CurveID) (*ceilingKit, error) {
	up, err := ca.LoadKeyFileAuthority(launch.RootFiles(dir))
	if err != nil {
		return nil, err
	}
	authority, err := newStubCA(up, "ceiling")
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(authority.Root())
	serverCert := authority.ServerCertificate()
	k := &ceilingKit{ca: authority}
	k.server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*serverCert},
		ClientAuth:   tls.RequestClientCert,
		NextProtos:   []string{"h2"},
		// As the journal: no session tickets (nobody resumes).
		SessionTicketsDisabled: true,
	}
	if curve != 0 {
		k.server.CurvePreferences = []tls.CurveID{curve}
	}
	k.mtlsServer = k.server.Clone()
	// The client chain's signatures above the leaf are the journal's own
	// intermediate's and journal CA's, checked once per intermediate by a
	// journal, not per handshake: the leaf's alone (the stubs' check).
	k.mtlsServer.ClientAuth = tls.RequireAnyClientCert
	inter := []*x509.Certificate{authority.Intermediate()}
	k.mtlsServer.VerifyConnection = func(cs tls.ConnectionState) error { return verifyLeafSignedBy(cs, inter) }
	k.client = &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    roots,
		ServerName: "127.0.0.1",
		NextProtos: []string{"h2"},
	}
	if curve != 0 {
		k.client.CurvePreferences = []tls.CurveID{curve}
	}
	return k, nil
}

// agentCert is an agent credential signed by the ceiling CA (for mTLS).
func (k *ceilingKit) agentCert(name string) (tls.Certificate, error) {
	key, csrDER, err := newAgentKey()
	if err != nil {
		return tls.Certificate{}, err
	}
	csr, err := ca.ParseCSR(csrDER)
	if err != nil {
		return tls.Certificate{}, err
	}
	iss, err := k.ca.SignAgent(csr, name)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: iss.ChainDER, PrivateKey: key}, nil
}

// newAgentKey makes a P-256 key and a CSR with nothing but the key, as
// pact-agent does.
func newAgentKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, k)
	if err != nil {
		return nil, nil, err
	}
	return k, csr, nil
}

// socketPair is a connected pair of in-kernel stream sockets. Unlike
// net.Pipe it buffers: on a net.Pipe the server's session ticket (written
// after the handshake) and the client's close_notify block each other
// until the close deadline, so the ceiling would measure a timeout.
func socketPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				syscall.Close(fds[1])
			}
			return nil, nil, err
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}

// handshake runs both sides of one full TLS handshake; serverWork runs
// on the server's goroutine after its side (nil: nothing). With
// serverCPU set, the server goroutine is locked to its thread and the
// thread's CPU time for its side (and serverWork) is added to *serverCPU.
func handshake(clientCfg, serverCfg *tls.Config, serverWork func() error, serverCPU *atomic.Int64) error {
	a, b, err := socketPair()
	if err != nil {
		return err
	}
	srvErr := make(chan error, 1)
	go func() {
		var t0 time.Duration
		if serverCPU != nil {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			t0 = threadCPU()
		}
		s := tls.Server(b, serverCfg)
		err := s.Handshake()
		if err == nil && serverCfg.ClientAuth == tls.RequireAndVerifyClientCert && len(s.ConnectionState().PeerCertificates) == 0 {
			err = fmt.Errorf("no client certificate")
		}
		s.Close()
		if err == nil && serverWork != nil {
			err = serverWork()
		}
		if serverCPU != nil {
			serverCPU.Add(int64(threadCPU() - t0))
		}
		srvErr <- err
	}()
	c := tls.Client(a, clientCfg)
	err = c.Handshake()
	c.Close()
	if serr := <-srvErr; err == nil {
		err = serr
	}
	return err
}

// threadCPU is the CPU time of the calling thread.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

// op is one enrollment's (renew: one renewal's) unavoidable crypto, with
// the agent's channel: plain is the client for the Enroll connection, mtls
// the client (with an agent certificate) for the channel. With serverCPU
// set, the journal's part (its side of the handshakes, the CSR check and
// the signing) is timed on its own thread.
func (k *ceilingKit) op(plain, mtls *tls.Config, renew bool, serverCPU *atomic.Int64) error {
	_, csrDER, err := newAgentKey()
	if err != nil {
		return err
	}
	sign := func() error {
		csr, err := ca.ParseCSR(csrDER)
		if err != nil {
			return err
		}
		_, err = k.ca.SignAgent(csr, "ceiling-node")
		return err
	}
	if renew {
		// RenewCert over the live channel, then the new channel.
		if err := handshake(mtls, k.mtlsServer, sign, serverCPU); err != nil {
			return fmt.Errorf("handshake: %w", err)
		}
		return nil
	}
	if err := handshake(plain, k.server, sign, serverCPU); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if err := handshake(mtls, k.mtlsServer, nil, serverCPU); err != nil {
		return fmt.Errorf("mTLS handshake: %w", err)
	}
	return nil
}

// run does op flat out on 2×GOMAXPROCS goroutines for d (after a short
// warm-up) and reports the rate and the CPU per operation; then, for a
// third of d more, the same with the journal's part timed on its own
// thread, to split the CPU between the journal's side and the agent's.
func (k *ceilingKit) run(d time.Duration, renew bool) (ceilingResult, error) {
	res, err := k.pass(d, renew, nil)
	if err != nil {
		return res, err
	}
	var server atomic.Int64
	split, err := k.pass(d/3, renew, &server)
	if err != nil {
		return res, err
	}
	res.serverOp = time.Duration(server.Load()) / time.Duration(split.ops)
	res.clientOp = max(split.cpuOp-res.serverOp, 0)
	return res, nil
}

func (k *ceilingKit) pass(d time.Duration, renew bool, serverCPU *atomic.Int64) (ceilingResult, error) {
	workers := 2 * runtime.GOMAXPROCS(0)
	clients, err := k.mtlsClients(workers)
	if err != nil {
		return ceilingResult{}, err
	}
	for w := range workers { // warm-up
		if err := k.op(k.client, clients[w], renew, nil); err != nil {
			return ceilingResult{}, err
		}
	}
	var (
		ops      atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	stop := make(chan struct{})
	machine := startMachine()
	cpu0 := selfCPU()
	began := time.Now()
	for w := range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := k.op(k.client, clients[w], renew, serverCPU); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				ops.Add(1)
			}
		})
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	wall := time.Since(began)
	cpu := selfCPU() - cpu0
	others := machine.others(cpu)
	if err, _ := firstErr.Load().(error); err != nil {
		return ceilingResult{}, err
	}
	n := int(ops.Load())
	if n == 0 {
		return ceilingResult{}, fmt.Errorf("no operation completed in %v", d)
	}
	return ceilingResult{ops: n, wall: wall, cpu: cpu, perSec: float64(n) / wall.Seconds(), cpuOp: cpu / time.Duration(n), others: others}, nil
}

// mtlsClients makes n client configurations, each with an agent
// certificate of its own.
func (k *ceilingKit) mtlsClients(n int) ([]*tls.Config, error) {
	out := make([]*tls.Config, n)
	for w := range n {
		cert, err := k.agentCert(fmt.Sprintf("ceiling-%d", w))
		if err != nil {
			return nil, err
		}
		out[w] = k.client.Clone()
		out[w].Certificates = []tls.Certificate{cert}
	}
	return out, nil
}

// prices is the CPU of each unit of work (storm.go work), measured one at
// a time on an otherwise idle load generator: it prices the attempts
// that came to nothing.
type prices struct{ keygen, tls, sign, mtls time.Duration }

func (p prices) of(w work) time.Duration {
	return time.Duration(w.keygen)*p.keygen + time.Duration(w.tls)*p.tls + time.Duration(w.sign)*p.sign + time.Duration(w.mtls)*p.mtls
}

// price measures each unit for about d.
func (k *ceilingKit) price(d time.Duration) (prices, error) {
	clients, err := k.mtlsClients(1)
	if err != nil {
		return prices{}, err
	}
	_, csrDER, err := newAgentKey()
	if err != nil {
		return prices{}, err
	}
	each := func(f func() error) (time.Duration, error) {
		n := 0
		cpu0 := selfCPU()
		for began := time.Now(); time.Since(began) < d/4; n++ {
			if err := f(); err != nil {
				return 0, err
			}
		}
		return (selfCPU() - cpu0) / time.Duration(n), nil
	}
	var p prices
	if p.keygen, err = each(func() error { _, _, err := newAgentKey(); return err }); err != nil {
		return p, err
	}
	if p.tls, err = each(func() error { return handshake(k.client, k.server, nil, nil) }); err != nil {
		return p, err
	}
	if p.mtls, err = each(func() error { return handshake(clients[0], k.mtlsServer, nil, nil) }); err != nil {
		return p, err
	}
	p.sign, err = each(func() error {
		csr, err := ca.ParseCSR(csrDER)
		if err == nil {
			_, err = k.ca.SignAgent(csr, "ceiling-node")
		}
		return err
	})
	return p, err
}

// signOnly runs the journal's CSR check and signing alone, on one
// goroutine, for d: the figure ADR-008 reasons with ("~1 ms CPU per
// signing, 10,000 CSRs in ~10 s on one core").
func (k *ceilingKit) signOnly(d time.Duration) (perSec float64, cpuOp time.Duration, err error) {
	_, csrDER, err := newAgentKey()
	if err != nil {
		return 0, 0, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := 0
	cpu0 := threadCPU()
	began := time.Now()
	for time.Since(began) < d {
		csr, err := ca.ParseCSR(csrDER)
		if err != nil {
			return 0, 0, err
		}
		if _, err := k.ca.SignAgent(csr, "ceiling-node"); err != nil {
			return 0, 0, err
		}
		n++
	}
	cpu := threadCPU() - cpu0
	return float64(n) / time.Since(began).Seconds(), cpu / time.Duration(n), nil
}
