package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/integration/bench/stormbench/bareclient"
	"github.com/pact-hpc/pact/integration/launch"
	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/freepages"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/connlimit"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The floor (storm -floor) is the same storm, with the same agents, against
// stub journals that do only what the ceiling counts behind gRPC: the TLS
// handshakes (the client chain verified in the mTLS one), ParseCSR and
// SignAgent, with the journal's gRPC transport options and its admission
// queue in front of the handshake. By default (the replicating floor,
// floorraft.go) they also commit one Raft entry per enrollment and per
// renewal, as pact must; with -floor-replicate=false (the old floor) they
// keep nothing. Either way: no registry, no per-call authentication or
// binding, no rate limits, no audit, no logging, no metrics. So:
//
//   - the floor over the ceiling is what gRPC, HTTP/2, loopback TCP, the Go
//     runtime and the agent's own code cost on this machine, whatever a
//     journal does: the best ratio any gRPC journal could reach here;
//   - the storm over the floor is what pact's journal adds.
//
// A stub journal is this program run as "stormbench floor-journal", one
// process per journal as pact-journal would be.

// floorJournal is one stub journal's EnrollmentService.
type floorJournal struct {
	pactv1.UnimplementedEnrollmentServiceServer
	id      string
	ca      *ca.CA
	dir     string // holds every stub's journal CA and intermediate (floor-jca-*.der, floor-inter-*.der)
	streams atomic.Int64
	raft    *floorRaft // nil: the old floor, which keeps nothing

	bundleOnce sync.Once
	bundle     [][]byte            // root, every stub's journal CA, then every stub's intermediate
	inters     []*x509.Certificate // the stubs' intermediates, parsed: what signs an agent certificate
}

// trustBundle is the root and every stub's journal CA and intermediate,
// read once: every stub writes its own before it serves, and the driver
// starts the agents only when all serve.
func (f *floorJournal) trustBundle() [][]byte {
	f.load()
	return f.bundle
}

// issuers is the stubs' intermediates (trustBundle's), parsed.
func (f *floorJournal) issuers() []*x509.Certificate {
	f.load()
	return f.inters
}

func (f *floorJournal) load() {
	f.bundleOnce.Do(func() {
		f.bundle = [][]byte{f.ca.Root().Raw}
		jcas, _ := filepath.Glob(filepath.Join(f.dir, "floor-jca-*.der"))
		inters, _ := filepath.Glob(filepath.Join(f.dir, "floor-inter-*.der"))
		sort.Strings(jcas)
		sort.Strings(inters)
		for _, p := range append(jcas, inters...) {
			der, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			f.bundle = append(f.bundle, der)
			if strings.Contains(filepath.Base(p), "floor-inter-") {
				if c, err := x509.ParseCertificate(der); err == nil {
					f.inters = append(f.inters, c)
				}
			}
		}
	})
}

// verifyLeafSignedBy is the stubs' and the ceiling's check of a client
// certificate in the handshake: signed by one of issuers, and valid now.
// It checks the leaf's signature alone, as a journal does once it has
// verified the chain above the leaf (journal/auth's known CAs): the stubs
// issued every intermediate themselves. A connection without one (Enroll)
// passes; the ceiling's mTLS side requires one of its tls.Config.
func verifyLeafSignedBy(cs tls.ConnectionState, issuers []*x509.Certificate) error {
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	leaf, now := cs.PeerCertificates[0], time.Now()
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return errors.New("floor: client certificate not valid now")
	}
	for _, c := range issuers {
		if bytes.Equal(leaf.RawIssuer, c.RawSubject) && leaf.CheckSignatureFrom(c) == nil {
			return nil
		}
	}
	return errors.New("floor: client certificate not signed by a stub's intermediate")
}

// floorNodeID names a node by its BMC serial: the stub has no registry.
func floorNodeID(hw *pactv1.HardwareIdentity) (string, error) {
	id := strings.ToLower(hw.GetBmcSerial())
	if err := pki.ValidateName("node id", id); err != nil {
		return "", status.Error(codes.InvalidArgument, err.Error())
	}
	return id, nil
}

// caller is the verified client certificate of the call's connection (the
// stub verifies it in the handshake, as the ceiling does).
func caller(ctx context.Context) (*x509.Certificate, pki.Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, pki.Identity{}, status.Error(codes.Unauthenticated, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil, pki.Identity{}, status.Error(codes.Unauthenticated, "no client certificate")
	}
	// verifyLeafSignedBy verified it in the handshake.
	leaf := info.State.PeerCertificates[0]
	id, err := pki.IdentityOf(leaf)
	if err != nil {
		return nil, pki.Identity{}, status.Error(codes.Unauthenticated, err.Error())
	}
	return leaf, id, nil
}

func (f *floorJournal) sign(csrDER []byte, nodeID string) (*ca.Issued, error) {
	csr, err := ca.ParseCSR(csrDER)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	iss, err := f.ca.SignAgent(csr, nodeID)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return iss, nil
}

func (f *floorJournal) Enroll(ctx context.Context, req *pactv1.EnrollRequest) (*pactv1.EnrollResponse, error) {
	nodeID, err := floorNodeID(req.GetHardware())
	if err != nil {
		return nil, err
	}
	iss, err := f.sign(req.GetCsrDer(), nodeID)
	if err != nil {
		return nil, err
	}
	if f.raft != nil {
		if err := f.raft.commit(ctx, activateEntry(nodeID, req.GetHardware(), iss)); err != nil {
			return nil, err
		}
	}
	return &pactv1.EnrollResponse{
		NodeId:             nodeID,
		CertChainDer:       iss.ChainDER,
		TrustBundleDer:     f.trustBundle(),
		Serial:             iss.Serial,
		NotAfterUnix:       iss.NotAfter.Unix(),
		ServerTimeUnixNano: time.Now().UnixNano(),
	}, nil
}

func (f *floorJournal) RenewCert(ctx context.Context, req *pactv1.RenewCertRequest) (*pactv1.RenewCertResponse, error) {
	leaf, id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	iss, err := f.sign(req.GetCsrDer(), id.Name)
	if err != nil {
		return nil, err
	}
	if f.raft != nil {
		if err := f.raft.commit(ctx, renewEntry(id.Name, leaf, iss)); err != nil {
			return nil, err
		}
	}
	return &pactv1.RenewCertResponse{
		NodeId:             id.Name,
		CertChainDer:       iss.ChainDER,
		TrustBundleDer:     f.trustBundle(),
		Serial:             iss.Serial,
		NotAfterUnix:       iss.NotAfter.Unix(),
		ServerTimeUnixNano: time.Now().UnixNano(),
	}, nil
}

func (f *floorJournal) Ping(ctx context.Context, _ *pactv1.PingRequest) (*pactv1.PingResponse, error) {
	leaf, id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	return &pactv1.PingResponse{NodeId: id.Name, JournalId: f.id, Serial: pki.SerialHex(leaf.SerialNumber), ServerTimeUnixNano: time.Now().UnixNano()}, nil
}

func (f *floorJournal) Subscribe(_ *pactv1.SubscribeRequest, stream pactv1.EnrollmentService_SubscribeServer) error {
	_, id, err := caller(stream.Context())
	if err != nil {
		return err
	}
	f.streams.Add(1)
	defer f.streams.Add(-1)
	if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_Assignment{Assignment: &pactv1.Assignment{NodeId: id.Name}}}); err != nil {
		return err
	}
	if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_TrustBundle{TrustBundle: &pactv1.TrustBundle{Der: f.trustBundle()}}}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// admittedCreds puts the journal's admission queue in front of the
// handshake, with pact-journal's own code (connlimit.AdmitHandshake): without it ten thousand
// simultaneous handshakes time out and retry, and the floor would measure
// that instead.
type admittedCreds struct {
	credentials.TransportCredentials
	lim *connlimit.Limiter
}

func (c *admittedCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	hello, release, err := c.lim.AdmitHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	conn, info, err := c.TransportCredentials.ServerHandshake(hello)
	release(err == nil)
	return conn, info, err
}

func (c *admittedCreds) Clone() credentials.TransportCredentials {
	return &admittedCreds{TransportCredentials: c.TransportCredentials.Clone(), lim: c.lim}
}

// runFloorJournal is "stormbench floor-journal": one stub journal. It
// prints "serving GRPC-ADDR STATUS-ADDR" once it serves and runs until its
// standard input closes (the driver's end).
func runFloorJournal(args []string) int {
	fs := flag.NewFlagSet("stormbench floor-journal", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory with the domain root (ca.pem, ca-key.pem)")
	id := fs.String("id", "floor-1", "journal id")
	kxName := fs.String("key-exchange", string(transport.Classical), "TLS key exchange (as pact-journal --key-exchange)")
	admission := fs.Bool("admission", true, "the journal's admission queue in front of the TLS handshake")
	listen := fs.String("listen", "127.0.0.1:0", "gRPC address")
	raftListen := fs.String("raft-listen", "", "Raft address: with -peers, commit one entry per enrollment and renewal (the replicating floor); empty keeps nothing")
	peersFlag := fs.String("peers", "", "every stub of the replicating floor, id=raft-addr=grpc-addr, comma-separated (this one included)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// main set the load generator's GC (GOGC 400, a memory limit); a stub
	// journal collects as pact-journal does, with Go's defaults, unless
	// the environment says otherwise.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(100)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(math.MaxInt64)
	}
	var peers []floorPeer
	if *raftListen != "" {
		var err error
		if peers, err = parseFloorPeers(*peersFlag); err != nil {
			fmt.Fprintf(os.Stderr, "stormbench floor-journal: %v\n", err)
			return 2
		}
	}
	if err := serveFloorJournal(floorOpts{dir: *dir, id: *id, kx: *kxName, admission: *admission, listen: *listen, raftListen: *raftListen, peers: peers}); err != nil {
		fmt.Fprintf(os.Stderr, "stormbench floor-journal: %v\n", err)
		return 1
	}
	return 0
}

// newStubCA is a stub's (or the ceiling's) CA on the design's chain:
// root, journal CA, in-memory intermediate. The journal CA is signed by the
// root as a ceremony signs a journal's (caprofile.JournalCA), its key in
// memory, so the agents verify the same links against a stub as against
// pact's journals. It serves as localhost and 127.0.0.1.
func newStubCA(root *ca.KeyFileAuthority, id string) (*ca.CA, error) {
	names, ips := []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	domain, err := ca.DomainOf(root.Root())
	if err != nil {
		return nil, err
	}
	now := time.Now()
	jca, err := ca.SignJournalCA(root, key.Public(), caprofile.JournalCAParams{
		Domain: domain, JournalID: id, DNSNames: names, IPs: ips,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(caprofile.DefaultJournalCALifetime),
	})
	if err != nil {
		return nil, err
	}
	cfg := ca.DefaultConfig()
	cfg.Issuer = ca.Issuer{Certificate: jca, Signer: key}
	cfg.Roots = []*x509.Certificate{root.Root()}
	cfg.JournalID = id
	cfg.ServerDNSNames, cfg.ServerIPs = names, ips
	cfg.Clock = clock.Real{}
	return ca.New(cfg)
}

// stubServerTLS is a stub's gRPC server TLS configuration.
func stubServerTLS(authority *ca.CA, fj *floorJournal) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*authority.ServerCertificate()},
		// Enroll comes without a client certificate; the channel's is
		// verified in the handshake (the ceiling's mTLS handshake), by
		// VerifyConnection: Go's own verification would check every
		// signature up to the root on every connection.
		ClientAuth:             tls.RequestClientCert,
		VerifyConnection:       func(cs tls.ConnectionState) error { return verifyLeafSignedBy(cs, fj.issuers()) },
		SessionTicketsDisabled: true,
	}
}

// floorOpts are a stub journal's flags.
type floorOpts struct {
	dir, id, kx, listen, raftListen string
	admission                       bool
	peers                           []floorPeer
}

func serveFloorJournal(o floorOpts) error {
	dir, id, admission := o.dir, o.id, o.admission
	kx, err := transport.ParseKeyExchange(o.kx)
	if err != nil {
		return err
	}
	up, err := ca.LoadKeyFileAuthority(launch.RootFiles(dir))
	if err != nil {
		return err
	}
	authority, err := newStubCA(up, id)
	if err != nil {
		return err
	}
	server := authority.ServerCertificate()
	if len(server.Certificate) != 3 {
		return fmt.Errorf("the server certificate comes with %d certificates, not its intermediate and journal CA", len(server.Certificate)-1)
	}
	// The trust bundle's share of this stub, as a journal's: its journal
	// CA and its intermediate.
	for name, der := range map[string][]byte{"floor-jca-" + id + ".der": server.Certificate[2], "floor-inter-" + id + ".der": server.Certificate[1]} {
		if err := os.WriteFile(filepath.Join(dir, name), der, 0o644); err != nil {
			return err
		}
	}
	fj := &floorJournal{id: id, ca: authority, dir: dir}
	tlsCfg := kx.Apply(stubServerTLS(authority, fj))
	var creds credentials.TransportCredentials = credentials.NewTLS(tlsCfg)
	var lim *connlimit.Limiter
	if admission {
		if lim, err = connlimit.New(connlimit.DefaultConfig()); err != nil {
			return err
		}
		creds = &admittedCreds{TransportCredentials: creds, lim: lim}
	}
	// The journal's handshake deadline (connlimit's HandshakeTimeout, 15 s):
	// a shorter one breaks, after their handshake, connections that waited
	// their turn in the admission queue, which a journal does not.
	s := grpc.NewServer(append(transport.ServerOptions(), grpc.Creds(creds), grpc.ConnectionTimeout(connlimit.DefaultConfig().HandshakeTimeout))...)
	pactv1.RegisterEnrollmentServiceServer(s, fj)

	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	if o.raftListen != "" {
		fr, err := startFloorRaft(dir, id, o.raftListen, o.peers, authority)
		if err != nil {
			lis.Close()
			return err
		}
		defer fr.close()
		fj.raft = fr
		pactv1.RegisterJournalPeerServiceServer(s, fr)
	}
	statusLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/streams", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, fj.streams.Load())
	})
	// ready: 200 once the stub can commit (a leader known, its log
	// applied), and the Raft term (elections) and entries applied.
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		if fj.raft != nil && !fj.raft.ready() {
			http.Error(w, "no leader yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	// timings: the admission queue's slot wait and handshake histograms,
	// as a journal's /metrics has them (the stubs time no first call:
	// they tell the limiter of no call).
	mux.HandleFunc("/timings", func(w http.ResponseWriter, _ *http.Request) {
		if lim != nil {
			fmt.Fprint(w, timingsText("grpc", lim.Timings()))
		}
	})
	mux.HandleFunc("/raft", func(w http.ResponseWriter, _ *http.Request) {
		if fj.raft == nil {
			fmt.Fprintln(w, "0 0")
			return
		}
		fmt.Fprintln(w, fj.raft.r.CurrentTerm(), fj.raft.fsm.applied.Load())
	})
	go func() { _ = http.Serve(statusLis, mux) }()
	go func() { _ = s.Serve(lis) }()
	fmt.Printf("serving %s %s\n", lis.Addr(), statusLis.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Stop()
	return nil
}

// floorCluster is the stub journals, each a process of this program.
type floorCluster struct {
	procs  []*exec.Cmd
	stdins []io.WriteCloser
	grpc   []string
	status []string
}

// freeAddrs are n loopback addresses free a moment ago: the replicating
// floor's stubs must know each other's before any starts.
func freeAddrs(n int) ([]string, error) {
	var out []string
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held, out = append(held, l), append(out, l.Addr().String())
	}
	return out, nil
}

func startFloorCluster(dir string, n int, kx string, replicate bool, extra, env []string) (*floorCluster, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var peers []floorPeer
	if replicate {
		addrs, err := freeAddrs(2 * n)
		if err != nil {
			return nil, err
		}
		for i := range n {
			peers = append(peers, floorPeer{id: fmt.Sprintf("floor-%d", i+1), grpc: addrs[2*i], raft: addrs[2*i+1]})
		}
	}
	c := &floorCluster{}
	for i := range n {
		args := []string{"floor-journal", "-dir", dir, "-id", fmt.Sprintf("floor-%d", i+1), "-key-exchange", kx}
		if replicate {
			args = append(args, "-listen", peers[i].grpc, "-raft-listen", peers[i].raft, "-peers", formatFloorPeers(peers))
		}
		args = append(args, extra...)
		cmd := exec.Command(self, args...)
		// The stubs return free heap pages as pact-journal does
		// (internal/freepages).
		cmd.Env, _ = freepages.Env(append(os.Environ(), env...))
		cmd.Stderr = os.Stderr
		// Its own process group, as the load generator's workers: an
		// interrupt reaches the driver, which stops the stubs last.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		in, err := cmd.StdinPipe()
		if err != nil {
			c.stop()
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			c.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			c.stop()
			return nil, err
		}
		c.procs, c.stdins = append(c.procs, cmd), append(c.stdins, in)
		line, err := bufio.NewReader(out).ReadString('\n')
		f := strings.Fields(line)
		if err != nil || len(f) != 3 || f[0] != "serving" {
			c.stop()
			return nil, fmt.Errorf("stub journal %d did not start (%q): %v", i+1, line, err)
		}
		c.grpc, c.status = append(c.grpc, f[1]), append(c.status, f[2])
	}
	if replicate {
		if err := c.waitReady(time.Minute); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// waitReady waits until every stub has a leader and has applied its log.
func (c *floorCluster) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, a := range c.status {
		for {
			resp, err := http.Get("http://" + a + "/ready")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the replicating floor's stubs elected no leader within %v", limit)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// timings reads every stub's timing histograms, summed.
func (c *floorCluster) timings() histograms {
	h := histograms{}
	for _, a := range c.status {
		resp, err := http.Get("http://" + a + "/timings")
		if err != nil {
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			parseTimings(h, string(b))
		}
	}
	return h
}

// raftState is the highest Raft term of the stubs (it grows with every
// election) and the most entries one of them applied (the leader's count:
// a follower applies an entry a heartbeat after it commits); zeros for
// the old floor.
func (c *floorCluster) raftState() (term, applied uint64, err error) {
	for _, a := range c.status {
		resp, err := http.Get("http://" + a + "/raft")
		if err != nil {
			return 0, 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, 0, err
		}
		var t, n uint64
		if _, err := fmt.Sscan(string(b), &t, &n); err != nil {
			return 0, 0, err
		}
		term, applied = max(term, t), max(applied, n)
	}
	return term, applied, nil
}

func (c *floorCluster) pids() []int {
	out := make([]int, len(c.procs))
	for i, p := range c.procs {
		out[i] = p.Process.Pid
	}
	return out
}

// streams is the streams the stubs hold open, summed.
func (c *floorCluster) streams() (int, error) {
	n := 0
	for _, a := range c.status {
		resp, err := http.Get("http://" + a + "/streams")
		if err != nil {
			return 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, err
		}
		k, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

// settledStreams reads the stubs' stream count until it is want, for at
// most 30 s (a replaced channel's stream ends a moment after the move).
func (c *floorCluster) settledStreams(want int) int {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := c.streams()
		if (err == nil && n == want) || time.Now().After(deadline) {
			return n
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (c *floorCluster) stop() {
	for _, in := range c.stdins {
		_ = in.Close()
	}
	for _, p := range c.procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = p.Process.Signal(syscall.SIGKILL)
			<-done
		}
	}
	c.procs, c.stdins = nil, nil
}

// checkFloorFlags rejects a floor the run could only fail at after its
// ceilings: an unknown client, bare clients over workers (they run in this
// process) or with a renewal storm (they do not renew), floor flags
// without -floor.
func checkFloorFlags(f *stormFlags, fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !f.floor {
		if set["floor-client"] {
			return errors.New("-floor-client needs -floor")
		}
		if set["floor-replicate"] {
			return errors.New("-floor-replicate needs -floor")
		}
		return nil
	}
	switch f.floorClient {
	case "pact":
	case "bare":
		if f.workers > 1 {
			return errors.New("-floor-client bare runs every client in this process: leave -workers at 0 or 1")
		}
		if f.renew && set["renew"] {
			return errors.New("-floor-client bare has no renewal storm (bare clients do not renew): drop -renew")
		}
		f.renew, f.workers = false, 1
	default:
		return fmt.Errorf("-floor-client %q: want pact (pact-agent's own code) or bare (bareclient)", f.floorClient)
	}
	return nil
}

// floorMain is storm -floor: the ceilings, then the enrollment and renewal
// storms of the same agents against stub journals, and a report comparing
// the floor with the ceiling.
func floorMain(f stormFlags, dir string, cl *cleanup, out io.Writer) error {
	if f.workers < 1 {
		f.workers = 1
	}
	if f.floorClient == "" {
		f.floorClient = "pact"
	}
	logf("machine: %d CPUs (GOMAXPROCS %d), %s/%s, %s; working directory %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version(), dir)
	if b, err := exec.Command(filepath.Join(f.bin, "pact-journal"), "init", "--dir", dir, "--domain", "pact.local").CombinedOutput(); err != nil {
		return fmt.Errorf("pact-journal init: %w\n%s", err, b)
	}
	c, err := startFloorCluster(dir, f.journals, f.keyExchange, f.floorReplicate, strings.Fields(f.journalArgs), strings.Fields(f.journalEnv))
	if err != nil {
		return err
	}
	cl.add(c.stop)
	if f.floorReplicate {
		logf("%d stub journals serving on %s (the replicating floor: the ceiling's work behind gRPC and one Raft entry per certificate, floorraft.go)", f.journals, strings.Join(c.grpc, ","))
	} else {
		logf("%d stub journals serving on %s (the old floor: only the ceiling's work behind gRPC, nothing kept)", f.journals, strings.Join(c.grpc, ","))
	}
	caFile := filepath.Join(dir, "ca.pem")
	roots, _, err := pki.LoadCertPool(caFile)
	if err != nil {
		return err
	}
	kx, err := transport.ParseKeyExchange(f.keyExchange)
	if err != nil {
		return err
	}
	curve, err := probeCurve(c.grpc[0], roots, kx)
	if err != nil {
		return fmt.Errorf("TLS probe of stub journal 1: %w", err)
	}
	kit, err := newCeilingKit(dir, curve)
	if err != nil {
		return err
	}
	quiet := func() {
		if f.waitIdle > 0 {
			if share := waitIdle(f.waitIdle, 0.15, c.pids()); share > 0.15 {
				logf("the machine is busy: other processes use %.0f%% of it; going ahead after waiting %v", 100*share, f.waitIdle)
			}
		}
	}
	ceiling := func(renew bool) (ceilingResult, error) {
		quiet()
		probe := startProbe()
		res, err := kit.run(f.ceiling, renew)
		res.probe = probe.finish()
		return res, err
	}
	ceilE, err := ceiling(false)
	if err != nil {
		return fmt.Errorf("enroll ceiling: %w", err)
	}
	logf("enroll ceiling: %.0f/s, %.3f ms CPU each (journal's part %.3f ms, agent's part %.3f ms)", ceilE.perSec, ms(ceilE.cpuOp), ms(ceilE.serverOp), ms(ceilE.clientOp))
	var ceilR ceilingResult
	if f.renew {
		if ceilR, err = ceiling(true); err != nil {
			return fmt.Errorf("renew ceiling: %w", err)
		}
		logf("renew ceiling: %.0f/s, %.3f ms CPU each (journal's part %.3f ms, agent's part %.3f ms)", ceilR.perSec, ms(ceilR.cpuOp), ms(ceilR.serverOp), ms(ceilR.clientOp))
	}

	switch f.floorClient {
	case "pact":
	case "bare":
		if f.workers > 1 {
			return errors.New("-floor-client bare runs its clients in this process: -workers 1")
		}
		e, err := bareStorm(f, c, roots, kx)
		if err != nil {
			return err
		}
		var problems []string
		if e.failed > 0 {
			problems = append(problems, fmt.Sprintf("enroll storm: %d bare clients failed", e.failed))
		}
		if e.streamsOpen != f.agents {
			problems = append(problems, fmt.Sprintf("enroll storm: the stubs hold %d streams for %d clients", e.streamsOpen, f.agents))
		}
		floorReport(out, f, ceilE, e, ceilR, nil, floorRaftFigures{}, problems)
		if len(problems) > 0 {
			return fmt.Errorf("the final check failed: %s", strings.Join(problems, "; "))
		}
		return nil
	default:
		return fmt.Errorf("-floor-client %q: want pact or bare", f.floorClient)
	}

	if err := lowerPriority(f.loadgenNice); err != nil {
		return err
	}
	var lg loadgen
	if f.workers > 1 {
		pool, err := startWorkers(f, f.workers, c.grpc, caFile)
		if err != nil {
			return err
		}
		cl.add(pool.stop) // before the stubs stop
		lg = pool
	} else {
		life, stop := context.WithCancel(context.Background())
		agents := benchAgents(inventory("storm", f.agents), 0, f.agents)
		cl.add(func() { stop(); stopAgents(agents) })
		st, err := newStorm(f, c.grpc, caFile, agents, nil, life)
		if err != nil {
			return err
		}
		lg = &inProcess{s: st, profile: f.cpuprofile}
	}
	all := make([]int, f.agents)
	for i := range all {
		all[i] = i
	}
	var problems []string
	var rf floorRaftFigures
	one := func(kind stormKind, idxs []int) (*stormResult, []agentRecord, error) {
		quiet()
		term0, applied0, rerr := c.raftState()
		timings0 := c.timings()
		logf("%s storm against the stub journals: %d agents (pact-agent's own code, %s) arriving over %v", kind, len(idxs), processesName(f.workers), f.spread)
		var perf *exec.Cmd
		if f.perf {
			perf = startPerf(c.pids(), filepath.Join(dir, "perf-floor-"+kind.String()+".data"))
		}
		probe := startProbe()
		res, recs, err := lg.run(kind, idxs, c.pids())
		probeAt := probe.finish()
		if err != nil {
			if perf != nil {
				_ = perf.Process.Kill()
				_ = perf.Wait()
			}
			return nil, nil, err
		}
		res.probe = probeAt
		if perf != nil {
			finishPerf(perf, filepath.Join(dir, "perf-floor-"+kind.String()), res)
		}
		res.streamsOpen = c.settledStreams(len(idxs))
		res.timings = timingsDelta(timings0, c.timings())
		logf("%s storm: the stubs' connection timings (slot wait, TLS handshake): %s", kind, timingLine(res.timings))
		if term1, applied1, err := c.raftState(); err == nil && rerr == nil {
			el, n := int(term1-term0), int(applied1-applied0)
			if kind == stormEnroll {
				rf.elections, rf.entries = el, n
			} else {
				rf.renewElections, rf.renewEntries = el, n
			}
			if f.floorReplicate {
				logf("%s storm: the stubs committed %d Raft entries; %d elections", kind, n, el)
				if el > 0 {
					problems = append(problems, fmt.Sprintf("%s storm: %d elections among the stubs", kind, el))
				}
			}
		}
		logf("%s storm: %d streaming, %d failed (%d abandoned) in %.2fs (%.0f/s); attempts %v, %d answered busy; failed attempts %v; the stubs hold %d streams",
			kind, res.ok, res.failed, res.abandoned, res.wall.Seconds(), res.perSec, res.byOp, res.busy, res.failures, res.streamsOpen)
		if res.failed > 0 {
			problems = append(problems, fmt.Sprintf("%s storm: %d agents failed or were abandoned", kind, res.failed))
		}
		if res.streamsOpen != f.agents {
			problems = append(problems, fmt.Sprintf("%s storm: the stubs hold %d streams for %d agents", kind, res.streamsOpen, f.agents))
		}
		return res, recs, nil
	}
	e, recs, err := one(stormEnroll, all)
	if err != nil {
		return err
	}
	var r *stormResult
	if f.renew {
		var enrolled []int
		for _, rec := range recs {
			if !rec.Failed && rec.Serial != "" {
				enrolled = append(enrolled, rec.Idx)
			}
		}
		if r, _, err = one(stormRenew, enrolled); err != nil {
			return err
		}
	}
	floorReport(out, f, ceilE, e, ceilR, r, rf, problems)
	if len(problems) > 0 {
		return fmt.Errorf("the final check failed: %s", strings.Join(problems, "; "))
	}
	return nil
}

// floorRaftFigures are the replicating floor's Raft figures of each storm:
// the entries the stubs committed and the elections among them.
type floorRaftFigures struct {
	entries, elections, renewEntries, renewElections int
}

func floorReport(out io.Writer, f stormFlags, ceilE ceilingResult, e *stormResult, ceilR ceilingResult, r *stormResult, rf floorRaftFigures, problems []string) {
	clients := fmt.Sprintf("pact-agent's own code, %s", processesName(f.workers))
	if f.floorClient == "bare" {
		clients = "bare gRPC clients (bareclient), in one load-generator process"
	}
	kind := "the replicating floor: %d agents (%s) against %d stub journals (the ceiling's work behind gRPC and one Raft entry per certificate, floorraft.go)"
	if !f.floorReplicate {
		kind = "the old floor: %d agents (%s) against %d stub journals (only the ceiling's work behind gRPC, nothing kept, floor.go)"
	}
	fmt.Fprintf(out, "\npact boot storm, "+kind+", %d CPUs, agents arrive over %v\n\n",
		f.agents, clients, f.journals, runtime.NumCPU(), f.spread)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "storm\tstreaming\tfailed\tseconds\tper s\tattempts\tCPU ms/op\tstubs ms/op\tagents ms/op\tceiling/s\tceiling CPU ms/op\tratio\tCPU ratio\tjournal ratio\tagent ratio\tprobe slowdown\t")
	row := func(name string, s *stormResult, c ceilingResult) {
		fmt.Fprintf(w, "%s\t%d\t%d\t%.2f\t%.0f\t%d\t%.3f\t%.3f\t%.3f\t%.0f\t%.3f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n",
			name, s.ok, s.failed, s.wall.Seconds(), s.perSec, s.attempts, ms(s.cpuPerOp()), ms(s.journalCPUPerOp()), ms(s.genCPUPerOp()),
			c.perSec, ms(c.cpuOp), s.perSec/c.perSec, cpuRatio(c, s), ratio(c.serverOp, s.journalCPUPerOp()), ratio(c.clientOp, s.genCPUPerOp()), slowdown(c, s))
	}
	row("enroll", e, ceilE)
	if r != nil {
		row("renew", r, ceilR)
	}
	w.Flush()
	pass := len(problems) == 0
	reason := "every agent streaming, one stream per agent held by the stubs, after each storm"
	if !pass {
		reason = strings.Join(problems, "; ")
	}
	fmt.Fprintf(out, "\nfinal check: %s: %s\n\n", map[bool]string{true: "PASS", false: "FAIL"}[pass], reason)
	line := map[string]any{
		"bench": "storm-floor", "floor_client": f.floorClient, "floor_replicates": f.floorReplicate,
		"raft_entries": rf.entries, "leader_changes": rf.elections, "journal_timings": e.timings, "agents": f.agents, "journals": f.journals, "cpus": runtime.NumCPU(), "spread_s": f.spread.Seconds(),
		"pass": pass, "reason": reason,
		"seconds_to_all_streaming": round(e.wall.Seconds(), 3), "failed": e.failed, "attempts": e.attempts,
		"ceiling_per_s": round(ceilE.perSec, 3), "ratio_to_ceiling": round(e.perSec/ceilE.perSec, 3), "cpu_ratio_to_ceiling": round(cpuRatio(ceilE, e), 3),
		"cpu_ms_per_agent": ms(e.cpuPerOp()), "journal_cpu_ms_per_agent": ms(e.journalCPUPerOp()), "loadgen_cpu_ms_per_agent": ms(e.genCPUPerOp()),
		"ceiling_journal_cpu_ms": ms(ceilE.serverOp), "ceiling_agent_cpu_ms": ms(ceilE.clientOp),
		"journal_cpu_ratio": round(ratio(ceilE.serverOp, e.journalCPUPerOp()), 3), "agent_cpu_ratio": round(ratio(ceilE.clientOp, e.genCPUPerOp()), 3),
		"probe_slowdown": round(slowdown(ceilE, e), 3),
	}
	if r != nil {
		line["renew_seconds"] = round(r.wall.Seconds(), 3)
		line["renew_failed"] = r.failed
		line["renew_raft_entries"] = rf.renewEntries
		line["renew_journal_timings"] = r.timings
		line["renew_leader_changes"] = rf.renewElections
		// The same names as the storm's, so that pair (pair.go) can set
		// one beside the other.
		line["cpu_ms_per_renew"] = round(ms(r.cpuPerOp()), 3)
		line["journal_cpu_ms_per_renew"] = round(ms(r.journalCPUPerOp()), 3)
		line["loadgen_cpu_ms_per_renew"] = round(ms(r.genCPUPerOp()), 3)
		line["renew_ratio_to_ceiling"] = round(r.perSec/ceilR.perSec, 3)
		line["renew_cpu_ratio_to_ceiling"] = round(cpuRatio(ceilR, r), 3)
		line["renew_journal_cpu_ratio"] = round(ratio(ceilR.serverOp, r.journalCPUPerOp()), 3)
		line["renew_agent_cpu_ratio"] = round(ratio(ceilR.clientOp, r.genCPUPerOp()), 3)
		line["renew_probe_slowdown"] = round(slowdown(ceilR, r), 3)
	}
	b, _ := json.Marshal(line)
	fmt.Fprintln(out, string(b))
}

// slowdown is the speed probe's median during the storm over its median
// during the ceiling (probe.go); 0 when either is missing.
func slowdown(c ceilingResult, s *stormResult) float64 {
	if c.probe <= 0 || s.probe <= 0 {
		return 0
	}
	return float64(s.probe) / float64(c.probe)
}

// bareStorm is the enrollment storm of the floor with bare gRPC clients
// (bareclient) instead of pact-agent: neither side is pact.
func bareStorm(f stormFlags, c *floorCluster, roots *x509.CertPool, kx transport.KeyExchange) (*stormResult, error) {
	nodes := inventory("storm", f.agents)
	cfg := bareclient.DefaultConfig()
	cfg.Addrs, cfg.Roots, cfg.KeyExchange, cfg.Agents, cfg.Spread = c.grpc, roots, kx, f.agents, f.spread
	cfg.Deadline = f.deadline
	cfg.Hardware = func(i int) *pactv1.HardwareIdentity {
		return &pactv1.HardwareIdentity{Macs: []string{nodes[i].mac}, BmcSerial: nodes[i].bmc}
	}
	if !f.oneSource {
		cfg.Source = sourceIP
	}
	if f.waitIdle > 0 {
		waitIdle(f.waitIdle, 0.15, c.pids())
	}
	logf("enroll storm against the stub journals: %d bare gRPC clients arriving over %v", f.agents, f.spread)
	m := startMeters(c.pids())
	probe := startProbe()
	br, err := bareclient.Run(cfg)
	if err != nil {
		probe.finish()
		return nil, err
	}
	defer br.Close()
	res := m.stop(stormEnroll, 0, 0)
	res.probe = probe.finish()
	res.agents, res.ok, res.failed, res.attempts, res.wall, res.lat = f.agents, br.OK, br.Failed, br.Attempts, br.Wall, br.Latencies
	if res.wall > 0 {
		res.perSec = float64(res.ok) / res.wall.Seconds()
	}
	res.streamsOpen = c.settledStreams(f.agents)
	logf("enroll storm: %d streaming, %d failed in %.2fs (%.0f/s); %d attempts; the stubs hold %d streams", res.ok, res.failed, res.wall.Seconds(), res.perSec, res.attempts, res.streamsOpen)
	if br.FirstError != nil {
		logf("  a failure: %v", br.FirstError)
	}
	return res, nil
}
