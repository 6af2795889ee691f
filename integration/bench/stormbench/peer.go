package main

// peer (make bench-peer) sets pact beside a peer CA: the same number of
// certificates issued by pact's three journals (Enroll) and by step-ca
// (POST /1.0/sign with a fresh one-time token), each over a new TLS 1.3
// connection per certificate from a fixed number of concurrent clients,
// and the servers' CPU per certificate of each (pact's three journals
// summed: they replicate every enrollment), from /proc. The runs
// alternate, pact then step-ca, for every client count and round, so
// that both see the same machine.
//
// With -floor (the default) a third side runs in each round after the
// other two: the replicating floor's stub journals (floor.go,
// floorraft.go), which do only what any journal of this design must for
// an Enroll (the TLS handshake, ParseCSR and SignAgent behind gRPC, one
// Raft entry committed on three nodes, a follower's forwarded to the
// leader). Its CPU per certificate over step-ca's is the least pact's
// ratio could be; pact's over the floor's is what pact's own code adds
// to a certificate.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/transport"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

type peerFlags struct {
	bin, stepCA, stepCADB string
	dir                   string
	keep                  bool
	certs, rounds         int
	journals              int
	clients               []int
	callTimeout, deadline time.Duration
	waitIdle              time.Duration
	// floor: a third side, the floor's stub journals; floorReplicate:
	// they commit one Raft entry per certificate (the replicating floor),
	// or keep nothing (the old floor).
	floor, floorReplicate bool
}

func runPeer(args []string) int {
	var f peerFlags
	fs := flag.NewFlagSet("stormbench peer", flag.ContinueOnError)
	fs.StringVar(&f.bin, "bin", "bin", "directory holding pact-journal and pact (make build)")
	fs.StringVar(&f.stepCA, "stepca", "", "the step-ca binary (make bench-peer installs the pinned one into .tools/)")
	fs.StringVar(&f.stepCADB, "stepca-db", "badgerv2", "step-ca's database: badgerv2 (what step ca init configures), bbolt, or none (in memory)")
	fs.StringVar(&f.dir, "dir", "", "working directory (default: a new temporary directory, removed at the end unless -keep)")
	fs.BoolVar(&f.keep, "keep", false, "keep the working directory")
	fs.IntVar(&f.certs, "certs", 10000, "certificates per run (each side issues this many in each run)")
	fs.IntVar(&f.rounds, "rounds", 3, "rounds; each runs pact then step-ca for every client count")
	fs.IntVar(&f.journals, "journals", 3, "journals in pact's quorum")
	clients := fs.String("clients", "32,256", "concurrent clients, comma-separated: one pact run and one step-ca run per count and round")
	fs.DurationVar(&f.callTimeout, "call-timeout", 15*time.Second, "bound on one certificate's request (a failed one is tried again, up to 5 times)")
	fs.DurationVar(&f.deadline, "deadline", 10*time.Minute, "give up on a run after this long")
	fs.DurationVar(&f.waitIdle, "wait-idle", 0, "before each run, wait up to this long for a second in which other processes use less than 15% of the machine")
	fs.BoolVar(&f.floor, "floor", true, "a third side in every round: the replicating floor's stub journals (the TLS handshake, ParseCSR, SignAgent and one Raft entry on three nodes behind gRPC; floor.go), the least any journal of this design spends on a certificate: its ratio to step-ca is the least pact's could be")
	fs.BoolVar(&f.floorReplicate, "floor-replicate", true, "with -floor, the stubs commit one Raft entry per certificate on three nodes; false: the old floor, which keeps nothing (what the replication costs, beside the replicating floor's run)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if f.clients, err = parseClients(*clients); err != nil {
		fmt.Fprintf(os.Stderr, "stormbench: -clients: %v\n", err)
		return 2
	}
	if f.stepCA == "" || f.certs < 1 || f.rounds < 1 || f.journals < 1 {
		fmt.Fprintln(os.Stderr, "stormbench: peer needs -stepca, and positive -certs, -rounds and -journals")
		return 2
	}
	return runIn(f.dir, f.keep, func(dir string, cl *cleanup) error {
		return peerMain(f, dir, cl, os.Stdout)
	})
}

func parseClients(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want positive counts, comma-separated", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// certIssuer is one side of the comparison. Request i of a run is
// certificate base+i of the whole benchmark.
type certIssuer interface {
	serverPIDs() []int
	csr(i int) ([]byte, error)
	issue(ctx context.Context, i int, csr []byte) error
}

// pactIssuer enrolls registered node i (Enroll on a new connection to a
// journal picked at random, as pact-agent does).
type pactIssuer struct {
	c     *cluster
	nodes []benchNode
	kx    transport.KeyExchange
}

func (p *pactIssuer) serverPIDs() []int { return p.c.pids() }

func (p *pactIssuer) csr(int) ([]byte, error) { return newCSR(&x509.CertificateRequest{}) }

func (p *pactIssuer) issue(ctx context.Context, i int, csr []byte) error {
	return enrollOnNewConn(ctx, p.c.addrs(), p.c.roots, p.kx, i, p.nodes[i], csr)
}

// enrollOnNewConn makes node n's Enroll (certificate i) on a new TLS
// connection to one of addrs, picked at random as pact-agent picks.
func enrollOnNewConn(ctx context.Context, addrs []string, roots *x509.CertPool, kx transport.KeyExchange, i int, n benchNode, csr []byte) error {
	tc := kx.Apply(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots})
	opts := append(transport.ClientOptions(), grpc.WithTransportCredentials(credentials.NewTLS(tc)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialFrom(sourceIP(i))(ctx, "tcp", addr)
		}))
	conn, err := grpc.NewClient("passthrough:///"+addrs[mrand.IntN(len(addrs))], opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := pactv1.NewEnrollmentServiceClient(conn).Enroll(ctx, &pactv1.EnrollRequest{
		Hardware: &pactv1.HardwareIdentity{Macs: []string{n.mac}, BmcSerial: n.bmc}, CsrDer: csr})
	if err != nil {
		return err
	}
	if len(resp.CertChainDer) == 0 {
		return errors.New("Enroll: no certificate")
	}
	return nil
}

// floorIssuer enrolls node i with the floor's stubs (the replicating
// floor, or the old one with -floor-replicate=false), as pactIssuer does
// with pact's journals (the stubs name a node by its BMC serial and keep
// no registry).
type floorIssuer struct {
	c     *floorCluster
	roots *x509.CertPool
	nodes []benchNode
	kx    transport.KeyExchange
}

func (f *floorIssuer) serverPIDs() []int { return f.c.pids() }

func (f *floorIssuer) csr(int) ([]byte, error) { return newCSR(&x509.CertificateRequest{}) }

func (f *floorIssuer) issue(ctx context.Context, i int, csr []byte) error {
	return enrollOnNewConn(ctx, f.c.grpc, f.roots, f.kx, i, f.nodes[i], csr)
}

// stepCAIssuer asks step-ca for certificate i, named peer-NNNNNN, over
// HTTP/1.1 on a new TLS connection (one request per connection: HTTP/2
// would add framing and nothing else).
type stepCAIssuer struct {
	s  *stepCA
	kx transport.KeyExchange
}

func (s *stepCAIssuer) serverPIDs() []int { return []int{s.s.pid()} }

func stepCASubject(i int) string { return fmt.Sprintf("peer-%06d", i+1) }

func (s *stepCAIssuer) csr(i int) ([]byte, error) {
	name := stepCASubject(i)
	return newCSR(&x509.CertificateRequest{Subject: pkix.Name{CommonName: name}, DNSNames: []string{name}})
}

func (s *stepCAIssuer) issue(ctx context.Context, i int, csr []byte) error {
	tr := &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   s.kx.Apply(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: s.s.roots}),
		DialContext:       dialFrom(sourceIP(i)),
	}
	defer tr.CloseIdleConnections()
	cert, err := s.s.sign(ctx, &http.Client{Transport: tr}, stepCASubject(i), csr)
	if err != nil {
		return err
	}
	if cert.Subject.CommonName != stepCASubject(i) {
		return fmt.Errorf("step-ca issued %q for %q", cert.Subject.CommonName, stepCASubject(i))
	}
	return nil
}

// dialFrom dials from a loopback address of the certificate's own, as
// each node has its own address (and pact's per-source limits apply per
// node).
func dialFrom(src net.IP) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, _, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
		return d.DialContext(ctx, "tcp", addr)
	}
}

func newCSR(tmpl *x509.CertificateRequest) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return x509.CreateCertificateRequest(rand.Reader, tmpl, key)
}

// certRun is what one side did in one run.
type certRun struct {
	Seconds             float64 `json:"seconds"`
	CertsPerS           float64 `json:"certs_per_s"`
	OK                  int     `json:"certs"`
	Failed              int     `json:"failed"`
	Attempts            int     `json:"attempts"`
	ServerCPUMsPerCert  float64 `json:"server_cpu_ms_per_cert"`
	LoadgenCPUMsPerCert float64 `json:"loadgen_cpu_ms_per_cert"`
	OtherCPUShare       float64 `json:"other_cpu_share"`
	FirstError          string  `json:"first_error,omitempty"`
}

const peerTries = 5

// issueCerts has clients workers issue n certificates (base to base+n-1)
// one after the other each, and measures the servers' CPU meanwhile.
func issueCerts(iss certIssuer, base, n, clients int, callTimeout, deadline time.Duration) certRun {
	var (
		next                  atomic.Int64
		ok, failed, attempts  atomic.Int64
		firstErr              error
		errOnce               sync.Once
		wg                    sync.WaitGroup
		ctx, cancel           = context.WithTimeout(context.Background(), deadline)
		pids                  = iss.serverPIDs()
		cpu, machine, started = startCPU(pids), startMachine(), time.Now()
	)
	defer cancel()
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				csr, err := iss.csr(base + i)
				for try := 1; err == nil; try++ {
					attempts.Add(1)
					cctx, ccancel := context.WithTimeout(ctx, callTimeout)
					err = iss.issue(cctx, base+i, csr)
					ccancel()
					if err == nil {
						ok.Add(1)
						break
					}
					if try == peerTries || ctx.Err() != nil {
						break
					}
					err = nil
					time.Sleep(time.Duration(try) * 100 * time.Millisecond)
				}
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { firstErr = err })
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(started)
	procs, self, _ := cpu.stop()
	var server time.Duration
	for _, p := range procs {
		server += p
	}
	r := certRun{Seconds: round(wall.Seconds(), 3), OK: int(ok.Load()), Failed: n - int(ok.Load()), Attempts: int(attempts.Load()),
		OtherCPUShare: round(machine.others(server+self), 3)}
	if r.OK > 0 {
		r.CertsPerS = round(float64(r.OK)/wall.Seconds(), 1)
		r.ServerCPUMsPerCert = round(ms(server)/float64(r.OK), 3)
		r.LoadgenCPUMsPerCert = round(ms(self)/float64(r.OK), 3)
	}
	if firstErr != nil {
		r.FirstError = firstErr.Error()
	}
	return r
}

// peerRun is one client count's pact run and step-ca run of one round.
type peerRun struct {
	Round   int     `json:"round"`
	Clients int     `json:"clients"`
	Pact    certRun `json:"pact"`
	StepCA  certRun `json:"stepca"`
	// CPURatio is pact's server CPU per certificate over step-ca's;
	// ThroughputRatio pact's certificates per second over step-ca's.
	CPURatio        float64 `json:"cpu_ratio"`
	ThroughputRatio float64 `json:"throughput_ratio"`
	// Floor is the floor's run (-floor); FloorCPURatio its
	// server CPU per certificate over step-ca's, PactOverFloorCPU pact's
	// over the floor's.
	Floor            *certRun `json:"floor,omitempty"`
	FloorCPURatio    float64  `json:"floor_cpu_ratio,omitempty"`
	PactOverFloorCPU float64  `json:"pact_over_floor_cpu,omitempty"`
}

// peerByClients is one client count's figures over the rounds.
type peerByClients struct {
	Clients          int     `json:"clients"`
	PactCPUPerCert   *spread `json:"pact_cpu_ms_per_cert"`
	StepCACPUPerCert *spread `json:"stepca_cpu_ms_per_cert"`
	CPURatio         *spread `json:"cpu_ratio"`
	ThroughputRatio  *spread `json:"throughput_ratio"`
	// With -floor: the floor's CPU per certificate, its ratio to
	// step-ca's, and pact's to the floor's.
	FloorCPUPerCert  *spread `json:"floor_cpu_ms_per_cert,omitempty"`
	FloorCPURatio    *spread `json:"floor_cpu_ratio,omitempty"`
	PactOverFloorCPU *spread `json:"pact_over_floor_cpu,omitempty"`
}

type peerSummary struct {
	Bench       string `json:"bench"`
	Certs       int    `json:"certs"`
	Rounds      int    `json:"rounds"`
	Journals    int    `json:"journals"`
	KeyExchange string `json:"key_exchange"`
	StepCA      string `json:"stepca_version"`
	StepCADB    string `json:"stepca_db"`
	Floor       bool   `json:"floor"`
	// FloorReplicates: the floor's stubs committed one Raft entry per
	// certificate (false: the old floor, nothing kept).
	FloorReplicates bool            `json:"floor_replicates"`
	CPUs            int             `json:"cpus"`
	Pass            bool            `json:"pass"`
	Reason          string          `json:"reason"`
	ByClients       []peerByClients `json:"by_clients"`
	Runs            []peerRun       `json:"runs"`
}

// summarizePeer takes each client count's spreads over its rounds, of
// the runs in which both sides issued every certificate.
func summarizePeer(runs []peerRun, certs int) (by []peerByClients, problems []string) {
	var counts []int
	for i := range runs {
		r := &runs[i]
		r.CPURatio = over(r.Pact.ServerCPUMsPerCert, r.StepCA.ServerCPUMsPerCert)
		r.ThroughputRatio = over(r.Pact.CertsPerS, r.StepCA.CertsPerS)
		sides := []struct {
			name string
			run  certRun
		}{{"pact", r.Pact}, {"step-ca", r.StepCA}}
		if r.Floor != nil {
			r.FloorCPURatio = over(r.Floor.ServerCPUMsPerCert, r.StepCA.ServerCPUMsPerCert)
			r.PactOverFloorCPU = over(r.Pact.ServerCPUMsPerCert, r.Floor.ServerCPUMsPerCert)
			sides = append(sides, struct {
				name string
				run  certRun
			}{"the floor", *r.Floor})
		}
		for _, side := range sides {
			if side.run.OK != certs {
				problems = append(problems, fmt.Sprintf("round %d, %d clients: %s issued %d of %d (%s)", r.Round, r.Clients, side.name, side.run.OK, certs, side.run.FirstError))
			}
		}
		if !slices.Contains(counts, r.Clients) {
			counts = append(counts, r.Clients)
		}
	}
	for _, c := range counts {
		var good, goodFloor []peerRun
		for _, r := range runs {
			if r.Clients == c && r.Pact.OK == certs && r.StepCA.OK == certs {
				good = append(good, r)
				if r.Floor != nil && r.Floor.OK == certs {
					goodFloor = append(goodFloor, r)
				}
			}
		}
		of := func(runs []peerRun, get func(peerRun) float64) *spread {
			var vs []float64
			for _, r := range runs {
				vs = append(vs, get(r))
			}
			return spreadOfValues(vs)
		}
		by = append(by, peerByClients{Clients: c,
			PactCPUPerCert:   of(good, func(r peerRun) float64 { return r.Pact.ServerCPUMsPerCert }),
			StepCACPUPerCert: of(good, func(r peerRun) float64 { return r.StepCA.ServerCPUMsPerCert }),
			CPURatio:         of(good, func(r peerRun) float64 { return r.CPURatio }),
			ThroughputRatio:  of(good, func(r peerRun) float64 { return r.ThroughputRatio }),
			FloorCPUPerCert:  of(goodFloor, func(r peerRun) float64 { return r.Floor.ServerCPUMsPerCert }),
			FloorCPURatio:    of(goodFloor, func(r peerRun) float64 { return r.FloorCPURatio }),
			PactOverFloorCPU: of(goodFloor, func(r peerRun) float64 { return r.PactOverFloorCPU }),
		})
	}
	return by, problems
}

func peerMain(f peerFlags, dir string, cl *cleanup, out io.Writer) error {
	logf("machine: %d CPUs (GOMAXPROCS %d), %s; working directory %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), dir)
	// A certificate here is one Enroll: its node never opens a stream, so
	// with the default heartbeat timeout (5 min) the liveness sweep marks
	// the first rounds' nodes Inactive while later rounds run, spending
	// journal CPU on Raft writes that belong to no certificate and failing
	// the final check (measured: 35,558 of 60,000 active after 3 rounds).
	c, err := newCluster(f.bin, dir, f.journals, []string{"--heartbeat-timeout", "24h"}, nil)
	if err != nil {
		return err
	}
	cl.add(c.stopAll)
	if err := c.startAll(90 * time.Second); err != nil {
		return err
	}
	runs := f.rounds * len(f.clients)
	nodes := inventory("peer", f.certs*runs)
	took, err := c.registerBatch(nodes)
	if err != nil {
		return err
	}
	logf("%d journals serving on %s; registered %d nodes (one per pact certificate) in %.2fs", f.journals, strings.Join(c.addrs(), ","), len(nodes), took.Seconds())
	sca, err := startStepCA(f.stepCA, filepath.Join(dir, "step-ca"), f.stepCADB)
	if err != nil {
		return err
	}
	cl.add(sca.stop)
	logf("%s serving on %s (JWK provisioner, database %s)", sca.version, sca.addr, f.stepCADB)

	kx := transport.Classical
	pact := &pactIssuer{c: c, nodes: nodes, kx: kx}
	step := &stepCAIssuer{s: sca, kx: kx}
	servers := append(c.pids(), sca.pid())
	var floor *floorIssuer
	if f.floor {
		if floor, err = startPeerFloor(f, filepath.Join(dir, "floor"), nodes, kx, cl); err != nil {
			return err
		}
		servers = append(servers, floor.serverPIDs()...)
	}
	quiet := func() {
		if f.waitIdle > 0 {
			waitIdle(f.waitIdle, 0.15, servers)
		}
	}
	var results []peerRun
	base := 0
	for round := 1; round <= f.rounds; round++ {
		for _, clients := range f.clients {
			r := peerRun{Round: round, Clients: clients}
			quiet()
			r.Pact = issueCerts(pact, base, f.certs, clients, f.callTimeout, f.deadline)
			logf("round %d, %d clients: pact issued %d in %.2fs (%.0f/s), journals' CPU %.3f ms per certificate; %d failed, %d attempts",
				round, clients, r.Pact.OK, r.Pact.Seconds, r.Pact.CertsPerS, r.Pact.ServerCPUMsPerCert, r.Pact.Failed, r.Pact.Attempts)
			quiet()
			r.StepCA = issueCerts(step, base, f.certs, clients, f.callTimeout, f.deadline)
			logf("round %d, %d clients: step-ca issued %d in %.2fs (%.0f/s), its CPU %.3f ms per certificate; %d failed, %d attempts",
				round, clients, r.StepCA.OK, r.StepCA.Seconds, r.StepCA.CertsPerS, r.StepCA.ServerCPUMsPerCert, r.StepCA.Failed, r.StepCA.Attempts)
			if floor != nil {
				quiet()
				fr := issueCerts(floor, base, f.certs, clients, f.callTimeout, f.deadline)
				r.Floor = &fr
				logf("round %d, %d clients: the floor issued %d in %.2fs (%.0f/s), its stubs' CPU %.3f ms per certificate; %d failed, %d attempts",
					round, clients, fr.OK, fr.Seconds, fr.CertsPerS, fr.ServerCPUMsPerCert, fr.Failed, fr.Attempts)
			}
			base += f.certs
			results = append(results, r)
		}
	}
	by, problems := summarizePeer(results, f.certs)
	// The journals confirm every enrollment: every node registered for a
	// pact certificate is now active.
	counts, _, err := c.stateCounts(0, nodes[len(nodes)-1].id)
	if err != nil {
		problems = append(problems, fmt.Sprintf("pact node list: %v", err))
	} else if counts["active"] != len(nodes) {
		problems = append(problems, fmt.Sprintf("the journals list %d of %d nodes active", counts["active"], len(nodes)))
	}
	sum := peerSummary{Bench: "peer", Certs: f.certs, Rounds: f.rounds, Journals: f.journals, KeyExchange: "X25519", StepCA: sca.version, StepCADB: f.stepCADB,
		Floor: f.floor, FloorReplicates: f.floor && f.floorReplicate, CPUs: runtime.NumCPU(), Pass: len(problems) == 0, Reason: "every certificate issued on every side; every pact node active", ByClients: by, Runs: results}
	if !sum.Pass {
		sum.Reason = strings.Join(problems, "; ")
	}
	peerReport(out, sum)
	if !sum.Pass {
		return fmt.Errorf("the final check failed: %s", sum.Reason)
	}
	return nil
}

// startPeerFloor starts the floor's stub journals in dir (replicating
// unless -floor-replicate=false) under a domain root of their own, for
// the peer's third side.
func startPeerFloor(f peerFlags, dir string, nodes []benchNode, kx transport.KeyExchange, cl *cleanup) (*floorIssuer, error) {
	if b, err := exec.Command(filepath.Join(f.bin, "pact-journal"), "init", "--dir", dir, "--domain", "pact.local").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pact-journal init (the floor's root): %w\n%s", err, b)
	}
	fc, err := startFloorCluster(dir, f.journals, string(kx), f.floorReplicate, nil, nil)
	if err != nil {
		return nil, err
	}
	cl.add(fc.stop)
	roots, _, err := pki.LoadCertPool(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	what := "the replicating floor (one Raft entry per certificate)"
	if !f.floorReplicate {
		what = "the old floor (nothing kept)"
	}
	logf("%d stub journals of %s serving on %s", f.journals, what, strings.Join(fc.grpc, ","))
	return &floorIssuer{c: fc, roots: roots, nodes: nodes, kx: kx}, nil
}

func peerReport(out io.Writer, sum peerSummary) {
	fmt.Fprintf(out, "\npact against step-ca: %d certificates per run, each over a new TLS 1.3 connection (%s); pact: %d journals (CPU summed); %s, database %s; %d CPUs\n\n",
		sum.Certs, sum.KeyExchange, sum.Journals, sum.StepCA, sum.StepCADB, sum.CPUs)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "round\tclients\tpact s\tpact/s\tpact server ms/cert\tstep-ca s\tstep-ca/s\tstep-ca server ms/cert\tCPU ratio\tthroughput ratio\tothers (pact, step-ca)\t")
	for _, r := range sum.Runs {
		fmt.Fprintf(w, "%d\t%d\t%.2f\t%.0f\t%.3f\t%.2f\t%.0f\t%.3f\t%.2f\t%.2f\t%.0f%%, %.0f%%\t\n", r.Round, r.Clients, r.Pact.Seconds, r.Pact.CertsPerS, r.Pact.ServerCPUMsPerCert,
			r.StepCA.Seconds, r.StepCA.CertsPerS, r.StepCA.ServerCPUMsPerCert, r.CPURatio, r.ThroughputRatio, 100*r.Pact.OtherCPUShare, 100*r.StepCA.OtherCPUShare)
	}
	w.Flush()
	if sum.Floor {
		what := "the replicating floor (stub journals: TLS, ParseCSR, SignAgent, one Raft entry on three nodes"
		if !sum.FloorReplicates {
			what = "the old floor (stub journals: TLS, ParseCSR, SignAgent, nothing kept"
		}
		fmt.Fprintf(out, "\n%s; %d, CPU summed) in the same rounds\n\n", what, sum.Journals)
		w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "round\tclients\tfloor s\tfloor/s\tfloor server ms/cert\tfloor over step-ca\tpact over floor\tothers\t")
		for _, r := range sum.Runs {
			if r.Floor != nil {
				fmt.Fprintf(w, "%d\t%d\t%.2f\t%.0f\t%.3f\t%.2f\t%.2f\t%.0f%%\t\n", r.Round, r.Clients, r.Floor.Seconds, r.Floor.CertsPerS, r.Floor.ServerCPUMsPerCert,
					r.FloorCPURatio, r.PactOverFloorCPU, 100*r.Floor.OtherCPUShare)
			}
		}
		w.Flush()
	}
	fmt.Fprintln(out)
	for _, b := range sum.ByClients {
		if b.CPURatio != nil {
			fmt.Fprintf(out, "%d clients, median over the rounds: pact %.3f ms, step-ca %.3f ms of server CPU per certificate: ratio %.2f (throughput ratio %.2f)\n",
				b.Clients, b.PactCPUPerCert.Median, b.StepCACPUPerCert.Median, b.CPURatio.Median, b.ThroughputRatio.Median)
		}
		if b.FloorCPURatio != nil {
			meaning := "the least pact's ratio could be"
			if !sum.FloorReplicates {
				meaning = "nothing replicated: the TLS handshake, gRPC and signing alone"
			}
			fmt.Fprintf(out, "%d clients, median over the rounds: the floor %.3f ms per certificate, %.2f of step-ca's (%s); pact %.2f of the floor's\n",
				b.Clients, b.FloorCPUPerCert.Median, b.FloorCPURatio.Median, meaning, b.PactOverFloorCPU.Median)
		}
	}
	fmt.Fprintf(out, "\nfinal check: %s: %s\n\n", map[bool]string{true: "PASS", false: "FAIL"}[sum.Pass], sum.Reason)
	b, _ := json.Marshal(sum)
	fmt.Fprintln(out, string(b))
}
